package projector

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orrery-run/orrery/event"
)

// RunStatus is where a run is, as its last run-level event says.
type RunStatus string

const (
	// StatusUnknown: the run's stream has step events but no run-level
	// event yet.
	StatusUnknown RunStatus = ""
	StatusQueued  RunStatus = "queued"
	StatusRunning RunStatus = "running"
	StatusPaused  RunStatus = "paused"
	// StatusBlocked: held by a divergence (a RunPaused whose reason starts
	// DivergentPrefix), until compatible code resumes it.
	StatusBlocked   RunStatus = "blocked"
	StatusCompleted RunStatus = "completed"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
)

// DivergentPrefix starts the reason of the RunPaused by which a worker
// holds a divergent run (the workflow package writes it).
const DivergentPrefix = "divergent at step "

// payloadReason is a run event payload's reason, if any.
func payloadReason(payload []byte) string {
	var p struct {
		Reason string `cbor:"reason"`
	}
	if len(payload) == 0 || event.Unmarshal(payload, &p) != nil {
		return ""
	}
	return p.Reason
}

// Terminal reports whether s is an end: completed, failed or cancelled.
func (s RunStatus) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Run is one row of the runs list. Its times are persistedAt values, the
// store's clock when the event was written.
type Run struct {
	ID string // the run's stream id
	// Workflow and Version are the planId and planVersion of the run's
	// latest lifecycle event.
	Workflow string
	Version  uint64
	// Status is set by the latest run-level event in runSeq order: a later
	// RunStarted or RunResumed after an end (a retried run) makes it
	// running again.
	Status RunStatus
	// QueuedAt and StartedAt are the times of the first RunQueued and the
	// first RunStarted.
	QueuedAt  time.Time
	StartedAt time.Time
	// EndedAt is the time of the terminal event while Status is terminal,
	// and zero otherwise.
	EndedAt time.Time
	// Duration is EndedAt − StartedAt when both are set, and zero
	// otherwise: the projection reads no clock, so a running run has none.
	// It is exactly what the store's clock says, negative if that clock
	// went back.
	Duration time.Duration
	// Steps counts the distinct step ids of the run's step events.
	Steps int
	// LastError is the error of the latest RunFailed or StepFailed whose
	// payload names one (see Runs).
	LastError string
	// Attributes are the run's search attributes: its start's, changed by
	// each step of id AttrsStep in turn; nil when it has none. Match finds
	// runs by them through an index.
	Attributes map[string]string
}

// Runs is the runs list: the in-memory projection of workflow run streams
// (streams of run-level and step-level lifecycle events), one Run per
// stream that has at least one lifecycle event. Events of other types are
// ignored. A failure's error is read from its payload, a CBOR map whose
// "error" entry is text (or a map with a "message" text entry), cut to
// MaxErrorBytes.
//
// Its readers are safe for concurrent use with Apply and return copies.
type Runs struct {
	mu    sync.RWMutex
	gate  gate
	runs  map[string]*runState
	index attrIndex
}

type runState struct {
	run   Run
	steps map[string]struct{}
}

// NewRuns returns an empty runs list.
func NewRuns() *Runs { return &Runs{runs: map[string]*runState{}, index: attrIndex{}} }

// Name implements Projector: "runs".
func (*Runs) Name() string { return "runs" }

// InMemory implements InMemory: the list is rebuilt by each process.
func (*Runs) InMemory() bool { return true }

// Apply implements Projector. It never fails.
func (r *Runs) Apply(_ context.Context, stream string, e event.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.gate.admit(stream, e, event.IsKnown) {
		return nil
	}
	st := r.runs[stream]
	if st == nil {
		st = &runState{run: Run{ID: stream}, steps: map[string]struct{}{}}
		r.runs[stream] = st
	}
	run := &st.run
	run.Workflow, run.Version = e.PlanID, e.PlanVersion
	if set := attrsSet(&e); len(set) > 0 {
		r.setAttrs(st, set)
	}
	at := e.PersistedAt
	if event.IsStepLevel(e.EventType) {
		st.steps[e.StepID] = struct{}{}
		run.Steps = len(st.steps)
		if e.EventType == event.StepFailed {
			if msg := payloadError(e.Payload); msg != "" {
				run.LastError = msg
			}
		}
		return nil
	}
	switch e.EventType {
	case event.RunQueued:
		run.Status = StatusQueued
		if run.QueuedAt.IsZero() {
			run.QueuedAt = at
		}
	case event.RunStarted:
		run.Status = StatusRunning
		if run.StartedAt.IsZero() {
			run.StartedAt = at
		}
	case event.RunPaused:
		run.Status = StatusPaused
		if reason := payloadReason(e.Payload); strings.HasPrefix(reason, DivergentPrefix) {
			run.Status, run.LastError = StatusBlocked, "blocked: "+reason
		}
	case event.RunResumed:
		run.Status = StatusRunning
	case event.RunCompleted:
		run.Status = StatusCompleted
	case event.RunFailed:
		run.Status = StatusFailed
		if msg := payloadError(e.Payload); msg != "" {
			run.LastError = msg
		}
	case event.RunCancelled:
		run.Status = StatusCancelled
	}
	run.EndedAt, run.Duration = time.Time{}, 0
	if run.Status.Terminal() {
		run.EndedAt = at
		if !run.StartedAt.IsZero() && !at.IsZero() {
			run.Duration = at.Sub(run.StartedAt)
		}
	}
	return nil
}

