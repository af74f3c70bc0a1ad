package plane

import (
	"container/heap"
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/internal/otrace"
	"github.com/orrery-run/orrery/plane/internal/seam"
	"github.com/orrery-run/orrery/store"
)

// The host fires the timers of the worlds it holds.
//
// A world's timers are set by its own commits, so the host that holds its
// lease knows each one and its due time without asking anybody: it
// records them as its commits land (and, for a world restored with timers
// armed, reads their due times once with ListTimers; a world taken over
// and left passive is woken, restored and so listed when its earliest
// timer is due, which the acquisition told: wakeKey), and fires each at
// its due time.
//
// A world whose process runs steps the firing itself at once (handDue),
// after the inbox items the host had been hinted of (read in the same
// cycle) and with no store call before the handler when there are none. The timer is
// durable already, set by an earlier commit, and the commit that journals
// the firing (its stepId world.TimerStepID, Input.Seq 0) removes it from
// the queue in the same transaction; a crash before that commit leaves
// the timer where it was, for the restore to fire again. A passive or
// restarting world's timer is fired with store.FireHeld instead, one
// fenced write into its inbox that needs no claim, and the world is woken
// as an inbox hint does (HostConfig.TimersThroughInbox makes every firing
// go that way). The timer worker (plane/timer), lagging behind, fires
// only what no live holder did; should it fire a timer its holder stepped
// too, the kernel drops the second firing as stale.
//
// Due times are instants of the store's clock (the world's time is the
// store's), and the host's clock may be seconds away from it. The schedule
// keeps them as they are and turns them into local instants only to wait:
// local = due − skew, where skew is the store's clock less the local one,
// as the host's last heartbeat measured it (the store's time of the
// heartbeat less the local time just AFTER its answer, so the estimate is
// never above the true skew and a wait never ends before the store's
// clock reaches the due time). Until the first measurement, and while the
// host does not know its skew, no firing is stepped directly: each goes
// through store.FireHeld, which judges due-ness on the store's clock
// itself (ErrNotDue says how long is left).
//
// One schedule serves every world of the host: a min-heap by fire time
// with ONE executor timer armed for the earliest entry, re-armed as the
// earliest changes, and one task that fires what is due, in lanes across
// worlds. The timer is armed the executor's slack early (actor.TimerSlack:
// a millisecond on the production executor, whose timers fire up to that
// late; none in the lab) and an entry is handed out that early too: the
// world's process, or the firing lane, waits out the rest with
// actor.SpinUntil, so a handler starts at its timer's due time to the
// microsecond, and never before it. A world that passivates keeps its
// entries (its timer wakes it); a cancelled timer, and every timer of a
// world whose lease the host drops, leave the schedule. The schedule is memory only: what it loses
// (a host crash, a failed ListTimers, a timer past the listing's bound)
// the timer worker fires, at most its Lag late.

// hostTimerTries bounds the firings of one timer that fail in the store
// (not the refusals, which decide): after that many the host leaves it to
// the timer worker. With the backoff below they span about 0.75s, well
// under the Lag a node gives its timer worker.
const hostTimerTries = 5

// hostTimerBackoff is the wait after the n-th failed firing of a timer.
func hostTimerBackoff(n int) time.Duration {
	return min(50*time.Millisecond<<(n-1), time.Second)
}

// hostTimer is one timer in the schedule.
type hostTimer struct {
	l       *lease
	hash    string
	payload []byte    // the firing's input (vocab.TimerSet.Payload); nil for a wake-up
	due     time.Time // the timer's due time, as its world set it (store clock)
	at      time.Time // when to fire: the due time, or a retry's (store clock)
	// local is at on the executor's clock, and skew the estimate that
	// turned it into that, both set when the entry is taken for firing.
	local   time.Time
	skew    time.Duration
	tries   int       // firings that failed in the store
	idx     int       // its place in the heap; -1 when out of it
	firedAt time.Time // when its world's process stepped it (a direct firing)
	// deferred: a cycle's budget ran out before this handed-over firing;
	// the next cycle steps it first.
	deferred bool
}

// timerHeap orders entries by (at, world, hash): a stable order for timers
// due at one instant.
type timerHeap []*hostTimer

