package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
)

type payout struct {
	Account string
	Amount  int64
}

// payoutDef validates, waits for the "approved" signal, and notifies.
func payoutDef() *workflow.Def[payout, string] {
	return workflow.New("payout", 1, func(c *workflow.Ctx, in payout) (string, error) {
		stage := "validating"
		if err := workflow.OnQuery(c, "stage", func() (string, error) { return stage, nil }); err != nil {
			return "", err
		}
		if _, err := workflow.Step(c, "validate", func(context.Context) (bool, error) {
			if in.Amount <= 0 {
				return false, workflow.Permanent(errors.New("the amount must be positive"))
			}
			return true, nil
		}); err != nil {
			return "", err
		}
		stage = "awaiting approval"
		ok, err := workflow.Await[bool](c, "approved")
		if err != nil {
			return "", err
		}
		if !ok {
			return "refused", nil
		}
		return workflow.Step(c, "notify", func(context.Context) (string, error) {
			return fmt.Sprintf("paid %d to %s", in.Amount, in.Account), nil
		})
	})
}

// newRunsRig is a rig whose server serves runs of payoutDef, run by a
// workflow worker on the rig's store.
func newRunsRig(t *testing.T) *rig { return newRunsRigWith(t, rigOptions{}) }

func newRunsRigWith(t testing.TB, o rigOptions) *rig {
	t.Helper()
	st := o.store
	if st == nil {
		st = memstore.New()
	}
	ex := actor.NewExecutor(7)
	defs := o.workflows
	if defs == nil {
		defs = []workflow.Workflow{payoutDef()}
	}
	wfs, err := workflow.NewWorkflows(defs...)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := workflow.NewClient(st, wfs, ex, workflow.WithPoll(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runs, tl := projector.NewRuns(), projector.NewTimeline()
	runner, err := projector.NewRunner(projector.RunnerConfig{
		Store: st, Executor: ex, Streams: projector.UniverseStreams(st, workflow.Universe("payout")),
		Projectors: []projector.Projector{runs, tl},
	})
	if err != nil {
		t.Fatal(err)
	}
	o.store = st
	tweak := o.cfg
	o.cfg = func(c *api.Config) {
		c.Runs = &api.RunsBackend{Client: cl, Workflows: wfs, Runs: runs, Timeline: tl, CatchUp: runner.CatchUp}
		if tweak != nil {
			tweak(c)
		}
	}
	r := newRig(t, o)
	w, err := workflow.StartWorker(r.Ctx, r.Root, workflow.WorkerConfig{
		Worker: "wf", Store: st, Workflows: wfs, LeaseTTL: 10 * time.Second,
		ScanEvery: 20 * time.Millisecond, PollEvery: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return r
}

// runUntil re-reads a run through the API until cond holds.
func (r *rig) runUntil(id, what string, cond func(api.RunView) bool) api.RunView {
	r.T.Helper()
	var v api.RunView
	r.WaitFor(id+" "+what, func() (bool, error) {
		var err error
		v, err = r.Client.GetRun(r.Ctx, id)
		return err == nil && cond(v), err
	})
	return v
}

func stepIDs(v api.RunView) []string {
	out := make([]string, len(v.Timeline))
	for i, s := range v.Timeline {
		out[i] = s.ID
	}
	return out
}

func TestRunStartIsIdempotentAndConflictsOnOtherInput(t *testing.T) {
	r := newRunsRig(t)
	in := payout{Account: "alice", Amount: 50}
	v, created, err := r.Client.StartRun(r.Ctx, "payout", "p-1", in)
	if err != nil || !created || v.ID != "p-1" || v.Workflow != "payout" {
		t.Fatalf("first start: %+v created=%v, %v", v, created, err)
	}
	if _, created, err = r.Client.StartRun(r.Ctx, "payout", "p-1", in); err != nil || created {
		t.Fatalf("repeated start: created=%v, %v; want the same run", created, err)
	}
	_, _, err = r.Client.StartRun(r.Ctx, "payout", "p-1", payout{Account: "bob", Amount: 50})
	apiError(t, err, http.StatusConflict, api.CodeConflict)
	if !errors.Is(err, workflow.ErrConflict) {
		t.Fatalf("%v does not match workflow.ErrConflict", err)
	}
}

// A run goes through the API from start to its result: it is listed,
// its view shows the timeline as it grows, a signal completes it, and the
// filters of the list select it.
func TestRunLifecycleThroughTheAPI(t *testing.T) {
	r := newRunsRig(t)
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", "p-1", payout{Account: "alice", Amount: 50}); err != nil {
		t.Fatal(err)
	}
	v := r.runUntil("p-1", "waits for approval", func(v api.RunView) bool {
		return v.Status == "running" && len(v.Timeline) == 2
	})
	if got := stepIDs(v); !slices.Equal(got, []string{"validate", "sys:await:approved"}) {
		t.Fatalf("timeline ids %v; want validate, then the await of approved", got)
	}
	if v.Timeline[0].ID != "validate" || v.Timeline[0].Status != "completed" || v.Timeline[1].Status != "running" {
		t.Fatalf("timeline %+v; want validate completed, then the await running", v.Timeline)
	}
	runs, err := r.Client.ListRuns(r.Ctx, "", "running")
	if err != nil || len(runs) != 1 || runs[0].ID != "p-1" || runs[0].Workflow != "payout" {
		t.Fatalf("running runs %+v, %v", runs, err)
	}
	if err := r.Client.SignalRun(r.Ctx, "p-1", "approved", true, "k1"); err != nil {
		t.Fatal(err)
	}
	v = r.runUntil("p-1", "completes", func(v api.RunView) bool { return v.Status == "completed" })
	if string(v.Output) != `"paid 50 to alice"` {
		t.Fatalf("output %s", v.Output)
	}
	if len(v.Timeline) != 3 || v.Timeline[2].ID != "notify" || v.Timeline[2].Status != "completed" {
		t.Fatalf("timeline %+v; want validate, sys:await:approved, notify", v.Timeline)
	}
	if v.StartedAt.IsZero() || v.EndedAt.IsZero() || v.EndedAt.Before(v.StartedAt) {
		t.Fatalf("times %v .. %v", v.StartedAt, v.EndedAt)
	}
	for _, c := range []struct {
		workflow, status string
		want             []string
	}{
		{"", "", []string{"p-1"}},
		{"payout", "completed", []string{"p-1"}},
		{"payout", "running", nil},
		{"", "pending", nil},
	} {
		runs, err := r.Client.ListRuns(r.Ctx, c.workflow, c.status)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range runs {
			ids = append(ids, x.ID)
		}
		if !slices.Equal(ids, c.want) {
			t.Fatalf("list workflow=%q status=%q: %v, want %v", c.workflow, c.status, ids, c.want)
		}
	}
	err = r.Client.SignalRun(r.Ctx, "p-1", "approved", true, "k2")
	apiError(t, err, http.StatusConflict, api.CodeFinished)
	if !errors.Is(err, workflow.ErrFinished) {
		t.Fatalf("%v does not match workflow.ErrFinished", err)
	}
}

func TestRunCancelThroughTheAPI(t *testing.T) {
	r := newRunsRig(t)
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", "p-c", payout{Account: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	r.runUntil("p-c", "waits", func(v api.RunView) bool { return len(v.Timeline) == 2 })
	if _, err := r.Client.CancelRun(r.Ctx, "p-c", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	v := r.runUntil("p-c", "is cancelled", func(v api.RunView) bool { return v.Status == "cancelled" })
	if v.Error == "" {
		t.Fatalf("a cancelled run with no error: %+v", v)
	}
	if _, err := r.Client.CancelRun(r.Ctx, "p-c", "again"); err != nil {
		t.Fatalf("cancelling a cancelled run: %v, want a no-op", err)
	}
	_, err := r.Client.PauseRun(r.Ctx, "p-c", "late")
	apiError(t, err, http.StatusConflict, api.CodeFinished)
}

func TestRunPauseAndResumeThroughTheAPI(t *testing.T) {
	r := newRunsRig(t)
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", "p-p", payout{Account: "a", Amount: 2}); err != nil {
		t.Fatal(err)
	}
	r.runUntil("p-p", "waits", func(v api.RunView) bool { return len(v.Timeline) == 2 })
	v, err := r.Client.PauseRun(r.Ctx, "p-p", "audit")
	if err != nil || v.Status != "paused" {
		t.Fatalf("pause: %+v, %v; want paused", v.Status, err)
	}
	// A signal to a paused run waits in its inbox for the resume.
	if err := r.Client.SignalRun(r.Ctx, "p-p", "approved", true, "k"); err != nil {
		t.Fatal(err)
	}
	if v, err = r.Client.GetRun(r.Ctx, "p-p"); err != nil || v.Status != "paused" {
		t.Fatalf("after the signal: %+v, %v; want still paused", v.Status, err)
	}
	if _, err := r.Client.ResumeRun(r.Ctx, "p-p", "done"); err != nil {
		t.Fatal(err)
	}
	v = r.runUntil("p-p", "completes", func(v api.RunView) bool { return v.Status == "completed" })
	if string(v.Output) != `"paid 2 to a"` {
		t.Fatalf("output %s", v.Output)
	}
}

// The audit window selects by persistedAt, half-open, in runSeq order.
func TestRunAuditWindow(t *testing.T) {
	r := newRunsRig(t)
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", "p-a", payout{Account: "a", Amount: 3}); err != nil {
		t.Fatal(err)
	}
	if err := r.Client.SignalRun(r.Ctx, "p-a", "approved", false, "k"); err != nil {
		t.Fatal(err)
	}
	r.runUntil("p-a", "completes", func(v api.RunView) bool { return v.Status == "completed" })
	all, err := r.Client.Audit(r.Ctx, "p-a", time.Unix(0, 0), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 4 || all[0].EventType != "RunStarted" || all[len(all)-1].EventType != "RunCompleted" {
		t.Fatalf("audit of the whole run: %+v", all)
	}
	for i := 1; i < len(all); i++ {
		if all[i].RunSeq <= all[i-1].RunSeq {
			t.Fatalf("audit not in runSeq order at %d: %d after %d", i, all[i].RunSeq, all[i-1].RunSeq)
		}
	}
	mid := all[len(all)/2].PersistedAt
	from, to := mid, mid.Add(time.Nanosecond)
	got, err := r.Client.Audit(r.Ctx, "p-a", from, to)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for _, e := range all {
		if !e.PersistedAt.Before(from) && e.PersistedAt.Before(to) {
			want = append(want, e.RunSeq)
		}
	}
	var gotSeqs []uint64
	for _, e := range got {
		gotSeqs = append(gotSeqs, e.RunSeq)
	}
	if len(want) == 0 || !slices.Equal(gotSeqs, want) {
		t.Fatalf("window [%v, %v): %v, want %v", from, to, gotSeqs, want)
	}
	if got, err := r.Client.Audit(r.Ctx, "p-a", to, from); err != nil || len(got) != 0 {
		t.Fatalf("an empty window: %d events, %v", len(got), err)
	}
}

func TestRunRefusals(t *testing.T) {
	r := newRunsRig(t)
	for _, c := range []struct {
		name, body string
	}{
		{"wrong type", `{"workflow":"payout","id":"b","input":{"Account":5,"Amount":1}}`},
		{"unknown field", `{"workflow":"payout","id":"b","input":{"Account":"a","Amount":1,"Note":"x"}}`},
		{"unknown workflow", `{"workflow":"nope","id":"b","input":{}}`},
		{"no id", `{"workflow":"payout","input":{}}`},
		{"malformed", `{"workflow":`},
	} {
		st, b := r.Do("POST", "/v1/runs", "application/json", c.body, "")
		if st != http.StatusBadRequest {
			t.Fatalf("%s: %d %s, want 400", c.name, st, b)
		}
	}
	if _, err := r.Client.GetRun(r.Ctx, "b"); !errors.Is(err, workflow.ErrNotFound) {
		t.Fatalf("a refused start left a run: %v", err)
	}
	for _, path := range []string{"/v1/runs?status=done", "/v1/runs?flavour=x", "/v1/streams/b/audit?from=yesterday&to=2030-01-01T00:00:00Z",
		"/v1/streams/b/audit?to=2030-01-01T00:00:00Z"} {
		if st, b := r.Do("GET", path, "", "", ""); st != http.StatusBadRequest {
			t.Fatalf("GET %s: %d %s, want 400", path, st, b)
		}
	}
	_, err := r.Client.GetRun(r.Ctx, "ghost")
	e := apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	if e.Details["resource"] != "run" || !errors.Is(err, workflow.ErrNotFound) {
		t.Fatalf("unknown run: %+v", e)
	}
	for _, f := range []func() error{
		func() error { _, err := r.Client.CancelRun(r.Ctx, "ghost", ""); return err },
		func() error { return r.Client.SignalRun(r.Ctx, "ghost", "approved", true, "") },
		func() error { _, err := r.Client.Audit(r.Ctx, "ghost", time.Unix(0, 0), time.Now()); return err },
	} {
		apiError(t, f(), http.StatusNotFound, api.CodeNotFound)
	}
	if st, b := r.Do("POST", "/v1/runs/x/signals", "application/json", `{"value":1}`, ""); st != http.StatusBadRequest {
		t.Fatalf("a signal with no name: %d %s", st, b)
	}
}

// A server without workflows has no runs list and knows no run.
func TestRunsWithoutBackend(t *testing.T) {
	r := newRig(t, rigOptions{})
	_, err := r.Client.ListRuns(r.Ctx, "", "")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	_, err = r.Client.GetRun(r.Ctx, "x")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	_, _, err = r.Client.StartRun(r.Ctx, "payout", "x", nil)
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
}

func runEvent(t testing.TB, e api.StreamEvent) (api.Run, bool) {
	t.Helper()
	if e.Name != api.EventRun {
		return api.Run{}, false
	}
	var v api.Run
	if err := json.Unmarshal(e.Data, &v); err != nil {
		t.Fatalf("a run event does not decode: %v: %s", err, e.Data)
	}
	return v, true
}

// TestRunStatusChangeIsAnEvent: on a server with a runs backend, the event
// stream's state holds each run's row and the summary counts the runs; a
// run that waits and is then cancelled appears again as its row with the
// new status, steps and end.
func TestRunStatusChangeIsAnEvent(t *testing.T) {
	r := newRunsRigWith(t, rigOptions{cfg: fastEvents})
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", "p-e", payout{Account: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	r.runUntil("p-e", "waits", func(v api.RunView) bool { return len(v.Timeline) == 2 })
	f := follow(t, r.Ctx, r.Client)
	var first api.Run
	for _, e := range f.untilSynced() {
		if v, ok := runEvent(t, e); ok {
			first = v
		}
		if e.Name == api.EventSummary {
			var s api.Summary
			if err := json.Unmarshal(e.Data, &s); err != nil || s.Runs != 1 || s.RunsStreamed != 1 {
				t.Fatalf("the initial summary: %s %v", e.Data, err)
			}
		}
	}
	if first.ID != "p-e" || first.Workflow != "payout" || first.Status != "running" || first.Steps != 2 || !first.EndedAt.IsZero() {
		t.Fatalf("the initial run row: %+v", first)
	}
	if _, err := r.Client.CancelRun(r.Ctx, "p-e", "no"); err != nil {
		t.Fatal(err)
	}
	e := f.next("p-e cancelled", func(e api.StreamEvent) bool {
		v, ok := runEvent(t, e)
		return ok && v.ID == "p-e" && v.Status == "cancelled"
	})
	if v, _ := runEvent(t, e); v.EndedAt.IsZero() {
		t.Fatalf("a cancelled run's row with no end: %s", e.Data)
	}
}

// TestEventsWithoutRunsBackend: a server with no runs backend streams no
// run rows and counts no runs.
func TestEventsWithoutRunsBackend(t *testing.T) {
	r := newRig(t, rigOptions{cfg: fastEvents})
	f := follow(t, r.Ctx, r.Client)
	for _, e := range f.untilSynced() {
		if e.Name == api.EventRun {
			t.Fatalf("a run event from a server without runs: %s", e.Data)
		}
		if e.Name == api.EventSummary && (strings.Contains(string(e.Data), `"runs"`)) {
			t.Fatalf("a summary counting runs without a backend: %s", e.Data)
		}
	}
}

// TestRunQueryAndStepValuesThroughTheAPI: GET /v1/runs/{id}/query/{name}
// answers from the run's journal as it stands (mid-run, then after the
// end) without appending to it; an unknown query is 404 not_found; the
// timeline carries each completed step's output and the await's input
// (the signal it waits for); a run that published nothing has no values.
func TestRunQueryAndStepValuesThroughTheAPI(t *testing.T) {
	r := newRunsRig(t)
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", "p-q", payout{Account: "bob", Amount: 7}); err != nil {
		t.Fatal(err)
	}
	v := r.runUntil("p-q", "waits for approval", func(v api.RunView) bool {
		return v.Status == "running" && len(v.Timeline) == 2
	})
	if got, err := r.Client.QueryRun(r.Ctx, "p-q", "stage"); err != nil || string(got) != `"awaiting approval"` {
		t.Fatalf("query mid-run: %s, %v", got, err)
	}
	_, err := r.Client.QueryRun(r.Ctx, "p-q", "nope")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
	if vals, err := r.Client.RunValues(r.Ctx, "p-q"); err != nil || len(vals) != 0 {
		t.Fatalf("values %v, %v; want none", vals, err)
	}
	after := r.runUntil("p-q", "still waits", func(api.RunView) bool { return true })
	if len(after.Timeline) != len(v.Timeline) || after.Timeline[1].Status != "running" {
		t.Fatalf("the query changed the run: timeline %+v, was %+v", after.Timeline, v.Timeline)
	}
	if a := v.Timeline[0].Attempts; len(a) != 1 || string(a[0].Output) != "true" {
		t.Fatalf("validate's attempts %+v; want its output true", a)
	}
	if a := v.Timeline[1].Attempts; len(a) != 1 || !strings.Contains(string(a[0].Started), `"approved"`) {
		t.Fatalf("the await's attempts %+v; want its input naming the signal", a)
	}
	if err := r.Client.SignalRun(r.Ctx, "p-q", "approved", true, "k"); err != nil {
		t.Fatal(err)
	}
	r.runUntil("p-q", "completes", func(v api.RunView) bool { return v.Status == "completed" })
	if got, err := r.Client.QueryRun(r.Ctx, "p-q", "stage"); err != nil || string(got) != `"awaiting approval"` {
		t.Fatalf("query after the end: %s, %v", got, err)
	}
}
