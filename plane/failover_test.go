package plane_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// workload sends adds [from, to) to world id, acknowledged.
func workload(ctx context.Context, c *plane.Client, id string, from, to int) error {
	for i := from; i < to; i++ {
		if _, err := c.Send(ctx, id, Add{By: int64(i*i + 1), Key: fmt.Sprint("k", i)}, fmt.Sprint("k", i)); err != nil {
			return err
		}
	}
	return nil
}

func drained(env *lab.Env, st store.Store, id string) error {
	return testrig.WaitLab(env, id+" drained", 30*time.Second, func() (bool, error) {
		items, err := st.ReadInbox(env.Ctx, id, 0, 0)
		if err != nil {
			return false, err
		}
		cur, err := st.Cursor(env.Ctx, id)
		return len(items) == 0 || cur == items[len(items)-1].Seq, err
	})
}

// failoverRun runs the workload on world f, failing worker A over to
// worker B halfway when failover is set, and returns the final state.
func failoverRun(r *rig, f, A, B string, failover bool) (state []byte, err error) {
	ctx := r.Ctx
	if err := createAssigned(ctx, r.Store, f, A); err != nil {
		return nil, err
	}
	stA := r.handle(nil)
	a, err := plane.StartHost(ctx, r.Root, r.hostConfig(A, stA, nil))
	if err != nil {
		return nil, err
	}
	c, _ := plane.NewClient(plane.ClientConfig{Store: r.Store, Kernels: kernels(), Executor: r.Ex})
	if err := workload(ctx, c, f, 0, 20); err != nil {
		return nil, err
	}
	if err := r.drained(f); err != nil {
		return nil, err
	}
	if failover {
		// A dies holding its lease; B is assigned and takes over once
		// the lease expires, from the baseline plus the tail.
		stA.Crash()
		a.Kill(ctx)
		if err := r.Advance(r.hostConfig(A, nil, nil).LeaseTTL); err != nil {
			return nil, err
		}
		if err := r.Store.Assign(ctx, f, store.Assignment{DesiredWorker: B}, nil); err != nil {
			return nil, err
		}
		b, err := plane.StartHost(ctx, r.Root, r.hostConfig(B, r.handle(nil), nil))
		if err != nil {
			return nil, err
		}
		defer b.Stop(ctx)
		if err := r.WaitFor(B+" holds "+f, 10*time.Second, func() (bool, error) {
			_, ok := b.Lease(f)
			return ok, nil
		}); err != nil {
			return nil, err
		}
		if l, _, _ := r.Store.GetLease(ctx, f); l.Epoch != 2 || l.Holder != B {
			return nil, fmt.Errorf("lease after failover %+v, want %s at epoch 2", l, B)
		}
	} else {
		defer a.Stop(ctx)
	}
	if err := workload(ctx, c, f, 20, 40); err != nil {
		return nil, err
	}
	if err := r.drained(f); err != nil {
		return nil, err
	}
	s, err := parity(ctx, r.Store, f)
	return s.State, err
}

// TestLeaseFailoverByteIdentical (the runtime plane contract): worker A loses its lease
// halfway through a workload and worker B resumes the world from its
// baseline plus the journal tail; the end state is byte for byte the one
// of a run without failover.
func TestLeaseFailoverByteIdentical(t *testing.T) {
	forEachBackend(t, 7, "failover", func(r *rig) error {
		got, err := failoverRun(r, "f", "A", "B", true)
		if err != nil {
			return err
		}
		// The run without failover, on another world of the same store
		// (state bytes do not name their world).
		want, err := failoverRun(r, "g", "C", "D", false)
		if err != nil {
			return err
		}
		if string(got) != string(want) || len(want) == 0 {
			return fmt.Errorf("state after failover %x\nwithout failover %x", got, want)
		}
		return nil
	})
}

