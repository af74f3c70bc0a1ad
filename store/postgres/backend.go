// Package postgres is Orrery's multi-machine store: the whole persistence
// plane (store.Store) in one PostgreSQL schema, through pgx/v5 and pgxpool,
// shared safely by any number of worker, adapter and timer processes on any
// number of machines.
//
// Open returns a Store: store.Front over this package's backend. The front
// validates every call and answers the batch-of-one forms (Acquire, Renew,
// Release, Complete) through their batch forms; the backend keeps storage
// only, and asks store/internal/contract for the contract's decisions.
// Its files follow the protocols, as in every backend: backend.go (Open,
// Close, the clock, options), journal.go, commit.go (the world cycle),
// leases.go, workers.go, inbox.go, effects.go, timers.go, fabric.go,
// snapshots.go, worlds.go, watermarks.go, dedupe.go, views.go, watch.go,
// errors.go; and what only PostgreSQL has: migrate.go and migrations/,
// append.go and deliver.go (the two group committers), tx.go (pipelined
// transactions), queue.go (the claimable queues' SQL), warm.go (warm
// connections), failover.go (following a failover to the standby) and
// util.go (time encoding, shared helpers).
//
// What it owns:
//
//   - the schema and its embedded, versioned migrations (schema_migrations),
//     applied at Open under a transaction-scoped advisory lock, so that many
//     processes may open the same schema at once, followed in the same
//     transaction by functions.sql, the current definition of every SQL
//     function (see migrate.go);
//   - the append authority: runSeqs are assigned inside the transaction that
//     inserts the events, under the stream's row lock; duplicates of
//     (stream, idempotencyKey) are resolved under that same lock (and a
//     unique index backs it), so exactly one insert ever wins;
//   - group commit: concurrent Append, Commit and DrainToJournal calls are
//     drained by a committer goroutine into one transaction, whatever the
//     batch size, so the cycles of many worlds share one WAL flush (at most
//     one Commit per world per transaction: a world's cycles commit in
//     order). Appends and Commits commit in one round trip when the
//     batch's streams are ones this process wrote to before (the heads it
//     remembers, and the fences, cursors and statuses its decisions assume,
//     are verified in the database, and any wrong guess rolls the
//     transaction back), two otherwise, and a Commit with a Snapshot always
//     in two. Concurrent inbox
//     deliveries (Enqueue, Resolve, Fire, Send; a CompleteMany is one
//     request whose completions stay in one transaction) are grouped
//     likewise, in two round trips. A holder's FireHeld is not grouped: it
//     is one statement, one round trip (timers.go). A request's typed failure (a stale
//     fence, a head or cursor mismatch, a lost claim) is decided before
//     anything is written and never fails its neighbours; an unexpected
//     database error reruns every request of the batch on its own (see
//     append.go, deliver.go);
//   - the contract's decisions (store/internal/contract) made in Go on rows
//     read under lock in the transaction that writes; where a one-round-trip
//     path decides in SQL (the lease functions, fire_held, the fence of
//     one-call mutations), the SQL names the contract function it mirrors,
//     and the lease calls and FireHeld decide again in Go on the rows the
//     function returns;
//   - fencing: every world mutation checks the lease epoch in its own
//     transaction (the lease row is read FOR SHARE, so a takeover or a
//     status change waits for the write to commit, and a write waits for
//     them to commit and then sees the new epoch);
//   - immutability of the journal: a trigger refuses every UPDATE, TRUNCATE
//     and DELETE of events, except compaction's DELETE, which opens the gate
//     for its own transaction with set_config('orrery.compaction', 'on');
//   - the queues (effects, timers) as rows claimed with FOR UPDATE SKIP
//     LOCKED, so claimers on many machines never claim one item twice;
//   - the store clock: the server's clock_timestamp() plus an offset
//     (WithClockOffset, zero in production), read inside the SQL that needs
//     it. No client clock ever decides persistedAt, an expiry or a due time.
//
// Durability: journal appends, Commits, lease acquisitions, renewals,
// releases, status changes and every epoch bump commit with
// synchronous_commit on. Only queue claims and reaps (a lost claim just
// expires again) commit with it off. With a synchronous standby, an acknowledged
// write is thus on the standby too: a commit whose wait for the standby
// was cut short (PostgreSQL answers it with success and a warning) fails
// as unavailable instead. The DSN may name several hosts
// (target_session_attrs=read-write); a server that refuses writes is
// unavailable, and the pool's connections to it are dropped (failover.go).
//
// Watch is a local hub (store/internal/hub) fed by this process's commits
// and by LISTEN/NOTIFY on one dedicated connection, opened on the first
// Watch; every NOTIFY is sent inside the transaction of its change. Hints
// only: correctness never depends on a notification.
//
// What it never does: interpret payloads or world state, order by
// timestamps, or keep correctness in process memory: locks, counters and
// checks all live in the database, and what the process remembers (the
// heads of the streams it appends to) is a guess the database verifies.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/groupcommit"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Defaults of the options.
const (
	DefaultSchema     = "orrery"
	DefaultMaxBatch   = 256
	DefaultCommitters = 1
)

