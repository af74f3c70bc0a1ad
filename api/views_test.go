package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// TestInboxDepth: a paused world's input waits in its inbox and its view
// counts it; the list with detail shows the same views as GET, with the
// lease and head; a backlog beyond MaxInboxDepth shows the cap and
// inbox_depth_more; resuming drains it to 0; detail takes only true or
// false.
func TestInboxDepth(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("deep", universe)
	r.Create("idle", universe)
	r.WaitFor("both leased", func() (bool, error) {
		vs, err := r.Client.ListWorldViews(r.Ctx, "", "")
		if err != nil || len(vs) != 2 {
			return false, err
		}
		return vs[0].Lease != nil && vs[0].Lease.Holder == "w1" && vs[1].Lease != nil && vs[1].Lease.Holder == "w1", nil
	})
	must(r.Client.Pause(r.Ctx, "deep", "backlog"))(t)
	add := typeName(t, Add{})
	for i := range 3 {
		must(r.Client.Send(r.Ctx, "deep", add, Add{By: 1}, "k"+strconv.Itoa(i)))(t)
	}
	v := must(r.Client.GetWorld(r.Ctx, "deep"))(t)
	if v.InboxDepth != 3 || v.InboxDepthMore || v.InboxCursor == nil || *v.InboxCursor != 0 || v.Status != "paused" {
		t.Fatalf("a paused world with 3 items waiting: %+v", v)
	}
	vs := must(r.Client.ListWorldViews(r.Ctx, "", ""))(t)
	if len(vs) != 2 || vs[0].ID != "deep" || vs[0].InboxDepth != 3 || vs[0].Status != "paused" || vs[1].ID != "idle" ||
		vs[1].InboxDepth != 0 || vs[1].Lease == nil || vs[1].Lease.Holder != "w1" || vs[1].Lease.Epoch == 0 {
		t.Fatalf("list with detail: %+v", vs)
	}
	if paused := must(r.Client.ListWorldViews(r.Ctx, universe, store.WorldPaused))(t); len(paused) != 1 || paused[0].ID != "deep" {
		t.Fatalf("paused views: %+v", paused)
	}
	// The plain list stays the records.
	if st, body := r.Do("GET", "/v1/worlds?detail=false", "", "", ""); st != http.StatusOK || string(body) == "" ||
		strings.Contains(string(body), "inbox_depth") {
		t.Fatalf("detail=false: %d %s", st, body)
	}
	if st, _ := r.Do("GET", "/v1/worlds?detail=yes", "", "", ""); st != http.StatusBadRequest {
		t.Fatalf("detail=yes: %d", st)
	}

	for i := range api.MaxInboxDepth {
		if _, _, err := r.Store.Enqueue(r.Ctx, "deep", store.InboxItem{Kind: "event", Payload: []byte{0xf6}, DedupeKey: "bulk" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if v := must(r.Client.GetWorld(r.Ctx, "deep"))(t); v.InboxDepth != api.MaxInboxDepth || !v.InboxDepthMore {
		t.Fatalf("a backlog of %d: depth %d more %v", api.MaxInboxDepth+3, v.InboxDepth, v.InboxDepthMore)
	}
}

// TestQueues: GET /v1/queues answers the store's gauges: an effect no
// adapter claims is pending, an armed timer scheduled, a paused world's
// input the inbox backlog.
func TestQueues(t *testing.T) {
	r := newRig(t, rigOptions{})
	if q := must(r.Client.Queues(r.Ctx))(t); q != (api.Queues{}) {
		t.Fatalf("an empty store: %+v", q)
	}
	r.Create("q", universe)
	must(r.Client.Send(r.Ctx, "q", typeName(t, Pay{}), nil, "pay"))(t)
	must(r.Client.Send(r.Ctx, "q", typeName(t, Arm{}), Arm{AfterMs: 3_600_000}, "arm"))(t)
	r.WaitFor("the effect and the timer", func() (bool, error) {
		q, err := r.Client.Queues(r.Ctx)
		return q.EffectsPending == 1 && q.TimersScheduled == 1, err
	})
	must(r.Client.Pause(r.Ctx, "q", ""))(t)
	must(r.Client.Send(r.Ctx, "q", typeName(t, Add{}), Add{By: 1}, "a"))(t)
	must(r.Client.Send(r.Ctx, "q", typeName(t, Add{}), Add{By: 1}, "b"))(t)
	want := api.Queues{EffectsPending: 1, TimersScheduled: 1, InboxBacklog: 2}
	if q := must(r.Client.Queues(r.Ctx))(t); q != want {
		t.Fatalf("queues: %+v, want %+v", q, want)
	}
	if st, _ := r.Do("GET", "/v1/queues?world=q", "", "", ""); st != http.StatusBadRequest {
		t.Fatalf("an unknown parameter: %d", st)
	}
}

// TestUIMount: with Config.UI the server hands /ui/… to it (the path
// after /ui) with no token, and redirects / there; the API's routes still
// need the token; without a UI, / is the API's typed 404.
func TestUIMount(t *testing.T) {
	const tok = "s3cret"
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ui:" + r.URL.Path))
	})
	r := newRig(t, rigOptions{token: tok, cfg: func(c *api.Config) { c.UI = ui }})
	if st, body := r.Do("GET", "/ui/app.js", "", "", ""); st != http.StatusOK || string(body) != "ui:/app.js" {
		t.Fatalf("/ui/app.js: %d %s", st, body)
	}
	if st, body := r.Do("GET", "/ui/", "", "", ""); st != http.StatusOK || string(body) != "ui:/" {
		t.Fatalf("/ui/: %d %s", st, body)
	}
	if st, _ := r.Do("GET", "/v1/worlds", "", "", ""); st != http.StatusUnauthorized {
		t.Fatalf("the API without the token: %d", st)
	}
	noRedirect := *r.HTTP.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp := must(noRedirect.Get(r.HTTP.URL + "/"))(t)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("/: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	plain := newRig(t, rigOptions{})
	if st, body := plain.Do("GET", "/", "", "", ""); st != http.StatusNotFound || !strings.Contains(string(body), api.CodeNotFound) {
		t.Fatalf("/ without a UI: %d %s", st, body)
	}
	if st, _ := plain.Do("GET", "/ui/", "", "", ""); st != http.StatusNotFound {
		t.Fatalf("/ui/ without a UI: %d", st)
	}
}

// TestWorkerCountsSkipTheOrchestratorLease: a node's orchestrator holds
// its lease under the worker's id; the worker's counts are of worlds, so
// they leave that lease out (the leases list still shows it).
func TestWorkerCountsSkipTheOrchestratorLease(t *testing.T) {
	r := newRig(t, rigOptions{orchID: "w1"})
	r.Create("h1", universe)
	r.WaitFor("the orchestrator's lease and h1 held by w1", func() (bool, error) {
		rows, err := r.Client.Leases(r.Ctx, "w1")
		held := map[string]bool{}
		for _, row := range rows {
			if row.Lease != nil && row.Lease.Holder == "w1" {
				held[row.World] = true
			}
		}
		return held[plane.OrchestratorWorld] && held["h1"], err
	})
	ws := must(r.Client.Workers(r.Ctx))(t)
	if len(ws) != 1 || ws[0].ID != "w1" || ws[0].WorldsHeld != 1 || ws[0].WorldsAssigned != 1 {
		t.Fatalf("workers: %+v", ws)
	}
}
