package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/leasing"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Event is one thing a worker did with a run. Tests and metrics read them
// (WorkerConfig.Observe).
type Event struct {
	Kind  string // one of the Ev* constants
	Run   string
	Epoch uint64
	Err   error
	At    time.Time // the executor's clock
	// Step and Outcome are an EvStep's: the step id, and how its attempt
	// ended (StepCompleted, StepRetried or StepFailedForGood).
	Step    string
	Outcome string
}

// Worker event kinds.
const (
	EvAcquired  = "acquired"  // the worker took the run's lease
	EvQueued    = "queued"    // RunQueued recorded: the worker was at MaxActiveRuns
	EvAdmitted  = "admitted"  // the worker admitted a run from its queue (store.AdmitRuns)
	EvStarted   = "started"   // the run's function started here (first run or replay)
	EvFenced    = "fenced"    // the run stopped here: its lease was lost or revoked, or the store fenced a write (Err says which)
	EvPaused    = "paused"    // the run stopped here because it was paused
	EvFinished  = "finished"  // the run's end is recorded and the run archived
	EvError     = "error"     // the run stopped here on a store or history error (Err); it is taken up again
	EvStopped   = "stopped"   // the worker stopped the run (Stop, Kill)
	EvDiverged  = "diverged"  // the code diverged from the run's steps: the run is held (Err is the *DivergenceError)
	EvRenewFail = "renewfail" // a RenewLeases call failed (Err); the leases fence themselves at expiry
	EvStep      = "step"      // a step's attempt ended and its end was recorded here (Step, Outcome; Err the failure)
)

// Outcomes of an EvStep.
const (
	StepCompleted     = "completed" // the attempt succeeded
	StepRetried       = "retried"   // the attempt failed and the step will be tried again
	StepFailedForGood = "failed"    // the attempt failed and the step failed for good
)

// emitStep reports a recorded step end (EvStep).
func (r *runner) emitStep(step, outcome string, err error) {
	if r.observe != nil {
		r.observe(Event{Kind: EvStep, Run: r.id, Epoch: r.epoch, Err: err, At: r.ex.Now(), Step: step, Outcome: outcome})
	}
}

// stopKind says why a run stopped on this worker.
type stopKind uint8

const (
	stopFenced    stopKind = iota + 1 // the lease is gone: nothing more may be written
	stopShutdown                      // the worker is stopping
	stopPause                         // paused: recorded, status set
	stopCancel                        // cancelled: recorded, the run ended
	stopError                         // a store call or the history failed
	stopUnspawned                     // the run's first write could not create it (see spawning)
	stopBlocked                       // the code diverged from the run's steps: held, lease released
)

func (k stopKind) String() string {
	switch k {
	case stopFenced:
		return "fenced"
	case stopShutdown:
		return "worker stopping"
	case stopPause:
		return "paused"
	case stopCancel:
		return "cancelled"
	case stopUnspawned:
		return "not created"
	case stopBlocked:
		return "blocked"
	}
	return "error"
}

// stop is why a run stopped here. It is the error every step call of a
// stopped run returns: it matches ErrStopped, and unwraps to its cause (a
// store error, so errors.Is(err, store.ErrFenced) works).
type stop struct {
	kind  stopKind
	cause error
}

func (s *stop) Error() string {
	msg := "workflow: run stopped on this worker (" + s.kind.String() + ")"
	if s.cause != nil {
		msg += ": " + s.cause.Error()
	}
	return msg
}

func (s *stop) Is(target error) bool { return target == ErrStopped }

func (s *stop) Unwrap() error { return s.cause }

// item is one decoded inbox item of a run.
type item struct {
	seq     uint64
	kind    string
	dedupe  string
	at      time.Time
	start   *startItem
	signal  *signalItem
	control *controlItem
	receipt *world.Receipt
	timer   *timerPayload
}

// childState follows a child run's stream.
type childState struct {
	after uint64
	end   *event.Envelope
	// lastRead is when its stream was last read; seen how far the run's
	// inbox was searched for its end's notice.
	lastRead time.Time
	seen     int
}

