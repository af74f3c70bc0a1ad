package dispatch

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/handlers"
)

// Message is one unit of work. Type selects the handler (a message whose
// Type has no handler, including the empty Type, is dropped silently);
// Payload is opaque to the runtime and handed to the handler unchanged.
type Message struct {
	Type    string
	Payload any
}

// Handler is the behaviour registered for one message type (the dispatcher contract's
// actor.handle). The runtime calls it on its loop goroutine, one message at a
// time, and waits for it to return.
//
// ctx is cancelled once the handler returns (so work it leaks cannot outlive
// its message) and when the runtime is stopped or its scope closes. A
// returned error or a panic marks the message as failed; either way the
// message is consumed and never retried, and nobody but the log and [Stats]
// learns of it.
type Handler func(ctx context.Context, msg Message) error

// ErrStopped is returned by Deliver and Register after Stop: the message
// was not enqueued.
const ErrStopped = sentinel("dispatch: runtime stopped")

// ErrMailboxFull is returned by Deliver when WithMaxPending is set and the
// mailbox holds that many messages. The message was not enqueued and the
// caller still owns it; Deliver never blocks waiting for room. It is the
// actor layer's sentinel: one "mailbox full" for the whole runtime.
const ErrMailboxFull = actor.ErrMailboxFull

// Option configures a Runtime.
type Option func(*config)

type config struct {
	logger     *slog.Logger
	maxPending int
	scope      *actor.Scope
}

// WithLogger sets where handler errors and panics are logged (default:
// slog.Default() as of New). A nil logger discards them; they are still
// counted in Stats.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.logger = l
	}
}

// WithMaxPending bounds the mailbox to n queued messages (n ≤ 0: unbounded,
// the default). A full mailbox makes Deliver return ErrMailboxFull at once.
//
// Seed 004 §7 says deliver MUST enqueue; a bound trades that for a memory
// limit, so it is opt-in. Deliver still never blocks.
func WithMaxPending(n int) Option {
	return func(c *config) { c.maxPending = n }
}

// WithScope runs the loop as a process of scope: it is then listed by
// scope.Processes, traced by the scope's system, stopped when the scope is
// closed (Deliver then returns ErrStopped), and can be started by a
// supervisor as any other process. The runtime uses the scope's executor.
// Without it, New runs the loop as a process of a private actor.System on
// the executor it is given.
func WithScope(scope *actor.Scope) Option {
	return func(c *config) { c.scope = scope }
}

// Stats is a consistent snapshot of the runtime's counters: every field is
// read under one lock, so at any instant
//
//	Delivered == Executed + Dropped + Pending + InFlight
//
// and Executed-Failed-Panicked handler calls returned nil.
type Stats struct {
	Delivered uint64 // messages accepted by Deliver
	Rejected  uint64 // Deliver calls refused (ErrStopped, ErrMailboxFull)
	Executed  uint64 // handler calls completed, whatever their outcome
	Failed    uint64 // of Executed: the handler returned an error
	Panicked  uint64 // of Executed: the handler panicked or called runtime.Goexit
	Dropped   uint64 // consumed without a handler: no handler for the type
	Pending   int    // in the mailbox, not yet pulled
	InFlight  int    // pulled and not yet consumed: 0 or 1
}

// Runtime is the dispatcher of the dispatcher contract. Create it with New, Register handlers,
// then Start it; Deliver may be called at any time, from any goroutine.
// A Runtime is single-use: once stopped it cannot be started again.
type Runtime struct {
	ex     actor.Executor
	logger *slog.Logger
	limit  int
	scope  *actor.Scope // where the loop's process runs

	// wake is the loop's parker. Deliver unparks it only when the loop has
	// declared itself parked, so a busy loop costs producers no wake-ups.
	wake actor.Parker

	mu    sync.Mutex
	table *handlers.Table[Handler] // frozen by Start; read without the lock after
	box   mailbox
	// loopCancel cancels the current loop process's context (Stop).
	loopCancel context.CancelFunc
	started    bool
	stopped    bool
	exited     bool // the loop returned for good; Stop callers were released
	parked     bool
	inFlight   bool
	waiters    []actor.Parker // Stop callers waiting for the loop to exit
	n          counters
}

type counters struct {
	delivered, rejected, executed, failed, panicked, dropped uint64
}

// outcome is how the loop consumed one message.
type outcome uint8

const (
	outcomeNone outcome = iota // nothing was in flight
	outcomeOK
	outcomeFailed
	outcomePanicked
	outcomeDropped
)

