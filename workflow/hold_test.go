package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
)

// inserted is the gated workflow with a step "x" inserted before "b";
// with patch, the insertion is behind Patched (a fix that old runs pass).
func inserted(tl *tally, patch bool) *workflow.Def[int, int] {
	return workflow.New("gated", 1, func(c *workflow.Ctx, in int) (int, error) {
		a, err := workflow.Step(c, "a", func(context.Context) (int, error) { tl.inc("a"); return in + 1, nil })
		if err != nil {
			return 0, err
		}
		if !patch || workflow.Patched(c, "insert-x") {
			if a, err = workflow.Step(c, "x", func(context.Context) (int, error) { tl.inc("x"); return a, nil }); err != nil {
				return 0, err
			}
		}
		b, err := workflow.Step(c, "b", func(context.Context) (int, error) { tl.inc("b"); return a * 10, nil })
		if err != nil {
			return 0, err
		}
		return workflow.Step(c, "c", func(context.Context) (int, error) { tl.inc("c"); return b + 3, nil })
	})
}

// blockOnNewCode starts the gated run on v1 code, stops that worker with
// step b in flight, and lets a worker with a step inserted before b take
// it: the run must end up blocked, with nothing charged twice.
func (r *rig) blockOnNewCode(tl *tally) (*workflow.Client, *workflow.Def[int, int], func(), error) {
	g := newGate(r.Ex)
	v1 := gated(tl, g)
	wfs1, cl, err := r.clientFor(v1)
	if err != nil {
		return nil, nil, nil, err
	}
	wA, err := r.worker("A", r.WorkerStore(), wfs1, nil, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := r.startGated(v1, cl, "step b running on A", g); err != nil {
		return nil, nil, nil, err
	}
	if err := wA.Stop(r.Ctx); err != nil {
		return nil, nil, nil, err
	}
	g.release()
	wfs2, err := workflow.NewWorkflows(inserted(tl, false))
	if err != nil {
		return nil, nil, nil, err
	}
	evB := &events{}
	wB, err := r.worker("B", r.WorkerStore(), wfs2, evB, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	stop := func() { _ = wB.Stop(r.Ctx) }
	// EvPaused follows the release of the lease: the run is free then.
	if _, err := r.waitEvent("B holds the run", evB, workflow.EvPaused, "run"); err != nil {
		stop()
		return nil, nil, nil, err
	}
	if err := r.waitStatus(cl, "run", workflow.StatusBlocked); err != nil {
		stop()
		return nil, nil, nil, err
	}
	if tl.get("x") != 0 || tl.get("a") != 1 || tl.get("c") != 0 {
		stop()
		return nil, nil, nil, fmt.Errorf("executions a=%d x=%d c=%d, want 1, 0, 0", tl.get("a"), tl.get("x"), tl.get("c"))
	}
	return cl, v1, stop, nil
}

func TestDivergentRunIsBlockedNotFailed(t *testing.T) {
	forEachBackend(t, 41, func(r *rig) error {
		tl := newTally()
		cl, _, stop, err := r.blockOnNewCode(tl)
		if err != nil {
			return err
		}
		defer stop()
		sum, err := cl.Get(r.Ctx, "run")
		if err != nil {
			return err
		}
		if want := `blocked: divergent at step 1: recorded "b", got "x"`; sum.Status != workflow.StatusBlocked || sum.Error != want {
			return fmt.Errorf("summary %s %q, want blocked %q", sum.Status, sum.Error, want)
		}
		// The runs projection (run list, the dashboard, the runs metric)
		// says blocked too.
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		proj := projector.NewRuns()
		for _, e := range evs {
			if err := proj.Apply(r.Ctx, "run", e); err != nil {
				return err
			}
		}
		if row, _ := proj.Get("run"); row.Status != projector.StatusBlocked || row.LastError != sum.Error {
			return fmt.Errorf("the runs projection says %q %q, want blocked", row.Status, row.LastError)
		}
		return r.shapesAre("run", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "b", 1},
			{event.RunPaused, "", 1},
		})
	})
}

