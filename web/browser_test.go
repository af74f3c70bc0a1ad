package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/web"
	"github.com/orrery-run/orrery/workflow"
)

// The browser tests drive the dashboard in headless Chromium against a
// real node (plane/node on memstore, running the example ledger worlds)
// and the API server that serves the dashboard, as an operator would:
// they load pages, click, type, and wait for what the page shows. Every
// wait is a poll of the page with a bound, never a fixed sleep.

const (
	worker      = "web-1"
	waitBound   = 30 * time.Second // one wait for the page
	actionBound = 30 * time.Second // one click or keystroke
)

// chromiumPath finds the browser. Without one the tests skip, except in
// CI, where .ci/run installs it, so a missing browser fails there.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ORRERY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on this CI machine: .ci/run installs Debian's chromium for the browser tests")
	}
	t.Skip("no chromium on this machine (install Debian's chromium, or set ORRERY_CHROMIUM): the browser tests need one")
	return ""
}

// auditTransport is the audit service the ledger's http.request effects
// reach, inside the process: requests to audit.fail fail as a refused
// connection would while failing is set, requests to audit.hold wait
// until the test ends (their effect stays inflight), and the rest answer
// 204.
type auditTransport struct {
	failing atomic.Bool
	release chan struct{}
	served  atomic.Int64
}

func (a *auditTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	switch r.URL.Host {
	case "audit.fail":
		if a.failing.Load() {
			return nil, errors.New("audit.fail: connection refused")
		}
	case "audit.hold":
		select {
		case <-a.release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	a.served.Add(1)
	return &http.Response{StatusCode: http.StatusNoContent, Status: "204 No Content", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

type envOptions struct {
	token string
	// front, when set, answers in front of the API server (a fake of
	// endpoints this server does not have).
	front func(api http.Handler) http.Handler
	// workflows makes the node run the ledger's payout workflow and the
	// API serve the runs endpoints from it, as `orrery serve` does.
	workflows bool
	// clock, when set, is the store's clock (the machine's plus what the
	// test advances).
	clock *testrig.Clock
}

// env is a node, the API server with the dashboard, an API client, and a
// browser tab.
type env struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	c     *api.Client
	url   string
	tab   context.Context
	audit *auditTransport
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	chromium := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, st: memstore.New(), audit: &auditTransport{release: make(chan struct{})}}
	if o.clock != nil {
		e.st = memstore.New(memstore.WithClock(o.clock.Now))
	}
	var wfs *workflow.Workflows
	if o.workflows {
		var err error
		if wfs, err = ledger.Workflows(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := node.Start(ctx, node.Config{
		Workflows: wfs,
		Worker:    worker, Store: e.st, Kernels: ledger.Kernels(), LeaseTTL: 2 * time.Second, IdleAfter: -1,
		// Held audit requests stay inflight for the whole test, however
		// slow the machine: neither the request's timeout nor the claim's
		// budget may end them first.
		HTTP: adapter.HTTPConfig{Client: &http.Client{Transport: e.audit}, Timeout: 30 * time.Minute},
		// A refused audit request ends in an error receipt after three
		// quick attempts (the default would retry it without end).
		Retry:    map[string]adapter.RetryPolicy{adapter.KindHTTP: {Attempts: 3, Base: time.Millisecond}},
		ClaimTTL: time.Hour,
		// A snapshot at every height, so a world forks at its head.
		Host: func(hc *plane.HostConfig) { hc.SnapshotEvery = 1 },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := n.Stop(sctx); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	})
	// Cleanups run last first: held audit requests are answered before the
	// node stops, so its graceful stop finds nothing it must release.
	t.Cleanup(func() { close(e.audit.release) })
	cfg := api.Config{
		Store: e.st, Ops: n.Ops(), Client: n.Client(), Kernels: ledger.Kernels(), Token: o.token,
		Executor: n.Executor(), EventPoll: 50 * time.Millisecond, UI: web.Handler(),
	}
	if v := n.RunsView(); o.workflows && v != nil {
		cfg.Runs = &api.RunsBackend{Client: n.Runs(), Workflows: wfs, Runs: v.Runs, Timeline: v.Timeline, CatchUp: v.CatchUp}
	} else if o.workflows {
		t.Fatal("a node with workflows has no runs view")
	}
	srv, err := api.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if o.front != nil {
		h = o.front(srv)
	}
	hs, c := testrig.Serve(t, h, o.token)
	e.url, e.c = hs.URL, c

	e.tab = startBrowser(t, ctx, chromium)
	return e
}

// startBrowser starts headless Chromium and opens a tab, failing the test
// on an exception the page throws. A browser that dies while starting
// (it happens on a loaded machine) is started again, twice at most.
func startBrowser(t *testing.T, ctx context.Context, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000))
	var mu sync.Mutex
	var thrown []string
	listen := chromedp.WithListener(func(ev any) {
		if ex, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			defer mu.Unlock()
			d := ex.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg = d.Exception.Description
			}
			thrown = append(thrown, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber, msg))
		}
	})
	for attempt := 1; ; attempt++ {
		alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		tab, cancelTab := chromedp.NewContext(alloc, listen)
		// The first run starts the browser under the test's bound; later
		// actions get bounds of their own.
		err := chromedp.Do(tab)
		if err == nil {
			t.Cleanup(func() {
				cancelTab()
				cancelAlloc()
				mu.Lock()
				defer mu.Unlock()
				for _, x := range thrown {
					t.Errorf("the page threw: %s", x)
				}
			})
			return tab
		}
		cancelTab()
		cancelAlloc()
		if attempt == 3 || !strings.Contains(err.Error(), "failed to start") {
			t.Fatalf("starting chromium: %v", err)
		}
		t.Logf("chromium died while starting (attempt %d), starting it again: %v", attempt, firstLine(err.Error()))
	}
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// do runs browser actions under a bound.
func (e *env) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, actionBound)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		e.t.Fatalf("%s: %v\n%s", what, err, e.page())
	}
}

