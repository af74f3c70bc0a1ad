package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// ErrScopeClosed is returned when spawning into, or opening a sub-scope of,
// a scope that is closing or closed.
const ErrScopeClosed sentinel = "actor: scope closed"

// NotQuiescentError is returned by Close when ctx ended before every process
// of the scope had returned (a handler ignoring cancellation). The processes
// are already completed (killed) as far as links, monitors and supervisors
// are concerned; their goroutines are still running user code.
type NotQuiescentError struct {
	Scope string
	Live  int
	// Running lists the killed processes whose goroutines were still
	// running user code, in the order they were killed.
	Running []PID
	Cause   error
}

func (e *NotQuiescentError) Error() string {
	if e.Cause == nil {
		return fmt.Sprintf("actor: scope %s not quiescent: killed processes still running: %v", e.Scope, e.Running)
	}
	return fmt.Sprintf("actor: scope %s not quiescent: %d process goroutines still running: %v", e.Scope, e.Live, e.Cause)
}

func (e *NotQuiescentError) Unwrap() error { return e.Cause }

// Scope owns processes and sub-scopes (the OTP contract's region). Every process
// belongs to exactly one scope and cannot outlive it: Close cancels what is
// left, waits until no process goroutine remains, runs the finalizers and
// only then returns (INV-1).
type Scope struct {
	sys    *System
	parent *Scope
	name   string
	id     uint64
	owner  *core // the process whose Children scope this is, if any

	mu         sync.Mutex
	closed     bool
	head, tail *core    // live processes in spawn order
	subs       []*Scope // open sub-scopes in creation order
	finalizers []func()
	live       int // processes whose goroutine (or init) has not returned
	outcome    Outcome
	quiet      []Parker
	// zombies are killed processes whose goroutine has not returned, in
	// kill order; quietKilled waits until only they are left.
	zombies     []*core
	quietKilled []Parker
	// heldByParent: a CloseKilled returned with killed goroutines still
	// running, and the parent has not been told the scope is closed.
	heldByParent bool

	// Close is one-shot: the first caller does the work, later callers wait
	// for it and get the same result.
	closing    bool
	closed2    bool
	closeOut   Outcome
	closeErr   error
	closeWaits []Parker
}

func newScope(sys *System, parent *Scope, name string) *Scope {
	return &Scope{sys: sys, parent: parent, name: name, id: sys.ids.next()}
}

// Name returns the scope's name.
func (s *Scope) Name() string { return s.name }

// System returns the scope's system.
func (s *Scope) System() *System { return s.sys }

// Executor returns the system's executor seam.
func (s *Scope) Executor() Executor { return s.sys.ex }

// Sub opens a sub-scope. Closing s closes it first.
func (s *Scope) Sub(name string) (*Scope, error) { return s.subOwned(name, nil) }

// subOwned opens a sub-scope owned by a process (Proc.Children). Closing s
// leaves such a scope to its owner, which closes it in its own stop
// protocol, in its own order (a supervisor stops children in reverse), and
// s still waits for it because it waits for the owner.
func (s *Scope) subOwned(name string, owner *core) (*Scope, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrScopeClosed
	}
	sub := newScope(s.sys, s, name)
	sub.owner = owner
	s.subs = append(s.subs, sub)
	return sub, nil
}

// Defer registers a finalizer; finalizers run in reverse order once the scope
// is quiescent.
func (s *Scope) Defer(f func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrScopeClosed
	}
	s.finalizers = append(s.finalizers, f)
	return nil
}

// Outcome returns the aggregate outcome so far: the join of the outcomes of
// every process and sub-scope that completed. Cancellations the scope itself
// requested (Close, Cancel) count as Ok: a process that stops because its
// owner shut it down has not failed.
func (s *Scope) Outcome() Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outcome
}

// Processes returns the live processes in spawn order.
func (s *Scope) Processes() []PID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PID
	for c := s.head; c != nil; c = c.next {
		out = append(out, c.pid())
	}
	return out
}

