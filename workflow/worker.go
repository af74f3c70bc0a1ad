package workflow

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/leasing"
	"github.com/orrery-run/orrery/store"
)

// WorkerConfig configures a Worker. Zero durations and sizes take the
// defaults named on each field.
type WorkerConfig struct {
	Worker    string      // the lease holder's id; unique per worker
	Store     store.Store // the persistence plane
	Workflows *Workflows  // the definitions this worker runs
	// Incarnation names this worker's lifetime under Worker in the runs'
	// leases (store.WithIncarnation). Empty: StartWorker draws a fresh one
	// (store.NewIncarnation), so a worker started again under the same id,
	// while its predecessor may be frozen rather than dead, takes the runs
	// over at new epochs and fences the predecessor. Set it only to make a
	// run reproducible (the lab).
	Incarnation string

	LeaseTTL time.Duration // default 10s
	// RenewMargin: a lease is renewed that long before its local deadline
	// (default LeaseTTL/3), which counts on the executor's clock from just
	// before the request that granted or renewed it, never from the
	// store's expiresAt.
	RenewMargin time.Duration
	// ScanEvery is the backstop scan for runnable runs (default
	// LeaseTTL/2): hints may be lost, and a lease held elsewhere becomes
	// acquirable when it expires, which nothing announces.
	ScanEvery time.Duration
	// HintGap spaces the scans that hints start (default RetryAfter): the
	// lease and assignment topics are global.
	HintGap time.Duration
	// PollEvery is the backstop re-read of a waiting run's inbox (default
	// 1s): inbox hints wake a run at once, but may be lost.
	PollEvery time.Duration
	// ControlEvery is the least time between two looks of a running
	// step's control watch at the run's inbox (default 20ms): a pause or
	// a cancellation reaches a running step within it, and a run of short
	// steps reads nothing for them.
	ControlEvery time.Duration
	RetryAfter   time.Duration // after a failed store call (default 100ms)
	// MaxActiveRuns bounds the runs this worker runs at once (default
	// 1024). A run found beyond it that never started is recorded as
	// RunQueued and started when room frees up.
	MaxActiveRuns int
	// Observe, when set, receives the worker's events synchronously; it
	// must not block.
	Observe func(Event)
}

func (c *WorkerConfig) defaults() error {
	if c.Worker == "" || c.Store == nil || c.Workflows == nil {
		return errorf("worker", ErrInvalid, "", detail("a worker needs Worker, Store and Workflows"))
	}
	if err := store.CheckID("worker", "worker", c.Worker); err != nil {
		return errorf("worker", ErrInvalid, "", err)
	}
	if c.Incarnation == "" {
		c.Incarnation = store.NewIncarnation()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, 10*time.Second)
	def(&c.RenewMargin, c.LeaseTTL/3)
	def(&c.ScanEvery, c.LeaseTTL/2)
	def(&c.RetryAfter, 100*time.Millisecond)
	def(&c.HintGap, c.RetryAfter)
	def(&c.PollEvery, time.Second)
	def(&c.ControlEvery, 20*time.Millisecond)
	if c.MaxActiveRuns <= 0 {
		c.MaxActiveRuns = 1024
	}
	if c.RenewMargin >= c.LeaseTTL {
		return errorf("worker", ErrInvalid, "", detail("RenewMargin must be below LeaseTTL"))
	}
	return nil
}

