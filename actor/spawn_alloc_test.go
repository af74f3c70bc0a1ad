package actor_test

import (
	"context"
	"testing"

	"github.com/orrery-run/orrery/actor"
)

type idleActor struct{ actor.Base }

func (idleActor) Handle(*actor.Proc, int) error { return nil }

type idleServer struct{ actor.Base }

func (idleServer) HandleCall(*actor.Proc, int, actor.ReplyTo[int]) (int, error) { return 0, nil }
func (idleServer) HandleCast(*actor.Proc, int) error                            { return nil }

// A process nobody has talked to yet costs one allocation: its handle,
// actor adapter, mailbox and callbacks live in it, and its goroutine,
// receive parker and run closure are made on first activation (issue 8,
// item 12: spawn was six allocations).
func TestSpawnAllocatesOnce(t *testing.T) {
	ctx := context.Background()
	sys := actor.NewSystem(actor.WithExecutor(actor.NewExecutor(1)))
	defer func() { _, _ = sys.Close(ctx) }()
	scope := sys.Root()
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := actor.Spawn[int](ctx, scope, idleActor{}); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("Spawn: %v allocations, want 1", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := actor.StartServer[int, int, int](ctx, scope, idleServer{}); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("StartServer: %v allocations, want 1", n)
	}
}
