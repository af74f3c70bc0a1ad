package plane_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/store/sqlite"
)

// The integration tests run on every backend: memstore under the lab
// (virtual time), and the real stores under the production executor. Real
// I/O stops no virtual clock, so there time is never waited for: a test
// that needs a lease, a claim or a timer to expire moves the STORE's clock
// (rig.advance), and a test that needs the plane to react waits for a
// condition on the store with a bounded loop on the executor (waitFor).
var backends = []string{"memstore", "sqlite"}

// rig is one integration test's plane over one backend.
type rig struct {
	backend string
	ctx     context.Context
	root    *actor.Scope
	ex      actor.Executor
	// base is the durable state as the test (and the operator) sees it;
	// no fault touches it.
	base store.Store
	// advance moves the store's clock by d: under the lab, virtual time
	// passes for everybody; on a real store only the store's clock jumps,
	// as if the processes had been frozen that long.
	advance func(d time.Duration) error
	// poll is one turn of a wait: virtual time under the lab, a short
	// park on the production executor otherwise.
	poll  time.Duration
	polls int // how many turns a wait of one virtual second may take
}

// real reports whether the rig runs a real store (and real goroutines).
func (r *rig) real() bool { return r.backend != "memstore" }

// forEachBackend runs body as a subtest per backend.
func forEachBackend(t *testing.T, seed uint64, name string, body func(r *rig) error) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { runOn(t, b, lab.Config{Seed: seed, Name: name}, body) })
	}
}

