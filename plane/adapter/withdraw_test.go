package adapter_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Archiving a world withdraws its unclaimed effects: a pool that runs
// afterwards executes none of them. An effect a pool had claimed when the
// world was archived (its claim later expired) is withdrawn by the reap
// instead of being handed to another pool.
func TestPoolNeverExecutesAnArchivedWorldsEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		slow := &fake{do: func(ctx context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			if err := sleepCtx(ctx, time.Hour); err != nil {
				return effect.Result{}, err
			}
			return effect.OK(nil), nil
		}}
		cfg := adapter.Config{Worker: "pool-1", Executor: e.ex, ClaimTTL: 2 * time.Minute}
		p1 := newPool(t, e.st, cfg, adapter.Register(slow, adapter.RetryPolicy{}))
		claimed := e.publish(kindTest, "claimed before the archive")
		r1 := run(p1)
		synctest.Wait()
		if err := r1.stop(); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		pending := e.publish(kindTest, "never claimed")
		if _, err := e.st.SetWorldStatus(e.ctx, e.world, store.WorldArchived, "retired"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Minute) // past the first pool's claim
		if n, err := e.st.ReapEffects(e.ctx); err != nil || n != 1 {
			t.Fatalf("reaped %d (%v), want the expired claim", n, err)
		}
		f := &fake{}
		cfg.Worker = "pool-2"
		p2 := newPool(t, e.st, cfg, adapter.Register(f, adapter.RetryPolicy{}))
		r2 := run(p2)
		time.Sleep(time.Minute)
		synctest.Wait()
		if err := r2.stop(); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if calls := f.snapshot(); len(calls) != 0 {
			t.Fatalf("a pool executed %d effects of the archived world", len(calls))
		}
		for _, h := range []string{claimed, pending} {
			if st, err := e.st.EffectStatus(e.ctx, h); err != nil || st.State != vocab.EffectWithdrawn {
				t.Fatalf("effect %s: %+v (%v), want withdrawn", h[:8], st, err)
			}
		}
	})
}
