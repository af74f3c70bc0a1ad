package actor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrNoProc is the reason of a Down for a process that was already dead when
// the monitor was set up, and the error of linking to a dead process.
const ErrNoProc sentinel = "actor: noproc"

// PID identifies a process. It is a comparable value; the zero PID names no
// process. A PID stays valid (and answers Outcome/Wait) after its process
// has exited; it never refers to a later process.
type PID struct{ c *core }

// ID returns the process's identifier, unique within its System and
// increasing in spawn order (the tie-break key of deterministic orderings).
func (p PID) ID() uint64 {
	if p.c == nil {
		return 0
	}
	return p.c.id
}

// IsZero reports whether p names no process.
func (p PID) IsZero() bool { return p.c == nil }

// Name returns the debugging name given at spawn.
func (p PID) Name() string {
	if p.c == nil {
		return ""
	}
	return p.c.name
}

func (p PID) String() string {
	if p.c == nil {
		return "<nopid>"
	}
	if p.c.name != "" {
		return fmt.Sprintf("<%s.%d>", p.c.name, p.c.id)
	}
	return fmt.Sprintf("<%d>", p.c.id)
}

// Alive reports whether the process has not yet completed.
func (p PID) Alive() bool {
	if p.c == nil {
		return false
	}
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	return !p.c.dead
}

// Outcome returns the final outcome once the process has completed.
func (p PID) Outcome() (Outcome, bool) {
	if p.c == nil {
		return Outcome{}, false
	}
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	return p.c.outcome, p.c.dead
}

