package node_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
)

// twoSteps adds one, then doubles.
func twoSteps() *workflow.Def[int, int] {
	return workflow.New("two", 1, func(c *workflow.Ctx, in int) (int, error) {
		a, err := workflow.Step(c, "add", func(context.Context) (int, error) { return in + 1, nil })
		if err != nil {
			return 0, err
		}
		return workflow.Step(c, "double", func(context.Context) (int, error) { return a * 2, nil })
	})
}

func startWithWorkflows(t *testing.T, ctx context.Context, st store.Store, worker string, defs ...workflow.Workflow) *node.Node {
	t.Helper()
	wfs, err := workflow.NewWorkflows(defs...)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(ctx, node.Config{Worker: worker, Store: st, Kernels: kernels(), LeaseTTL: ttl,
		ClaimTTL: 5 * time.Second, Workflows: wfs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	return n
}

// A node with a workflow runs it: Start gives a result, and the node's Runs
// projection lists the run as completed with its two steps, the Timeline
// shows them in order.
func TestNodeRunsAWorkflowAndProjectsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		def := twoSteps()
		n := startWithWorkflows(t, ctx, st, "a", def)
		if err := def.Start(ctx, n.Runs(), "r-1", 4); err != nil {
			t.Fatal(err)
		}
		got, err := def.Result(ctx, n.Runs(), "r-1")
		if err != nil || got != 10 {
			t.Fatalf("result %d, %v; want 10", got, err)
		}
		v := n.RunsView()
		if err := v.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		runs := v.Runs.List()
		if len(runs) != 1 || runs[0].ID != "r-1" || runs[0].Workflow != "two" ||
			runs[0].Status != projector.StatusCompleted || runs[0].Steps != 2 {
			t.Fatalf("runs %+v; want r-1 of two, completed, 2 steps", runs)
		}
		tl, ok := v.Timeline.Get("r-1")
		if !ok || len(tl.Steps) != 2 || tl.Steps[0].ID != "add" || tl.Steps[1].ID != "double" ||
			tl.Steps[1].Status != projector.AttemptCompleted {
			t.Fatalf("timeline %+v, %v; want add then double, completed", tl, ok)
		}
		if err := n.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Without Workflows the node has no runs client and no view.
func TestNodeWithoutWorkflowsHasNoRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := start(t, context.Background(), memstore.New(), "a")
		if n.Runs() != nil || n.RunsView() != nil {
			t.Fatal("a node without workflows has a runs client or view")
		}
	})
}

// Stop releases the runs the node's worker holds, so a second node takes a
// run waiting on a signal up at once, well inside one lease TTL, and the
// run completes there.
func TestNodeStopHandsRunsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		def := workflow.New("wait", 1, func(c *workflow.Ctx, in int) (int, error) {
			v, err := workflow.Await[int](c, "go")
			return in + v, err
		})
		a := startWithWorkflows(t, ctx, st, "a", def)
		if err := def.Start(ctx, a.Runs(), "r-w", 1); err != nil {
			t.Fatal(err)
		}
		for {
			l, found, err := st.GetLease(ctx, "r-w")
			if err != nil {
				t.Fatal(err)
			}
			if found && l.Holder == "a/runs" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		b := startWithWorkflows(t, ctx, st, "b", def)
		stopAt := time.Now()
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for {
			l, found, err := st.GetLease(ctx, "r-w")
			if err != nil {
				t.Fatal(err)
			}
			if found && l.Holder == "b/runs" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if took := time.Since(stopAt); took >= ttl {
			t.Fatalf("b took the run %v after a's Stop, not inside the TTL %v", took, ttl)
		}
		if err := b.Runs().Signal(ctx, "r-w", "go", 2, "k"); err != nil {
			t.Fatal(err)
		}
		got, err := def.Result(ctx, b.Runs(), "r-w")
		if err != nil || got != 3 {
			t.Fatalf("result %d, %v; want 3", got, err)
		}
		_ = b.Stop(ctx)
	})
}