// New returns a runtime with no handlers, not yet started. Its loop will run
// as an actor process: in the scope given WithScope, or else in a private
// actor.System on ex (nil: actor.NewEntropyExecutor(), as actor.NewSystem does).
func New(ex actor.Executor, opts ...Option) *Runtime {
	c := config{logger: slog.Default()}
	for _, o := range opts {
		o(&c)
	}
	if c.scope != nil {
		ex = c.scope.Executor()
	} else {
		if ex == nil {
			ex = actor.NewEntropyExecutor()
		}
		c.scope = actor.NewSystem(actor.WithExecutor(ex)).Root()
	}
	return &Runtime{
		ex:     ex,
		logger: c.logger,
		limit:  c.maxPending,
		scope:  c.scope,
		wake:   ex.NewParker(),
		table:  handlers.NewTable[Handler](),
	}
}

// Register makes h the handler of messageType. It is a setup-time
// operation: it fails with handlers.ErrRegisterAfterStart once Start has
// been called, with handlers.ErrDuplicateHandler if messageType already
// has a handler (the first one stays), with handlers.ErrEmptyMessageType
// or handlers.ErrNilHandler for an empty type or a nil h, and with
// ErrStopped when stopped before it ever started. Errors wrap those sentinels; match them with
// errors.Is.
func (r *Runtime) Register(messageType string, h Handler) error {
	if messageType == "" {
		return handlers.ErrEmptyMessageType
	}
	if h == nil {
		return &handlers.TypeError{Type: messageType, Err: handlers.ErrNilHandler}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped && !r.started {
		return ErrStopped
	}
	return r.table.Register(messageType, h)
}

// Deliver appends msg to the mailbox and returns. It works before Start (the
// message waits) and from inside a handler (the message joins the back of the
// queue). It never runs a handler and never waits for one.
//
// The returned error concerns enqueueing only: nil means msg is in the
// mailbox; ErrStopped or ErrMailboxFull mean it is not. Whether msg is later
// executed, fails or is dropped is never reported to the caller (the dispatcher contract
// §3, §6, §11).
func (r *Runtime) Deliver(msg Message) error {
	r.mu.Lock()
	switch {
	case r.stopped:
		r.n.rejected++
		r.mu.Unlock()
		return ErrStopped
	case r.limit > 0 && r.box.len() >= r.limit:
		r.n.rejected++
		r.mu.Unlock()
		return ErrMailboxFull
	}
	r.box.push(msg)
	r.n.delivered++
	wake := r.parked
	r.parked = false
	r.mu.Unlock()
	if wake {
		r.wake.Unpark()
	}
	return nil
}

// Start activates the loop: it starts the loop's process. Only the first
// call has an effect; later calls, concurrent ones, and calls after Stop do
// nothing.
func (r *Runtime) Start() {
	r.mu.Lock()
	if r.started || r.stopped {
		r.mu.Unlock()
		return
	}
	r.started = true
	// From here Register refuses, so the loop reads the table without the
	// lock; starting the process orders every earlier write before the
	// loop's first read.
	r.table.Freeze()
	r.mu.Unlock()
	r.spawn(outcomeNone)
}

// spawn starts a process that runs the loop, recording prev first. If the
// scope is closed there is no process to run it: the runtime is stopped.
func (r *Runtime) spawn(prev outcome) {
	_, err := r.scope.Go("dispatch", func(pctx context.Context) error {
		// The loop's context ends with the process (its scope closing) and
		// with Stop, which cancels it through loopCancel: a handler that
		// calls Stop with its own context must see it cancelled, whether or
		// not this process's start has been recorded yet.
		ctx, cancel := context.WithCancel(pctx)
		defer cancel()
		r.mu.Lock()
		r.loopCancel = cancel
		if r.stopped {
			cancel()
		}
		r.mu.Unlock()
		r.loop(ctx, prev)
		return nil
	})
	if err != nil {
		r.mu.Lock()
		r.stopped = true
		r.exitLocked()
		r.mu.Unlock()
	}
}

// Stop halts the loop: it cancels the context of the handler in flight, if
// any, lets the loop finish that handler, and returns once the loop goroutine
// has exited. Messages still in the mailbox are not executed (the dispatcher contract §8:
// no drain). After Stop, Deliver returns ErrStopped.
//
// Stop returns ctx's error if ctx ends first (for instance because a handler
// ignores its context); the runtime is stopped regardless, and a later Stop
// waits again. Stop is idempotent and safe to call before Start. From inside
// a handler, pass the handler's ctx: it is cancelled by Stop, so Stop returns
// at once instead of waiting for the loop that is running the caller.
func (r *Runtime) Stop(ctx context.Context) error {
	r.mu.Lock()
	r.stopped = true
	if !r.started || r.exited {
		r.mu.Unlock()
		return nil
	}
	w := r.ex.NewParker()
	r.waiters = append(r.waiters, w)
	cancel := r.loopCancel
	r.mu.Unlock()
	// Cancelling the loop's context cancels the handler in flight; the loop
	// sees stopped at its next step and exits without draining. A loop that
	// has not recorded its cancel yet sees stopped when it does.
	if cancel != nil {
		cancel()
	}
	r.wake.Unpark()
	return w.Park(ctx)
}

// Stats returns a consistent snapshot of the counters. It only reads; it
// never changes what or when anything executes (the dispatcher contract §12).
func (r *Runtime) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{
		Delivered: r.n.delivered,
		Rejected:  r.n.rejected,
		Executed:  r.n.executed,
		Failed:    r.n.failed,
		Panicked:  r.n.panicked,
		Dropped:   r.n.dropped,
		Pending:   r.box.len(),
	}
	if r.inFlight {
		s.InFlight = 1
	}
	return s
}

