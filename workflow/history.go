package workflow

import (
	"fmt"
	"strings"

	"github.com/orrery-run/orrery/event"
)

// history is what a run's stream says, folded in runSeq order: the run's
// lifecycle, and each step's attempts in the order the steps first
// started, which is the order a re-run of the function must ask for them.
type history struct {
	head     uint64
	version  uint64 // the planVersion of the latest event
	events   int
	queued   bool
	started  bool
	input    []byte // from RunStarted
	terminal *event.Envelope
	steps    []*stepHist
	byID     map[string]*stepHist
	// consumed holds the inbox seqs that completed steps took (signals,
	// timer firings, receipts): a signal is consumed once.
	consumed map[uint64]bool
	// controls holds the inbox seqs of the control requests recorded by
	// RunPaused, RunResumed and RunCancelled.
	controls map[uint64]bool
	pauses   uint64
	resumes  uint64
	// blocked is the reason of the latest RunPaused when a worker wrote it
	// because the run's code diverged from its steps ("divergent at step
	// N: ..."), until a RunResumed: the run is held, not failed, and any
	// worker whose code replays past that step resumes it.
	blocked string
	// reset holds, by step id, the steps an operator's reset discarded,
	// cleared of their ends: a re-run of one continues its attempt
	// numbers, so no attempt is ever recorded twice.
	reset map[string]*stepHist
	// generation counts the run's ContinueAsNew (0: the first).
	generation uint64
	// cancelSeq is the inbox seq of the cancel request delivered to the
	// function (the first StepSkipped carrying one); 0: none yet.
	cancelSeq uint64
	// attrs are the run's search attributes: its start's, then each
	// SetAttributes in turn (neither a new generation nor a reset clears
	// them).
	attrs map[string]string
}

// stepHist is one step's recorded attempts.
type stepHist struct {
	id    string
	index int
	kind  string
	first stepStarted // the first StepStarted's payload
	last  stepStarted // the latest StepStarted's payload
	// attempt is the highest logical attempt started; settled the highest
	// one that ended (failed, completed or skipped). attempt > settled
	// means an attempt was in flight when its worker stopped.
	attempt  uint64
	settled  uint64
	failures uint64
	// retry is the latest StepFailed when it is not final and is the
	// step's latest event: the next attempt is due at its RetryAt.
	retry     *stepFailed
	completed *stepCompleted
	final     *stepFailed
	skipped   bool
	// endSeq is the runSeq of the event that ended the step: re-runs
	// resume the run's branches in that order (see sched).
	endSeq uint64
}

func (s *stepHist) inFlight() bool { return s.attempt > s.settled }

func (s *stepHist) done() bool { return s.completed != nil || s.final != nil || s.skipped }

func newHistory() *history {
	return &history{byID: map[string]*stepHist{}, consumed: map[uint64]bool{}, controls: map[uint64]bool{}}
}

// corrupt is a stream this package did not write (or a bug).
func corrupt(e *event.Envelope, format string, args ...any) error {
	return errorf("replay", ErrInvalid, e.StreamID, detail(fmt.Sprintf("event %d (%s %q attempt %d): ", e.RunSeq, e.EventType, e.StepID, e.LogicalAttemptID)+fmt.Sprintf(format, args...)))
}

