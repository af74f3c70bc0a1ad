package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the GenServer behaviour: Q is the call request type, R the reply
// type and C the cast message type. Embed Base for default Init, HandleInfo
// and Terminate.
//
//   - HandleCall answers a call. Its return value is the reply: a non-nil
//     error is delivered to the caller as Call's error and the server keeps
//     running. To reply later, call from.Defer() (see ReplyTo).
//   - HandleCast and HandleInfo handle one-way messages. A non-nil error ends
//     the process with Outcome Err (there is no caller to give it to).
//   - Info messages are everything that is not a call or cast: Down, Exit,
//     SendAfter timers and ServerRef.Info.
type Server[Q, R, C any] interface {
	Init(p *Proc) error
	HandleCall(p *Proc, req Q, from ReplyTo[R]) (R, error)
	HandleCast(p *Proc, msg C) error
	HandleInfo(p *Proc, info any) error
	Terminate(p *Proc, o Outcome)
}

// Actor is the plain actor behaviour over messages of type M. A non-nil
// error from Handle ends the process with Outcome Err. An Actor that also
// implements InfoHandler receives Down, Exit and timer messages.
type Actor[M any] interface {
	OnStart(p *Proc) error
	Handle(p *Proc, msg M) error
	OnStop(p *Proc, o Outcome)
}

// InfoHandler receives info messages (Down, Exit, SendAfter timers).
type InfoHandler interface {
	HandleInfo(p *Proc, info any) error
}

// Base provides no-op lifecycle hooks for actors and servers to embed.
type Base struct{}

func (Base) OnStart(*Proc) error         { return nil }
func (Base) OnStop(*Proc, Outcome)       {}
func (Base) Init(*Proc) error            { return nil }
func (Base) Terminate(*Proc, Outcome)    {}
func (Base) HandleInfo(*Proc, any) error { return nil }

type none struct{}

// DefaultStopTimeout is the stop budget (drain plus stop hook) unless
// WithStopTimeout says otherwise.
const DefaultStopTimeout = 5 * time.Second

// Option configures a process at spawn.
type Option func(*options)

type options struct {
	name        string
	capacity    int
	initTimeout time.Duration
	stopTimeout time.Duration
	links       []PID
	trap        bool
	binds       []func(PID) error
}

// WithName sets the process's debugging name.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithMailbox sets the mailbox capacity (default 64).
func WithMailbox(capacity int) Option { return func(o *options) { o.capacity = capacity } }

// WithInitTimeout bounds init: its context is cancelled after d.
func WithInitTimeout(d time.Duration) Option { return func(o *options) { o.initTimeout = d } }

// WithStopTimeout bounds drain plus the stop hook (default 5s).
func WithStopTimeout(d time.Duration) Option { return func(o *options) { o.stopTimeout = d } }

// WithLink links the new process to pid before init runs.
func WithLink(pid PID) Option { return func(o *options) { o.links = append(o.links, pid) } }

// WithBinding sets the process's debugging name to name (unless WithName
// set one) and calls bind with its PID once the process exists and before
// its init runs; an error from bind fails the start (a *StartError whose
// outcome is Err(the error)) without running init. It is how a name is
// bound atomically with a start: bind registers the name, and because a
// name lives only as long as its process (see registry), a start that fails
// later, in init or at its init budget, leaves the name unbound by the time
// Start returns. registry.WithName builds one.
func WithBinding(name string, bind func(PID) error) Option {
	return func(o *options) {
		if o.name == "" {
			o.name = name
		}
		o.binds = append(o.binds, bind)
	}
}

// WithTrapExits makes the new process receive linked exits as Exit messages
// instead of being cancelled by them.
func WithTrapExits() Option { return func(o *options) { o.trap = true } }

// ErrNilScope is returned by a start given no scope.
const ErrNilScope sentinel = "actor: nil scope"

// StartError is returned when a process could not start: its init failed,
// panicked, timed out, or cancellation was requested before init began. The
// process is completed with Outcome and nothing of it remains.
type StartError struct {
	PID     PID
	Outcome Outcome
}

func (e *StartError) Error() string {
	return fmt.Sprintf("actor: start %s failed: %s", e.PID, e.Outcome)
}

// Unwrap exposes the outcome's reasons (see OutcomeError): a start whose
// init overran WithInitTimeout matches ErrTimeout, an init error matches
// itself.
func (e *StartError) Unwrap() error { return e.Outcome.AsError() }

type envKind uint8

const (
	envCast envKind = iota
	envCall
	envInfo
)

type envelope[Q, R, C any] struct {
	kind envKind
	cast C
	req  Q
	slot *callSlot[R]
	gen  uint64
	info any
	sys  bool // a system message (Down, Exit, timers): it does not reset an idle timeout
	// Set only while tracing: the sending process and the position in this
	// mailbox (the FIFO oracle checks handling follows it).
	from *core
	seq  uint64
}

func (k envKind) String() string {
	switch k {
	case envCast:
		return "cast"
	case envCall:
		return "call"
	}
	return "info"
}

type heldCall[R any] struct {
	slot *callSlot[R]
	gen  uint64
	id   uint64 // deferred obligations only, while tracing
}

// server is the one process engine; Actor runs on it through an adapter.
type server[Q, R, C any] struct {
	core
	// The typed handle (sref for a GenServer, aref and the adapter for a
	// plain actor) lives inside the process, so a start allocates once.
	sref    ServerRef[Q, R, C]
	aref    Ref[C]
	adapter actorServer[C]
	mb      mailbox[envelope[Q, R, C]]
	beh     Server[Q, R, C]
	proc    Proc
	batch   []envelope[Q, R, C]
	opts    options
	slots   sync.Pool

	held    heldCall[R] // the call last taken from the mailbox (under mb.mu)
	pushSeq uint64      // envelopes stamped so far (under mb.mu, tracing only)

	dmu      sync.Mutex
	deferred []heldCall[R]
	deferNow bool // the running HandleCall deferred its reply
}