// TestTimerSurvivesCrashAndMigration (the runtime plane contract): a timer set by a world on
// worker A survives A's crash, fires once after the world moved to worker
// B, and B applies its firing exactly once. The firing is B's own (the
// acquisition told it when the timer is due), racing the store's
// ClaimDue and Fire as the timer worker does them.
func TestTimerSurvivesCrashAndMigration(t *testing.T) {
	forEachBackend(t, 8, "timer-migration", func(r *rig) error {
		ctx := r.Ctx
		if err := createAssigned(ctx, r.Store, "t", "A"); err != nil {
			return err
		}
		stA := r.handle(nil)
		a, err := plane.StartHost(ctx, r.Root, r.hostConfig("A", stA, nil))
		if err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: r.Store, Kernels: kernels(), Executor: r.Ex})
		if _, err := c.Send(ctx, "t", Arm{AfterMs: 5000}, "arm"); err != nil {
			return err
		}
		if err := r.drained("t"); err != nil {
			return err
		}
		timers, err := r.Store.ListTimers(ctx, "t", 10)
		if err != nil || len(timers) != 1 {
			return fmt.Errorf("timers after arming: %v %v", timers, err)
		}
		stA.Crash()
		a.Kill(ctx)
		if err := r.Store.Assign(ctx, "t", store.Assignment{DesiredWorker: "B"}, nil); err != nil {
			return err
		}
		b, err := plane.StartHost(ctx, r.Root, r.hostConfig("B", r.handle(nil), nil))
		if err != nil {
			return err
		}
		defer b.Stop(ctx)
		if due, err := r.Store.ClaimDue(ctx, "timer-worker", 10, time.Second); err != nil || len(due) != 0 {
			return fmt.Errorf("timers due before their time: %v %v", due, err)
		}
		// Past A's lease and the timer's due time.
		if err := r.Advance(max(6*time.Second, r.hostConfig("A", nil, nil).LeaseTTL)); err != nil {
			return err
		}
		if err := r.WaitFor("B holds t", 10*time.Second, func() (bool, error) {
			_, ok := b.Lease("t")
			return ok, nil
		}); err != nil {
			return err
		}
		// B, told by the acquisition that t's timer is due, wakes t and
		// fires it itself; a timer worker's claim and Fire race it: a Fire
		// second to a delivery is a duplicate, one after B's direct
		// firing committed finds no timer.
		due, err := r.Store.ClaimDue(ctx, "timer-worker", 10, time.Second)
		if err != nil || len(due) > 1 {
			return fmt.Errorf("due timers %v %v", due, err)
		}
		for _, d := range due {
			if _, _, err := r.Store.Fire(ctx, d.IntentHash, d.ClaimOf()); errors.Is(err, store.ErrNotFound) {
				continue
			} else if err != nil {
				return fmt.Errorf("fire: %v", err)
			}
			if _, dup, err := r.Store.Fire(ctx, d.IntentHash, d.ClaimOf()); err != nil || !dup {
				return fmt.Errorf("second fire: dup %v %v", dup, err)
			}
		}
		if err := r.WaitFor("t's timer fired", 10*time.Second, func() (bool, error) {
			ts, err := r.Store.ListTimers(ctx, "t", 10)
			return len(ts) == 0, err
		}); err != nil {
			return err
		}
		if err := r.drained("t"); err != nil {
			return err
		}
		items, err := r.Store.ReadInbox(ctx, "t", 0, 0)
		if err != nil {
			return err
		}
		if n := len(slices.DeleteFunc(items, func(it store.InboxItem) bool { return it.Kind != vocab.KindTimer })); n > 1 {
			return fmt.Errorf("%d firings of t's timer in its inbox, want at most 1", n)
		}
		if ran, err := timerRuns(ctx, r.Store, "t"); err != nil || len(ran) != 1 {
			return fmt.Errorf("firings of t's timers that ran %v (%v), want one", ran, err)
		}
		s, err := parity(ctx, r.Store, "t")
		if err != nil {
			return err
		}
		v, err := value(s, "t")
		if err != nil || v.Ticks != 1 {
			return fmt.Errorf("ticks %d, want 1 (%v)", v.Ticks, err)
		}
		if epoch, ok := b.Lease("t"); !ok || epoch != 2 {
			return fmt.Errorf("B's epoch %d (held %v), want 2", epoch, ok)
		}
		return nil
	})
}

