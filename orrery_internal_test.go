package orrery

import (
	"errors"
	"slices"
	"testing"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

func TestAppRegistersWorldsAndWorkflows(t *testing.T) {
	ca, err := App{
		Worlds:    []world.Kernel{ledger.AccountDef().Kernel()},
		Workflows: []workflow.Workflow{ledger.PayoutDef()},
	}.cli()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ca.Kernels[ledger.UniverseAccount]; !ok || len(ca.Kernels) != 1 {
		t.Fatalf("kernels %v", ca.Kernels)
	}
	if got := ca.Workflows.Names(); !slices.Equal(got, []string{ledger.WorkflowPayout}) {
		t.Fatalf("workflows %v", got)
	}
	if ca, err := (App{Worlds: []world.Kernel{ledger.AccountDef().Kernel()}}).cli(); err != nil || ca.Workflows != nil {
		t.Fatalf("no workflows: %v, %v", ca.Workflows, err)
	}
	_, err = App{Workflows: []workflow.Workflow{ledger.PayoutDef(), ledger.PayoutDef()}}.cli()
	if !errors.Is(err, workflow.ErrInvalid) {
		t.Fatalf("a workflow registered twice: %v, want ErrInvalid", err)
	}
}