func (q timerHeap) Len() int { return len(q) }
func (q timerHeap) Less(i, j int) bool {
	a, b := q[i], q[j]
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	if a.l.world != b.l.world {
		return a.l.world < b.l.world
	}
	return a.hash < b.hash
}
func (q timerHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].idx, q[j].idx = i, j
}
func (q *timerHeap) Push(x any) {
	e := x.(*hostTimer)
	e.idx = len(*q)
	*q = append(*q, e)
}
func (q *timerHeap) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.idx = -1
	return e
}

// hostTimers is a host's schedule. Its lock is taken after Host.mu when
// both are held, never before.
type hostTimers struct {
	ex   actor.Executor
	park actor.Parker // the firing task's wake-up
	// slack is how early the schedule hands out an entry (and arms for
	// it): the executor's timers may fire that late, so whoever fires an
	// entry waits out the rest with actor.SpinUntil and starts at its time
	// to the microsecond, not the millisecond.
	slack time.Duration

	mu sync.Mutex
	// skew is the store's clock less the executor's (see the top of the
	// file); skewKnown is false until the first measurement.
	skew      time.Duration
	skewKnown bool
	q         timerHeap
	byHash    map[string]*hostTimer
	byLease   map[*lease]map[string]*hostTimer
	armed     actor.Timer
	armedAt   time.Time // of armed
	stopped   bool
}

func newHostTimers(ex actor.Executor) *hostTimers {
	return &hostTimers{ex: ex, park: ex.NewParker(), slack: actor.TimerSlack(ex),
		byHash: map[string]*hostTimer{}, byLease: map[*lease]map[string]*hostTimer{}}
}

// add schedules timer hash of l's world, due at due. A timer already in
// the schedule under l keeps its entry (and its retries); one under an
// older lease of the world is replaced.
func (s *hostTimers) add(l *lease, hash string, due time.Time, payload []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Checked under the lock that dropLease takes after setting the flag:
	// a timer of a lease being dropped is never left behind.
	if s.stopped || l.hold.Fenced() {
		return
	}
	if e, ok := s.byHash[hash]; ok {
		if e.l == l {
			return
		}
		s.removeLocked(e)
	}
	e := &hostTimer{l: l, hash: hash, payload: payload, due: due, at: due, idx: -1}
	s.insertLocked(e)
	s.armLocked()
}

// setSkew records a measurement of the store's clock less the executor's
// and re-arms the schedule's timer by it.
func (s *hostTimers) setSkew(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.skewKnown && s.skew == d {
		return
	}
	s.skew, s.skewKnown = d, true
	if s.armed != nil {
		s.armed.Stop()
		s.armed = nil
	}
	s.armLocked()
}

// skewOf returns the skew estimate and whether there is one.
func (s *hostTimers) skewOf() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skew, s.skewKnown
}

// again puts an entry that was taken for firing back, to fire at at (an
// instant of the store's clock).
func (s *hostTimers) again(e *hostTimer, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || e.l.hold.Fenced() {
		return
	}
	if _, ok := s.byHash[e.hash]; ok {
		return // scheduled anew meanwhile (a restore learned it again)
	}
	e.at = at
	s.insertLocked(e)
	s.armLocked()
}

// cancel removes l's timers hashes (its world cancelled them).
func (s *hostTimers) cancel(l *lease, hashes []string) {
	if len(hashes) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hashes {
		if e, ok := s.byHash[h]; ok && e.l == l {
			s.removeLocked(e)
		}
	}
	s.armLocked()
}

// drop removes every timer of l: the host no longer holds it.
func (s *hostTimers) drop(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byLease[l] {
		s.removeLocked(e)
	}
	s.armLocked()
}

// take removes and returns, in heap order, every entry due at now on the
// executor's clock (or within the slack after it: its taker waits until
// its local time), and arms the timer for the next one.
func (s *hostTimers) take(now time.Time) []*hostTimer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*hostTimer
	for len(s.q) > 0 && !s.q[0].at.Add(-s.skew).After(now.Add(s.slack)) {
		e := s.q[0]
		s.removeLocked(e)
		e.local, e.skew = e.at.Add(-s.skew), s.skew
		out = append(out, e)
	}
	s.armLocked()
	return out
}