// apply folds one persisted event in. Unknown event types are skipped
// (forward compatibility); a payload that does not decode, or a step event
// out of order, is an error matching ErrInvalid.
func (h *history) apply(e *event.Envelope) error {
	if e.RunSeq > h.head {
		h.head = e.RunSeq
	}
	h.version = e.PlanVersion
	h.events++
	if h.terminal != nil && event.IsKnown(e.EventType) {
		return corrupt(e, "after the run's end")
	}
	p, err := decodePayload(e.EventType, e.Payload)
	if err != nil {
		return corrupt(e, "payload: %v", err)
	}
	switch e.EventType {
	case event.RunQueued:
		h.queued = true
		h.attrs = applyAttrs(h.attrs, p.(runQueued).Attrs)
	case event.RunStarted:
		h.started = true
		h.input = p.(runStart).Input
		h.attrs = applyAttrs(h.attrs, p.(runStart).Attrs)
	case event.RunResumed:
		if c := p.(runControl); e.StepID == continueStep && len(c.ContinuedInput) > 0 {
			// A new generation (ContinueAsNew): the run starts afresh from
			// its new input; the signals and receipts the old ones took
			// stay taken.
			h.generation, h.input = e.LogicalAttemptID, c.ContinuedInput
			h.resetTo(0, false)
			break
		}
		fallthrough
	case event.RunPaused:
		c := p.(runControl)
		if c.Control != 0 {
			h.controls[c.Control] = true
		}
		if e.EventType == event.RunPaused {
			h.pauses++
			if c.Control == 0 && strings.HasPrefix(c.Reason, divergentPrefix) {
				h.blocked = c.Reason
			}
		} else {
			h.resumes++
			h.blocked = ""
			if c.ResetTo != nil {
				h.resetTo(int(min(*c.ResetTo, uint64(len(h.steps)))), true)
			}
		}
	case event.RunCompleted, event.RunFailed, event.RunCancelled:
		if c := p.(runEnd); c.Control != 0 {
			h.controls[c.Control] = true
		}
		cp := *e
		h.terminal = &cp
	case event.StepStarted:
		st := p.(stepStarted)
		s := h.byID[e.StepID]
		if s == nil {
			s = &stepHist{id: e.StepID, index: len(h.steps), kind: st.Kind, first: st}
			h.steps = append(h.steps, s)
			h.byID[e.StepID] = s
		}
		switch {
		case st.Kind != s.kind:
			return corrupt(e, "kind %s, the step started as %s", st.Kind, s.kind)
		case s.done():
			return corrupt(e, "the step has ended")
		case e.LogicalAttemptID <= s.attempt:
			return corrupt(e, "attempt %d already started", s.attempt)
		}
		s.attempt, s.last, s.retry = e.LogicalAttemptID, st, nil
	case event.StepCompleted, event.StepFailed, event.StepSkipped:
		s := h.byID[e.StepID]
		switch {
		case s == nil:
			return corrupt(e, "the step never started")
		case s.done():
			return corrupt(e, "the step has ended")
		case e.LogicalAttemptID != s.attempt || s.settled == s.attempt:
			return corrupt(e, "attempt %d is not in flight", e.LogicalAttemptID)
		}
		s.settled = e.LogicalAttemptID
		s.endSeq = e.RunSeq
		switch v := p.(type) {
		case stepCompleted:
			s.completed = &v
			if v.Seq != 0 {
				h.consumed[v.Seq] = true
			}
			if s.kind == kindAttrs {
				var set map[string]string
				if err := event.Unmarshal(v.Value, &set); err != nil {
					return corrupt(e, "attributes: %v", err)
				}
				h.attrs = applyAttrs(h.attrs, set)
			}
		case stepFailed:
			s.failures++
			if v.Seq != 0 {
				h.consumed[v.Seq] = true
			}
			if v.Final {
				s.final = &v
			} else {
				s.retry = &v
			}
		case stepSkipped:
			s.skipped = true
			if v.Control != 0 {
				h.controls[v.Control] = true
				if h.cancelSeq == 0 {
					h.cancelSeq = v.Control
				}
			}
		}
	}
	return nil
}

// resetTo discards the steps at and after index n for replay. An
// operator's reset (giveBack) gives back the signals they took; a new
// generation keeps them taken.
func (h *history) resetTo(n int, giveBack bool) {
	if h.reset == nil {
		h.reset = map[string]*stepHist{}
	}
	for _, s := range h.steps[n:] {
		delete(h.byID, s.id)
		if giveBack && s.kind == kindSignal && s.completed != nil && !s.completed.TimedOut {
			// The signal a discarded Await took goes back to the inbox
			// for the re-run (Temporal's reset reapplies signals too).
			delete(h.consumed, s.completed.Seq)
		}
		h.reset[s.id] = &stepHist{id: s.id, kind: s.kind, attempt: s.attempt, settled: s.attempt}
	}
	h.steps = h.steps[:n:n]
}