func TestPatchedFixResumesABlockedRun(t *testing.T) {
	forEachBackend(t, 42, func(r *rig) error {
		tl := newTally()
		cl, v1, stop, err := r.blockOnNewCode(tl)
		if err != nil {
			return err
		}
		defer stop()
		fixed, err := workflow.NewWorkflows(inserted(tl, true))
		if err != nil {
			return err
		}
		wC, err := r.worker("C", r.WorkerStore(), fixed, nil, nil)
		if err != nil {
			return err
		}
		defer wC.Stop(r.Ctx)
		if out, err := v1.Result(r.Ctx, cl, "run"); err != nil || out != 23 {
			return fmt.Errorf("result %v, %v, want 23", out, err)
		}
		if tl.get("x") != 0 || tl.get("a") != 1 || tl.get("c") != 1 {
			return fmt.Errorf("executions a=%d x=%d c=%d, want 1, 0, 1", tl.get("a"), tl.get("x"), tl.get("c"))
		}
		return r.shapesAre("run", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "b", 1},
			{event.RunPaused, "", 1},
			{event.RunResumed, "", 1},
			{event.StepStarted, "b", 2}, {event.StepCompleted, "b", 2},
			{event.StepStarted, "c", 1}, {event.StepCompleted, "c", 1},
			{event.RunCompleted, "", 1},
		})
	})
}

func TestTerminateEndsABlockedRun(t *testing.T) {
	forEachBackend(t, 43, func(r *rig) error {
		tl := newTally()
		cl, v1, stop, err := r.blockOnNewCode(tl)
		if err != nil {
			return err
		}
		defer stop()
		if err := cl.Terminate(r.Ctx, "run", "bad deploy"); err != nil {
			return err
		}
		_, err = v1.Result(r.Ctx, cl, "run")
		var re *workflow.RunError
		if !errors.Is(err, workflow.ErrFailed) || !errors.As(err, &re) || re.Message != "terminated: bad deploy" {
			return fmt.Errorf("result %v, want failed: terminated: bad deploy", err)
		}
		if err := cl.Terminate(r.Ctx, "run", ""); !errors.Is(err, workflow.ErrFinished) {
			return fmt.Errorf("second terminate: %v, want ErrFinished", err)
		}
		return r.shapesAre("run", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "b", 1},
			{event.RunPaused, "", 1},
			{event.RunFailed, "", 1},
		})
	})
}

func TestResetLetsTheNewCodeGoOnFromAStep(t *testing.T) {
	forEachBackend(t, 44, func(r *rig) error {
		tl := newTally()
		cl, v1, stop, err := r.blockOnNewCode(tl)
		if err != nil {
			return err
		}
		defer stop()
		if err := cl.Reset(r.Ctx, "run", 9, ""); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("reset past the steps: %v, want ErrInvalid", err)
		}
		// The blocked worker B (new code) takes it again by itself: the
		// journal moved.
		if err := cl.Reset(r.Ctx, "run", 1, "ship x"); err != nil {
			return err
		}
		if out, err := v1.Result(r.Ctx, cl, "run"); err != nil || out != 23 {
			return fmt.Errorf("result %v, %v, want 23", out, err)
		}
		if tl.get("x") != 1 || tl.get("a") != 1 || tl.get("c") != 1 {
			return fmt.Errorf("executions a=%d x=%d c=%d, want 1 each", tl.get("a"), tl.get("x"), tl.get("c"))
		}
		return r.shapesAre("run", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "b", 1},
			{event.RunPaused, "", 1},
			{event.RunResumed, "", 1},
			{event.StepStarted, "x", 1}, {event.StepCompleted, "x", 1},
			{event.StepStarted, "b", 2}, {event.StepCompleted, "b", 2},
			{event.StepStarted, "c", 1}, {event.StepCompleted, "c", 1},
			{event.RunCompleted, "", 1},
		})
	})
}

