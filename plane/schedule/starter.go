package schedule

import (
	"context"
	"errors"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// NodeStarter starts ticks on a node's own clients: workflow runs through
// Runs (nil: the node has no workflows, and a workflow tick fails) and
// world events through Ops, which validates them as any ingress.
type NodeStarter struct {
	Runs *workflow.Client
	Ops  *plane.Ops
}

var errNoWorkflows = errors.New("this node runs no workflows")

// StartRun implements Starter: Start is idempotent by run id.
func (n NodeStarter) StartRun(ctx context.Context, name, runID string, input []byte) error {
	if n.Runs == nil {
		return Permanent(errNoWorkflows)
	}
	_, err := n.Runs.StartCBOR(ctx, name, runID, input)
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
	_, err := n.Ops.EnqueueEvent(ctx, world, typeName, value, key)
	for _, p := range []error{plane.ErrInvalidIngress, plane.ErrNoKernel, store.ErrWorldNotFound, store.ErrWorldArchived} {
		if errors.Is(err, p) {
			return Permanent(err)
		}
	}
	return err
}
