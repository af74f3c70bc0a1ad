package lab

import (
	"context"
	"sync"
	"time"
)

// WithDeadline is the lab's deadline context (actor.WithDeadline and
// actor.WithTimeout use it): a context that behaves like the standard
// library's on the virtual clock. It has a Deadline; when the deadline
// passes its Err and Cause are context.DeadlineExceeded; and contexts
// derived from it, with the standard library's functions too, see the same.
//
// What the standard library does with goroutines, this does at
// deterministic points instead. Its own deadline and cancel function take
// effect at once, in the timer callback or the turn that calls them, and
// they reach derived contexts at the same moment, through AfterFunc. A
// cancellation of its parent reaches it as soon as anything reads it, and
// the scheduler reads every live one between turns. A derived context that
// nobody reads learns of it there, before the next turn.
func (e *Executor) WithDeadline(parent context.Context, at time.Time) (context.Context, context.CancelFunc) {
	if cur, ok := parent.Deadline(); ok && cur.Before(at) {
		at = cur // the parent ends first
	}
	inner, cancelInner := context.WithCancelCause(parent)
	c := &deadlineCtx{inner: inner, cancelInner: cancelInner, parent: parent, deadline: at, done: make(chan struct{})}
	e.mu.Lock()
	d := at.Sub(Epoch().Add(e.now))
	c.timer = e.addTimerLocked(d, func() { c.finish(context.DeadlineExceeded, false) }, "timer")
	if parent.Done() != nil {
		e.ctxs = append(e.ctxs, c)
	}
	e.mu.Unlock()
	c.refresh()
	return c, func() { c.finish(context.Canceled, true) }
}

// deadlineCtx is the lab's deadline context. inner is the standard
// library's child of parent: it hears the parent's cancellation at once,
// and it carries the cause, which context.Cause finds through Value.
// deadlineCtx has a Done channel of its own, so the standard library
// registers contexts derived from it through AfterFunc rather than on
// inner, and they get its Err (DeadlineExceeded) rather than inner's
// (Canceled).
type deadlineCtx struct {
	inner       context.Context
	cancelInner context.CancelCauseFunc
	parent      context.Context
	deadline    time.Time
	timer       *timer

	mu     sync.Mutex
	done   chan struct{}
	err    error
	afters []*ctxAfter // registered by derived contexts, in order
}

type ctxAfter struct{ f func() }

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Done() <-chan struct{} {
	c.refresh()
	return c.done
}

func (c *deadlineCtx) Err() error {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *deadlineCtx) Value(key any) any { return c.inner.Value(key) }

// AfterFunc is how the standard library attaches a context derived from
// this one: f runs, synchronously, when this context ends.
func (c *deadlineCtx) AfterFunc(f func()) (stop func() bool) {
	a := &ctxAfter{f: f}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		// Already done: the standard library checks Done before it calls
		// AfterFunc, so this only happens in a race it tolerates itself.
		go f()
		return func() bool { return false }
	}
	c.afters = append(c.afters, a)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.afters {
			if x == a {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// refresh takes in a cancellation of the parent that has reached inner.
func (c *deadlineCtx) refresh() {
	c.mu.Lock()
	pending := c.err == nil
	c.mu.Unlock()
	if pending && c.inner.Err() != nil {
		err := c.parent.Err()
		if err == nil {
			err = context.Canceled
		}
		// Possibly under the executor's lock (Park and the scheduler read
		// Err), so the timer is left to fire into a finished context, as
		// it would be until the caller's cancel.
		c.finish(err, false)
	}
}

// finish ends the context with err (first caller wins), then tells the
// contexts derived from it, in the order they were derived. stopTimer is
// false where the executor's lock may be held.
func (c *deadlineCtx) finish(err error, stopTimer bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	afters := c.afters
	c.afters = nil
	c.mu.Unlock()
	c.cancelInner(err) // the cause; a no-op if the parent got there first
	if stopTimer {
		c.timer.Stop()
	}
	for _, a := range afters {
		a.f()
	}
}

func (c *deadlineCtx) ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// refreshContexts lets every live deadline context take in its parent's
// cancellation, in creation order, between turns, and forgets the ended ones.
func (e *Executor) refreshContexts() {
	e.mu.Lock()
	live := e.ctxs
	e.mu.Unlock()
	if len(live) == 0 {
		return
	}
	for _, c := range live {
		c.refresh()
	}
	e.mu.Lock()
	keep := e.ctxs[:0]
	for _, c := range e.ctxs {
		if !c.ended() {
			keep = append(keep, c)
		}
	}
	clear(e.ctxs[len(keep):])
	e.ctxs = keep
	e.mu.Unlock()
}
