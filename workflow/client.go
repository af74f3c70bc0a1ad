package workflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/leasing"
	"github.com/orrery-run/orrery/store"
)

// RunStatus is where a run is in its life.
type RunStatus string

const (
	StatusPending   RunStatus = "pending"   // started; no worker has taken it up yet
	StatusQueued    RunStatus = "queued"    // RunQueued: waiting for a worker with room
	StatusRunning   RunStatus = "running"   // RunStarted, not ended
	StatusPaused    RunStatus = "paused"    // paused by an operator
	StatusCompleted RunStatus = "completed" // RunCompleted
	StatusFailed    RunStatus = "failed"    // RunFailed
	StatusCancelled RunStatus = "cancelled" // RunCancelled
	// StatusBlocked: a worker's code diverged from the run's recorded
	// steps; the run is held (RunPaused with a "divergent at step N"
	// reason), not failed, until a worker whose code replays past that
	// step takes it, or an operator resets or terminates it.
	StatusBlocked RunStatus = "blocked"
	// StatusUnrunnable: the run has not ended, workers are live, and none
	// of them carries its version (capability workflow:<name>@<version>):
	// it waits for a node that does, or for Terminate.
	StatusUnrunnable RunStatus = "unrunnable"
)

// RunSummary is what Get says of a run.
type RunSummary struct {
	ID        string
	Workflow  string
	Version   uint64 // 0 until the start is recorded
	Status    RunStatus
	Steps     int    // steps started so far
	Head      uint64 // the runSeq of its last event
	Output    []byte // canonical CBOR, once completed
	Error     string // once failed or cancelled: the message or the reason
	CreatedAt time.Time
	// Attributes are the run's search attributes (WithAttributes,
	// SetAttributes); nil when it has none.
	Attributes map[string]string
}