// Proc is the capability context a process's handlers receive: its
// identity, context, scope, links, monitors and timers. It is only valid on
// the process's own goroutine (and during its init).
type Proc struct {
	c *core
	// ctx is the handler context of the current phase, built on first use:
	// during init it is bounded by the init budget and the start context;
	// while running it is the process context; during drain and the stop
	// hook it is masked (not cancelled by cancel requests) and bounded by the
	// stop budget.
	ctx      context.Context
	phase    phase
	startCtx context.Context // the context Start was called with (init phase)
	deadline time.Time       // the budget's end in the init and stop phases
	cancel   context.CancelFunc
	exitReq  bool
	exitErr  error
	children *Scope
	ext      *procExt            // what few processes use, allocated on first use
	active   map[uint64]struct{} // monitors this process holds
	flushed  map[uint64]struct{} // demonitored with flush while a Down was in flight
}

// Self returns the process's PID.
func (p *Proc) Self() PID { return p.c.pid() }

type phase uint8

const (
	phaseRun phase = iota
	phaseInit
	phaseStop
)

// Ctx returns the handler context. It is cancelled when cancellation of the
// process is requested; during init it is also bounded by the init budget
// and Start's context; during drain and the stop hook it is a masked
// context bounded by the stop budget instead. It identifies the process to
// Call, which is how calling oneself is detected.
func (p *Proc) Ctx() context.Context {
	if p.ctx != nil {
		return p.ctx
	}
	ex := p.c.sys.ex
	switch p.phase {
	case phaseRun:
		p.ctx = p.c.context()
	case phaseInit:
		// Derived from Start's context (no goroutine bridges the two, which
		// keeps the lab deterministic); cancel requests reach it through
		// core.initCancel, the budget through a deadline on the seam's clock,
		// so it reports Deadline and DeadlineExceeded like any deadline.
		base := context.WithValue(p.startCtx, procKey{}, p.c)
		var ctx context.Context
		var cancel context.CancelFunc
		if p.deadline.IsZero() {
			ctx, cancel = context.WithCancel(base)
		} else {
			ctx, cancel = WithDeadline(base, ex, p.deadline)
		}
		p.c.mu.Lock()
		p.c.initCancel = cancel
		if p.c.reason.Kind != CancelNone {
			cancel()
		}
		p.c.mu.Unlock()
		p.ctx = ctx
		p.cancel = func() {
			p.c.mu.Lock()
			p.c.initCancel = nil
			p.c.mu.Unlock()
			cancel()
		}
	case phaseStop:
		p.ctx, p.cancel = WithTimeout(p.c.identity(), ex, p.deadline.Sub(ex.Now()))
	}
	return p.ctx
}

// enter switches the handler context to a new phase.
func (p *Proc) enter(ph phase, deadline time.Time) {
	if p.cancel != nil {
		p.cancel()
		p.cancel = nil
	}
	p.ctx, p.phase, p.deadline = nil, ph, deadline
}

// budgetExpired reports whether the current phase's budget has run out.
func (p *Proc) budgetExpired() bool {
	return !p.deadline.IsZero() && !p.c.sys.ex.Now().Before(p.deadline)
}

// Stopping reports whether the process is on its way out: cancellation was
// requested, or it is draining or running its stop hook.
func (p *Proc) Stopping() bool { return p.phase == phaseStop || p.c.stopping.Load() }

// Scope returns the scope the process belongs to.
func (p *Proc) Scope() *Scope { return p.c.scope }

// Executor returns the executor seam.
func (p *Proc) Executor() Executor { return p.c.sys.ex }

// Now reads the executor's clock.
func (p *Proc) Now() time.Time { return p.c.sys.ex.Now() }

// Children returns a scope owned by this process, created on first use. It
// is closed after the process's stop hook and before the process completes,
// so nothing started in it outlives the process.
func (p *Proc) Children() (*Scope, error) {
	if p.children == nil {
		s, err := p.c.scope.subOwned(p.Self().String(), p.c)
		if err != nil {
			return nil, err
		}
		p.c.mu.Lock()
		dead := p.c.reason.Kind == CancelKill
		p.c.children = s
		p.c.mu.Unlock()
		if dead {
			s.kill()
		}
		p.children = s
	}
	return p.children, nil
}

// Fail records that the process completes no better than o, without a Go
// panic: for a protocol-level failure the process detected itself, such as
// a supervisor escalating a child's panic (which INV-6A says must leave the
// supervisor Panicked). It only ever makes the outcome worse (Join), takes
// effect when the process completes, and does not stop it by itself: pair it
// with Exit, or call it from Init or the stop hook.
func (p *Proc) Fail(o Outcome) {
	x := p.extra()
	x.failed = Join(x.failed, o)
}

// procExt holds the parts of a process that most processes never use, so
// that they cost a pointer, not their size, in every process.
type procExt struct {
	failed Outcome             // set by Fail; joined into the final outcome
	cont   []func(*Proc) error // continuations asked for by the current callback
	idle   idleState
}

func (p *Proc) extra() *procExt {
	if p.ext == nil {
		p.ext = new(procExt)
	}
	return p.ext
}

// Exit ends the process after the current handler returns: nil is a normal
// exit (Ok; committed messages are drained first), an error is Err.
func (p *Proc) Exit(err error) { p.exitReq, p.exitErr = true, err }

// TrapExits sets whether linked exits arrive as Exit messages.
func (p *Proc) TrapExits(on bool) {
	p.c.mu.Lock()
	p.c.trapExit = on
	p.c.mu.Unlock()
}

// Link links this process to pid (bidirectional). Linking to a dead process
// returns ErrNoProc.
func (p *Proc) Link(pid PID) error {
	if pid.c == nil {
		return ErrNoProc
	}
	err := link(p.c, pid.c)
	if err == nil {
		p.c.sys.trace(TraceEvent{Kind: TraceLink, PID: p.Self(), Peer: pid})
	}
	return err
}

// Unlink removes a link in both directions.
func (p *Proc) Unlink(pid PID) {
	if pid.c != nil {
		unlink(p.c, pid.c)
		p.c.sys.trace(TraceEvent{Kind: TraceUnlink, PID: p.Self(), Peer: pid})
	}
}

