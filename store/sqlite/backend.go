// Package sqlite is Orrery's embedded default store: the whole persistence
// plane (store.Store) in one SQLite file, through modernc.org/sqlite (pure
// Go, no cgo) and database/sql.
//
// Store is store.Front over this package's backend: the front validates
// every call and answers the batch-of-one forms (Acquire, Renew, Release,
// Complete) through the batch forms, so backend keeps storage only. It
// reads rows inside its transaction, asks store/internal/contract for the
// contract's decisions, and writes. Its files follow the protocol layout
// every backend shares (journal.go, commit.go, leases.go, workers.go,
// inbox.go, effects.go, timers.go, fabric.go, snapshots.go, worlds.go,
// watermarks.go, dedupe.go, views.go, watch.go, errors.go), plus SQLite's
// own: schema.go, groupcommit.go, queue.go (the claim/settle/reap queue
// effects and timers share) and checkpoint.go.
//
// What it owns:
//
//   - the file and its schema: journal_mode=WAL, synchronous=FULL unless
//     WithSynchronous relaxes it, foreign keys on, a busy timeout, and the
//     embedded, versioned migrations (schema_version) applied at Open;
//   - group commit (groupcommit.go): one committer goroutine owns the only write connection.
//     Every mutation is a request on a queue; the committer takes everything
//     queued (up to WithMaxBatch requests), runs each request inside its own
//     savepoint of one BEGIN IMMEDIATE … COMMIT, and answers every caller
//     after that single commit (one fsync for the whole group). A request
//     that fails (ErrHeadMismatch, ErrFenced, …) rolls back to its savepoint
//     and never disturbs its neighbours;
//   - fencing: every world mutation reads the world's lease inside the same
//     transaction as its write and asks contract.Fence (the one fence
//     predicate of every backend) before it writes;
//   - the world cycle (commit.go): Commit is one request, so a cycle's
//     cursor move, journal entries, intents, timers and snapshot share one
//     savepoint; the single-purpose writes (DrainToJournal, Publish,
//     Schedule, CancelTimer, PutSnapshot) are that request with a partial
//     batch;
//   - immutability of the journal: triggers abort every UPDATE of the events
//     table and every DELETE of it that compaction has not opened a gate for
//     (see Compact);
//   - the store clock (WithClock): persistedAt, lease expiries, claim
//     deadlines, due times and dedupe completion all read it, never a
//     caller's clock. Times are stored as int64 Unix nanoseconds, exactly:
//     the front (store/validate.go) keeps every time a caller hands in
//     within that range, so nothing is ever clamped.
//
// Reads go to a separate pool of query-only connections (with their
// prepared statements): WAL lets them run beside the writer, and since a
// writer answers only after COMMIT, a caller always reads its own writes.
// WAL checkpoints run off the commit path (checkpoint.go).
//
// Another process may read the file, and even write it (the committer
// notices through PRAGMA data_version and drops what it caches), but Watch
// hints only cover this Store's own writes, and the throughput is the
// group commit's only when one Store owns the file.
//
// What it never does: interpret world state or payloads, or order by
// timestamps.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/groupcommit"
	"github.com/orrery-run/orrery/store/internal/hub"
)

// Synchronous is SQLite's synchronous setting for the write connection.
type Synchronous string

const (
	// SyncFull fsyncs the WAL on every commit: a commit that returned is on
	// disk and survives power loss. The default.
	SyncFull Synchronous = "FULL"
	// SyncNormal fsyncs only at checkpoints: a crash of the process loses
	// nothing, a power loss may lose the last commits (never corrupts). Lost
	// commits may include lease epochs, so a relaxed store must not be
	// shared with workers on other machines after a power loss.
	SyncNormal Synchronous = "NORMAL"
	// SyncOff never fsyncs. For tests and throwaway stores only.
	SyncOff Synchronous = "OFF"
)

// Defaults of the options.
const (
	DefaultMaxBatch    = 256
	DefaultReaders     = 4
	DefaultBusyTimeout = 5 * time.Second
)

type config struct {
	clock       func() time.Time
	retention   time.Duration
	synchronous Synchronous
	maxBatch    int
	readers     int
	busyTimeout time.Duration
	walRestart  int // tests only: walRestartFrames (checkpoint.go)
}

