package schedule

import (
	"context"
	"errors"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// NodeStarter starts ticks on a node's own clients: workflow runs through
// Runs and world events through Ops, which validates them as any ingress.
// Every orchestrating node runs a scheduler and any of them may win a
// tick, so a tick whose target this node cannot start (its binary lacks
// the workflow or the world's definition, or it runs no workflows) is
// left pending for a node that can, never judged unstartable here.
type NodeStarter struct {
	Runs *workflow.Client
	// Workflows are the definitions Runs starts (nil: none).
	Workflows *workflow.Workflows
	Ops       *plane.Ops
}

// errNotHere: this node cannot start the tick's target; another may.
var errNotHere = errors.New("this node does not carry the schedule's target; left for a node that does")

// StartRun implements Starter: Start is idempotent by run id.
func (n NodeStarter) StartRun(ctx context.Context, name, runID string, input []byte) error {
	if n.Runs == nil || n.Workflows == nil {
		return errNotHere
	}
	if _, ok := n.Workflows.Lookup(name); !ok {
		return errNotHere
	}
	_, err := n.Runs.StartCBOR(ctx, name, runID, input, workflow.ScheduleTick())
	if errors.Is(err, workflow.ErrInvalid) || errors.Is(err, workflow.ErrConflict) {
		return Permanent(err)
	}
	return err
}

// RunEnded implements Starter.
func (n NodeStarter) RunEnded(ctx context.Context, runID string) (bool, error) {
	if n.Runs == nil {
		return true, nil
	}
	r, err := n.Runs.Get(ctx, runID)
	if errors.Is(err, workflow.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	switch r.Status {
	case workflow.StatusCompleted, workflow.StatusFailed, workflow.StatusCancelled:
		return true, nil
	}
	return false, nil
}

// SendEvent implements Starter: the inbox deduplicates by key.
func (n NodeStarter) SendEvent(ctx context.Context, world, typeName string, value []byte, key string) error {
	_, err := n.Ops.EnqueueScheduleTick(ctx, world, typeName, value, key)
	if errors.Is(err, plane.ErrNoKernel) {
		return errors.Join(errNotHere, err)
	}
	for _, p := range []error{plane.ErrInvalidIngress, store.ErrWorldNotFound, store.ErrWorldArchived} {
		if errors.Is(err, p) {
			return Permanent(err)
		}
	}
	return err
}