// Monitor starts monitoring pid. A Down arrives (as an info message) when it
// completes, at once with Err(ErrNoProc) if it is already dead.
func (p *Proc) Monitor(pid PID) MonitorRef {
	ref := MonitorRef{id: p.c.sys.ids.next(), target: pid}
	if p.active == nil {
		p.active = make(map[uint64]struct{})
	}
	p.active[ref.id] = struct{}{}
	p.c.sys.trace(TraceEvent{Kind: TraceMonitor, PID: p.Self(), Peer: pid, Seq: ref.id})
	if pid.c == nil || !pid.c.addMonitor(ref.id, p.c) {
		p.c.impl.deliverSystem(Down{Ref: ref, PID: pid, Outcome: ErrOutcome(ErrNoProc)})
	}
	return ref
}

// Demonitor stops a monitor. With flush, a Down for it that is already on
// its way is removed too, so none is ever handled after Demonitor returns.
// It reports whether the monitor was active.
func (p *Proc) Demonitor(ref MonitorRef, flush bool) bool {
	if _, ok := p.active[ref.id]; !ok {
		return false
	}
	delete(p.active, ref.id)
	p.c.sys.trace(TraceEvent{Kind: TraceDemonitor, PID: p.Self(), Peer: ref.target, Seq: ref.id})
	if ref.target.c != nil && ref.target.c.removeMonitor(ref.id) {
		return true
	}
	if flush {
		if p.flushed == nil {
			p.flushed = make(map[uint64]struct{})
		}
		p.flushed[ref.id] = struct{}{}
	}
	return true
}

// SendAfter delivers info to this process after d on the executor's clock.
func (p *Proc) SendAfter(d time.Duration, info any) Timer {
	c := p.c
	return c.sys.ex.AfterFunc(d, func() { c.impl.deliverSystem(info) })
}

// admitDown filters a Down through the monitor table: flushed Downs vanish.
func (p *Proc) admitDown(d Down) bool {
	if _, ok := p.flushed[d.Ref.id]; ok {
		delete(p.flushed, d.Ref.id)
		return false
	}
	delete(p.active, d.Ref.id)
	return true
}

func (o *options) apply(opts []Option) {
	o.capacity, o.stopTimeout = DefaultMailboxCapacity, DefaultStopTimeout
	for _, f := range opts {
		f(o)
	}
	if o.capacity <= 0 {
		o.capacity = DefaultMailboxCapacity
	}
}

// start creates, initialises and launches a process. Init runs on the
// caller's goroutine: Start is synchronous and costs no goroutine hand-off.
//
// s comes with its behaviour and handle set. Everything a process needs
// lives in its one server allocation (handle, actor adapter, mailbox,
// callbacks), and its goroutine, receive parker and run closure are made
// only once it is first activated: a process nobody talks to costs one
// allocation.
func start[Q, R, C any](ctx context.Context, scope *Scope, s *server[Q, R, C], opts []Option) (*server[Q, R, C], error) {
	if scope == nil {
		return nil, ErrNilScope
	}
	s.opts.apply(opts)
	o := &s.opts
	s.core.init(scope.sys, scope, o.name)
	s.core.impl = s
	s.core.trapExit = o.trap
	s.mb.init(scope.sys.ex, o.capacity, s, scope.sys.tracer != nil)
	s.proc.c = &s.core

	if err := scope.add(&s.core); err != nil {
		return nil, err
	}
	scope.sys.trace(TraceEvent{Kind: TraceSpawn, PID: s.pid()})
	for _, l := range o.links {
		if l.c == nil || link(&s.core, l.c) != nil {
			return nil, s.failStart(ErrOutcome(ErrNoProc))
		}
		scope.sys.trace(TraceEvent{Kind: TraceLink, PID: s.pid(), Peer: l})
	}
	for _, bind := range o.binds {
		if err := bind(s.pid()); err != nil {
			return nil, s.failStart(ErrOutcome(err))
		}
	}
	// Cancellation requested before init began skips init.
	if ctx.Err() != nil {
		return nil, s.failStart(CancelledOutcome(CancelReason{Kind: CancelRequested}))
	}
	if s.stopping.Load() {
		return nil, s.failStart(CancelledOutcome(s.cancelReason()))
	}
	if out := s.runInit(ctx); !out.IsOk() {
		return nil, s.failStart(out)
	}
	if s.stopping.Load() {
		// Cancelled (or killed) while init ran: the instance never serves.
		return nil, s.failStart(CancelledOutcome(s.cancelReason()))
	}
	// Read before arm: from arm on, the process goroutine owns s.proc.
	x := s.proc.ext
	wake := x != nil && (len(x.cont) > 0 || x.idle.asked)
	s.mb.arm()
	if wake {
		// Init asked for a continuation or an idle timeout: the process
		// goroutine must start now, not on its first message.
		s.mb.interrupt()
	}
	return s, nil
}

// runInit runs Init under the init budget, which applies only while Init
// runs (the message loop starts with a fresh context).
func (s *server[Q, R, C]) runInit(ctx context.Context) Outcome {
	var deadline time.Time
	if d := s.opts.initTimeout; d > 0 {
		deadline = s.sys.ex.Now().Add(d)
	}
	s.proc.startCtx = ctx
	s.proc.enter(phaseInit, deadline)
	out := protect(func() error { return s.beh.Init(&s.proc) })
	if x := s.proc.ext; x != nil && x.failed.Severity > Ok {
		out = Join(out, x.failed)
	}
	expired := s.proc.budgetExpired()
	s.proc.enter(phaseRun, time.Time{})
	s.proc.startCtx = nil
	if expired {
		// Init overran its budget: whatever it returned, the start failed
		// with a timeout (OTP's start_link timeout), and failStart undoes
		// what init did (names, links, children). A panic stays worse.
		if out.Severity == Err {
			out = Outcome{}
		}
		return Join(out, CancelledOutcome(CancelReason{Kind: CancelTimeout}))
	}
	if out.Severity == Err {
		// Init gave up because it was told to: that is cancellation, not an
		// application error.
		switch {
		case ctx.Err() != nil:
			return CancelledOutcome(CancelReason{Kind: CancelRequested})
		case s.stopping.Load():
			return CancelledOutcome(s.cancelReason())
		}
	}
	return out
}

