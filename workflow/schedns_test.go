package workflow_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// TestStartsCannotTakeAScheduleRunID: run ids starting "sched." are a
// schedule's ticks', which dedupe by them: a start by a client, or a
// child started by a workflow, under such an id is ErrInvalid and
// creates nothing, and only a start marked as a tick (the scheduler's)
// may use one.
func TestStartsCannotTakeAScheduleRunID(t *testing.T) {
	onMemstore(t, 31, func(r *rig) error {
		leaf := workflow.New("leaf", 1, func(c *workflow.Ctx, in int) (int, error) { return in, nil })
		parent := workflow.New("parent", 1, func(c *workflow.Ctx, in int) (string, error) {
			_, err := workflow.Child(c, leaf, store.ScheduleRunPrefix+"daily.x", in)
			if !errors.Is(err, workflow.ErrInvalid) {
				return "", fmt.Errorf("a child in the schedules' namespace: %v, want ErrInvalid", err)
			}
			return "refused", nil
		})
		_, w, cl, err := r.serve("w", parent, leaf)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		id := store.ScheduleRunPrefix + "daily.20261128T090000.000000000Z"
		if err := leaf.Start(r.Ctx, cl, id, 1); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("Start of %s: %v, want ErrInvalid", id, err)
		}
		if _, err := cl.Get(r.Ctx, id); !errors.Is(err, workflow.ErrNotFound) {
			return fmt.Errorf("the refused run %s: %v, want ErrNotFound", id, err)
		}
		if got, err := startResult(r, parent, cl, "p", 1); err != nil || got != "refused" {
			return fmt.Errorf("parent: %q, %v", got, err)
		}
		if _, err := cl.Get(r.Ctx, store.ScheduleRunPrefix+"daily.x"); !errors.Is(err, workflow.ErrNotFound) {
			return fmt.Errorf("the refused child: %v, want ErrNotFound", err)
		}
		if err := leaf.Start(r.Ctx, cl, "plain", 1, workflow.ScheduleTick()); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("a tick's start of a plain id: %v, want ErrInvalid", err)
		}
		if err := leaf.Start(r.Ctx, cl, id, 1, workflow.ScheduleTick()); err != nil {
			return fmt.Errorf("the scheduler's start: %v", err)
		}
		if v, err := leaf.Result(r.Ctx, cl, id); err != nil || v != 1 {
			return fmt.Errorf("the tick's run: %d, %v", v, err)
		}
		return nil
	})
}
