package plane

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/internal/otrace"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// wmsg wakes a world process: its inbox may have grown, or its lease
// changed. It carries nothing because the process always reads durable
// state; a wake coalesces with any other.
type wmsg struct{}

// worldProc is one active world: a process under the host's dynamic
// supervisor. A crash (a store error, a commit that may or may not have
// landed) discards the in-memory world; the supervisor's fresh instance
// restores it from the store, which is the only truth.
type worldProc struct {
	h       *Host
	l       *lease
	self    *actor.Ref[wmsg]
	inst    world.Instance
	cursor  uint64
	passive bool // passivated: wakes still in the mailbox go to the host
	// isolate counts the commits still to make of one step each: the
	// store refused a commit of that many steps, and only alone is the
	// step it refused told apart from the others (see refuse).
	isolate int
}

func (w *worldProc) OnStart(p *actor.Proc) error {
	w.self, _ = p.Self().Handle().(*actor.Ref[wmsg])
	w.h.mu.Lock()
	w.l.ref = w.self
	w.l.restarting = false
	w.h.mu.Unlock()
	p.Continue(w.run)
	return nil
}

func (w *worldProc) Handle(p *actor.Proc, _ wmsg) error { return w.run(p) }

func (w *worldProc) HandleInfo(p *actor.Proc, info any) error {
	if _, ok := info.(actor.IdleTimeout); ok && !w.passive {
		var pk *parkedWorld
		if w.inst != nil {
			// Everything it stepped is committed (a failed commit
			// crashes the process, which never idles after it).
			pk = &parkedWorld{snap: w.inst.Snapshot(), cursor: w.cursor}
		}
		w.h.mu.Lock()
		if len(w.l.due) > 0 {
			// A timer was handed over as the idle time ran out: step it
			// (its wake is on its way) instead of passivating.
			w.h.mu.Unlock()
			return nil
		}
		if w.l.ref == w.self {
			// Parked before the world is let go: a successor starts only
			// once ref is nil, and so finds it. A process that is not the
			// registered one parks nothing, since another may have
			// committed after what it holds.
			if pk != nil {
				w.l.parked.Store(pk)
			}
			w.l.ref = nil
		}
		w.h.mu.Unlock()
		w.passive, w.inst = true, nil
		w.h.emit(HostEvent{Kind: EvPassivate, World: w.l.world, Epoch: w.l.epoch})
		p.Exit(nil)
	}
	return nil
}

func (w *worldProc) OnStop(p *actor.Proc, o actor.Outcome) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if w.l.ref == w.self {
		w.l.ref = nil
		// The supervisor restarts an Err exit: until the new instance
		// registers, hints must not start a second process.
		w.l.restarting = o.Severity == actor.Err && !w.l.hold.Fenced()
	}
}

// run restores the world if needed and runs cycles until its inbox is
// drained. Between two cycles it yields through a continuation, so a stop
// request is seen between commits.
func (w *worldProc) run(p *actor.Proc) error {
	h, l := w.h, w.l
	if w.passive {
		h.hint(l) // a wake that raced the passivation: the host starts anew
		return nil
	}
	if !h.alive(l) {
		p.Exit(nil)
		return nil
	}
	ctx := p.Ctx()
	if w.inst == nil {
		inst, cursor, err := w.restore(ctx)
		if err != nil {
			if _, ok := errors.AsType[*world.DivergenceError](err); ok {
				// Told apart from other restore failures (the store's,
				// say) because no retry can cure it: the definition no
				// longer does what the journal recorded.
				h.emit(HostEvent{Kind: EvDiverged, World: l.world, Epoch: l.epoch, Err: err})
			}
			return w.fail(p, err)
		}
		w.inst, w.cursor = inst, cursor
		// What came while no process ran is read before any timer the
		// host hands over is stepped.
		l.hinted.Store(true)
		l.advanceHead(inst.Snapshot())
		h.emit(HostEvent{Kind: EvRestored, World: l.world, Epoch: l.epoch, Height: inst.Height()})
		h.learnTimers(ctx, l, inst.Timers())
	}
	more, err := w.cycle(ctx)
	if err != nil {
		return w.fail(p, err)
	}
	if more {
		p.Continue(w.run)
		return nil
	}
	if h.cfg.IdleAfter > 0 {
		p.IdleTimeout(h.cfg.IdleAfter)
	}
	return nil
}

