package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
)

// payAt is version v of workflow "pay" as the binary of node who carries
// it: it waits for signal "go", then says which version ran it where.
// Every binary's copy asks for the same steps, so a run moves between
// nodes without divergence.
func payAt(v uint64, who string) *workflow.Def[int, string] {
	return workflow.New("pay", v, func(c *workflow.Ctx, _ int) (string, error) {
		if _, err := workflow.Await[int](c, "go"); err != nil {
			return "", err
		}
		return workflow.Step(c, "who", func(context.Context) (string, error) { return fmt.Sprintf("v%d@%s", v, who), nil })
	})
}

// Two nodes, one carrying v1 of "pay" and one carrying v1 and v2: v1 runs
// finish on either; v2 runs only on the second, even when started on the
// first; a v2 start while only the v1 node is live is refused with
// ErrVersionNotCarried; and once the v1-only node stops, its v1 run
// finishes on the other. On memstore in a synctest bubble (virtual time),
// and on SQLite and PostgreSQL in real time.
func TestNodesRunTheWorkflowVersionsTheyCarry(t *testing.T) {
	for _, backend := range testrig.Backends() {
		t.Run(backend, func(t *testing.T) {
			if backend == testrig.Memstore {
				synctest.Test(t, func(t *testing.T) { nodesCarryVersions(t, memstore.New()) })
				return
			}
			nodesCarryVersions(t, testrig.Open(t, context.Background(), backend, &testrig.Clock{}))
		})
	}
}

func nodesCarryVersions(t *testing.T, st store.Store) {
	// A hang guard only: every wait below is on a condition.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	advertises := func(worker, capability string) {
		testrig.WaitFor(t, worker+" advertising "+capability, time.Minute, 10*time.Millisecond, func() (bool, error) {
			ws, err := st.ListWorkers(ctx)
			for _, w := range ws {
				if w.ID == worker && slices.Contains(w.Capabilities, capability) {
					return true, err
				}
			}
			return false, err
		})
	}
	old := startWithWorkflows(t, ctx, st, "old", payAt(1, "old"))
	advertises("old", "workflow:pay@1")

	// A client in no node's process: it judges by the live workers.
	wfs, err := workflow.NewWorkflows(payAt(1, "cl"), payAt(2, "cl"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := workflow.NewClient(st, wfs, actor.NewExecutor(1), workflow.WithPoll(time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := event.Marshal(1)
	if _, err := cl.StartCBOR(ctx, "pay", "v2-early", in); !errors.Is(err, workflow.ErrVersionNotCarried) {
		t.Fatalf("a v2 start (the newest) with only a v1 node live: %v, want ErrVersionNotCarried", err)
	}
	if err := payAt(2, "x").Start(ctx, old.Runs(), "v2-early", 1); !errors.Is(err, workflow.ErrVersionNotCarried) {
		t.Fatalf("a v2 start on the v1 node: %v, want ErrVersionNotCarried", err)
	}
	if _, err := st.GetWorld(ctx, "v2-early"); !errors.Is(err, store.ErrWorldNotFound) {
		t.Fatalf("a refused start left a run: %v", err)
	}

	next := startWithWorkflows(t, ctx, st, "new", payAt(1, "new"), payAt(2, "new"))
	advertises("new", "workflow:pay@2")

	starts := []struct {
		run   string
		start func() error
		want  string
	}{
		{"v2-any", func() error { _, err := cl.StartCBOR(ctx, "pay", "v2-any", in); return err }, "v2@new"},
		// Started on the v1-only node, which does not carry v2: the other
		// node runs it.
		{"v2-on-old", func() error { return payAt(2, "x").Start(ctx, old.Runs(), "v2-on-old", 1) }, "v2@new"},
		{"v1-on-old", func() error { return payAt(1, "old").Start(ctx, old.Runs(), "v1-on-old", 1) }, "v1@old"},
		{"v1-on-new", func() error { return payAt(1, "new").Start(ctx, next.Runs(), "v1-on-new", 1) }, "v1@new"},
		{"v1-pinned", func() error {
			_, err := cl.StartCBOR(ctx, "pay", "v1-pinned", in, workflow.WithVersion(1))
			return err
		}, ""},
	}
	for _, s := range starts {
		if err := s.start(); err != nil {
			t.Fatalf("start %s: %v", s.run, err)
		}
		if err := cl.Signal(ctx, s.run, "go", 1, "k"); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range starts {
		got, err := payAt(1, "").Result(ctx, cl, s.run)
		if err != nil {
			t.Fatalf("%s: %v", s.run, err)
		}
		if s.want != "" && got != s.want || s.want == "" && got != "v1@old" && got != "v1@new" {
			t.Errorf("%s ran as %q, want %q", s.run, got, s.want)
		}
		sum, err := cl.Get(ctx, s.run)
		if wantV := uint64(1 + boolInt(s.run[1] == '2')); err != nil || sum.Version != wantV {
			t.Errorf("%s: version %d, %v; want %d", s.run, sum.Version, err, wantV)
		}
	}

	// A v1 run held by the v1-only node, which then stops: the other
	// node finishes it.
	if err := payAt(1, "old").Start(ctx, old.Runs(), "v1-late", 1); err != nil {
		t.Fatal(err)
	}
	testrig.WaitFor(t, "the v1 node holding v1-late", time.Minute, 10*time.Millisecond, func() (bool, error) {
		l, found, err := st.GetLease(ctx, "v1-late")
		return found && l.Holder == "old/runs", err
	})
	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Signal(ctx, "v1-late", "go", 1, "k"); err != nil {
		t.Fatal(err)
	}
	if got, err := payAt(1, "").Result(ctx, cl, "v1-late"); err != nil || got != "v1@new" {
		t.Fatalf("v1-late after the v1 node stopped: %q, %v; want v1@new", got, err)
	}
}

// The role a worker running workflow runs advertises is the plane's host
// role, as the workflow package's start judgement expects.
func TestWorkflowRunsCapabilityIsTheHostRole(t *testing.T) {
	if got := plane.RoleCapability(plane.RoleHost); got != workflow.RunsCapability {
		t.Fatalf("the host role advertises %q; workflow.RunsCapability is %q", got, workflow.RunsCapability)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
