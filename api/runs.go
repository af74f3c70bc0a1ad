package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
)

// RunsBackend is what the workflow run endpoints serve from: the runs
// client (starts and control go through it, and a run's summary is read
// from its record and stream), the registered workflows, and the Runs and
// Timeline projections with the CatchUp that makes them current. A node
// (plane/node) has all of them.
type RunsBackend struct {
	Client    *workflow.Client
	Workflows *workflow.Workflows
	Runs      *projector.Runs
	Timeline  *projector.Timeline
	// CatchUp feeds the projections what was appended so far; the list
	// and a run's view call it first so they are current.
	CatchUp func(context.Context) error
}

func (b *RunsBackend) check() error {
	if b.Client == nil || b.Workflows == nil || b.Runs == nil || b.Timeline == nil || b.CatchUp == nil {
		return &ConfigError{Field: "Runs", Reason: "Client, Workflows, Runs, Timeline and CatchUp are required"}
	}
	return nil
}

// Run is one row of GET /v1/runs. Status is pending (started, no worker has
// taken it up yet), queued, running, paused, completed, failed or
// cancelled. Times are the store's clock at the lifecycle events.
type Run struct {
	ID         string    `json:"id"`
	Workflow   string    `json:"workflow"`
	Version    uint64    `json:"version"`
	Status     string    `json:"status"`
	Steps      int       `json:"steps"`
	QueuedAt   time.Time `json:"queued_at,omitzero"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	DurationMs int64     `json:"duration_ms,omitempty"`
	LastError  string    `json:"last_error,omitempty"`
	// Attributes are the run's search attributes (GET /v1/runs?attr=
	// filters by them).
	Attributes map[string]string `json:"attributes,omitempty"`
}

// RunView is GET /v1/runs/{id}: the row, the run's head, its output
// (completed) or error (failed, cancelled), and its steps in order with
// their attempts.
type RunView struct {
	Run
	Head       uint64          `json:"head"`
	CreatedAt  time.Time       `json:"created_at,omitzero"`
	Input      json.RawMessage `json:"input,omitempty"` // the run's input, once a worker took it up
	Output     json.RawMessage `json:"output"`          // null unless completed
	OutputCBOR []byte          `json:"output_cbor,omitempty"`
	Error      string          `json:"error,omitempty"`
	Timeline   []RunStep       `json:"timeline"`
	// Actions are the controls that apply in Status: none once finished;
	// resume, cancel and signal while paused; pause, cancel and signal
	// otherwise, and terminate and reset too while blocked or unrunnable.
	Actions []string `json:"actions"`
	// Values are what the run published (workflow.SetEvent), the latest
	// per key; in a single run's view only.
	Values map[string]json.RawMessage `json:"values,omitempty"`
}

// RunStep is one step of a run's timeline.
type RunStep struct {
	ID       string       `json:"id"`
	Status   string       `json:"status"`
	Attempts []RunAttempt `json:"attempts"`
}

// RunAttempt is one logical attempt of a step.
type RunAttempt struct {
	Attempt    uint64    `json:"attempt"`
	Status     string    `json:"status"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	DurationMs int64     `json:"duration_ms,omitempty"`
	Error      string    `json:"error,omitempty"`
	// Started is the attempt's StepStarted payload: the step's kind and
	// what it waits on (an effect's intent and kind, a timer, a signal, a
	// child run).
	Started json.RawMessage `json:"started,omitempty"`
	// Input is the parameters of the effect the attempt asked for, while
	// the store keeps the effect's record; EffectKind its kind.
	Input      json.RawMessage `json:"input,omitempty"`
	EffectKind string          `json:"effect_kind,omitempty"`
	// Output is the step's result (a completed attempt).
	Output json.RawMessage `json:"output,omitempty"`
	// Failure is the StepFailed payload: the error, whether it was final
	// or a timeout, and when the next attempt is due.
	Failure json.RawMessage `json:"failure,omitempty"`
}

// AuditEvent is one event of GET /v1/streams/{id}/audit.
type AuditEvent struct {
	RunSeq           uint64          `json:"run_seq"`
	EventID          string          `json:"event_id"`
	EventType        string          `json:"event_type"`
	PersistedAt      time.Time       `json:"persisted_at,omitzero"`
	EmittedAt        time.Time       `json:"emitted_at,omitzero"`
	StepID           string          `json:"step_id,omitempty"`
	LogicalAttemptID uint64          `json:"logical_attempt_id"`
	PlanID           string          `json:"plan_id,omitempty"`
	PlanVersion      uint64          `json:"plan_version,omitempty"`
	Payload          json.RawMessage `json:"payload"`
}