// open loads a page of the dashboard.
func (e *env) open(path string) {
	e.t.Helper()
	e.do("open "+path, chromedp.Navigate(e.url+path))
}

// waitFor polls the page until the JavaScript expression is true.
func (e *env) waitFor(what, expr string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, waitBound+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr,
		chromedp.WithPollingTimeout(waitBound), chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		e.t.Fatalf("waiting for %s: %v\n%s", what, err, e.page())
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](e *env, expr string) T {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, actionBound)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		e.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// page is the page's text, for a failure's message.
func (e *env) page() string {
	ctx, cancel := context.WithTimeout(e.tab, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		return "(the page's text is unreadable: " + err.Error() + ")"
	}
	return "the page shows:\n" + s
}

// js quotes s as a JavaScript string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// row selects the row of id in table.
func row(table, id string) string { return fmt.Sprintf(`#%s tr[data-id=%s]`, table, js(id)) }

// cellIs is an expression: the cell col of id's row in table reads want.
func cellIs(table, id, col, want string) string {
	return fmt.Sprintf(`(document.querySelector(%s)||{}).textContent === %s`, js(row(table, id)+" td."+col), js(want))
}

// visible is an expression: the element is shown.
func visible(sel string) string {
	return fmt.Sprintf(`((el) => !!el && el.getClientRects().length > 0)(document.querySelector(%s))`, js(sel))
}

// textIs is an expression: the element's text is want.
func textIs(sel, want string) string {
	return fmt.Sprintf(`(document.querySelector(%s)||{}).textContent === %s`, js(sel), js(want))
}

// textHas is an expression: the element's text contains want.
func textHas(sel, want string) string {
	return fmt.Sprintf(`((document.querySelector(%s)||{}).textContent||'').includes(%s)`, js(sel), js(want))
}

// account creates and opens an account world with a deposit: calls, so
// each has been applied when it returns.
func (e *env) account(id, owner, auditURL string, deposit int64) {
	e.t.Helper()
	if _, _, err := e.c.CreateWorld(e.ctx, id, ledger.UniverseAccount); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.c.Call(e.ctx, id, "ledger/Open", ledger.Open{Owner: owner, AuditURL: auditURL, AuditAbove: 10,
		// A held audit request stays inflight for the whole test, however
		// slow the machine: the ledger's default 10 s request timeout
		// would end it while a loaded machine is still opening the page.
		AuditTimeoutMs: 3_600_000}, api.CallOptions{}); err != nil {
		e.t.Fatalf("open %s: %v", id, err)
	}
	if _, err := e.c.Call(e.ctx, id, "ledger/Deposit", ledger.Deposit{Amount: deposit, Ref: "initial"}, api.CallOptions{}); err != nil {
		e.t.Fatalf("deposit to %s: %v", id, err)
	}
}

