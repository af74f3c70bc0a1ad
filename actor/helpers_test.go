package actor_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// bubble runs f in a testing/synctest bubble: time is virtual, and a test
// whose goroutines all block forever fails at once with a deadlock report
// instead of hanging.
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

// collectUntil runs the garbage collector until cond holds. The runtime
// runs cleanups on a goroutine of its own, after the collection that finds
// their object unreachable, and outside any bubble: how many collections
// and yields that goroutine needs depends on how busy the machine is, so
// the loop counts none. The minute is only a hang guard for a cleanup that
// never comes, far above the milliseconds it takes.
func collectUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen after a minute of garbage collections", what)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// newSys creates a System on the production executor and closes it when the
// test ends (tests close it explicitly too where the outcome matters; Close
// is idempotent).
func newSys(t *testing.T, opts ...actor.SystemOption) *actor.System {
	t.Helper()
	all := append([]actor.SystemOption{actor.WithExecutor(actor.NewExecutor(1))}, opts...)
	sys := actor.NewSystem(all...)
	t.Cleanup(func() { _, _ = sys.Close(context.Background()) })
	return sys
}

// closeSys closes sys and fails the test if Close reports an error.
func closeSys(t *testing.T, sys *actor.System) actor.Outcome {
	t.Helper()
	o, err := sys.Close(context.Background())
	if err != nil {
		t.Fatalf("System.Close: %v", err)
	}
	return o
}

// ---- the test actor: messages are closures run on the process ----

type fn = func(p *actor.Proc) error

// fnActor is an Actor[fn] whose hooks are optional closures.
type fnActor struct {
	start func(p *actor.Proc) error
	stop  func(p *actor.Proc, o actor.Outcome)
	info  func(p *actor.Proc, info any) error
}

func (a *fnActor) OnStart(p *actor.Proc) error {
	if a.start != nil {
		return a.start(p)
	}
	return nil
}

func (a *fnActor) Handle(p *actor.Proc, f fn) error { return f(p) }

func (a *fnActor) OnStop(p *actor.Proc, o actor.Outcome) {
	if a.stop != nil {
		a.stop(p, o)
	}
}

func (a *fnActor) HandleInfo(p *actor.Proc, info any) error {
	if a.info != nil {
		return a.info(p, info)
	}
	return nil
}

func spawn(t *testing.T, scope *actor.Scope, a *fnActor, opts ...actor.Option) *actor.Ref[fn] {
	t.Helper()
	ref, err := actor.Spawn[fn](context.Background(), scope, a, opts...)
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	return ref
}

// probe is a process that reports every info message (Down, Exit, timers)
// and every outcome of its stop hook on channels.
type probe struct {
	ref   *actor.Ref[fn]
	infos chan any
	stops chan actor.Outcome
}

func spawnProbe(t *testing.T, scope *actor.Scope, opts ...actor.Option) *probe {
	t.Helper()
	pr := &probe{infos: make(chan any, 1024), stops: make(chan actor.Outcome, 1)}
	pr.ref = spawn(t, scope, &fnActor{
		info: func(_ *actor.Proc, info any) error { pr.infos <- info; return nil },
		stop: func(_ *actor.Proc, o actor.Outcome) { pr.stops <- o },
	}, opts...)
	return pr
}

func (pr *probe) pid() actor.PID { return pr.ref.PID() }

// do runs f on the process ref and waits until it has run.
func do(t *testing.T, ref *actor.Ref[fn], f func(p *actor.Proc)) {
	t.Helper()
	done := make(chan struct{})
	if err := ref.Send(context.Background(), func(p *actor.Proc) error {
		defer close(done)
		f(p)
		return nil
	}); err != nil {
		t.Fatalf("send to %v: %v", ref.PID(), err)
	}
	<-done
}