type startRunReq struct {
	Workflow string          `json:"workflow,omitempty"`
	ID       string          `json:"id,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	// Version pins the run to that version of the workflow; 0: the
	// newest the server carries.
	Version uint64 `json:"version,omitempty"`
	// Queue, Priority and Partition start the run on a named queue
	// (workflow.OnQueue, WithPriority, WithPartition).
	Queue     string `json:"queue,omitempty"`
	Priority  int    `json:"priority,omitempty"`
	Partition string `json:"partition,omitempty"`
	// Signal makes the start a signal-with-start (Client.SignalWithStart).
	Signal *signalReq `json:"signal,omitempty"`
	// Attributes are the run's search attributes (workflow.WithAttributes).
	Attributes map[string]string `json:"attributes,omitempty"`
}

type signalReq struct {
	Name           string          `json:"name,omitempty"`
	Value          json.RawMessage `json:"value,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// Key is idempotency_key's short name, the one a signal-with-start's
	// "signal" object is documented with; either may be given.
	Key string `json:"key,omitempty"`
}

// key is the signal's dedupe key, from whichever field carries it.
func (q *signalReq) key() (string, error) {
	if q.Key != "" && q.IdempotencyKey != "" && q.Key != q.IdempotencyKey {
		return "", invalid(`fields "key" and "idempotency_key" differ`)
	}
	if q.Key != "" {
		return q.Key, nil
	}
	return q.IdempotencyKey, nil
}

type runsResp struct {
	Runs []Run  `json:"runs"`
	Next string `json:"next,omitempty"` // the "after" of the page after; absent on the last page
}

type auditResp struct {
	Events []AuditEvent `json:"events"`
}

// finishedRuns are the statuses of a run that has ended.
var finishedRuns = []string{string(workflow.StatusCompleted), string(workflow.StatusFailed), string(workflow.StatusCancelled)}

// runStatuses are the statuses a list may be filtered by.
var runStatuses = [...]workflow.RunStatus{
	workflow.StatusPending, workflow.StatusQueued, workflow.StatusRunning, workflow.StatusPaused, workflow.StatusBlocked,
	workflow.StatusUnrunnable, workflow.StatusCompleted, workflow.StatusFailed, workflow.StatusCancelled,
}

// waiting are the statuses of a run that a worker must carry on: with no
// live worker carrying its version, it is unrunnable.
var waiting = map[workflow.RunStatus]bool{workflow.StatusPending: true, workflow.StatusQueued: true, workflow.StatusRunning: true}

func (s *Server) runRoutes() {
	s.route("POST /v1/runs", false, s.startRun)
	s.route("GET /v1/runs", false, s.listRuns)
	s.route("GET /v1/runs/{id}", false, s.getRun)
	s.route("POST /v1/runs/{id}/cancel", false, s.controlRun("cancel"))
	s.route("POST /v1/runs/{id}/pause", false, s.controlRun("pause"))
	s.route("POST /v1/runs/{id}/resume", false, s.controlRun("resume"))
	s.route("POST /v1/runs/{id}/terminate", false, s.controlRun("terminate"))
	s.route("POST /v1/runs/{id}/reset", false, s.resetRun)
	s.route("POST /v1/runs/{id}/signals", false, s.signalRun)
	s.route("GET /v1/runs/{id}/query/{name}", false, s.queryRun)
	s.route("GET /v1/runs/{id}/values", false, s.runValues)
	s.route("GET /v1/streams/{id}/audit", false, s.audit)
}

// errNoRuns answers what needs a run when the server serves no workflows:
// no run can exist there.
func errNoRuns(id string) error {
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("run %q not found: no workflows are served", id),
		Details: map[string]any{"resource": "run"}}
}