// stop empties the schedule for good and disarms it.
func (s *hostTimers) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.armed != nil {
		s.armed.Stop()
		s.armed = nil
	}
	s.q = nil
	clear(s.byHash)
	clear(s.byLease)
}

func (s *hostTimers) insertLocked(e *hostTimer) {
	heap.Push(&s.q, e)
	s.byHash[e.hash] = e
	m := s.byLease[e.l]
	if m == nil {
		m = map[string]*hostTimer{}
		s.byLease[e.l] = m
	}
	m[e.hash] = e
}

func (s *hostTimers) removeLocked(e *hostTimer) {
	if e.idx >= 0 {
		heap.Remove(&s.q, e.idx)
	}
	if s.byHash[e.hash] == e {
		delete(s.byHash, e.hash)
	}
	if m := s.byLease[e.l]; m != nil && m[e.hash] == e {
		delete(m, e.hash)
		if len(m) == 0 {
			delete(s.byLease, e.l)
		}
	}
}

// armLocked keeps one executor timer armed for the earliest entry: it
// wakes the firing task then, or at once when that entry is due already.
func (s *hostTimers) armLocked() {
	if len(s.q) == 0 {
		if s.armed != nil {
			s.armed.Stop()
			s.armed = nil
		}
		return
	}
	at := s.q[0].at.Add(-s.skew)
	if s.armed != nil && s.armedAt.Equal(at) {
		return
	}
	if s.armed != nil {
		s.armed.Stop()
		s.armed = nil
	}
	d := at.Sub(s.ex.Now()) - s.slack
	if d <= 0 {
		s.park.Unpark()
		return
	}
	s.armed, s.armedAt = s.ex.AfterFunc(d, s.park.Unpark), at
}

// ---- the host's side ----

// wakeKey is the schedule's key of a wake-up: a passive world taken over
// with a timer armed is started when its earliest timer is due (its
// commits, which would tell the host its timers, were another host's).
// No intent hash (hex) begins with a NUL.
func wakeKey(world string) string { return "\x00wake:" + world }

// timersCommitted records what a commit of l's world did to its timers:
// the ones it set (they are durable now) and the ones it cancelled, in
// the order the store applied them.
func (h *Host) timersCommitted(l *lease, b *store.CommitBatch) {
	for _, t := range b.Timers {
		h.timers.add(l, t.IntentHash, t.DeliverAt, t.Payload)
	}
	h.timers.cancel(l, b.CancelTimers)
}

// learnTimers reads, once per holding of l, the due times of the timers
// armed in l's restored world (armed, the kernel's Timers()): the commits
// that set them may be another host's, or this one's before a crash. After
// that every commit of the world records its own, so a world restored
// again after a passivation is not listed again (a crash of its process
// is: see worldProc.fail). A failure leaves them to the timer worker and
// to the next restore. A world with more timers armed than one listing
// returns (store.MaxBatch) has the later ones fired by the timer worker.
func (h *Host) learnTimers(ctx context.Context, l *lease, armed []string) {
	if l.timersKnown.Load() {
		return
	}
	// Restored: a wake-up scheduled at its takeover has done its work.
	h.timers.cancel(l, []string{wakeKey(l.world)})
	if len(armed) == 0 {
		// Nothing armed: from here on the world's commits tell all.
		l.timersKnown.Store(true)
		return
	}
	ts, err := h.st.ListTimers(ctx, l.world, store.MaxBatch)
	if err != nil {
		h.log.Warn("host: could not list a restored world's timers; the timer worker fires them",
			"worker", h.cfg.Worker, "world", l.world, "err", err)
		return
	}
	want := make(map[string]bool, len(armed))
	for _, hash := range armed {
		want[hash] = true
	}
	for _, t := range ts {
		if want[t.IntentHash] {
			h.timers.add(l, t.IntentHash, t.DeliverAt, t.Payload)
		}
	}
	l.timersKnown.Store(true)
}

// fireTimers is the host's timer task: it hands what is due to the firing
// lanes and parks until the schedule's timer (or a new earliest entry)
// wakes it. It does not wait for the firings it handed over: a timer due
// while another is being fired starts at its due time, in a free lane.
// Before it returns, the lanes finish (a cancelled context ends each at
// its current firing).
func (h *Host) fireTimers(ctx context.Context) error {
	defer h.timers.stop()
	lanes := newFireLanes(h, ctx)
	defer lanes.wait()
	for ctx.Err() == nil {
		if due := h.timers.take(h.ex.Now()); len(due) > 0 {
			if rest := h.handDue(due); len(rest) > 0 {
				lanes.dispatch(rest)
			}
			continue
		}
		if err := h.timers.park.Park(ctx); err != nil {
			return nil
		}
	}
	return nil
}