// A run whose version no live worker carries is reported unrunnable, not
// running for ever, and Terminate is its way out.
func TestRunNoLiveWorkerCarriesIsUnrunnable(t *testing.T) {
	forEachBackend(t, 45, func(r *rig) error {
		ok := func(_ *workflow.Ctx, in int) (int, error) { return in, nil }
		v1, v2 := workflow.New("pay", 1, ok), workflow.New("pay", 2, ok)
		_, cl, err := r.clientFor(v1, v2)
		if err != nil {
			return err
		}
		if err := v2.Start(r.Ctx, cl, "run", 1); err != nil {
			return err
		}
		if s, err := cl.Get(r.Ctx, "run"); err != nil || s.Status == workflow.StatusUnrunnable {
			return fmt.Errorf("with no worker live at all: %+v, %v, want it waiting", s, err)
		}
		if _, err := r.Store.Heartbeat(r.Ctx, "old", 10, store.Advertise([]string{workflow.Capability("pay", 1)})); err != nil {
			return err
		}
		s, err := cl.Get(r.Ctx, "run")
		if err != nil {
			return err
		}
		if want := "unrunnable: no live worker carries workflow:pay@2 (live: old)"; s.Status != workflow.StatusUnrunnable || s.Error != want {
			return fmt.Errorf("summary %s %q, want unrunnable %q", s.Status, s.Error, want)
		}
		if err := cl.Terminate(r.Ctx, "run", "v2 withdrawn"); err != nil {
			return err
		}
		if s, err := cl.Get(r.Ctx, "run"); err != nil || s.Status != workflow.StatusFailed || s.Error != "terminated: v2 withdrawn" {
			return fmt.Errorf("after terminate: %+v, %v, want failed", s, err)
		}
		return nil
	})
}

// awaitThen is a run that takes step a, awaits "go", sleeps a
// millisecond and then, with extra, takes step x before the gated step b.
func awaitThen(tl *tally, g *gate, extra bool) *workflow.Def[int, int] {
	return workflow.New("awaiting", 1, func(c *workflow.Ctx, in int) (int, error) {
		if _, err := workflow.Step(c, "a", func(context.Context) (int, error) { tl.inc("a"); return in, nil }); err != nil {
			return 0, err
		}
		v, err := workflow.Await[int](c, "go")
		if err != nil {
			return 0, err
		}
		if err := workflow.Sleep(c, time.Millisecond); err != nil {
			return 0, err
		}
		if extra {
			if _, err := workflow.Step(c, "x", func(context.Context) (int, error) { tl.inc("x"); return 0, nil }); err != nil {
				return 0, err
			}
		}
		return workflow.Step(c, "b", func(ctx context.Context) (int, error) {
			tl.inc("b")
			if g != nil {
				return in + v, g.wait(ctx)
			}
			return in + v, nil
		})
	})
}