// Worker runs the runs of its workflows: it finds runnable runs, takes
// their leases, renews them in batches, and runs each run's function in a
// process of its own, stopping it at once when its lease is lost.
type Worker struct {
	cfg   WorkerConfig
	st    store.Store
	ex    actor.Executor
	scope *actor.Scope
	park  actor.Parker // the controller's wake-up
	ctl   actor.PID
	hint  atomic.Bool
	// hold takes, renews and times the runs' leases: every lease call to
	// the store goes through it.
	hold *leasing.Holder

	mu     sync.Mutex
	runs   map[string]*heldRun
	queued map[string]bool // runs whose RunQueued is recorded
	// diverged holds, by run, the journal head at which this worker's code
	// diverged from the run: it does not take the run again until the
	// journal moves (another node resumed, reset or changed it) or the
	// process restarts (a new deploy).
	diverged map[string]uint64
	starts   map[string]startItem // run id → its start, without the input
	// declared: the Workflows' queues are declared in the store.
	declared bool
	backoff  map[string]retry // runs that stopped on an error: not before at
	stopped  bool

	// endMu guards ends, the Results of in-process clients (WithWorkers)
	// waiting for a run's end, and live, the runs whose process has not
	// yet reported how it stopped: a waiter registered while its run is
	// live is woken by that report, so it need not read the store before.
	endMu sync.Mutex
	ends  map[string][]*endWaiter
	live  map[string]bool
}

// endWaiter is one waiting Result: woken when its run's process stops
// here, with the run's end event when that is why.
type endWaiter struct {
	wake store.Waker
	end  atomic.Pointer[event.Envelope]
}

// retry spaces the attempts at a run that keeps stopping on an error (a
// store that refuses it, a history this worker cannot read).
type retry struct {
	n  int
	at time.Time
}

// heldRun is a run whose lease this worker holds, with its process.
type heldRun struct {
	r    *runner
	done bool // its process returned
	exit *stop
}

// StartWorker starts a worker in a scope of its own under scope: a
// controller process, and one process per run it holds. All its time and
// waiting go through the scope's executor.
func StartWorker(ctx context.Context, scope *actor.Scope, cfg WorkerConfig) (*Worker, error) {
	if scope == nil {
		return nil, errorf("worker", ErrInvalid, "", detail("a nil scope"))
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	sub, err := scope.Sub("workflow-worker:" + cfg.Worker)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, st: cfg.Store, ex: scope.Executor(), scope: sub,
		runs: map[string]*heldRun{}, queued: map[string]bool{}, diverged: map[string]uint64{}, starts: map[string]startItem{}, backoff: map[string]retry{},
		ends: map[string][]*endWaiter{}, live: map[string]bool{}}
	w.park = w.ex.NewParker()
	w.hold = leasing.New(leasing.Config{Worker: cfg.Worker, Incarnation: cfg.Incarnation, Store: cfg.Store, Executor: w.ex,
		TTL: cfg.LeaseTTL, RenewMargin: cfg.RenewMargin, RetryAfter: cfg.RetryAfter, OnLost: w.lost,
		Observe: func(_ int, _ time.Duration, err error) {
			if err != nil {
				w.emit(Event{Kind: EvRenewFail, Err: err})
			}
		}})
	w.hint.Store(true)
	if w.ctl, err = sub.Go("workflow-controller:"+cfg.Worker, w.control); err != nil {
		_, _ = sub.CloseKilled(ctx)
		return nil, err
	}
	return w, nil
}

func (w *Worker) emit(ev Event) {
	if w.cfg.Observe != nil {
		ev.At = w.ex.Now()
		w.cfg.Observe(ev)
	}
}

