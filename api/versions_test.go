package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// Starts pick a version (the newest by default), a version no live worker
// carries is 409 version_not_carried (errors.Is workflow.ErrVersionNotCarried
// through the Go client) and starts nothing, and the run list filters by
// version.
func TestRunVersionsOverTheAPI(t *testing.T) {
	payout2 := workflow.New("payout", 2, func(c *workflow.Ctx, in payout) (string, error) {
		return workflow.Step(c, "pay", func(context.Context) (string, error) { return "v2", nil })
	})
	r := newRunsRigWith(t, rigOptions{workers: []string{}, workflows: []workflow.Workflow{payoutDef(), payout2}})
	// The only live worker carries v1.
	if _, err := r.Store.Heartbeat(r.Ctx, "old", 10, store.Advertise([]string{"workflow:payout@1"})); err != nil {
		t.Fatal(err)
	}
	in := payout{Account: "alice", Amount: 5}
	_, _, err := r.Client.StartRun(r.Ctx, "payout", "p-new", in)
	var ae *api.Error
	if !errors.Is(err, workflow.ErrVersionNotCarried) || !errors.As(err, &ae) || ae.Status != http.StatusConflict ||
		ae.Code != api.CodeVersionNotCarried || !strings.Contains(ae.Message, "workflow:payout@2") {
		t.Fatalf("a v2 start with only a v1 worker live: %v, want 409 version_not_carried naming workflow:payout@2", err)
	}
	if _, err := r.Client.GetRun(r.Ctx, "p-new"); !errors.Is(err, workflow.ErrNotFound) {
		t.Fatalf("the refused start left a run: %v", err)
	}
	v, created, err := r.Client.StartRunAt(r.Ctx, "payout", "p-1", 1, in)
	if err != nil || !created || v.Version != 1 {
		t.Fatalf("a v1 start: %+v, %v, %v; want created at version 1", v.Run, created, err)
	}
	if _, _, err := r.Client.StartRunAt(r.Ctx, "payout", "p-9", 9, in); !errors.Is(err, workflow.ErrInvalid) {
		t.Fatalf("a version the server does not carry: %v, want invalid_argument", err)
	}
	if _, err := r.Store.Heartbeat(r.Ctx, "new", 10, store.Advertise([]string{"workflow:payout@1", "workflow:payout@2"})); err != nil {
		t.Fatal(err)
	}
	v, created, err = r.Client.StartRun(r.Ctx, "payout", "p-2", in)
	if err != nil || !created || v.Version != 2 {
		t.Fatalf("a start by default once v2 is carried: %+v, %v, %v; want created at version 2", v.Run, created, err)
	}
	for version, want := range map[uint64]string{1: "p-1", 2: "p-2"} {
		runs, _, err := r.Client.SearchRuns(r.Ctx, api.RunQuery{Workflow: "payout", Version: version})
		if err != nil || len(runs) != 1 || runs[0].ID != want || runs[0].Version != version {
			t.Errorf("runs of version %d: %+v, %v; want %s alone", version, runs, err, want)
		}
	}
	if st, _ := r.Do(http.MethodGet, "/v1/runs?version=0", "", "", ""); st != http.StatusBadRequest {
		t.Errorf("version=0: %d, want 400", st)
	}
}
