package workflow

import (
	"context"
	"errors"
	"fmt"

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

// Reset resets the run to step: the steps at and after that index (0 is
// the first) are discarded for replay, so the next worker re-runs the
// function from there with the code it carries — the way on for a run
// held by a divergence when neither a rollback nor a Patched fix is
// possible. It is recorded as a RunResumed carrying resetTo; the discarded
// steps stay in the journal for the record, and a re-run of one of them
// continues its attempt numbers. A blocked run can be reset; one a worker
// holds right now answers an error matching store.ErrLeaseHeld, and a
// paused one store.ErrWorldPaused (the operator's lease is refused while it
// is paused).
func (c *Client) Reset(ctx context.Context, runID string, step int, reason string) error {
	const op = "reset"
	if err := store.CheckReason(op, reason); err != nil {
		return errorf(op, ErrInvalid, runID, err)
	}
	if step < 0 {
		return errorf(op, ErrInvalid, runID, detail("a negative step"))
	}
	return c.underLease(ctx, op, runID, func(r *runner) error {
		if step > len(r.h.steps) {
			return errorf(op, ErrInvalid, runID, detail(fmt.Sprintf("step %d: the run recorded %d steps", step, len(r.h.steps))))
		}
		to := uint64(step)
		e, err := r.envelope(event.RunResumed, "", r.h.resumes+1, runControl{Reason: reason, ResetTo: &to})
		if err != nil {
			return errorf(op, ErrInvalid, runID, err)
		}
		return r.append(ctx, e)
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
