package actor

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// ErrTimeout is returned by Timeout when the time ran out before f finished.
const ErrTimeout sentinel = "actor: timeout"

// ErrNoBranches is returned by Race and Select called without branches:
// with nothing to wait for, nothing could ever win.
const ErrNoBranches sentinel = "actor: race with no branches"

// BranchError is returned by Race, Select and Timeout when a branch could
// not be started (its scope was closed under it). The branches started
// before it are cancelled and drained first, and the winner is -1.
type BranchError struct {
	Index int
	Err   error
}

func (e *BranchError) Error() string {
	return fmt.Sprintf("actor: race branch %d could not start: %v", e.Index, e.Err)
}

func (e *BranchError) Unwrap() error { return e.Err }

// task is a bare process: a function with no mailbox.
type task struct {
	core
}

func (*task) interrupt()             {}
func (*task) deliverSystem(any) bool { return false }
func (*task) abandon(Outcome) bool   { return false }
func (t *task) run(ctx context.Context, f func(context.Context) error) {
	defer t.scope.quiescent(&t.core)
	returned := false
	defer func() {
		if !returned {
			// f called runtime.Goexit, which no recover stops: the task
			// still completes, Panicked, so nothing waits for it forever.
			t.finish(violationOutcome(ErrGoexit))
		}
	}()
	o := protect(func() error { return f(ctx) })
	returned = true
	if o.Severity == Err && t.stopping.Load() {
		// The task gave up because it was asked to: that is cancellation,
		// not an application failure.
		o = CancelledOutcome(t.cancelReason())
	}
	t.finish(o)
}

// Go starts f as a bare process (a task) in the scope. f's context is
// cancelled when the task or the scope is cancelled. Its outcome is Ok when
// f returns nil, Err when it returns an error, Cancelled when it returns an
// error after cancellation was requested, and Panicked when it panics.
func (s *Scope) Go(name string, f func(ctx context.Context) error) (PID, error) {
	t := &task{}
	t.core.init(s.sys, s, name)
	t.core.impl = t
	if err := s.add(&t.core); err != nil {
		return PID{}, err
	}
	s.sys.trace(TraceEvent{Kind: TraceSpawn, PID: t.pid()})
	ctx := t.core.context()
	s.sys.ex.Go(func() { t.run(ctx, f) })
	return t.pid(), nil
}

// Race runs the branches concurrently, each as a task in a fresh sub-scope
// of parent. The first branch to return wins, whatever it returned. The
// others are cancelled (reason race-lost) and Race returns only once they
// have completed and their cleanup has run (INV-4: losers are drained). If
// ctx ends first, every branch is cancelled and drained and Race returns
// ctx's error with winner -1. A branch that panics wins with an
// *OutcomeError carrying the panic. Without branches Race returns
// ErrNoBranches at once; if a branch cannot be started it returns a
// *BranchError once the branches already started are drained.
func Race[T any](ctx context.Context, parent *Scope, branches ...func(ctx context.Context) (T, error)) (winner int, val T, err error) {
	return race(ctx, parent, CancelReason{Kind: CancelRaceLost}, branches)
}

// Select is Race under the name Go programmers expect for "first ready".
func Select[T any](ctx context.Context, parent *Scope, branches ...func(ctx context.Context) (T, error)) (winner int, val T, err error) {
	return Race(ctx, parent, branches...)
}

// Timeout runs f in a sub-scope of parent. If d elapses on the executor's
// clock first, f is cancelled (reason timeout) and Timeout waits for f's
// cleanup before returning ErrTimeout.
func Timeout[T any](ctx context.Context, parent *Scope, d time.Duration, f func(ctx context.Context) (T, error)) (T, error) {
	ex := parent.sys.ex
	timer := func(ctx context.Context) (T, error) {
		var zero T
		if err := Sleep(ctx, ex, d); err != nil {
			return zero, err
		}
		return zero, ErrTimeout
	}
	_, v, err := race(ctx, parent, CancelReason{Kind: CancelTimeout}, []func(context.Context) (T, error){f, timer})
	return v, err
}

func race[T any](ctx context.Context, parent *Scope, loserReason CancelReason, branches []func(ctx context.Context) (T, error)) (int, T, error) {
	var zero T
	if len(branches) == 0 {
		return -1, zero, ErrNoBranches
	}
	sub, err := parent.Sub("race")
	if err != nil {
		return -1, zero, err
	}
	return raceIn(ctx, sub, loserReason, branches)
}

// raceIn runs the race in sub, which it closes before returning.
func raceIn[T any](ctx context.Context, sub *Scope, loserReason CancelReason, branches []func(ctx context.Context) (T, error)) (int, T, error) {
	var zero T
	var (
		mu    sync.Mutex
		done  bool
		win   = -1
		val   T
		werr  error
		ready = sub.sys.ex.NewParker()
	)
	settle := func(i int, v T, err error) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			done, win, val, werr = true, i, v, err
			ready.Unpark()
		}
	}
	for i, b := range branches {
		_, err := sub.Go("race-branch", func(bctx context.Context) error {
			ok := false
			defer func() {
				if !ok {
					r := recover()
					settle(i, zero, &OutcomeError{Outcome: PanickedOutcome(r, nil)})
					panic(r)
				}
			}()
			v, err := b(bctx)
			ok = true
			settle(i, v, err)
			return err
		})
		if err != nil {
			// Close the race so no branch started so far can win, then
			// drain them and report the branch that could not start.
			mu.Lock()
			done = true
			mu.Unlock()
			sub.Cancel(loserReason)
			_, _ = sub.Close(context.WithoutCancel(ctx))
			return -1, zero, &BranchError{Index: i, Err: err}
		}
	}
	perr := ready.Park(ctx)
	gaveUp := false
	if perr != nil {
		// Close the race before cancelling: a branch that returns because
		// we cancelled it must not become the winner.
		mu.Lock()
		if !done {
			done, gaveUp = true, true
		}
		mu.Unlock()
	}
	sub.Cancel(loserReason)
	_, _ = sub.Close(context.WithoutCancel(ctx))
	if gaveUp {
		return -1, zero, perr
	}
	mu.Lock()
	defer mu.Unlock()
	return win, val, werr
}