// Cancel requests cancellation of every live process and sub-scope without
// closing the scope or waiting.
func (s *Scope) Cancel(r CancelReason) {
	procs, subs := s.snapshot()
	for _, c := range procs {
		c.requestCancel(r, true)
	}
	for _, sub := range subs {
		sub.Cancel(r)
	}
}

// snapshot returns the live processes and sub-scopes, newest first.
func (s *Scope) snapshot() ([]*core, []*Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var procs []*core
	for c := s.tail; c != nil; c = c.prev {
		procs = append(procs, c)
	}
	subs := make([]*Scope, len(s.subs))
	for i, sub := range s.subs {
		subs[len(subs)-1-i] = sub
	}
	return procs, subs
}

// Close closes the scope: no new processes or sub-scopes are accepted, every
// live process is cancelled (reason shutdown; they drain and run their stop
// hooks concurrently), sub-scopes are closed newest first, and Close waits
// until no process goroutine remains. Then the finalizers run, newest first.
// It returns the aggregate outcome (see Outcome). If ctx ends first, the
// remaining processes are killed and Close returns a *NotQuiescentError once
// finalizers have run. Close is idempotent.
func (s *Scope) Close(ctx context.Context) (Outcome, error) { return s.closeOnce(ctx, false) }

// CloseKilled is Close for an owner that has already stopped what it owns
// within its own time limits, as a supervisor does with its children's
// shutdown timeouts: it waits for every process goroutine except those of
// processes that were killed (Abort, CancelKill, a shutdown timeout run
// out). Those are complete as far as links, monitors, names and callers
// are concerned, but their goroutines may still be running user code; if
// any is, CloseKilled returns at once a *NotQuiescentError listing them in
// Running, instead of waiting for code that ignores cancellation. This is
// OTP's shutdown timeout: a killed child is not waited for.
//
// What a killed process's goroutine may still do: run the rest of the
// handler or stop hook it was in, touch its own state, read the clock and
// block. Its mailbox is closed, so nothing more is delivered to it; its
// pending callers have been answered; its Deferred replies fail with
// ErrAlreadyReplied; its links, monitors and names are released; its own
// children were killed with it. Only effects it has on the outside world
// through references it holds (channels, shared memory, sends to other
// processes) can still happen, until it returns.
func (s *Scope) CloseKilled(ctx context.Context) (Outcome, error) { return s.closeOnce(ctx, true) }

func (s *Scope) closeOnce(ctx context.Context, killed bool) (Outcome, error) {
	s.mu.Lock()
	s.closed = true
	if s.closing {
		if s.closed2 {
			if s.closeErr == nil {
				defer s.mu.Unlock()
				return s.closeOut, nil
			}
			// The first Close ran out of time; everything is already
			// cancelled and finalized, so only quiescence is left to check.
			s.mu.Unlock()
			if killed {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.closeOut, s.closeErr
			}
			if err := s.waitQuiescent(ctx); err != nil {
				return s.Outcome(), &NotQuiescentError{Scope: s.name, Live: s.liveCount(), Running: s.running(), Cause: err}
			}
			// Sub-scopes still held here have killed goroutines of their
			// own to wait for.
			_, held := s.snapshot()
			for _, sub := range held {
				if _, err := sub.Close(ctx); err != nil {
					return s.Outcome(), err
				}
			}
			s.mu.Lock()
			s.closeErr = nil
			o := s.outcome
			s.mu.Unlock()
			return o, nil
		}
		w := s.sys.ex.NewParker()
		s.closeWaits = append(s.closeWaits, w)
		s.mu.Unlock()
		if err := w.Park(ctx); err != nil {
			return s.Outcome(), &NotQuiescentError{Scope: s.name, Cause: err}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closeOut, s.closeErr
	}
	s.closing = true
	s.mu.Unlock()
	o, err := s.close(ctx, killed)
	// The quiescence the trace reports: goroutines of killed processes are
	// not counted by CloseKilled, which reports them in its error instead.
	left := s.liveCount()
	if killed {
		left -= len(s.running())
	}
	s.sys.trace(TraceEvent{Kind: TraceScopeClosed, Seq: uint64(left), Outcome: o, Detail: s.name})
	s.mu.Lock()
	s.closed2, s.closeOut, s.closeErr = true, o, err
	waits := s.closeWaits
	s.closeWaits = nil
	s.mu.Unlock()
	for _, w := range waits {
		w.Unpark()
	}
	return o, err
}

// kill closes the scope to new work and kills everything in it, without
// waiting: used when the process owning the scope is killed.
func (s *Scope) kill() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	procs, subs := s.snapshot()
	for _, c := range procs {
		c.requestCancel(CancelReason{Kind: CancelKill}, true)
	}
	for _, sub := range subs {
		sub.kill()
	}
}