// Option configures Open.
type Option func(*config)

// WithClock sets the store clock (default time.Now). Tests inject a manual
// clock; the store reads it for persistedAt, expiries and due times.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.clock = now
		}
	}
}

// WithDedupeRetention sets how long completed dedupe records are kept
// (default store.DefaultDedupeRetention).
func WithDedupeRetention(d time.Duration) Option {
	return func(c *config) {
		if d >= 0 {
			c.retention = d
		}
	}
}

// WithSynchronous relaxes durability (default SyncFull; see Synchronous).
func WithSynchronous(s Synchronous) Option {
	return func(c *config) { c.synchronous = s }
}

// WithMaxBatch bounds how many requests one group commit takes (default
// DefaultMaxBatch). 1 disables grouping: one transaction per request.
func WithMaxBatch(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBatch = n
		}
	}
}

// WithReaders sets the size of the read-only connection pool (default
// DefaultReaders).
func WithReaders(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.readers = n
		}
	}
}

// WithBusyTimeout sets SQLite's busy_timeout (default DefaultBusyTimeout):
// how long a connection waits for a lock another process holds.
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) {
		if d >= 0 {
			c.busyTimeout = d
		}
	}
}

// Store is the SQLite store: the one front over this backend, plus what
// only SQLite has (Path, Stats). It is safe for concurrent use; Close it
// once.
type Store struct {
	*store.Front // every store.Store method, validated once
	b            *backend
}

var _ store.Store = (*Store)(nil)

// backend is the storage under the front: the file, its connections and
// the committer. Its methods implement store.Backend.
type backend struct {
	cfg  config
	path string

	wdb  *sql.DB   // exactly one connection: the committer's
	conn *sql.Conn // the committer's write connection
	rdb  *sql.DB   // query-only pool

	commits *groupcommit.Committer[*request]
	writer  *committer
	reqs    <-chan *request // the committer's queue
	quit    chan struct{}   // closed by Close: the checkpointer stops

	ckptPoke   chan struct{}
	ckptExited chan struct{}
	walRestart int // WAL frames past which a fully copied WAL is restarted (checkpoint.go)

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	stats statsCounters

	rmu    sync.Mutex
	rstmts map[string]*sql.Stmt // prepared reads (util.go)

	hub hub.Hub // Watch registrations, woken after each commit (watch.go)
}

var _ store.Backend = (*backend)(nil)

// Open opens (creating if needed) the store file at path, applies the
// schema migrations, and starts the committer.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	cfg := config{
		clock:       time.Now,
		retention:   store.DefaultDedupeRetention,
		synchronous: SyncFull,
		maxBatch:    DefaultMaxBatch,
		readers:     DefaultReaders,
		busyTimeout: DefaultBusyTimeout,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch cfg.synchronous {
	case SyncFull, SyncNormal, SyncOff:
	default:
		return nil, store.Errorf("open", store.ErrInvalid, "", "unknown synchronous mode %q", cfg.synchronous)
	}
	if path == "" {
		return nil, store.Errorf("open", store.ErrInvalid, "", "empty path")
	}

	s := &backend{
		cfg:        cfg,
		path:       path,
		quit:       make(chan struct{}),
		ckptPoke:   make(chan struct{}, 1),
		ckptExited: make(chan struct{}),
		walRestart: cmp.Or(cfg.walRestart, walRestartFrames),
		rstmts:     make(map[string]*sql.Stmt),
	}
	var err error
	s.wdb, err = sql.Open("sqlite", s.dsn(false))
	if err != nil {
		return nil, openErr(err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.conn, err = s.wdb.Conn(ctx)
	if err != nil {
		s.wdb.Close()
		return nil, openErr(err)
	}
	if err := s.checkJournalMode(ctx); err != nil {
		s.conn.Close()
		s.wdb.Close()
		return nil, err
	}
	if err := migrate(ctx, s.conn, cfg.clock()); err != nil {
		s.conn.Close()
		s.wdb.Close()
		return nil, err
	}
	s.rdb, err = sql.Open("sqlite", s.dsn(true))
	if err != nil {
		s.conn.Close()
		s.wdb.Close()
		return nil, openErr(err)
	}
	s.rdb.SetMaxOpenConns(cfg.readers)
	s.rdb.SetMaxIdleConns(cfg.readers)
	s.writer = newCommitter(s)
	s.commits = groupcommit.New(groupcommit.Config[*request]{
		Lanes: 1, Max: cfg.maxBatch, Queue: max(4*cfg.maxBatch, 64), Spins: maxSpins,
		Run: s.writer.commitGroup,
	})
	s.reqs = s.commits.Queue(0)
	go s.checkpointer()
	return &Store{Front: store.New(s), b: s}, nil
}

// dsn builds the driver's connection string. The pragmas run on every new
// connection, busy_timeout first (the driver orders it so).
func (s *backend) dsn(readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", s.cfg.busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+string(s.cfg.synchronous)+")")
		q.Add("_pragma", "wal_autocheckpoint(0)") // see checkpoint.go
		q.Add("_pragma", "journal_size_limit(67108864)")
		// A request's savepoint keeps its undo pages in the sub-journal, a
		// temporary file by default: in memory it costs no write syscalls.
		q.Add("_pragma", "temp_store(MEMORY)")
	}
	return s.path + "?" + q.Encode()
}

