// Package memstore is the reference backend of the persistence plane: the
// whole store.Store contract held in memory behind one mutex, so that every
// operation is one atomic "transaction" and the store's behaviour is the
// executable reading of store/store.go that store/storetest checks the other
// backends against.
//
// It is deterministic: it starts no goroutine of its own (a Watch whose
// context is cancelled is stopped by context.AfterFunc), never lets Go map
// order reach an answer (everything listed is sorted), and reads time only
// through the clock it was given (WithClock; NewManualClock for tests).
//
// It is also the lab's fault-injection seam for the seed 002 chaos matrix:
//
//   - WithHook installs a function called at the start of every operation,
//     before anything changes, with the operation's name (the Op of its
//     errors: "append", "drain", "publish", "claim", "complete", "fire",
//     "acquire", "renew", ...; Ops lists them all). A non-nil error fails
//     that call, is returned unchanged, and the call changes nothing. The
//     hook runs outside the store's lock, so it may call Crash, or block to
//     hold a caller at that point.
//   - Crash makes every later call on this handle fail with ErrCrashed (a
//     *store.Error whose Kind is ErrCrashed), as if the process using it had
//     died; Restart returns a fresh handle over the same durable state. What
//     survives a crash is exactly what was committed: each operation commits
//     as a whole under the mutex or not at all, so "crash between two store
//     calls" is a hook that calls Crash (or a test that calls it) between
//     them, and "crash inside a call" is a hook that fails it.
//
// What it never does: persist anything beyond the process, or interpret the
// bytes it stores.
package memstore

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/orrery-run/orrery/store"
)

// ErrCrashed is the Kind of every error a handle returns after Crash.
var ErrCrashed = errors.New("memstore: crashed")

// Ops returns, sorted, the name of every operation as the hook sees it
// (and as the Op of its errors): the lab's list of fault points.
func Ops() []string {
	return []string{
		"acquire", "active_snapshot", "append", "assign", "cancel_timer", "cas_watermark", "claim",
		"claim_due", "compact", "complete", "create_world", "cursor", "drain", "effect_status",
		"enqueue", "fire", "fork_world", "get_assignment", "get_lease", "get_watermark", "get_world",
		"head", "list_worlds", "now", "publish", "put_snapshot", "read", "read_inbox", "read_window",
		"reap_effects", "reap_timers", "release", "renew", "schedule", "send", "set_world_status",
		"sweep_dedupe", "unassign", "watch", "worker_worlds",
	}
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock: persistedAt, lease expiries, claim
// deadlines, due times and dedupe retention all read it. The default is
// time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.clock = now }
}

// WithDedupeRetention sets how long completed dedupe records are kept
// (store.DefaultDedupeRetention by default).
func WithDedupeRetention(d time.Duration) Option {
	return func(s *Store) { s.retention = d }
}

// WithHook installs the fault-injection hook (see the package doc); nil
// removes it.
func WithHook(hook func(op string) error) Option {
	return func(s *Store) { s.hook = hook }
}

// Store is one handle over a memstore's durable state. It is safe for
// concurrent use.
type Store struct {
	st        *state
	clock     func() time.Time
	retention time.Duration
	hook      func(op string) error

	// Guarded by st.mu.
	crashed bool
	closed  bool
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{st: newState(), clock: time.Now, retention: store.DefaultDedupeRetention}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Crash simulates the death of the process using this handle: every later
// call fails with ErrCrashed and its watches end (their channels close).
// The durable state is untouched; Restart reopens it.
func (s *Store) Crash() {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.crashed = true
	s.st.dropWatchers(s)
}

// Restart returns a fresh handle over the same durable state, with this
// handle's clock, retention and hook unless opts say otherwise (for example
// WithHook(nil) to stop injecting faults). It may be called on a crashed,
// closed or live handle; the old handle keeps its own state.
func (s *Store) Restart(opts ...Option) *Store {
	n := &Store{st: s.st, clock: s.clock, retention: s.retention, hook: s.hook}
	for _, o := range opts {
		o(n)
	}
	return n
}

// Close ends this handle: later calls fail with store.ErrClosed and its
// watches end. It is idempotent and leaves the durable state to other
// handles (see Restart).
func (s *Store) Close() error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.closed = true
	s.st.dropWatchers(s)
	return nil
}

// Now reads the store's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if err := s.begin(ctx, "now"); err != nil {
		return time.Time{}, err
	}
	defer s.st.mu.Unlock()
	return s.now(), nil
}

// DedupeRetention returns the configured retention.
func (s *Store) DedupeRetention() time.Duration { return s.retention }