// runner is one run held under a lease: by a worker, which runs its
// function, or by a client's operator path, which only records a
// cancellation. Its history and inbox cache are touched by one goroutine
// at a time (the run's, or the control branch of a step race while the
// run's goroutine waits for the race); fenced and lease are the
// controller's too.
type runner struct {
	st    store.Store
	ex    actor.Executor
	id    string
	epoch uint64
	// lease holds the local deadline (on the executor's clock, from before
	// the request that granted or renewed it): writable checks it. holder
	// renews it (the worker's) or only times it (the operator path's).
	lease   leasing.Lease
	holder  *leasing.Holder
	fenced  atomic.Bool
	cancel  atomic.Pointer[context.CancelFunc] // ends the run's context (its process's)
	park    actor.Parker                       // woken by the run's inbox hints and by fencing
	poll    time.Duration
	scope   *actor.Scope // where step races run (nil for the operator)
	def     Workflow
	observe func(Event)
	replay  bool   // Replay: answer recorded steps only, touch no store
	fresh   *fresh // set when this worker started the run itself: nothing to read
	// inboxHint is set by the run's inbox hints and cleared by each read
	// of the inbox; lastRead is when the inbox was last read. Between
	// hints the inbox is re-read only every poll interval: a step's
	// control watch and a wait cost no read while nothing arrives.
	inboxHint atomic.Bool
	lastRead  time.Time
	// lastControl is when a step's control watch last looked; it looks
	// again controlEvery later at the soonest (WorkerConfig.ControlEvery).
	lastControl  time.Time
	controlEvery time.Duration
	// spawn is set while the run does not exist yet: its first write
	// creates it (the run's goroutine only); unspawned says so to the
	// worker's controller, which renews no lease for it.
	spawn     *spawning
	unspawned atomic.Bool
	// archived is set once the run's archiving is written (with its end,
	// or by finish for a run found ended but still active).
	archived bool

	h *history
	// pending are events built but not yet written: RunStarted and a plain
	// step's StepCompleted, which ride with the run's next write (the next
	// step's StepStarted, a wait, the end). A crash before that write
	// loses them, and the step runs again as its next attempt: the
	// at-least-once a step promises anyway, for one write fewer per step.
	pending []event.Envelope
	start   *startItem
	items   []item
	readTo  uint64
	kids    map[string]*childState
	// sch are the coroutines of the function's execution; cs their
	// shared state; tells is set while the function runs, which is when a
	// cancel is told to it rather than ending the run at once.
	sch   sched
	cs    *cstate
	tells bool
	// timeoutSet: the WithRunTimeout timer is scheduled (by this holder).
	timeoutSet bool
	// atEnd, in a query's replay, answers the query where the journal ends.
	atEnd func()
}

// newRunner returns the runner of run id under the lease g granted; the
// caller makes r.lease live (Holder.Hold or Track) unless the run does not
// exist yet (a spawning run takes its lease with its first write).
func newRunner(st store.Store, ex actor.Executor, id string, g leasing.Grant, holder *leasing.Holder, poll time.Duration) *runner {
	return &runner{st: st, ex: ex, id: id, epoch: g.Lease.Epoch, holder: holder, park: ex.NewParker(), poll: poll,
		kids: map[string]*childState{}}
}

func (r *runner) emit(kind string, err error) {
	if r.observe != nil {
		r.observe(Event{Kind: kind, Run: r.id, Epoch: r.epoch, Err: err, At: r.ex.Now()})
	}
}

// fence stops the run here at once: nothing more is written, its waits
// wake up.
func (r *runner) fence() {
	r.ended()
	if cancel := r.cancel.Load(); cancel != nil {
		(*cancel)()
	}
	r.park.Unpark()
}

// ended marks the run's lease gone (lost, or ended by the run's own
// write): nothing more is written under it, and it is not renewed.
func (r *runner) ended() {
	r.fenced.Store(true)
	r.lease.Fence()
}

// writable is the check before every write: the worker is not stopping,
// the lease was not lost, and its local deadline has not passed (never the
// store's expiresAt: the two clocks may be seconds apart). The store
// checks the epoch again in the write's own transaction. A run not yet
// spawned has no lease to check: its first write takes it.
func (r *runner) writable(ctx context.Context) error {
	if !r.fenced.Load() && !r.unspawned.Load() && !r.lease.Live() {
		r.fence()
	}
	if r.fenced.Load() {
		return &stop{kind: stopFenced, cause: errorf("write", store.ErrFenced, r.id, detail("the lease was lost or expired"))}
	}
	if err := ctx.Err(); err != nil {
		return &stop{kind: stopShutdown, cause: err}
	}
	return nil
}

// failed turns a store or decoding error into the run's stop.
func (r *runner) failed(ctx context.Context, op string, err error) *stop {
	var s *stop
	switch {
	case errors.As(err, &s):
		return s
	case errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotHolder) || errors.Is(err, store.ErrStaleEpoch):
		r.fence()
		return &stop{kind: stopFenced, cause: errorf(op, store.ErrFenced, r.id, err)}
	case r.fenced.Load():
		return &stop{kind: stopFenced, cause: errorf(op, store.ErrFenced, r.id, err)}
	case ctx.Err() != nil:
		return &stop{kind: stopShutdown, cause: ctx.Err()}
	}
	return &stop{kind: stopError, cause: errorf(op, ErrStopped, r.id, err)}
}

// ---- reading ----

// load reads the run's whole stream and inbox; a fresh run has neither
// events nor any item but its start.
func (r *runner) load(ctx context.Context) error {
	r.h, r.items, r.readTo, r.start = newHistory(), nil, 0, nil
	if f := r.fresh; f != nil {
		r.start = &f.start
		r.items = []item{{seq: f.seq, kind: ItemStart, dedupe: startKey, at: f.at, start: r.start}}
		r.readTo, r.lastRead = f.seq, r.ex.Now()
		return nil
	}
	if _, err := r.h.load(ctx, r.st, r.id); err != nil {
		return err
	}
	return r.refresh(ctx)
}