// TestResetGivesBackTheSignalsOfDiscardedSteps: a run took signal "go",
// slept, and then diverged under new code; reset to its Await, the re-run
// takes the same signal again (as Temporal's reset reapplies signals)
// rather than waiting for ever for a new one, and sleeps again on a timer
// of its own; each re-run waiting step is a new attempt (an attempt's
// events are never written twice).
func TestResetGivesBackTheSignalsOfDiscardedSteps(t *testing.T) {
	forEachBackend(t, 46, func(r *rig) error {
		return r.withTimers(func() error {
			tl, g := newTally(), newGate(r.Ex)
			wfs1, cl, err := r.clientFor(awaitThen(tl, g, false))
			if err != nil {
				return err
			}
			wA, err := r.worker("A", r.WorkerStore(), wfs1, nil, nil)
			if err != nil {
				return err
			}
			if err := cl.Start(r.Ctx, awaitThen(tl, g, false), "run", 1); err != nil {
				return err
			}
			if err := cl.Signal(r.Ctx, "run", "go", 41, "go-1"); err != nil {
				return err
			}
			if err := r.waitEntries("step b running on A", g, 1); err != nil {
				return err
			}
			if err := wA.Stop(r.Ctx); err != nil {
				return err
			}
			g.release()
			v2 := awaitThen(tl, nil, true)
			wfs2, err := workflow.NewWorkflows(v2)
			if err != nil {
				return err
			}
			wB, err := r.worker("B", r.WorkerStore(), wfs2, nil, nil)
			if err != nil {
				return err
			}
			defer wB.Stop(r.Ctx)
			if err := r.waitStatus(cl, "run", workflow.StatusBlocked); err != nil {
				return err
			}
			if err := cl.Reset(r.Ctx, "run", 1, "take go again"); err != nil {
				return err
			}
			if err := r.waitStatus(cl, "run", workflow.StatusCompleted); err != nil {
				return fmt.Errorf("the reset run did not complete (its Await waits for a signal it had taken?): %w", err)
			}
			if out, err := v2.Result(r.Ctx, cl, "run"); err != nil || out != 42 {
				return fmt.Errorf("result %d, %v, want 42 (the same signal's value)", out, err)
			}
			if tl.get("x") != 1 || tl.get("a") != 1 {
				return fmt.Errorf("executions a=%d x=%d, want 1 each", tl.get("a"), tl.get("x"))
			}
			return r.shapesAre("run", []shape{
				{event.RunStarted, "", 1},
				{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
				{event.StepStarted, "sys:await:go", 1}, {event.StepCompleted, "sys:await:go", 1},
				{event.StepStarted, "sys:sleep", 1}, {event.StepCompleted, "sys:sleep", 1},
				{event.StepStarted, "b", 1},
				{event.RunPaused, "", 1},
				{event.RunResumed, "", 1},
				{event.StepStarted, "sys:await:go", 2}, {event.StepCompleted, "sys:await:go", 2},
				{event.StepStarted, "sys:sleep", 2}, {event.StepCompleted, "sys:sleep", 2},
				{event.StepStarted, "x", 1}, {event.StepCompleted, "x", 1},
				{event.StepStarted, "b", 2}, {event.StepCompleted, "b", 2},
				{event.RunCompleted, "", 1},
			})
		})
	})
}

// An Await a reset discards starts again at its next attempt, and the
// signal sent after the reset completes that attempt, not the discarded
// one: the new code, which no longer asks for the step before the Await,
// goes on to its result.
func TestResetReRunsADiscardedAwait(t *testing.T) {
	forEachBackend(t, 46, func(r *rig) error {
		old := workflow.New("screened", 1, func(c *workflow.Ctx, in int) (int, error) {
			for _, s := range []string{"a", "screen"} {
				if _, err := workflow.Step(c, s, func(context.Context) (int, error) { return in, nil }); err != nil {
					return 0, err
				}
			}
			return workflow.Await[int](c, "go")
		})
		cur := workflow.New("screened", 1, func(c *workflow.Ctx, in int) (int, error) {
			if _, err := workflow.Step(c, "a", func(context.Context) (int, error) { return in, nil }); err != nil {
				return 0, err
			}
			v, err := workflow.Await[int](c, "go")
			return v + in, err
		})
		wfs1, cl, err := r.clientFor(old)
		if err != nil {
			return err
		}
		wA, err := r.worker("A", r.WorkerStore(), wfs1, nil, nil)
		if err != nil {
			return err
		}
		if err := old.Start(r.Ctx, cl, "run", 1); err != nil {
			return err
		}
		if err := r.waitStreamLen("A awaits go", "run", 6); err != nil {
			return err
		}
		if err := wA.Stop(r.Ctx); err != nil {
			return err
		}
		wfs2, err := workflow.NewWorkflows(cur)
		if err != nil {
			return err
		}
		evB := &events{}
		wB, err := r.worker("B", r.WorkerStore(), wfs2, evB, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if _, err := r.waitEvent("B holds the run", evB, workflow.EvPaused, "run"); err != nil {
			return err
		}
		if err := r.waitStatus(cl, "run", workflow.StatusBlocked); err != nil {
			return err
		}
		if err := cl.Reset(r.Ctx, "run", 1, "screen removed"); err != nil {
			return err
		}
		if err := cl.Signal(r.Ctx, "run", "go", 41, "k"); err != nil {
			return err
		}
		if out, err := cur.Result(r.Ctx, cl, "run"); err != nil || out != 42 {
			return fmt.Errorf("result %v, %v, want 42", out, err)
		}
		return r.shapesAre("run", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "screen", 1}, {event.StepCompleted, "screen", 1},
			{event.StepStarted, "sys:await:go", 1},
			{event.RunPaused, "", 1},
			{event.RunResumed, "", 1},
			{event.StepStarted, "sys:await:go", 2}, {event.StepCompleted, "sys:await:go", 2},
			{event.RunCompleted, "", 1},
		})
	})
}
