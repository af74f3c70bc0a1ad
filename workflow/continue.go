package workflow

import (
	"context"
	"errors"

	"github.com/orrery-run/orrery/event"
)

// continueStep is the step id of a generation's marker (ContinueAsNew).
const continueStep = "sys:continue"

// continued is what ContinueAsNew returns: the function returns it, and
// the worker starts the run afresh with input.
type continued struct{ input []byte }

func (e *continued) Error() string { return "workflow: continue as new" }

// ContinueAsNew ends this execution of the run and starts it afresh under
// the same run id with input in, as the function's return value:
//
//	return 0, workflow.ContinueAsNew(c, next)
//
// The worker writes a marker (RunResumed of step "sys:continue", its
// logical attempt the new generation, carrying the new input) and runs the
// function again from the start: the new generation sees only its input and
// none of the old steps, which a re-run never replays again (their records
// stay in the journal, and the signals and receipts they took stay taken;
// a signal sent during the switch waits for the new generation's Await).
// The run's children are treated by their parent-close policy first. The
// run ends when a generation returns anything else; Client.Result gives
// that generation's result.
func ContinueAsNew(c *Ctx, in any) error {
	b, err := event.Marshal(in)
	if err != nil {
		return errorf("continue as new", ErrInvalid, "", err)
	}
	if err := checkValue("the run's new input", b); err != nil {
		return errorf("continue as new", ErrInvalid, "", err)
	}
	if c != nil {
		if err := c.exclusive("continue as new", continueStep); err != nil {
			return err
		}
	}
	return &continued{input: b}
}

// continueAsNew records the next generation of the run, whose function
// returned ContinueAsNew's error, and readies the runner to run it.
func (r *runner) continueAsNew(ctx context.Context, c *Ctx, ferr error) (bool, error) {
	var cont *continued
	if !errors.As(ferr, &cont) || c.misused() != nil || c.div != nil {
		return false, nil
	}
	if err := r.closeChildren(c); err != nil {
		return false, err
	}
	gen := r.h.generation + 1
	e, err := r.envelope(event.RunResumed, continueStep, gen, runControl{Reason: "continued as new", ContinuedInput: cont.input})
	if err != nil {
		return false, &stop{kind: stopError, cause: errorf("continue as new", ErrInvalid, r.id, err)}
	}
	if err := r.append(ctx, e); err != nil {
		return false, err
	}
	r.saveBase(ctx)
	r.sch = sched{}
	return true, nil
}

// runInput is the input of the run's current generation.
func (r *runner) runInput() []byte {
	if r.h.generation > 0 {
		return r.h.input
	}
	return r.start.Input
}