type config struct {
	schema     string
	offset     func() time.Duration
	retention  time.Duration
	maxConns   int32
	maxBatch   int
	committers int
	warmConns  int // -1: the default
	listenChk  time.Duration
}

// Option configures Open.
type Option func(*config)

// WithSchema sets the schema that holds the store (default "orrery"). It
// must be a plain lower-case identifier of at most 48 bytes.
func WithSchema(name string) Option {
	return func(c *config) { c.schema = name }
}

// WithClockOffset adds offset() to every read of the server's clock. Tests
// use it to move the store clock forward (expiries, due times, retention)
// without waiting; production leaves it unset.
func WithClockOffset(offset func() time.Duration) Option {
	return func(c *config) { c.offset = offset }
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

// WithMaxConns bounds the connection pool (default: the DSN's
// pool_max_conns, else pgxpool's default). The Watch listener's connection
// is not counted.
func WithMaxConns(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxConns = int32(n)
		}
	}
}

// DefaultWarmConns is how many connections Open opens and warms (see
// WithWarmConns), at most the pool's size.
const DefaultWarmConns = 4

// WithWarmConns sets how many of the pool's connections Open opens and
// warms before it returns, and the pool keeps open (default
// DefaultWarmConns, at most the pool's size; a DSN's pool_min_conns
// overrides it). A connection is warmed, whenever it is opened, before it
// serves a request: the statements of the hot paths are prepared and
// their functions run once, in a transaction rolled back, so that no
// request pays a new connection's first parses, plans and compilations.
// Opening is what costs (an authentication handshake each, tens of
// milliseconds of CPU with SCRAM): 0 opens connections as requests need
// them, which suits short-lived processes and tests.
func WithWarmConns(n int) Option {
	return func(c *config) {
		if n >= 0 {
			c.warmConns = n
		}
	}
}

// WithListenerCheck sets how long the Watch listener's connection may be
// silent before the listener checks it (default 10 s): it LISTENs again,
// and a connection that does not answer within the same time (a path
// that leads nowhere), or a server that refuses (a primary demoted to
// standby), is left for a new one, after which the notifications it may
// have missed are made up. Shorter finds a dead path sooner, for a
// round-trip per idle interval.
func WithListenerCheck(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.listenChk = d
		}
	}
}

// WithMaxBatch bounds how many requests one group commit takes (default
// DefaultMaxBatch); 1 disables grouping.
func WithMaxBatch(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBatch = n
		}
	}
}

// WithCommitters sets how many lanes each committer (appends, inbox
// deliveries) has, each with its own goroutine and transaction in flight
// (default DefaultCommitters). A request goes to the lane of its stream
// or world. One lane makes the biggest batches, hence the fewest WAL
// flushes, which is what bounds throughput on a disk with slow fsync; more
// lanes let batches of unrelated streams commit in parallel, which helps
// when the server has the CPUs and the disk flushes fast.
func WithCommitters(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.committers = n
		}
	}
}

// Store is the PostgreSQL store: the one front over this backend (every
// store.Store method, validated once), plus what only PostgreSQL has
// (Schema, Stats). It is safe for concurrent use, and any number of Stores
// (in any number of processes) may share one schema.
type Store struct {
	*store.Front
	b *backend
}

