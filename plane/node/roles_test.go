package node_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store/memstore"
)

func TestStartRefusesRolesThatCannotRun(t *testing.T) {
	st := memstore.New()
	base := node.Config{Worker: "w", Store: st, Kernels: kernels()}
	for name, edit := range map[string]func(*node.Config){
		"an unknown role":                   func(c *node.Config) { c.Roles = []string{"host", "gpu"} },
		"no role":                           func(c *node.Config) { c.Roles = []string{} },
		"effect kinds without effects role": func(c *node.Config) { c.Roles, c.EffectKinds = []string{"host"}, []string{"http.request"} },
		"a kind the binary lacks":           func(c *node.Config) { c.Roles, c.EffectKinds = []string{"effects"}, []string{"pay"} },
		"an empty list of kinds":            func(c *node.Config) { c.EffectKinds = []string{} },
		"a negative capacity":               func(c *node.Config) { c.Capacity = -1 },
	} {
		cfg := base
		edit(&cfg)
		n, err := node.Start(context.Background(), cfg)
		if !errors.Is(err, node.ErrRoles) || !errors.Is(err, node.ErrInvalid) {
			if n != nil {
				_ = n.Stop(context.Background())
			}
			t.Errorf("%s: %v, want ErrRoles (an ErrInvalid)", name, err)
		}
	}
	if _, err := node.ResolveRoles([]string{"api", "host", "api"}); err != nil {
		t.Errorf("a role named twice: %v", err)
	}
}

// A cluster split into worker classes runs every part: worlds only on the
// host, their calls answered through an api node that hosts nothing, their
// effects executed by the effects node alone, their timers fired, and
// every node's record advertising what it runs.
func TestSplitNodesRunEveryPart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, ids := newWorlds(t, ctx, 4)
		pay := &payer{release: make(chan struct{})}
		close(pay.release)
		startAs := func(worker string, roles []string, extra func(*node.Config)) *node.Node {
			cfg := node.Config{Worker: worker, Store: st, Kernels: kernels(), LeaseTTL: ttl, ClaimTTL: 5 * time.Second, Roles: roles}
			if extra != nil {
				extra(&cfg)
			}
			n, err := node.Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Stop(context.Background()) })
			return n
		}
		a := startAs("a", []string{plane.RoleAPI, plane.RoleOrchestrator}, nil)
		h := startAs("h", []string{plane.RoleHost}, func(c *node.Config) { c.Capacity = 10 })
		e := startAs("e", []string{plane.RoleEffects}, func(c *node.Config) {
			c.Adapters = []adapter.Registration{adapter.Register(pay, adapter.RetryPolicy{})}
			c.EffectKinds = []string{"http.request"}
		})
		tm := startAs("tm", []string{plane.RoleTimers}, nil)
		for !a.Leader() {
			time.Sleep(10 * time.Millisecond)
		}
		holders(t, ctx, st, ids, "h")
		if h.Pool() != nil || a.Pool() != nil || tm.Pool() != nil || e.Pool() == nil {
			t.Fatal("only the effects node runs an adapter pool")
		}
		if got := e.Pool().Kinds(); !slices.Equal(got, []string{"http.request"}) {
			t.Fatalf("the effects pool claims %v, want only the kinds it was given", got)
		}
		for i, id := range ids {
			if _, err := a.Client().Send(ctx, id, Add{By: int64(i + 1)}, "add"); err != nil {
				t.Fatal(err)
			}
			got, err := plane.CallAs[int64](ctx, a.Client(), id, Get{})
			if err != nil || got != int64(i+1) {
				t.Fatalf("%s: a call through the api node = %d, %v; want %d", id, got, err, i+1)
			}
		}
		if _, err := a.Client().Send(ctx, ids[0], Pay{URL: "https://pay.example/"}, "pay"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Client().Send(ctx, ids[1], Alarm{AfterMs: 1500}, "alarm"); err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			if len(tallyOf(t, ctx, a, ids[0]).Paid) == 1 && tallyOf(t, ctx, a, ids[1]).Beeps == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if paid, beeps := tallyOf(t, ctx, a, ids[0]).Paid, tallyOf(t, ctx, a, ids[1]).Beeps; len(paid) != 1 || beeps != 1 {
			t.Fatalf("paid %v, beeps %d; want one receipt and one beep", paid, beeps)
		}
		if calls := pay.seen(); len(calls) != 1 || calls[0].worker != "e/effects" {
			t.Fatalf("payment calls %+v, want one, by the effects node", calls)
		}
		holders(t, ctx, st, ids, "h")
		ws, err := st.ListWorkers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{
			"a":  {"role:api", "role:orchestrator", "world:t@1"},
			"e":  {"effect:http.request", "role:effects", "world:t@1"},
			"h":  {"role:host", "world:t@1"},
			"tm": {"role:timers", "world:t@1"},
		}
		for _, w := range ws {
			if !slices.Equal(w.Capabilities, want[w.ID]) {
				t.Errorf("%s advertises %q, want %q", w.ID, w.Capabilities, want[w.ID])
			}
			if w.ID == "h" && w.Capacity != 10 {
				t.Errorf("h announces capacity %d, want 10", w.Capacity)
			}
		}
	})
}
