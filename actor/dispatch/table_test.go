package dispatch_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/actor/dispatch"
)

// The resolution stands alone (issue 8 item 13): a Table resolves a type to
// its one handler with the dispatcher contract §5's rules, with no runtime, executor or
// goroutine, and for any handler type, as the world kernel will use it.
func TestTableResolvesOneHandlerPerTypeWithoutARuntime(t *testing.T) {
	type step func(state int) int
	tab := dispatch.NewTable[step]()
	if err := tab.Register("inc", func(s int) int { return s + 1 }); err != nil {
		t.Fatal(err)
	}
	if err := tab.Register("dbl", func(s int) int { return 2 * s }); err != nil {
		t.Fatal(err)
	}
	if err := tab.Register("inc", func(s int) int { return s }); !errors.Is(err, dispatch.ErrDuplicateHandler) {
		t.Errorf("second handler for inc: %v, want ErrDuplicateHandler", err)
	}
	if err := tab.Register("", func(s int) int { return s }); !errors.Is(err, dispatch.ErrEmptyMessageType) {
		t.Errorf("empty type: %v, want ErrEmptyMessageType", err)
	}
	tab.Freeze()
	if err := tab.Register("late", func(s int) int { return s }); !errors.Is(err, dispatch.ErrRegisterAfterStart) {
		t.Errorf("register after Freeze: %v, want ErrRegisterAfterStart", err)
	}
	state := 1
	for _, typ := range []string{"inc", "dbl", "unknown", "", "inc"} {
		if h, ok := tab.Resolve(typ); ok {
			state = h(state)
		}
	}
	if state != 5 {
		t.Errorf("state %d after inc, dbl, (dropped), (dropped), inc; want 5 (the first inc handler kept)", state)
	}
	if got := tab.Types(); !slices.Equal(got, []string{"dbl", "inc"}) {
		t.Errorf("Types() = %v", got)
	}
}

// The loop runs as an actor process (issue 8 item 13): in the scope given
// WithScope it is a listed, traced process, and closing the scope stops
// the runtime.
func TestLoopRunsAsAProcessOfItsScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var spawned []string
		sys := actor.NewSystem(actor.WithExecutor(actor.NewExecutor(1)), actor.WithTracer(func(ev actor.TraceEvent) {
			if ev.Kind == actor.TraceSpawn {
				spawned = append(spawned, ev.PID.Name())
			}
		}))
		scope, err := sys.Root().Sub("dispatch")
		if err != nil {
			t.Fatal(err)
		}
		r := dispatch.New(nil, dispatch.WithScope(scope), dispatch.WithLogger(nil))
		var tr trace
		mustRegister(t, r, "a", recordTo(&tr))
		if procs := scope.Processes(); len(procs) != 0 {
			t.Fatalf("before Start: processes %v", procs)
		}
		r.Start()
		mustDeliver(t, r, "a", 1)
		synctest.Wait()
		tr.want(t, "a:1")
		procs := scope.Processes()
		if len(procs) != 1 || procs[0].Name() != "dispatch" {
			t.Fatalf("processes %v, want the loop's", procs)
		}
		if !slices.Contains(spawned, "dispatch") {
			t.Errorf("no spawn traced for the loop: %v", spawned)
		}
		if _, err := scope.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if o, _ := procs[0].Outcome(); procs[0].Alive() || o.Severity == actor.Panicked {
			t.Errorf("loop process after scope close: alive %v, outcome %v", procs[0].Alive(), o)
		}
		if err := r.Deliver(dispatch.Message{Type: "a", Payload: 2}); !errors.Is(err, dispatch.ErrStopped) {
			t.Errorf("Deliver after the scope closed: %v, want ErrStopped", err)
		}
		if err := r.Stop(context.Background()); err != nil {
			t.Errorf("Stop after the scope closed: %v", err)
		}
		if _, err := sys.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