// failStart completes a process that never ran: no links are signalled (the
// spawner gets the error synchronously), names are released, monitors get
// their Down, and the scope forgets it.
func (s *server[Q, R, C]) failStart(o Outcome) error {
	s.mu.Lock()
	links := s.links
	s.links = nil
	s.mu.Unlock()
	for _, l := range links {
		unlink(&s.core, l)
	}
	s.abandon(o)
	if s.proc.children != nil {
		_, _ = s.proc.children.Close(context.Background())
	}
	s.finish(o)
	s.sys.trace(TraceEvent{Kind: TraceInitFailed, PID: s.pid(), Outcome: o})
	s.scope.quiescent(&s.core)
	if got, _ := s.pid().Outcome(); got.Severity != o.Severity {
		o = got // killed during init: report what the process actually is
	}
	return &StartError{PID: s.pid(), Outcome: o}
}

// protect runs f, turning a panic into a Panicked outcome with its stack.
func protect(f func() error) (o Outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = PanickedOutcome(r, debug.Stack())
		}
	}()
	if err := f(); err != nil {
		return ErrOutcome(err)
	}
	return Outcome{}
}

// launch starts the process goroutine (the mailbox's first activation).
func (s *server[Q, R, C]) launch() { s.sys.ex.Go(s.run) }

func (s *server[Q, R, C]) barrier(e *envelope[Q, R, C]) { s.hold(e) }

func (s *server[Q, R, C]) pushed(e *envelope[Q, R, C]) { s.stamp(e) }

func (s *server[Q, R, C]) hold(e *envelope[Q, R, C]) {
	if e.kind == envCall {
		s.held = heldCall[R]{slot: e.slot, gen: e.gen}
	}
}

// stamp numbers a committed envelope and traces the send.
func (s *server[Q, R, C]) stamp(e *envelope[Q, R, C]) {
	s.pushSeq++
	e.seq = s.pushSeq
	s.sys.trace(TraceEvent{Kind: TraceSend, PID: s.pid(), Peer: PID{e.from}, Seq: e.seq, Detail: e.kind.String()})
}

// sender returns the process a send comes from, while tracing.
func (s *server[Q, R, C]) sender(ctx context.Context) *core {
	if s.sys.tracer == nil || ctx == nil {
		return nil
	}
	return callerOf(ctx)
}

func (s *server[Q, R, C]) interrupt() { s.mb.interrupt() }

func (s *server[Q, R, C]) deliverSystem(msg any) bool {
	return s.mb.pushSystem(envelope[Q, R, C]{kind: envInfo, info: msg, sys: true})
}

// abandon fails every pending obligation at once: queued calls, the call in
// hand and deferred replies. Casts still queued are dropped (traced).
func (s *server[Q, R, C]) abandon(o Outcome) (idle bool) {
	var calls []heldCall[R]
	dropped := 0
	idle = s.mb.closeAndTake(func(e *envelope[Q, R, C]) {
		if e.kind == envCall {
			calls = append(calls, heldCall[R]{slot: e.slot, gen: e.gen})
		} else {
			dropped++
		}
	}, func() {
		if s.held.slot != nil {
			calls = append(calls, s.held)
		}
	})
	s.abortCalls(calls, o)
	s.abortDeferred(o)
	if dropped > 0 {
		s.sys.trace(TraceEvent{Kind: TraceMessageDropped, PID: s.pid(), Outcome: o, Detail: fmt.Sprintf("%d messages dropped at kill", dropped)})
	}
	return idle
}

func (s *server[Q, R, C]) abortCalls(calls []heldCall[R], o Outcome) {
	var zero R
	for _, h := range calls {
		if h.slot.resolve(h.gen, zero, &CallError{Kind: CallServerStopped, Target: s.pid(), Server: o}) {
			s.sys.trace(TraceEvent{Kind: TraceCallAborted, PID: s.pid(), Outcome: o})
		}
	}
}

func (s *server[Q, R, C]) abortDeferred(o Outcome) {
	s.dmu.Lock()
	d := s.deferred
	s.deferred = nil
	s.dmu.Unlock()
	if s.sys.tracer != nil {
		for _, h := range d {
			if h.slot.pending(h.gen) {
				s.sys.trace(TraceEvent{Kind: TraceObligation, PID: s.pid(), Seq: h.id, Outcome: o, Detail: "abort-on-stop"})
			}
		}
	}
	s.abortCalls(d, o)
}

func (s *server[Q, R, C]) deferCall(slot *callSlot[R], gen uint64) *Deferred[R] {
	s.deferNow = true
	d := &Deferred[R]{slot: slot, gen: gen}
	if s.sys.tracer != nil {
		d.sys, d.pid, d.id = s.sys, s.pid(), s.sys.ids.next()
		s.sys.trace(TraceEvent{Kind: TraceObligation, PID: s.pid(), Seq: d.id, Detail: "defer"})
	}
	s.dmu.Lock()
	if len(s.deferred) >= 32 && len(s.deferred) == cap(s.deferred) {
		live := s.deferred[:0]
		for _, h := range s.deferred {
			if h.slot.pending(h.gen) {
				live = append(live, h)
			}
		}
		s.deferred = live
	}
	s.deferred = append(s.deferred, heldCall[R]{slot: slot, gen: gen, id: d.id})
	s.dmu.Unlock()
	if s.sys.deterministic {
		return d // leaks are the lab's oracles' business, not the GC's
	}
	sys, pid := s.sys, s.pid()
	runtime.AddCleanup(d, func(h heldCall[R]) {
		var zero R
		if h.slot.resolve(h.gen, zero, &CallError{Kind: CallNoReply, Target: pid}) {
			sys.trace(TraceEvent{Kind: TraceObligationLeak, PID: pid, Outcome: violationOutcome(ErrNoReply),
				Detail: "reply obligation dropped without a reply"})
		}
	}, heldCall[R]{slot: slot, gen: gen})
	return d
}

