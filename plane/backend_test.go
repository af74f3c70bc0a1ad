package plane_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/internal/backendtest"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// The integration tests run on every backend: memstore under the lab
// (virtual time), and the real stores under the production executor. Real
// I/O stops no virtual clock, so there time is never waited for: a test
// that needs a lease, a claim or a timer to expire moves the STORE's clock
// (rig.advance), and a test that needs the plane to react waits for a
// condition on the store with a bounded loop on the executor (waitFor).
var backends = backendtest.Backends

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
	clock := &backendtest.Clock{}
	st := backendtest.Open(t, ctx, backend, clock)
	ex := actor.NewExecutor(seed)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	r := &rig{backend: backend, ctx: ctx, root: sys.Root(), ex: ex, base: st,
		advance: func(d time.Duration) error { clock.Advance(d); return nil },
		poll:    2 * time.Millisecond, polls: 2500}
	err := body(r)
	if _, cerr := sys.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
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

type handle = backendtest.Handle

func (r *rig) handle(hook func(op string) error) *handle { return backendtest.NewHandle(r.base, hook) }

// hostConfig is the tests' host configuration on this rig. On a real
// store the host runs on the machine's clock, so its lease is long enough
// that a loaded machine cannot make a renewal late by accident (only the
// store's clock, moved by the test, expires it), and the backstop scan is
// frequent, since moving the store's clock raises no hint.
func (r *rig) hostConfig(worker string, st store.Store, replies *plane.Replies) plane.HostConfig {
	cfg := hostConfig(worker, st, replies)
	if r.real() {
		cfg.LeaseTTL, cfg.SyncEvery = 10*time.Second, 100*time.Millisecond
	}
	return cfg
}