// inboxWaker is the run's inbox watch: it notes the hint and wakes the
// run.
type inboxWaker struct{ r *runner }

func (w inboxWaker) Unpark() {
	w.r.inboxHint.Store(true)
	w.r.park.Unpark()
}

// refreshDue re-reads the inbox when a hint came since the last read or
// the poll interval has passed since (hints may be lost).
func (r *runner) refreshDue(ctx context.Context) error {
	if !r.inboxHint.Load() && r.ex.Now().Before(r.lastRead.Add(r.poll)) {
		return nil
	}
	return r.refresh(ctx)
}

// refresh reads the inbox items that arrived since the last read. Items
// never change once written, so the cache is only ever extended.
func (r *runner) refresh(ctx context.Context) error {
	r.inboxHint.Store(false)
	r.lastRead = r.ex.Now()
	for {
		its, err := r.st.ReadInbox(ctx, r.id, r.readTo, 256)
		if err != nil {
			return err
		}
		for _, it := range its {
			r.items = append(r.items, decodeItem(it))
			r.readTo = it.Seq
			if r.start == nil && r.items[len(r.items)-1].start != nil {
				r.start = r.items[len(r.items)-1].start
			}
		}
		if len(its) < 256 {
			return nil
		}
	}
}

// decodeItem decodes what the run reads of an inbox item. An item that
// does not decode is kept with its kind only, and never matches anything.
func decodeItem(it store.InboxItem) item {
	out := item{seq: it.Seq, kind: it.Kind, dedupe: it.DedupeKey, at: it.EnqueuedAt}
	switch it.Kind {
	case ItemStart:
		if s, err := decodeStart(it.Payload); err == nil {
			out.start = &s
		}
	case ItemSignal:
		if name, v, err := decodeSignal(it.Payload); err == nil {
			out.signal = &signalItem{Name: name, Value: v}
		}
	case ItemControl:
		if c, err := decodeControl(it.Payload); err == nil {
			out.control = &c
		}
	case vocab.KindReceipt:
		// A receipt the run cannot read still ends its effect's attempt
		// (as an error): the store delivers one terminal receipt per
		// intent, so waiting for a better one would wait forever.
		var rc world.Receipt
		if err := world.Decode(it.Payload, &rc); err != nil || rc.IntentHash == "" ||
			len(rc.Body) > 0 && event.IsCanonical(rc.Body) != nil {
			hash, _, _ := strings.Cut(strings.TrimPrefix(it.DedupeKey, store.ReceiptKeyPrefix), "#")
			rc = world.Receipt{IntentHash: hash, Status: vocab.ReceiptError}
		}
		out.receipt = &rc
	case vocab.KindTimer:
		var tp timerPayload
		if err := event.Unmarshal(it.Payload, &tp); err == nil {
			out.timer = &tp
		}
	}
	return out
}

// ---- writing ----

// envelope builds one of the run's events. The plan is the run's
// workflow and the version it was started with.
func (r *runner) envelope(typ, step string, attempt uint64, payload any) (event.Envelope, error) {
	b := event.EmptyPayload()
	if payload != nil {
		var err error
		if b, err = event.Marshal(payload); err != nil {
			return event.Envelope{}, err
		}
	}
	return newEnvelope(r.id, r.start, typ, step, attempt, r.ex.Now(), b), nil
}

func newEnvelope(run string, start *startItem, typ, step string, attempt uint64, now time.Time, payload []byte) event.Envelope {
	e := event.Envelope{StreamID: run, EventType: typ, StepID: step, LogicalAttemptID: attempt,
		EngineAttemptID: 1, PlanID: start.Workflow, PlanVersion: start.Version, EmittedAt: now, Payload: payload}
	e.Normalize()
	e.EventID = e.IdempotencyKey // one event per key and stream; the key hashes the run id too
	return e
}

// event appends one event.
func (r *runner) event(ctx context.Context, typ, step string, attempt uint64, payload any) error {
	e, err := r.envelope(typ, step, attempt, payload)
	if err != nil {
		return &stop{kind: stopError, cause: errorf("append", ErrInvalid, r.id, err)}
	}
	return r.append(ctx, e)
}

// later builds one of the run's events and keeps it pending: the run's
// next write carries it (see runner.pending).
func (r *runner) later(typ, step string, attempt uint64, payload any) error {
	e, err := r.envelope(typ, step, attempt, payload)
	if err != nil {
		return &stop{kind: stopError, cause: errorf("append", ErrInvalid, r.id, err)}
	}
	r.pending = append(r.pending, e)
	return nil
}

