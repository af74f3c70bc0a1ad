package workflow

import (
	"bytes"
	"context"

	"github.com/orrery-run/orrery/actor"

	"github.com/orrery-run/orrery/event"
)

// Replay re-runs def's function against a run's recorded stream (all of
// it, in runSeq order) without running any step: every step the function
// asks for must be recorded as ended, and is answered from its record, as
// a worker's recovery does. It checks that the function asks for exactly
// the recorded steps, in order, and ends as the run ended: it returns the
// recorded output of a completed run, and the *RunError of a failed or
// cancelled one. A function that no longer asks for the recorded steps
// gives the *DivergenceError naming the first difference; one that asks
// for the same steps but ends otherwise gives a *DivergenceError at the
// end of the steps. A run that has not ended replays to ErrStopped, as far
// as it is recorded.
func Replay(def Workflow, stream []event.Envelope) ([]byte, error) {
	if def == nil {
		return nil, errorf("replay", ErrInvalid, "", detail("a nil workflow"))
	}
	if err := def.check(); err != nil {
		return nil, err
	}
	h := newHistory()
	for i := range stream {
		if err := h.apply(&stream[i]); err != nil {
			return nil, err
		}
	}
	if !h.started {
		return nil, errorf("replay", ErrInvalid, "", detail("the stream has no RunStarted"))
	}
	run := stream[0].StreamID
	for i := range stream {
		e := &stream[i]
		if e.StreamID != run || e.PlanID != def.Name() || e.PlanVersion != def.Version() {
			return nil, errorf("replay", ErrInvalid, run, detail("event "+e.EventID+" is not of this run and workflow version"))
		}
	}
	// Branches run as on a worker, one at a time; nothing waits live.
	r := &runner{id: run, h: h, replay: true, ex: actor.NewExecutor(0)}
	c := newCtx(r, context.Background())
	out, ferr := def.invoke(c, h.input)
	r.closeBranches(c)
	if ferr == nil && c.halted == nil {
		if err := checkValue("the run's output", out); err != nil {
			out, ferr = nil, err // as the live run decided
		}
	}
	end := h.terminal
	div := c.div
	if div == nil && c.halted == nil && c.next < len(h.steps) {
		div = &DivergenceError{RunID: run, StepIndex: c.next, Recorded: h.steps[c.next].id,
			Reason: "the function returned before asking for it"}
	}
	switch {
	case div != nil:
		if end != nil && end.EventType == event.RunFailed {
			if _, rerr := outcome(run, end); sameDivergence(rerr, div) {
				return nil, rerr
			}
		}
		return nil, div
	case end == nil:
		return nil, c.halt(nil)
	case end.EventType == event.RunCancelled:
		return outcome(run, end)
	case c.halted != nil:
		return nil, c.halted
	}
	recOut, recErr := outcome(run, end)
	atEnd := &DivergenceError{RunID: run, StepIndex: len(h.steps)}
	switch {
	case end.EventType == event.RunCompleted && ferr == nil && !bytes.Equal(out, recOut):
		atEnd.Reason = "the function's output differs from the recorded one"
	case end.EventType == event.RunCompleted && ferr != nil:
		atEnd.Reason = "the function failed (" + message(ferr) + "); the run completed"
	case end.EventType == event.RunFailed && ferr == nil:
		atEnd.Reason = "the function completed; the run failed"
	case end.EventType == event.RunFailed && message(ferr) != recErr.(*RunError).Message:
		atEnd.Reason = "the function failed with another error than the recorded one (" + message(ferr) + ")"
	default:
		return recOut, recErr
	}
	return nil, atEnd
}

func sameDivergence(err error, d *DivergenceError) bool {
	re, ok := err.(*RunError)
	return ok && re.Divergence != nil && re.Divergence.StepIndex == d.StepIndex &&
		re.Divergence.Recorded == d.Recorded && re.Divergence.Got == d.Got
}