// restore brings the world back: from what its passivated predecessor
// under this holding parked, which is the store's state (a wake costs no
// store read and no replay of the journal since the last snapshot), or
// else from the store. A parked state below the head is not the store's:
// something committed after it was parked, so the store is read instead.
func (w *worldProc) restore(ctx context.Context) (world.Instance, uint64, error) {
	if pk := w.l.parked.Swap(nil); pk != nil && !w.l.behindHead(pk.snap.Height) {
		inst, err := w.l.kern.Replay(w.l.world, pk.snap, nil)
		if err == nil {
			return inst, pk.cursor, nil
		}
	}
	return Restore(ctx, w.h.st, w.h.cfg.Kernels, w.l.world)
}

// fail ends the process: a fence (the store's, or the local flag) is a
// normal exit, and nothing is retried; anything else is a crash the
// supervisor restarts from the store.
func (w *worldProc) fail(p *actor.Proc, err error) error {
	w.inst = nil
	if fencedErr(err) || !w.h.alive(w.l) {
		w.h.dropLease(w.l, EvFenced, err)
		p.Exit(nil)
		return nil
	}
	// A commit that failed may have landed (its answer lost on the way
	// back), so the head this holding recorded may be behind the store
	// until the successor restores: State stops answering it, and callers
	// read the store, which has every commit. The restore reads the
	// world's timers again for the same reason rather than trust what the
	// host recorded.
	w.l.head.Store(nil)
	w.l.timersKnown.Store(false)
	w.h.emit(HostEvent{Kind: EvCrash, World: w.l.world, Epoch: w.l.epoch, Err: err})
	return err
}

func fencedErr(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotHolder) ||
		errors.Is(err, store.ErrStaleEpoch) || errors.Is(err, store.ErrWorldPaused) || errors.Is(err, store.ErrWorldArchived)
}