// checkJournalMode fails Open if the file could not be put in WAL mode
// (e.g. a file system without shared memory): readers beside the writer and
// the group commit's single fsync both rely on it.
func (s *backend) checkJournalMode(ctx context.Context) error {
	var mode string
	if err := s.conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return openErr(err)
	}
	if mode != "wal" {
		return store.Errorf("open", store.ErrInvalid, "", "journal_mode is %q, want wal", mode)
	}
	return nil
}

func openErr(err error) error {
	return &store.Error{Op: "open", Kind: err, Detail: "sqlite"}
}

// Close stops the committer (requests still queued fail with ErrClosed; the
// batch in progress commits first), ends every Watch registration and
// closes the database. It is idempotent.
func (s *backend) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.commits.Close()
		close(s.quit)
		<-s.ckptExited
		s.writer.closeStmts()
		s.hub.Close()
		s.closeReadStmts()
		err1 := s.conn.Close()
		err2 := s.wdb.Close()
		err3 := s.rdb.Close()
		if err := errors.Join(err1, err2, err3); err != nil {
			s.closeErr = &store.Error{Op: "close", Kind: err}
		}
	})
	return s.closeErr
}

// Now reads the store clock.
func (s *backend) Now(ctx context.Context) (time.Time, error) {
	if s.closed.Load() {
		return time.Time{}, closedErr("now")
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, ctxErr("now", err)
	}
	return s.cfg.clock().Round(0), nil
}

// DedupeRetention returns the configured retention.
func (s *backend) DedupeRetention() time.Duration { return s.cfg.retention }

// Path returns the database file's path.
func (s *Store) Path() string { return s.b.path }

// Stats are the committer's counters since Open.
type Stats struct {
	// Transactions is the number of write transactions committed (each one
	// fsync under SyncFull).
	Transactions uint64
	// Requests is the number of write requests answered, successful or not.
	Requests uint64
	// MaxGroup is the largest number of requests one transaction carried.
	MaxGroup uint64
	// Checkpoints is the number of WAL checkpoints run (see checkpoint.go).
	Checkpoints uint64
	// WALRestarts is the number of RESTART checkpoints that made the next
	// commit start the WAL over (see checkpoint.go).
	WALRestarts uint64
}

type statsCounters struct {
	transactions atomic.Uint64
	requests     atomic.Uint64
	maxGroup     atomic.Uint64
	checkpoints  atomic.Uint64
	walRestarts  atomic.Uint64
	cacheResets  atomic.Uint64 // another connection wrote the file (groupcommit.go)
}

// Stats returns the committer's counters.
func (s *Store) Stats() Stats {
	c := &s.b.stats
	return Stats{
		Transactions: c.transactions.Load(),
		Requests:     c.requests.Load(),
		MaxGroup:     c.maxGroup.Load(),
		Checkpoints:  c.checkpoints.Load(),
		WALRestarts:  c.walRestarts.Load(),
	}
}
