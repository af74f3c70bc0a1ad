package lab

import (
	"container/heap"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// EpochUnixNano is the lab's time zero, 2000-01-01T00:00:00Z, in Unix
// nanoseconds. It is a constant: every fingerprint depends on it, so no
// code may change it.
const EpochUnixNano int64 = 946684800_000_000_000

// Epoch returns the lab's time zero: virtual time is Epoch() plus the time
// elapsed in the run, the same for every run.
func Epoch() time.Time { return time.Unix(0, EpochUnixNano).UTC() }

// Executor is the deterministic implementation of actor.Executor.
//
// Every goroutine the actor layer starts (Executor.Go) is a lab thread that
// runs only while it holds the turn. Exactly one thread runs at a time; a
// thread gives the turn back when it parks (receive, reserve, call wait,
// sleep) or exits, and the scheduler hands it to the next runnable thread,
// picked by a PRNG seeded from the run's seed among the runnable threads
// sorted by id. Nothing else decides the interleaving, so the same seed
// gives the same schedule whatever GOMAXPROCS or the map hash seed is.
//
// Time is virtual: it stands still while any thread is runnable and jumps to
// the next timer when none is. Timers due at the same instant fire in the
// order they were set. Timer callbacks run on the scheduler, between turns.
//
// Code under the lab must block only through the seam: a thread blocked on
// a raw channel or a context.WithTimeout from the standard library is
// invisible to the scheduler (use actor.Sleep and actor.WithTimeout).
type Executor struct {
	mu sync.Mutex

	schedRNG, userRNG, faultRNG splitmix

	now       time.Duration
	nextID    uint64
	runnable  []*thread // sorted by id
	ctxParked []*thread // parked with a cancellable context, sorted by id
	current   *thread
	timers    timerHeap
	timerSeq  uint64
	steps     int
	yield     chan struct{}
	faults    Faults
	record    func(Event) // the run's trace (timer and fault events)
	watchdog  time.Duration
	dog       *time.Timer    // the watchdog, reused from turn to turn
	ctxs      []*deadlineCtx // live deadline contexts with a cancellable parent, in creation order
}

type thread struct {
	id       uint64
	turn     chan struct{}
	parkedOn *parker
	ctx      context.Context
	queued   bool // in runnable
	done     bool
}

type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a number in [0, n) (n > 0), without modulo bias mattering
// for scheduling purposes.
func (r *splitmix) intn(n int) int { return int(r.next() % uint64(n)) }

func newExecutor(seed uint64, faults Faults, record func(Event)) *Executor {
	e := &Executor{
		yield:    make(chan struct{}),
		faults:   faults,
		record:   record,
		watchdog: 30 * time.Second,
	}
	// Three independent streams, so that drawing a random number in a
	// handler or a fault decision never shifts the schedule, and vice versa.
	e.schedRNG.s = seed
	e.userRNG.s = seed ^ 0x5bd1e9955bd1e995
	e.faultRNG.s = seed ^ 0xc2b2ae3d27d4eb4f
	return e
}

// Deterministic marks the lab executor for the actor layer.
func (e *Executor) Deterministic() bool { return true }

// Now returns the virtual clock.
func (e *Executor) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Epoch().Add(e.now)
}

// Elapsed returns the virtual time elapsed in the run.
func (e *Executor) Elapsed() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Steps returns the number of turns scheduled so far.
func (e *Executor) Steps() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.steps
}

// Uint64 draws from the run's seeded user stream.
func (e *Executor) Uint64() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.userRNG.next()
}

// Go starts f as a lab thread; it first runs when the scheduler picks it.
func (e *Executor) Go(f func()) {
	e.mu.Lock()
	e.nextID++
	t := &thread{id: e.nextID, turn: make(chan struct{}, 1)}
	e.enqueueLocked(t)
	e.mu.Unlock()
	go func() {
		<-t.turn
		defer e.exit(t)
		f()
	}()
}

func (e *Executor) exit(t *thread) {
	e.mu.Lock()
	t.done = true
	e.current = nil
	e.mu.Unlock()
	e.yield <- struct{}{}
}