// TestForkBootsAtSnapshotWithoutPendingEffects (the runtime plane contract): a fork boots at
// exactly the source snapshot's state, with no pending effects, timers or
// awaited intents, and runs on its own without re-publishing the source's
// effects.
func TestForkBootsAtSnapshotWithoutPendingEffects(t *testing.T) {
	forEachBackend(t, 9, "fork", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		if err := createAssigned(ctx, st, "src", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(ctx, r.Root, r.hostConfig("A", st, nil))
		if err != nil {
			return err
		}
		defer h.Stop(ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: r.Ex})
		for i, v := range []any{Add{By: 3, Key: "a"}, Pay{}, Arm{AfterMs: 60000}, Add{By: 4, Key: "b"}} {
			if _, err := c.Send(ctx, "src", v, fmt.Sprint(i)); err != nil {
				return err
			}
		}
		if err := r.drained("src"); err != nil {
			return err
		}
		snap, ok, err := st.ActiveSnapshot(ctx, "src")
		if err != nil || !ok || snap.Height != 4 {
			return fmt.Errorf("source snapshot %d %v %v, want height 4", snap.Height, ok, err)
		}
		src, err := world.Load(counterDef(), "src", world.Snapshot{Height: snap.Height, State: snap.State})
		if err != nil || len(src.Awaiting()) != 1 || len(src.Timers()) != 1 {
			return fmt.Errorf("the source should await one effect and one timer: %v", err)
		}
		ops, err := plane.NewOps(st, kernels())
		if err != nil {
			return err
		}
		rec, err := ops.WorldFork(ctx, "src", 0, "fork")
		if err != nil {
			return err
		}
		if rec.ParentWorld != "src" || rec.ForkedAtHeight != 4 || rec.ParentSnapshotHash != snap.StateHash {
			return fmt.Errorf("lineage %+v", rec)
		}
		if again, err := ops.WorldFork(ctx, "src", 4, "fork"); err != nil || again.ID != "fork" {
			return fmt.Errorf("a repeated fork: %v", err)
		}
		if _, err := ops.WorldFork(ctx, "src", 8, "fork"); !errors.Is(err, plane.ErrConflict) && !errors.Is(err, store.ErrSnapshotNotFound) {
			return fmt.Errorf("another fork under the same id: %v", err)
		}
		booted, _, err := plane.Restore(ctx, st, kernels(), "fork")
		if err != nil {
			return err
		}
		fv, _ := value(booted.Snapshot(), "fork")
		sv, _ := src.Value()
		if fmt.Sprint(fv) != fmt.Sprint(sv) || booted.Height() != 4 {
			return fmt.Errorf("fork boots at %d %+v, source snapshot %+v", booted.Height(), fv, sv)
		}
		if len(booted.Awaiting()) != 0 || len(booted.Timers()) != 0 {
			return fmt.Errorf("fork awaits %v and timers %v", booted.Awaiting(), booted.Timers())
		}
		effects, _ := st.ListEffects(ctx, "fork", 0, 100)
		timers, _ := st.ListTimers(ctx, "fork", 100)
		if len(effects)+len(timers) != 0 {
			return fmt.Errorf("fork has %d effects and %d timers queued", len(effects), len(timers))
		}
		before, _ := st.QueueDepths(ctx)
		if err := st.Assign(ctx, "fork", store.Assignment{DesiredWorker: "A"}, nil); err != nil {
			return err
		}
		if _, err := c.Send(ctx, "fork", Add{By: 10, Key: "f"}, "f"); err != nil {
			return err
		}
		if err := r.drained("fork"); err != nil {
			return err
		}
		after, _ := st.QueueDepths(ctx)
		if after.EffectsPending != before.EffectsPending || after.TimersScheduled != before.TimersScheduled {
			return fmt.Errorf("running the fork queued effects or timers: %+v -> %+v", before, after)
		}
		got, err := c.State(ctx, "fork")
		if err != nil {
			return err
		}
		v, _ := value(got, "fork")
		if v.N != 17 || got.Height != 5 {
			return fmt.Errorf("fork after one add: %+v at %d", v, got.Height)
		}
		return nil
	})
}
