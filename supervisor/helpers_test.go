package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

var (
	errBoom  = errors.New("boom")
	errStart = errors.New("cannot start")
)

// cmd is what a test tells a worker to do.
type cmd int

const (
	cmdFail  cmd = iota + 1 // Handle returns an error: Outcome Err
	cmdPanic                // Handle panics: Outcome Panicked
	cmdExit                 // p.Exit(nil): Outcome Ok
)

type crashNow struct{}

// instance says how one instance of a test child behaves.
type instance struct {
	startErr       error         // OnStart fails with it
	startPanic     bool          // OnStart panics
	crash          bool          // fails (Err) right after starting
	stopDelay      time.Duration // OnStop takes this long (cooperatively)
	ignoreShutdown bool          // OnStop blocks for an hour, deaf to its context
}

// env is one test's world: a system on a seeded production executor inside
// a synctest bubble, and a recorder of what the children did.
type env struct {
	t   *testing.T
	ctx context.Context
	sys *actor.System
	ex  actor.Executor

	mu     sync.Mutex
	events []string
	refs   map[string]*actor.Ref[cmd]
	starts map[string]int
	plans  map[string]func(n int) instance
	logged []supervisor.LogEntry
}

// bubble runs f in virtual time with a fresh system seeded with seed.
func bubble(t *testing.T, seed uint64, f func(t *testing.T, e *env)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		ex := actor.NewExecutor(seed)
		e := &env{
			t:      t,
			ctx:    context.Background(),
			sys:    actor.NewSystem(actor.WithExecutor(ex)),
			ex:     ex,
			refs:   make(map[string]*actor.Ref[cmd]),
			starts: make(map[string]int),
			plans:  make(map[string]func(int) instance),
		}
		f(t, e)
		if _, err := e.sys.Close(context.Background()); err != nil {
			t.Errorf("system close: %v", err)
		}
	})
}

func (e *env) event(s string) {
	e.mu.Lock()
	e.events = append(e.events, s)
	e.mu.Unlock()
}

// takeEvents returns and clears the children's life-cycle events.
func (e *env) takeEvents() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev := e.events
	e.events = nil
	return ev
}

// onLog is a Spec.OnLog that keeps every entry, including those recorded
// after the supervisor can no longer be called.
func (e *env) onLog(entry supervisor.LogEntry) {
	e.mu.Lock()
	e.logged = append(e.logged, entry)
	e.mu.Unlock()
}

func (e *env) hooked() []supervisor.LogEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]supervisor.LogEntry(nil), e.logged...)
}

// plan sets how the nth instance (from 1) of child id behaves.
func (e *env) plan(id string, f func(n int) instance) {
	e.mu.Lock()
	e.plans[id] = f
	e.mu.Unlock()
}

// spec is a Permanent worker child whose instances follow its plan.
func (e *env) spec(id string) supervisor.ChildSpec {
	return supervisor.ChildSpec{ID: id, Start: e.starter(id)}
}

func (e *env) starter(id string) func(context.Context, *actor.Scope) (actor.PID, error) {
	return func(ctx context.Context, scope *actor.Scope) (actor.PID, error) {
		e.mu.Lock()
		e.starts[id]++
		n := e.starts[id]
		var in instance
		if f := e.plans[id]; f != nil {
			in = f(n)
		}
		e.mu.Unlock()
		ref, err := actor.Spawn[cmd](ctx, scope, &worker{e: e, id: id, in: in}, actor.WithName(id))
		if err != nil {
			return actor.PID{}, err
		}
		e.mu.Lock()
		e.refs[id] = ref
		e.mu.Unlock()
		return ref.PID(), nil
	}
}

// startCount is how many times child id's Start ran.
func (e *env) startCount(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.starts[id]
}

// pid is the latest instance of child id.
func (e *env) pid(id string) actor.PID {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.refs[id]; r != nil {
		return r.PID()
	}
	return actor.PID{}
}

// send tells the latest instance of child id to do c, then lets everything
// that follows from it settle.
func (e *env) send(id string, c cmd) {
	e.t.Helper()
	e.mu.Lock()
	ref := e.refs[id]
	e.mu.Unlock()
	if err := ref.Send(e.ctx, c); err != nil {
		e.t.Fatalf("send %v to %s: %v", c, id, err)
	}
	synctest.Wait()
}

