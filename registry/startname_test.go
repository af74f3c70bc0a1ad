package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// counter is a GenServer whose calls return how many casts it handled.
type counter struct {
	actor.Base
	n       int
	initErr error
	inits   *int
	sawName func() (actor.PID, bool)
	during  *actor.PID
}

func (c *counter) Init(p *actor.Proc) error {
	if c.inits != nil {
		*c.inits++
	}
	if c.sawName != nil && c.during != nil {
		*c.during, _ = c.sawName()
	}
	return c.initErr
}
func (c *counter) HandleCall(*actor.Proc, struct{}, actor.ReplyTo[int]) (int, error) { return c.n, nil }
func (c *counter) HandleCast(*actor.Proc, int) error                                 { c.n++; return nil }

// Start with a name: the name is bound once the start succeeds, call and
// cast by name reach the server, and its debugging name is the name.
func TestStartWithNameBindsOnSuccessAndCallsByName(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ctx := context.Background()
		var during actor.PID
		ref, err := actor.StartServer[struct{}, int, int](ctx, sys.Root(),
			&counter{sawName: func() (actor.PID, bool) { return reg.Whereis("counter") }, during: &during},
			WithName(reg, "counter"))
		if err != nil {
			t.Fatalf("StartServer: %v", err)
		}
		if pid, ok := reg.Whereis("counter"); !ok || pid != ref.PID() {
			t.Fatalf("Whereis(counter) = %v, %v; want %v", pid, ok, ref.PID())
		}
		if during != ref.PID() {
			t.Errorf("during init the name resolved to %v, want the starting process (OTP registers before init)", during)
		}
		if ref.PID().Name() != "counter" {
			t.Errorf("debugging name %q, want counter", ref.PID().Name())
		}
		name := Server[struct{}, int, int](reg, "counter")
		if err := name.Cast(ctx, 1); err != nil {
			t.Fatalf("cast by name: %v", err)
		}
		if n, err := name.Call(ctx, struct{}{}); err != nil || n != 1 {
			t.Fatalf("call by name = %d, %v; want 1", n, err)
		}
	})
}

// A failed start never leaves the name bound: not when the name is taken
// (init does not even run), not when init fails.
func TestStartWithNameNeverBoundAfterFailedStart(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ctx := context.Background()
		holder := spawnIdle(t, sys, "holder")
		mustRegister(t, reg, "taken", holder)
		inits := 0
		_, err := actor.StartServer[struct{}, int, int](ctx, sys.Root(), &counter{inits: &inits}, WithName(reg, "taken"))
		if !errors.Is(err, ErrNameTaken) {
			t.Errorf("start under a taken name: %v, want ErrNameTaken", err)
		}
		var se *actor.StartError
		if !errors.As(err, &se) || se.PID.Alive() {
			t.Errorf("start under a taken name: %v, want a *StartError for a completed process", err)
		}
		if inits != 0 {
			t.Errorf("init ran %d times under a taken name", inits)
		}
		if pid, _ := reg.Whereis("taken"); pid != holder {
			t.Errorf("taken name now bound to %v, want the holder %v", pid, holder)
		}

		errInit := errors.New("init failed")
		_, err = actor.StartServer[struct{}, int, int](ctx, sys.Root(), &counter{initErr: errInit}, WithName(reg, "fails"))
		if !errors.Is(err, errInit) {
			t.Errorf("start: %v, want the init error", err)
		}
		if pid, ok := reg.Whereis("fails"); ok {
			t.Errorf("name of a failed start bound to %v", pid)
		}
	})
}

// Start with a name applies to supervisors too: bound with a successful
// start (and reachable as a supervisor), unbound after a failed one.
func TestStartSupervisorWithName(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ctx := context.Background()
		child := supervisor.ServerChild("c", func() actor.Server[struct{}, int, int] { return &counter{} })
		sup, err := supervisor.Start(ctx, sys.Root(), supervisor.Spec{Children: []supervisor.ChildSpec{child}}, WithName(reg, "sup"))
		if err != nil {
			t.Fatalf("supervisor.Start: %v", err)
		}
		pid, ok := reg.Whereis("sup")
		if !ok || pid != sup.PID() {
			t.Fatalf("Whereis(sup) = %v, %v; want %v", pid, ok, sup.PID())
		}
		byName, ok := supervisor.FromPID(pid)
		if !ok {
			t.Fatal("the name does not resolve to a supervisor")
		}
		if kids, err := byName.WhichChildren(ctx); err != nil || len(kids) != 1 {
			t.Errorf("WhichChildren by name: %v, %v", kids, err)
		}

		errInit := errors.New("child cannot start")
		bad := supervisor.ServerChild("bad", func() actor.Server[struct{}, int, int] { return &counter{initErr: errInit} })
		_, err = supervisor.StartDynamic(ctx, sys.Root(), supervisor.DynamicSpec{}, WithName(reg, "sup"))
		if !errors.Is(err, ErrNameTaken) {
			t.Errorf("dynamic supervisor under a taken name: %v, want ErrNameTaken", err)
		}
		_, err = supervisor.Start(ctx, sys.Root(), supervisor.Spec{Children: []supervisor.ChildSpec{bad}}, WithName(reg, "bad-sup"))
		if !errors.Is(err, errInit) {
			t.Errorf("supervisor.Start with a failing child: %v, want the child's error", err)
		}
		if pid, ok := reg.Whereis("bad-sup"); ok {
			t.Errorf("name of a failed supervisor start bound to %v", pid)
		}
	})
}

// A name bound at start can be given a TTL, and its lease is reachable to
// renew or release it.
func TestStartWithNameLeaseIsReachable(t *testing.T) {
	inBubble(t, func(t *testing.T, sys *actor.System, reg *Registry) {
		ref, err := actor.StartServer[struct{}, int, int](context.Background(), sys.Root(), &counter{},
			WithName(reg, "ttl", WithTTL(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		l, ok := reg.Lease("ttl")
		if !ok || l.PID() != ref.PID() || l.TTL() != time.Second {
			t.Fatalf("Lease(ttl) = %v, %v; want the start's lease with its TTL", l, ok)
		}
		if err := actor.Sleep(context.Background(), sys.Executor(), 800*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := actor.Sleep(context.Background(), sys.Executor(), 800*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, ok := reg.Whereis("ttl"); !ok {
			t.Error("renewed name expired")
		}
		l.Release()
		if _, ok := reg.Lease("ttl"); ok {
			t.Error("released name still has a lease")
		}
	})
}
