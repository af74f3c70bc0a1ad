package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
)

// gated runs "a", then "b" (which waits at the gate), then "c", counting
// each execution.
func gated(tl *tally, g *gate) *workflow.Def[int, int] {
	return workflow.New("gated", 1, func(c *workflow.Ctx, in int) (int, error) {
		a, err := workflow.Step(c, "a", func(context.Context) (int, error) { tl.inc("a"); return in + 1, nil })
		if err != nil {
			return 0, err
		}
		b, err := workflow.Step(c, "b", func(ctx context.Context) (int, error) {
			tl.inc("b")
			if err := g.wait(ctx); err != nil {
				return 0, err
			}
			return a * 10, nil
		})
		if err != nil {
			return 0, err
		}
		return workflow.Step(c, "c", func(context.Context) (int, error) { tl.inc("c"); return b + 3, nil })
	})
}

// startGated starts the gated run "run" of def and waits until its step
// b is running (what).
func (r *rig) startGated(def *workflow.Def[int, int], cl *workflow.Client, what string, g *gate) error {
	if err := def.Start(r.Ctx, cl, "run", 1); err != nil {
		return err
	}
	return r.waitEntries(what, g, 1)
}

// bRanTwice is the stream of a gated run whose step b ran again.
func bRanTwice() []shape {
	return []shape{
		{event.RunStarted, "", 1},
		{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
		{event.StepStarted, "b", 1},
		{event.StepStarted, "b", 2}, {event.StepCompleted, "b", 2},
		{event.StepStarted, "c", 1}, {event.StepCompleted, "c", 1},
		{event.RunCompleted, "", 1},
	}
}

// gated is a fresh tally and gate and the gated workflow on them.
func (r *rig) gated() (*tally, *gate, *workflow.Def[int, int]) {
	tl, g := newTally(), newGate(r.Ex)
	return tl, g, gated(tl, g)
}

func TestCrashRecoveryRerunsOnlyTheStepInFlight(t *testing.T) {
	forEachBackend(t, 3, func(r *rig) error {
		tl, g, def := r.gated()
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		hA := r.WorkerStore()
		evA, evB := &events{}, &events{}
		wA, err := r.worker("A", hA, wfs, evA, nil)
		if err != nil {
			return err
		}
		if err := r.startGated(def, cl, "step b running on A", g); err != nil {
			return err
		}
		// A dies mid-step: nothing is released (and on memstore its store
		// handle dies with it).
		if m, ok := hA.(*memstore.Store); ok {
			m.Crash()
		}
		wA.Kill(r.Ctx)
		crashedAt := r.Ex.Now()
		if r.Real() {
			// Only the store's clock decides when A's lease expires.
			if err := r.Advance(11 * time.Second); err != nil {
				return err
			}
		}
		wB, err := r.worker("B", r.WorkerStore(), wfs, evB, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		g.release()
		got, err := def.Result(r.Ctx, cl, "run")
		if err != nil {
			return err
		}
		if got != 23 {
			return fmt.Errorf("result %d, want 23", got)
		}
		acq, ok := evB.find(workflow.EvAcquired, "run")
		if !ok || acq.Epoch != 2 || acq.At.Sub(crashedAt) < 0 {
			return fmt.Errorf("B's acquisition %+v, want epoch 2 after the crash", acq)
		}
		if a, b, c := tl.get("a"), tl.get("b"), tl.get("c"); a != 1 || b != 2 || c != 1 {
			return fmt.Errorf("executions a=%d b=%d c=%d, want 1, 2 (the step in flight again), 1", a, b, c)
		}
		evs, err := r.streamIs("run", "gated", 1, bRanTwice())
		if err != nil {
			return err
		}
		// The stream replays to the same result, running nothing.
		out, err := workflow.Replay(def, evs)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		var v int
		if err := event.Unmarshal(out, &v); err != nil || v != 23 {
			return fmt.Errorf("replayed output %d, %v", v, err)
		}
		if a, b, c := tl.get("a"), tl.get("b"), tl.get("c"); a != 1 || b != 2 || c != 1 {
			return fmt.Errorf("the replay ran steps: a=%d b=%d c=%d", a, b, c)
		}
		return nil
	})
}

func TestDeposedWorkerIsFencedAndStops(t *testing.T) {
	onMemstore(t, 4, func(r *rig) error {
		_, g, def := r.gated()
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		// A's renewals fail as calls (a partition), so A never learns from
		// them that its lease is gone.
		hA, partitioned := r.partitionable()
		evA, evB := &events{}, &events{}
		wA, err := r.worker("A", hA, wfs, evA, nil)
		if err != nil {
			return err
		}
		defer wA.Stop(r.Ctx)
		if err := r.startGated(def, cl, "step b running on A", g); err != nil {
			return err
		}
		partitioned.Store(true)
		// An operator revokes the lease (pause, then resume) and B takes
		// the run at the next epoch while A, unaware, still runs step b.
		if _, err := r.Store.SetWorldStatus(r.Ctx, "run", store.WorldPaused, "test"); err != nil {
			return err
		}
		if _, err := r.Store.SetWorldStatus(r.Ctx, "run", store.WorldActive, "test"); err != nil {
			return err
		}
		wB, err := r.worker("B", r.WorkerStore(), wfs, evB, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if err := r.waitEntries("step b running on B too", g, 2); err != nil {
			return err
		}
		if _, fenced := evA.find(workflow.EvFenced, "run"); fenced {
			return errors.New("A stopped before its write was attempted: the test would not show the store's fence")
		}
		g.release()
		if got, err := def.Result(r.Ctx, cl, "run"); err != nil || got != 23 {
			return fmt.Errorf("result %d, %v; want 23", got, err)
		}
		ev, err := r.waitEvent("A fenced", evA, workflow.EvFenced, "run")
		if err != nil {
			return err
		}
		if !errors.Is(ev.Err, store.ErrFenced) || ev.Epoch != 1 {
			return fmt.Errorf("A's fence %+v (err %v), want store.ErrFenced at epoch 1", ev, ev.Err)
		}
		var se *store.Error
		if !errors.As(ev.Err, &se) {
			return fmt.Errorf("A's fence %v did not come from the store", ev.Err)
		}
		if got := wA.Runs(); len(got) != 0 {
			return fmt.Errorf("A still holds %v", got)
		}
		return r.bRanAgainUnrecorded("the deposed worker")
	})
}

func TestChangedStepOrderIsADivergence(t *testing.T) {
	onMemstore(t, 5, func(r *rig) error {
		tl, g := newTally(), newGate(r.Ex)
		v1 := gated(tl, g)
		// The same workflow and version with a step inserted before "b".
		changed := workflow.New("gated", 1, func(c *workflow.Ctx, in int) (int, error) {
			a, err := workflow.Step(c, "a", func(context.Context) (int, error) { tl.inc("a"); return in + 1, nil })
			if err != nil {
				return 0, err
			}
			x, err := workflow.Step(c, "x", func(context.Context) (int, error) { tl.inc("x"); return a, nil })
			if err != nil {
				return 0, err
			}
			return workflow.Step(c, "b", func(context.Context) (int, error) { tl.inc("b"); return x, nil })
		})
		wfs1, err := workflow.NewWorkflows(v1)
		if err != nil {
			return err
		}
		wfs2, err := workflow.NewWorkflows(changed)
		if err != nil {
			return err
		}
		cl, err := r.client(wfs1)
		if err != nil {
			return err
		}
		hA := r.Mem.Restart()
		wA, err := r.worker("A", hA, wfs1, nil, nil)
		if err != nil {
			return err
		}
		if err := r.startGated(v1, cl, "step b running", g); err != nil {
			return err
		}
		hA.Crash()
		wA.Kill(r.Ctx)
		evB := &events{}
		wB, err := r.worker("B", r.WorkerStore(), wfs2, evB, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		// The divergence holds the run (blocked), it does not fail it.
		if err := r.waitStatus(cl, "run", workflow.StatusBlocked); err != nil {
			return err
		}
		sum, err := cl.Get(r.Ctx, "run")
		if err != nil {
			return err
		}
		if want := `blocked: divergent at step 1: recorded "b", got "x"`; sum.Error != want {
			return fmt.Errorf("summary %q, want %q", sum.Error, want)
		}
		ev, ok := evB.find(workflow.EvDiverged, "run")
		var div *workflow.DivergenceError
		if !ok || !errors.As(ev.Err, &div) || div.StepIndex != 1 || div.Recorded != "b" || div.Got != "x" {
			return fmt.Errorf("B's divergence %v, want step 1: recorded b, got x", ev.Err)
		}
		if tl.get("x") != 0 || tl.get("a") != 1 {
			return fmt.Errorf("executions a=%d x=%d, want 1 and 0", tl.get("a"), tl.get("x"))
		}
		held := []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "b", 1},
			{event.RunPaused, "", 1},
		}
		evs, err := r.streamShapes("run", held)
		if err != nil {
			return err
		}
		// Replaying the changed function reports the same divergence.
		if _, err := workflow.Replay(changed, evs); !errors.As(err, &div) || div.Got != "x" {
			return fmt.Errorf("replay of the changed function: %v", err)
		}
		// A second worker with the same changed code diverges too, but
		// records nothing: the run does not flip between held and resumed.
		evB2 := &events{}
		wB2, err := r.worker("B2", r.WorkerStore(), wfs2, evB2, nil)
		if err != nil {
			return err
		}
		defer wB2.Stop(r.Ctx)
		if _, err := r.waitEvent("B2 diverges", evB2, workflow.EvDiverged, "run"); err != nil {
			return err
		}
		if _, err := r.streamShapes("run", held); err != nil {
			return err
		}
		// A rollback (the original code) resumes it by itself.
		g.release()
		wC, err := r.worker("C", r.WorkerStore(), wfs1, nil, nil)
		if err != nil {
			return err
		}
		defer wC.Stop(r.Ctx)
		if out, err := v1.Result(r.Ctx, cl, "run"); err != nil || out != 23 {
			return fmt.Errorf("result %v, %v after the rollback, want 23", out, err)
		}
		if _, err := r.streamShapes("run", append(held,
			shape{event.RunResumed, "", 1},
			shape{event.StepStarted, "b", 2}, shape{event.StepCompleted, "b", 2},
			shape{event.StepStarted, "c", 1}, shape{event.StepCompleted, "c", 1},
			shape{event.RunCompleted, "", 1})); err != nil {
			return err
		}
		// Bounded: each old-code worker tried the held run once.
		if n, n2 := evB.count(workflow.EvDiverged, "run"), evB2.count(workflow.EvDiverged, "run"); n != 1 || n2 != 1 {
			return fmt.Errorf("divergences B=%d B2=%d, want 1 each", n, n2)
		}
		if tl.get("x") != 0 || tl.get("a") != 1 {
			return fmt.Errorf("executions a=%d x=%d, want 1 and 0", tl.get("a"), tl.get("x"))
		}
		return nil
	})
}

// waitStatus waits until the run's status is want.
func (r *rig) waitStatus(cl *workflow.Client, run string, want workflow.RunStatus) error {
	return r.WaitFor("run "+run+" "+string(want), time.Minute, func() (bool, error) {
		s, err := cl.Get(r.Ctx, run)
		if err != nil {
			return false, err
		}
		return s.Status == want, nil
	})
}

func TestStopReleasesSoAnotherWorkerTakesOverAtOnce(t *testing.T) {
	onMemstore(t, 19, func(r *rig) error {
		tl, g, def := r.gated()
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		wA, err := r.worker("A", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := r.startGated(def, cl, "step b running on A", g); err != nil {
			return err
		}
		evB := &events{}
		wB, err := r.worker("B", r.WorkerStore(), wfs, evB, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if err := wA.Stop(r.Ctx); err != nil {
			return err
		}
		stoppedAt := r.Ex.Now()
		g.release()
		if v, err := def.Result(r.Ctx, cl, "run"); err != nil || v != 23 {
			return fmt.Errorf("result %d, %v", v, err)
		}
		acq, ok := evB.find(workflow.EvAcquired, "run")
		if !ok || acq.Epoch != 2 {
			return fmt.Errorf("B's acquisition %+v", acq)
		}
		// The lease was released: B did not wait for its 2s TTL.
		if d := acq.At.Sub(stoppedAt); d >= time.Second {
			return fmt.Errorf("B took the run %v after A stopped", d)
		}
		if tl.get("b") != 2 || tl.get("a") != 1 {
			return fmt.Errorf("executions a=%d b=%d", tl.get("a"), tl.get("b"))
		}
		return nil
	})
}