// step is what next tells the loop to do.
type step uint8

const (
	stepRun step = iota
	stepIdle
	stepExit
)

// loop is the runtime's only execution context: dequeue → resolve →
// execute → dequeue, on the loop's process; ctx is the process context.
// prev is the outcome of a message consumed by a previous loop process that
// has not been recorded yet (see the Goexit recovery below).
func (r *Runtime) loop(ctx context.Context, prev outcome) {
	clean := false
	cur := "" // type of the message in flight, for the Goexit log
	defer func() {
		if clean {
			return
		}
		// Nothing panics out of execute, so the goroutine is unwinding
		// through runtime.Goexit called by the handler in flight. Goexit
		// cannot be stopped (it ends this process, Panicked), but the
		// runtime must not halt (the dispatcher contract §6): the message is consumed as
		// panicked and a fresh process takes over the loop, recording that
		// outcome first.
		r.logError("dispatch: handler exited its goroutine", false, slog.String("type", cur))
		r.spawn(outcomePanicked)
	}()
	for {
		msg, s := r.next(ctx, prev)
		prev = outcomeNone
		switch s {
		case stepExit:
			clean = true
			return
		case stepIdle:
			// An error means the process was cancelled; next sees it.
			_ = r.wake.Park(ctx)
			continue
		}
		h, ok := r.table.Resolve(msg.Type)
		if !ok {
			prev = outcomeDropped // silently (the dispatcher contract §5): no log, no error
			continue
		}
		cur = msg.Type
		prev = r.execute(ctx, h, msg)
	}
}

// next records the outcome of the message just consumed and pulls the next
// one, in one lock acquisition, so Stats never sees a message twice or not
// at all.
func (r *Runtime) next(ctx context.Context, prev outcome) (Message, step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch prev {
	case outcomeOK:
		r.n.executed++
	case outcomeFailed:
		r.n.executed++
		r.n.failed++
	case outcomePanicked:
		r.n.executed++
		r.n.panicked++
	case outcomeDropped:
		r.n.dropped++
	}
	r.inFlight = false
	if ctx.Err() != nil {
		// The process was cancelled: by Stop, or by its scope closing.
		r.stopped = true
	}
	if r.stopped {
		r.exitLocked()
		return Message{}, stepExit
	}
	msg, ok := r.box.pop()
	if !ok {
		r.parked = true
		return Message{}, stepIdle
	}
	r.inFlight = true
	return msg, stepRun
}

// exitLocked records that the loop is gone for good and releases Stop.
func (r *Runtime) exitLocked() {
	r.exited = true
	for _, w := range r.waiters {
		w.Unpark()
	}
	r.waiters = nil
}

// execute runs one handler to completion and contains its failure.
func (r *Runtime) execute(parent context.Context, h Handler, msg Message) (out outcome) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	returned := false
	defer func() {
		if returned {
			return
		}
		out = outcomePanicked
		if v := recover(); v != nil {
			r.logError("dispatch: handler panicked", true,
				slog.String("type", msg.Type), slog.Any("panic", v))
		}
		// recover() == nil: runtime.Goexit is unwinding; loop's defer
		// handles it.
	}()
	err := h(ctx, msg)
	returned = true
	if err != nil {
		r.logError("dispatch: handler failed", false, slog.String("type", msg.Type), slog.Any("err", err))
		return outcomeFailed
	}
	return outcomeOK
}

// logError logs on the loop goroutine, with the current goroutine's stack
// if withStack (called from a deferred recover, that is the panic's stack).
// The stack is only captured when the record will be emitted. A log handler
// that panics is contained here: observability must not alter execution
// (the dispatcher contract §12).
func (r *Runtime) logError(msg string, withStack bool, attrs ...slog.Attr) {
	defer func() { _ = recover() }()
	ctx := context.Background()
	if !r.logger.Enabled(ctx, slog.LevelError) {
		return
	}
	if withStack {
		attrs = append(attrs, slog.String("stack", string(debug.Stack())))
	}
	r.logger.LogAttrs(ctx, slog.LevelError, msg, attrs...)
}
