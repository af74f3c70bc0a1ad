package workflow_test

import (
	"context"
	"errors"
	"fmt"

	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow"
)

func constStep(c *workflow.Ctx, name, v string) (string, error) {
	return workflow.Step(c, name, func(context.Context) (string, error) { return v, nil })
}

// payOld is version 1 of "pay" before the patch: after step a it waits
// for signal "go".
func payOld() *workflow.Def[int, string] {
	return workflow.New("pay", 1, func(c *workflow.Ctx, _ int) (string, error) {
		a, err := constStep(c, "a", "a")
		if err != nil {
			return "", err
		}
		g, err := workflow.Await[string](c, "go")
		return a + "/old:" + g, err
	})
}

// payPatched is the same version with patch "fast": new runs run step
// b-new instead of waiting.
func payPatched() *workflow.Def[int, string] {
	return workflow.New("pay", 1, func(c *workflow.Ctx, _ int) (string, error) {
		a, err := constStep(c, "a", "a")
		if err != nil {
			return "", err
		}
		if workflow.Patched(c, "fast") {
			if !workflow.Patched(c, "fast") {
				return "", errors.New("a patch asked for again answered otherwise")
			}
			n, err := constStep(c, "b-new", "new")
			return a + "/" + n, err
		}
		g, err := workflow.Await[string](c, "go")
		return a + "/old:" + g, err
	})
}

// payDeprecated is the code once no run can take the old path: the patch
// is deprecated, only the new path is left.
func payDeprecated() *workflow.Def[int, string] {
	return workflow.New("pay", 1, func(c *workflow.Ctx, _ int) (string, error) {
		a, err := constStep(c, "a", "a")
		if err != nil {
			return "", err
		}
		workflow.DeprecatePatch(c, "fast")
		n, err := constStep(c, "b-new", "new")
		return a + "/" + n, err
	})
}

// A run started under code without the patch and taken over (after a
// crash on memstore, a restart on the SQL stores) by a worker whose code
// has `if Patched(...) {new} else {old}` finishes on the old path without
// divergence; a new run takes the new path and records the marker; both
// replay under the patched code, and under the deprecated code once the
// patch is retired.
func TestPatchedKeepsRunsInFlightOnTheOldPath(t *testing.T) {
	forEachBackend(t, 41, func(r *rig) error {
		old, patched, deprecated := payOld(), payPatched(), payDeprecated()
		oldWfs, err := workflow.NewWorkflows(old)
		if err != nil {
			return err
		}
		newWfs, cl, err := r.clientFor(patched)
		if err != nil {
			return err
		}
		hA := r.WorkerStore()
		wA, err := r.worker("A", hA, oldWfs, nil, nil)
		if err != nil {
			return err
		}
		if err := old.Start(r.Ctx, cl, "old-run", 1); err != nil {
			return err
		}
		// RunStarted, a's start and completion, the await's start: the
		// run waits on the old path.
		if err := r.waitStreamLen("the old run's wait", "old-run", 4); err != nil {
			return err
		}
		if h, ok := hA.(interface{ Crash() }); ok {
			h.Crash()
			wA.Kill(r.Ctx)
		} else if err := wA.Stop(r.Ctx); err != nil {
			return err
		}
		wB, err := r.worker("B", r.WorkerStore(), newWfs, nil, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if err := cl.Signal(r.Ctx, "old-run", "go", "sig", "k"); err != nil {
			return err
		}
		if got, err := patched.Result(r.Ctx, cl, "old-run"); err != nil || got != "a/old:sig" {
			return fmt.Errorf("the old run: %q, %v; want a/old:sig (the old path, no divergence)", got, err)
		}
		if got, err := startResult(r, patched, cl, "new-run", 2); err != nil || got != "a/new" {
			return fmt.Errorf("the new run: %q, %v; want a/new (the patched path)", got, err)
		}
		oldStream, err := r.streamShapes("old-run", []shape{{event.RunStarted, "", 1}, {event.StepStarted, "a", 1},
			{event.StepCompleted, "a", 1}, {event.StepStarted, "sys:await:go", 1}, {event.StepCompleted, "sys:await:go", 1},
			{event.RunCompleted, "", 1}})
		if err != nil {
			return fmt.Errorf("the old run recorded a marker or another path: %w", err)
		}
		newStream, err := r.streamIs("new-run", "pay", 1, []shape{{event.RunStarted, "", 1}, {event.StepStarted, "a", 1},
			{event.StepCompleted, "a", 1}, {event.StepStarted, "sys:patch:fast", 1}, {event.StepCompleted, "sys:patch:fast", 1},
			{event.StepStarted, "b-new", 1}, {event.StepCompleted, "b-new", 1}, {event.RunCompleted, "", 1}})
		if err != nil {
			return fmt.Errorf("the new run's marker: %w", err)
		}
		for _, c := range []struct {
			name   string
			def    workflow.Workflow
			stream []event.Envelope
			want   string
		}{
			{"the old run under the patched code", patched, oldStream, "a/old:sig"},
			{"the new run under the patched code", patched, newStream, "a/new"},
			{"the old run under the old code", old, oldStream, "a/old:sig"},
			{"the new run under the deprecated patch", deprecated, newStream, "a/new"},
		} {
			out, err := workflow.Replay(c.def, c.stream)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			var got string
			if err := event.Unmarshal(out, &got); err != nil || got != c.want {
				return fmt.Errorf("%s replays to %q, %v", c.name, got, err)
			}
		}
		// Code without the patch, given the new run's history, meets the
		// marker where it asks for its wait: the divergence names it.
		var div *workflow.DivergenceError
		if _, err := workflow.Replay(old, newStream); !errors.As(err, &div) || div.StepIndex != 1 ||
			div.Recorded != "sys:patch:fast" || div.Got != "sys:await:go" {
			return fmt.Errorf("the new run under the old code: %v, want a divergence at the marker", err)
		}
		// A run started once the patch is deprecated records no marker,
		// and replays under that code.
		wB.Stop(r.Ctx)
		depWfs, cl2, err := r.clientFor(deprecated)
		if err != nil {
			return err
		}
		wC, err := r.worker("C", r.WorkerStore(), depWfs, nil, nil)
		if err != nil {
			return err
		}
		defer wC.Stop(r.Ctx)
		if got, err := startResult(r, deprecated, cl2, "late-run", 3); err != nil || got != "a/new" {
			return fmt.Errorf("a run under the deprecated patch: %q, %v", got, err)
		}
		lateStream, err := r.streamShapes("late-run", []shape{{event.RunStarted, "", 1}, {event.StepStarted, "a", 1},
			{event.StepCompleted, "a", 1}, {event.StepStarted, "b-new", 1}, {event.StepCompleted, "b-new", 1}, {event.RunCompleted, "", 1}})
		if err != nil {
			return err
		}
		if _, err := workflow.Replay(deprecated, lateStream); err != nil {
			return fmt.Errorf("the late run under the deprecated patch: %w", err)
		}
		return nil
	})
}
