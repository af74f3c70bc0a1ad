package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

func effectWorlds(es []api.Effect) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.World
	}
	return out
}

// TestEffectsAcrossWorldsFilteredAndPaged: GET /v1/effects without a world
// lists every world's effects in queue order, pages them by their "next"
// (every effect once, no next on the last page), filters by world, kind
// and status, refuses a limit over the maximum and an unknown status, and
// answers an unknown world 404.
func TestEffectsAcrossWorldsFilteredAndPaged(t *testing.T) {
	r := newRig(t, rigOptions{})
	for _, id := range []string{"ea", "eb", "ec"} {
		r.Create(id, universe)
		must(r.Client.Send(r.Ctx, id, typeName(t, Pay{}), nil, "pay-"+id))(t)
	}
	r.WaitFor("three effects queued", func() (bool, error) {
		es, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{})
		return len(es) == 3, err
	})
	// Queue order is the order the worlds' steps published in, which
	// their hosts decide: the pages must give the one-page list's order.
	whole, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	after, pages := "", 0
	for {
		page, next, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		seen = append(seen, effectWorlds(page)...)
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(seen, effectWorlds(whole)) || !slices.Equal(slices.Sorted(slices.Values(seen)), []string{"ea", "eb", "ec"}) || pages != 2 {
		t.Fatalf("paged by 2: %v in %d pages, want %v, each world once, in 2", seen, pages, effectWorlds(whole))
	}
	for i := 1; i < len(whole); i++ {
		if whole[i-1].Seq >= whole[i].Seq {
			t.Fatalf("not in queue order: %+v", whole)
		}
	}
	if es, next, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{World: "eb"}); err != nil || next != "" ||
		!slices.Equal(effectWorlds(es), []string{"eb"}) {
		t.Fatalf("world eb: %v %q %v", effectWorlds(es), next, err)
	}
	if es, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{Kind: "mail.send"}); err != nil || len(es) != 0 {
		t.Fatalf("kind mail.send: %+v %v", es, err)
	}
	if es, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{Kind: "http.request", Status: "pending"}); err != nil || len(es) != 3 {
		t.Fatalf("pending http.request: %+v %v", es, err)
	}
	claimed, err := r.Store.Claim(r.Ctx, "adapter-1", []string{world.KindHTTPRequest}, 10, time.Minute)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	ea := claimed[slices.IndexFunc(claimed, func(it vocab.EffectItem) bool { return it.World == "ea" })]
	if es, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{Status: "inflight", World: "ec"}); err != nil || len(es) != 1 || es[0].ClaimedBy != "adapter-1" {
		t.Fatalf("ec inflight: %+v %v", es, err)
	}
	payload, err := world.EncodeReceipt(world.Receipt{IntentHash: ea.IntentHash, Kind: ea.Kind, Status: vocab.ReceiptOK})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Store.Complete(r.Ctx, ea.IntentHash, ea.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	r.WaitFor("ea's effect done", func() (bool, error) {
		es, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{Status: "done"})
		return len(es) == 1 && es[0].World == "ea" && es[0].State == "done", err
	})
	if es, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{}); err != nil || !slices.Equal(slices.Sorted(slices.Values(effectWorlds(es))), []string{"eb", "ec"}) {
		t.Fatalf("open effects (the default) after ea's is done: %v %v", effectWorlds(es), err)
	}
	if es, _, err := r.Client.QueryEffects(r.Ctx, api.EffectQuery{Status: "all"}); err != nil || len(es) != 3 {
		t.Fatalf("all effects: %v %v", effectWorlds(es), err)
	}
	_, _, err = r.Client.QueryEffects(r.Ctx, api.EffectQuery{Limit: api.MaxListLimit + 1})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	_, _, err = r.Client.QueryEffects(r.Ctx, api.EffectQuery{Status: "gone"})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
	_, _, err = r.Client.QueryEffects(r.Ctx, api.EffectQuery{World: "nobody"})
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)
}