// List returns every run, sorted by id.
func (r *Runs) List() []Run {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Run, 0, len(r.runs))
	for _, st := range r.runs {
		out = append(out, cloneRun(st.run))
	}
	slices.SortFunc(out, func(a, b Run) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Get returns the run with stream id id.
func (r *Runs) Get(id string) (Run, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st, ok := r.runs[id]
	if !ok {
		return Run{}, false
	}
	return cloneRun(st.run), true
}

// AttemptStatus is where one attempt of a step is.
type AttemptStatus string

const (
	AttemptRunning   AttemptStatus = "running"
	AttemptCompleted AttemptStatus = "completed"
	AttemptFailed    AttemptStatus = "failed"
	AttemptSkipped   AttemptStatus = "skipped"
)

// Attempt is one logical attempt of a step. Its times are persistedAt
// values.
type Attempt struct {
	Attempt uint64 // the logicalAttemptId
	// Status is set by the attempt's latest step event in runSeq order.
	Status AttemptStatus
	// StartedAt is the time of its first StepStarted; EndedAt that of its
	// latest StepCompleted, StepFailed or StepSkipped while it is not
	// running (zero otherwise).
	StartedAt time.Time
	EndedAt   time.Time
	// Duration is EndedAt − StartedAt when both are set, zero otherwise.
	Duration time.Duration
	// Error is the failure's error while Status is failed.
	Error string
}

// Step is one step of a run's timeline.
type Step struct {
	ID string
	// Status is the status of its highest-numbered attempt.
	Status   AttemptStatus
	Attempts []Attempt // by attempt number
}

// RunTimeline is a run's steps, in the order of their first event
// (runSeq).
type RunTimeline struct {
	Run   string
	Steps []Step
}

// Timeline is the in-memory projection of each run's step timeline from
// the step-level lifecycle events (run-level events only make the run
// known). It reads errors as Runs does. Its readers are safe for
// concurrent use with Apply and return copies.
type Timeline struct {
	mu   sync.RWMutex
	gate gate
	runs map[string]*timelineState
}

type timelineState struct {
	order []string // step ids by their first event's runSeq
	steps map[string]map[uint64]*Attempt
}

// NewTimeline returns an empty timeline projection.
func NewTimeline() *Timeline { return &Timeline{runs: map[string]*timelineState{}} }

// Name implements Projector: "timeline".
func (*Timeline) Name() string { return "timeline" }

// InMemory implements InMemory.
func (*Timeline) InMemory() bool { return true }

// Apply implements Projector. It never fails.
func (t *Timeline) Apply(_ context.Context, stream string, e event.Envelope) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.gate.admit(stream, e, event.IsKnown) {
		return nil
	}
	st := t.runs[stream]
	if st == nil {
		st = &timelineState{steps: map[string]map[uint64]*Attempt{}}
		t.runs[stream] = st
	}
	if !event.IsStepLevel(e.EventType) {
		return nil
	}
	attempts := st.steps[e.StepID]
	if attempts == nil {
		attempts = map[uint64]*Attempt{}
		st.steps[e.StepID] = attempts
		st.order = append(st.order, e.StepID)
	}
	a := attempts[e.LogicalAttemptID]
	if a == nil {
		a = &Attempt{Attempt: e.LogicalAttemptID}
		attempts[e.LogicalAttemptID] = a
	}
	at := e.PersistedAt
	a.Error, a.EndedAt, a.Duration = "", time.Time{}, 0
	switch e.EventType {
	case event.StepStarted:
		a.Status = AttemptRunning
		if a.StartedAt.IsZero() {
			a.StartedAt = at
		}
		return nil
	case event.StepCompleted:
		a.Status = AttemptCompleted
	case event.StepFailed:
		a.Status = AttemptFailed
		a.Error = payloadError(e.Payload)
	case event.StepSkipped:
		a.Status = AttemptSkipped
	}
	a.EndedAt = at
	if !a.StartedAt.IsZero() && !at.IsZero() {
		a.Duration = at.Sub(a.StartedAt)
	}
	return nil
}

// Get returns the timeline of run id.
func (t *Timeline) Get(id string) (RunTimeline, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	st, ok := t.runs[id]
	if !ok {
		return RunTimeline{}, false
	}
	out := RunTimeline{Run: id, Steps: make([]Step, 0, len(st.order))}
	for _, sid := range st.order {
		attempts := st.steps[sid]
		s := Step{ID: sid, Attempts: make([]Attempt, 0, len(attempts))}
		for _, a := range attempts {
			s.Attempts = append(s.Attempts, *a)
		}
		slices.SortFunc(s.Attempts, func(a, b Attempt) int { return cmp.Compare(a.Attempt, b.Attempt) })
		s.Status = s.Attempts[len(s.Attempts)-1].Status
		out.Steps = append(out.Steps, s)
	}
	return out, true
}

// Runs returns the ids of the runs with a timeline, sorted.
func (t *Timeline) Runs() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ids := make([]string, 0, len(t.runs))
	for id := range t.runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