// sleep advances virtual time by d, letting everything settle.
func (e *env) sleep(d time.Duration) {
	e.t.Helper()
	if err := actor.Sleep(e.ctx, e.ex, d); err != nil {
		e.t.Fatal(err)
	}
	synctest.Wait()
}

func (e *env) now() time.Time { return e.ex.Now() }

func (e *env) start(spec supervisor.Spec) *supervisor.Ref {
	e.t.Helper()
	if spec.OnLog == nil {
		spec.OnLog = e.onLog
	}
	sup, err := supervisor.Start(e.ctx, e.sys.Root(), spec, actor.WithName("sup"))
	if err != nil {
		e.t.Fatalf("start supervisor: %v", err)
	}
	synctest.Wait()
	return sup
}

func (e *env) log(sup interface {
	Log(context.Context) ([]supervisor.LogEntry, error)
}) []supervisor.LogEntry {
	e.t.Helper()
	l, err := sup.Log(e.ctx)
	if err != nil {
		e.t.Fatalf("log: %v", err)
	}
	return l
}

// wait returns the outcome of a process that must have completed.
func (e *env) wait(pid actor.PID) actor.Outcome {
	e.t.Helper()
	synctest.Wait()
	o, done := pid.Outcome()
	if !done {
		e.t.Fatalf("%s still running", pid)
	}
	return o
}

func (e *env) which(sup *supervisor.Ref) []supervisor.ChildInfo {
	e.t.Helper()
	ch, err := sup.WhichChildren(e.ctx)
	if err != nil {
		e.t.Fatalf("which children: %v", err)
	}
	return ch
}

// statuses renders WhichChildren as "id:status" in order.
func statuses(ch []supervisor.ChildInfo) string {
	var parts []string
	for _, c := range ch {
		parts = append(parts, c.ID+":"+c.Status.String())
	}
	return strings.Join(parts, " ")
}

// decisions renders log entries as "decision:child" in order.
func decisions(log []supervisor.LogEntry) string {
	var parts []string
	for _, l := range log {
		parts = append(parts, l.Decision.String()+":"+l.ChildID)
	}
	return strings.Join(parts, " ")
}

// since keeps the entries with Seq above seq.
func since(log []supervisor.LogEntry, seq uint64) []supervisor.LogEntry {
	var out []supervisor.LogEntry
	for _, l := range log {
		if l.Seq > seq {
			out = append(out, l)
		}
	}
	return out
}

func last(log []supervisor.LogEntry) uint64 {
	if len(log) == 0 {
		return 0
	}
	return log[len(log)-1].Seq
}

func find(log []supervisor.LogEntry, d supervisor.Decision, id string) (supervisor.LogEntry, bool) {
	for _, l := range log {
		if l.Decision == d && l.ChildID == id {
			return l, true
		}
	}
	return supervisor.LogEntry{}, false
}

func count(log []supervisor.LogEntry, d supervisor.Decision, id string) int {
	n := 0
	for _, l := range log {
		if l.Decision == d && l.ChildID == id {
			n++
		}
	}
	return n
}

// worker is the test child: it records its life cycle and obeys commands.
type worker struct {
	actor.Base
	e  *env
	id string
	in instance
}

func (w *worker) OnStart(p *actor.Proc) error {
	if w.in.startPanic {
		panic("start panic")
	}
	if w.in.startErr != nil {
		return w.in.startErr
	}
	w.e.event("start:" + w.id)
	if w.in.crash {
		p.SendAfter(0, crashNow{})
	}
	return nil
}

func (w *worker) Handle(p *actor.Proc, c cmd) error {
	switch c {
	case cmdFail:
		return errBoom
	case cmdPanic:
		panic(fmt.Sprintf("%s panics", w.id))
	case cmdExit:
		p.Exit(nil)
	}
	return nil
}

func (w *worker) HandleInfo(p *actor.Proc, info any) error {
	if _, ok := info.(crashNow); ok {
		return errBoom
	}
	return nil
}

func (w *worker) OnStop(p *actor.Proc, o actor.Outcome) {
	w.e.event("stop:" + w.id)
	if w.in.stopDelay > 0 {
		_ = actor.Sleep(p.Ctx(), p.Executor(), w.in.stopDelay)
	}
	if w.in.ignoreShutdown {
		_ = actor.Sleep(context.Background(), p.Executor(), time.Hour)
	}
}
