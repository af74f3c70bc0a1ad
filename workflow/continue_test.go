package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow"
)

func TestContinueAsNewStartsAfreshUnderTheSameRunID(t *testing.T) {
	forEachBackend(t, 101, func(r *rig) error {
		const generations = 100
		tl := newTally()
		def := workflow.New("counter", 1, func(c *workflow.Ctx, in int) (int, error) {
			v, err := workflow.Step(c, "work", func(context.Context) (int, error) { tl.inc("work"); return in + 1, nil })
			if err != nil {
				return 0, err
			}
			if v < generations {
				return 0, workflow.ContinueAsNew(c, v)
			}
			// The last generation waits for a signal sent during the
			// switches: it is not lost.
			extra, err := workflow.Await[int](c, "bonus")
			return v + extra, err
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "c", 0); err != nil {
			return err
		}
		if err := cl.Signal(r.Ctx, "c", "bonus", 5, "k"); err != nil {
			return err
		}
		got, err := def.Result(r.Ctx, cl, "c")
		if err != nil || got != generations+5 {
			return fmt.Errorf("result %d, %v; want %d", got, err, generations+5)
		}
		// Each generation ran its step once: none replayed an older one.
		if n := tl.get("work"); n != generations {
			return fmt.Errorf("the step ran %d times over %d generations", n, generations)
		}
		evs, err := r.stream("c")
		if err != nil {
			return err
		}
		markers := 0
		for _, e := range evs {
			if e.EventType == event.RunResumed && e.StepID == "sys:continue" {
				markers++
			}
		}
		if markers != generations-1 {
			return fmt.Errorf("%d generation markers, want %d", markers, generations-1)
		}
		// The journal replays to the last generation's result, which
		// replays its own steps only.
		return replays(r, def, "c", generations+5)
	})
}

func TestATakeoverRunsOnlyTheLastGeneration(t *testing.T) {
	forEachBackend(t, 102, func(r *rig) error {
		tl := newTally()
		def := workflow.New("gens", 1, func(c *workflow.Ctx, in int) (int, error) {
			if _, err := workflow.Step(c, "work", func(context.Context) (int, error) { tl.inc(fmt.Sprint(in)); return in, nil }); err != nil {
				return 0, err
			}
			if in < 3 {
				return 0, workflow.ContinueAsNew(c, in+1)
			}
			return workflow.Await[int](c, "go")
		})
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		hA := r.WorkerStore()
		wA, err := r.worker("A", hA, wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "g", 0); err != nil {
			return err
		}
		if err := r.WaitFor("the last generation to await", 10*time.Second, func() (bool, error) {
			evs, err := r.stream("g")
			return len(evs) > 0 && evs[len(evs)-1].StepID == "sys:await:go", err
		}); err != nil {
			return err
		}
		wB, err := r.killOver(hA, wA, "B", wfs)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if err := cl.Signal(r.Ctx, "g", "go", 7, "k"); err != nil {
			return err
		}
		if got, err := def.Result(r.Ctx, cl, "g"); err != nil || got != 7 {
			return fmt.Errorf("result %d, %v", got, err)
		}
		for gen := range 4 {
			if n := tl.get(fmt.Sprint(gen)); n != 1 {
				return fmt.Errorf("generation %d's step ran %d times (the takeover replayed old generations)", gen, n)
			}
		}
		return nil
	})
}