func (s *Scope) close(ctx context.Context, killed bool) (Outcome, error) {
	procs, subs := s.snapshot()
	for _, c := range procs {
		c.requestCancel(CancelReason{Kind: CancelShutdown}, true)
	}
	var errs []error
	var owned []*Scope
	for _, sub := range subs {
		if sub.owner != nil && sub.owner.pid().Alive() {
			owned = append(owned, sub) // its owner closes it, in its own order
			continue
		}
		if _, err := sub.closeOnce(ctx, killed); err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	if killed {
		err = s.waitUntilOnlyKilled(ctx)
	} else {
		err = s.waitQuiescent(ctx)
	}
	if err == nil {
		// The owners are gone and have closed their scopes; a scope an owner
		// could not make quiescent is still ours to wait for (Close is
		// one-shot, so this only re-checks quiescence under our ctx).
		for _, sub := range owned {
			if _, serr := sub.closeOnce(ctx, killed); serr != nil {
				errs = append(errs, serr)
			}
		}
	}
	if err != nil {
		// Out of budget: kill what is left so links, monitors and callers
		// are released, then report the goroutines we could not reclaim.
		procs, _ := s.snapshot()
		for _, c := range procs {
			c.requestCancel(CancelReason{Kind: CancelKill}, true)
		}
		errs = append(errs, &NotQuiescentError{Scope: s.name, Live: s.liveCount(), Running: s.running(), Cause: err})
	} else if killed {
		if running := s.running(); len(running) > 0 {
			errs = append(errs, &NotQuiescentError{Scope: s.name, Live: len(running), Running: running})
		}
	}
	s.runFinalizers()

	s.mu.Lock()
	o := s.outcome
	// A CloseKilled that left killed goroutines running, here or in a
	// sub-scope it holds, keeps the scope in its parent's list, so the
	// parent's Close still waits for them: the owner does not wait for a
	// killed child, but nothing outlives its scope (INV-1). It is released
	// once they have returned.
	hold := killed && s.parent != nil && (s.live > 0 || len(s.subs) > 0)
	s.heldByParent = hold
	s.mu.Unlock()
	if p := s.parent; p != nil && !hold {
		p.subClosed(s, o)
	}
	return o, errors.Join(errs...)
}

func (s *Scope) waitQuiescent(ctx context.Context) error {
	s.mu.Lock()
	if s.live == 0 {
		s.mu.Unlock()
		return nil
	}
	w := s.sys.ex.NewParker()
	s.quiet = append(s.quiet, w)
	s.mu.Unlock()
	if err := w.Park(ctx); err != nil {
		s.mu.Lock()
		for i, x := range s.quiet {
			if x == w {
				s.quiet = append(s.quiet[:i], s.quiet[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// waitUntilOnlyKilled waits until every process goroutine still running
// belongs to a killed process.
func (s *Scope) waitUntilOnlyKilled(ctx context.Context) error {
	s.mu.Lock()
	if s.live == len(s.zombies) {
		s.mu.Unlock()
		return nil
	}
	w := s.sys.ex.NewParker()
	s.quietKilled = append(s.quietKilled, w)
	s.mu.Unlock()
	if err := w.Park(ctx); err != nil {
		s.mu.Lock()
		for i, x := range s.quietKilled {
			if x == w {
				s.quietKilled = append(s.quietKilled[:i], s.quietKilled[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// running lists the killed processes whose goroutines have not returned.
func (s *Scope) running() []PID {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PID, len(s.zombies))
	for i, c := range s.zombies {
		out[i] = c.pid()
	}
	return out
}

// closedResult returns the result of a Close or CloseKilled that has
// already returned.
func (s *Scope) closedResult() (Outcome, error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeOut, s.closeErr, s.closed2
}

// wakeOnlyKilledLocked returns the waiters of waitUntilOnlyKilled to wake.
func (s *Scope) wakeOnlyKilledLocked() []Parker {
	if s.live != len(s.zombies) || len(s.quietKilled) == 0 {
		return nil
	}
	w := s.quietKilled
	s.quietKilled = nil
	return w
}

func (s *Scope) runFinalizers() {
	s.mu.Lock()
	fs := s.finalizers
	s.finalizers = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if r := recover(); r != nil {
					s.mu.Lock()
					s.outcome = Join(s.outcome, PanickedOutcome(r, debug.Stack()))
					s.mu.Unlock()
				}
			}()
			fs[i]()
		}()
	}
}

func (s *Scope) subClosed(sub *Scope, o Outcome) {
	s.mu.Lock()
	for i, x := range s.subs {
		if x == sub {
			s.subs = append(s.subs[:i], s.subs[i+1:]...)
			if sub.owner == nil {
				// A process's own children scope reports through its owner,
				// which decides what of it is a failure of its own.
				s.outcome = Join(s.outcome, o)
			}
			break
		}
	}
	tell, out := s.releaseLocked()
	s.mu.Unlock()
	if tell {
		s.parent.subClosed(s, out)
	}
}

// releaseLocked reports whether a scope its parent holds (see close) has
// become quiescent, with no goroutine and no held sub-scope left, and if
// so stops holding it: the caller then tells the parent, outside the lock.
func (s *Scope) releaseLocked() (bool, Outcome) {
	if !s.heldByParent || s.live != 0 || len(s.subs) != 0 {
		return false, Outcome{}
	}
	s.heldByParent = false
	return true, s.outcome
}

// add registers a starting process. The scope counts it live until quiescent.
func (s *Scope) add(c *core) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrScopeClosed
	}
	c.prev = s.tail
	if s.tail != nil {
		s.tail.next = c
	} else {
		s.head = c
	}
	s.tail = c
	s.live++
	return nil
}

// childDone unlinks a completed process and folds its outcome in.
func (s *Scope) childDone(c *core, o Outcome, ownerStop bool) {
	s.mu.Lock()
	var wake []Parker
	defer func() {
		s.mu.Unlock()
		for _, w := range wake {
			w.Unpark()
		}
	}()
	if o.Severity == Cancelled && o.Cancel.Kind == CancelKill && !c.returned && !c.idleAtKill.Load() {
		c.zombie = true
		s.zombies = append(s.zombies, c)
		wake = s.wakeOnlyKilledLocked()
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else if s.head == c {
		s.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else if s.tail == c {
		s.tail = c.prev
	}
	c.prev, c.next = nil, nil
	if o.Severity == Cancelled && ownerStop {
		return
	}
	s.outcome = Join(s.outcome, o)
}

// quiescent records that c's goroutine (or its init) has returned.
func (s *Scope) quiescent(c *core) {
	s.mu.Lock()
	s.live--
	c.returned = true
	if c.zombie {
		c.zombie = false
		for i, z := range s.zombies {
			if z == c {
				s.zombies = append(s.zombies[:i], s.zombies[i+1:]...)
				break
			}
		}
	}
	var wake []Parker
	if s.live == 0 {
		wake, s.quiet = s.quiet, nil
	}
	wake = append(wake, s.wakeOnlyKilledLocked()...)
	// The last killed goroutine of a CloseKilled scope returned: the parent
	// no longer needs to hold it.
	tellParent, o := s.releaseLocked()
	s.mu.Unlock()
	if tellParent {
		s.parent.subClosed(s, o)
	}
	for _, w := range wake {
		w.Unpark()
	}
}

func (s *Scope) liveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}
