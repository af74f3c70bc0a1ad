package actor

import (
	"context"
	"sync/atomic"
	"time"
)

// Executor is the seam between the actor layer and the machine. Every clock
// read, timer, random number, goroutine start and blocking point of actor/,
// supervisor/ and registry/ goes through it, so that the lab can replace it
// with a deterministic implementation (virtual time, seeded scheduling).
//
// The production implementation, [NewExecutor], uses goroutines and real time.
// Under testing/synctest the production executor runs on the bubble's fake
// clock, which is how time-dependent tests of this layer run in virtual time.
type Executor interface {
	// Now returns the current time of this executor's clock.
	Now() time.Time
	// AfterFunc runs f in its own goroutine once d has elapsed on this
	// executor's clock, unless the returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
	// Go starts f concurrently. Every process goroutine is started here.
	Go(f func())
	// NewParker returns a fresh one-slot wake-up primitive. Every blocking
	// point of the layer (receive, reserve, call wait, sleep) parks on one.
	NewParker() Parker
	// Uint64 returns a random number from this executor's (seedable) source.
	Uint64() uint64
}

// Deterministic is implemented by executors whose schedule is reproducible
// (the lab). The actor layer then never lets the garbage collector act on its
// state: leak detection by GC cleanups (dropped permits and reply
// obligations) runs at collection time, which no seed controls, so under a
// deterministic executor leaks are found by the lab's oracles instead.
type Deterministic interface {
	Deterministic() bool
}

// FaultPoint names a place where an executor may inject a fault.
type FaultPoint uint8

const (
	// FaultCrash makes a handler panic before it runs (an injected crash).
	FaultCrash FaultPoint = iota + 1
	// FaultMailboxFull makes a TrySend or TryCast report a full mailbox
	// (backpressure), without enqueueing.
	FaultMailboxFull
)

func (f FaultPoint) String() string {
	switch f {
	case FaultCrash:
		return "crash"
	case FaultMailboxFull:
		return "mailbox-full"
	}
	return "fault"
}

// FaultInjector is implemented by executors that inject faults (the lab's
// BUGGIFY). The actor layer asks it at each fault point; the answer must be
// drawn from the executor's seed so a run is reproducible.
type FaultInjector interface {
	Fault(point FaultPoint, pid uint64) bool
}

// ErrInjectedCrash is the panic value of a crash injected at FaultCrash.
const ErrInjectedCrash sentinel = "actor: injected crash"

func isDeterministic(ex Executor) bool {
	d, ok := ex.(Deterministic)
	return ok && d.Deterministic()
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the timer from firing. It reports whether it did so.
	Stop() bool
	// Reset re-arms the timer to fire after d (with the same function),
	// reporting whether it was still pending.
	Reset(d time.Duration) bool
}

// TimerSlack is how early a timer whose deadline matters to the
// microsecond should be armed on ex, the rest waited out with SpinUntil:
// the production executor's timers fire up to a millisecond late in an
// idle process (the runtime's poller sleeps in milliseconds), so its slack
// is a millisecond. Other executors have none (the lab's virtual clock is
// exact).
func TimerSlack(ex Executor) time.Duration {
	if s, ok := ex.(interface{ timerSlack() time.Duration }); ok {
		return s.timerSlack()
	}
	return 0
}

// SpinUntil returns once ex's clock reaches t, yielding the processor
// meanwhile: it is for the last TimerSlack before a deadline, never for a
// longer wait. On an executor without slack it returns at once (its timers
// are never early, so nothing is left to wait out).
func SpinUntil(ex Executor, t time.Time) {
	if s, ok := ex.(interface{ spinUntil(time.Time) }); ok {
		s.spinUntil(t)
	}
}

// Parker is a binary semaphore with one waiter: Unpark makes one permit
// available (permits do not accumulate beyond one) and Park consumes it,
// blocking until one is available or ctx is done.
type Parker interface {
	Park(ctx context.Context) error
	Unpark()
}