func (s *Server) startRun(r *http.Request, rc *reqCtx) (int, any, error) {
	var req startRunReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := checkID("run", req.ID); err != nil {
		return 0, nil, err
	}
	rb := s.cfg.Runs
	if rb == nil {
		return 0, nil, invalid("no workflows are served")
	}
	if _, ok := rb.Workflows.Lookup(req.Workflow); !ok {
		return 0, nil, invalid(fmt.Sprintf("unknown workflow %q", truncate(req.Workflow, 128)))
	}
	if _, ok := rb.Workflows.LookupVersion(req.Workflow, req.Version); req.Version != 0 && !ok {
		return 0, nil, invalid(fmt.Sprintf("workflow %q has no version %d here (this server carries %v)",
			truncate(req.Workflow, 128), req.Version, rb.Workflows.Versions(req.Workflow)))
	}
	in, err := jsonToCBOR(req.Input)
	if err != nil {
		return 0, nil, err
	}
	var opts []workflow.StartOption
	if req.Version != 0 {
		opts = append(opts, workflow.WithVersion(req.Version))
	}
	if len(req.Attributes) > 0 {
		opts = append(opts, workflow.WithAttributes(req.Attributes))
	}
	if req.Queue != "" {
		opts = append(opts, workflow.OnQueue(req.Queue), workflow.WithPriority(req.Priority), workflow.WithPartition(req.Partition))
	} else if req.Priority != 0 || req.Partition != "" {
		return 0, nil, invalid("a priority or partition needs a queue")
	}
	var sigVal []byte
	var sigKey string
	if req.Signal != nil {
		if req.Signal.Name == "" {
			return 0, nil, invalid(`field "signal.name" is required`)
		}
		if sigKey, err = req.Signal.key(); err != nil {
			return 0, nil, err
		}
		if sigVal, err = jsonToCBOR(req.Signal.Value); err != nil {
			return 0, nil, err
		}
	}
	created, err := rb.Client.StartCBOR(r.Context(), req.Workflow, req.ID, in, opts...)
	if err != nil && req.Signal != nil && errors.Is(err, workflow.ErrConflict) {
		// Signal-with-start: a run of this workflow is signalled whatever
		// its input.
		if sum, gerr := rb.Client.Get(r.Context(), req.ID); gerr == nil && sum.Workflow == req.Workflow {
			err = nil
		}
	}
	if err != nil {
		return 0, nil, err
	}
	if req.Signal != nil {
		if err := rb.Client.Signal(r.Context(), req.ID, req.Signal.Name, cbor.RawMessage(sigVal), sigKey); err != nil {
			return 0, nil, err
		}
	}
	v, err := s.runView(r.Context(), req.ID, false)
	if err != nil {
		return 0, nil, err
	}
	if created {
		return http.StatusCreated, v, nil
	}
	return http.StatusOK, v, nil
}

// runFilter narrows a runs list: a status (any when empty), a version
// (any when 0), search attributes a run must all carry (none when empty).
type runFilter struct {
	status  string
	version uint64
	attrs   map[string]string
}

