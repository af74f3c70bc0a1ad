package workflow

import (
	"context"
	"errors"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// Operations on other runs from inside a workflow: StartRun, SignalRun and
// CancelRun. Each is a durable step of kind "op" whose StepStarted is
// written before the operation and whose StepCompleted after it; the
// operation itself is idempotent (a start by run id, a signal under a key
// derived from this run and step, a cancel request under the run's one
// cancel key), so a crash between the two re-runs it as the step's next
// attempt and it happens once. An answer that will not change (the run id
// is taken by another workflow, the target does not exist or has ended) is
// recorded as the step's final failure: a *StepError, the same on every
// re-run. A store error stops the run here; the next holder tries again.

const (
	kindOp     = "op"
	startBase  = "sys:start:"
	signalBase = "sys:signal:"
	cancelBase = "sys:cancel:"
)

// op runs do as the op step base: once done, recorded.
func op(c *Ctx, base string, do func(ctx context.Context, id string) error) error {
	if len(base) > maxNameBytes {
		return errorf("op", ErrInvalid, "", detail("the target's run id and name are too long for a step id"))
	}
	id, h, err := c.begin(kindOp, base)
	if err != nil {
		return err
	}
	if h != nil {
		switch {
		case h.completed != nil:
			return nil
		case h.final != nil:
			return stepErr(id, h.settled, h.final)
		}
	}
	r := c.r
	attempt := uint64(1)
	if h != nil {
		attempt = h.attempt + 1
	}
	if err := r.event(c.ctx, event.StepStarted, id, attempt, stepStarted{Kind: kindOp}); err != nil {
		return c.halt(err)
	}
	c.co.inflight = c.attempt(id, attempt)
	if err := r.writable(c.ctx); err != nil {
		return c.halt(err)
	}
	if err := do(c.ctx, id); err != nil {
		if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrFinished) || errors.Is(err, ErrInvalid) {
			f := stepFailed{Error: message(err), Final: true}
			if err := c.settle(event.StepFailed, id, attempt, f); err != nil {
				return err
			}
			return stepErr(id, attempt, &f)
		}
		return c.halt(r.failed(c.ctx, "op", err))
	}
	return c.settle(event.StepCompleted, id, attempt, stepCompleted{Value: cborNull()})
}

// StartRun starts def as the run runID with input in, as a durable step.
// Unlike Child it is not this run's child: it is not told when this run
// ends, nor cancelled with it, and this run does not wait for it. A run id
// names one run for ever: a start that finds the run (running or ended)
// with the same workflow, version and input is that run, and one that
// finds another workflow or input fails the step for good (ErrConflict's
// message in a *StepError). OnQueue is refused here (ErrInvalid): a queued
// start needs a client's lease holder.
func StartRun(c *Ctx, def Workflow, runID string, in any, opts ...StartOption) error {
	if def == nil {
		return errorf("start", ErrInvalid, "", detail("a nil workflow"))
	}
	if err := def.check(); err != nil {
		return err
	}
	if err := store.CheckID("start", "run id", runID); err != nil {
		return errorf("start", ErrInvalid, runID, err)
	}
	var o startOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.queue != "" {
		return errorf("start", ErrInvalid, runID, detail("a start from a workflow cannot name a queue"))
	}
	if err := checkRunNamespace(runID, o); err != nil {
		return err
	}
	if o.version != 0 && o.version != def.Version() {
		return errorf("start", ErrInvalid, runID, detail("StartRun starts the definition it is given; pass that version's definition"))
	}
	input, err := event.Marshal(in)
	if err != nil {
		return errorf("start", ErrInvalid, runID, err)
	}
	if err := checkValue("the run's input", input); err != nil {
		return errorf("start", ErrInvalid, runID, err)
	}
	return op(c, startBase+runID, func(ctx context.Context, _ string) error {
		_, err := startRun(ctx, c.r.st, def, runID, input, "", nil, nil, nil, o)
		return err
	})
}