// cycle is one world cycle: read the inbox after the cursor, step until
// it is drained or a budget runs out, then ONE commit. It reports whether
// input is left. Any error leaves the world to be restored, since its
// in-memory state may be ahead of the store.
func (w *worldProc) cycle(ctx context.Context) (more bool, err error) {
	h, l, cfg := w.h, w.l, &w.h.cfg
	start := h.ex.Now()
	// Due timers handed over by the host are stepped without an inbox item
	// (hosttimers.go). One the world no longer has armed (fired through
	// the inbox meanwhile, cancelled, or handed twice) is dropped
	// unstepped.
	var fired []*hostTimer
	deferred := false
	for _, e := range h.takeDue(l) {
		if w.inst.Armed(e.hash) && !slices.ContainsFunc(fired, func(f *hostTimer) bool { return f.hash == e.hash }) {
			fired = append(fired, e)
			deferred = deferred || e.deferred
		}
	}
	// The inbox is read when there is no timer to step, or when it was
	// hinted since the last read: what the host knew had arrived before
	// the firing is stepped before it, in the same cycle. With nothing
	// hinted, the firing is stepped before any store call.
	var items []store.InboxItem
	took := false
	if hinted := l.hinted.Swap(false); len(fired) == 0 || hinted {
		// A timer firing the host just wrote, when it is the next item,
		// is stepped without reading the inbox first; the cycle after
		// reads whatever else came.
		var it store.InboxItem
		if it, took = h.takeFired(l, w.cursor); took {
			items = []store.InboxItem{it}
		} else if items, err = h.st.ReadInbox(ctx, l.world, w.cursor, cfg.MaxInboxBatch); err != nil {
			h.putDue(l, fired)
			return false, err
		}
		if len(items) == 0 && len(fired) == 0 {
			return false, nil
		}
	}
	inputs := make([]cycleInput, 0, len(items)+len(fired))
	for _, it := range items {
		in := world.Input{Seq: it.Seq, Kind: it.Kind, Payload: it.Payload, EnqueuedAt: it.EnqueuedAt}
		if it.Kind == vocab.KindReceipt {
			// So that a receipt the kernel cannot read still ends its effect.
			in.ReceiptFor, _ = store.ReceiptKeyIntent(it.DedupeKey)
		}
		inputs = append(inputs, cycleInput{in: in})
	}
	firings := make([]cycleInput, 0, len(fired))
	for _, e := range fired {
		// Its time (the due time, or a retry's) is its Ctx.Now.
		firings = append(firings, cycleInput{in: world.Input{Kind: vocab.KindTimer, Payload: e.payload, EnqueuedAt: e.at}, timer: e})
	}
	if deferred {
		// A budget cut these firings from an earlier cycle: they go first
		// now, so that a busy inbox cannot hold a due timer back.
		inputs = append(firings, inputs...)
	} else {
		inputs = append(inputs, firings...)
	}
	base := w.inst.Snapshot() // what the cycle starts from, should the store refuse it
	b := store.CommitBatch{ExpectedCursor: w.cursor, NewCursor: w.cursor, ExpectedHead: w.inst.Height()}
	var oldest time.Time // the enqueue of the oldest item journaled
	var replies []world.Reply
	steps, effects := 0, 0
	more = len(items) == cfg.MaxInboxBatch || took || len(fired) > 0
	var stepped []store.InboxItem   // the inbox items journaled, in order
	var ran []cycleInput            // the inputs stepped, in order
	var failed []world.StepResult   // the steps whose handler failed, for EvHandler*
	snapshot := false               // a KindSnapshot item was consumed
	var upgraded []world.StepResult // the upgrade step that ended the cycle
	fired = fired[:0]               // the timers fired, in order
	for k, c := range inputs {
		if steps >= cfg.MaxTickStepsPerCycle || effects >= cfg.MaxEffectsPerCycle ||
			(steps > 0 && (w.isolate > 0 || !roomForAStep(&b) || h.ex.Now().Sub(start) >= cfg.MaxCycleWall)) {
			more = true
			// The budget is spent: unstepped items are read again, and
			// unstepped firings go back, to go first next time.
			var rest []*hostTimer
			for _, c := range inputs[k:] {
				if c.timer != nil {
					c.timer.deferred = true
					rest = append(rest, c.timer)
				}
			}
			h.putDue(l, rest)
			break
		}
		if !h.alive(l) {
			return false, errorf("step", ErrFenced, l.world, nil)
		}
		in := c.in
		if in.Kind == KindSnapshot {
			// Not an input of the world's: it asks for a snapshot at the
			// step boundary this commit ends on, and is consumed without
			// a journal record.
			snapshot = true
			b.NewCursor = in.Seq
			stepped = append(stepped, items[len(stepped)])
			continue
		}
		h.emit(HostEvent{Kind: EvStep, World: l.world, Epoch: l.epoch, Height: w.inst.Height() + 1})
		var res world.StepResult
		if e := c.timer; e != nil {
			// A direct firing, handed over up to the schedule's slack
			// early: the kernel decodes it first, the host waits for its
			// time, and only then does its handler run, never before. A
			// firing that runs no handler waits too: nothing is committed
			// before its time either.
			emitted := h.ex.Now()
			p := w.inst.Prepare(in)
			actor.SpinUntil(h.ex, e.local)
			e.firedAt = h.ex.Now()
			res, err = p.Step(emitted)
		} else {
			res, err = w.inst.Step(in, h.ex.Now())
		}
		if err != nil {
			return false, err
		}
		b.Entries = append(b.Entries, res.Record)
		b.Intents = append(b.Intents, res.Intents...)
		b.Timers = append(b.Timers, res.TimerSets...)
		b.CancelTimers = append(b.CancelTimers, res.TimerCancels...)
		if res.Reply != nil {
			replies = append(replies, *res.Reply)
		}
		if (res.Outcome == world.OutcomeError || res.Outcome == world.OutcomePanic) && res.Record.EventType != world.EventWorldUpgraded {
			failed = append(failed, res)
		}
		if e := c.timer; e != nil {
			// A direct firing: the commit that journals it takes the
			// timer out of the queue.
			b.CancelTimers = append(b.CancelTimers, e.hash)
			fired = append(fired, e)
		} else {
			b.NewCursor = in.Seq
			stepped = append(stepped, items[len(stepped)])
		}
		if steps == 0 || in.EnqueuedAt.Before(oldest) {
			oldest = in.EnqueuedAt
		}
		steps++
		effects += len(res.Intents) + len(res.TimerSets)
		ran = append(ran, c)
		if res.Record.EventType == world.EventWorldUpgraded {
			// The upgrade's height is a snapshot boundary: the commit
			// that journals it snapshots the world there, so a restore
			// loads the new version from it and never re-runs a record
			// of the old one with the new. The cycle ends with it.
			upgraded = append(upgraded, res)
			var rest []*hostTimer
			for _, c := range inputs[k+1:] {
				if c.timer != nil {
					c.timer.deferred = true
					rest = append(rest, c.timer)
				}
			}
			h.putDue(l, rest)
			more = more || k+1 < len(inputs)
			break
		}
	}
	items = stepped
	if height := w.inst.Height(); snapshot || len(upgraded) > 0 || height/cfg.SnapshotEvery > b.ExpectedHead/cfg.SnapshotEvery {
		b.Snapshot = &store.Snapshot{World: l.world, Height: height, State: w.inst.State(), StateHash: w.inst.StateHash()}
	}
	if !h.alive(l) {
		return false, errorf("commit", ErrFenced, l.world, nil)
	}
	cctx, sp := w.cycleSpan(ctx, start, items, fired, b)
	if cfg.Links != nil && sp.IsRecording() {
		// Before the commit: an adapter pool may claim an intent as soon
		// as the commit lands. Should the commit fail, the cycle that
		// publishes these intents after the restore records itself over.
		sc := sp.SpanContext()
		for _, in := range b.Intents {
			cfg.Links.PutIntent(in.IntentHash, sc)
		}
		for _, t := range b.Timers {
			cfg.Links.PutIntent(t.IntentHash, sc)
		}
	}
	res, err := h.st.Commit(cctx, l.world, l.epoch, b)
	if err != nil && errors.Is(err, store.ErrInvalid) {
		h.emit(HostEvent{Kind: EvRefused, World: l.world, Epoch: l.epoch, Height: b.ExpectedHead, Err: err, N: steps})
		cause, retry := err, false
		if b, replies, retry, err = w.refuse(ran, base, b, cause); err == nil && retry {
			otrace.End(sp, h.ex.Now(), cause)
			// What this cycle took goes back, to go first in the
			// cycles that commit its steps one by one.
			for _, e := range fired {
				e.deferred = true
			}
			h.putDue(l, fired)
			l.hinted.Store(true)
			return true, nil
		}
		if err == nil {
			failed = nil // the step is refused now, its handler's outcome gone
			upgraded = nil
			res, err = h.st.Commit(cctx, l.world, l.epoch, b)
		}
	}
	done := h.ex.Now()
	if err != nil {
		otrace.End(sp, done, err)
		return false, err
	}
	if w.isolate > 0 {
		w.isolate--
	}
	sp.SetAttributes(otrace.ToHeight.Int64(int64(res.Head)), otrace.Intents.Int(res.Published))
	otrace.End(sp, done, nil)
	w.cursor = b.NewCursor
	h.timersCommitted(l, &b)
	l.advanceHead(w.inst.Snapshot())
	var lag time.Duration
	if steps > 0 {
		// The enqueue is the store's clock: brought to the host's by the
		// measured skew (zero until measured).
		skew, _ := h.timers.skewOf()
		lag = max(done.Add(skew).Sub(oldest), 0)
	}
	h.emit(HostEvent{Kind: EvCommit, World: l.world, Epoch: l.epoch, Height: res.Head, Dur: lag, N: steps})
	if b.Snapshot != nil && snapshot {
		h.emit(HostEvent{Kind: EvSnapshot, World: l.world, Epoch: l.epoch, Height: b.Snapshot.Height})
	}
	for _, u := range upgraded {
		if r, rerr := world.RecordUpgraded(u.Record); rerr == nil && u.Outcome == world.OutcomeOK && r.From != r.To {
			h.emit(HostEvent{Kind: EvUpgraded, World: l.world, Epoch: l.epoch, Height: u.Height, WorldType: l.kern.Name()})
		} else if u.Outcome != world.OutcomeOK {
			h.emit(HostEvent{Kind: EvUpgradeFailed, World: l.world, Epoch: l.epoch, Height: u.Height, Err: u.Err, WorldType: l.kern.Name()})
		}
	}
	for _, f := range failed {
		kind := EvHandlerError
		if f.Outcome == world.OutcomePanic {
			kind = EvHandlerPanic
		}
		h.emit(HostEvent{Kind: kind, World: l.world, Epoch: l.epoch, Height: f.Height, Err: f.Err, WorldType: l.kern.Name()})
	}
	for _, e := range fired {
		h.emit(HostEvent{Kind: EvTimerFired, World: l.world, Epoch: l.epoch, Dur: e.firedAt.Add(e.skew).Sub(e.due), N: 1})
	}
	for _, r := range replies {
		cfg.Replies.deliver(r)
	}
	return more, nil
}