// Wait blocks until the process has completed (or ctx is done) and returns
// its outcome. It is the plain-goroutine counterpart of a monitor.
func (p PID) Wait(ctx context.Context) (Outcome, error) {
	if p.c == nil {
		return Outcome{}, ErrNoProc
	}
	c := p.c
	c.mu.Lock()
	if c.notified {
		o := c.outcome
		c.mu.Unlock()
		return o, nil
	}
	w := c.sys.ex.NewParker()
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	if err := w.Park(ctx); err != nil {
		c.mu.Lock()
		for i, x := range c.waiters {
			if x == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		return Outcome{}, err
	}
	o, _ := p.Outcome()
	return o, nil
}

// Cancel requests cancellation with reason r and returns without waiting.
// Requests are idempotent; the strongest reason wins. CancelKill terminates
// at once: no drain and no stop hook.
func (p PID) Cancel(r CancelReason) {
	if p.c != nil {
		p.c.requestCancel(r, false)
	}
}

// Stop stops the process gracefully (cancel, drain, stop hook) and waits for
// its outcome.
func (p PID) Stop(ctx context.Context) (Outcome, error) {
	p.Cancel(CancelReason{Kind: CancelRequested})
	return p.Wait(ctx)
}

// Abort terminates the process immediately: its outcome is Cancelled(kill),
// links and monitors are notified and pending callers fail at once, without
// waiting for a handler that is still running.
func (p PID) Abort() { p.Cancel(CancelReason{Kind: CancelKill}) }

// Handle returns the typed reference the process was started with (a *Ref[M]
// or *ServerRef[Q,R,C]), for resolving names to typed references.
func (p PID) Handle() any {
	if p.c == nil {
		return nil
	}
	return p.c.handle
}

// OnExit registers f to run when the process completes, before its links and
// monitors are notified. It returns a function that unregisters f, and false
// if the process has already completed (f is then not registered). This is
// how the registry releases names no later than Down delivery.
func (p PID) OnExit(f func(Outcome)) (remove func(), ok bool) {
	if p.c == nil {
		return func() {}, false
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return func() {}, false
	}
	h := &exitHook{f: f}
	c.hooks = append(c.hooks, h)
	return func() {
		c.mu.Lock()
		h.f = nil
		for i, x := range c.hooks {
			if x == h {
				c.hooks = append(c.hooks[:i], c.hooks[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
	}, true
}

// System returns the process's system (nil for the zero PID).
func (p PID) System() *System {
	if p.c == nil {
		return nil
	}
	return p.c.sys
}

// Executor returns the executor of the process's system.
func (p PID) Executor() Executor {
	if p.c == nil {
		return nil
	}
	return p.c.sys.ex
}

type exitHook struct{ f func(Outcome) }

// impl is what the generic engines provide to the shared core.
type impl interface {
	// interrupt wakes the process so it notices a cancel request.
	interrupt()
	// deliverSystem enqueues a Down or Exit, bypassing the mailbox bound.
	deliverSystem(msg any) bool
	// abandon closes the mailbox and fails every pending obligation; used when
	// the process is killed while its goroutine may still be busy. It
	// reports whether the goroutine was idle (parked waiting for a message,
	// or not started), so that it will return without running user code.
	abandon(o Outcome) (idle bool)
}

// core is the lifecycle state every process shares: identity, cancellation,
// links, monitors and the exactly-once completion.
type core struct {
	id     uint64
	name   string
	sys    *System
	scope  *Scope
	handle any
	impl   impl

	stopping atomic.Bool // a cancel was requested; checked between messages

	mu        sync.Mutex
	reason    CancelReason
	ownerStop bool            // cancelled by its owner (scope close, supervisor)
	ctx       context.Context // created on first use; see context()
	cancelCtx context.CancelCauseFunc
	// initCancel cancels the init-phase context, which derives from Start's
	// context rather than from ctx, so a cancel request must reach it too.
	initCancel context.CancelFunc
	trapExit   bool
	links      []*core
	monitors   []monitorEntry // in ref order: the Down tie-break
	hooks      []*exitHook
	waiters    []Parker
	dead       bool
	notified   bool // links, monitors, hooks and scope have all been told
	outcome    Outcome
	children   *Scope // the process's own scope (Proc.Children), if created

	prev, next *core // the owning scope's list, in spawn order
	// Guarded by the owning scope's mu: the goroutine (or init) has
	// returned; the process was killed while its goroutine still ran.
	returned, zombie bool
	// idleAtKill: when killed, its goroutine was idle (set by the killer
	// before finish, read by the scope in finish on the same goroutine).
	idleAtKill atomic.Bool
}

type monitorEntry struct {
	ref     uint64
	watcher *core
}

type procKey struct{}

func (c *core) init(sys *System, scope *Scope, name string) {
	c.id = sys.ids.next()
	c.name = name
	c.sys = sys
	c.scope = scope
}

// context returns the process context: it carries the process identity (for
// CallingSelf detection) and is cancelled on the first cancel request. It is
// built on first use because most processes never ask for it, and a context
// costs several allocations per spawn.
func (c *core) context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancelCtx = context.WithCancelCause(context.WithValue(context.Background(), procKey{}, c))
		if c.reason.Kind != CancelNone || c.dead {
			c.cancelCtx(ErrCancelled)
		}
	}
	return c.ctx
}

// identity is a context that carries the process identity only.
func (c *core) identity() context.Context {
	return context.WithValue(context.Background(), procKey{}, c)
}

// callerOf returns the process a context belongs to, if any.
func callerOf(ctx context.Context) *core {
	c, _ := ctx.Value(procKey{}).(*core)
	return c
}

func (c *core) pid() PID { return PID{c} }

// requestCancel records a cancel request (the strongest reason wins) and
// wakes the process. The first request cancels the handler context, so a
// handler blocked in a call or sleep returns promptly.
func (c *core) requestCancel(r CancelReason, owner bool) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	first := c.reason.Kind == CancelNone
	c.reason = c.reason.Stronger(r)
	if owner {
		c.ownerStop = true
	}
	cancel, initCancel := c.cancelCtx, c.initCancel
	c.mu.Unlock()
	c.stopping.Store(true)
	if first {
		if cancel != nil {
			cancel(ErrCancelled)
		}
		if initCancel != nil {
			initCancel()
		}
		c.sys.trace(TraceEvent{Kind: TraceCancelRequested, PID: c.pid(), Detail: r.String()})
	}
	if r.Kind == CancelKill {
		o := CancelledOutcome(r)
		c.idleAtKill.Store(c.impl.abandon(o))
		// Nothing the process started may outlive it.
		c.mu.Lock()
		children := c.children
		c.mu.Unlock()
		if children != nil {
			children.kill()
		}
		c.finish(o)
	}
	c.impl.interrupt()
}

func (c *core) cancelReason() CancelReason {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// finish completes the process exactly once: it fixes the outcome, runs exit
// hooks (name release), then notifies links and monitors in a stable order,
// and reports to the owning scope. It returns false if already completed.
func (c *core) finish(o Outcome) bool {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return false
	}
	c.dead = true
	c.outcome = o
	links, mons, hooks := c.links, c.monitors, c.hooks
	c.links, c.monitors, c.hooks = nil, nil, nil
	owner := c.ownerStop
	cancel := c.cancelCtx
	c.mu.Unlock()

	c.stopping.Store(true)
	if cancel != nil {
		cancel(ErrCancelled)
	}
	c.sys.trace(TraceEvent{Kind: TraceExit, PID: c.pid(), Outcome: o})
	for _, h := range hooks {
		c.mu.Lock()
		f := h.f
		c.mu.Unlock()
		if f != nil {
			f(o)
		}
	}
	// Tie-break: links first in link order, then monitors in ref order.
	// Refs are allocated before the monitor reaches this process's lock, so
	// concurrent monitors may have been appended out of order: sort.
	slices.SortFunc(mons, func(a, b monitorEntry) int { return cmp.Compare(a.ref, b.ref) })
	for _, l := range links {
		l.onLinkedExit(c, o)
	}
	for _, m := range mons {
		d := Down{Ref: MonitorRef{id: m.ref, target: c.pid()}, PID: c.pid(), Outcome: o}
		if m.watcher.impl.deliverSystem(d) {
			c.sys.trace(TraceEvent{Kind: TraceDown, PID: m.watcher.pid(), Peer: c.pid(), Outcome: o})
		}
	}
	c.scope.childDone(c, o, owner)
	// Waiters wake only now, so Wait (and Stop) return once every link,
	// monitor and name has been told.
	c.mu.Lock()
	c.notified = true
	waiters := c.waiters
	c.waiters = nil
	c.mu.Unlock()
	for _, w := range waiters {
		w.Unpark()
	}
	return true
}

// Exit is the message a process that traps exits receives when a linked
// process completes (with any outcome, Ok included).
type Exit struct {
	From    PID
	Outcome Outcome
}

// Down is the message a monitoring process receives when the monitored
// process completes. A monitor set on a process that was already dead yields
// an immediate Down whose Outcome is Err(ErrNoProc).
type Down struct {
	Ref     MonitorRef
	PID     PID
	Outcome Outcome
}

// NoProc reports whether the Down says the target was already dead.
func (d Down) NoProc() bool { return errors.Is(d.Outcome.Err, ErrNoProc) }

// MonitorRef identifies one monitor.
type MonitorRef struct {
	id     uint64
	target PID
}

// ID returns the monitor's identifier (its Down tie-break key).
func (r MonitorRef) ID() uint64 { return r.id }

// Target returns the monitored process.
func (r MonitorRef) Target() PID { return r.target }

func (c *core) onLinkedExit(from *core, o Outcome) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.links = removeCore(c.links, from)
	trap := c.trapExit
	c.mu.Unlock()
	c.sys.trace(TraceEvent{Kind: TraceLinkExit, PID: c.pid(), Peer: from.pid(), Outcome: o})
	if trap {
		c.impl.deliverSystem(Exit{From: from.pid(), Outcome: o})
		return
	}
	if !o.IsOk() {
		c.requestCancel(CancelReason{Kind: CancelLinked, From: from.pid(), Cause: &LinkError{From: from.pid(), Outcome: o}}, false)
	}
}

func removeCore(s []*core, x *core) []*core {
	for i, y := range s {
		if y == x {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// lockPair locks two cores in id order (the global lock order for links).
func lockPair(a, b *core) {
	if a.id < b.id {
		a.mu.Lock()
		b.mu.Lock()
	} else {
		b.mu.Lock()
		a.mu.Lock()
	}
}

func link(a, b *core) error {
	if a == b {
		return nil
	}
	lockPair(a, b)
	defer a.mu.Unlock()
	defer b.mu.Unlock()
	if b.dead || a.dead {
		return ErrNoProc
	}
	for _, x := range a.links {
		if x == b {
			return nil
		}
	}
	a.links = append(a.links, b)
	b.links = append(b.links, a)
	return nil
}

func unlink(a, b *core) {
	if a == b {
		return
	}
	lockPair(a, b)
	a.links = removeCore(a.links, b)
	b.links = removeCore(b.links, a)
	a.mu.Unlock()
	b.mu.Unlock()
}

// addMonitor registers watcher on target; false means target is already dead.
func (c *core) addMonitor(ref uint64, watcher *core) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false
	}
	c.monitors = append(c.monitors, monitorEntry{ref: ref, watcher: watcher})
	return true
}

// removeMonitor reports whether the monitor was still registered (so no Down
// has been or will be sent for it).
func (c *core) removeMonitor(ref uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.monitors {
		if m.ref == ref {
			c.monitors = append(c.monitors[:i], c.monitors[i+1:]...)
			return true
		}
	}
	return false
}