// view is the API's view of a world.
func (e *env) view(id string) api.WorldView {
	e.t.Helper()
	v, err := e.c.GetWorld(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// TestWorldsPage: / leads to the dashboard, whose Worlds tab shows each
// world with the status, lease holder, epoch and head the API reports,
// and a paused world's waiting input as its inbox depth; the header says
// the stream is live and counts the worlds and workers.
func TestWorldsPage(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100)
	e.account("bob", "Bob", "", 50)
	if _, err := e.c.Pause(e.ctx, "bob", "audit"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Send(e.ctx, "bob", "ledger/Deposit", ledger.Deposit{Amount: 5, Ref: "late"}, "late"); err != nil {
		t.Fatal(err)
	}
	alice := e.view("alice")

	e.open("/")
	if loc := eval[string](e, `location.pathname`); loc != "/ui/" {
		t.Fatalf("/ leads to %s", loc)
	}
	e.waitFor("alice's row as the API shows it", strings.Join([]string{
		cellIs("worlds", "alice", "status", "active"),
		cellIs("worlds", "alice", "universe", ledger.UniverseAccount),
		cellIs("worlds", "alice", "holder", worker),
		cellIs("worlds", "alice", "epoch", fmt.Sprint(alice.Lease.Epoch)),
		cellIs("worlds", "alice", "head", fmt.Sprint(alice.Head)),
		cellIs("worlds", "alice", "inbox", "0"),
		cellIs("worlds", "alice", "lineage", ""),
	}, " && "))
	e.waitFor("bob paused, unleased, one input waiting", strings.Join([]string{
		cellIs("worlds", "bob", "status", "paused"),
		cellIs("worlds", "bob", "holder", "–"),
		cellIs("worlds", "bob", "inbox", "1"),
	}, " && "))
	e.waitFor("the stream live and the counts, no token asked", `document.querySelector('#live').textContent === 'live' && `+
		textHas("#summary", "2 worlds, 1 workers")+" && !"+visible("#login"))
	if order := eval[[]string](e, `Array.from(document.querySelectorAll('#worlds tbody tr')).map(r => r.dataset.id)`); strings.Join(order, ",") != "alice,bob" {
		t.Fatalf("rows: %v", order)
	}
}

// TestWorldsLiveOverSSE: with the Worlds tab open, an event sent through
// the API shows up as the world's head one higher, without a reload.
func TestWorldsLiveOverSSE(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100)
	head := e.view("alice").Head
	e.open("/ui/")
	e.waitFor("alice at her head", cellIs("worlds", "alice", "head", fmt.Sprint(head)))
	eval[bool](e, `window.stillThisPage = true`)
	if _, err := e.c.Send(e.ctx, "alice", "ledger/Deposit", ledger.Deposit{Amount: 7, Ref: "live"}, "live-1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("alice's head one higher on the same page",
		cellIs("worlds", "alice", "head", fmt.Sprint(head+1))+` && window.stillThisPage === true`)
	if v := e.view("alice"); v.Head != head+1 {
		t.Fatalf("the API's head: %d", v.Head)
	}
}

// TestWorkersPage: the worker is live, shows its roles, holds and is assigned its world,
// shows a heartbeat; Drain and Undrain change its row and say so.
func TestWorkersPage(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100)
	ws, err := e.c.Workers(e.ctx)
	if err != nil || len(ws) != 1 {
		t.Fatalf("the API's workers: %+v %v", ws, err)
	}
	e.open("/ui/#workers")
	e.waitFor("the worker's row", strings.Join([]string{
		cellIs("workers", worker, "live", "yes"),
		cellIs("workers", worker, "draining", "no"),
		cellIs("workers", worker, "held", "1"),
		cellIs("workers", worker, "assigned", "1"),
		cellIs("workers", worker, "capacity", fmt.Sprint(ws[0].Capacity)),
		cellIs("workers", worker, "roles", "host, effects, timers, api, orchestrator"),
		fmt.Sprintf(`/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$/.test(document.querySelector(%s).textContent)`, js(row("workers", worker)+" td.heartbeat")),
	}, " && "))
	e.do("drain", chromedp.Click(chromedp.CSS(row("workers", worker)+" button.drain")))
	e.waitFor("draining", cellIs("workers", worker, "draining", "yes")+" && "+textHas("#notice", "drain "+worker+": draining yes"))
	e.do("undrain", chromedp.Click(chromedp.CSS(row("workers", worker)+" button.undrain")))
	e.waitFor("not draining", cellIs("workers", worker, "draining", "no")+" && "+textHas("#notice", "undrain "+worker+": draining no"))
	ws, err = e.c.Workers(e.ctx)
	if err != nil || len(ws) != 1 || ws[0].Draining {
		t.Fatalf("the API's workers: %+v %v", ws, err)
	}
}

