// Package memstore is the reference backend of the persistence plane: the
// whole store.Store contract held in memory behind one mutex, so that every
// operation is one atomic "transaction" and the store's behaviour is the
// executable reading of store/store.go that store/storetest checks the other
// backends against. Its Store is the one front over every backend
// (store.Front), which validates each call, over this package's backend,
// which keeps only storage: the contract's decisions are
// store/internal/contract, and Watch fan-out is store/internal/hub, exactly
// as in the other backends. Its files are laid out by protocol, with the
// same names as the other backends' (journal.go, commit.go, leases.go,
// effects.go, timers.go, …).
//
// It is deterministic: it starts no goroutine of its own (a watch is a
// registration of a Waker, which it wakes without blocking), never lets Go
// map order reach an answer (everything listed is sorted), and reads time
// only through the clock it was given (WithClock; NewManualClock for tests).
// So it runs under the deterministic lab, whose Parker is a store.Waker.
//
// It is also the lab's fault-injection seam for the runtime plane contract's chaos matrix:
//
//   - WithHook installs a function called at the start of every operation
//     the front let through (a call it refuses never gets here), before
//     anything changes, with the operation's name (the Op of its errors:
//     "append", "commit", "drain", "publish", "claim", "complete_many", "fire", "acquire_leases", "renew_leases", ...;
//     Ops lists them all). The front answers a single-item form through
//     its batch form (an Acquire is an AcquireLeases of one world), so the
//     hook sees the batch's name. A non-nil error fails that call, is returned
//     unchanged, and the call changes nothing. The hook runs outside the
//     store's lock, so it may call Crash, or block to hold a caller at
//     that point.
//   - Crash makes every later call on this handle fail with ErrCrashed (a
//     *store.Error whose Kind is ErrCrashed), as if the process using it had
//     died, and ends the handle's watches; Restart returns a fresh handle
//     over the same durable state. What survives a crash is exactly what
//     was committed: each operation commits as a whole under the mutex or
//     not at all, so "crash between two store calls" is a hook that calls
//     Crash (or a test that calls it) between them, and "crash inside a
//     call" is a hook that fails it.
//
// What it never does: persist anything beyond the process, or interpret the
// bytes it stores.
package memstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/store/internal/hub"
)

// ErrCrashed is the Kind of every error a handle returns after Crash.
var ErrCrashed = errors.New("memstore: crashed")

// Ops returns, sorted, the name of every operation as the hook sees it
// (and as the Op of its errors): the lab's list of fault points.
func Ops() []string {
	return []string{
		"acquire_leases", "active_snapshot", "admit_runs", "append", "assign", "cancel_timer", "cas_watermark", "claim",
		"claim_due", "commit", "compact", "complete_many", "create_world", "cursor", "drain",
		"effect_status", "enqueue", "enqueue_run", "fire", "fire_held", "floor", "fork_world", "get_assignment", "get_lease", "get_queue", "get_watermark", "get_world",
		"head", "heartbeat", "list_effects", "list_queued_runs", "list_queues", "list_timers", "list_worker_worlds", "list_workers",
		"list_worlds", "next_due", "now", "pending_effects", "publish", "put_queue", "put_snapshot", "queue_depths", "queue_run_of", "read", "read_inbox",
		"read_window", "reap_effects", "reap_orphans", "reap_timers", "recent_admissions", "release_effect", "release_leases",
		"renew_leases", "resolve", "retire_worker", "retry_effect", "schedule", "send", "set_draining", "set_world_status",
		"snapshot_below", "spawn", "sweep_dedupe", "unassign", "watch",
	}
}

// Option configures a Store.
type Option func(*backend)

// WithClock sets the store's clock: persistedAt, lease expiries, claim
// deadlines, due times and dedupe retention all read it. The default is
// time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *backend) { s.clock = now }
}

// WithDedupeRetention sets how long completed dedupe records are kept
// (store.DefaultDedupeRetention by default).
func WithDedupeRetention(d time.Duration) Option {
	return func(s *backend) { s.retention = d }
}

// WithHook installs the fault-injection hook (see the package doc); nil
// removes it.
func WithHook(hook func(op string) error) Option {
	return func(s *backend) { s.hook = hook }
}

// Store is one handle over a memstore's durable state: the one front over
// this backend, plus what only memstore has (Crash, Restart). It is safe
// for concurrent use.
type Store struct {
	*store.Front // every store.Store method, validated once
	b            *backend
}

// backend is the storage of one handle: it implements store.Backend.
type backend struct {
	st        *state
	clock     func() time.Time
	retention time.Duration
	hook      func(op string) error

	// Guarded by st.mu.
	crashed bool
	closed  bool
	watches map[uint64]func() // this handle's live watches, ended by Crash and Close
	watchID uint64
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Backend = (*backend)(nil)
)