// fireLanes are TimerConcurrency queues of firings, each drained in order
// by at most one task, started when the queue gets work and ended when it
// is empty: a world's timers go to one lane (by a hash of its id), so they
// fire in schedule order, and different worlds' fire side by side, so that
// a burst shares the store's group commits.
type fireLanes struct {
	h    *Host
	ctx  context.Context
	idle actor.Parker // a lane's task ended

	mu      sync.Mutex
	q       [][]*hostTimer
	running []bool
	active  int
}

func newFireLanes(h *Host, ctx context.Context) *fireLanes {
	n := h.cfg.TimerConcurrency
	return &fireLanes{h: h, ctx: ctx, idle: h.ex.NewParker(), q: make([][]*hostTimer, n), running: make([]bool, n)}
}

// dispatch queues due on the lanes, starting the task of each idle lane
// that got work.
func (f *fireLanes) dispatch(due []*hostTimer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range due {
		i := fireLane(e.l.world, len(f.q))
		f.q[i] = append(f.q[i], e)
		if !f.running[i] {
			f.running[i] = true
			f.active++
			f.h.ex.Go(func() { f.run(i) })
		}
	}
}

// fireLane is the lane, of n, that fires world's timers.
func fireLane(world string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(world))
	return int(h.Sum32() % uint32(n))
}

// run is lane i's task: it fires the lane's queue in order until it is
// empty or the context ends (which drops what is left: the next holder, or
// the timer worker, fires it).
func (f *fireLanes) run(i int) {
	for {
		f.mu.Lock()
		if len(f.q[i]) == 0 || f.ctx.Err() != nil {
			clear(f.q[i])
			f.q[i] = f.q[i][:0]
			f.running[i] = false
			f.active--
			f.mu.Unlock()
			f.idle.Unpark()
			return
		}
		e := f.q[i][0]
		f.q[i][0] = nil
		f.q[i] = f.q[i][1:]
		f.mu.Unlock()
		f.h.fireHeld(f.ctx, e)
	}
}

// wait returns once no lane's task runs.
func (f *fireLanes) wait() {
	seam.ParkUntil(f.idle, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.active == 0
	})
}

// fireHeld fires one timer of a held world, under an orrery.timer.fire
// span linked to the cycle that set it, as the timer worker's firings are.
func (h *Host) fireHeld(ctx context.Context, e *hostTimer) {
	actor.SpinUntil(h.ex, e.local) // taken up to the schedule's slack early
	l := e.l
	h.mu.Lock()
	held := h.leases[l.world] == l
	h.mu.Unlock()
	if !held || !h.alive(l) {
		return // dropped meanwhile: the world's next holder, or the timer worker, fires it
	}
	if e.hash == wakeKey(l.world) {
		h.hint(l)
		return
	}
	var links []trace.Link
	if h.cfg.Links != nil {
		links = otrace.Link(h.cfg.Links.Intent(e.hash))
	}
	sctx, sp := h.tr.Start(ctx, otrace.TimerFire, trace.WithNewRoot(), trace.WithTimestamp(h.ex.Now()),
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(otrace.World.String(l.world), otrace.IntentHash.String(e.hash),
			otrace.Worker.String(h.cfg.Worker)))
	res, err := h.st.FireHeld(sctx, l.world, l.epoch, e.hash)
	if err == nil {
		sp.SetAttributes(otrace.Seq.Int64(int64(res.Item.Seq)), otrace.Duplicate.Bool(res.Dup))
		// First thing once the firing is durable (the store's own hint
		// may be waking the world already): the world's process looks for
		// the item here, and its cycle for the span that wrote it.
		if !res.Dup {
			if h.cfg.Links != nil && sp.IsRecording() {
				h.cfg.Links.PutInbox(l.world, res.Item.Seq, sp.SpanContext())
			}
			h.offerFired(l, res.Item)
		}
	}
	now := h.ex.Now()
	otrace.End(sp, now, err)
	switch {
	case err == nil && !res.Dup:
		h.emit(HostEvent{Kind: EvTimerFired, World: l.world, Epoch: l.epoch, Dur: now.Add(e.skew).Sub(e.due), N: 1})
		h.hint(l)
	case err == nil:
		// Delivered already (the timer worker was first): its delivery
		// raised the world's hint.
	case errors.Is(err, store.ErrNotDue):
		// The skew estimate is off (the store's clock moved): come back
		// when the store says it is due, what is left measured on the
		// store's clock and waited out on the local one.
		h.timers.again(e, now.Add(e.skew).Add(max(res.DueAt.Sub(res.Now), time.Millisecond)))
	case errors.Is(err, store.ErrNotFound):
		// Cancelled by a commit that raced this firing: nothing to fire.
	case fencedErr(err):
		h.dropLease(l, EvFenced, err)
	case ctx.Err() != nil:
	default:
		e.tries++
		if e.tries >= hostTimerTries {
			h.log.Warn("host: timer firing failed; the timer worker fires it", "worker", h.cfg.Worker,
				"world", l.world, "intent", e.hash, "err", err, "failures", e.tries)
			return
		}
		h.timers.again(e, now.Add(e.skew).Add(hostTimerBackoff(e.tries)))
	}
}