// Runs lists the runs this worker holds, sorted.
func (w *Worker) Runs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.runs))
	for id, hr := range w.runs {
		if !hr.done {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Stop stops the worker as a planned departure: every run stops where it
// is (nothing more is recorded), and their leases are released, so other
// workers take them up at once and re-run their steps in flight.
func (w *Worker) Stop(ctx context.Context) error {
	held := w.halt()
	_, err := w.scope.Close(ctx)
	var refs []store.LeaseRef
	for _, r := range held {
		refs = append(refs, store.LeaseRef{World: r.id, Epoch: r.epoch})
	}
	// A failed release only means the successors wait for the TTL.
	_ = w.hold.ReleaseAll(ctx, refs)
	return err
}

// Kill ends the worker at once, as a crash: its processes are cancelled
// and nothing is released; the leases expire after their TTL.
func (w *Worker) Kill(ctx context.Context) {
	w.halt()
	_, _ = w.scope.CloseKilled(ctx)
}

// halt fences every held run, so nothing more is written, and returns
// those that still held a lease.
func (w *Worker) halt() []*runner {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	var held []*runner
	for _, id := range sortedKeys(w.runs) {
		hr := w.runs[id]
		if !hr.r.fenced.Load() && !hr.r.unspawned.Load() {
			held = append(held, hr.r)
		}
		hr.r.fence()
	}
	return held
}

// ---- the controller ----

// control is the worker's control loop: scans for runnable runs, batched
// lease renewal, and reaping finished run processes. It blocks on one
// Parker, woken by lease and assignment hints (a status change, a new run)
// and by a timer for its next deadline.
func (w *Worker) control(ctx context.Context) error {
	stopWatch, err := w.hold.WatchHints(ctx, hintWaker{w})
	if err != nil {
		return nil // stopped
	}
	defer stopWatch()
	// A hint may be a status change that revoked a lease: renewing early
	// finds out, so the holder stops without waiting for expiry. Every
	// run's start and end raises such hints, though, and a renewal covers
	// every held lease: early renewals are owed by hints and paid at most
	// once per forceGap.
	forceGap := max(w.cfg.HintGap, w.cfg.RenewMargin/4)
	var nextScan, lastHintScan, lastForced time.Time
	owed := false
	for ctx.Err() == nil {
		now := w.ex.Now()
		w.reap()
		hinted := w.hint.Swap(false)
		scanNow := !now.Before(nextScan)
		if hinted {
			if at := lastHintScan.Add(w.cfg.HintGap); now.Before(at) {
				w.hint.Store(true) // too soon after the last: kept for the gap's end
				if at.Before(nextScan) {
					nextScan = at
				}
			} else {
				scanNow, owed, lastHintScan = true, true, now
			}
		}
		if scanNow {
			if err := w.scan(ctx); err != nil {
				nextScan = now.Add(w.cfg.RetryAfter)
			} else {
				nextScan = now.Add(w.cfg.ScanEvery)
			}
		}
		force := owed && !now.Before(lastForced.Add(forceGap))
		if force {
			owed, lastForced = false, now
		}
		nextRenew := w.hold.Renew(ctx, force)
		at := nextScan
		if nextRenew.Before(at) {
			at = nextRenew
		}
		if owed && lastForced.Add(forceGap).Before(at) {
			at = lastForced.Add(forceGap)
		}
		if err := actor.ParkFor(ctx, w.ex, w.park, at.Sub(w.ex.Now())); err != nil {
			return nil
		}
	}
	return nil
}

type hintWaker struct{ w *Worker }

func (h hintWaker) Unpark() {
	h.w.hint.Store(true)
	h.w.park.Unpark()
}

// reap forgets the runs whose process returned. One that stopped on an
// error keeps nothing either: the next scan takes it up again (the same
// lease, while it lasts) and re-runs it from its history.
func (w *Worker) reap() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range sortedKeys(w.runs) {
		hr := w.runs[id]
		if !hr.done {
			continue
		}
		delete(w.runs, id)
		w.hold.Forget(&hr.r.lease)
		if hr.exit != nil && hr.exit.kind == stopError {
			b := w.backoff[id]
			b.n++
			b.at = w.ex.Now().Add(min(w.cfg.RetryAfter<<min(b.n, 16), max(w.cfg.ScanEvery, w.cfg.RetryAfter)))
			w.backoff[id] = b
		} else {
			delete(w.backoff, id)
		}
	}
}

// scan looks for runnable runs of every registered workflow: active, not
// held by a live lease elsewhere, started with a version this worker
// carries (each run with its own version's definition). It first admits
// what room it has from the store's queues (AdmitRuns), then takes the
// runs in (creation time, id) order up to MaxActiveRuns: a run on a queue
// only once admitted (by any worker: one whose admitter died keeps its
// slot and is taken over here), a run on no queue as it comes; it records
// RunQueued for those beyond MaxActiveRuns that never started.
func (w *Worker) scan(ctx context.Context) error {
	storeNow, err := w.st.Now(ctx)
	if err != nil {
		return err
	}
	entries, err := w.admit(ctx)
	if err != nil {
		return err
	}
	for _, name := range w.cfg.Workflows.Names() {
		recs, err := w.st.ListWorlds(ctx, Universe(name), store.WorldActive)
		if err != nil {
			return err
		}
		slices.SortFunc(recs, func(a, b store.World) int {
			if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
				return c
			}
			return compareStrings(a.ID, b.ID)
		})
		for _, rec := range recs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			w.mu.Lock()
			_, mine := w.runs[rec.ID]
			full := len(w.runs) >= w.cfg.MaxActiveRuns
			stopped := w.stopped
			b, failing := w.backoff[rec.ID]
			divAt, diverged := w.diverged[rec.ID]
			w.mu.Unlock()
			if stopped {
				return nil
			}
			if mine || failing && w.ex.Now().Before(b.at) {
				continue
			}
			if diverged {
				head, err := w.st.Head(ctx, rec.ID)
				if err != nil {
					return err
				}
				if head == divAt {
					continue // held: this code diverged from it already
				}
			}
			start, err := w.startOf(ctx, rec.ID)
			if err != nil {
				return err
			}
			if start == nil {
				continue // not started yet
			}
			def, carried := w.cfg.Workflows.LookupVersion(name, start.Version)
			if !carried {
				continue // a version this binary does not carry: another node's
			}
			if start.Queue != "" {
				e, ok := entries[rec.ID]
				if !ok {
					// Its starter stopped between the run's write and its
					// queue entry: the entry is written here.
					_, _, _ = w.st.EnqueueRun(ctx, queueEntry(rec.ID, *start))
					continue
				}
				if !e.Admitted() {
					continue // waits in its queue
				}
			}
			l, ok, err := w.st.GetLease(ctx, rec.ID)
			if err != nil {
				return err
			}
			if ok && l.Holder != "" && l.Holder != w.cfg.Worker && l.ExpiresAt.After(storeNow) {
				continue
			}
			if full {
				if start.Queue == "" {
					w.admitLater(ctx, rec.ID, start)
				}
				continue
			}
			w.take(ctx, rec.ID, def)
		}
	}
	return nil
}