// runRowsAt are the rows of the runs of the named workflows that pass f,
// sorted by id, the projections caught up first.
func (s *Server) runRowsAt(ctx context.Context, names []string, f runFilter) ([]Run, error) {
	rb := s.cfg.Runs
	if err := rb.CatchUp(ctx); err != nil {
		return nil, err
	}
	// The runs carrying the attributes, from the projection's index; a run
	// no worker has taken up is not in the projection, and is judged by
	// its start's attributes below.
	var carrying map[string]bool
	if len(f.attrs) > 0 {
		carrying = map[string]bool{}
		for _, id := range rb.Runs.Match(f.attrs) {
			carrying[id] = true
		}
	}
	// Whether some live worker carries each version, read once.
	carriers, err := rb.Client.Carriers(ctx)
	if err != nil {
		return nil, err
	}
	out := []Run{}
	for _, name := range names {
		// The run records decide which runs exist (a run no worker has
		// taken up has no lifecycle event yet, so the projection does
		// not know it); the projection says where each one is.
		ws, err := s.cfg.Store.ListWorlds(ctx, workflow.Universe(name), "")
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			row := Run{ID: w.ID, Workflow: name, Status: string(workflow.StatusPending)}
			p, known := rb.Runs.Get(w.ID)
			if known {
				row = runOf(p)
			}
			if carrying != nil && known && !carrying[w.ID] {
				continue
			}
			if row.Version == 0 && w.Status != store.WorldArchived {
				// No worker has taken it up: its version is its start
				// item's, so a pending run lists (and filters) by the
				// version it is pinned to, and its attributes are its
				// start's.
				if sum, err := rb.Client.Get(ctx, w.ID); err == nil {
					row.Version = sum.Version
					if row.Attributes == nil {
						row.Attributes = sum.Attributes
					}
				}
			}
			if carrying != nil && !known && !projector.HasAttributes(row.Attributes, f.attrs) {
				continue
			}
			// A pause is the run record's at once; the projection learns
			// it only when the run's holder records it, so the list says
			// what the run's view says.
			if w.Status == store.WorldPaused && !slices.Contains(finishedRuns, row.Status) {
				row.Status = string(workflow.StatusPaused)
			}
			// A run that waits or runs while no live worker carries its
			// version is unrunnable, as its own view says.
			if waiting[workflow.RunStatus(row.Status)] && row.Version != 0 {
				if live := carriers(name, row.Version); live != nil {
					row.Status, row.LastError = string(workflow.StatusUnrunnable), workflow.UnrunnableReason(name, row.Version, live)
				}
			}
			if (f.status == "" || row.Status == f.status) && (f.version == 0 || row.Version == f.version) {
				out = append(out, row)
			}
		}
	}
	slices.SortFunc(out, func(a, b Run) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func runOf(p projector.Run) Run {
	st := string(p.Status)
	if p.Status == projector.StatusUnknown {
		st = string(workflow.StatusPending)
	}
	return Run{
		ID: p.ID, Workflow: p.Workflow, Version: p.Version, Status: st, Steps: p.Steps,
		QueuedAt: utc(p.QueuedAt), StartedAt: utc(p.StartedAt), EndedAt: utc(p.EndedAt),
		DurationMs: p.Duration.Milliseconds(), LastError: p.LastError, Attributes: p.Attributes,
	}
}

func (s *Server) getRun(r *http.Request, _ *reqCtx) (int, any, error) {
	id := r.PathValue("id")
	if err := checkID("run", id); err != nil {
		return 0, nil, err
	}
	v, err := s.runView(r.Context(), id, true)
	if err != nil {
		return 0, nil, err
	}
	if v.Values, err = publishedValues(r.Context(), s.cfg.Runs.Client, id); err != nil {
		return 0, nil, err
	}
	if len(v.Values) == 0 {
		v.Values = nil
	}
	return http.StatusOK, v, nil
}

// runView is a run's view: its status, output and error from the run
// itself (Client.Get reads its record and stream, so they are never behind
// the projections), its times and steps from the projections.
func (s *Server) runView(ctx context.Context, id string, catchUp bool) (RunView, error) {
	rb := s.cfg.Runs
	if rb == nil {
		return RunView{}, errNoRuns(id)
	}
	sum, err := rb.Client.Get(ctx, id)
	if err != nil {
		return RunView{}, err
	}
	if catchUp {
		if err := rb.CatchUp(ctx); err != nil {
			return RunView{}, err
		}
	}
	v := RunView{Run: Run{ID: id}, Timeline: []RunStep{}, Output: json.RawMessage("null")}
	if p, ok := rb.Runs.Get(id); ok {
		v.Run = runOf(p)
	}
	v.Workflow, v.Version, v.Status, v.Steps = sum.Workflow, sum.Version, string(sum.Status), sum.Steps
	v.Head, v.CreatedAt, v.Error, v.Attributes = sum.Head, utc(sum.CreatedAt), sum.Error, sum.Attributes
	if len(sum.Output) > 0 {
		out, err := cborToJSON(sum.Output)
		if err != nil {
			return RunView{}, fmt.Errorf("api: run %s: output: %w", id, err)
		}
		v.Output, v.OutputCBOR = out, sum.Output
	}
	if tl, ok := rb.Timeline.Get(id); ok {
		for _, st := range tl.Steps {
			step := RunStep{ID: st.ID, Status: string(st.Status), Attempts: make([]RunAttempt, 0, len(st.Attempts))}
			for _, a := range st.Attempts {
				step.Attempts = append(step.Attempts, RunAttempt{
					Attempt: a.Attempt, Status: string(a.Status), StartedAt: utc(a.StartedAt), EndedAt: utc(a.EndedAt),
					DurationMs: a.Duration.Milliseconds(), Error: a.Error,
				})
			}
			v.Timeline = append(v.Timeline, step)
		}
	}
	if err := s.stepDetails(ctx, &v); err != nil {
		return RunView{}, err
	}
	v.Actions = runActions(v.Status)
	return v, nil
}

// controlRun is POST /v1/runs/{id}/cancel|pause|resume|terminate {reason}:
// it answers the run's view once the request is recorded.
func (s *Server) controlRun(action string) handlerFunc {
	return func(r *http.Request, rc *reqCtx) (int, any, error) {
		id := r.PathValue("id")
		var req reasonReq
		if err := s.body(r, rc, &req, true); err != nil {
			return 0, nil, err
		}
		if err := checkID("run", id); err != nil {
			return 0, nil, err
		}
		rb := s.cfg.Runs
		if rb == nil {
			return 0, nil, errNoRuns(id)
		}
		ctx := r.Context()
		var err error
		switch action {
		case "cancel":
			err = rb.Client.Cancel(ctx, id, req.Reason)
		case "pause":
			err = rb.Client.Pause(ctx, id, req.Reason)
		case "terminate":
			err = rb.Client.Terminate(ctx, id, req.Reason)
		default:
			err = rb.Client.Resume(ctx, id, req.Reason)
		}
		if err != nil {
			return 0, nil, operatorRefusal(action, err)
		}
		v, err := s.runView(ctx, id, false)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, v, nil
	}
}

// resetReq is POST /v1/runs/{id}/reset's body: the step to reset the run
// to (0 the first; required) and the operator's reason.
type resetReq struct {
	Step   *int64 `json:"step,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// resetRun is POST /v1/runs/{id}/reset {step, reason} (Client.Reset): the
// run's steps at and after step are discarded for replay, and the next
// worker re-runs its function from there. It answers the run's view.
func (s *Server) resetRun(r *http.Request, rc *reqCtx) (int, any, error) {
	id := r.PathValue("id")
	var req resetReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := checkID("run", id); err != nil {
		return 0, nil, err
	}
	if req.Step == nil {
		return 0, nil, invalid(`field "step" is required`)
	}
	if *req.Step < 0 || *req.Step > math.MaxInt32 {
		return 0, nil, invalid(fmt.Sprintf(`field "step" must be a step index, 0 or more (not %d)`, *req.Step))
	}
	rb := s.cfg.Runs
	if rb == nil {
		return 0, nil, errNoRuns(id)
	}
	ctx := r.Context()
	if err := rb.Client.Reset(ctx, id, int(*req.Step), req.Reason); err != nil {
		return 0, nil, operatorRefusal("reset", err)
	}
	v, err := s.runView(ctx, id, false)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, v, nil
}

// operatorRefusal says what to do when a terminate or a reset finds the
// run held by a worker (store.ErrLeaseHeld, 409 fenced): cancel or pause
// it first. Any other error is err as it is.
func operatorRefusal(action string, err error) error {
	if (action != "terminate" && action != "reset") || !errors.Is(err, store.ErrLeaseHeld) {
		return err
	}
	e := toError(err)
	e.Message = fmt.Sprintf("a worker holds the run right now, so it cannot be %s: cancel or pause it first (%s)",
		map[string]string{"terminate": "terminated", "reset": "reset"}[action], e.Message)
	return e
}

func (s *Server) signalRun(r *http.Request, rc *reqCtx) (int, any, error) {
	id := r.PathValue("id")
	var req signalReq
	if err := s.body(r, rc, &req, false); err != nil {
		return 0, nil, err
	}
	if err := checkID("run", id); err != nil {
		return 0, nil, err
	}
	if req.Name == "" {
		return 0, nil, invalid(`field "name" is required`)
	}
	key, err := req.key()
	if err != nil {
		return 0, nil, err
	}
	rb := s.cfg.Runs
	if rb == nil {
		return 0, nil, errNoRuns(id)
	}
	val, err := jsonToCBOR(req.Value)
	if err != nil {
		return 0, nil, err
	}
	if err := rb.Client.Signal(r.Context(), id, req.Name, cbor.RawMessage(val), key); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, statusResp{Status: "accepted"}, nil
}

// audit is GET /v1/streams/{id}/audit?from=&to=: the events of any stream
// (a run's or a world's journal) written in from <= persistedAt < to, in
// runSeq order. Both bounds are required RFC 3339 times.
func (s *Server) audit(r *http.Request, _ *reqCtx) (int, any, error) {
	q, err := query(r, "from", "to")
	if err != nil {
		return 0, nil, err
	}
	from, err := timeParam(q, "from")
	if err != nil {
		return 0, nil, err
	}
	to, err := timeParam(q, "to")
	if err != nil {
		return 0, nil, err
	}
	id := r.PathValue("id")
	if err := checkID("stream", id); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	if _, err := s.cfg.Store.GetWorld(ctx, id); err != nil {
		return 0, nil, err
	}
	evs, err := projector.Audit(ctx, s.cfg.Store, id, from, to)
	if err != nil {
		return 0, nil, err
	}
	out := auditResp{Events: make([]AuditEvent, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, auditEventOf(e))
	}
	return http.StatusOK, out, nil
}

func timeParam(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, invalid(fmt.Sprintf("query parameter %q (an RFC 3339 time) is required", name))
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, invalid(fmt.Sprintf("query parameter %q must be an RFC 3339 time", name))
	}
	return t, nil
}

func auditEventOf(e event.Envelope) AuditEvent {
	payload, err := cborToJSON(e.Payload)
	if err != nil {
		payload = json.RawMessage("null") // not CBOR this server can show; the event is still listed
	}
	return AuditEvent{
		RunSeq: e.RunSeq, EventID: e.EventID, EventType: e.EventType, PersistedAt: utc(e.PersistedAt),
		EmittedAt: utc(e.EmittedAt), StepID: e.StepID, LogicalAttemptID: e.LogicalAttemptID,
		PlanID: e.PlanID, PlanVersion: e.PlanVersion, Payload: payload,
	}
}

// ---- client ----

func runPath(id string, rest ...string) string {
	p := "/v1/runs/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// StartRun starts run id of workflow with input (any value encoding/json
// can marshal; it must fit the workflow's input type), at the newest
// version the server carries. Starting it again with the same workflow
// and input answers the run with created=false; other arguments under the
// id are a conflict (errors.Is workflow.ErrConflict). A version no live
// worker carries is refused (errors.Is workflow.ErrVersionNotCarried).
func (c *Client) StartRun(ctx context.Context, workflowName, id string, input any) (v RunView, created bool, err error) {
	return c.StartRunAt(ctx, workflowName, id, 0, input)
}

// StartRunAt is StartRun pinned to version of the workflow (0: the
// newest the server carries); the run finishes on that version.
func (c *Client) StartRunAt(ctx context.Context, workflowName, id string, version uint64, input any) (v RunView, created bool, err error) {
	return c.StartRunOn(ctx, workflowName, id, input, StartOptions{Version: version})
}

// ListRuns lists the runs, optionally of one workflow and in one status.
func (c *Client) ListRuns(ctx context.Context, workflowName, status string) ([]Run, error) {
	q := url.Values{}
	if workflowName != "" {
		q.Set("workflow", workflowName)
	}
	if status != "" {
		q.Set("status", status)
	}
	var out runsResp
	_, err := c.do(ctx, http.MethodGet, "/v1/runs", q, nil, &out)
	return out.Runs, err
}

// GetRun reads a run's view.
func (c *Client) GetRun(ctx context.Context, id string) (RunView, error) {
	var out RunView
	_, err := c.do(ctx, http.MethodGet, runPath(id), nil, nil, &out)
	return out, err
}

func (c *Client) controlRun(ctx context.Context, id, action, reason string) (RunView, error) {
	var out RunView
	_, err := c.do(ctx, http.MethodPost, runPath(id, action), nil, reasonReq{Reason: reason}, &out)
	return out, err
}

// CancelRun cancels a run (a cancelled run: no-op; one that ended otherwise:
// errors.Is workflow.ErrFinished).
func (c *Client) CancelRun(ctx context.Context, id, reason string) (RunView, error) {
	return c.controlRun(ctx, id, "cancel", reason)
}

// PauseRun pauses a run.
func (c *Client) PauseRun(ctx context.Context, id, reason string) (RunView, error) {
	return c.controlRun(ctx, id, "pause", reason)
}

// ResumeRun resumes a paused run.
func (c *Client) ResumeRun(ctx context.Context, id, reason string) (RunView, error) {
	return c.controlRun(ctx, id, "resume", reason)
}

// TerminateRun ends a run for good (workflow.Client.Terminate): it fails
// with "terminated: reason", recorded without a worker carrying its code —
// the way out for a blocked or unrunnable run. An ended run is errors.Is
// workflow.ErrFinished; one a worker holds right now errors.Is
// store.ErrFenced (409 fenced): cancel or pause it first.
func (c *Client) TerminateRun(ctx context.Context, id, reason string) (RunView, error) {
	return c.controlRun(ctx, id, "terminate", reason)
}

// ResetRun resets a run to step (workflow.Client.Reset; 0 the first): its
// steps at and after step are discarded for replay, so the next worker
// re-runs its function from there with the code it carries — the way on
// for a blocked run. A negative step or one past the run's recorded steps
// is refused by the server (400, errors.Is workflow.ErrInvalid); the
// other refusals are TerminateRun's.
func (c *Client) ResetRun(ctx context.Context, id string, step int, reason string) (RunView, error) {
	var out RunView
	s := int64(step)
	_, err := c.do(ctx, http.MethodPost, runPath(id, "reset"), nil, resetReq{Step: &s, Reason: reason}, &out)
	return out, err
}

// SignalRun sends value (any value encoding/json can marshal) to the run as
// signal name; a non-empty key deduplicates retries.
func (c *Client) SignalRun(ctx context.Context, id, name string, value any, key string) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodPost, runPath(id, "signals"), nil, signalReq{Name: name, Value: raw, IdempotencyKey: key}, nil)
	return err
}

// Audit reads the events of stream written in from <= persistedAt < to, in
// runSeq order.
func (c *Client) Audit(ctx context.Context, stream string, from, to time.Time) ([]AuditEvent, error) {
	q := url.Values{"from": {from.UTC().Format(time.RFC3339Nano)}, "to": {to.UTC().Format(time.RFC3339Nano)}}
	var out auditResp
	_, err := c.do(ctx, http.MethodGet, "/v1/streams/"+url.PathEscape(stream)+"/audit", q, nil, &out)
	return out.Events, err
}

// queryResp is a query's answer.
type queryResp struct {
	Value json.RawMessage `json:"value"`
}

// queryRun answers a run's query (workflow.OnQuery) from a replay of its
// journal: nothing is written.
func (s *Server) queryRun(r *http.Request, _ *reqCtx) (int, any, error) {
	id, name := r.PathValue("id"), r.PathValue("name")
	if err := checkID("run", id); err != nil {
		return 0, nil, err
	}
	rb := s.cfg.Runs
	if rb == nil {
		return 0, nil, errNoRuns(id)
	}
	raw, err := rb.Client.Query(r.Context(), id, name)
	if err != nil {
		return 0, nil, err
	}
	v, err := cborToJSON(raw)
	if err != nil {
		return 0, nil, fmt.Errorf("api: run %s: query %s: %w", id, name, err)
	}
	return http.StatusOK, queryResp{Value: v}, nil
}

// valuesResp are the values a run published (workflow.SetEvent).
type valuesResp struct {
	Values map[string]json.RawMessage `json:"values"`
}

func (s *Server) runValues(r *http.Request, _ *reqCtx) (int, any, error) {
	id := r.PathValue("id")
	if err := checkID("run", id); err != nil {
		return 0, nil, err
	}
	rb := s.cfg.Runs
	if rb == nil {
		return 0, nil, errNoRuns(id)
	}
	vals, err := publishedValues(r.Context(), rb.Client, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, valuesResp{Values: vals}, nil
}

// publishedValues are a run's published values as JSON.
func publishedValues(ctx context.Context, cl *workflow.Client, id string) (map[string]json.RawMessage, error) {
	all, err := cl.Events(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(all))
	for k, b := range all {
		v, err := cborToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("api: run %s: value %s: %w", id, k, err)
		}
		out[k] = v
	}
	return out, nil
}

// QueryRun asks run id's query name and returns its answer (JSON).
func (c *Client) QueryRun(ctx context.Context, id, name string) (json.RawMessage, error) {
	var out queryResp
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/query/"+url.PathEscape(name), nil, nil, &out)
	return out.Value, err
}

// RunValues returns the values run id published.
func (c *Client) RunValues(ctx context.Context, id string) (map[string]json.RawMessage, error) {
	var out valuesResp
	_, err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id)+"/values", nil, nil, &out)
	return out.Values, err
}
