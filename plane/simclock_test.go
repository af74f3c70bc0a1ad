package plane_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
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

// TestSkewExecutorKeepsDeadlinesOnTheNodesClock: a deadline taken on a
// node's skewed clock reports that clock's instant, is not done a moment
// before it and is done at it, for contexts derived from it too.
func TestSkewExecutorKeepsDeadlinesOnTheNodesClock(t *testing.T) {
	for _, off := range []time.Duration{-3 * time.Second, 2 * time.Second} {
		res := lab.Run(lab.Config{Seed: 1, Name: "skew-deadline"}, func(env *lab.Env) error {
			ex := skewExecutor{env.Lab, off}
			if got := ex.Now().Sub(env.Lab.Now()); got != off {
				return fmt.Errorf("Now is %v off the lab's, want %v", got, off)
			}
			at := ex.Now().Add(time.Second)
			ctx, cancel := actor.WithDeadline(env.Ctx, ex, at)
			defer cancel()
			child, stop := context.WithCancel(ctx)
			defer stop()
			// A deadline taken from the skewed one keeps the earlier
			// instant, on the same clock.
			inner, cancelInner := actor.WithDeadline(ctx, ex, at.Add(time.Hour))
			defer cancelInner()
			for _, c := range []context.Context{ctx, child, inner} {
				if d, ok := c.Deadline(); !ok || !d.Equal(at) {
					return fmt.Errorf("deadline %v %v, want %v on the node's clock", d, ok, at)
				}
			}
			if err := actor.Sleep(env.Ctx, env.Lab, time.Second-time.Millisecond); err != nil {
				return err
			}
			for _, c := range []context.Context{ctx, child, inner} {
				if c.Err() != nil {
					return fmt.Errorf("done %v before its deadline", c.Err())
				}
			}
			if err := actor.Sleep(env.Ctx, env.Lab, time.Millisecond); err != nil {
				return err
			}
			for _, c := range []context.Context{ctx, child, inner} {
				if !errors.Is(c.Err(), context.DeadlineExceeded) {
					return fmt.Errorf("at its deadline: %v, want DeadlineExceeded", c.Err())
				}
			}
			return nil
		})
		if res.Failure != nil {
			t.Fatalf("offset %v: %s", off, res.Failure.Message)
		}
	}
}