// admit declares the Workflows' queues (once), admits what room the
// worker has from every queue of the store, and returns every queue
// entry by run, the admissions made here included.
func (w *Worker) admit(ctx context.Context) (map[string]store.QueuedRun, error) {
	w.mu.Lock()
	declared := w.declared
	w.mu.Unlock()
	if !declared {
		for _, q := range w.cfg.Workflows.Queues() {
			if err := declareQueue(ctx, w.st, q); err != nil {
				return nil, err
			}
		}
		w.mu.Lock()
		w.declared = true
		w.mu.Unlock()
	}
	qs, err := w.st.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	entries := map[string]store.QueuedRun{}
	carries := w.cfg.Workflows.Capabilities()
	for _, q := range qs {
		w.mu.Lock()
		room := w.cfg.MaxActiveRuns - len(w.runs)
		w.mu.Unlock()
		rs, err := w.st.ListQueuedRuns(ctx, q.Name)
		if err != nil {
			return nil, err
		}
		waiting := false
		for _, r := range rs {
			entries[r.Run] = r
			waiting = waiting || !r.Admitted()
		}
		if room <= 0 || !waiting || len(carries) == 0 { // no workflow registered: nothing here runs a run
			continue
		}
		// It admits only the runs whose workflow version it carries: the
		// others wait for a worker that does, without taking this one's
		// slots or blocking the runs behind them.
		got, err := w.st.AdmitRuns(ctx, q.Name, w.cfg.Worker, min(room, store.MaxBatch), carries...)
		if err != nil {
			return nil, err
		}
		for _, r := range got {
			entries[r.Run] = r
			w.emit(Event{Kind: EvAdmitted, Run: r.Run})
		}
	}
	return entries, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// startOf reads (once) a run's start item; the answer has no input.
func (w *Worker) startOf(ctx context.Context, id string) (*startItem, error) {
	w.mu.Lock()
	v, ok := w.starts[id]
	w.mu.Unlock()
	if ok {
		return &v, nil
	}
	s, err := readStart(ctx, w.st, id)
	if err != nil || s == nil {
		return nil, err
	}
	v = *s
	v.Input = nil
	w.mu.Lock()
	w.starts[id] = v
	w.mu.Unlock()
	return &v, nil
}

// admitLater records RunQueued for a run that never started, under a lease
// taken for that moment and released at once, so any worker with room
// may start it.
func (w *Worker) admitLater(ctx context.Context, id string, start *startItem) {
	w.mu.Lock()
	done := w.queued[id]
	w.mu.Unlock()
	if done {
		return
	}
	head, err := w.st.Head(ctx, id)
	if err != nil {
		return
	}
	if head > 0 {
		w.mu.Lock()
		w.queued[id] = true
		w.mu.Unlock()
		return
	}
	full, err := readStart(ctx, w.st, id)
	if err != nil || full == nil {
		return
	}
	g, err := w.hold.Acquire(ctx, id)
	if err != nil {
		return
	}
	lease := g.Lease
	e := newEnvelope(id, full, event.RunQueued, "", 1, w.ex.Now(), queuedPayload(full))
	_, err = w.st.Append(ctx, id, []event.Envelope{e}, store.AppendOptions{Kind: store.WorldStream,
		Fence: &store.Fence{World: id, Epoch: lease.Epoch}, ExpectedHead: store.Head(0)})
	_ = w.hold.Release(ctx, id, lease.Epoch)
	if err == nil || errors.Is(err, store.ErrHeadMismatch) {
		w.mu.Lock()
		w.queued[id] = true
		w.mu.Unlock()
		if err == nil {
			w.emit(Event{Kind: EvQueued, Run: id, Epoch: lease.Epoch})
		}
	}
}

// take acquires a run's lease and starts its process.
func (w *Worker) take(ctx context.Context, id string, def Workflow) {
	g, err := w.hold.Acquire(ctx, id)
	if err != nil {
		return // held elsewhere, paused or archived meanwhile: not now
	}
	w.start(id, def, g, nil, nil)
}

// fresh is what a worker knows of a run it has just started itself: its
// stream is empty and its inbox holds only the start item, so the run
// need not read either before its first step.
type fresh struct {
	start startItem
	seq   uint64 // the start item's inbox seq
	at    time.Time
}

// spawning is a run handed to a worker before it exists: the run's first
// write creates it (store.Spawn: its world, its start item, this worker's
// lease and its first events, in one transaction), and the Start that
// handed it over waits for that write's outcome.
type spawning struct {
	spec store.SpawnSpec
	park actor.Parker // the waiting Start's

	mu    sync.Mutex
	set   bool
	tried bool // the Spawn was sent (err is its answer)
	err   error
}

// settle records the outcome of the run's first write (tried) or that
// none was sent (the run stopped first), and wakes the Start.
func (s *spawning) settle(tried bool, err error) {
	s.mu.Lock()
	if s.set {
		s.mu.Unlock()
		return
	}
	s.set, s.tried, s.err = true, tried, err
	s.mu.Unlock()
	s.park.Unpark()
}

// wait waits for settle. waitErr is ctx's end, when that came first.
func (s *spawning) wait(ctx context.Context) (tried bool, err, waitErr error) {
	for {
		s.mu.Lock()
		if s.set {
			defer s.mu.Unlock()
			return s.tried, s.err, nil
		}
		s.mu.Unlock()
		if err := s.park.Park(ctx); err != nil {
			return false, nil, err
		}
	}
}

// room reports whether the worker would adopt a new run of def now: it
// carries def's workflow at def's version, has room and is not stopping.
func (w *Worker) room(def Workflow) bool {
	if !w.carries(def.Name(), def.Version()) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.stopped && len(w.runs) < w.cfg.MaxActiveRuns
}

// carries reports whether the worker runs the runs of version version of
// workflow name.
func (w *Worker) carries(name string, version uint64) bool {
	_, ok := w.cfg.Workflows.LookupVersion(name, version)
	return ok
}

// adopt takes up run id, started in this process and not yet written: the
// run's process starts at once, and its first write creates the run with
// spec (completed with this worker as the holder). It returns nil, and
// writes nothing, when the worker has no room for it; otherwise the
// caller waits for the first write's outcome on the result.
func (w *Worker) adopt(id string, def Workflow, spec store.SpawnSpec, start startItem, park actor.Parker) *spawning {
	if !w.room(def) {
		return nil
	}
	mine, _ := w.cfg.Workflows.LookupVersion(def.Name(), def.Version())
	sp := &spawning{spec: spec, park: park}
	sp.spec.Holder, sp.spec.Incarnation, sp.spec.TTL = w.cfg.Worker, w.cfg.Incarnation, w.cfg.LeaseTTL
	if !w.start(id, mine, leasing.Grant{Lease: store.Lease{World: id}}, &fresh{start: start, seq: 1}, sp) {
		return nil
	}
	return sp
}

// start starts the process of a run whose lease g granted this worker.
// With sp, the run does not exist yet: its first write creates it, and
// takes its lease.
func (w *Worker) start(id string, def Workflow, g leasing.Grant, f *fresh, sp *spawning) bool {
	r := newRunner(w.st, w.ex, id, g, w.hold, w.cfg.PollEvery)
	r.scope, r.def, r.observe, r.fresh, r.controlEvery = w.scope, def, w.cfg.Observe, f, w.cfg.ControlEvery
	if sp != nil {
		r.spawn = sp
		r.unspawned.Store(true)
	}
	hr := &heldRun{r: r}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return false
	}
	w.runs[id] = hr
	if sp == nil {
		w.hold.Hold(&r.lease, g)
	}
	w.mu.Unlock()
	w.endMu.Lock()
	w.live[id] = true
	w.endMu.Unlock()
	if sp == nil {
		w.emit(Event{Kind: EvAcquired, Run: id, Epoch: g.Lease.Epoch})
	}
	if _, err := w.scope.Go("workflow-run:"+id, func(ctx context.Context) error {
		exit := w.runProcess(ctx, r)
		if r.spawn != nil {
			r.spawn.settle(false, nil) // stopped before its first write
		}
		var end *event.Envelope
		if exit == nil || exit.kind == stopCancel {
			end = r.h.terminal
		}
		w.report(id, end)
		w.mu.Lock()
		hr.done, hr.exit = true, exit
		if exit != nil && exit.kind == stopBlocked {
			w.diverged[id] = r.h.head
		} else {
			delete(w.diverged, id)
		}
		w.mu.Unlock()
		// Room freed up, or the run must be taken up again: scan soon.
		w.hint.Store(true)
		w.park.Unpark()
		return nil
	}); err != nil {
		w.mu.Lock()
		delete(w.runs, id)
		w.mu.Unlock()
		w.hold.Forget(&r.lease)
		w.report(id, nil)
		return false
	}
	return true
}

