package main

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery"
	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// The tutorial's steps, as the README runs them: sign, remind, count, and
// the reminder fires once even though its node is killed before it is due.
func TestTutorialSurvivesACrashBeforeTheReminder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		kernels, err := orrery.Kernels(Guestbook().Kernel())
		if err != nil {
			t.Fatal(err)
		}
		st := memstore.New()
		if _, err := st.CreateWorld(ctx, "guestbook", "lobby", nil); err != nil {
			t.Fatal(err)
		}
		start := func(worker string) *node.Node {
			n, err := node.Start(ctx, node.Config{Worker: worker, Store: st, Kernels: kernels, LeaseTTL: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Stop(context.Background()) })
			return n
		}
		a := start("a")
		for _, in := range []struct {
			v   any
			key string
		}{{Sign{Name: "Ada"}, "ada"}, {Remind{AfterMs: 8000, Note: "close the book"}, "r1"}, {Sign{Name: "Ada"}, "ada"}} {
			if _, err := a.Client().Send(ctx, "lobby", in.v, in.key); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := plane.CallAs[int](ctx, a.Client(), "lobby", Count{}); err != nil || n != 1 {
			t.Fatalf("Count = %d, %v; want 1 (the repeated key enqueued nothing)", n, err)
		}
		a.Kill(ctx)
		b := start("b")
		time.Sleep(10 * time.Second)
		snap, err := b.Client().State(ctx, "lobby")
		if err != nil {
			t.Fatal(err)
		}
		var s struct{ State Book }
		if err := world.Decode(snap.State, &s); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.State.Names, []string{"Ada"}) || !slices.Equal(s.State.Reminders, []string{"close the book"}) {
			t.Fatalf("state after the crash: %+v", s.State)
		}
	})
}