func (e *Executor) enqueueLocked(t *thread) {
	if t.queued || t.done {
		return
	}
	t.queued = true
	i := sort.Search(len(e.runnable), func(i int) bool { return e.runnable[i].id > t.id })
	e.runnable = append(e.runnable, nil)
	copy(e.runnable[i+1:], e.runnable[i:])
	e.runnable[i] = t
}

// NewParker returns a lab parker.
func (e *Executor) NewParker() actor.Parker { return &parker{e: e} }

type parker struct {
	e      *Executor
	permit bool
	waiter *thread
}

// Park gives the turn back until Unpark (or ctx ends). It must be called
// from a lab thread.
func (p *parker) Park(ctx context.Context) error {
	e := p.e
	e.mu.Lock()
	if p.permit {
		p.permit = false
		e.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		e.mu.Unlock()
		return err
	}
	t := e.current
	if t == nil {
		e.mu.Unlock()
		panic("lab: Park called outside a lab thread (a goroutine not started through the executor, or a timer callback)")
	}
	p.waiter = t
	t.parkedOn = p
	if ctx.Done() != nil {
		t.ctx = ctx
		e.addCtxParkedLocked(t)
	}
	e.current = nil
	e.mu.Unlock()

	e.yield <- struct{}{}
	<-t.turn

	e.mu.Lock()
	defer e.mu.Unlock()
	t.parkedOn = nil
	if t.ctx != nil {
		e.removeCtxParkedLocked(t)
		t.ctx = nil
	}
	if p.permit {
		p.permit = false
		return nil
	}
	p.waiter = nil
	return ctx.Err()
}

// Unpark makes the permit available and the waiter, if any, runnable.
func (p *parker) Unpark() {
	e := p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	p.permit = true
	w := p.waiter
	if w == nil {
		return
	}
	p.waiter = nil
	if e.faults.DelayWakeups > 0 && e.faultRNG.next()%1000 < uint64(e.faults.DelayWakeups*1000) {
		// A delayed wake-up: the message is there, the receiver hears of it
		// later (virtual milliseconds).
		d := time.Duration(1+e.faultRNG.intn(10)) * time.Millisecond
		e.emitLocked(Event{Kind: "fault", Detail: fmt.Sprintf("delay-wakeup %v", d)})
		e.addTimerLocked(d, func() {
			e.mu.Lock()
			e.enqueueLocked(w)
			e.mu.Unlock()
		}, "")
		return
	}
	e.enqueueLocked(w)
}

func (e *Executor) addCtxParkedLocked(t *thread) {
	i := sort.Search(len(e.ctxParked), func(i int) bool { return e.ctxParked[i].id > t.id })
	e.ctxParked = append(e.ctxParked, nil)
	copy(e.ctxParked[i+1:], e.ctxParked[i:])
	e.ctxParked[i] = t
}

func (e *Executor) removeCtxParkedLocked(t *thread) {
	for i, x := range e.ctxParked {
		if x == t {
			e.ctxParked = append(e.ctxParked[:i], e.ctxParked[i+1:]...)
			return
		}
	}
}

// pollContextsLocked makes runnable every parked thread whose context has
// ended. Cancellation happens inside a turn or a timer callback, so polling
// between turns observes it at a deterministic point.
func (e *Executor) pollContextsLocked() {
	for _, t := range e.ctxParked {
		if !t.queued && t.ctx.Err() != nil {
			e.enqueueLocked(t)
		}
	}
}

// ---- timers ----

type timer struct {
	e     *Executor
	at    time.Duration
	seq   uint64
	id    uint64
	f     func()
	index int // in the heap; -1 when not pending
	label string
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// AfterFunc schedules f after d of virtual time.
func (e *Executor) AfterFunc(d time.Duration, f func()) actor.Timer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addTimerLocked(d, f, "timer")
}

func (e *Executor) addTimerLocked(d time.Duration, f func(), label string) *timer {
	if d < 0 {
		d = 0
	}
	e.timerSeq++
	t := &timer{e: e, at: e.now + d, seq: e.timerSeq, id: e.timerSeq, f: f, label: label}
	heap.Push(&e.timers, t)
	if label != "" {
		e.emitLocked(Event{Kind: "timer-set", Seq: t.id, Detail: fmt.Sprintf("after %v", d)})
	}
	return t
}