// backend is the storage under the front: it implements store.Backend on
// the schema, and is handed only input the front has validated.
type backend struct {
	cfg   config
	pool  *pgxpool.Pool
	db    db // the pool's one-statement calls (failover.go)
	poolP atomic.Pointer[pgxpool.Pool]
	watch *watchHub

	appends    *groupcommit.Committer[*appendReq]
	deliveries *groupcommit.Committer[*deliveryReq]

	heads headCache // the append committer's guesses (see append.go)

	closeOnce sync.Once
	closed    atomic.Bool

	stats statsCounters
}

var _ store.Backend = (*backend)(nil)

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// Open connects to dsn, applies the schema's pending migrations and starts
// the committers. Close releases everything it started.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	const op = "open"
	cfg := config{
		schema:     DefaultSchema,
		retention:  store.DefaultDedupeRetention,
		maxBatch:   DefaultMaxBatch,
		committers: DefaultCommitters,
		warmConns:  -1,
		listenChk:  defaultListenerCheck,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if !schemaName.MatchString(cfg.schema) {
		return nil, store.Errorf(op, store.ErrInvalid, "", "schema %q: want a lower-case identifier of at most 48 bytes", cfg.schema)
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, store.Errorf(op, store.ErrInvalid, "", "dsn: %v", err)
	}
	if cfg.maxConns > 0 {
		pc.MaxConns = cfg.maxConns
	}
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	// Every statement of the store names its tables unqualified: the
	// connection's search_path is the store's schema.
	pc.ConnConfig.RuntimeParams["search_path"] = cfg.schema
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = "orrery"
	}
	// The listener keeps pgx's default: its waits end at once when
	// cancelled, and a listener's connection is one anyway.
	listen := pc.ConnConfig.Copy()
	// By default pgx ends a query whose context is cancelled by breaking
	// its connection, which the pool then replaces: a new server process
	// per cancelled call. Callers cancel reads routinely (the loser of a
	// race, a waiter that gave up), so a cancelled query is left
	// cancelRequestDelay to finish, then cancelled by the server, and only
	// past cancelDeadline is the connection broken.
	pc.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: cancelRequestDelay, DeadlineDelay: cancelDeadline}
	}
	// The pool keeps cfg.warmConns connections open (unless the DSN's
	// pool_min_conns says otherwise), and warms each connection before it
	// serves a request (warm.go), once the schema is current: one opened
	// for the migration is warmed after it.
	if pc.MinConns == 0 {
		if cfg.warmConns < 0 {
			cfg.warmConns = DefaultWarmConns
		}
		pc.MinConns = min(pc.MaxConns, int32(cfg.warmConns))
	}
	s := &backend{cfg: cfg}
	s.db = db{pool: &s.poolP}
	// A server that refuses writes is the wrong one (a demoted primary):
	// every connection of the pool leads to it, so all go (failover.go).
	failoverConfig(&pc.ConnConfig.Config, func() {
		if p := s.poolP.Load(); p != nil {
			p.Reset()
		}
	})
	failoverConfig(&listen.Config, nil)
	var current atomic.Bool
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if current.Load() && !warmConnOK(ctx, c, s.off()) {
			return errWarmLeftConn
		}
		return nil
	}
	// A connection is warmed before it serves; one that warming left
	// unusable (closed, or inside a transaction) is replaced, and the
	// request retried on another.
	pc.PrepareConn = func(ctx context.Context, c *pgx.Conn) (bool, error) {
		if current.Load() && !warmed(c) {
			return warmConnOK(ctx, c, s.off()), nil
		}
		return true, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	s.poolP.Store(pool)
	if err := migrate(ctx, pool, cfg.schema); err != nil {
		pool.Close()
		return nil, err
	}
	current.Store(true)
	s.pool = pool
	// The listener connects while the pool warms: the first Watch (a
	// worker's or a host's, at its start) would otherwise wait for it.
	s.watch = newWatchHub(listen, channelName(cfg.schema), cfg.listenChk)
	s.watch.start()
	warmPool(ctx, pool, int(pc.MinConns), s.off())
	s.appends = newCommitter(cfg.committers, cfg.maxBatch, s.runAppends)
	s.deliveries = newCommitter(cfg.committers, cfg.maxBatch, s.runDeliveries)
	return &Store{Front: store.New(s), b: s}, nil
}