// Client starts runs and reads, signals, pauses, resumes and cancels them.
// It needs no worker: everything it does is a store call, and what must be
// recorded under a run's lease while no worker holds the run (a pause, a
// resume, a cancellation) it records itself under a short lease of its
// own (the operator path).
type Client struct {
	st       store.Store
	wf       *Workflows
	ex       actor.Executor
	operator string
	ttl      time.Duration
	holder   *leasing.Holder // the operator path's leases
	pollMin  time.Duration
	pollMax  time.Duration
	workers  []*Worker
	// inc is the client's incarnation under operator: the default operator
	// id is every process's, and two processes operating on one run must
	// not share its epoch.
	inc string
	// liveFor judges a worker that made no liveness promise live while
	// its last heartbeat is younger (ErrVersionNotCarried).
	liveFor time.Duration
	// maxInbox bounds a run's undrained inbox for Signal (0: unbounded).
	maxInbox int
	// versions caches runs' pinned versions (versionOf).
	versionsMu sync.Mutex
	versions   map[string]uint64
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithMaxInbox bounds the undrained inbox a Signal may add to (0, the
// default: unbounded): past it, Signal is refused with an error matching
// store.ErrOverloaded and enqueues nothing; a repeat of an accepted
// signal's key still answers as accepted. Control requests (cancel,
// pause, resume) are the operator's and never bounded.
func WithMaxInbox(n int) ClientOption {
	return func(c *Client) { c.maxInbox = max(n, 0) }
}

// WithPoll bounds the backoff at which Result re-reads a run's stream
// between hints (default 1ms to 1s).
func WithPoll(minDelay, maxDelay time.Duration) ClientOption {
	return func(c *Client) { c.pollMin, c.pollMax = minDelay, maxDelay }
}

// WithWorkers names the workers running in the client's process. Result
// then waits for a run's end to be reported by them, and no longer
// re-reads the run's stream on every status hint of the store: those
// hints are global (each run's start and end raises one), so with many
// Results waiting at once each hint costs a read per waiting Result. A run
// that ends on a worker not named here is noticed by Result's backoff
// (WithPoll) instead.
func WithWorkers(workers ...*Worker) ClientOption {
	return func(c *Client) {
		for _, w := range workers {
			if w != nil {
				c.workers = append(c.workers, w)
			}
		}
	}
}

// WithLiveFor sets how recent the last heartbeat of a worker that made no
// liveness promise (store.AliveAs) must be, by the store's clock, for a
// start to count that worker live when it judges whether some worker
// carries the version asked for (default 30s). A worker that promised is
// live until its promise runs out.
func WithLiveFor(d time.Duration) ClientOption {
	return func(c *Client) { c.liveFor = d }
}

// WithOperator names the lease holder of the client's operator path and
// its lease TTL (default "workflow.operator", 10s).
func WithOperator(id string, ttl time.Duration) ClientOption {
	return func(c *Client) { c.operator, c.ttl = id, ttl }
}

// NewClient returns a client of the runs in st. workflows names the
// definitions it knows (List and Get work for any run; Start takes the
// definition itself). All its waiting goes through ex.
func NewClient(st store.Store, workflows *Workflows, ex actor.Executor, opts ...ClientOption) (*Client, error) {
	if st == nil || ex == nil {
		return nil, errorf("client", ErrInvalid, "", detail("a client needs a store and an executor"))
	}
	c := &Client{st: st, wf: workflows, ex: ex, operator: "workflow.operator", inc: store.NewIncarnation(), ttl: 10 * time.Second,
		pollMin: time.Millisecond, pollMax: time.Second, liveFor: 30 * time.Second}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.pollMin <= 0 || c.pollMax < c.pollMin || c.ttl <= 0 || c.liveFor <= 0 {
		return nil, errorf("client", ErrInvalid, "", detail("poll bounds, the operator TTL and the liveness window must be positive"))
	}
	if err := store.CheckID("client", "operator", c.operator); err != nil {
		return nil, errorf("client", ErrInvalid, "", err)
	}
	c.holder = leasing.New(leasing.Config{Worker: c.operator, Incarnation: c.inc, Store: st, Executor: ex, TTL: c.ttl})
	return c, nil
}

// wrap types a store error: an unknown world is ErrNotFound, an archived
// one ErrFinished; the store error stays reachable with errors.Is.
func wrap(op, run string, err error) error {
	if err == nil {
		return nil
	}
	var we *Error
	if errors.As(err, &we) {
		return err
	}
	switch {
	case errors.Is(err, store.ErrWorldNotFound):
		return errorf(op, ErrNotFound, run, err)
	case errors.Is(err, store.ErrWorldArchived):
		return errorf(op, ErrFinished, run, err)
	}
	return &Error{Op: op, Kind: err, Run: run, Err: err}
}

// startRun starts run runID of def with input (canonical CBOR), once: the
// run's world record is created and its start item enqueued under a fixed
// dedupe key, so a repeated start finds the first one's item and is the
// same run when the workflow, version and input agree (ErrConflict
// otherwise). parent is told when the run ends. A new run is handed to
// the first of local (workers in this process, waited for through ex)
// with room for it, which creates it with its first write; otherwise it
// is created here and a hint wakes every worker's scan.
func startRun(ctx context.Context, st store.Store, def Workflow, runID string, input []byte, parent string, local []*Worker, ex actor.Executor, q *queuedStart, o startOptions) (created bool, err error) {
	const op = "start"
	if err := store.CheckID(op, "run id", runID); err != nil {
		return false, errorf(op, ErrInvalid, runID, err)
	}
	universe := Universe(def.Name())
	start := startItem{Workflow: def.Name(), Version: def.Version(), Input: input, Parent: parent, Timeout: int64(max(o.timeout, 0)), Attrs: o.attrs}
	if q != nil && q.opts.queue != "" {
		start.Queue, start.Priority, start.Partition = q.opts.queue, q.opts.priority, q.opts.partition
	}
	b, err := event.Marshal(start)
	if err != nil {
		return false, errorf(op, ErrInvalid, runID, err)
	}
	item := store.InboxItem{Kind: ItemStart, Payload: b, DedupeKey: startKey}
	spec := store.SpawnSpec{Universe: universe, World: runID, Items: []store.InboxItem{item}}
	if start.Queue != "" {
		// A queued run waits for an admission: no local worker takes it
		// before it exists.
		created, err := startQueued(ctx, st, q.wf, q.holder, q.inc, spec, start, ex.Now())
		if err != nil || created {
			if created {
				hintStarted(ctx, st, runID)
			}
			return created, err
		}
		local = nil // a repeated start: checked as one below
	}
	// A local worker with room takes the run before it exists: its first
	// write creates it, with its first events, in one transaction.
	for _, w := range local {
		if ex == nil {
			break
		}
		sp := w.adopt(runID, def, spec, start, ex.NewParker())
		if sp == nil {
			continue
		}
		tried, err, waitErr := sp.wait(ctx)
		switch {
		case waitErr != nil:
			return false, waitErr
		case tried && err == nil:
			return true, nil
		case tried && !errors.Is(err, store.ErrWorldExists):
			return false, wrap(op, runID, err)
		}
		// Taken (a repeated start), or the worker stopped the run before
		// its first write: as without a worker.
		break
	}
	// A store that lost what it had committed (a failover to an
	// asynchronous standby) between two of the calls below can say the
	// world exists and then that it does not: such a start is made
	// again, from the top, a few times.
	for range 3 {
		created, again, err := startStored(ctx, st, def, runID, input, spec, item, universe)
		if !again {
			return created, err
		}
	}
	return false, errorf(op, ErrStopped, runID, detail("the store's answers disagreed three times over; retry the start"))
}

// startStored writes the run's world and start item, or finds the ones a
// start before wrote. again reports answers that contradict one another,
// which only a store that lost commits gives.
func startStored(ctx context.Context, st store.Store, def Workflow, runID string, input []byte, spec store.SpawnSpec, item store.InboxItem, universe string) (created, again bool, err error) {
	const op = "start"
	// The run's world and its start item, in one write; a hint wakes the
	// workers' scans.
	if _, err = st.Spawn(ctx, spec); err == nil {
		hintStarted(ctx, st, runID)
		return true, false, nil
	} else if !errors.Is(err, store.ErrWorldExists) {
		return false, false, wrap(op, runID, err)
	}
	rec, err := st.GetWorld(ctx, runID)
	if errors.Is(err, store.ErrWorldNotFound) {
		return false, true, nil // it existed a moment ago
	}
	if err != nil {
		return false, false, wrap(op, runID, err)
	}
	if rec.Universe != universe {
		return false, false, errorf(op, ErrConflict, runID, detail("the id is taken by a world of universe "+rec.Universe))
	}
	// The world exists: this is a repeated start, or one whose world was
	// created without its start item (a store written before Spawn).
	_, dup, err := st.Enqueue(ctx, runID, item)
	switch {
	case err == nil && !dup:
		hintStarted(ctx, st, runID)
		return true, false, nil
	case errors.Is(err, store.ErrWorldNotFound):
		return false, true, nil
	case err != nil && !errors.Is(err, store.ErrWorldArchived):
		return false, false, wrap(op, runID, err)
	}
	first, err := readStart(ctx, st, runID)
	switch {
	case errors.Is(err, store.ErrWorldNotFound):
		return false, true, nil
	case err != nil:
		return false, false, err
	}
	if first == nil || first.Workflow != def.Name() || first.Version != def.Version() || !bytes.Equal(first.Input, input) {
		return false, false, errorf(op, ErrConflict, runID, detail("the run was started with another workflow, version or input"))
	}
	return false, false, nil
}

// hintStarted wakes every worker's scan: an assignment naming no worker
// restricts nothing, and raises the hint.
func hintStarted(ctx context.Context, st store.Store, runID string) {
	_ = st.Assign(ctx, runID, store.Assignment{Reason: "workflow: started"}, nil)
}

// readStart reads a run's start item (nil if there is none yet).
func readStart(ctx context.Context, st store.Store, runID string) (*startItem, error) {
	it, err := findItem(ctx, st, runID, func(it store.InboxItem) bool { return it.Kind == ItemStart })
	if err != nil || it == nil {
		return nil, wrap("read", runID, err)
	}
	s, err := decodeStart(it.Payload)
	if err != nil {
		return nil, wrap("read", runID, err)
	}
	return &s, nil
}

// findItem returns the first item of runID's inbox that match accepts
// (nil if none does), reading it a page at a time.
func findItem(ctx context.Context, st store.Store, runID string, match func(store.InboxItem) bool) (*store.InboxItem, error) {
	var after uint64
	for {
		its, err := st.ReadInbox(ctx, runID, after, 64)
		if err != nil {
			return nil, err
		}
		for i := range its {
			if match(its[i]) {
				return &its[i], nil
			}
			after = its[i].Seq
		}
		if len(its) < 64 {
			return nil, nil
		}
	}
}

// WithVersion starts the run at version v of the workflow rather than the
// newest one the client's Workflows registers: the run is pinned to it and
// finishes on it. A version the client does not register is ErrInvalid.
func WithVersion(v uint64) StartOption { return func(o *startOptions) { o.version = v } }

// ScheduleTick marks a start as a schedule's tick: its run id is in the
// schedules' namespace (store.ScheduleRunPrefix), which any other start is
// refused. For the scheduler alone: a start that takes a tick's run id
// first would make the tick dedupe against it and never happen.
func ScheduleTick() StartOption { return func(o *startOptions) { o.tick = true } }

// checkRunNamespace refuses a run id in the schedules' namespace unless
// the start is a schedule's tick, and a tick's run id outside it.
func checkRunNamespace(runID string, o startOptions) error {
	if sched := strings.HasPrefix(runID, store.ScheduleRunPrefix); sched != o.tick {
		if sched {
			return errorf("start", ErrInvalid, runID, detail(fmt.Sprintf("run ids starting %q are reserved for schedules' ticks", store.ScheduleRunPrefix)))
		}
		return errorf("start", ErrInvalid, runID, detail(fmt.Sprintf("a schedule tick's run id starts %q", store.ScheduleRunPrefix)))
	}
	return nil
}

// Start starts def as run runID with input in (of def's input type):
// idempotent by run id, so the same id with the same workflow, version and
// input is the same run, started once; anything else under that id is
// ErrConflict. It returns once the run is durable; a worker runs it. The
// run is pinned to def's version: only workers carrying it run it, and a
// version no live worker carries is refused with ErrVersionNotCarried
// (see carried).
// Given a worker in this process with room (WithWorkers), the run goes to
// it before it exists: the function runs up to its first durable point,
// whose write creates the run, and Start returns once that is written.
func (c *Client) Start(ctx context.Context, def Workflow, runID string, in any, opts ...StartOption) error {
	if def == nil {
		return errorf("start", ErrInvalid, runID, detail("a nil workflow"))
	}
	if err := def.check(); err != nil {
		return err
	}
	o, err := resolveStart(opts)
	if err != nil {
		return err
	}
	if err := checkRunNamespace(runID, o); err != nil {
		return err
	}
	b, err := def.encodeInput(in)
	if err != nil {
		return err
	}
	if err := c.carried(ctx, def, runID); err != nil {
		return err
	}
	_, err = startRun(ctx, c.st, def, runID, b, "", c.workers, c.ex, c.queued(o), o)
	return err
}

// StartCBOR starts run runID of the registered workflow name with an input
// given as CBOR (as an API or a command line has it, without the Go type):
// the input is decoded strictly into the workflow's input type, and a shape
// that does not fit is ErrInvalid, wrapping the event decoder's error, and so
// is a name (or a WithVersion version) the client's Workflows does not
// register. The run takes the newest registered version unless WithVersion
// names one. Otherwise it is Start, and created
// reports whether this call started the run (false: the same start was
// already recorded).
func (c *Client) StartCBOR(ctx context.Context, name, runID string, input []byte, opts ...StartOption) (created bool, err error) {
	o, err := resolveStart(opts)
	if err != nil {
		return false, err
	}
	if err := checkRunNamespace(runID, o); err != nil {
		return false, err
	}
	def, ok := c.wf.Lookup(name)
	if o.version != 0 {
		def, ok = c.wf.LookupVersion(name, o.version)
	}
	if !ok {
		what := "no workflow " + name + " is registered"
		if o.version != 0 && len(c.wf.Versions(name)) > 0 {
			what = fmt.Sprintf("workflow %s has no version %d registered (it has %v)", name, o.version, c.wf.Versions(name))
		}
		return false, errorf("start", ErrInvalid, runID, detail(what))
	}
	b, err := def.canonInput(input)
	if err != nil {
		var we *Error
		if errors.As(err, &we) {
			we.Run = runID
		}
		return false, err
	}
	if err := c.carried(ctx, def, runID); err != nil {
		return false, err
	}
	created, err = startRun(ctx, c.st, def, runID, b, "", c.workers, c.ex, c.queued(o), o)
	if o.version == 0 && errors.Is(err, ErrConflict) {
		// A start that names no version is repeated by a client that is
		// unsure of the first answer, and during a rolling upgrade the
		// repeat may reach a process of another release, whose newest
		// version differs: the run of this workflow and input that the
		// first start made, on whatever version, is the one it meant.
		if first, rerr := readStart(ctx, c.st, runID); rerr == nil && first != nil &&
			first.Workflow == name && first.Version != def.Version() && bytes.Equal(first.Input, b) {
			return false, nil
		}
	}
	return created, err
}

// carried refuses, with ErrVersionNotCarried, a start of a version that no
// live worker carries, judged from the workers' advertised capabilities
// (workflow:<name>@<version>, and RunsCapability when the worker
// advertises roles); a worker that advertises nothing (a binary
// older than capabilities) counts as carrying every version. It is never
// a refusal when a worker of this client (WithWorkers) carries the
// version, nor while no worker is live at all: with nobody to judge by,
// the run waits for a worker as it always did. Liveness is judged on the
// store's clock: a worker's liveness promise (AliveUntil) while it runs,
// else a heartbeat younger than the client's liveness window.
//
// A start whose run exists already is never refused: a retry after a lost
// answer gets the same run (or ErrConflict), as any repeated start does.
// The judgement is a snapshot: a node that stops right after may leave
// the run waiting, as a node that starts right after would have run it.
// A run's children are never refused here (a refusal would be replayed
// differently): their parent's code names their version.
func (c *Client) carried(ctx context.Context, def Workflow, runID string) error {
	live, err := c.notCarried(ctx, def.Name(), def.Version())
	if err != nil {
		return wrap("start", runID, err)
	}
	if len(live) == 0 {
		return nil
	}
	capability := Capability(def.Name(), def.Version())
	if _, err := c.st.GetWorld(ctx, runID); err == nil {
		// A repeated start (a retry after a lost answer) is answered as
		// one: the same run, or ErrConflict, never a refusal.
		return nil
	}
	return errorf("start", ErrVersionNotCarried, runID, detail(fmt.Sprintf(
		"no live worker carries %s (live: %s); deploy a node that registers version %d, or start the run at a carried version",
		capability, strings.Join(live, ", "), def.Version())))
}

// notCarried names the live workers when some are live and none of them
// (nor a worker of this process) runs version of workflow name; else nil.
func (c *Client) notCarried(ctx context.Context, name string, version uint64) ([]string, error) {
	judge, err := c.Carriers(ctx)
	if err != nil {
		return nil, err
	}
	return judge(name, version), nil
}

// Start is Client.Start with a typed input.
func (d *Def[In, Out]) Start(ctx context.Context, c *Client, runID string, in In, opts ...StartOption) error {
	return c.Start(ctx, d, runID, in, opts...)
}

// Result is Client.Result with the output decoded.
func (d *Def[In, Out]) Result(ctx context.Context, c *Client, runID string) (Out, error) {
	var out Out
	b, err := c.Result(ctx, runID)
	if err != nil {
		return out, err
	}
	if err := event.Unmarshal(b, &out); err != nil {
		return out, errorf("result", ErrInvalid, runID, err)
	}
	return out, nil
}

// run reads a run's world record: ErrNotFound unless it is a run.
func (c *Client) run(ctx context.Context, op, runID string) (store.World, error) {
	return runRecord(ctx, c.st, op, runID)
}

// runRecord reads run runID's world record; a world that is not a run is
// ErrNotFound.
func runRecord(ctx context.Context, st store.Store, op, runID string) (store.World, error) {
	rec, err := st.GetWorld(ctx, runID)
	if err != nil {
		return store.World{}, wrap(op, runID, err)
	}
	if !strings.HasPrefix(rec.Universe, UniversePrefix) {
		return store.World{}, errorf(op, ErrNotFound, runID, detail("a world of universe "+rec.Universe+", not a run"))
	}
	return rec, nil
}

// Result waits until the run ends and returns its output (canonical CBOR),
// or a *RunError for a run that failed (unwrapping to a *DivergenceError
// when it failed by one) or was cancelled. It re-reads the run's stream
// on every status hint (or, with WithWorkers, when one of those workers
// ends the run) and on a backoff on the executor's clock.
func (c *Client) Result(ctx context.Context, runID string) ([]byte, error) {
	wake := c.ex.NewParker()
	// Registered before the first read, so an end recorded after that read
	// wakes this wait. While one of the workers runs the run, its end (or
	// its process stopping otherwise) is reported here: the store need not
	// be read until then.
	ew := &endWaiter{wake: wake}
	for _, w := range c.workers {
		defer w.await(runID, ew)()
	}
	// Asked after registering, so a run live here now reports its stop to
	// ew; asked again after each wake, since the run may have been taken
	// up here again.
	liveHere := func() bool {
		return slices.ContainsFunc(c.workers, func(w *Worker) bool { return w.running(runID) })
	}
	if len(c.workers) == 0 {
		if stopWatch, err := c.st.Watch(ctx, wake, store.TopicAssignments); err == nil {
			defer stopWatch()
		}
	}
	checked := false
	var after uint64
	delay := c.pollMin
	for {
		if e := ew.end.Load(); e != nil {
			return outcome(runID, e)
		}
		wait := c.pollMax
		if !liveHere() {
			if !checked {
				if _, err := c.run(ctx, "result", runID); err != nil {
					return nil, err
				}
				checked = true
			}
			evs, err := c.st.Read(ctx, runID, after, 512)
			if err != nil {
				return nil, wrap("result", runID, err)
			}
			for i := range evs {
				after = evs[i].RunSeq
				if endStatus(evs[i].EventType) != "" {
					return outcome(runID, &evs[i])
				}
			}
			if len(evs) == 512 {
				continue
			}
			wait, delay = delay, min(2*delay, c.pollMax)
		}
		t := c.ex.AfterFunc(wait, wake.Unpark)
		err := wake.Park(ctx)
		t.Stop()
		if err != nil {
			return nil, err
		}
	}
}

// outcome reads a run's end event.
func outcome(runID string, e *event.Envelope) ([]byte, error) {
	p, err := decodePayload(e.EventType, e.Payload)
	if err != nil {
		return nil, errorf("result", ErrInvalid, runID, err)
	}
	end := p.(runEnd)
	switch e.EventType {
	case event.RunCompleted:
		return end.Output, nil
	case event.RunCancelled:
		return nil, &RunError{RunID: runID, Status: StatusCancelled, Message: end.Reason}
	}
	re := &RunError{RunID: runID, Status: StatusFailed, Message: end.Error}
	if d := end.Divergence; d != nil {
		re.Divergence = &DivergenceError{RunID: runID, StepIndex: int(d.Index), Recorded: d.Recorded, Got: d.Got, Reason: d.Reason}
	}
	return nil, re
}

// Get summarises a run from its world record and its stream.
func (c *Client) Get(ctx context.Context, runID string) (RunSummary, error) {
	rec, err := c.run(ctx, "get", runID)
	if err != nil {
		return RunSummary{}, err
	}
	s := RunSummary{ID: runID, Workflow: strings.TrimPrefix(rec.Universe, UniversePrefix), CreatedAt: rec.CreatedAt}
	h := newHistory()
	if _, err := h.load(ctx, c.st, runID); err != nil {
		var we *Error
		if errors.As(err, &we) {
			return RunSummary{}, err
		}
		return RunSummary{}, wrap("get", runID, err)
	}
	s.Version, s.Attributes = h.version, h.attrs
	if s.Version == 0 {
		if st, err := readStart(ctx, c.st, runID); err == nil && st != nil {
			s.Version, s.Attributes = st.Version, st.Attrs
		}
	}
	s.Steps, s.Head = len(h.steps), h.head
	switch {
	case h.terminal != nil:
		s.Status = endStatus(h.terminal.EventType)
		out, err := outcome(runID, h.terminal)
		s.Output = out
		var re *RunError
		if errors.As(err, &re) {
			s.Error = re.Message
		}
	case rec.Status == store.WorldPaused:
		s.Status = StatusPaused
	case h.blocked != "":
		s.Status, s.Error = StatusBlocked, "blocked: "+h.blocked
	case h.started:
		s.Status = StatusRunning
	case h.queued:
		s.Status = StatusQueued
	default:
		s.Status = StatusPending
	}
	if h.terminal == nil && s.Status != StatusPaused && s.Status != StatusBlocked && s.Version != 0 {
		live, err := c.notCarried(ctx, s.Workflow, s.Version)
		if err != nil {
			return RunSummary{}, wrap("get", runID, err)
		}
		if len(live) > 0 {
			s.Status, s.Error = StatusUnrunnable, UnrunnableReason(s.Workflow, s.Version, live)
		}
	}
	return s, nil
}

// List summarises every run of workflow name, sorted by run id. It reads
// each run's stream (Get): an operator's view, not a hot path.
func (c *Client) List(ctx context.Context, name string) ([]RunSummary, error) {
	recs, err := c.st.ListWorlds(ctx, Universe(name), "")
	if err != nil {
		return nil, wrap("list", "", err)
	}
	out := make([]RunSummary, 0, len(recs))
	for _, rec := range recs {
		s, err := c.Get(ctx, rec.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Signal sends value (any value with a canonical CBOR encoding) to the
// run as signal name, for an Await of that name. A non-empty key
// deduplicates retries of the same signal. A finished run: ErrFinished.
func (c *Client) Signal(ctx context.Context, runID, name string, value any, key string) error {
	const op = "signal"
	if err := checkName(op, name); err != nil {
		return err
	}
	v, err := event.Marshal(value)
	if err != nil {
		return errorf(op, ErrInvalid, runID, err)
	}
	b, err := event.Marshal(signalItem{Name: name, Value: v})
	if err != nil {
		return errorf(op, ErrInvalid, runID, err)
	}
	dedupe := ""
	if key != "" {
		dedupe = ItemSignal + ":" + key
		if err := store.CheckKey(op, "key", dedupe); err != nil {
			return errorf(op, ErrInvalid, runID, err)
		}
	}
	if _, err := c.run(ctx, op, runID); err != nil {
		return err
	}
	_, _, err = c.st.Enqueue(ctx, runID, store.InboxItem{Kind: ItemSignal, Payload: b, DedupeKey: dedupe, MaxBacklog: c.maxInbox})
	return wrap(op, runID, err)
}

// control enqueues a control request.
func (c *Client) control(ctx context.Context, runID, op, reason, dedupe string) error {
	if err := store.CheckReason(op, reason); err != nil {
		return errorf(op, ErrInvalid, runID, err)
	}
	b, err := event.Marshal(controlItem{Op: op, Reason: reason})
	if err != nil {
		return errorf(op, ErrInvalid, runID, err)
	}
	_, _, err = c.st.Enqueue(ctx, runID, store.InboxItem{Kind: ItemControl, Payload: b, DedupeKey: dedupe})
	return wrap(op, runID, err)
}

// Cancel cancels the run. The cancel is told to its function: whoever
// holds the run records the steps in flight as StepSkipped and they
// return a *Cancelled (matching ErrCancelled), so the function can
// compensate on Detached(c) before it returns; the run ends RunCancelled
// when the function returns an error matching ErrCancelled. A run that
// recorded no step yet is cancelled at once (by the client itself when
// nobody holds it). The run's children whose parent-close policy is
// ParentCloseCancel are asked to cancel when the function is told.
// Cancelling a cancelled run is a no-op; one that ended otherwise is
// ErrFinished.
func (c *Client) Cancel(ctx context.Context, runID, reason string) error {
	const op = "cancel"
	rec, err := c.run(ctx, op, runID)
	if err != nil {
		return err
	}
	if rec.Status == store.WorldArchived {
		if rec.StatusReason == string(StatusCancelled) {
			return nil
		}
		return errorf(op, ErrFinished, runID, detail("the run "+rec.StatusReason))
	}
	if err := store.CheckReason(op, reason); err != nil {
		return errorf(op, ErrInvalid, runID, err)
	}
	if err := requestCancel(ctx, c.st, runID, reason); err != nil {
		return wrap(op, runID, err)
	}
	_, err = c.operate(ctx, op, runID)
	return err
}

// requestCancel asks run runID to be cancelled: the request enters its
// inbox (once: a second request is a duplicate), and a paused run, which
// nobody may hold, is made active so that whoever takes it up ends it. A
// run that has ended already is left as it is.
func requestCancel(ctx context.Context, st store.Store, runID, reason string) error {
	b, err := event.Marshal(controlItem{Op: opCancel, Reason: reason})
	if err != nil {
		return err
	}
	_, _, err = st.Enqueue(ctx, runID, store.InboxItem{Kind: ItemControl, Payload: b, DedupeKey: ItemControl + ":cancel"})
	switch {
	case errors.Is(err, store.ErrWorldArchived) || errors.Is(err, store.ErrWorldNotFound):
		return nil
	case err != nil:
		return err
	}
	_, err = st.SetWorldStatus(ctx, runID, store.WorldActive, "workflow: cancelling")
	if errors.Is(err, store.ErrWorldArchived) {
		return nil
	}
	return err
}

// pauseStatus makes run runID paused, then looks for a cancel request in
// its inbox. requestCancel enqueues its request before it makes the run
// active, so a cancel that raced this pause is either seen here, and the
// run made active again for it, or made the run active after this one.
// Without the look, a pause that landed late (a holder descheduled between
// seeing the request and recording the status) could bury a cancel: the
// run paused, the cancel waiting, and no worker allowed to take it up.
func pauseStatus(ctx context.Context, st store.Store, runID, reason string) error {
	if _, err := st.SetWorldStatus(ctx, runID, store.WorldPaused, reason); err != nil {
		return err
	}
	cancel, err := findItem(ctx, st, runID, func(it store.InboxItem) bool {
		if it.Kind != ItemControl {
			return false
		}
		c, err := decodeControl(it.Payload)
		return err == nil && c.Op == opCancel
	})
	if err != nil || cancel == nil {
		return err
	}
	_, err = st.SetWorldStatus(ctx, runID, store.WorldActive, "workflow: cancelling")
	return err
}

// Pause pauses the run: its status becomes paused, which ends its lease at
// once (the holder is fenced: nothing it does is recorded from then on,
// and it stops), and no worker takes it up until Resume. RunPaused is
// recorded by the holder when it sees the request before the fence, by
// this client when nobody holds the run, and otherwise by whoever holds
// the run next, with the request's time as its sourceOccurredAt. A paused
// run: no-op; a finished one: ErrFinished.
func (c *Client) Pause(ctx context.Context, runID, reason string) error {
	const op = "pause"
	rec, err := c.run(ctx, op, runID)
	if err != nil {
		return err
	}
	switch rec.Status {
	case store.WorldArchived:
		return errorf(op, ErrFinished, runID, detail("the run "+rec.StatusReason))
	case store.WorldPaused:
		return nil
	}
	if err := c.control(ctx, runID, opPause, reason, ""); err != nil {
		return err
	}
	held, err := c.operate(ctx, op, runID)
	if err != nil || !held {
		return err
	}
	msg := "workflow: paused"
	if reason != "" {
		msg += ": " + reason
	}
	if err := pauseStatus(ctx, c.st, runID, msg); err != nil && !errors.Is(err, store.ErrWorldArchived) {
		return wrap(op, runID, err)
	}
	return nil
}

// Resume makes a paused run active again; a worker takes it up and
// re-runs it from its history (the step that was cut short runs again).
// RunResumed is recorded by this client when it can take the run's lease,
// else by the worker that holds it next. An active run: no-op; a finished
// one: ErrFinished.
func (c *Client) Resume(ctx context.Context, runID, reason string) error {
	const op = "resume"
	rec, err := c.run(ctx, op, runID)
	if err != nil {
		return err
	}
	switch rec.Status {
	case store.WorldArchived:
		return errorf(op, ErrFinished, runID, detail("the run "+rec.StatusReason))
	case store.WorldActive:
		return nil
	}
	if err := c.control(ctx, runID, opResume, reason, ""); err != nil {
		return err
	}
	msg := "workflow: resumed"
	if reason != "" {
		msg += ": " + reason
	}
	if _, err := c.st.SetWorldStatus(ctx, runID, store.WorldActive, msg); err != nil {
		return wrap(op, runID, err)
	}
	_, err = c.operate(ctx, op, runID)
	return err
}

// operate is the operator path: when nobody holds the run, the client
// takes its lease for a moment and records what its control requests ask
// (catching up pauses and resumes, pausing, cancelling). held reports that
// someone else holds it, and records it in their place.
func (c *Client) operate(ctx context.Context, op, runID string) (held bool, err error) {
	g, err := c.holder.Acquire(ctx, runID)
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		return true, nil
	case errors.Is(err, store.ErrWorldArchived) || errors.Is(err, store.ErrWorldPaused):
		return false, nil
	case err != nil:
		return false, wrap(op, runID, err)
	}
	r := newRunner(c.st, c.ex, runID, g, c.holder, c.pollMin)
	c.holder.Track(&r.lease, g)
	defer func() {
		if !r.fenced.Load() {
			_ = c.holder.Release(ctx, runID, g.Lease.Epoch)
		}
	}()
	if err := r.load(ctx); err != nil {
		return false, wrap(op, runID, err)
	}
	switch {
	case r.h.terminal != nil:
		return false, wrap(op, runID, r.finish(ctx))
	case r.start == nil:
		// Started only halfway (no start item): nothing to record; a
		// cancel just ends it.
		if p := r.plan(); p.cancel != nil {
			if _, err := c.st.SetWorldStatus(ctx, runID, store.WorldArchived, string(StatusCancelled)); err != nil {
				return false, wrap(op, runID, err)
			}
		}
		return false, nil
	}
	err = r.applyPlan(ctx, r.plan(), nil)
	var s *stop
	switch {
	case errors.As(err, &s) && (s.kind == stopCancel || s.kind == stopPause):
		return false, nil
	case r.fenced.Load() || errors.As(err, &s) && s.kind == stopFenced || isFencing(err):
		// Another holder took the run over meanwhile (a worker, or
		// another client's operator path under a new incarnation): the
		// request is in the inbox already, and the new holder records it
		// in this one's place, as when it held the run from the start.
		return true, nil
	}
	return false, wrap(op, runID, err)
}

// isFencing tells a store's refusal of a write under a lease that is no
// longer the writer's.
func isFencing(err error) bool {
	return errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrStaleEpoch) || errors.Is(err, store.ErrNotHolder)
}

// queuedStart is what a start on a queue needs of its client: the
// declared queues, and the lease holder that records RunQueued.
type queuedStart struct {
	opts        startOptions
	wf          *Workflows
	holder, inc string
}

func (c *Client) queued(o startOptions) *queuedStart {
	if o.queue == "" {
		return nil
	}
	return &queuedStart{opts: o, wf: c.wf, holder: c.operator, inc: c.inc}
}