// withPending is the pending events followed by evs, in a slice of its own.
func (r *runner) withPending(evs []event.Envelope) []event.Envelope {
	if len(r.pending) == 0 {
		return evs
	}
	all := make([]event.Envelope, 0, len(r.pending)+len(evs))
	return append(append(all, r.pending...), evs...)
}

// append appends the pending events and evs fenced by the run's lease,
// compare-and-swapped on the head, so their runSeqs are gapless, and folds
// them into the history.
func (r *runner) append(ctx context.Context, evs ...event.Envelope) error {
	evs = r.withPending(evs)
	if len(evs) == 0 {
		return nil
	}
	if err := r.writable(ctx); err != nil {
		return err
	}
	if r.spawn != nil {
		return r.spawnWith(ctx, evs)
	}
	res, err := r.st.Append(ctx, r.id, evs, store.AppendOptions{Kind: store.WorldStream,
		Fence: &store.Fence{World: r.id, Epoch: r.epoch}, ExpectedHead: store.Head(r.h.head)})
	if err != nil {
		return r.failed(ctx, "append", err)
	}
	r.pending = nil
	if err := r.applyAppended(ctx, evs, res); err != nil {
		return err
	}
	return r.scheduleTimeout(ctx)
}

// runTimeoutStep names the WithRunTimeout timer's payload.
const runTimeoutStep = "sys:run-timeout"

// scheduleTimeout schedules the run's WithRunTimeout timer once the run
// exists (after its first write here; again on each holder, which the
// store dedupes by the timer's hash): due the timeout after the start
// item was enqueued, both on the store's clock.
func (r *runner) scheduleTimeout(ctx context.Context) error {
	if r.timeoutSet || r.start == nil || r.start.Timeout <= 0 || r.replay {
		return nil
	}
	var at time.Time
	for i := range r.items {
		if r.items[i].start != nil {
			at = r.items[i].at
			break
		}
	}
	if at.IsZero() {
		return nil
	}
	payload, err := event.Marshal(timerPayload{Run: r.id, Step: runTimeoutStep})
	if err != nil {
		return r.failed(ctx, "timeout", err)
	}
	due := at.Add(time.Duration(r.start.Timeout))
	if due.After(store.MaxTime) {
		due = store.MaxTime
	}
	if err := r.st.Schedule(ctx, r.id, r.epoch, timerHash(r.id, runTimeoutStep), due, payload); err != nil {
		return r.failed(ctx, "timeout", err)
	}
	r.timeoutSet = true
	return nil
}

// commitWithdraw is append for evs that give effects up: one Commit, fenced
// by the run's lease and compare-and-swapped on the head as an append is,
// writes them with the withdrawal of hashes (those still pending: no
// adapter claimed them). The cursor stays where it is (only the run's end
// moves it).
func (r *runner) commitWithdraw(ctx context.Context, hashes []string, evs ...event.Envelope) error {
	evs = r.withPending(evs)
	if err := r.writable(ctx); err != nil {
		return err
	}
	if r.spawn != nil {
		// Nothing was published before the run existed.
		return r.append(ctx, evs[len(r.pending):]...)
	}
	var cursor uint64
	if r.fresh == nil {
		var err error
		if cursor, err = r.st.Cursor(ctx, r.id); err != nil {
			return r.failed(ctx, "append", err)
		}
	}
	res, err := r.st.Commit(ctx, r.id, r.epoch, store.CommitBatch{ExpectedCursor: cursor, NewCursor: cursor,
		ExpectedHead: r.h.head, Entries: evs, Withdraw: hashes})
	if err != nil {
		return r.failed(ctx, "append", err)
	}
	r.pending = nil
	return r.applyAppended(ctx, evs, res.Appended)
}

// spawnWith is the first write of a run handed over before it existed:
// one Spawn creates the run (world, start item, this worker's lease) with
// evs as its first events. Its outcome goes to the waiting Start.
func (r *runner) spawnWith(ctx context.Context, evs []event.Envelope) error {
	sp := r.spawn
	r.spawn = nil
	spec := sp.spec
	spec.Events = evs
	sent := r.holder.Now()
	got, err := r.st.Spawn(ctx, spec)
	if err != nil {
		sp.settle(true, err)
		r.ended()
		return &stop{kind: stopUnspawned, cause: err}
	}
	r.epoch = got.Lease.Epoch
	// Its deadline counts from before the Spawn that granted it; held
	// before the run counts as spawned, so the controller renews it.
	r.holder.Hold(&r.lease, r.holder.Granted(got.Lease, sent))
	r.items[0].at = got.World.CreatedAt
	r.unspawned.Store(false)
	// The Spawn's own inbox hint told nothing new: its items are known.
	r.inboxHint.Store(false)
	sp.settle(true, nil)
	r.emit(EvAcquired, nil)
	r.pending = nil
	if err := r.applyAppended(ctx, evs, got.Appended); err != nil {
		return err
	}
	return r.scheduleTimeout(ctx)
}

