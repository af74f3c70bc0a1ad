package orrery

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
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

type nopProjector struct{}

func (nopProjector) Name() string                                        { return "nop" }
func (nopProjector) Apply(context.Context, string, event.Envelope) error { return nil }

// TestAppTakesRetryPoliciesAndProjectors: RetryPolicies joins Retry (a kind
// in both is refused, since which one would run is not knowable), and the
// projectors reach serve; a nil projector, or projectors without workflows
// to read, stop the binary at start.
func TestAppTakesRetryPoliciesAndProjectors(t *testing.T) {
	p := nopProjector{}
	ca, err := App{
		Workflows:     []workflow.Workflow{ledger.PayoutDef()},
		Retry:         map[string]adapter.RetryPolicy{adapter.KindHTTP: {Attempts: 1}},
		RetryPolicies: map[string]adapter.RetryPolicy{"mail.send": {Attempts: 3}},
		Projectors:    []projector.Projector{p},
	}.cli()
	if err != nil {
		t.Fatal(err)
	}
	if ca.Retry[adapter.KindHTTP].Attempts != 1 || ca.Retry["mail.send"].Attempts != 3 || len(ca.Projectors) != 1 || ca.Workflows == nil {
		t.Fatalf("cli app %+v: want both policies, the projector and the workflows", ca)
	}
	if _, err := (App{Workflows: []workflow.Workflow{ledger.PayoutDef()},
		Retry:         map[string]adapter.RetryPolicy{adapter.KindHTTP: {Attempts: 1}},
		RetryPolicies: map[string]adapter.RetryPolicy{adapter.KindHTTP: {Attempts: 2}}}).cli(); err == nil {
		t.Fatal("one kind in Retry and RetryPolicies accepted")
	}
	if _, err := (App{Workflows: []workflow.Workflow{ledger.PayoutDef()},
		RetryPolicies: map[string]adapter.RetryPolicy{adapter.KindHTTP: {Coefficient: 0.5}}}).cli(); err == nil {
		t.Fatal("an unusable policy in RetryPolicies accepted")
	}
	if _, err := (App{Workflows: []workflow.Workflow{ledger.PayoutDef()}, Projectors: []projector.Projector{nil}}).cli(); err == nil {
		t.Fatal("a nil projector accepted")
	}
	if _, err := (App{Worlds: []world.Kernel{ledger.AccountDef().Kernel()}, Projectors: []projector.Projector{p}}).cli(); err == nil {
		t.Fatal("projectors without workflows accepted")
	}
}
