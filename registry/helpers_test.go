package registry

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/actor"
)

// inBubble runs f inside a testing/synctest bubble with the production
// executor, so timers run on the bubble's fake clock and a test that would
// hang fails as a deadlock instead. The system is closed when f returns.
func inBubble(t *testing.T, f func(t *testing.T, sys *actor.System, reg *Registry)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		sys := actor.NewSystem(actor.WithExecutor(actor.NewExecutor(1)))
		defer closeSystem(t, sys)
		f(t, sys, New(sys.Executor()))
	})
}

func closeSystem(t *testing.T, sys *actor.System) {
	t.Helper()
	if _, err := sys.Close(context.Background()); err != nil {
		t.Errorf("close system: %v", err)
	}
}

// idle is a plain actor that does nothing: a process to hold names.
type idle struct{ actor.Base }

func (idle) Handle(*actor.Proc, struct{}) error { return nil }

func spawnIdle(t *testing.T, sys *actor.System, name string) actor.PID {
	t.Helper()
	ref, err := actor.Spawn[struct{}](context.Background(), sys.Root(), idle{}, actor.WithName(name))
	if err != nil {
		t.Fatalf("spawn %s: %v", name, err)
	}
	return ref.PID()
}

// deadPID returns the PID of a process that has completed.
func deadPID(t *testing.T, sys *actor.System) actor.PID {
	t.Helper()
	pid := spawnIdle(t, sys, "dead")
	pid.Abort()
	if pid.Alive() {
		t.Fatal("aborted process still alive")
	}
	return pid
}

func mustRegister(t *testing.T, reg *Registry, name string, pid actor.PID, opts ...Option) *Lease {
	t.Helper()
	l, err := reg.Register(name, pid, opts...)
	if err != nil {
		t.Fatalf("Register(%q, %s): %v", name, pid, err)
	}
	return l
}

func wantBound(t *testing.T, reg *Registry, name string, pid actor.PID) {
	t.Helper()
	got, ok := reg.Whereis(name)
	if !ok || got != pid {
		t.Fatalf("Whereis(%q) = %s, %v; want %s, true", name, got, ok, pid)
	}
}

// rawBound reads the table itself, without the lazy expiry and exit checks
// of Whereis, to show that the timer or exit hook did the unbinding.
func rawBound(reg *Registry, name string) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	_, ok := reg.names[name]
	return ok
}

func wantUnbound(t *testing.T, reg *Registry, name string) {
	t.Helper()
	if got, ok := reg.Whereis(name); ok {
		t.Fatalf("Whereis(%q) = %s, true; want unbound", name, got)
	}
}

// tagServer is a GenServer that registers itself as name during Init and
// answers calls with its tag, so a test can tell which instance it reached.
type tagServer struct {
	actor.Base
	tag   string
	reg   *Registry
	name  string
	casts chan string
}

func (s *tagServer) Init(p *actor.Proc) error {
	if s.reg == nil {
		return nil
	}
	_, err := s.reg.Register(s.name, p.Self())
	return err
}

func (s *tagServer) HandleCall(_ *actor.Proc, req string, _ actor.ReplyTo[string]) (string, error) {
	return s.tag + ":" + req, nil
}

func (s *tagServer) HandleCast(_ *actor.Proc, msg string) error {
	s.casts <- s.tag + ":" + msg
	return nil
}

func startTagServer(t *testing.T, sys *actor.System, reg *Registry, name, tag string, casts chan string) *actor.ServerRef[string, string, string] {
	t.Helper()
	ref, err := actor.StartServer[string, string, string](context.Background(), sys.Root(),
		&tagServer{tag: tag, reg: reg, name: name, casts: casts}, actor.WithName(tag))
	if err != nil {
		t.Fatalf("start %s: %v", tag, err)
	}
	return ref
}