func (r *runner) applyAppended(ctx context.Context, evs []event.Envelope, res []store.Appended) error {
	for i := range evs {
		if res[i].Idempotent {
			// The history this worker read is not the stream's: start over.
			return r.failed(ctx, "append", detail(fmt.Sprintf("event %s %q is already recorded", evs[i].EventType, evs[i].StepID)))
		}
		evs[i].RunSeq, evs[i].PersistedAt = res[i].RunSeq, res[i].PersistedAt
		if err := r.h.apply(&evs[i]); err != nil {
			return r.failed(ctx, "append", err)
		}
	}
	return nil
}

// end records the run's end (RunCompleted, RunFailed, RunCancelled) and,
// in the same transaction, marks every inbox item the run has read
// drained, so the store's dedupe records of its signals, timers and
// receipts become sweepable.
func (r *runner) end(ctx context.Context, typ string, p runEnd) error {
	e, err := r.envelope(typ, "", 1, p)
	if err != nil {
		return &stop{kind: stopError, cause: errorf("end", ErrInvalid, r.id, err)}
	}
	if err := r.writable(ctx); err != nil {
		return err
	}
	if r.spawn != nil {
		// Ended before its first write: the run is created first.
		if err := r.append(ctx); err != nil {
			return err
		}
	}
	// Only a run's end moves its inbox cursor, so a run this worker
	// started itself has it at 0.
	var cursor uint64
	if r.fresh == nil {
		if cursor, err = r.st.Cursor(ctx, r.id); err != nil {
			return r.failed(ctx, "end", err)
		}
	}
	evs := r.withPending([]event.Envelope{e})
	// The same commit archives the run with its end as the reason, which
	// ends the lease and takes the run out of every worker's scan.
	res, err := r.st.Commit(ctx, r.id, r.epoch, store.CommitBatch{ExpectedCursor: cursor, NewCursor: max(cursor, r.readTo),
		ExpectedHead: r.h.head, Entries: evs,
		Status: &store.StatusChange{Status: store.WorldArchived, Reason: string(endStatus(typ))}})
	if err != nil {
		return r.failed(ctx, "end", err)
	}
	r.pending, r.archived = nil, true
	r.ended() // archiving ended the lease
	return r.applyAppended(ctx, evs, res.Appended)
}

// finish is what follows a recorded end: the parent run (if any) is told,
// and the run is archived with the end as its reason (already done when
// the end was written here), which takes it out of every worker's scan
// and ends its lease. A parent that is not told (a crash right after the
// end) still learns of it: it re-reads its children's streams on every
// poll.
func (r *runner) finish(ctx context.Context) error {
	t := r.h.terminal
	if r.start != nil && r.start.Parent != "" {
		b, err := event.Marshal(childItem{Child: r.id})
		if err == nil {
			_, _, err = r.st.Enqueue(ctx, r.start.Parent, store.InboxItem{Kind: ItemChild, Payload: b, DedupeKey: ItemChild + ":" + r.id})
		}
		if err != nil && !errors.Is(err, store.ErrWorldArchived) && !errors.Is(err, store.ErrWorldNotFound) {
			return r.failed(ctx, "finish", err)
		}
	}
	if r.archived {
		return nil
	}
	if _, err := r.st.SetWorldStatus(ctx, r.id, store.WorldArchived, string(endStatus(t.EventType))); err != nil && !errors.Is(err, store.ErrWorldArchived) {
		return r.failed(ctx, "finish", err)
	}
	r.archived = true
	r.ended() // archiving ended the lease
	return nil
}

func endStatus(typ string) RunStatus {
	switch typ {
	case event.RunCompleted:
		return StatusCompleted
	case event.RunFailed:
		return StatusFailed
	case event.RunCancelled:
		return StatusCancelled
	}
	return ""
}

// ---- control requests ----

// controlPlan is what the run's control requests ask of it now.
type controlPlan struct {
	// timeout is set when the run's WithRunTimeout timer fired.
	timeout *item
	// catchUp are the RunPaused and RunResumed events owed: requests
	// whose events nobody could append when they were made (the pause
	// fenced the holder; nobody held the run).
	catchUp []controlEvent
	// pause is set when the run must pause now: a pause request with no
	// resume after it.
	pause *item
	// cancel is set when the run must be cancelled.
	cancel *item
}

type controlEvent struct {
	typ string
	it  *item // nil: a resume without a request
}

func (p controlPlan) stops() bool { return p.pause != nil || p.cancel != nil || p.timeout != nil }