// TestQueuesPage: the global depths count an inflight effect, a scheduled
// timer and a paused world's waiting input; a world's effects list shows
// its inflight audit request, whose retry is refused with the API's typed
// error; a transfer's timer shows under its world, reached from the
// Worlds tab.
func TestQueuesPage(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "http://audit.hold/", 100)
	e.account("bob", "Bob", "", 50)
	if _, err := e.c.Pause(e.ctx, "bob", "hold the transfer"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.c.CreateWorld(e.ctx, "t1", ledger.UniverseTransfer); err != nil {
		t.Fatal(err)
	}
	// The transfer arms an hour's timeout and asks the paused bob for a
	// hold, which waits in bob's inbox.
	if _, err := e.c.Send(e.ctx, "t1", "ledger/Start", ledger.Start{From: "bob", To: "alice", Amount: 5, TimeoutMs: 3_600_000}, "start"); err != nil {
		t.Fatal(err)
	}
	// Above the threshold: an audit request that the service holds.
	if _, err := e.c.Call(e.ctx, "alice", "ledger/Withdraw", ledger.Withdraw{Amount: 50, Ref: "big"}, api.CallOptions{}); err != nil {
		t.Fatal(err)
	}

	// The page shows what the store holds; on a loaded machine the
	// transfer's step (which arms its timer) and the audit's claim can come
	// well after the calls above returned. Wait for the store first, so
	// the page is asked to show a state that exists.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ts, err := e.st.ListTimers(e.ctx, "t1", 10)
		if err != nil {
			t.Fatal(err)
		}
		effs, err := e.st.ListEffects(e.ctx, "alice", 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) == 1 && len(effs) == 1 && effs[0].State == vocab.EffectInflight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after two minutes t1's timers are %+v and alice's effects %+v: want one timer and one inflight effect", ts, effs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.open("/ui/#queues/alice")
	e.waitFor("the global depths", strings.Join([]string{
		textIs(`#queues dd[data-q="effects_inflight"]`, "1"),
		textIs(`#queues dd[data-q="effects_pending"]`, "0"),
		textIs(`#queues dd[data-q="timers_scheduled"]`, "1"),
		textIs(`#queues dd[data-q="inbox_backlog"]`, "1"),
	}, " && "))
	e.waitFor("alice's inflight audit", `document.querySelectorAll('#effects tbody tr').length === 1 && `+
		`document.querySelector('#effects tbody tr td.kind').textContent === 'http.request' && `+
		`document.querySelector('#effects tbody tr td.state').textContent === 'inflight' && `+
		`document.querySelector('#effects tbody tr td.claimed').textContent !== ''`)
	if eval[string](e, `document.querySelector('#queues-world').value`) != "alice" {
		t.Fatal("the world picker does not show alice")
	}
	e.do("retry the inflight effect", chromedp.Click(chromedp.CSS(`#effects tbody tr button.retry`)))
	e.waitFor("the typed refusal", textHas("#notice", "not_retryable (409)")+` && document.querySelector('#notice').className === 'error'`)
	// Held, the effect stands out (its own class, its reason on hover) and
	// counts as held; released, it is open again.
	e.do("hold the inflight effect", chromedp.Click(chromedp.CSS(`#effects tbody tr button.hold`)))
	e.waitFor("the held effect", `document.querySelector('#effects tbody tr td.state').textContent === 'held' && `+
		`document.querySelector('#effects tbody tr td.state').classList.contains('state-held') && `+
		`document.querySelector('#effects tbody tr td.state').title.includes('from the dashboard') && `+
		`document.querySelector('#effects tbody tr td.claimed').textContent === '' && `+
		visible(`#effects tbody tr button.release`))
	e.do("reload for the depths", chromedp.Reload())
	e.waitFor("one held effect", textIs(`#queues dd[data-q="effects_held"]`, "1"))
	e.do("release it", chromedp.Click(chromedp.CSS(`#effects tbody tr button.release`)))
	e.waitFor("the released effect", `document.querySelector('#effects tbody tr td.state').textContent !== 'held' && `+
		`!document.querySelector('#effects tbody tr td.state').classList.contains('state-held')`)

	e.do("go to t1's queues", chromedp.Click(chromedp.CSS(`#tabs a[data-tab="worlds"]`)),
		chromedp.Click(chromedp.CSS(row("worlds", "t1")+" a.queues")))
	e.waitFor("t1's scheduled timer", `location.hash === '#queues/t1' && `+
		`document.querySelectorAll('#timers tbody tr').length === 1 && `+
		`document.querySelector('#timers tbody tr td.state').textContent === 'scheduled' && `+
		`document.querySelector('#timers tbody tr td.deliver').textContent !== '' && `+
		visible("#effects-empty"))
}

