package actor_test

import (
	"context"
	"errors"
	"testing"

	"github.com/orrery-run/orrery/actor"
)

// TestProcFailOnlyMakesTheOutcomeWorse: Fail with Exit(nil) ends a process
// with the declared outcome instead of Ok; Fail(Ok) never heals a failure;
// Fail from Init makes the start fail with that outcome.
func TestProcFailOnlyMakesTheOutcomeWorse(t *testing.T) {
	bg := context.Background()
	sys := newSys(t)
	boom := errors.New("declared")

	// Declared Panicked (without a Go panic) on an otherwise normal exit.
	ref := spawn(t, sys.Root(), &fnActor{})
	if err := ref.Send(bg, func(p *actor.Proc) error {
		p.Fail(actor.PanickedOutcome(boom, nil))
		p.Exit(nil)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if o, _ := ref.PID().Wait(bg); o.Severity != actor.Panicked || o.Panic == nil || o.Panic.Value != boom {
		t.Fatalf("outcome %v, want panicked(declared)", o)
	}

	// Fail(Ok) after a handler error leaves the error.
	ref = spawn(t, sys.Root(), &fnActor{})
	_ = ref.Send(bg, func(p *actor.Proc) error {
		p.Fail(actor.OkOutcome())
		return boom
	})
	if o, _ := ref.PID().Wait(bg); o.Severity != actor.Err || !errors.Is(o.Err, boom) {
		t.Fatalf("outcome %v, want err(declared): Fail can never heal", o)
	}

	// Fail from Init: the start fails with the declared outcome.
	_, err := actor.Spawn[fn](bg, sys.Root(), &fnActor{start: func(p *actor.Proc) error {
		p.Fail(actor.PanickedOutcome(boom, nil))
		return boom
	}})
	var se *actor.StartError
	if !errors.As(err, &se) || se.Outcome.Severity != actor.Panicked {
		t.Fatalf("Spawn = %v, want a StartError with a Panicked outcome", err)
	}
	closeSys(t, sys)
}