// SignalRun sends the signal name with value to run runID, as a durable
// step: the signal's dedupe key derives from this run and this step, so
// however often the step is re-run the target gets it once. A target that
// does not exist or has ended fails the step for good.
func SignalRun(c *Ctx, runID, name string, value any) error {
	if err := checkName("signal", name); err != nil {
		return err
	}
	if err := store.CheckID("signal", "run id", runID); err != nil {
		return errorf("signal", ErrInvalid, runID, err)
	}
	v, err := event.Marshal(value)
	if err != nil {
		return errorf("signal", ErrInvalid, runID, err)
	}
	b, err := event.Marshal(signalItem{Name: name, Value: v})
	if err != nil {
		return errorf("signal", ErrInvalid, runID, err)
	}
	if err := checkValue("the signal's value", v); err != nil {
		return errorf("signal", ErrInvalid, runID, err)
	}
	base := signalBase + runID + ":" + name
	return op(c, base, func(ctx context.Context, id string) error {
		// The key names this run and the step's id (its occurrence
		// included): the step's own place in this run.
		key := ItemSignal + ":wf:" + hashOf("orrery.workflow.signal", c.r.id, id)
		if _, err := runRecord(ctx, c.r.st, "signal", runID); err != nil {
			return err
		}
		_, _, err = c.r.st.Enqueue(ctx, runID, store.InboxItem{Kind: ItemSignal, Payload: b, DedupeKey: key})
		if errors.Is(err, store.ErrWorldArchived) {
			// Ended: perhaps after it took this very signal, sent by an
			// attempt whose answer was lost. Its inbox says.
			it, ferr := findItem(ctx, c.r.st, runID, func(it store.InboxItem) bool { return it.DedupeKey == key })
			if ferr == nil && it != nil {
				return nil
			}
		}
		return wrap("signal", runID, err)
	})
}

// CancelRun asks run runID to cancel, as a durable step (Client.Cancel's
// request: the target's function is told). Cancelling a run that has
// ended, or is cancelled already, is no error; one that does not exist
// fails the step for good.
func CancelRun(c *Ctx, runID, reason string) error {
	if err := store.CheckID("cancel", "run id", runID); err != nil {
		return errorf("cancel", ErrInvalid, runID, err)
	}
	if err := store.CheckReason("cancel", reason); err != nil {
		return errorf("cancel", ErrInvalid, runID, err)
	}
	return op(c, cancelBase+runID, func(ctx context.Context, _ string) error {
		if _, err := runRecord(ctx, c.r.st, "cancel", runID); err != nil {
			return err
		}
		return requestCancel(ctx, c.r.st, runID, reason)
	})
}

// SignalWithStart starts def as the run runID with input in unless the run
// exists, and sends it the signal name with value (under key, as Signal):
// one call, so the signal is never lost whatever the order against the
// run's first Await (a signal waits in the run's inbox until an Await
// takes it). A run that exists with the same workflow is signalled
// whatever its input (as Temporal's signal-with-start); one of another
// workflow is ErrConflict; an ended run is ErrFinished, and nothing is
// started. Repeated with the same key, it starts nothing and signals once.
func (c *Client) SignalWithStart(ctx context.Context, def Workflow, runID string, in any, name string, value any, key string, opts ...StartOption) error {
	if def == nil {
		return errorf("signal-with-start", ErrInvalid, runID, detail("a nil workflow"))
	}
	if err := checkName("signal", name); err != nil {
		return err
	}
	if err := c.Start(ctx, def, runID, in, opts...); err != nil {
		if !errors.Is(err, ErrConflict) {
			return err
		}
		sum, gerr := c.Get(ctx, runID)
		if gerr != nil {
			return gerr
		}
		if sum.Workflow != def.Name() {
			return err
		}
	}
	return c.Signal(ctx, runID, name, value, key)
}
