package api_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
)

// labelledPayout is a payout that labels its progress with the search
// attribute "stage".
func labelledPayout() *workflow.Def[payout, string] {
	return workflow.New("payout", 1, func(c *workflow.Ctx, in payout) (string, error) {
		if _, err := workflow.Step(c, "validate", func(context.Context) (bool, error) { return true, nil }); err != nil {
			return "", err
		}
		if err := workflow.SetAttributes(c, map[string]string{"stage": "waiting"}); err != nil {
			return "", err
		}
		if _, err := workflow.Await[bool](c, "approved"); err != nil {
			return "", err
		}
		return "paid", workflow.SetAttributes(c, map[string]string{"stage": "paid"})
	})
}

// TestRunsFilterBySearchAttributes: attributes given at the start through
// the API and set by the run are in the run's view and row, and GET
// /v1/runs?attr=key:value (repeated: all of them) lists exactly the runs
// carrying them, following the run as it changes them; a malformed filter
// or attribute is 400 and starts nothing.
func TestRunsFilterBySearchAttributes(t *testing.T) {
	r := newRunsRigWith(t, rigOptions{workflows: []workflow.Workflow{labelledPayout()}})
	for id, attrs := range map[string]map[string]string{
		"p-1": {"customer": "c-1", "region": "eu"},
		"p-2": {"customer": "c-2", "region": "eu"},
		"p-3": nil,
	} {
		if _, _, err := r.Client.StartRunOn(r.Ctx, "payout", id, payout{Account: "a", Amount: 1}, api.StartOptions{Attributes: attrs}); err != nil {
			t.Fatal(err)
		}
		r.runUntil(id, "waits", func(v api.RunView) bool { return v.Attributes["stage"] == "waiting" })
	}
	list := func(filter map[string]string) []string {
		t.Helper()
		runs, _, err := r.Client.SearchRuns(r.Ctx, api.RunQuery{Attrs: filter})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, run := range runs {
			for k, want := range filter {
				if run.Attributes[k] != want {
					t.Fatalf("row %s carries %v, the filter is %v", run.ID, run.Attributes, filter)
				}
			}
			ids = append(ids, run.ID)
		}
		return ids
	}
	for _, c := range []struct {
		filter map[string]string
		want   []string
	}{
		{map[string]string{"region": "eu"}, []string{"p-1", "p-2"}},
		{map[string]string{"customer": "c-1"}, []string{"p-1"}},
		{map[string]string{"stage": "waiting"}, []string{"p-1", "p-2", "p-3"}},
		{map[string]string{"stage": "waiting", "customer": "c-2"}, []string{"p-2"}},
		{map[string]string{"customer": "nobody"}, []string{}},
	} {
		if got := list(c.filter); !slices.Equal(got, c.want) {
			t.Fatalf("runs with %v: %v, want %v", c.filter, got, c.want)
		}
	}
	if err := r.Client.SignalRun(r.Ctx, "p-1", "approved", true, "k"); err != nil {
		t.Fatal(err)
	}
	v := r.runUntil("p-1", "completes", func(v api.RunView) bool { return v.Status == "completed" })
	if want := map[string]string{"customer": "c-1", "region": "eu", "stage": "paid"}; !maps.Equal(v.Attributes, want) {
		t.Fatalf("p-1's attributes %v, want %v", v.Attributes, want)
	}
	if got := list(map[string]string{"stage": "waiting"}); !slices.Equal(got, []string{"p-2", "p-3"}) {
		t.Fatalf("waiting runs after p-1 was paid: %v", got)
	}
	if got := list(map[string]string{"stage": "paid"}); !slices.Equal(got, []string{"p-1"}) {
		t.Fatalf("paid runs: %v", got)
	}
	_, _, err := r.Client.SearchRuns(r.Ctx, api.RunQuery{Attrs: map[string]string{"bad key": "x"}})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	_, _, err = r.Client.StartRunOn(r.Ctx, "payout", "p-bad", payout{Account: "a", Amount: 1}, api.StartOptions{Attributes: map[string]string{"k": string(make([]byte, 300))}})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	_, err = r.Client.GetRun(r.Ctx, "p-bad")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
}

// TestUnrunnableRunsListAndFilter: a run pinned to a version no live
// worker carries lists as unrunnable (with the missing capability), is
// found by ?status=unrunnable, and lists as pending again once a worker
// carrying its version is live.
func TestUnrunnableRunsListAndFilter(t *testing.T) {
	st := memstore.New()
	v2 := workflow.New("payout", 2, func(_ *workflow.Ctx, in payout) (string, error) { return "v2", nil })
	wfs, err := workflow.NewWorkflows(payoutDef(), v2)
	if err != nil {
		t.Fatal(err)
	}
	early, err := workflow.NewClient(st, wfs, actor.NewExecutor(1))
	if err != nil {
		t.Fatal(err)
	}
	// Started while no worker is live.
	if err := v2.Start(context.Background(), early, "p-v2", payout{Account: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	// The node's host advertises that it carries v1 only.
	r := newRunsRigWith(t, rigOptions{store: st, host: func(hc *plane.HostConfig) {
		hc.Capabilities = []string{workflow.RunsCapability, workflow.Capability("payout", 1)}
	}})
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", "p-v1", payout{Account: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	r.runUntil("p-v1", "waits", func(v api.RunView) bool { return v.Status == "running" })
	var rows []api.Run
	r.WaitFor("p-v2 unrunnable", func() (bool, error) {
		var err error
		rows, _, err = r.Client.SearchRuns(r.Ctx, api.RunQuery{Status: "unrunnable"})
		return len(rows) == 1, err
	})
	if rows[0].ID != "p-v2" || !strings.Contains(rows[0].LastError, "workflow:payout@2") {
		t.Fatalf("unrunnable rows %+v, want p-v2 naming workflow:payout@2", rows)
	}
	all, _, err := r.Client.SearchRuns(r.Ctx, api.RunQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range all {
		if want := map[string]string{"p-v1": "running", "p-v2": "unrunnable"}[row.ID]; row.Status != want {
			t.Fatalf("row %s is %s, want %s", row.ID, row.Status, want)
		}
	}
	if _, err := st.Heartbeat(r.Ctx, "v2-node", 60, store.Advertise([]string{workflow.Capability("payout", 2)})); err != nil {
		t.Fatal(err)
	}
	if rows, _, err = r.Client.SearchRuns(r.Ctx, api.RunQuery{Status: "unrunnable"}); err != nil || len(rows) != 0 {
		t.Fatalf("with a node carrying v2: unrunnable %+v, %v", rows, err)
	}
}
