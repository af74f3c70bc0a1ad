package actor

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrTimeout is returned by Timeout when the time ran out before f finished.
var ErrTimeout = errors.New("actor: timeout")

// task is a bare process: a function with no mailbox.
type task struct {
	core
}

func (*task) interrupt()             {}
func (*task) deliverSystem(any) bool { return false }
func (*task) abandon(Outcome)        {}
func (t *task) run(ctx context.Context, f func(context.Context) error) {
	defer t.scope.quiescent()
	o := protect(func() error { return f(ctx) })
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
// *OutcomeError carrying the panic.
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
	sub, err := parent.Sub("race")
	if err != nil {
		return -1, zero, err
	}
	var (
		mu    sync.Mutex
		done  bool
		win   = -1
		val   T
		werr  error
		ready = parent.sys.ex.NewParker()
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
			break
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
