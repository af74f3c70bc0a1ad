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