// TestForkPauseResume: Fork… on a row prefills the form, and the fork
// appears as a new row with its lineage; Pause and Resume change the
// status on the page and in the API; a fork of an unknown world shows the
// API's typed error.
func TestForkPauseResume(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100)
	head := e.view("alice").Head
	e.open("/ui/")
	e.waitFor("alice's row", cellIs("worlds", "alice", "status", "active"))

	e.do("fork alice", chromedp.Click(chromedp.CSS(row("worlds", "alice")+" button.fork")),
		chromedp.SendKeys(chromedp.ID("fork-id"), "alice-copy"),
		chromedp.Click(chromedp.CSS(`#fork-form button[type="submit"]`)))
	e.waitFor("the fork's row and the result", strings.Join([]string{
		textHas("#notice", fmt.Sprintf("fork alice → alice-copy: alice-copy active at height %d", head)),
		cellIs("worlds", "alice-copy", "lineage", fmt.Sprintf("alice@%d", head)),
		cellIs("worlds", "alice-copy", "universe", ledger.UniverseAccount),
	}, " && "))
	e.waitFor("the fork leased and at its height", cellIs("worlds", "alice-copy", "holder", worker)+" && "+
		cellIs("worlds", "alice-copy", "head", fmt.Sprint(head)))

	e.do("pause alice", chromedp.Click(chromedp.CSS(row("worlds", "alice")+" button.pause")))
	e.waitFor("alice paused", cellIs("worlds", "alice", "status", "paused")+" && "+textHas("#notice", "pause alice: status paused"))
	if v := e.view("alice"); v.Status != "paused" || v.StatusReason != "from the dashboard" {
		t.Fatalf("the API after pause: %+v", v.World)
	}
	e.do("resume alice", chromedp.Click(chromedp.CSS(row("worlds", "alice")+" button.resume")))
	e.waitFor("alice active", cellIs("worlds", "alice", "status", "active")+" && "+textHas("#notice", "resume alice: status active"))
	if v := e.view("alice"); v.Status != "active" {
		t.Fatalf("the API after resume: %+v", v.World)
	}

	e.do("fork an unknown world",
		chromedp.SetValue(chromedp.ID("fork-src"), "nobody"),
		chromedp.SetValue(chromedp.ID("fork-id"), "nobody-copy"),
		chromedp.Click(chromedp.CSS(`#fork-form button[type="submit"]`)))
	e.waitFor("the typed error", textHas("#notice", "fork nobody → nobody-copy: not_found (404)")+
		` && document.querySelector('#notice').className === 'error'`)
}