// plan reads the run's control requests against what the stream recorded
// of them. Requests are recorded in inbox order, so only those after the
// last recorded one are new; one before it was not recorded because it
// asked for nothing (a pause of a paused run, a resume of a running one).
// A cancel counts wherever it is.
func (r *runner) plan() controlPlan {
	var p controlPlan
	var last uint64
	for i := range r.items {
		it := &r.items[i]
		if it.timer != nil && it.timer.Run == r.id && it.timer.Step == runTimeoutStep {
			p.timeout = it
		}
		if it.control == nil {
			continue
		}
		if it.control.Op == opCancel && !r.h.controls[it.seq] {
			p.cancel = it
		}
		if r.h.controls[it.seq] {
			last = it.seq
		}
	}
	paused := r.h.pauses > r.h.resumes
	pending := false // the pause is a new request, not a recorded one
	for i := range r.items {
		it := &r.items[i]
		if it.control == nil || it.seq <= last || it == p.cancel {
			continue
		}
		switch it.control.Op {
		case opPause:
			if !paused {
				p.catchUp = append(p.catchUp, controlEvent{typ: event.RunPaused, it: it})
				paused, pending, p.pause = true, true, it
			}
		case opResume:
			if paused {
				p.catchUp = append(p.catchUp, controlEvent{typ: event.RunResumed, it: it})
				paused, pending, p.pause = false, false, nil
			}
		}
	}
	if paused && !pending && r.h.blocked == "" {
		// Recorded as paused, yet this worker holds the run: it was made
		// active without a resume request (an operator's status change).
		p.catchUp = append(p.catchUp, controlEvent{typ: event.RunResumed})
	}
	return p
}

// applyPlan records what p asks and, for a pause, stops the run here. A
// cancel is told to the function when it runs here (r.tells): the
// attempts in flight (but those of Detached steps) are recorded skipped
// with the request's seq, and applyPlan returns the cancellation, which
// the waits deliver; the function ends the run. A run that never recorded
// a step, or one no function runs for here (the operator's path), is left
// to that: the first is ended cancelled at once, the second to its next
// holder.
func (r *runner) applyPlan(ctx context.Context, p controlPlan, inflight []*attemptRef) error {
	if len(p.catchUp) > 0 {
		pauses, resumes := r.h.pauses, r.h.resumes
		evs := make([]event.Envelope, 0, len(p.catchUp))
		for _, ce := range p.catchUp {
			var n uint64
			if ce.typ == event.RunPaused {
				pauses++
				n = pauses
			} else {
				resumes++
				n = resumes
			}
			pl := runControl{}
			if ce.it != nil {
				pl = runControl{Control: ce.it.seq, Reason: ce.it.control.Reason, SourceOccurredAt: unixNano(ce.it.at)}
			}
			e, err := r.envelope(ce.typ, "", n, pl)
			if err != nil {
				return &stop{kind: stopError, cause: err}
			}
			evs = append(evs, e)
		}
		if err := r.append(ctx, evs...); err != nil {
			return r.failed(ctx, "control", err)
		}
	}
	switch {
	case p.timeout != nil:
		if err := r.cancelChildren(ctx, "parent run "+r.id+" timed out"); err != nil {
			return err
		}
		msg := "workflow: run timed out"
		if r.start != nil && r.start.Timeout > 0 {
			msg += " after " + time.Duration(r.start.Timeout).String()
		}
		if err := r.end(ctx, event.RunFailed, runEnd{Error: msg}); err != nil {
			return r.failed(ctx, "timeout", err)
		}
		if err := r.finish(ctx); err != nil {
			return r.failed(ctx, "timeout", err)
		}
		return &stop{kind: stopCancel, cause: errorf("timeout", ErrFailed, r.id, detail(msg))}
	case p.cancel != nil && r.tells:
		return r.tellCancel(ctx, p.cancel, inflight)
	case p.cancel != nil && len(r.h.steps) > 0:
		// The function has steps to compensate: whoever runs it next
		// tells it.
		return nil
	case p.cancel != nil:
		it := p.cancel
		if err := r.end(ctx, event.RunCancelled, runEnd{Control: it.seq, Reason: it.control.Reason, SourceOccurredAt: unixNano(it.at)}); err != nil {
			return r.failed(ctx, "cancel", err)
		}
		if err := r.finish(ctx); err != nil {
			return r.failed(ctx, "cancel", err)
		}
		return &stop{kind: stopCancel, cause: ErrCancelled}
	case p.pause != nil:
		reason := "workflow: paused"
		if p.pause.control.Reason != "" {
			reason += ": " + p.pause.control.Reason
		}
		if err := pauseStatus(ctx, r.st, r.id, reason); err != nil {
			return r.failed(ctx, "pause", err)
		}
		r.ended() // leaving active ended the lease
		return &stop{kind: stopPause}
	}
	return nil
}