// refuse answers a commit the store refused as invalid (cause): a step
// within the kernel's limits that the store does not take all the same.
// Nothing of the commit was written, so the world goes back to base, the
// state the cycle started from. A commit of one step is made again with
// that step refused (world.Instance.Refuse): its input consumed as an
// error outcome, the state unchanged, so that neither it nor the inputs
// queued behind it wait for ever. A commit of several steps cannot say
// which one the store refused: refuse reports again, and the cycles
// after it commit them one at a time (w.isolate), the refused one alone.
func (w *worldProc) refuse(ran []cycleInput, base world.Snapshot, b store.CommitBatch, cause error) (store.CommitBatch, []world.Reply, bool, error) {
	h, l := w.h, w.l
	w.inst = nil // ahead of the store until reloaded
	if len(ran) == 0 {
		return b, nil, false, cause // no step to blame: the world restarts as after any failure
	}
	inst, err := l.kern.Load(l.world, base)
	if err != nil {
		return b, nil, false, errors.Join(cause, err)
	}
	w.inst = inst
	if len(ran) != 1 {
		w.isolate = len(ran)
		return b, nil, true, nil
	}
	c := ran[0]
	res, err := inst.Refuse(c.in, h.ex.Now(), cause)
	if err != nil {
		w.inst = nil
		return b, nil, false, errors.Join(cause, err)
	}
	nb := store.CommitBatch{ExpectedCursor: b.ExpectedCursor, NewCursor: b.NewCursor, ExpectedHead: b.ExpectedHead,
		Entries: []store.Record{res.Record}}
	if c.timer != nil {
		nb.CancelTimers = []string{c.timer.hash}
	}
	if b.Snapshot != nil {
		nb.Snapshot = &store.Snapshot{World: l.world, Height: inst.Height(), State: inst.State(), StateHash: inst.StateHash()}
	}
	var replies []world.Reply
	if res.Reply != nil {
		replies = []world.Reply{*res.Reply}
	}
	return nb, replies, false, nil
}