// New returns an empty store.
func New(opts ...Option) *Store {
	return open(&backend{st: newState(), clock: time.Now, retention: store.DefaultDedupeRetention}, opts)
}

func open(b *backend, opts []Option) *Store {
	for _, o := range opts {
		o(b)
	}
	return &Store{Front: store.New(b), b: b}
}

// Crash simulates the death of the process using this handle: every later
// call fails with ErrCrashed and its watches end. The durable state is
// untouched; Restart reopens it.
func (s *Store) Crash() {
	b := s.b
	b.st.mu.Lock()
	defer b.st.mu.Unlock()
	b.crashed = true
	b.dropWatches()
}

// Restart returns a fresh handle over the same durable state, with this
// handle's clock, retention and hook unless opts say otherwise (for example
// WithHook(nil) to stop injecting faults). It may be called on a crashed,
// closed or live handle; the old handle keeps its own state.
func (s *Store) Restart(opts ...Option) *Store {
	return open(&backend{st: s.b.st, clock: s.b.clock, retention: s.b.retention, hook: s.b.hook}, opts)
}

// Close ends this handle: later calls fail with store.ErrClosed and its
// watches end. It is idempotent and leaves the durable state to other
// handles (see Restart).
func (s *backend) Close() error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.closed = true
	s.dropWatches()
	return nil
}

// Now reads the store's clock.
func (s *backend) Now(ctx context.Context) (time.Time, error) {
	if err := s.begin(ctx, "now"); err != nil {
		return time.Time{}, err
	}
	defer s.end()
	return s.now(), nil
}

// DedupeRetention returns the configured retention.
func (s *backend) DedupeRetention() time.Duration { return s.retention }

// begin opens an operation: the hook, then the context, then (under the
// mutex, which it leaves locked on success; end releases it) the handle's
// crash and close flags. The hook runs outside the mutex so that it may
// call Crash.
func (s *backend) begin(ctx context.Context, op string) error {
	if s.hook != nil {
		if err := s.hook(op); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return &store.Error{Op: op, Kind: err}
	}
	s.st.mu.Lock()
	switch {
	case s.crashed:
		s.st.mu.Unlock()
		return &store.Error{Op: op, Kind: ErrCrashed}
	case s.closed:
		s.st.mu.Unlock()
		return &store.Error{Op: op, Kind: store.ErrClosed}
	}
	return nil
}

// end commits an operation: it releases the mutex and only then sends the
// hints the operation collected, so a woken watcher always finds the change.
func (s *backend) end() {
	topics := s.st.hints
	s.st.hints = nil
	s.st.mu.Unlock()
	if len(topics) > 0 {
		s.st.hub.Notify(topics...)
	}
}

// now reads the clock without its monotonic reading, so that stored times
// compare and print the same way whatever clock produced them.
func (s *backend) now() time.Time { return s.clock().Round(0) }

// ---- the durable state ----

// state is everything that survives a crash. Every field is guarded by mu
// (the hub has its own lock, taken after mu when both are held).
type state struct {
	mu sync.Mutex

	streams     map[string]*stream
	worlds      map[string]*world
	leases      map[string]*contract.LeaseRow
	assignments map[string]store.Assignment
	workers     map[string]*store.WorkerInfo
	retired     map[owner]bool     // incarnations retired or superseded (RetireWorker)
	effects     map[string]*effect // by intent hash
	effectSeq   uint64             // last queue seq handed out
	timers      map[string]*timer  // by intent hash
	watermarks  map[watermarkKey]uint64
	q           *queueState // made on first use
	schedules   map[string]store.ScheduleRecord

	hub   hub.Hub  // shared by every handle, so a hint reaches watchers of all of them
	hints []string // topics the running operation changed, sent by end
}

func newState() *state {
	return &state{
		streams:     map[string]*stream{},
		worlds:      map[string]*world{},
		leases:      map[string]*contract.LeaseRow{},
		assignments: map[string]store.Assignment{},
		workers:     map[string]*store.WorkerInfo{},
		retired:     map[owner]bool{},
		effects:     map[string]*effect{},
		timers:      map[string]*timer{},
		watermarks:  map[watermarkKey]uint64{},
		schedules:   map[string]store.ScheduleRecord{},
	}
}

// notify records that the running operation changed topic (mu held); end
// sends it after the commit.
func (st *state) notify(topic string) {
	if !slices.Contains(st.hints, topic) {
		st.hints = append(st.hints, topic)
	}
}

// leaseRow is the lease of world as the contract's decisions read it.
func (st *state) leaseRow(world string) contract.LeaseRow {
	l := st.leases[world]
	if l == nil {
		return contract.LeaseRow{}
	}
	return *l
}

// fence is the check every world mutation makes in its own transaction.
func (st *state) fence(op, world string, epoch uint64, now time.Time) error {
	_, found := st.worlds[world]
	return contract.Fence(op, world, epoch, found, st.leaseRow(world), now)
}
