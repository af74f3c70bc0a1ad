package adapter_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/store"
)

// kit is one integration test's environment over one backend: memstore
// inside a synctest bubble (virtual time), or a real store under the
// production executor, where the store's clock is moved instead of
// waiting and conditions are awaited with a bounded loop on the executor.
type kit struct {
	*env
	backend string
	clock   *testrig.Clock // real stores only
}

// onBackends runs body as a subtest per backend.
func onBackends(t *testing.T, body func(t *testing.T, k *kit)) {
	for _, b := range testrig.Backends() {
		t.Run(b, func(t *testing.T) {
			if b == "memstore" {
				synctest.Test(t, func(t *testing.T) { body(t, &kit{env: newEnv(t), backend: b}) })
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			clock := &testrig.Clock{}
			st := testrig.Open(t, ctx, b, clock)
			body(t, &kit{env: envOn(t, ctx, st, actor.NewExecutor(7)), backend: b, clock: clock})
		})
	}
}

// envOn is newEnv over a given store.
func envOn(t *testing.T, ctx context.Context, st store.Store, ex actor.Executor) *env {
	t.Helper()
	e := &env{t: t, ctx: ctx, st: st, ex: ex, world: "w1"}
	e.createWorld("w1")
	l, err := st.Acquire(ctx, "w1", "host-1", store.MaxTTL)
	if err != nil {
		t.Fatal(err)
	}
	e.epoch = l.Epoch
	return e
}

// handle is a process's handle over the kit's store, with a fault hook.
func (k *kit) handle(hook func(op string) error) *testrig.Handle {
	return testrig.NewHandle(k.st, hook)
}

// advance lets d pass on the store's clock: virtual time in the bubble
// (for everybody), the store's clock alone on a real store.
func (k *kit) advance(d time.Duration) {
	if k.clock == nil {
		time.Sleep(d)
		return
	}
	k.clock.Advance(d)
}

// waitFor waits until cond holds, for at most limit of virtual time in
// the bubble, or a bounded number of short parks on the executor.
func (k *kit) waitFor(what string, limit time.Duration, cond func() bool) {
	k.t.Helper()
	step, turns := 100*time.Millisecond, int(limit/(100*time.Millisecond))
	if k.clock != nil {
		step, turns = 2*time.Millisecond, int(limit/time.Second+1)*2500
	}
	for i := 0; !cond(); i++ {
		if i >= turns {
			k.t.Fatalf("timed out waiting for %s", what)
		}
		if k.clock == nil {
			time.Sleep(step)
		} else if err := actor.Sleep(k.ctx, k.ex, step); err != nil {
			k.t.Fatal(err)
		}
	}
}

// reaper runs the effect reaper over st: every half claim TTL in the
// bubble; every few milliseconds on a real store, whose clock the test
// moves past the claims.
func (k *kit) reaper(st store.Store, ttl time.Duration) (stop func()) {
	job := reaper.Effects(st, ttl)
	if k.clock != nil {
		job.Every = 5 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reaper.Run(ctx, reaper.Config{Executor: k.ex}, job) }()
	return func() { cancel(); <-done }
}
