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
)

// threeSteps adds, doubles and adds again, counting each execution.
func threeSteps(t *tally) *workflow.Def[int, int] {
	return workflow.New("three", 1, func(c *workflow.Ctx, in int) (int, error) {
		a, err := workflow.Step(c, "add", func(context.Context) (int, error) { t.inc("add"); return in + 1, nil })
		if err != nil {
			return 0, err
		}
		b, err := workflow.Step(c, "double", func(context.Context) (int, error) { t.inc("double"); return a * 2, nil })
		if err != nil {
			return 0, err
		}
		return workflow.Step(c, "add", func(context.Context) (int, error) { t.inc("add#2"); return b + 1, nil })
	})
}

func TestThreeStepRunCompletes(t *testing.T) {
	forEachBackend(t, 1, func(r *rig) error {
		tl := newTally()
		def := threeSteps(tl)
		_, w, cl, err := r.serve("w1", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		got, err := startResult(r, def, cl, "run-1", 5)
		if err != nil {
			return err
		}
		if got != 13 {
			return fmt.Errorf("result %d, want 13", got)
		}
		evs, err := r.streamIs("run-1", "three", 1, []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "add", 1}, {event.StepCompleted, "add", 1},
			{event.StepStarted, "double", 1}, {event.StepCompleted, "double", 1},
			{event.StepStarted, "add#2", 1}, {event.StepCompleted, "add#2", 1},
			{event.RunCompleted, "", 1},
		})
		if err != nil {
			return err
		}
		for _, s := range []string{"add", "double", "add#2"} {
			if n := tl.get(s); n != 1 {
				return fmt.Errorf("step %s ran %d times", s, n)
			}
		}
		// The result is journaled as canonical CBOR in StepCompleted.
		var p struct {
			Value int `cbor:"value"`
		}
		if err := event.Unmarshal(evs[2].Payload, &p); err != nil || p.Value != 6 {
			return fmt.Errorf("StepCompleted(add) payload %x: value %d, %v", evs[2].Payload, p.Value, err)
		}
		if err := event.IsCanonical(evs[2].Payload); err != nil {
			return err
		}
		// An ended run is archived with its end as the reason.
		if err := r.WaitFor("archive", 10*time.Second, func() (bool, error) {
			rec, err := r.Store.GetWorld(r.Ctx, "run-1")
			return rec.Status == store.WorldArchived && rec.StatusReason == "completed", err
		}); err != nil {
			return err
		}
		sum, err := cl.Get(r.Ctx, "run-1")
		if err != nil {
			return err
		}
		if sum.Status != workflow.StatusCompleted || sum.Steps != 3 || sum.Head != 8 || sum.Workflow != "three" || sum.Version != 1 {
			return fmt.Errorf("summary %+v", sum)
		}
		return nil
	})
}

func TestStartIsIdempotentByRunID(t *testing.T) {
	forEachBackend(t, 2, func(r *rig) error {
		tl := newTally()
		def := threeSteps(tl)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		for range 2 {
			if err := def.Start(r.Ctx, cl, "same", 1); err != nil {
				return err
			}
		}
		if err := def.Start(r.Ctx, cl, "same", 2); !errors.Is(err, workflow.ErrConflict) {
			return fmt.Errorf("a start with another input: %v, want ErrConflict", err)
		}
		other := workflow.New("other", 1, func(*workflow.Ctx, int) (int, error) { return 0, nil })
		if err := cl.Start(r.Ctx, other, "same", 1); !errors.Is(err, workflow.ErrConflict) {
			return fmt.Errorf("a start of another workflow: %v, want ErrConflict", err)
		}
		if err := cl.Start(r.Ctx, def, "wrong-type", "text"); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("a start with an input of the wrong type: %v, want ErrInvalid", err)
		}
		items, err := r.Store.ReadInbox(r.Ctx, "same", 0, 0)
		if err != nil {
			return err
		}
		if len(items) != 1 || items[0].Kind != workflow.ItemStart {
			return fmt.Errorf("inbox %v, want one start item", items)
		}
		worlds, err := r.Store.ListWorlds(r.Ctx, workflow.Universe("three"), "")
		if err != nil {
			return err
		}
		if len(worlds) != 1 {
			return fmt.Errorf("%d runs, want 1", len(worlds))
		}
		w, err := r.worker("w1", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := def.Result(r.Ctx, cl, "same"); err != nil || got != 5 {
			return fmt.Errorf("result %d, %v; want 5", got, err)
		}
		if n := tl.get("add"); n != 1 {
			return fmt.Errorf("the run's first step ran %d times", n)
		}
		// Starting a finished run again with the same input is still the
		// same run.
		if err := def.Start(r.Ctx, cl, "same", 1); err != nil {
			return fmt.Errorf("a repeated start of the finished run: %v", err)
		}
		return nil
	})
}