// runProcess is a run's process: it watches the run's inbox, runs the
// run, and reports how it ended.
func (w *Worker) runProcess(ctx context.Context, r *runner) *stop {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.cancel.Store(&cancel)
	if r.fenced.Load() {
		cancel()
	}
	stopWatch, err := w.st.Watch(ctx, inboxWaker{r}, store.TopicInbox(r.id))
	if err != nil {
		s := r.failed(ctx, "watch", err)
		r.emit(EvError, s)
		return s
	}
	defer stopWatch()
	s := r.execute(ctx)
	switch {
	case s == nil:
		r.emit(EvFinished, nil)
	case s.kind == stopCancel:
		r.emit(EvFinished, s)
	case s.kind == stopPause, s.kind == stopBlocked:
		r.emit(EvPaused, nil)
	case s.kind == stopFenced:
		r.emit(EvFenced, s.cause)
	case s.kind == stopShutdown:
		r.emit(EvStopped, s.cause)
	case s.kind == stopUnspawned:
		// Its first write did not create it: the Start that handed it
		// over has the answer.
	default:
		r.emit(EvError, s.cause)
	}
	return s
}

// await registers ew to be woken whenever run id's process stops on this
// worker, with the run's end event when the run ended; stop unregisters
// it. A run running here when it registered (running) is sure to wake it.
func (w *Worker) await(id string, ew *endWaiter) (stop func()) {
	w.endMu.Lock()
	w.ends[id] = append(w.ends[id], ew)
	w.endMu.Unlock()
	return func() {
		w.endMu.Lock()
		defer w.endMu.Unlock()
		ws := w.ends[id]
		if i := slices.Index(ws, ew); i >= 0 {
			ws = slices.Delete(ws, i, i+1)
		}
		if len(ws) == 0 {
			delete(w.ends, id)
		} else {
			w.ends[id] = ws
		}
	}
}