// TestTimersAcrossWorldsPaged: GET /v1/timers without a world lists every
// world's timers by due time, pages them once each, and filters by world
// and status; a malformed cursor is refused.
func TestTimersAcrossWorldsPaged(t *testing.T) {
	r := newRig(t, rigOptions{})
	for i, id := range []string{"ta", "tb", "tc"} {
		r.Create(id, universe)
		must(r.Client.Send(r.Ctx, id, typeName(t, Arm{}), Arm{AfterMs: int64(3_600_000 * (3 - i))}, "arm-"+id))(t)
	}
	r.WaitFor("three timers armed", func() (bool, error) {
		ts, _, err := r.Client.QueryTimers(r.Ctx, api.TimerQuery{})
		return len(ts) == 3, err
	})
	var seen []string
	after := ""
	for range 5 {
		page, next, err := r.Client.QueryTimers(r.Ctx, api.TimerQuery{Limit: 1, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, tm := range page {
			seen = append(seen, tm.World)
		}
		if next == "" {
			break
		}
		after = next
	}
	// tc's is due first, ta's last.
	if !slices.Equal(seen, []string{"tc", "tb", "ta"}) {
		t.Fatalf("paged by 1: %v, want tc, tb, ta", seen)
	}
	if ts, _, err := r.Client.QueryTimers(r.Ctx, api.TimerQuery{World: "tb", Status: "scheduled"}); err != nil || len(ts) != 1 || ts[0].World != "tb" {
		t.Fatalf("tb scheduled: %+v %v", ts, err)
	}
	if ts, _, err := r.Client.QueryTimers(r.Ctx, api.TimerQuery{Status: "delivered"}); err != nil || len(ts) != 0 {
		t.Fatalf("delivered: %+v %v", ts, err)
	}
	_, _, err := r.Client.QueryTimers(r.Ctx, api.TimerQuery{After: "not-a-cursor"})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
}

// TestWorldsSearchAndPage: worlds are searched by id substring and
// prefix, filtered by universe and status, and paged by id.
func TestWorldsSearchAndPage(t *testing.T) {
	r := newRig(t, rigOptions{})
	for _, id := range []string{"alice", "malice", "bob"} {
		r.Create(id, universe)
	}
	r.Create("alina", other)
	must(r.Client.Pause(r.Ctx, "malice", "look"))(t)
	search := func(q api.WorldQuery) []string {
		t.Helper()
		ws, _, err := r.Client.SearchWorlds(r.Ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return worldIDs(ws)
	}
	for _, c := range []struct {
		q    api.WorldQuery
		want []string
	}{
		{api.WorldQuery{ListOptions: api.ListOptions{Search: "ALI"}}, []string{"alice", "alina", "malice"}},
		{api.WorldQuery{ListOptions: api.ListOptions{Prefix: "ali"}}, []string{"alice", "alina"}},
		{api.WorldQuery{Universe: other}, []string{"alina"}},
		{api.WorldQuery{Status: "paused"}, []string{"malice"}},
		{api.WorldQuery{Universe: universe, ListOptions: api.ListOptions{Search: "li"}}, []string{"alice", "malice"}},
	} {
		if got := search(c.q); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.q, got, c.want)
		}
	}
	var all []string
	after := ""
	for range 10 {
		ws, next, err := r.Client.SearchWorlds(r.Ctx, api.WorldQuery{ListOptions: api.ListOptions{Limit: 1, After: after}})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, worldIDs(ws)...)
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(all, []string{"alice", "alina", "bob", "malice"}) {
		t.Fatalf("paged by 1: %v", all)
	}
}

// TestWorkerStatusDeadIsNeverDraining: a worker without a heartbeat
// within WorkerLiveFor is dead, even when marked draining; draining is
// only a live worker's; the list filters by status and searches by id.
func TestWorkerStatusDeadIsNeverDraining(t *testing.T) {
	clock := &testrig.Clock{}
	st := memstore.New(memstore.WithClock(clock.Now))
	r := newRig(t, rigOptions{store: st})
	must(st.Heartbeat(r.Ctx, "ghost", 4))(t)
	must(st.SetDraining(r.Ctx, "ghost", true))(t)
	clock.Advance(time.Hour)
	must(st.Heartbeat(r.Ctx, "fresh", 4))(t)
	must(st.Heartbeat(r.Ctx, "leaving", 4))(t)
	must(st.SetDraining(r.Ctx, "leaving", true))(t)
	status := func(id string) string {
		ws, _, err := r.Client.SearchWorkers(r.Ctx, api.WorkerQuery{ListOptions: api.ListOptions{Search: id}})
		if err != nil || len(ws) != 1 {
			t.Fatalf("workers %q: %+v %v", id, ws, err)
		}
		return ws[0].Status
	}
	if got := status("ghost"); got != api.WorkerDead {
		t.Fatalf("ghost (draining, no heartbeat for an hour) is %q, want dead", got)
	}
	if got := status("leaving"); got != api.WorkerDraining {
		t.Fatalf("leaving (live, draining) is %q, want draining", got)
	}
	if got := status("fresh"); got != api.WorkerLive {
		t.Fatalf("fresh is %q, want live", got)
	}
	ws, _, err := r.Client.SearchWorkers(r.Ctx, api.WorkerQuery{Status: api.WorkerDraining})
	if err != nil || len(ws) != 1 || ws[0].ID != "leaving" {
		t.Fatalf("draining workers: %+v %v", ws, err)
	}
	ws, _, err = r.Client.SearchWorkers(r.Ctx, api.WorkerQuery{Status: api.WorkerDead})
	if err != nil || !slices.ContainsFunc(ws, func(w api.Worker) bool { return w.ID == "ghost" }) ||
		slices.ContainsFunc(ws, func(w api.Worker) bool { return w.Status != api.WorkerDead }) {
		t.Fatalf("dead workers: %+v %v", ws, err)
	}
	_, _, err = r.Client.SearchWorkers(r.Ctx, api.WorkerQuery{Status: "sleepy"})
	apiError(t, err, http.StatusBadRequest, api.CodeInvalidArgument)
}

// TestRunPageStepsAndActions: a run's view carries its input, each
// attempt's start, output and failure, and only the actions that apply:
// a live run pauses and cancels, a paused one resumes, a finished one
// offers none. Runs are searched by id and workflow name and paged.
func TestRunPageStepsAndActions(t *testing.T) {
	r := newRunsRig(t)
	startRun(t, r, "p-ok", payout{Account: "alice", Amount: 50})
	v := r.runUntil("p-ok", "waits for approval", func(v api.RunView) bool { return len(v.Timeline) == 2 })
	if !slices.Equal(v.Actions, []string{"pause", "cancel", "signal"}) {
		t.Fatalf("a running run's actions: %v", v.Actions)
	}
	var in payout
	if json.Unmarshal(v.Input, &in) != nil || in.Account != "alice" || in.Amount != 50 {
		t.Fatalf("run input: %s", v.Input)
	}
	validate := v.Timeline[0].Attempts[0]
	if string(validate.Output) != "true" || !strings.Contains(string(validate.Started), `"kind"`) {
		t.Fatalf("validate attempt: output %s started %s", validate.Output, validate.Started)
	}
	if err := r.Client.SignalRun(r.Ctx, "p-ok", "approved", true, "k"); err != nil {
		t.Fatal(err)
	}
	v = r.runUntil("p-ok", "completes", func(v api.RunView) bool { return v.Status == "completed" })
	if len(v.Actions) != 0 {
		t.Fatalf("a completed run offers %v, want nothing", v.Actions)
	}
	if notify := v.Timeline[len(v.Timeline)-1]; notify.ID != "notify" || string(notify.Attempts[0].Output) != `"paid 50 to alice"` {
		t.Fatalf("notify step: %+v", notify)
	}

	startRun(t, r, "p-bad", payout{Account: "bob", Amount: -1})
	v = r.runUntil("p-bad", "fails", func(v api.RunView) bool { return v.Status == "failed" })
	if len(v.Actions) != 0 {
		t.Fatalf("a failed run offers %v", v.Actions)
	}
	failed := v.Timeline[0].Attempts[0]
	if failed.Error == "" || !strings.Contains(string(failed.Failure), "the amount must be positive") || failed.Output != nil {
		t.Fatalf("the failed attempt: %+v", failed)
	}

	startRun(t, r, "p-wait", payout{Account: "carol", Amount: 5})
	r.runUntil("p-wait", "waits", func(v api.RunView) bool { return len(v.Timeline) == 2 })
	must(r.Client.PauseRun(r.Ctx, "p-wait", "audit"))(t)
	v = r.runUntil("p-wait", "paused", func(v api.RunView) bool { return v.Status == "paused" })
	if !slices.Equal(v.Actions, []string{"resume", "cancel", "signal"}) {
		t.Fatalf("a paused run's actions: %v", v.Actions)
	}

	ids := func(q api.RunQuery) []string {
		t.Helper()
		runs, _, err := r.Client.SearchRuns(r.Ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, run := range runs {
			out = append(out, run.ID)
		}
		return out
	}
	if got := ids(api.RunQuery{ListOptions: api.ListOptions{Search: "ok"}}); !slices.Equal(got, []string{"p-ok"}) {
		t.Fatalf("search ok: %v", got)
	}
	if got := ids(api.RunQuery{ListOptions: api.ListOptions{Search: "PAYOUT"}}); len(got) != 3 {
		t.Fatalf("search by workflow name: %v", got)
	}
	if got := ids(api.RunQuery{Status: "failed"}); !slices.Equal(got, []string{"p-bad"}) {
		t.Fatalf("failed runs: %v", got)
	}
	var all []string
	after := ""
	for range 5 {
		runs, next, err := r.Client.SearchRuns(r.Ctx, api.RunQuery{ListOptions: api.ListOptions{Limit: 2, After: after}})
		if err != nil {
			t.Fatal(err)
		}
		for _, run := range runs {
			all = append(all, run.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	if fmt.Sprint(all) != "[p-bad p-ok p-wait]" {
		t.Fatalf("runs paged by 2: %v", all)
	}
}

func startRun(t *testing.T, r *rig, id string, in payout) {
	t.Helper()
	if _, _, err := r.Client.StartRun(r.Ctx, "payout", id, in); err != nil {
		t.Fatal(err)
	}
}

// TestWorkersListCapabilitiesAndRoles: the workers listing returns what
// each worker advertised and the roles among it; a worker that advertised
// nothing (an older binary) runs every role.
func TestWorkersListCapabilitiesAndRoles(t *testing.T) {
	st := memstore.New()
	r := newRig(t, rigOptions{store: st})
	must(st.Heartbeat(r.Ctx, "fx", 7, store.Advertise([]string{"role:effects", "effect:pay", "role:timers", "world:u@2"})))(t)
	must(st.Heartbeat(r.Ctx, "old", 4))(t)
	ws, _, err := r.Client.SearchWorkers(r.Ctx, api.WorkerQuery{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]api.Worker{}
	for _, w := range ws {
		got[w.ID] = w
	}
	if w := got["fx"]; !slices.Equal(w.Capabilities, []string{"effect:pay", "role:effects", "role:timers", "world:u@2"}) ||
		!slices.Equal(w.Roles, []string{"effects", "timers"}) || w.Capacity != 7 {
		t.Fatalf("fx: %+v", w)
	}
	if w := got["old"]; w.Capabilities == nil || len(w.Capabilities) != 0 ||
		!slices.Equal(w.Roles, []string{"host", "effects", "timers", "api", "orchestrator"}) {
		t.Fatalf("old: %+v, want no capabilities and every role", w)
	}
}
