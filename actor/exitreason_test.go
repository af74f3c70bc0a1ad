package actor_test

import (
	"context"
	"errors"
	"testing"

	"github.com/orrery-run/orrery/actor"
)

var errMaintenance = errors.New("maintenance")

// A process can exit with shutdown and a reason, from inside (Proc.Shutdown)
// and from outside (PID.Shutdown): it drains, runs its stop hook, and
// completes Cancelled(shutdown) with the reason reachable by errors.Is.
func TestShutdownWithReasonFromInsideAndOutside(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		for _, inside := range []bool{true, false} {
			stopped := make(chan actor.Outcome, 1)
			ref := spawn(t, sys.Root(), &fnActor{stop: func(_ *actor.Proc, o actor.Outcome) { stopped <- o }})
			if inside {
				if err := ref.Send(context.Background(), func(p *actor.Proc) error { p.Shutdown(errMaintenance); return nil }); err != nil {
					t.Errorf("send: %v", err)
				}
			} else {
				ref.PID().Shutdown(errMaintenance)
			}
			o, err := ref.PID().Wait(context.Background())
			if err != nil {
				t.Errorf("wait: %v", err)
			}
			if o.Severity != actor.Cancelled || o.Cancel.Kind != actor.CancelShutdown || o.Cancel.Cause != errMaintenance {
				t.Errorf("inside=%v: outcome %v, want cancelled(shutdown) with the reason", inside, o)
			}
			if !errors.Is(o.AsError(), errMaintenance) {
				t.Errorf("inside=%v: errors.Is(%v, reason) is false", inside, o.AsError())
			}
			select {
			case so := <-stopped:
				if so.Cancel.Cause != errMaintenance {
					t.Errorf("stop hook saw %v, want the reason", so)
				}
			default:
				t.Errorf("inside=%v: the stop hook did not run", inside)
			}
		}
	})
}

// A linked peer's original reason is reachable from the "linked from X"
// outcome through errors.As, along a chain of links.
func TestLinkedOutcomeReachesPeerReason(t *testing.T) {
	errBoom := errors.New("boom")
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		b := spawn(t, sys.Root(), &fnActor{})
		a := spawn(t, sys.Root(), &fnActor{}, actor.WithLink(b.PID()))
		c := spawn(t, sys.Root(), &fnActor{}, actor.WithLink(a.PID()))
		if err := b.Send(context.Background(), func(*actor.Proc) error { return errBoom }); err != nil {
			t.Errorf("send: %v", err)
		}
		oa, _ := a.PID().Wait(context.Background())
		oc, _ := c.PID().Wait(context.Background())
		if oa.Cancel.Kind != actor.CancelLinked || oa.Cancel.From != b.PID() {
			t.Errorf("a: %v, want linked from b", oa)
		}
		var le *actor.LinkError
		if !errors.As(oa.AsError(), &le) || le.From != b.PID() || le.Outcome.Severity != actor.Err {
			t.Errorf("a: errors.As LinkError = %v, want b's Err exit", le)
		}
		if !errors.Is(oa.AsError(), errBoom) {
			t.Errorf("a: errors.Is(%v, boom) is false", oa.AsError())
		}
		if !errors.As(oc.AsError(), &le) || le.From != a.PID() {
			t.Errorf("c: errors.As LinkError = %v, want a's exit", le)
		}
		if !errors.Is(oc.AsError(), errBoom) {
			t.Errorf("c: b's original reason is not reachable from %v", oc.AsError())
		}
	})
}