// TestRetryFailedEffect: an audit request whose every attempt failed has
// an error receipt; the operator retries it by its intent hash from the
// Queues tab, the page shows it back to pending with one retry, and the
// audit then succeeds.
func TestRetryFailedEffect(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.audit.failing.Store(true)
	e.account("carol", "Carol", "http://audit.fail/", 100)
	if _, err := e.c.Call(e.ctx, "carol", "ledger/Withdraw", ledger.Withdraw{Amount: 50, Ref: "big"}, api.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	failed := e.auditOf("carol", ledger.AuditError)
	e.audit.failing.Store(false)

	e.open("/ui/#queues/carol")
	e.waitFor("no pending effect for carol", visible("#effects-empty"))
	e.do("retry by hash",
		chromedp.SendKeys(chromedp.ID("retry-hash"), failed.Intent),
		chromedp.SendKeys(chromedp.ID("retry-reason"), "the audit service is back"),
		chromedp.Click(chromedp.CSS(`#retry-form button[type="submit"]`)))
	e.waitFor("the retry's result", textHas("#notice", "state pending, retries 1 (world carol)")+
		` && document.querySelector('#notice').className === 'ok'`)
	e.auditOf("carol", ledger.AuditOK)
	st, err := e.st.EffectStatus(e.ctx, failed.Intent)
	if err != nil || st.Retries != 1 || st.RetryReason != "the audit service is back" || st.State != vocab.EffectDone {
		t.Fatalf("the effect after the retry: %+v %v", st, err)
	}
}

// auditOf waits until the account's one audit has the outcome and
// returns it: it reads the state, and while the outcome is not there it
// waits for the account's next journal record with the API's long-poll.
func (e *env) auditOf(id, outcome string) ledger.Audit {
	e.t.Helper()
	for {
		s, err := e.c.State(e.ctx, id)
		if err != nil {
			e.t.Fatalf("the state of %s: %v", id, err)
		}
		var acct ledger.Account
		if err := json.Unmarshal(s.State, &acct); err != nil {
			e.t.Fatalf("the state of %s: %v: %s", id, err, s.State)
		}
		if len(acct.Audits) == 1 && acct.Audits[0].Outcome == outcome {
			return acct.Audits[0]
		}
		if _, err := e.c.Journal(e.ctx, id, s.Height, 1, 10*time.Second); err != nil {
			e.t.Fatalf("waiting for the audit of %s to be %s (now %+v): %v", id, outcome, acct.Audits, err)
		}
	}
}

// TestJournalTail: the Journal tab shows a world's records newest first,
// and a record journaled while it is open appears at the top.
func TestJournalTail(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100)
	head := e.view("alice").Head
	e.open("/ui/#journal/alice")
	e.waitFor("every record, newest first", fmt.Sprintf(`document.querySelectorAll('#journal tbody tr').length === %d && `+
		`document.querySelector('#journal tbody tr td.height').textContent === %s && `+
		`document.querySelector('#journal tbody tr td.type').textContent === 'ledger/Deposit' && `+
		`document.querySelector('#journal tbody tr td.outcome').textContent === 'ok'`, head, js(fmt.Sprint(head))))
	if _, err := e.c.Send(e.ctx, "alice", "ledger/Withdraw", ledger.Withdraw{Amount: 1000, Ref: "too much"}, "w1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the new record on top", fmt.Sprintf(`document.querySelector('#journal tbody tr td.height').textContent === %s && `+
		`document.querySelector('#journal tbody tr td.type').textContent === 'ledger/Withdraw' && `+
		`document.querySelector('#journal tbody tr td.error').textContent.includes('insufficient funds')`, js(fmt.Sprint(head+1))))
}

// TestRunsWithoutEndpoint: on a server without the runs routes the Runs
// tab says so, and cancelling a run shows the 404's message.
func TestRunsWithoutEndpoint(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.open("/ui/#runs")
	e.waitFor("the missing endpoint", textHas("#runs-message", "No runs endpoint on this server."))
	e.do("cancel a run",
		chromedp.SendKeys(chromedp.ID("cancel-id"), "run-1"),
		chromedp.Click(chromedp.CSS(`#cancel-form button[type="submit"]`)))
	e.waitFor("the 404's message", textHas("#notice", "cancel run run-1: not_found (404): no such run, or no runs endpoint on this server")+
		` && document.querySelector('#notice').className === 'error'`)
}

