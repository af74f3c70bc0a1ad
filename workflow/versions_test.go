package workflow_test

import (
	"slices"
	"testing"

	"github.com/orrery-run/orrery/workflow"
)

// One binary carries several versions of a workflow: each is registered,
// Lookup gives the newest, and the capabilities name every version.
func TestWorkflowsCarrySeveralVersions(t *testing.T) {
	ok := func(*workflow.Ctx, int) (int, error) { return 0, nil }
	v1, v2, v3 := workflow.New("payout", 1, ok), workflow.New("payout", 2, ok), workflow.New("payout", 3, ok)
	other := workflow.New("refund", 7, ok)
	wfs, err := workflow.NewWorkflows(v3, other, v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	if got := wfs.Names(); !slices.Equal(got, []string{"payout", "refund"}) {
		t.Errorf("names %v", got)
	}
	if got := wfs.Versions("payout"); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("versions %v, want [1 2 3]", got)
	}
	if d, ok := wfs.Lookup("payout"); !ok || d != workflow.Workflow(v3) {
		t.Errorf("Lookup gives %v, want the newest (v3)", d)
	}
	if d, ok := wfs.LookupVersion("payout", 1); !ok || d != workflow.Workflow(v1) {
		t.Errorf("LookupVersion(1) gives %v", d)
	}
	if _, ok := wfs.LookupVersion("payout", 4); ok {
		t.Error("LookupVersion(4) found a version never registered")
	}
	want := []string{"workflow:payout@1", "workflow:payout@2", "workflow:payout@3", "workflow:refund@7"}
	if got := wfs.Capabilities(); !slices.Equal(got, want) {
		t.Errorf("capabilities %v, want %v", got, want)
	}
}