// Stop cancels a pending timer.
func (t *timer) Stop() bool {
	e := t.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&e.timers, t.index)
	if t.label != "" {
		e.emitLocked(Event{Kind: "timer-stop", Seq: t.id})
	}
	return true
}

// Reset re-arms the timer d from now.
func (t *timer) Reset(d time.Duration) bool {
	e := t.e
	e.mu.Lock()
	defer e.mu.Unlock()
	pending := t.index >= 0
	if pending {
		heap.Remove(&e.timers, t.index)
	}
	if d < 0 {
		d = 0
	}
	e.timerSeq++
	t.at, t.seq = e.now+d, e.timerSeq
	heap.Push(&e.timers, t)
	if t.label != "" {
		e.emitLocked(Event{Kind: "timer-set", Seq: t.id, Detail: fmt.Sprintf("after %v", d)})
	}
	return pending
}

// ---- faults ----

// Fault answers the actor layer's fault points from the seeded fault stream.
func (e *Executor) Fault(point actor.FaultPoint, pid uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	var p float64
	switch point {
	case actor.FaultCrash:
		p = e.faults.Crash
	case actor.FaultMailboxFull:
		p = e.faults.MailboxFull
	}
	return p > 0 && e.faultRNG.next()%1000 < uint64(p*1000)
}

// Buggify reports whether to inject a fault at a named site (BUGGIFY): the
// durable plane asks it before store calls (fail the call) and between two
// store calls (crash there). The answer comes from the seeded fault stream
// and is recorded in the trace.
func (e *Executor) Buggify(site string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.faults.Buggify <= 0 || e.faultRNG.next()%1000 >= uint64(e.faults.Buggify*1000) {
		return false
	}
	e.emitLocked(Event{Kind: "fault", Detail: "buggify " + site})
	return true
}

func (e *Executor) emitLocked(ev Event) {
	if e.record != nil {
		ev.At = e.now
		e.record(ev)
	}
}

// ---- the scheduler ----

// run schedules threads until none is runnable and no timer is pending, or
// maxSteps turns have run. It reports false if it stopped on the budget.
func (e *Executor) run(maxSteps int) bool {
	for {
		e.refreshContexts()
		e.mu.Lock()
		e.pollContextsLocked()
		if len(e.runnable) == 0 {
			if e.timers.Len() == 0 {
				e.mu.Unlock()
				return true
			}
			t := heap.Pop(&e.timers).(*timer)
			if t.at > e.now {
				e.now = t.at
			}
			if t.label != "" {
				e.emitLocked(Event{Kind: "timer-fire", Seq: t.id})
			}
			e.mu.Unlock()
			t.f()
			continue
		}
		if maxSteps > 0 && e.steps >= maxSteps {
			e.mu.Unlock()
			return false
		}
		i := e.schedRNG.intn(len(e.runnable))
		t := e.runnable[i]
		e.runnable = append(e.runnable[:i], e.runnable[i+1:]...)
		t.queued = false
		e.current = t
		e.steps++
		e.mu.Unlock()

		t.turn <- struct{}{}
		e.awaitYield(t)
	}
}

// awaitYield waits for the running thread to park or exit. A thread that
// never does is blocked outside the seam; after the watchdog (real time) the
// lab panics with what it knows rather than hang the test binary.
func (e *Executor) awaitYield(t *thread) {
	// One watchdog timer for the whole run: since Go 1.23 Reset needs no
	// draining, and a timer per turn would dominate the cost of a turn.
	if e.dog == nil {
		e.dog = time.NewTimer(e.watchdog)
	} else {
		e.dog.Reset(e.watchdog)
	}
	select {
	case <-e.yield:
		e.dog.Stop()
	case <-e.dog.C:
		panic(fmt.Sprintf("lab: thread %d ran for %v (real time) without reaching a blocking point of the seam: it is blocked outside the executor (a raw channel, a mutex held across a park, or a standard-library timer)", t.id, e.watchdog))
	}
}

// parked lists the threads parked with a cancellable context (the ones the
// scheduler tracks by id); it names suspects in a deadlock report.
func (e *Executor) parked() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []uint64
	for _, t := range e.ctxParked {
		ids = append(ids, t.id)
	}
	return ids
}
