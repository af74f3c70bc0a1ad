package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow"
)

// A start that names no version (as the API's is), repeated through a
// process of the next release (whose newest version is v2) after a process
// carrying v1 alone made the run, answers the v1 run, as any repeat does: a
// client retrying a start during a rolling upgrade must not be told that
// its own run conflicts. A start pinned to v2, or of another input, still
// conflicts.
func TestUnpinnedStartRepeatedAcrossReleasesIsTheSameRun(t *testing.T) {
	onMemstore(t, 1, func(r *rig) error {
		v1 := payDef()
		v2 := workflow.New("pay", 2, func(c *workflow.Ctx, in payIn) (string, error) {
			return workflow.Step(c, "fmt2", func(context.Context) (string, error) { return in.Account, nil })
		})
		_, old, err := r.clientFor(v1)
		if err != nil {
			return err
		}
		_, both, err := r.clientFor(v1, v2)
		if err != nil {
			return err
		}
		_, next, err := r.clientFor(v2)
		if err != nil {
			return err
		}
		in, err := event.Marshal(map[string]any{"Account": "alice", "Amount": int64(50)})
		if err != nil {
			return err
		}
		if created, err := old.StartCBOR(r.Ctx, "pay", "p-1", in); err != nil || !created {
			return fmt.Errorf("the v1 release's start: created %v, %v", created, err)
		}
		for name, cl := range map[string]*workflow.Client{"v1+v2": both, "v2": next} {
			if created, err := cl.StartCBOR(r.Ctx, "pay", "p-1", in); err != nil || created {
				return fmt.Errorf("the start repeated through a %s release: created %v, %v; want the v1 run", name, created, err)
			}
		}
		if _, err := both.StartCBOR(r.Ctx, "pay", "p-1", in, workflow.WithVersion(2)); !errors.Is(err, workflow.ErrConflict) {
			return fmt.Errorf("a start pinned to v2 under the v1 run's id: %v, want ErrConflict", err)
		}
		other, err := event.Marshal(map[string]any{"Account": "bob", "Amount": int64(50)})
		if err != nil {
			return err
		}
		if _, err := next.StartCBOR(r.Ctx, "pay", "p-1", other); !errors.Is(err, workflow.ErrConflict) {
			return fmt.Errorf("another input under the v1 run's id through the v2 release: %v, want ErrConflict", err)
		}
		return nil
	})
}