// runAttemptBeside is runAttempt while the run has other coroutines: fn
// runs in a task of its own and the coroutine waits for it as for any
// step, so the other coroutines run meanwhile (parallel steps). The wait
// reads the run's control requests; a cancel or a stop ends fn's context.
func (r *runner) runAttemptBeside(c *Ctx, timeout time.Duration, fn func(context.Context) ([]byte, error)) (value []byte, failure error, timedOut bool, halt error) {
	sctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	if timeout > 0 {
		var tcancel context.CancelFunc
		sctx, tcancel = actor.WithTimeout(sctx, r.ex, timeout)
		defer tcancel()
	}
	var done atomic.Bool
	var out raceOutcome
	if _, err := r.scope.Go("workflow-step:"+r.id, func(context.Context) error {
		defer func() {
			if p := recover(); p != nil {
				out = raceOutcome{err: fmt.Errorf("the step panicked: %v", p)}
			}
			done.Store(true)
			r.park.Unpark()
		}()
		v, err := fn(sctx)
		out = raceOutcome{value: v, err: err,
			timedOut: timeout > 0 && c.ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded)}
		return nil
	}); err != nil {
		return nil, nil, false, c.halt(r.failed(c.ctx, "step", err))
	}
	if _, err := r.wait(c, time.Time{}, func() (bool, error) { return done.Load(), nil }); err != nil {
		return nil, nil, false, err
	}
	if out.timedOut {
		return nil, fmt.Errorf("the step ran out of its timeout %v", timeout), true, nil
	}
	return out.value, out.err, false, nil
}

// tellCancel tells the running function of cancel request it: the
// attempts in flight that are not Detached are recorded skipped with the
// request's seq, in one write, and the run's children whose policy is
// ParentCloseCancel are asked to cancel. Nothing in flight to skip (every
// attempt Detached) tells nothing yet: the cancel waits for a step that
// can carry it, so a re-run tells it at the same place.
func (r *runner) tellCancel(ctx context.Context, it *item, inflight []*attemptRef) error {
	evs := make([]event.Envelope, 0, 2*len(inflight))
	for _, a := range inflight {
		if a == nil || a.detached {
			continue
		}
		if a.unstarted {
			h := r.h.byID[a.step]
			if h == nil {
				continue
			}
			e, err := r.envelope(event.StepStarted, a.step, a.attempt, stepStarted{Kind: h.kind})
			if err != nil {
				return &stop{kind: stopError, cause: err}
			}
			evs = append(evs, e)
		}
		e, err := r.envelope(event.StepSkipped, a.step, a.attempt, stepSkipped{Reason: "cancelled", Control: it.seq})
		if err != nil {
			return &stop{kind: stopError, cause: err}
		}
		evs = append(evs, e)
	}
	if len(evs) == 0 {
		return nil
	}
	if err := r.cancelChildren(ctx, "parent run "+r.id+" cancelled"); err != nil {
		return err
	}
	if err := r.append(ctx, evs...); err != nil {
		return r.failed(ctx, "cancel", err)
	}
	if r.cs != nil {
		r.cs.told = true
	}
	return r.cancellation()
}

// cancelChildren asks the run's children that have not ended, and whose
// parent-close policy is to cancel, to cancel (idempotent: a crash in
// between asks again).
func (r *runner) cancelChildren(ctx context.Context, reason string) error {
	for _, st := range r.h.steps {
		if st.kind == kindChild && !st.done() && st.first.Child != "" && parentClose(st.first.ParentClose) == ParentCloseCancel {
			if err := requestCancel(ctx, r.st, st.first.Child, reason); err != nil {
				return r.failed(ctx, "cancel", err)
			}
		}
	}
	return nil
}

// cancellation is the error a step returns once the run's cancel was
// told to the function.
func (r *runner) cancellation() error {
	c := &Cancelled{Run: r.id}
	if it := r.cancelItem(); it != nil {
		c.Reason = it.control.Reason
	}
	return c
}

// cancelItem is the cancel request told to the function, if any.
func (r *runner) cancelItem() *item {
	if r.h.cancelSeq == 0 {
		return nil
	}
	for i := range r.items {
		if r.items[i].seq == r.h.cancelSeq && r.items[i].control != nil {
			return &r.items[i]
		}
	}
	return nil
}

// attemptRef names a step attempt.
type attemptRef struct {
	step    string
	attempt uint64
	// detached: asked for on a Detached Ctx, which a cancel leaves be;
	// unstarted: a retry's next attempt, not started yet (its skip is
	// recorded after its StepStarted).
	detached, unstarted bool
}

// ---- waiting ----

// wait blocks until match finds what it looks for (it reads the cached
// inbox, refreshed before each call), a control request stops the run,
// deadline passes (zero: never), or the run stops here. It re-reads the
// inbox on every hint and at least every poll interval: hints only wake.
func (r *runner) wait(c *Ctx, deadline time.Time, match func() (bool, error)) (timedOut bool, err error) {
	ctx := c.ctx
	// What is pending is written before any wait: a wait may be long.
	if err := r.append(ctx); err != nil {
		return false, c.halt(err)
	}
	if c.halted != nil {
		return false, c.halted
	}
	c.co.match, c.co.deadline, c.co.keyed = match, deadline, false
	timedOut, err = r.block(c)
	c.co.match, c.co.deadline = nil, time.Time{}
	if err != nil {
		return false, c.halt(err)
	}
	return timedOut, nil
}