// running reports whether run id's process runs on this worker.
func (w *Worker) running(id string) bool {
	w.endMu.Lock()
	defer w.endMu.Unlock()
	return w.live[id]
}

// report tells that run id's process stopped here, with the run's end
// event when the run ended, to the waiters of its end.
func (w *Worker) report(id string, end *event.Envelope) {
	w.endMu.Lock()
	delete(w.live, id)
	ws := slices.Clone(w.ends[id])
	w.endMu.Unlock()
	for _, e := range ws {
		if end != nil {
			e.end.Store(end)
		}
		e.wake.Unpark()
	}
}

// lost is the holder's report of a run's lease its renewal found lost:
// the run stops at once.
func (w *Worker) lost(l *leasing.Lease, _ error) {
	w.mu.Lock()
	hr := w.runs[l.World]
	w.mu.Unlock()
	if hr != nil && &hr.r.lease == l {
		hr.r.fence()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// execute runs the run from its history until it ends (nil) or stops on
// this worker (the *stop says why).
func (r *runner) execute(ctx context.Context) *stop {
	if err := r.load(ctx); err != nil {
		return r.failed(ctx, "load", err)
	}
	if r.start == nil {
		return &stop{kind: stopError, cause: errorf("load", ErrInvalid, r.id, detail("the run has no start item"))}
	}
	if r.h.terminal != nil {
		if err := r.finish(ctx); err != nil {
			return r.failed(ctx, "finish", err)
		}
		return nil
	}
	if !r.unspawned.Load() {
		// The run exists: its timeout is set before anything else, by
		// every holder (the store dedupes it by its hash). A holder that
		// died between the run's first write and its scheduling leaves it
		// to the next, which may write nothing for a long while (a run
		// that waits).
		if err := r.scheduleTimeout(ctx); err != nil {
			return r.failed(ctx, "timeout", err)
		}
	}
	c := newCtx(r, ctx)
	r.lastControl = r.ex.Now()
	if p := r.plan(); p.stops() || len(p.catchUp) > 0 {
		if err := r.applyPlan(ctx, p, nil); err != nil {
			return r.failed(ctx, "control", err)
		}
	}
	if r.h.blocked != "" {
		// A held run resumes only if this code gets past the step it
		// diverged at: the RunResumed rides with the first new write, and
		// is dropped if the replay diverges again (see hold).
		if err := r.later(event.RunResumed, "", r.h.resumes+1, runControl{Reason: "replay passed the divergent step"}); err != nil {
			return r.failed(ctx, "resume", err)
		}
	}
	if !r.h.started {
		// RunStarted rides with the first step's StepStarted (or the end).
		if err := r.later(event.RunStarted, "", 1, runStart{Input: r.start.Input, Attrs: r.start.Attrs}); err != nil {
			return r.failed(ctx, "start", err)
		}
	}
	r.emit(EvStarted, nil)
	var out []byte
	var ferr error
	for {
		r.tells = true
		out, ferr = r.def.invoke(c, r.runInput())
		r.closeBranches(c)
		r.tells = false
		if c.halted != nil {
			return r.failed(ctx, "run", c.halted)
		}
		again, err := r.continueAsNew(ctx, c, ferr)
		if err != nil {
			return r.failed(ctx, "continue as new", err)
		}
		if !again {
			break
		}
		c = newCtx(r, ctx) // the new generation: a function run from the start
	}
	if ferr == nil {
		if err := checkValue("the run's output", out); err != nil {
			// Recorded, it would be refused on every try: the run fails.
			out, ferr = nil, err
		}
	}
	typ, end := event.RunCompleted, runEnd{Output: out}
	div := c.div
	if div == nil && c.next < len(r.h.steps) {
		div = &DivergenceError{RunID: r.id, StepIndex: c.next, Recorded: r.h.steps[c.next].id,
			Reason: "the function returned before asking for it"}
	}
	switch {
	case div != nil:
		r.emit(EvDiverged, div)
		return r.hold(ctx, div)
	case c.misused() != nil:
		// Whatever the function made of the refusal, the run used its Ctx
		// from two goroutines: its step order is not reproducible.
		typ, end = event.RunFailed, runEnd{Error: message(c.misused())}
	case ferr != nil && c.told && errors.Is(ferr, ErrCancelled):
		typ, end = event.RunCancelled, runEnd{Control: r.h.cancelSeq}
		if it := r.cancelItem(); it != nil {
			end.Reason, end.SourceOccurredAt = it.control.Reason, unixNano(it.at)
		}
	case ferr != nil:
		typ, end = event.RunFailed, runEnd{Error: message(ferr)}
	}
	if err := r.closeChildren(c); err != nil {
		return r.failed(ctx, "end", err)
	}
	if err := r.end(ctx, typ, end); err != nil {
		return r.failed(ctx, "end", err)
	}
	if err := r.finish(ctx); err != nil {
		return r.failed(ctx, "finish", err)
	}
	return nil
}

// closeChildren applies the parent-close policies of the run's children
// that have not ended, before the run's end is recorded (a crash in
// between applies them again; each is idempotent): ParentCloseCancel asks
// the child to cancel, ParentCloseWait waits for its end, and
// ParentCloseAbandon leaves it be.
func (r *runner) closeChildren(c *Ctx) error {
	var wait []string
	for _, st := range r.h.steps {
		if st.kind != kindChild || st.done() || st.first.Child == "" {
			continue
		}
		if parentClose(st.first.ParentClose) == ParentCloseWait {
			wait = append(wait, st.first.Child)
		}
	}
	if err := r.cancelChildren(c.ctx, "parent run "+r.id+" ended"); err != nil {
		return err
	}
	if len(wait) == 0 {
		return nil
	}
	_, err := r.wait(c, time.Time{}, func() (bool, error) {
		for _, id := range wait {
			end, err := r.childEnd(c.ctx, id)
			if err != nil || end == nil {
				return false, err
			}
		}
		return true, nil
	})
	return err
}
