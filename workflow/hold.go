package workflow

import (
	"context"
	"errors"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// Terminate ends the run for good: RunFailed with reason ("terminated:
// reason"), recorded under the operator's own lease, so it needs no worker
// carrying the run's code — the way out for a run held by a divergence
// (blocked) or one whose version no worker carries. A run a worker holds
// right now answers an error matching store.ErrLeaseHeld: cancel or pause
// it first. Terminating a finished run is ErrFinished.
func (c *Client) Terminate(ctx context.Context, runID, reason string) error {
	const op = "terminate"
	if err := store.CheckReason(op, reason); err != nil {
		return errorf(op, ErrInvalid, runID, err)
	}
	return c.underLease(ctx, op, runID, func(r *runner) error {
		msg := "terminated"
		if reason != "" {
			msg += ": " + reason
		}
		if err := r.end(ctx, event.RunFailed, runEnd{Error: msg, Reason: reason}); err != nil {
			return err
		}
		return r.finish(ctx)
	})
}

// underLease takes the run's lease for the operator, loads its history and
// runs f on it; a finished run is ErrFinished.
func (c *Client) underLease(ctx context.Context, op, runID string, f func(r *runner) error) error {
	rec, err := c.run(ctx, op, runID)
	if err != nil {
		return err
	}
	if rec.Status == store.WorldArchived {
		return errorf(op, ErrFinished, runID, detail("the run "+rec.StatusReason))
	}
	g, err := c.holder.Acquire(ctx, runID)
	if err != nil {
		return wrap(op, runID, err)
	}
	r := newRunner(c.st, c.ex, runID, g, c.holder, c.pollMin)
	c.holder.Track(&r.lease, g)
	defer func() {
		if !r.fenced.Load() {
			_ = c.holder.Release(ctx, runID, g.Lease.Epoch)
		}
	}()
	if err := r.load(ctx); err != nil {
		return wrap(op, runID, err)
	}
	if r.h.terminal != nil {
		return errors.Join(errorf(op, ErrFinished, runID, detail("the run ended")), r.finish(ctx))
	}
	if err := f(r); err != nil {
		return wrap(op, runID, err)
	}
	return nil
}