// begin opens an operation: the hook, then the context, then (under the
// mutex, which it leaves locked on success) the handle's crash and close
// flags. The hook runs outside the mutex so that it may call Crash.
func (s *Store) begin(ctx context.Context, op string) error {
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

// now reads the clock without its monotonic reading, so that stored times
// compare and print the same way whatever clock produced them.
func (s *Store) now() time.Time { return s.clock().Round(0) }

// ---- the durable state ----

// state is everything that survives a crash. Every field is guarded by mu.
type state struct {
	mu sync.Mutex

	streams     map[string]*stream
	worlds      map[string]*world
	leases      map[string]*store.Lease
	assignments map[string]store.Assignment
	effects     map[string]*effect // by intent hash
	effectSeq   uint64             // last queue seq handed out
	timers      map[string]*timer  // by intent hash
	watermarks  map[watermarkKey]uint64

	watchers map[string]map[*watcher]struct{} // by topic
}

func newState() *state {
	return &state{
		streams:     map[string]*stream{},
		worlds:      map[string]*world{},
		leases:      map[string]*store.Lease{},
		assignments: map[string]store.Assignment{},
		effects:     map[string]*effect{},
		timers:      map[string]*timer{},
		watermarks:  map[watermarkKey]uint64{},
		watchers:    map[string]map[*watcher]struct{}{},
	}
}

// fence is the check every world mutation makes in its own transaction: the
// world exists and epoch is the epoch of its lease, which is held (not
// released) and unexpired by the store's clock. An expired lease fences its
// holder even before anyone takes it over: a paused holder never writes.
func (st *state) fence(op, world string, epoch uint64, now time.Time) error {
	if world == "" {
		return store.Errorf(op, store.ErrInvalid, "", "empty world")
	}
	if _, ok := st.worlds[world]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	l, ok := st.leases[world]
	switch {
	case !ok:
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: never leased", epoch)
	case l.Epoch != epoch:
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: lease is at epoch %d", epoch, l.Epoch)
	case l.Holder == "":
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: lease released", epoch)
	case !now.Before(l.ExpiresAt):
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: lease expired", epoch)
	}
	return nil
}

// ---- watches ----

type watcher struct {
	ch    chan struct{}
	topic string
	owner *Store
	once  sync.Once
	stopC func() bool // stops the context.AfterFunc
}

// Watch returns a channel that receives a coalesced hint after every change
// that may interest topic: TopicInbox(w) when an item enters w's inbox
// (Enqueue, Complete, Fire, Send), TopicEffects when effects become
// claimable (Publish, ReapEffects), TopicTimers when the timer set changes
// (Schedule, CancelTimer, ReapTimers). The channel is closed when the watch
// stops (the returned function, ctx, Close or Crash of this handle); on a
// closed or crashed handle it is returned closed.
func (s *Store) Watch(ctx context.Context, topic string) (<-chan struct{}, func()) {
	w := &watcher{ch: make(chan struct{}, 1), topic: topic, owner: s}
	if err := s.begin(ctx, "watch"); err != nil {
		close(w.ch)
		return w.ch, func() {}
	}
	set := s.st.watchers[topic]
	if set == nil {
		set = map[*watcher]struct{}{}
		s.st.watchers[topic] = set
	}
	set[w] = struct{}{}
	stop := func() {
		s.st.mu.Lock()
		s.st.removeWatcher(w)
		s.st.mu.Unlock()
	}
	// Under mu, so that a concurrent Close or Crash sees stopC; a context
	// already done runs stop at once, and it waits for mu.
	w.stopC = context.AfterFunc(ctx, stop)
	s.st.mu.Unlock()
	return w.ch, stop
}

// removeWatcher unregisters and closes w; mu is held.
func (st *state) removeWatcher(w *watcher) {
	w.once.Do(func() {
		if set := st.watchers[w.topic]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(st.watchers, w.topic)
			}
		}
		close(w.ch)
		if w.stopC != nil {
			w.stopC()
		}
	})
}

// dropWatchers stops every watch of handle s; mu is held.
func (st *state) dropWatchers(s *Store) {
	var mine []*watcher
	for _, set := range st.watchers {
		for w := range set {
			if w.owner == s {
				mine = append(mine, w)
			}
		}
	}
	for _, w := range mine {
		st.removeWatcher(w)
	}
}

// notify hints every watcher of topic; mu is held, so a hint never races a
// close. A full buffer already holds a hint: coalesce.
func (st *state) notify(topic string) {
	for w := range st.watchers[topic] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// ---- helpers ----

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func expired(deadline, now time.Time) bool { return !now.Before(deadline) }