// roomForAStep reports whether b can take one more step at the kernel's
// limits and stay within the store's: each step is bounded, but a commit
// gathers many.
func roomForAStep(b *store.CommitBatch) bool {
	return len(b.Entries) < store.MaxBatch &&
		len(b.Intents)+world.MaxStepIntents <= store.MaxBatch &&
		len(b.Timers)+len(b.CancelTimers)+world.MaxStepTimers+world.MaxStepCancels+1 <= store.MaxBatch
}

// cycleInput is one input of a cycle: an inbox item's, or a due timer's
// firing (timer set) that the host handed to the process.
type cycleInput struct {
	in    world.Input
	timer *hostTimer
}

// cycleSpan starts the orrery.cycle span of a commit, back-dated to the
// cycle's start, with a link to the span that wrote each journaled item
// (when this process recorded one), and returns the context the commit
// runs under. It is a root: the cycle was started by durable input, not by
// any caller's context.
func (w *worldProc) cycleSpan(ctx context.Context, start time.Time, journaled []store.InboxItem, fired []*hostTimer, b store.CommitBatch) (context.Context, trace.Span) {
	h, l := w.h, w.l
	var links []trace.Link
	if h.cfg.Links != nil {
		for _, it := range journaled {
			sc, ok := h.cfg.Links.Inbox(l.world, it.Seq)
			links = append(links, otrace.Link(sc, ok)...)
		}
		// A direct firing has no inbox item: its link is to the cycle
		// that set the timer.
		for _, e := range fired {
			links = append(links, otrace.Link(h.cfg.Links.Intent(e.hash))...)
		}
	}
	return h.tr.Start(ctx, otrace.Cycle, trace.WithNewRoot(), trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(otrace.World.String(l.world), otrace.Epoch.Int64(int64(l.epoch)),
			otrace.Steps.Int(len(journaled)+len(fired)), otrace.FromHeight.Int64(int64(b.ExpectedHead))))
}