// noInfo asserts that pr has received no info message so far. A round trip
// through the probe first makes sure everything queued before it was handled.
func (pr *probe) noInfo(t *testing.T) {
	t.Helper()
	do(t, pr.ref, func(*actor.Proc) {})
	select {
	case info := <-pr.infos:
		t.Fatalf("unexpected info message %#v", info)
	default:
	}
}

// blocker returns a message whose handler signals entered and then waits for
// release, ignoring its context; release may be called more than once.
func blocker() (msg fn, entered <-chan struct{}, release func()) {
	in := make(chan struct{})
	rel := make(chan struct{})
	var once sync.Once
	msg = func(*actor.Proc) error {
		close(in)
		<-rel
		return nil
	}
	return msg, in, func() { once.Do(func() { close(rel) }) }
}

// block sends a blocker to ref and returns once the process is inside it,
// with an empty mailbox behind it.
func block(t *testing.T, ref *actor.Ref[fn]) (release func()) {
	t.Helper()
	msg, entered, release := blocker()
	if err := ref.Send(context.Background(), msg); err != nil {
		t.Fatalf("send blocker: %v", err)
	}
	<-entered
	return release
}

// ---- tracing ----

type traceLog struct {
	mu  sync.Mutex
	evs []actor.TraceEvent
}

func (l *traceLog) opt() actor.SystemOption { return actor.WithTracer(l.record) }

func (l *traceLog) record(ev actor.TraceEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *traceLog) events() []actor.TraceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]actor.TraceEvent(nil), l.evs...)
}

func (l *traceLog) of(kind actor.TraceKind) []actor.TraceEvent {
	var out []actor.TraceEvent
	for _, ev := range l.events() {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// ---- the test GenServer: requests are closures run on the server ----

type call = func(p *actor.Proc, from actor.ReplyTo[int]) (int, error)
type cast = func(p *actor.Proc) error
type srvRef = actor.ServerRef[call, int, cast]

type fnServer struct {
	calls atomic.Int64 // HandleCall invocations
	init  func(p *actor.Proc) error
	term  func(p *actor.Proc, o actor.Outcome)
	info  func(p *actor.Proc, info any) error
}

func (s *fnServer) Init(p *actor.Proc) error {
	if s.init != nil {
		return s.init(p)
	}
	return nil
}

func (s *fnServer) HandleCall(p *actor.Proc, req call, from actor.ReplyTo[int]) (int, error) {
	s.calls.Add(1)
	return req(p, from)
}

func (s *fnServer) HandleCast(p *actor.Proc, msg cast) error { return msg(p) }

func (s *fnServer) HandleInfo(p *actor.Proc, info any) error {
	if s.info != nil {
		return s.info(p, info)
	}
	return nil
}

func (s *fnServer) Terminate(p *actor.Proc, o actor.Outcome) {
	if s.term != nil {
		s.term(p, o)
	}
}

func startServer(t *testing.T, scope *actor.Scope, s *fnServer, opts ...actor.Option) *srvRef {
	t.Helper()
	ref, err := actor.StartServer[call, int, cast](context.Background(), scope, s, opts...)
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	return ref
}

// reply is a call that answers v by return.
func reply(v int) call {
	return func(*actor.Proc, actor.ReplyTo[int]) (int, error) { return v, nil }
}

type callResult struct {
	v   int
	err error
	at  time.Time // when Call returned (virtual time in a bubble)
}

// goCall runs ref.Call on a new goroutine and returns its result channel.
func goCall(ctx context.Context, ref *srvRef, req call) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		v, err := ref.Call(ctx, req)
		ch <- callResult{v, err, time.Now()}
	}()
	return ch
}

// callErr returns err as a *CallError or fails.
func callErr(t *testing.T, err error) *actor.CallError {
	t.Helper()
	var ce *actor.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *actor.CallError", err, err)
	}
	return ce
}

// ready reports whether ch already holds a value (without blocking).
func ready[T any](ch <-chan T) (T, bool) {
	select {
	case v := <-ch:
		return v, true
	default:
		var zero T
		return zero, false
	}
}