// How a cancelled query ends (see Open): left to finish for
// cancelRequestDelay, then cancelled by the server, and its connection
// broken only past cancelDeadline.
const (
	cancelRequestDelay = 50 * time.Millisecond
	cancelDeadline     = 2 * time.Second
)

// Close stops the committers (queued requests fail with ErrClosed), ends
// every Watch, stops the listener and closes the pool. It is idempotent.
func (s *backend) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.appends.Close()
		s.deliveries.Close()
		s.watch.close()
		s.pool.Close()
	})
	return nil
}

// Schema returns the schema the store lives in.
func (s *Store) Schema() string { return s.b.cfg.schema }

// DedupeRetention implements store.Dedupe.
func (s *backend) DedupeRetention() time.Duration { return s.cfg.retention }

// Now reads the store clock: the server's clock plus the offset.
func (s *backend) Now(ctx context.Context) (time.Time, error) {
	const op = "now"
	if err := s.begin(op); err != nil {
		return time.Time{}, err
	}
	var ns int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT now_ns($1)`, s.off()).Scan(&ns)
	})
	if err != nil {
		return time.Time{}, err
	}
	return fromNS(ns), nil
}

// off is the clock offset in nanoseconds, passed to every SQL clock read.
func (s *backend) off() int64 {
	if s.cfg.offset == nil {
		return 0
	}
	return int64(s.cfg.offset())
}

// begin opens an operation: a closed store fails it before anything is
// sent. (A finished context the front answered already.)
func (s *backend) begin(op string) error {
	if s.closed.Load() {
		return &store.Error{Op: op, Kind: store.ErrClosed}
	}
	return nil
}

// retry runs fn, again while it fails with a transient conflict
// (serialization failure, deadlock): fn's transaction was rolled back, so
// running it again is safe. The error it returns is mapped.
func (s *backend) retry(ctx context.Context, op, world string, fn func() error) error {
	backoff := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if isDeadlock(err) {
			s.stats.deadlocks.Add(1)
		}
		if !isTransient(err) || attempt >= 8 {
			if s.closed.Load() && !isStoreErr(err) {
				return &store.Error{Op: op, Kind: store.ErrClosed}
			}
			return dbErr(op, world, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return &store.Error{Op: op, Kind: ctx.Err(), World: world}
		case <-t.C:
		}
		backoff *= 2
	}
}

// Stats are counters of the store's work, for tests and metrics.
type Stats struct {
	AppendRequests       uint64 // Append, Commit and DrainToJournal calls committed or failed in a batch
	AppendTransactions   uint64 // transactions the append committers ran
	DeliveryRequests     uint64 // Enqueue, Complete, Fire and Send calls
	DeliveryTransactions uint64 // transactions the delivery committers ran
	SpeculationMisses    uint64 // append batches whose one-round-trip path rolled back
	// RoundTrips counts the pipelined batches the store's transactions sent
	// (each one round trip): what a path's latency is made of.
	RoundTrips uint64
	// Deadlocks counts the transactions PostgreSQL rolled back to break a
	// deadlock (each after waiting deadlock_timeout), which the store then
	// ran again: one lock order for every writer keeps it at 0.
	Deadlocks uint64
}

type statsCounters struct {
	appendReqs, appendTxs, deliveryReqs, deliveryTxs, speculationMisses, roundTrips, deadlocks atomic.Uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats { return s.b.statsNow() }

func (s *backend) statsNow() Stats {
	return Stats{
		AppendRequests:       s.stats.appendReqs.Load(),
		AppendTransactions:   s.stats.appendTxs.Load(),
		DeliveryRequests:     s.stats.deliveryReqs.Load(),
		DeliveryTransactions: s.stats.deliveryTxs.Load(),
		SpeculationMisses:    s.stats.speculationMisses.Load(),
		RoundTrips:           s.stats.roundTrips.Load(),
		Deadlocks:            s.stats.deadlocks.Load(),
	}
}

func isStoreErr(err error) bool {
	var se *store.Error
	return errors.As(err, &se)
}

func channelName(schema string) string { return "orrery." + schema }

// errUnreachable reports a database answer that breaks the store's own
// invariants (a bug); the transaction is rolled back.
var errUnreachable = fmt.Errorf("postgres: unexpected database answer")