type termKind uint8

const (
	termCancel termKind = iota // cancellation requested: drain, stop hook
	termExit                   // Proc.Exit(nil): drain, stop hook
	termFail                   // handler error or panic: no drain
)

// run is the process goroutine: the message loop, then termination.
func (s *server[Q, R, C]) run() {
	defer s.scope.quiescent(&s.core)
	returned := false
	defer func() {
		if !returned {
			// A handler called runtime.Goexit (t.FailNow in a test, for
			// one), which no recover stops. The process still completes,
			// Panicked, as if killed: its callers are answered, its
			// children killed, its links and monitors told.
			o := violationOutcome(ErrGoexit)
			s.abandon(o)
			s.mu.Lock()
			children := s.children
			s.mu.Unlock()
			if children != nil {
				children.kill()
			}
			s.finish(o)
		}
	}()
	kind, out, rest := s.loop()
	s.terminate(kind, out, rest)
	returned = true
}

func (s *server[Q, R, C]) loop() (termKind, Outcome, []envelope[Q, R, C]) {
	// What Init asked for: continuations first, then its idle timeout.
	if kind, out, stop := s.afterCallback(); stop {
		return kind, out, nil
	}
	for {
		batch, ok := s.mb.take(s.batch[:0])
		s.batch = batch
		if !ok {
			return termCancel, Outcome{}, nil
		}
		for i := range batch {
			if s.stopping.Load() {
				return termCancel, Outcome{}, batch[i:]
			}
			if x := s.proc.ext; x != nil && x.idle.armed && !batch[i].sys {
				x.idle.disarm() // a user message arrived in time
			}
			if out := s.dispatch(&batch[i]); !out.IsOk() {
				return termFail, out, batch[i+1:]
			}
			if kind, out, stop := s.afterCallback(); stop {
				return kind, out, batch[i+1:]
			}
		}
		clear(batch)
		if s.stopping.Load() {
			return termCancel, Outcome{}, nil
		}
	}
}

// afterCallback runs what the callback that just returned asked for: its
// continuations, in order, before any other message, then its idle
// timeout. It reports whether the process must stop, and how.
func (s *server[Q, R, C]) afterCallback() (termKind, Outcome, bool) {
	if x := s.proc.ext; x != nil {
		for len(x.cont) > 0 && !s.proc.exitReq && !s.stopping.Load() {
			f := x.cont[0]
			x.cont = x.cont[1:]
			if out := s.runContinue(f); !out.IsOk() {
				x.cont = nil
				return termFail, out, true
			}
		}
		x.cont = nil
	}
	if s.proc.exitReq {
		if s.proc.exitErr != nil {
			return termFail, ErrOutcome(s.proc.exitErr), true
		}
		return termExit, Outcome{}, true
	}
	if x := s.proc.ext; x != nil && x.idle.asked {
		x.idle.asked = false
		s.armIdle(&x.idle)
	}
	return 0, Outcome{}, false
}

// runContinue runs one continuation, recovering a panic into Panicked.
func (s *server[Q, R, C]) runContinue(f func(*Proc) error) (o Outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = PanickedOutcome(r, debug.Stack())
		}
	}()
	if err := f(&s.proc); err != nil {
		return ErrOutcome(err)
	}
	return Outcome{}
}

// armIdle starts the idle timeout the last callback asked for. The timer
// delivers a system message stamped with the arming's generation, so a
// timer that fires after a user message has disarmed it is recognised and
// dropped.
func (s *server[Q, R, C]) armIdle(st *idleState) {
	st.disarm()
	if st.after <= 0 {
		return
	}
	st.gen++
	st.armed = true
	gen := st.gen
	st.timer = s.sys.ex.AfterFunc(st.after, func() { s.deliverSystem(idleFire{gen: gen}) })
}

// dispatch runs one handler, recovering a panic into Panicked.
func (s *server[Q, R, C]) dispatch(e *envelope[Q, R, C]) (o Outcome) {
	if s.sys.tracer != nil {
		s.sys.trace(TraceEvent{Kind: TraceHandle, PID: s.pid(), Seq: e.seq, Detail: e.kind.String()})
		defer func() { s.sys.trace(TraceEvent{Kind: TraceHandled, PID: s.pid(), Seq: e.seq, Outcome: o}) }()
	}
	defer func() {
		if r := recover(); r != nil {
			o = PanickedOutcome(r, debug.Stack())
		}
	}()
	if s.sys.faults != nil && e.kind != envInfo && s.sys.fault(FaultCrash, s.pid()) {
		panic(ErrInjectedCrash)
	}
	var err error
	switch e.kind {
	case envCast:
		err = s.beh.HandleCast(&s.proc, e.cast)
	case envCall:
		if !e.slot.pending(e.gen) {
			// The caller gave up before we began: the obligation is already
			// aborted and nobody would receive the reply.
			return Outcome{}
		}
		s.deferNow = false
		v, rerr := s.beh.HandleCall(&s.proc, e.req, ReplyTo[R]{srv: s, slot: e.slot, gen: e.gen})
		if !s.deferNow {
			e.slot.resolve(e.gen, v, rerr)
		}
	case envInfo:
		info := e.info
		switch m := info.(type) {
		case Down:
			if !s.proc.admitDown(m) {
				return Outcome{}
			}
		case idleFire:
			x := s.proc.ext
			if x == nil || !x.idle.armed || m.gen != x.idle.gen {
				return Outcome{} // disarmed by a user message, or superseded
			}
			x.idle.armed = false
			info = IdleTimeout{After: x.idle.after}
		}
		err = s.beh.HandleInfo(&s.proc, info)
	}
	if err != nil {
		return ErrOutcome(err)
	}
	return Outcome{}
}

