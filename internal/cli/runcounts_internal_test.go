package cli

import (
	"context"
	"testing"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
)

// orrery_workflow_runs counts a run whose version no live worker carries
// as unrunnable, and as nothing else.
func TestRunCountsCountUnrunnableRuns(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	ok := func(_ *workflow.Ctx, in int) (int, error) { return in, nil }
	v1, v2 := workflow.New("pay", 1, ok), workflow.New("pay", 2, ok)
	wfs, err := workflow.NewWorkflows(v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := workflow.NewClient(st, wfs, actor.NewExecutor(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := v2.Start(ctx, cl, "r2", 1); err != nil {
		t.Fatal(err)
	}
	runs := projector.NewRuns()
	if got := runCounts(runs, cl); got["unrunnable"] != 0 {
		t.Fatalf("with no worker live: %v", got)
	}
	if _, err := st.Heartbeat(ctx, "old", 1, store.Advertise([]string{workflow.Capability("pay", 1)})); err != nil {
		t.Fatal(err)
	}
	got := runCounts(runs, cl)
	if got["unrunnable"] != 1 || len(got) != 1 {
		t.Fatalf("counts %v, want one unrunnable run only", got)
	}
}