// dueMax bounds the timers a world's process has been handed and not yet
// stepped: past it the host fires the rest through the inbox.
const dueMax = 256

// handDue hands each due timer of a world whose process runs to that
// process, to step at once (worldProc.cycle), and returns the others:
// wake-ups, and timers of passive, restarting or fenced worlds, for the
// firing lanes.
func (h *Host) handDue(due []*hostTimer) (rest []*hostTimer) {
	if _, known := h.timers.skewOf(); h.cfg.TimersThroughInbox || !known {
		return due
	}
	for _, e := range due {
		l := e.l
		h.mu.Lock()
		ref := l.ref
		ok := e.payload != nil && ref != nil && h.leases[l.world] == l && !l.restarting &&
			!l.hold.Fenced() && len(l.due) < dueMax
		if ok {
			l.due = append(l.due, e)
		}
		h.mu.Unlock()
		if !ok {
			rest = append(rest, e)
			continue
		}
		if err := ref.TrySend(wmsg{}); err != nil && !errors.Is(err, actor.ErrMailboxFull) {
			// The process is gone: unless its successor took the timer
			// already, it is fired through the inbox.
			if h.untakeDue(l, e) {
				rest = append(rest, e)
			}
		}
	}
	return rest
}

// untakeDue removes e from l's handed timers, reporting whether it was
// still there.
func (h *Host) untakeDue(l *lease, e *hostTimer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(l.due, e); i >= 0 {
		l.due = slices.Delete(l.due, i, i+1)
		return true
	}
	return false
}

// putDue gives back to l's process timers it took and did not step, ahead
// of any handed over since.
func (h *Host) putDue(l *lease, es []*hostTimer) {
	if len(es) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	l.due = append(slices.Clip(es), l.due...)
}

// takeDue returns and forgets the timers handed to l's process.
func (h *Host) takeDue(l *lease) []*hostTimer {
	h.mu.Lock()
	defer h.mu.Unlock()
	due := l.due
	l.due = nil
	return due
}

// heldFiredMax bounds the firings a world keeps for its process to take
// without reading them: a world that lags further reads its inbox, as it
// would anyway.
const heldFiredMax = 8

// offerFired hands a firing the host just wrote to l's process, which
// steps it without reading its inbox when it is the next item.
func (h *Host) offerFired(l *lease, it store.InboxItem) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(l.fired) < heldFiredMax {
		l.fired = append(l.fired, it)
	}
}

// takeFired returns the firing at cursor+1 if the host handed it over
// (see offerFired), forgetting the ones at or below cursor.
func (h *Host) takeFired(l *lease, cursor uint64) (store.InboxItem, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keep := l.fired[:0]
	var out store.InboxItem
	found := false
	for _, it := range l.fired {
		switch {
		case it.Seq == cursor+1:
			out, found = it, true
		case it.Seq > cursor:
			keep = append(keep, it)
		}
	}
	clear(l.fired[len(keep):])
	l.fired = keep
	return out, found
}
