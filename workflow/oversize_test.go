package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/workflow"
)

// A step whose result, or a workflow whose output or error, is larger than
// a journal record may hold cannot wedge its run: the store would refuse
// the record on every re-run. The step fails for good with a clear error
// (the function sees a *StepError it can handle), and a run whose output
// is too large fails instead of retrying for ever.
func TestOversizedStepResultFailsTheStepNotTheWorker(t *testing.T) {
	onMemstore(t, 11, func(r *rig) error {
		tl := newTally()
		def := workflow.New("big", 1, func(c *workflow.Ctx, _ int) (string, error) {
			_, err := workflow.Step(c, "huge", func(context.Context) (string, error) {
				tl.inc("huge")
				return strings.Repeat("x", 5<<20), nil
			})
			if err == nil {
				return "", errors.New("a 5 MiB step result was journaled")
			}
			small, err2 := workflow.Step(c, "small", func(context.Context) (int, error) { tl.inc("small"); return 7, nil })
			if err2 != nil {
				return "", err2
			}
			return fmt.Sprintf("huge failed (%v), small %d", errors.Is(err, workflow.ErrStepFailed), small), nil
		})
		_, w, cl, err := r.serve("A", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		got, err := startResult(r, def, cl, "run", 0)
		if err != nil {
			return err
		}
		if got != "huge failed (true), small 7" {
			return fmt.Errorf("result %q", got)
		}
		if tl.get("huge") != 1 || tl.get("small") != 1 {
			return fmt.Errorf("executions huge=%d small=%d, want 1 1", tl.get("huge"), tl.get("small"))
		}
		return nil
	})
}

// A run whose output the journal could not hold fails with a clear error
// instead of retrying its end for ever, and replays to the same failure.
func TestOversizedRunOutputFailsTheRun(t *testing.T) {
	onMemstore(t, 12, func(r *rig) error {
		def := workflow.New("bigout", 1, func(c *workflow.Ctx, _ int) (string, error) {
			return strings.Repeat("y", 2<<20), nil
		})
		_, w, cl, err := r.serve("A", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		_, err = startResult(r, def, cl, "run", 0)
		if !errors.Is(err, workflow.ErrFailed) || !strings.Contains(err.Error(), "more than a journal record holds") {
			return fmt.Errorf("result error %v, want the run failed for its output's size", err)
		}
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		if _, rerr := workflow.Replay(def, evs); !errors.Is(rerr, workflow.ErrFailed) {
			return fmt.Errorf("replay: %v, want the recorded failure", rerr)
		}
		return nil
	})
}