// watchControl is the control branch of a step race: it returns once a
// control request must stop the run (a pause or a cancel) or the run is
// fenced, and records nothing itself: the run's goroutine does, once the
// step's function has returned.
func (r *runner) watchControl(ctx context.Context, detached bool) (*controlPlan, error) {
	for {
		if r.fenced.Load() {
			return nil, r.writable(ctx)
		}
		// Within controlEvery of the last look a hint is only noted: a
		// run of short steps then costs no read at all.
		d := r.poll
		if left := r.controlEvery - r.ex.Now().Sub(r.lastControl); left > 0 {
			d = min(d, left)
		} else {
			r.lastControl = r.ex.Now()
			if err := r.refreshDue(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, err
			}
			if p := r.plan(); p.pause != nil || p.cancel != nil && !detached {
				return &p, nil
			}
		}
		t := r.ex.AfterFunc(d, r.park.Unpark)
		err := r.park.Park(ctx)
		t.Stop()
		if err != nil {
			return nil, err
		}
	}
}

// raceOutcome is what a step race's branch returns.
type raceOutcome struct {
	value    []byte
	err      error
	timedOut bool
	plan     *controlPlan
	ctlErr   error
}

// runAttempt runs one attempt of a plain step: fn under the step's
// timeout, raced against the run's control requests and its fencing.
func (r *runner) runAttempt(c *Ctx, timeout time.Duration, fn func(context.Context) ([]byte, error)) (value []byte, failure error, timedOut bool, halt error) {
	if r.sch.multi() {
		return r.runAttemptBeside(c, timeout, fn)
	}
	winner, out, err := actor.Race(c.ctx, r.scope,
		func(ctx context.Context) (raceOutcome, error) {
			sctx, cancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				sctx, cancel = actor.WithTimeout(ctx, r.ex, timeout)
			}
			defer cancel()
			v, err := fn(sctx)
			to := timeout > 0 && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded)
			return raceOutcome{value: v, err: err, timedOut: to}, nil
		},
		func(ctx context.Context) (raceOutcome, error) {
			p, err := r.watchControl(ctx, c.detached)
			return raceOutcome{plan: p, ctlErr: err}, nil
		})
	if werr := r.writable(c.ctx); werr != nil {
		// The worker is stopping or the lease is gone: whatever the
		// function returned is not recorded.
		return nil, nil, false, c.halt(werr)
	}
	switch {
	case winner == 0 && err != nil:
		return nil, fmt.Errorf("the step panicked: %w", err), false, nil
	case winner == 0:
		if out.timedOut {
			return nil, fmt.Errorf("the step ran out of its timeout %v", timeout), true, nil
		}
		return out.value, out.err, false, nil
	case winner == 1 && err == nil && out.plan != nil:
		err := r.applyPlan(c.ctx, *out.plan, r.inflights())
		if err == nil {
			// The cancel skipped nothing of this attempt (a detached one):
			// the attempt is lost all the same, and runs again.
			err = &stop{kind: stopError, cause: detail("the step was interrupted")}
		}
		return nil, nil, false, c.halt(err)
	case winner == 1 && err == nil:
		return nil, nil, false, c.halt(r.failed(c.ctx, "step", out.ctlErr))
	}
	if err == nil {
		err = detail("the step race ended without a winner")
	}
	return nil, nil, false, c.halt(r.failed(c.ctx, "step", err))
}

// divergentPrefix starts the reason of the RunPaused a worker records when
// its code diverged from the run's steps; history folding knows a held run
// by it.
const divergentPrefix = "divergent at step "

// hold holds the run instead of failing it: the divergence is recorded as
// a RunPaused (once: a run already held records nothing more, so workers
// with the same old code cannot flip it between held and resumed), and the
// lease is released so a node carrying compatible code can take it.
func (r *runner) hold(ctx context.Context, div *DivergenceError) *stop {
	r.pending = nil // a RunResumed that rode on the replay is void
	if r.h.blocked == "" {
		reason := fmt.Sprintf("%s%d: recorded %q, got %q", divergentPrefix, div.StepIndex, div.Recorded, div.Got)
		switch {
		case div.Reason == deadlockReason:
			reason = fmt.Sprintf("%s%d: %s", divergentPrefix, div.StepIndex, div.Reason)
		case div.Reason != "":
			reason += " (" + div.Reason + ")"
		}
		e, err := r.envelope(event.RunPaused, "", r.h.pauses+1, runControl{Reason: reason})
		if err != nil {
			return &stop{kind: stopError, cause: errorf("hold", ErrInvalid, r.id, err)}
		}
		if err := r.append(ctx, e); err != nil {
			return r.failed(ctx, "hold", err)
		}
	}
	_ = r.holder.Release(ctx, r.id, r.epoch)
	r.ended()
	return &stop{kind: stopBlocked, cause: div}
}
