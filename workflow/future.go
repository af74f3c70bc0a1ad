package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Future is the result of a branch of a run (Go, or one of the *Async
// step calls), ready once the branch ended. Get waits for it; Select waits
// for the first of several. Both are durable in the way the steps below
// them are: a re-run of the function gets the same values, and Select the
// same choice, from the journal.
type Future[T any] struct {
	co  *coro
	v   T
	err error
}

// Selectable is what Select waits on: any *Future.
type Selectable interface {
	branch() *coro
}

func (f *Future[T]) branch() *coro { return f.co }

// Ready reports whether the future's branch has ended, so that Get
// returns at once. It answers the same on every re-run at the same point.
func (f *Future[T]) Ready() bool { return f != nil && f.co != nil && f.co.done }

// Get waits for the future's branch to end and returns its result. It is
// called on the Ctx of the coroutine that waits (the function's, or a
// branch's own).
func (f *Future[T]) Get(c *Ctx) (T, error) {
	var zero T
	if f == nil || f.co == nil {
		return zero, errorf("future", ErrInvalid, "", detail("a nil future"))
	}
	if err := c.exclusive("future", "get"); err != nil {
		return zero, err
	}
	if !f.co.done {
		if err := c.r.waitFor(c, f.co); err != nil {
			return zero, c.halt(err)
		}
	}
	return f.v, f.err
}

// Go starts fn as a branch of the run and returns its future at once.
// The branch runs on a Ctx of its own, which it must use for its steps
// (never the caller's); branches run one at a time (each gives way to the
// others whenever it waits), so they need no locks, and their steps run
// concurrently: a plain step's function runs while the others go on, and
// their durable waits (sleeps, signals, effects, children) overlap. Go
// runs fn until its first wait before it returns, so the steps it asks
// for first take their positions in the run right away, the same on
// every re-run.
//
// A branch still running when the run's function returns is stopped:
// nothing it asks for afterwards is recorded, and its children are
// treated by their parent-close policy.
func Go[T any](c *Ctx, fn func(c *Ctx) (T, error)) *Future[T] {
	f := &Future[T]{}
	if err := c.exclusive("go", "branch"); err != nil {
		f.err = err
		f.co = &coro{done: true}
		return f
	}
	if fn == nil {
		f.err = errorf("go", ErrInvalid, "", detail("a nil branch function"))
		f.co = &coro{done: true}
		return f
	}
	f.co = c.spawn(func(bc *Ctx) {
		defer func() {
			if p := recover(); p != nil {
				var zero T
				f.v, f.err = zero, fmt.Errorf("workflow: a branch panicked: %v", p)
			}
		}()
		f.v, f.err = fn(bc)
	})
	return f
}

// Select waits until one of fs is ready and returns its index: the one
// whose branch ended first, in the run's order (on a re-run, the one the
// first run chose). Futures ready already count as having ended before
// any that is not; among them the earliest to end wins.
func Select(c *Ctx, fs ...Selectable) (int, error) {
	if err := c.exclusive("select", "select"); err != nil {
		return -1, err
	}
	if len(fs) == 0 {
		return -1, errorf("select", ErrInvalid, "", detail("nothing to select from"))
	}
	cos := make([]*coro, len(fs))
	for i, f := range fs {
		if f == nil || f.branch() == nil {
			return -1, errorf("select", ErrInvalid, "", detail("a nil future"))
		}
		cos[i] = f.branch()
	}
	if first(cos) < 0 {
		if err := c.r.waitFor(c, cos...); err != nil {
			return -1, c.halt(err)
		}
	}
	return first(cos), nil
}

// first is the index of the coroutine among cos that ended first, or -1.
// A coroutine that never ran (a refused Go) counts as ended at once.
func first(cos []*coro) int {
	best := -1
	for i, co := range cos {
		if co.done && (best < 0 || co.finished < cos[best].finished) {
			best = i
		}
	}
	return best
}

// StepAsync is Step as a branch: fn runs while the function goes on.
func StepAsync[T any](c *Ctx, name string, fn func(ctx context.Context) (T, error), opts ...StepOption) *Future[T] {
	return Go(c, func(bc *Ctx) (T, error) { return Step(bc, name, fn, opts...) })
}

// EffectAsync is Effect as a branch.
func EffectAsync[T any](c *Ctx, name, kind string, params any, opts ...StepOption) *Future[T] {
	return Go(c, func(bc *Ctx) (T, error) { return Effect[T](bc, name, kind, params, opts...) })
}

// NewTimer is Sleep as a branch: a durable timer whose future is ready
// once d has passed.
func NewTimer(c *Ctx, d time.Duration) *Future[struct{}] {
	return Go(c, func(bc *Ctx) (struct{}, error) { return struct{}{}, Sleep(bc, d) })
}

// AwaitAsync is Await as a branch. It consumes the next signal of the
// name once it arrives, whether or not its future is ever read: to wait
// for a signal with a deadline, use AwaitWithTimeout, which consumes none
// when the deadline comes first.
func AwaitAsync[T any](c *Ctx, name string) *Future[T] {
	return Go(c, func(bc *Ctx) (T, error) { return Await[T](bc, name) })
}

// ChildAsync is Child as a branch: the child runs while the function goes
// on, so children started one after the other run side by side.
func ChildAsync[In, Out any](c *Ctx, def *Def[In, Out], childID string, in In, opts ...ChildOption) *Future[Out] {
	return Go(c, func(bc *Ctx) (Out, error) { return Child(bc, def, childID, in, opts...) })
}

// Detached returns a view of c whose steps run even after the run was
// cancelled: compensation (a refund, a release) goes on it, as on
// Temporal's disconnected context. It shares c's steps and positions; use
// it on c's own goroutine.
func Detached(c *Ctx) *Ctx {
	if c == nil {
		return nil
	}
	d := *c
	d.detached = true
	return &d
}

// Cancelled is what a step returns once the run's cancel was told to the
// function: it matches ErrCancelled (and ErrStopped, which older code
// checks). Every step asked for on a Ctx that is not Detached returns it
// from then on. A function that returns an error matching ErrCancelled
// ends its run cancelled; one that returns nil, or another error, ends it
// completed or failed as usual.
type Cancelled struct {
	Run    string
	Reason string
}

func (e *Cancelled) Error() string {
	msg := "workflow: run " + e.Run + " cancelled"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is matches ErrCancelled and ErrStopped.
func (e *Cancelled) Is(target error) bool { return target == ErrCancelled || target == ErrStopped }

func isCancellation(err error) bool {
	var c *Cancelled
	return errors.As(err, &c)
}

// ParentClose is what happens to a child run that has not ended when its
// parent ends.
type ParentClose string

const (
	// ParentCloseCancel asks the child to cancel (the default): it is told
	// as any cancelled run is, and may compensate.
	ParentCloseCancel ParentClose = "cancel"
	// ParentCloseAbandon leaves the child running on its own.
	ParentCloseAbandon ParentClose = "abandon"
	// ParentCloseWait makes the parent's end wait for the child's.
	ParentCloseWait ParentClose = "wait"
)

func parentClose(s string) ParentClose {
	switch ParentClose(s) {
	case ParentCloseAbandon, ParentCloseWait:
		return ParentClose(s)
	}
	return ParentCloseCancel
}

// ChildOption configures a child run.
type ChildOption func(*childOptions)

type childOptions struct {
	parentClose ParentClose
}

// WithParentClose sets the child's parent-close policy.
func WithParentClose(p ParentClose) ChildOption {
	return func(o *childOptions) { o.parentClose = p }
}

func applyChildOptions(opts []ChildOption) (childOptions, error) {
	o := childOptions{parentClose: ParentCloseCancel}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	switch o.parentClose {
	case ParentCloseCancel, ParentCloseAbandon, ParentCloseWait:
		return o, nil
	}
	return o, errorf("child", ErrInvalid, "", detail("unknown parent-close policy "+string(o.parentClose)))
}

// AwaitWithTimeout waits for the signal name as Await does, for at most
// d: ok is false when d passed first (judged by a durable timer on the
// store's clock, as Sleep's), and then no signal is consumed: one that
// arrives later is left for the next Await. Which came first is the
// run's inbox order, recorded, so a re-run gets the same answer.
func AwaitWithTimeout[T any](c *Ctx, name string, d time.Duration) (v T, ok bool, err error) {
	var zero T
	if err := checkName("await", name); err != nil {
		return zero, false, err
	}
	if err := checkSpan(c, "await", "the timeout", d); err != nil {
		return zero, false, err
	}
	id, h, err := c.begin(kindSignal, awaitBase+name)
	if err != nil {
		return zero, false, err
	}
	if h != nil && h.completed != nil {
		if h.completed.TimedOut {
			return zero, false, nil
		}
		v, err := decodeAs[T](c, id, h.completed.Value, false)
		return v, err == nil, err
	}
	r := c.r
	p := stepStarted{Kind: kindSignal, Signal: name}
	att, start := waitAttempt(h)
	if !start {
		p = h.last
	} else {
		now, err := r.st.Now(c.ctx)
		if err != nil {
			return zero, false, c.halt(r.failed(c.ctx, "await", err))
		}
		p.DeliverAt, p.Timer = unixNano(now.Add(max(d, 0))), attemptTimer(r.id, id, att)
		if err := r.event(c.ctx, event.StepStarted, id, att, p); err != nil {
			return zero, false, c.halt(err)
		}
	}
	c.co.inflight = c.attempt(id, att)
	if p.Timer != "" {
		payload, err := event.Marshal(timerPayload{Run: r.id, Step: id})
		if err != nil {
			return zero, false, c.halt(r.failed(c.ctx, "await", err))
		}
		if err := r.writable(c.ctx); err != nil {
			return zero, false, c.halt(err)
		}
		if err := r.st.Schedule(c.ctx, r.id, r.epoch, p.Timer, fromUnixNano(p.DeliverAt), payload); err != nil {
			return zero, false, c.halt(r.failed(c.ctx, "await", err))
		}
	}
	key := store.TimerKey(p.Timer)
	var got *item
	if _, err := r.wait(c, time.Time{}, func() (bool, error) {
		// The first in inbox order of the signal and the timer's firing.
		for i := range r.items {
			it := &r.items[i]
			switch {
			case it.signal != nil && it.signal.Name == name && !r.h.consumed[it.seq]:
				got = it
				return true, nil
			case p.Timer != "" && it.kind == vocab.KindTimer && !r.h.consumed[it.seq] &&
				(it.dedupe == key || att == 1 && it.timer != nil && it.timer.Run == r.id && it.timer.Step == id):
				got = it
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return zero, false, err
	}
	if got.signal == nil {
		if err := c.settle(event.StepCompleted, id, att, stepCompleted{Value: cborNull(), Seq: got.seq, TimedOut: true}); err != nil {
			return zero, false, err
		}
		return zero, false, nil
	}
	if err := c.settle(event.StepCompleted, id, att, stepCompleted{Value: got.signal.Value, Seq: got.seq}); err != nil {
		return zero, false, err
	}
	v, err = decodeAs[T](c, id, got.signal.Value, false)
	return v, err == nil, err
}