// fakeRuns answers the runs routes as the workflow engine is meant to,
// in front of the API server.
// r-1 reads cancelled once cancelled, and r-3 exists once started is set.
func fakeRuns(cancelled, started *atomic.Bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/", next)
		mux.HandleFunc("GET /v1/runs", func(w http.ResponseWriter, _ *http.Request) {
			status := "running"
			if cancelled.Load() {
				status = "cancelled"
			}
			extra := ""
			if started.Load() {
				extra = `,{"id":"r-3","workflow":"payment","version":2,"status":"queued","steps":0}`
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"runs":[
				{"id":"r-1","workflow":"payment","version":2,"status":"`+status+`","started_at":"2026-01-02T10:00:00Z","duration_ms":1500,"steps":3},
				{"id":"r-2","workflow":"refund","version":1,"status":"completed","started_at":"2026-01-02T09:00:00Z","ended_at":"2026-01-02T09:02:05Z","steps":1}`+
				extra+`]}`)
		})
		mux.HandleFunc("GET /v1/runs/r-1", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"r-1","workflow":"payment","status":"running","values":{"stage":"charging"},"attributes":{"region":"eu","customer":"c-1"},"steps":[
				{"step_id":"charge","attempts":2,"status":"completed","started_at":"2026-01-02T10:00:00Z","duration_ms":250},
				{"step_id":"ship","attempts":1,"status":"failed","started_at":"2026-01-02T10:00:01Z","duration_ms":40,"error":"carrier down"},
				{"id":"notify","status":"failed","attempts":[
					{"attempt":1,"status":"failed","started_at":"2026-01-02T10:00:02Z","duration":1000000000,"error":"smtp busy"},
					{"attempt":2,"status":"failed","started_at":"2026-01-02T10:00:04Z","duration":3000000,"error":"smtp gone"}]},
				{"step_id":"archive","attempts":0,"status":"pending"}]}`)
		})
		mux.HandleFunc("POST /v1/runs/r-1/cancel", func(w http.ResponseWriter, _ *http.Request) {
			cancelled.Store(true)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"r-1","status":"cancelled"}`)
		})
		return mux
	}
}

// TestRunsTable: with the runs routes, the tab lists each run's workflow,
// status, start, duration and steps; a run's link shows its step
// timeline, the values it published and its search attributes; Cancel posts the cancel, shows the answer and the run's new
// status; Refresh shows a run started since.
func TestRunsTable(t *testing.T) {
	var cancelled, started atomic.Bool
	e := newEnv(t, envOptions{front: fakeRuns(&cancelled, &started)})
	e.open("/ui/#runs")
	e.waitFor("the runs", strings.Join([]string{
		cellIs("runs", "r-1", "workflow", "payment v2"),
		cellIs("runs", "r-1", "status", "running"),
		cellIs("runs", "r-1", "started", "2026-01-02 10:00:00Z"),
		cellIs("runs", "r-1", "duration", "1.5 s"),
		cellIs("runs", "r-1", "steps", "3"),
		cellIs("runs", "r-2", "duration", "2 min 5 s"),
		"!" + visible("#runs-message"),
	}, " && "))
	e.do("open r-1", chromedp.Click(chromedp.CSS(row("runs", "r-1")+" td.id a")))
	e.waitFor("r-1's timeline", strings.Join([]string{
		visible("#run-detail"),
		cellIs("timeline", "charge", "attempts", "2"),
		cellIs("timeline", "charge", "status", "completed"),
		cellIs("timeline", "charge", "duration", "250 ms"),
		cellIs("timeline", "ship", "error", "carrier down"),
		cellIs("timeline", "notify", "attempts", "2"),
		cellIs("timeline", "notify", "started", "2026-01-02 10:00:02Z"),
		cellIs("timeline", "notify", "duration", "3 ms"),
		cellIs("timeline", "notify", "error", "smtp gone"),
		cellIs("timeline", "archive", "duration", ""),
		// The values the run published (workflow.SetEvent).
		textHas("#run-facts", "Published stage"),
		textHas("#run-facts", `charging`),
		// Its search attributes, sorted by key.
		textHas("#run-facts", "customer=c-1 region=eu"),
	}, " && "))
	e.do("cancel r-1", chromedp.Click(chromedp.CSS(row("runs", "r-1")+" button.cancel")))
	e.waitFor("the cancel's answer and the new status", textHas("#notice", "cancel run r-1: status cancelled")+" && "+
		cellIs("runs", "r-1", "status", "cancelled"))
	if !cancelled.Load() {
		t.Fatal("the page did not post the cancel")
	}
	started.Store(true)
	e.do("refresh", chromedp.Click(chromedp.ID("runs-refresh")))
	e.waitFor("the new run", cellIs("runs", "r-3", "status", "queued")+" && "+cellIs("runs", "r-3", "steps", "0"))
}

// TestRunsPageWithRealRuns: against a node running the ledger's payout
// workflow, the tab lists real runs with their real statuses and follows
// them live (no Refresh click anywhere): a run approved while the page is
// open shows completed, its timeline shows its steps, and a run that
// waits for its approval, cancelled from the page, shows cancelled.
func TestRunsPageWithRealRuns(t *testing.T) {
	e := newEnv(t, envOptions{workflows: true})
	for _, id := range []string{"p-1", "p-2"} {
		if _, _, err := e.c.StartRun(e.ctx, ledger.WorkflowPayout, id, ledger.Payout{Account: "alice", Amount: 50}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	e.open("/ui/#runs")
	// Both wait for their approval: validate and the await are their
	// steps so far.
	e.waitFor("both runs waiting", strings.Join([]string{
		cellIs("runs", "p-1", "workflow", ledger.WorkflowPayout+" v1"),
		cellIs("runs", "p-1", "status", "running"),
		cellIs("runs", "p-1", "steps", "2"),
		cellIs("runs", "p-2", "workflow", ledger.WorkflowPayout+" v1"),
		cellIs("runs", "p-2", "status", "running"),
		cellIs("runs", "p-2", "steps", "2"),
		"!" + visible("#runs-message"),
	}, " && "))
	if err := e.c.SignalRun(e.ctx, "p-1", "approved", true, "approve-p-1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("p-1 completed, live", cellIs("runs", "p-1", "status", "completed")+" && "+
		cellIs("runs", "p-1", "steps", "3")+" && "+cellIs("runs", "p-2", "status", "running"))
	e.do("open p-1", chromedp.Click(chromedp.CSS(row("runs", "p-1")+" td.id a")))
	e.waitFor("p-1's timeline", strings.Join([]string{
		visible("#run-detail"),
		textIs("#run-detail-id", "p-1"),
		cellIs("timeline", "validate", "status", "completed"),
		cellIs("timeline", "validate", "attempts", "1"),
		// The await of the "approved" signal is a step of its own.
		cellIs("timeline", "sys:await:approved", "status", "completed"),
		cellIs("timeline", "notify", "status", "completed"),
		`[...document.querySelectorAll('#timeline tbody tr')].map((tr) => tr.dataset.id).join(',') === 'validate,sys:await:approved,notify'`,
	}, " && "))
	e.do("cancel p-2", chromedp.Click(chromedp.CSS(row("runs", "p-2")+" button.cancel")))
	e.waitFor("the cancel's answer and p-2 cancelled, live", textHas("#notice", "cancel run p-2:")+" && "+
		cellIs("runs", "p-2", "status", "cancelled")+" && "+cellIs("runs", "p-1", "status", "completed"))
	v, err := e.c.GetRun(e.ctx, "p-2")
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != string(workflow.StatusCancelled) {
		t.Fatalf("the page shows p-2 cancelled, the API says %s", v.Status)
	}
}

// TestTokenAsked: a server with a token makes the page ask for it once;
// a wrong one is refused and asked again; the right one shows the rows
// and is kept in the tab's sessionStorage, so a reload asks nothing.
func TestTokenAsked(t *testing.T) {
	const tok = "s3cret"
	e := newEnv(t, envOptions{token: tok})
	e.account("alice", "Alice", "", 100)
	e.open("/ui/")
	e.waitFor("the token form", visible("#login"))
	e.do("a wrong token", chromedp.SendKeys(chromedp.ID("token"), "nope"),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)))
	e.waitFor("the refusal", visible("#login")+" && "+textHas("#login-error", "refused"))
	e.do("the right token", chromedp.SendKeys(chromedp.ID("token"), tok),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)))
	e.waitFor("alice's row and the live stream", cellIs("worlds", "alice", "status", "active")+
		` && document.querySelector('#live').textContent === 'live' && `+"!"+visible("#login"))
	if got := eval[string](e, `sessionStorage.getItem('orrery.token')`); got != tok {
		t.Fatalf("sessionStorage holds %q", got)
	}
	e.do("reload", chromedp.Reload())
	e.waitFor("the rows again, nothing asked", cellIs("worlds", "alice", "status", "active")+
		` && document.querySelector('#live').textContent === 'live' && `+"!"+visible("#login"))
}