// runOn runs body on backend: under the lab with cfg for memstore, else
// once under the production executor seeded with cfg.Seed.
func runOn(t *testing.T, backend string, cfg lab.Config, body func(r *rig) error) {
	t.Helper()
	seed := cfg.Seed
	if backend == "memstore" {
		res := lab.Run(cfg, func(env *lab.Env) error {
			return body(&rig{backend: backend, ctx: env.Ctx, root: env.Root, ex: env.Lab,
				base:    memstore.New(memstore.WithClock(env.Lab.Now)),
				advance: func(d time.Duration) error { return actor.Sleep(env.Ctx, env.Lab, d) },
				poll:    10 * time.Millisecond, polls: 100})
		})
		if res.Failure != nil {
			t.Fatalf("seed %d: %v", seed, res.Failure)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	st, closeStore := openBackend(t, ctx, backend, clock)
	defer closeStore()
	ex := actor.NewExecutor(seed)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	r := &rig{backend: backend, ctx: ctx, root: sys.Root(), ex: ex, base: st,
		advance: func(d time.Duration) error { offset.Add(int64(d)); return nil },
		poll:    2 * time.Millisecond, polls: 2500}
	err := body(r)
	if _, cerr := sys.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// openBackend opens a fresh real store whose clock is clock.
func openBackend(t *testing.T, ctx context.Context, backend string, clock func() time.Time) (store.Store, func()) {
	t.Helper()
	switch backend {
	case "sqlite":
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "plane.db"), sqlite.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return st, func() { _ = st.Close() }
	}
	t.Fatalf("unknown backend %q", backend)
	return nil, nil
}

// waitFor waits until cond holds, for at most limit of virtual time under
// the lab, or as many short parks on the production executor: a bounded
// loop on a condition, never a timing assertion.
func (r *rig) waitFor(what string, limit time.Duration, cond func() (bool, error)) error {
	turns := int(limit/time.Second+1) * r.polls
	for i := 0; ; i++ {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if i >= turns {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		if err := actor.Sleep(r.ctx, r.ex, r.poll); err != nil {
			return err
		}
	}
}

// drained waits until world id's inbox is drained.
func (r *rig) drained(id string) error {
	return r.waitFor(id+" drained", 30*time.Second, func() (bool, error) {
		items, err := r.base.ReadInbox(r.ctx, id, 0, 0)
		if err != nil {
			return false, err
		}
		cur, err := r.base.Cursor(r.ctx, id)
		return len(items) == 0 || cur == items[len(items)-1].Seq, err
	})
}

var errCrashed = errors.New("the process of this store handle crashed")

// handle is one process's store handle over the rig's durable state: a
// fault hook runs before each of its operations (with memstore's op
// names), and Crash kills it as memstore's Crash does: every later call
// fails and its watches end. Operations the plane's processes do not use
// pass straight through.
type handle struct {
	store.Store
	hook func(op string) error

	mu      sync.Mutex
	crashed bool
	stops   []func()
}

func (r *rig) handle(hook func(op string) error) *handle {
	return &handle{Store: r.base, hook: hook}
}

// Crash kills the handle.
func (h *handle) Crash() {
	h.mu.Lock()
	h.crashed = true
	stops := h.stops
	h.stops = nil
	h.mu.Unlock()
	for _, s := range stops {
		s()
	}
}

func (h *handle) begin(op string) error {
	if h.hook != nil {
		if err := h.hook(op); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.crashed {
		return errCrashed
	}
	return nil
}

func (h *handle) Watch(ctx context.Context, w store.Waker, topics ...string) (func(), error) {
	if err := h.begin("watch"); err != nil {
		return nil, err
	}
	stop, err := h.Store.Watch(ctx, w, topics...)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.crashed {
		stop()
		return nil, errCrashed
	}
	h.stops = append(h.stops, stop)
	return stop, nil
}

func (h *handle) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	if err := h.begin("commit"); err != nil {
		return store.CommitResult{}, err
	}
	return h.Store.Commit(ctx, world, epoch, b)
}

func (h *handle) Now(ctx context.Context) (time.Time, error) {
	if err := h.begin("now"); err != nil {
		return time.Time{}, err
	}
	return h.Store.Now(ctx)
}

func (h *handle) Read(ctx context.Context, stream string, after uint64, limit int) ([]store.Record, error) {
	if err := h.begin("read"); err != nil {
		return nil, err
	}
	return h.Store.Read(ctx, stream, after, limit)
}

func (h *handle) Head(ctx context.Context, stream string) (uint64, error) {
	if err := h.begin("head"); err != nil {
		return 0, err
	}
	return h.Store.Head(ctx, stream)
}

func (h *handle) Acquire(ctx context.Context, world, worker string, ttl time.Duration) (store.Lease, error) {
	if err := h.begin("acquire"); err != nil {
		return store.Lease{}, err
	}
	return h.Store.Acquire(ctx, world, worker, ttl)
}

func (h *handle) RenewLeases(ctx context.Context, worker string, refs []store.LeaseRef, ttl time.Duration) ([]store.LeaseResult, error) {
	if err := h.begin("renew_leases"); err != nil {
		return nil, err
	}
	return h.Store.RenewLeases(ctx, worker, refs, ttl)
}

func (h *handle) Release(ctx context.Context, world, worker string, epoch uint64) error {
	if err := h.begin("release"); err != nil {
		return err
	}
	return h.Store.Release(ctx, world, worker, epoch)
}

func (h *handle) ReleaseLeases(ctx context.Context, worker string, refs []store.LeaseRef) ([]store.LeaseResult, error) {
	if err := h.begin("release_leases"); err != nil {
		return nil, err
	}
	return h.Store.ReleaseLeases(ctx, worker, refs)
}

func (h *handle) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]store.WorkerWorld, error) {
	if err := h.begin("list_worker_worlds"); err != nil {
		return nil, err
	}
	return h.Store.ListWorkerWorlds(ctx, worker, after, limit)
}

func (h *handle) Heartbeat(ctx context.Context, worker string, capacity int) (store.WorkerInfo, error) {
	if err := h.begin("heartbeat"); err != nil {
		return store.WorkerInfo{}, err
	}
	return h.Store.Heartbeat(ctx, worker, capacity)
}

func (h *handle) SetDraining(ctx context.Context, worker string, draining bool) (store.WorkerInfo, error) {
	if err := h.begin("set_draining"); err != nil {
		return store.WorkerInfo{}, err
	}
	return h.Store.SetDraining(ctx, worker, draining)
}

func (h *handle) Enqueue(ctx context.Context, world string, item store.InboxItem) (uint64, bool, error) {
	if err := h.begin("enqueue"); err != nil {
		return 0, false, err
	}
	return h.Store.Enqueue(ctx, world, item)
}

func (h *handle) ReadInbox(ctx context.Context, world string, after uint64, limit int) ([]store.InboxItem, error) {
	if err := h.begin("read_inbox"); err != nil {
		return nil, err
	}
	return h.Store.ReadInbox(ctx, world, after, limit)
}

func (h *handle) Cursor(ctx context.Context, world string) (uint64, error) {
	if err := h.begin("cursor"); err != nil {
		return 0, err
	}
	return h.Store.Cursor(ctx, world)
}

func (h *handle) ActiveSnapshot(ctx context.Context, world string) (store.Snapshot, bool, error) {
	if err := h.begin("active_snapshot"); err != nil {
		return store.Snapshot{}, false, err
	}
	return h.Store.ActiveSnapshot(ctx, world)
}

func (h *handle) GetWorld(ctx context.Context, world string) (store.World, error) {
	if err := h.begin("get_world"); err != nil {
		return store.World{}, err
	}
	return h.Store.GetWorld(ctx, world)
}

func (h *handle) Claim(ctx context.Context, worker string, kinds []string, n int, ttl time.Duration) ([]store.EffectItem, error) {
	if err := h.begin("claim"); err != nil {
		return nil, err
	}
	return h.Store.Claim(ctx, worker, kinds, n, ttl)
}

func (h *handle) Complete(ctx context.Context, hash string, c store.Claim, rc store.Receipt) (uint64, bool, error) {
	if err := h.begin("complete"); err != nil {
		return 0, false, err
	}
	return h.Store.Complete(ctx, hash, c, rc)
}

func (h *handle) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration) ([]store.TimerItem, error) {
	if err := h.begin("claim_due"); err != nil {
		return nil, err
	}
	return h.Store.ClaimDue(ctx, worker, n, ttl)
}

func (h *handle) Fire(ctx context.Context, hash string, c store.Claim) (uint64, bool, error) {
	if err := h.begin("fire"); err != nil {
		return 0, false, err
	}
	return h.Store.Fire(ctx, hash, c)
}

func (h *handle) Send(ctx context.Context, dest, messageID string, item store.InboxItem) (store.FabricResult, error) {
	if err := h.begin("send"); err != nil {
		return store.FabricResult{}, err
	}
	return h.Store.Send(ctx, dest, messageID, item)
}