// Sleep blocks for d on the executor's clock, or until ctx is done.
func Sleep(ctx context.Context, ex Executor, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	p := ex.NewParker()
	t := ex.AfterFunc(d, p.Unpark)
	if err := p.Park(ctx); err != nil {
		t.Stop()
		return err
	}
	return nil
}

// ParkFor parks p until it is unparked, d has passed on the executor's
// clock, or ctx is done (ctx's error); with d <= 0 it returns nil at once
// and leaves a pending permit for the next Park. It is the wait of a loop
// that sleeps until its next deadline but wakes early on a hint.
func ParkFor(ctx context.Context, ex Executor, p Parker, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := ex.AfterFunc(d, p.Unpark)
	err := p.Park(ctx)
	t.Stop()
	return err
}

// WithTimeout is context.WithTimeout on the executor's clock: the returned
// context has a Deadline, and once d has elapsed its Err is
// context.DeadlineExceeded. Use it instead of context.WithTimeout wherever
// the lab must control time.
func WithTimeout(parent context.Context, ex Executor, d time.Duration) (context.Context, context.CancelFunc) {
	return WithDeadline(parent, ex, ex.Now().Add(d))
}

// WithDeadline is context.WithDeadline on the executor's clock (see
// WithTimeout).
//
// Under the production executor it is the standard library's context, so
// every context derived from it behaves exactly as the standard library's.
// An executor with its own clock provides its own (DeadlineProvider): the
// lab's behaves the same, derived contexts included. Under any other
// executor the context itself reports its Deadline and DeadlineExceeded,
// and so does every context derived from it through WithTimeout,
// WithDeadline or context.WithValue, but a context derived with
// context.WithCancel reports context.Canceled (with context.Cause
// DeadlineExceeded).
func WithDeadline(parent context.Context, ex Executor, at time.Time) (context.Context, context.CancelFunc) {
	if r, ok := ex.(*realExecutor); ok {
		return r.withDeadline(parent, at)
	}
	if d, ok := ex.(DeadlineProvider); ok {
		return d.WithDeadline(parent, at)
	}
	if cur, ok := parent.Deadline(); ok && cur.Before(at) {
		at = cur // the parent ends first; Deadline reports the earlier one
	}
	ctx, cancel := context.WithCancelCause(parent)
	c := &deadlineCtx{Context: ctx, parent: parent, deadline: at}
	t := ex.AfterFunc(at.Sub(ex.Now()), func() {
		c.fired.Store(true)
		cancel(context.DeadlineExceeded)
	})
	return c, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// DeadlineProvider is implemented by executors whose clock the standard
// library does not read, and which can make deadline contexts on it that
// behave like the standard library's for every context derived from them
// (the lab does). WithDeadline and WithTimeout use it.
type DeadlineProvider interface {
	WithDeadline(parent context.Context, at time.Time) (context.Context, context.CancelFunc)
}

// deadlineCtx is a deadline on a clock the standard library does not read,
// for executors that are not DeadlineProviders.
// Its own timer sets fired before it cancels, so Err tells the deadline
// from a cancellation without depending on the cause the parent passed down.
type deadlineCtx struct {
	context.Context // the cancellation; Done and Value come from it
	parent          context.Context
	deadline        time.Time
	fired           atomic.Bool
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Err() error {
	if c.Context.Err() == nil {
		return nil
	}
	if c.fired.Load() && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	if err := c.parent.Err(); err != nil {
		return err // the parent's own reason, DeadlineExceeded included
	}
	return context.Canceled
}

// idSource hands out process, monitor and scope identifiers. Identifiers are
// per System, never global, and increase monotonically: they are the stable
// tie-break keys for deterministic ordering.
type idSource struct{ n atomic.Uint64 }

func (s *idSource) next() uint64 { return s.n.Add(1) }