// terminate runs the stop protocol: close the mailbox, drain (for
// cancellation and normal exit) under a masked, budgeted context, run the
// stop hook, close the process's own children scope, fail what is still
// pending, and complete.
func (s *server[Q, R, C]) terminate(kind termKind, out Outcome, rest []envelope[Q, R, C]) {
	s.mb.close()
	if x := s.proc.ext; x != nil {
		x.idle.disarm()
		x.cont = nil
	}
	cur, dead := s.pid().Outcome()
	if r := s.cancelReason(); !dead && r.Kind == CancelKill {
		// A kill is under way on the killer's goroutine: its reason is set
		// (which woke us), the outcome not yet. The killer abandons what is
		// queued and completes the process; the stop hook must not run.
		cur, dead = CancelledOutcome(r), true
	}
	if dead {
		// Killed: abandon already failed what was queued and killed the
		// children (or is doing so); fail what we hold and wait for the
		// children to go.
		s.abortEnvelopes(rest, cur)
		if s.proc.children != nil {
			ctx, cancel := WithTimeout(context.Background(), s.sys.ex, s.opts.stopTimeout)
			_, _ = s.proc.children.Close(ctx)
			cancel()
		}
		return
	}
	if kind == termFail && s.held.slot != nil {
		// The call whose handler failed gets its answer now, before the
		// stop hook runs: a crashed server never makes a caller wait out
		// its timeout. (Resolved calls ignore this: generations differ.)
		s.abortCalls([]heldCall[R]{s.held}, out)
	}
	// acc accumulates the outcome: the termination cause, then whatever goes
	// wrong during drain and the stop hook (a completed outcome only ever
	// gets worse, never better).
	acc := out
	if kind == termCancel {
		acc = Join(CancelledOutcome(s.cancelReason()), out)
	}
	// Drain and the stop hook run masked, under the stop budget.
	s.proc.enter(phaseStop, s.sys.ex.Now().Add(s.opts.stopTimeout))
	s.drain(&acc, rest, kind == termFail)
	s.stopHook(&acc)
	s.proc.enter(phaseRun, time.Time{})
	if kind == termCancel {
		// A stronger cancel may have arrived while we drained.
		acc = Join(acc, CancelledOutcome(s.cancelReason()))
	}
	s.abortDeferred(acc)
	s.finish(acc)
}

// drain handles what is left once the mailbox is closed, which bounds it by
// capacity (INV-7). On failure nothing runs: the broken instance only fails
// its callers. Otherwise casts and infos are handled in order while the
// budget lasts, and calls are never executed: their obligations are aborted
// in mailbox order. Kept out of line so the process goroutine's stack stays
// small while it runs.
//
//go:noinline
func (s *server[Q, R, C]) drain(acc *Outcome, batch []envelope[Q, R, C], skip bool) {
	for {
		for i := range batch {
			if skip || s.proc.budgetExpired() {
				s.abortEnvelopes(batch[i:], *acc)
				break
			}
			if batch[i].kind == envCall {
				s.abortEnvelopes(batch[i:i+1], *acc)
				continue
			}
			if o := s.dispatch(&batch[i]); !o.IsOk() {
				*acc = Join(*acc, o)
				skip = o.Severity == Panicked
			}
		}
		clear(batch)
		if batch = s.mb.tryTake(s.batch[:0]); len(batch) == 0 {
			return
		}
		s.batch = batch
	}
}

// stopHook runs Terminate, then closes the process's own children scope.
//
//go:noinline
func (s *server[Q, R, C]) stopHook(acc *Outcome) {
	final := *acc
	*acc = Join(*acc, protect(func() error { s.beh.Terminate(&s.proc, final); return nil }))
	// What the process declared with Fail (in a handler or in the stop
	// hook) is its own verdict: it goes in before what its children did.
	if x := s.proc.ext; x != nil {
		*acc = Join(*acc, x.failed)
	}
	if s.proc.children != nil {
		// An owner that closed its children itself (a supervisor, with
		// CloseKilled) has its answer: closing again would wait for the
		// goroutines it chose not to wait for.
		co, err, done := s.proc.children.closedResult()
		if !done {
			co, err = s.proc.children.Close(s.proc.Ctx())
		}
		if err != nil {
			co = Join(co, ErrOutcome(err))
		}
		// Children the process stopped itself are its business; a child that
		// failed is reported through the process only if it panicked.
		if co.Severity == Panicked {
			*acc = Join(*acc, co)
		}
	}
}

// abortEnvelopes fails the calls among es and traces dropped casts.
func (s *server[Q, R, C]) abortEnvelopes(es []envelope[Q, R, C], o Outcome) {
	var calls []heldCall[R]
	dropped := 0
	for i := range es {
		if es[i].kind == envCall {
			calls = append(calls, heldCall[R]{slot: es[i].slot, gen: es[i].gen})
		} else {
			dropped++
		}
	}
	s.abortCalls(calls, o)
	if dropped > 0 {
		s.sys.trace(TraceEvent{Kind: TraceMessageDropped, PID: s.pid(), Outcome: o, Detail: fmt.Sprintf("%d messages dropped", dropped)})
	}
}

// ---- references ----

// ServerRef is the typed handle of a GenServer.
type ServerRef[Q, R, C any] struct{ s *server[Q, R, C] }

// StartServer starts a GenServer in scope and returns once Init succeeded,
// or returns Init's failure as a *StartError with nothing left behind.
func StartServer[Q, R, C any](ctx context.Context, scope *Scope, beh Server[Q, R, C], opts ...Option) (*ServerRef[Q, R, C], error) {
	s := &server[Q, R, C]{beh: beh}
	s.sref.s = s
	s.core.handle = &s.sref
	if _, err := start(ctx, scope, s, opts); err != nil {
		return nil, err
	}
	return &s.sref, nil
}

// PID returns the server's PID.
func (r *ServerRef[Q, R, C]) PID() PID { return r.s.pid() }

// Resolve makes a ServerRef a Target of itself.
func (r *ServerRef[Q, R, C]) Resolve() (*ServerRef[Q, R, C], error) { return r, nil }

// Call sends req and waits for the reply. See CallError for the failures;
// an error returned by HandleCall is returned as is.
func (r *ServerRef[Q, R, C]) Call(ctx context.Context, req Q) (R, error) {
	return r.s.call(ctx, req, 0)
}

