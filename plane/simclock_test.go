package plane_test

import (
	"context"
	"time"

	"github.com/orrery-run/orrery/lab"
)

// skewExecutor is the lab's executor seen from a node whose clock is off
// by off: its Now and its deadlines are the lab's shifted by off, while
// durations, scheduling and randomness are the lab's own, so the run stays
// deterministic. A node that compared one of its instants with another
// node's (or the store's) would be off by the difference.
type skewExecutor struct {
	*lab.Executor
	off time.Duration
}

func (e skewExecutor) Now() time.Time { return e.Executor.Now().Add(e.off) }

// WithDeadline takes a deadline on this node's clock. The lab measures it
// on its own, so the parent's deadline (on this node's clock too) is
// brought to the lab's for the comparison, and the result reports its
// deadline on this node's clock again.
func (e skewExecutor) WithDeadline(parent context.Context, at time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := e.Executor.WithDeadline(skewCtx{parent, -e.off}, at.Add(-e.off))
	return skewCtx{ctx, e.off}, cancel
}

// skewCtx reports its context's deadline shifted by off.
type skewCtx struct {
	context.Context
	off time.Duration
}

func (c skewCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if ok {
		d = d.Add(c.off)
	}
	return d, ok
}

// AfterFunc keeps derived contexts attached the lab's way (synchronously,
// at deterministic points) instead of through a goroutine of the standard
// library's.
func (c skewCtx) AfterFunc(f func()) (stop func() bool) {
	if a, ok := c.Context.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(c.Context, f)
}
