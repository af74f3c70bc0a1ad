package actor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/registry"
)

// valueKey keys the values these tests put in a context: a type of its own
// collides with no other package's key.
type valueKey struct{}

// A context from the executor's WithTimeout behaves like the standard
// library's: it has a Deadline, and once that passes its Err is
// DeadlineExceeded, and so is the Err of contexts derived from it through
// the seam (or with values). An early cancel reports Canceled.
func TestWithTimeoutReportsDeadlineExceeded(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		ex := sys.Executor()
		start := ex.Now()
		ctx, cancel := actor.WithTimeout(context.Background(), ex, 2*time.Second)
		defer cancel()
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(start.Add(2*time.Second)) {
			t.Errorf("Deadline() = %v, %v; want %v, true", dl, ok, start.Add(2*time.Second))
		}
		inner, cancelInner := actor.WithTimeout(ctx, ex, time.Hour)
		defer cancelInner()
		if dl, ok := inner.Deadline(); !ok || !dl.Equal(start.Add(2*time.Second)) {
			t.Errorf("nested Deadline() = %v, %v; want the parent's earlier %v", dl, ok, start.Add(2*time.Second))
		}
		valued := context.WithValue(ctx, valueKey{}, 1)
		if ctx.Err() != nil || inner.Err() != nil {
			t.Errorf("before the deadline: Err() = %v, %v; want nil", ctx.Err(), inner.Err())
		}
		sleep(t, sys, 3*time.Second)
		for name, c := range map[string]context.Context{"ctx": ctx, "nested": inner, "with value": valued} {
			if !errors.Is(c.Err(), context.DeadlineExceeded) {
				t.Errorf("%s: Err() = %v after the deadline, want DeadlineExceeded", name, c.Err())
			}
			if !errors.Is(context.Cause(c), context.DeadlineExceeded) {
				t.Errorf("%s: Cause() = %v after the deadline, want DeadlineExceeded", name, context.Cause(c))
			}
		}

		early, cancelEarly := actor.WithTimeout(context.Background(), ex, time.Hour)
		cancelEarly()
		if !errors.Is(early.Err(), context.Canceled) {
			t.Errorf("cancelled before its deadline: Err() = %v, want Canceled", early.Err())
		}
	})
}

// Contexts derived with the standard library's own functions see the
// deadline too, under both executors: a context.WithCancel child reports
// DeadlineExceeded and the deadline; cancelling the parent reaches a
// derived context; an early cancel is Canceled.
func TestWithTimeoutDerivedStdlibContextsBehaveLikeTheStandardLibrary(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		ex := sys.Executor()
		ctx, cancel := actor.WithTimeout(context.Background(), ex, time.Second)
		defer cancel()
		child, cancelChild := context.WithCancel(ctx)
		defer cancelChild()
		grandchild, cancelGrandchild := context.WithCancelCause(context.WithValue(child, valueKey{}, 1))
		defer cancelGrandchild(nil)
		sleep(t, sys, 2*time.Second)
		for name, c := range map[string]context.Context{"child": child, "grandchild": grandchild} {
			if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
				t.Errorf("%s: Err() = %v, Cause = %v; want DeadlineExceeded", name, c.Err(), context.Cause(c))
			}
			if dl, ok := c.Deadline(); !ok || dl.IsZero() {
				t.Errorf("%s has no Deadline", name)
			}
			select {
			case <-c.Done():
			default:
				t.Errorf("%s: Done not closed after the deadline", name)
			}
		}

		// A parent's cancellation reaches a seam deadline and what derives
		// from it.
		parent, cancelParent := context.WithCancel(context.Background())
		dl, cancelDL := actor.WithTimeout(parent, ex, time.Hour)
		defer cancelDL()
		derived, cancelDerived := context.WithCancel(dl)
		defer cancelDerived()
		cancelParent()
		sleep(t, sys, time.Millisecond) // a turn boundary under the lab
		if !errors.Is(dl.Err(), context.Canceled) || !errors.Is(derived.Err(), context.Canceled) {
			t.Errorf("after the parent's cancel: %v, %v; want Canceled", dl.Err(), derived.Err())
		}
	})
}

// The init context carries the init budget as a Deadline and reports
// DeadlineExceeded when it runs out; the start then fails with ErrTimeout.
func TestInitContextHasDeadlineAndReportsDeadlineExceeded(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		ex := sys.Executor()
		start := ex.Now()
		var (
			deadline time.Time
			hasDL    bool
			sleepErr error
			ctxErr   error
			causeErr error
		)
		_, err := actor.Spawn[fn](context.Background(), sys.Root(), &fnActor{start: func(p *actor.Proc) error {
			deadline, hasDL = p.Ctx().Deadline()
			sleepErr = actor.Sleep(p.Ctx(), p.Executor(), time.Hour)
			ctxErr, causeErr = p.Ctx().Err(), context.Cause(p.Ctx())
			return sleepErr
		}}, actor.WithInitTimeout(2*time.Second))
		if !hasDL || !deadline.Equal(start.Add(2*time.Second)) {
			t.Errorf("init Deadline() = %v, %v; want %v, true", deadline, hasDL, start.Add(2*time.Second))
		}
		if !errors.Is(sleepErr, context.DeadlineExceeded) || !errors.Is(ctxErr, context.DeadlineExceeded) || !errors.Is(causeErr, context.DeadlineExceeded) {
			t.Errorf("init context at its budget: Sleep %v, Err %v, Cause %v; want DeadlineExceeded", sleepErr, ctxErr, causeErr)
		}
		if !errors.Is(err, actor.ErrTimeout) {
			t.Errorf("Spawn: %v, want ErrTimeout", err)
		}
		if got := ex.Now().Sub(start); got != 2*time.Second {
			t.Errorf("init ran %v, want its 2s budget", got)
		}
	})
}

// A late init is rejected (issue 8 item 1): an init that ignores its
// context and returns nil after its budget fails the start with ErrTimeout,
// and leaves nothing behind: the process is completed, gone from its scope,
// and the name it registered is unbound.
func TestLateInitIsRejectedWithTimeout(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		ex := sys.Executor()
		reg := registry.New(ex)
		var self actor.PID
		ref, err := actor.StartServer[call, int, cast](context.Background(), sys.Root(), &fnServer{init: func(p *actor.Proc) error {
			self = p.Self()
			if _, err := reg.Register("late", p.Self()); err != nil {
				return err
			}
			// Ignores its context, and succeeds after 1s.
			return actor.Sleep(context.Background(), p.Executor(), time.Second)
		}}, actor.WithInitTimeout(100*time.Millisecond))
		if ref != nil {
			t.Errorf("StartServer returned a running server %v", ref.PID())
		}
		if !errors.Is(err, actor.ErrTimeout) {
			t.Errorf("StartServer: %v, want errors.Is ErrTimeout", err)
		}
		var se *actor.StartError
		if !errors.As(err, &se) || se.Outcome.Severity != actor.Cancelled || se.Outcome.Cancel.Kind != actor.CancelTimeout {
			t.Errorf("StartServer: %v, want a *StartError with outcome cancelled(timeout)", err)
		}
		if self.Alive() {
			t.Errorf("the late process %v is still alive", self)
		}
		if pid, ok := reg.Whereis("late"); ok {
			t.Errorf("the name registered by the late init is still bound to %v", pid)
		}
		if procs := sys.Root().Processes(); len(procs) != 0 {
			t.Errorf("scope still lists %v", procs)
		}
	})
}