// CallTimeout is Call with a timeout on the executor's clock, like OTP's
// call/3. It is cheaper than a context with a deadline: the timer is reused
// from call to call.
func (r *ServerRef[Q, R, C]) CallTimeout(ctx context.Context, req Q, d time.Duration) (R, error) {
	if d <= 0 {
		var zero R
		return zero, &CallError{Kind: CallTimeout, Target: r.s.pid(), Cause: context.DeadlineExceeded}
	}
	return r.s.call(ctx, req, d)
}

func (s *server[Q, R, C]) call(ctx context.Context, req Q, timeout time.Duration) (R, error) {
	var zero R
	if callerOf(ctx) == &s.core {
		return zero, &CallError{Kind: CallCallingSelf, Target: s.pid()}
	}
	if ctx.Err() != nil {
		return zero, ctxCallError(ctx, s.pid())
	}
	slot := s.getSlot()
	if slot == nil {
		slot = &callSlot[R]{p: s.sys.ex.NewParker()}
	}
	gen := slot.begin()
	if err := s.mb.send(ctx, envelope[Q, R, C]{kind: envCall, req: req, slot: slot, gen: gen, from: s.sender(ctx)}, flagBarrier); err != nil {
		slot.abandon(gen)
		s.putSlot(slot)
		if errors.Is(err, ErrMailboxClosed) {
			return zero, s.stoppedError()
		}
		return zero, ctxCallError(ctx, s.pid())
	}
	if timeout > 0 {
		slot.arm(s.sys.ex, gen, timeout)
	}
	// Let the server run before we park: a quick reply then lands in our
	// parker as a permit and Park returns without blocking.
	runtime.Gosched()
	err := slot.p.Park(ctx)
	if timeout > 0 {
		slot.disarm()
	}
	if err == nil && slot.timedOut(gen) {
		s.putSlot(slot)
		return zero, &CallError{Kind: CallTimeout, Target: s.pid(), Cause: context.DeadlineExceeded}
	}
	if err != nil {
		if !slot.abandon(gen) {
			// A resolver or the timeout got there first and is unparking us:
			// collect that wake-up so it cannot leak into the slot's next
			// call. Cancellation still maps to Cancelled deterministically.
			_ = slot.p.Park(context.Background())
			slot.val, slot.err = zero, nil
		}
		s.putSlot(slot)
		return zero, ctxCallError(ctx, s.pid())
	}
	v, rerr := slot.val, slot.err
	slot.val, slot.err = zero, nil
	s.putSlot(slot)
	return v, rerr
}

// getSlot and putSlot pool reply slots. sync.Pool hands out what the GC and
// the per-processor caches happen to hold, which no seed controls, so under
// a deterministic executor every call gets a fresh slot instead.
func (s *server[Q, R, C]) getSlot() *callSlot[R] {
	if s.sys.deterministic {
		return nil
	}
	slot, _ := s.slots.Get().(*callSlot[R])
	return slot
}

func (s *server[Q, R, C]) putSlot(slot *callSlot[R]) {
	if !s.sys.deterministic {
		s.slots.Put(slot)
	}
}

func (s *server[Q, R, C]) stoppedError() *CallError {
	if o, dead := s.pid().Outcome(); dead {
		return &CallError{Kind: CallNoProc, Target: s.pid(), Server: o}
	}
	return &CallError{Kind: CallServerStopped, Target: s.pid()}
}

// Cast sends msg, waiting for room while the mailbox is full.
func (r *ServerRef[Q, R, C]) Cast(ctx context.Context, msg C) error {
	return r.s.castErr(r.s.mb.send(ctx, envelope[Q, R, C]{kind: envCast, cast: msg, from: r.s.sender(ctx)}, 0))
}

// TryCast sends msg if there is room, or returns CastError Full at once.
func (r *ServerRef[Q, R, C]) TryCast(msg C) error {
	if r.s.sys.faults != nil && r.s.sys.fault(FaultMailboxFull, r.s.pid()) {
		return r.s.castErr(ErrMailboxFull)
	}
	return r.s.castErr(r.s.mb.trySend(envelope[Q, R, C]{kind: envCast, cast: msg}, 0))
}

// Info sends an info message through the (bounded) mailbox.
func (r *ServerRef[Q, R, C]) Info(ctx context.Context, info any) error {
	return r.s.castErr(r.s.mb.send(ctx, envelope[Q, R, C]{kind: envInfo, info: info, from: r.s.sender(ctx)}, 0))
}

// Reserve takes a mailbox slot for a later cast (two-phase send).
func (r *ServerRef[Q, R, C]) Reserve(ctx context.Context) (*Permit[C], error) {
	return reservePermit[C](ctx, r.s)
}

// Stop stops the server gracefully and waits for its outcome.
func (r *ServerRef[Q, R, C]) Stop(ctx context.Context) (Outcome, error) { return r.PID().Stop(ctx) }

// Abort terminates the server immediately (see PID.Abort).
func (r *ServerRef[Q, R, C]) Abort() { r.PID().Abort() }

func (s *server[Q, R, C]) castErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrMailboxFull):
		return &CastError{Kind: CastFull, Target: s.pid()}
	case errors.Is(err, ErrMailboxClosed):
		return &CastError{Kind: CastServerStopped, Target: s.pid()}
	default:
		return &CastError{Kind: CastCancelled, Target: s.pid(), Cause: err}
	}
}

func (s *server[Q, R, C]) commitCast(msg C) error {
	return s.mb.commit(envelope[Q, R, C]{kind: envCast, cast: msg}, 0)
}

func (s *server[Q, R, C]) releaseSlot() { s.mb.release() }

func (s *server[Q, R, C]) reserveSlot(ctx context.Context) error { return s.mb.reserve(ctx) }

func (s *server[Q, R, C]) system() *System { return s.sys }

// Target is anything that resolves to a server: a *ServerRef, or a registry
// name reference (which resolves at each call and yields NoProc if unbound).
type Target[Q, R, C any] interface {
	Resolve() (*ServerRef[Q, R, C], error)
}

