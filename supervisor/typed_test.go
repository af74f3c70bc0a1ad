package supervisor_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// kv is a small GenServer: calls read a key, casts set it.
type kv struct {
	actor.Base
	m       map[string]int
	initErr error
}

type set struct {
	k string
	v int
}

func newKV() actor.Server[string, int, set] { return &kv{m: map[string]int{}} }

func (s *kv) Init(*actor.Proc) error { return s.initErr }
func (s *kv) HandleCall(_ *actor.Proc, k string, _ actor.ReplyTo[int]) (int, error) {
	return s.m[k], nil
}
func (s *kv) HandleCast(_ *actor.Proc, m set) error {
	if m.k == "" {
		return errBoom // an Err exit: a Permanent child restarts
	}
	s.m[m.k] = m.v
	return nil
}

type kvRef = actor.ServerRef[string, int, set]

// A GenServer child takes one call (ServerChild), and WhichChildren's
// children come back as typed handles (ChildrenOf, ChildOf) with no type
// assertion by the caller, supervisors included.
func TestTypedChildrenAndOneCallServerChild(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		ctx := context.Background()
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{
			supervisor.ServerChild("kv", newKV),
			e.spec("w"),
			supervisor.ChildSpecFor("nested", supervisor.Spec{}),
		}})
		kids, err := supervisor.ChildrenOf[*kvRef](ctx, sup)
		if err != nil || len(kids) != 3 {
			t.Fatalf("ChildrenOf: %v, %v", kids, err)
		}
		if !kids[0].OK || kids[0].ID != "kv" || kids[0].Ref.PID() != kids[0].PID {
			t.Fatalf("kv child %+v: want its typed ref", kids[0])
		}
		if kids[1].OK || kids[2].OK {
			t.Errorf("children of other types reported as *kvRef: %+v %+v", kids[1], kids[2])
		}
		kvs := kids[0].Ref
		if err := kvs.Cast(ctx, set{"x", 7}); err != nil {
			t.Fatal(err)
		}
		if v, err := kvs.Call(ctx, "x"); err != nil || v != 7 {
			t.Errorf("call through the typed child = %d, %v; want 7", v, err)
		}
		if kvs.PID().Name() != "kv" {
			t.Errorf("debugging name %q, want kv", kvs.PID().Name())
		}

		nested, err := supervisor.ChildOf[*supervisor.Ref](ctx, sup, "nested")
		if err != nil || nested.PID() != e.which(sup)[2].PID {
			t.Errorf("ChildOf[*Ref](nested) = %v, %v", nested, err)
		}
		if _, err := supervisor.ChildOf[*kvRef](ctx, sup, "w"); !errors.As(err, new(*supervisor.WrongTypeError)) {
			t.Errorf("ChildOf of the wrong type: %v, want *WrongTypeError", err)
		}
		if _, err := supervisor.ChildOf[*kvRef](ctx, sup, "none"); !errors.Is(err, supervisor.ErrNotFound) {
			t.Errorf("ChildOf of an unknown id: %v, want ErrNotFound", err)
		}
		if err := sup.TerminateChild(ctx, "w"); err != nil {
			t.Fatal(err)
		}
		if _, err := supervisor.ChildOf[*kvRef](ctx, sup, "w"); !errors.Is(err, supervisor.ErrNotFound) {
			t.Errorf("ChildOf of a terminated child: %v, want ErrNotFound", err)
		}

		// The one-call child restarts like any other: a fresh server.
		old := kvs.PID()
		if err := kvs.Cast(ctx, set{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		again, err := supervisor.ChildOf[*kvRef](ctx, sup, "kv")
		if err != nil || again.PID() == old {
			t.Fatalf("after a kill: %v, %v; want a restarted instance", again, err)
		}
		if v, _ := again.Call(ctx, "x"); v != 0 {
			t.Errorf("restarted instance has state %d, want a fresh server", v)
		}
	})
}

// A ServerChild whose init fails reaches the supervisor as the start error
// it is: no mapping closure needed to keep the instance's outcome.
func TestServerChildStartFailureKeepsOutcome(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		errInit := errors.New("no")
		bad := supervisor.ServerChild("kv", func() actor.Server[string, int, set] { return &kv{initErr: errInit} })
		_, err := supervisor.Start(e.ctx, e.sys.Root(), supervisor.Spec{Children: []supervisor.ChildSpec{bad}})
		var sce *supervisor.StartChildError
		var se *actor.StartError
		if !errors.As(err, &sce) || sce.ID != "kv" || !errors.As(sce.Err, &se) || !errors.Is(err, errInit) {
			t.Errorf("start: %v, want a StartChildError for kv wrapping the StartError with the init error", err)
		}
	})
}

// ChildOf tells a child waiting out its restart backoff (ErrRestarting)
// from one that runs, and gives the new instance once it does.
func TestChildOfDuringRestartBackoff(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		ctx := context.Background()
		sup := e.start(supervisor.Spec{Backoff: supervisor.Fixed(time.Second),
			Children: []supervisor.ChildSpec{supervisor.ServerChild("kv", newKV)}})
		first, err := supervisor.ChildOf[*kvRef](ctx, sup, "kv")
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Cast(ctx, set{}); err != nil { // an Err exit
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := supervisor.ChildOf[*kvRef](ctx, sup, "kv"); !errors.Is(err, supervisor.ErrRestarting) {
			t.Errorf("ChildOf during the backoff: %v, want ErrRestarting", err)
		}
		e.sleep(time.Second)
		again, err := supervisor.ChildOf[*kvRef](ctx, sup, "kv")
		if err != nil || again.PID() == first.PID() || !again.PID().Alive() {
			t.Errorf("ChildOf after the backoff: %v, %v; want the new instance", again, err)
		}
	})
}