// Call resolves target and calls it (see ServerRef.Call).
func Call[Q, R, C any](ctx context.Context, target Target[Q, R, C], req Q) (R, error) {
	ref, err := target.Resolve()
	if err != nil {
		var zero R
		return zero, err
	}
	return ref.Call(ctx, req)
}

// Cast resolves target and casts to it (see ServerRef.Cast).
func Cast[Q, R, C any](ctx context.Context, target Target[Q, R, C], msg C) error {
	ref, err := target.Resolve()
	if err != nil {
		var ce *CallError
		if errors.As(err, &ce) && ce.Kind == CallNoProc {
			return &CastError{Kind: CastNoProc, Target: ce.Target, Cause: err}
		}
		return err
	}
	return ref.Cast(ctx, msg)
}

// Ref is the typed handle of a plain actor.
type Ref[M any] struct{ s *server[none, none, M] }

type actorServer[M any] struct {
	a    Actor[M]
	info InfoHandler
}

func (x *actorServer[M]) Init(p *Proc) error { return x.a.OnStart(p) }
func (x *actorServer[M]) HandleCall(*Proc, none, ReplyTo[none]) (none, error) {
	return none{}, nil
}
func (x *actorServer[M]) HandleCast(p *Proc, m M) error { return x.a.Handle(p, m) }
func (x *actorServer[M]) HandleInfo(p *Proc, i any) error {
	if x.info != nil {
		return x.info.HandleInfo(p, i)
	}
	return nil
}
func (x *actorServer[M]) Terminate(p *Proc, o Outcome) { x.a.OnStop(p, o) }

// Spawn starts an actor in scope and returns once OnStart succeeded, or
// returns its failure as a *StartError with nothing left behind.
func Spawn[M any](ctx context.Context, scope *Scope, a Actor[M], opts ...Option) (*Ref[M], error) {
	s := &server[none, none, M]{}
	s.adapter.a = a
	s.adapter.info, _ = a.(InfoHandler)
	s.beh = &s.adapter
	s.aref.s = s
	s.core.handle = &s.aref
	if _, err := start(ctx, scope, s, opts); err != nil {
		return nil, err
	}
	return &s.aref, nil
}

// PID returns the actor's PID.
func (r *Ref[M]) PID() PID { return r.s.pid() }

// Send commits msg, waiting while the mailbox is full. It fails with
// ErrMailboxClosed once the actor is stopping, or with ctx's error.
func (r *Ref[M]) Send(ctx context.Context, msg M) error {
	return r.s.mb.send(ctx, envelope[none, none, M]{kind: envCast, cast: msg, from: r.s.sender(ctx)}, 0)
}

// TrySend commits msg if there is room and returns ErrMailboxFull otherwise.
func (r *Ref[M]) TrySend(msg M) error {
	if r.s.sys.faults != nil && r.s.sys.fault(FaultMailboxFull, r.s.pid()) {
		return ErrMailboxFull
	}
	return r.s.mb.trySend(envelope[none, none, M]{kind: envCast, cast: msg}, 0)
}

// Reserve takes a mailbox slot for a later Send (two-phase send).
func (r *Ref[M]) Reserve(ctx context.Context) (*Permit[M], error) {
	return reservePermit[M](ctx, r.s)
}

// Stop stops the actor gracefully and waits for its outcome.
func (r *Ref[M]) Stop(ctx context.Context) (Outcome, error) { return r.PID().Stop(ctx) }

// Abort terminates the actor immediately (see PID.Abort).
func (r *Ref[M]) Abort() { r.PID().Abort() }

// Pending reports the user messages queued and the permits reserved.
func (r *Ref[M]) Pending() (queued, reserved int) {
	u, _, res := r.s.mb.len()
	return u, res
}

type slotOwner[M any] interface {
	reserveSlot(ctx context.Context) error
	commitCast(M) error
	releaseSlot()
	system() *System
	pid() PID
}

// Permit is a reserved mailbox slot: the first phase of a two-phase send.
// Commit it with Send or give it back with Abort. A permit that becomes
// unreachable unused releases its slot and is traced as an obligation leak.
type Permit[M any] struct {
	st    *permitState
	owner slotOwner[M]
	id    uint64 // while tracing
}

func (p *Permit[M]) trace(what string) {
	if sys := p.owner.system(); sys.tracer != nil {
		sys.trace(TraceEvent{Kind: TracePermit, PID: p.owner.pid(), Seq: p.id, Detail: what})
	}
}

type permitState struct{ done atomic.Bool }

// ErrPermitUsed is returned when a permit is used after Send or Abort.
const ErrPermitUsed sentinel = "actor: permit already used"

func reservePermit[M any](ctx context.Context, owner slotOwner[M]) (*Permit[M], error) {
	if err := owner.reserveSlot(ctx); err != nil {
		return nil, err
	}
	p := &Permit[M]{st: &permitState{}, owner: owner}
	if sys := owner.system(); sys.tracer != nil {
		p.id = sys.ids.next()
		sys.trace(TraceEvent{Kind: TracePermit, PID: owner.pid(), Seq: p.id, Detail: "reserve"})
	}
	if owner.system().deterministic {
		return p, nil // a dropped permit is the lab's oracles' business
	}
	runtime.AddCleanup(p, func(st *permitState) {
		if st.done.CompareAndSwap(false, true) {
			owner.releaseSlot()
			owner.system().trace(TraceEvent{Kind: TraceObligationLeak, PID: owner.pid(),
				Outcome: violationOutcome(ErrPermitUsed), Detail: "send permit dropped without send or abort"})
		}
	}, p.st)
	return p, nil
}

// Send commits the reserved slot with msg.
func (p *Permit[M]) Send(msg M) error {
	if !p.st.done.CompareAndSwap(false, true) {
		return ErrPermitUsed
	}
	p.trace("commit")
	return p.owner.commitCast(msg)
}

// Abort releases the reserved slot.
func (p *Permit[M]) Abort() {
	if p.st.done.CompareAndSwap(false, true) {
		p.trace("abort")
		p.owner.releaseSlot()
	}
}
