package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/vocab"
)

// rowIDs is an expression: the data-id of table's rows, joined by commas.
func rowIDs(table string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#%s tbody tr')].map((tr) => tr.dataset.id).join(',')`, table)
}

// relShown is an expression: the cell shows how long ago beside its time.
func relShown(sel, want string) string {
	return fmt.Sprintf(`((document.querySelector(%s)||{dataset:{}}).dataset.rel||'').includes(%s)`, js(sel), js(want))
}

// TestWorldsSearchFilterPage: the Worlds tab pages its rows (two a page
// here), Next and Prev move through them, the search box finds worlds by
// id substring, and the status filter narrows to the paused one.
func TestWorldsSearchFilterPage(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, id := range []string{"alice", "malice", "bob"} {
		e.account(id, id, "", 100)
	}
	if _, err := e.c.Pause(e.ctx, "malice", "look"); err != nil {
		t.Fatal(err)
	}
	e.open("/ui/?rows=2#worlds")
	e.waitFor("the first page", rowIDs("worlds")+` === 'alice,bob' && `+textIs("#worlds-page", "1–2 of 3"))
	e.do("next page", chromedp.Click(chromedp.ID("worlds-next")))
	e.waitFor("the second page", rowIDs("worlds")+` === 'malice' && `+textIs("#worlds-page", "3–3 of 3"))
	e.screenshot("worlds-page-2")
	e.do("previous page", chromedp.Click(chromedp.ID("worlds-prev")))
	e.waitFor("the first page again", rowIDs("worlds")+` === 'alice,bob'`)
	e.do("search", chromedp.SendKeys(chromedp.ID("worlds-q"), "ALI"))
	e.waitFor("the worlds with ali", rowIDs("worlds")+` === 'alice,malice' && `+textIs("#worlds-page", "1–2 of 2"))
	e.do("paused only", setFilter("worlds-status", "paused"))
	e.waitFor("the paused world", rowIDs("worlds")+` === 'malice' && `+cellIs("worlds", "malice", "status", "paused"))
	e.screenshot("worlds-search")
}

// TestQueuesAcrossWorlds: with no world picked the Queues tab lists every
// world's effects and timers, each row naming its world (a link to that
// world's queues), one page at a time by the API's cursor; the status
// filter lists done effects; times show how long ago (or ahead).
func TestQueuesAcrossWorlds(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, id := range []string{"alice", "carol"} {
		e.account(id, id, "http://audit.hold/", 100)
		if _, err := e.c.Call(e.ctx, id, "ledger/Withdraw", ledger.Withdraw{Amount: 50, Ref: "big"}, api.CallOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.account("bob", "Bob", "", 50)
	if _, err := e.c.Pause(e.ctx, "bob", "hold the transfer"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.c.CreateWorld(e.ctx, "t1", ledger.UniverseTransfer); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Send(e.ctx, "t1", "ledger/Start", ledger.Start{From: "bob", To: "alice", Amount: 5, TimeoutMs: 3_600_000}, "start"); err != nil {
		t.Fatal(err)
	}
	// The page shows what the store holds: wait for the store first.
	testrig.WaitFor(t, "two inflight audits and t1's timer", 2*time.Minute, 20*time.Millisecond, func() (bool, error) {
		effs, _, err := e.c.QueryEffects(e.ctx, api.EffectQuery{Status: string(vocab.EffectInflight)})
		if err != nil {
			return false, err
		}
		ts, _, err := e.c.QueryTimers(e.ctx, api.TimerQuery{})
		return len(effs) == 2 && len(ts) == 1, err
	})
	e.open("/ui/?rows=1#queues")
	e.waitFor("alice's effect on the first page", `document.querySelectorAll('#effects tbody tr').length === 1 && `+
		textIs("#effects tbody tr td.world", "alice")+" && "+textIs("#effects tbody tr td.state", "inflight")+" && "+
		relShown("#effects tbody tr td.enqueued", "ago")+" && "+
		textIs("#timers tbody tr td.world", "t1")+" && "+relShown("#timers tbody tr td.deliver", "in ")+" && "+
		`!document.querySelector('#effects-prev').disabled && false === document.querySelector('#effects-next').disabled || `+
		`(document.querySelector('#effects-prev').disabled && !document.querySelector('#effects-next').disabled && `+
		textIs("#effects tbody tr td.world", "alice")+")")
	e.screenshot("queues-every-world")
	e.do("next page of effects", chromedp.Click(chromedp.ID("effects-next")))
	e.waitFor("carol's effect, the last page", textIs("#effects tbody tr td.world", "carol")+
		` && document.querySelector('#effects-next').disabled && !document.querySelector('#effects-prev').disabled && `+
		textHas("#effects-page", "(last)"))
	e.do("previous page of effects", chromedp.Click(chromedp.ID("effects-prev")))
	e.waitFor("alice's effect again", textIs("#effects tbody tr td.world", "alice"))
	e.do("done effects", setFilter("effects-status", "done"))
	// The transfer's hold request to bob (a fabric send) is done.
	e.waitFor("the done effect", `document.querySelectorAll('#effects tbody tr').length === 1 && `+
		textIs("#effects tbody tr td.world", "t1")+" && "+textIs("#effects tbody tr td.kind", "fabric.send")+" && "+
		textIs("#effects tbody tr td.state", "done"))
	e.screenshot("queues-done")
	e.do("carol's queues from a row", setFilter("effects-status", ""))
	e.waitFor("the open effects again", textIs("#effects tbody tr td.world", "alice"))
	e.do("next, then carol's link", chromedp.Click(chromedp.ID("effects-next")))
	e.waitFor("carol's row", textIs("#effects tbody tr td.world", "carol"))
	e.do("open carol's queues", chromedp.Click(chromedp.CSS(`#effects tbody tr td.world a`)))
	e.waitFor("carol's queues", `location.hash === '#queues/carol' && `+textIs("#effects tbody tr td.world", "carol")+
		` && document.querySelectorAll('#timers tbody tr').length === 0`)
	e.screenshot("queues-one-world")
}

// TestRunPageDetailsAndActions: a waiting run's page shows its input, each
// attempt's output, and offers Pause and Cancel but no Resume; Pause makes
// it offer Resume; a completed run offers nothing, in its row or on its
// page; the runs list is searched and filtered by status.
func TestRunPageDetailsAndActions(t *testing.T) {
	e := newEnv(t, envOptions{workflows: true})
	for _, id := range []string{"p-1", "p-2"} {
		if _, _, err := e.c.StartRun(e.ctx, ledger.WorkflowPayout, id, ledger.Payout{Account: "alice", Amount: 50}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	e.open("/ui/#runs")
	e.waitFor("both runs waiting", cellIs("runs", "p-1", "steps", "2")+" && "+cellIs("runs", "p-2", "steps", "2"))
	actions := func(sel string) string {
		return fmt.Sprintf(`[...document.querySelectorAll(%s)].filter((b) => !b.hidden).map((b) => b.textContent).join(',')`, js(sel+" button"))
	}
	e.waitFor("a running run's actions", actions(row("runs", "p-1")+" td.actions")+` === 'Pause,Cancel'`)
	e.do("open p-1", chromedp.Click(chromedp.CSS(row("runs", "p-1")+" td.id a")))
	e.waitFor("p-1's page", strings.Join([]string{
		textIs("#run-detail-id", "p-1"),
		textIs("#run-detail-status", "running"),
		actions("#run-actions") + ` === 'Pause,Cancel'`,
		textHas("#run-facts", `"Account": "alice"`),
		textHas("#run-facts", ledger.WorkflowPayout+" v1"), // the version the run is pinned to
		cellIs("runs", "p-1", "workflow", ledger.WorkflowPayout+" v1"),
		cellIs("attempts", "validate#1", "status", "completed"),
		cellIs("attempts", "validate#1", "output", "true"),
		textHas(row("attempts", "validate#1")+" td.input", `"kind": "step"`),
	}, " && "))
	e.screenshot("run-running")
	e.do("pause p-1", chromedp.Click(chromedp.CSS(`#run-actions button.pause`)))
	// The list's status is the run record's: paused at once.
	e.waitFor("p-1 paused, offering Resume", textHas("#notice", "pause run p-1:")+" && "+
		cellIs("runs", "p-1", "status", "paused")+" && "+actions(row("runs", "p-1")+" td.actions")+` === 'Resume,Cancel'`+
		" && "+actions("#run-actions")+` === 'Resume,Cancel'`)
	e.screenshot("run-paused")
	if err := e.c.SignalRun(e.ctx, "p-2", "approved", true, "approve-p-2"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("p-2 completed, offering nothing", cellIs("runs", "p-2", "status", "completed")+" && "+
		actions(row("runs", "p-2")+" td.actions")+` === ''`)
	e.do("open p-2", chromedp.Click(chromedp.CSS(row("runs", "p-2")+" td.id a")))
	e.waitFor("p-2's page", textIs("#run-detail-id", "p-2")+" && "+actions("#run-actions")+` === ''`+" && "+
		textHas("#run-facts", "Output")+" && "+cellIs("attempts", "notify#1", "status", "completed"))
	e.screenshot("run-completed")
	e.do("search runs", chromedp.SendKeys(chromedp.ID("runs-q"), "p-2"))
	e.waitFor("only p-2", rowIDs("runs")+` === 'p-2'`)
	e.do("clear the search, paused only", setFilter("runs-q", ""), setFilter("runs-status", "paused"))
	e.waitFor("only p-1", rowIDs("runs")+` === 'p-1'`)
}

// TestDeadWorkerShownDead: a worker whose last heartbeat is older than the
// live-for window shows dead, its draining mark "-", and neither Drain
// nor Undrain, although it was marked draining; a live draining worker
// shows draining with Undrain; the status filter lists the dead alone.
func TestDeadWorkerShownDead(t *testing.T) {
	clock := &testrig.Clock{}
	e := newEnv(t, envOptions{clock: clock})
	if _, err := e.st.Heartbeat(e.ctx, "ghost", 8); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetDraining(e.ctx, "ghost", true); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := e.st.Heartbeat(e.ctx, "leaving", 8); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetDraining(e.ctx, "leaving", true); err != nil {
		t.Fatal(err)
	}
	buttons := func(id string) string {
		return fmt.Sprintf(`[...document.querySelectorAll(%s)].filter((b) => !b.hidden).map((b) => b.textContent).join(',')`,
			js(row("workers", id)+" td.actions button"))
	}
	e.open("/ui/#workers")
	e.waitFor("ghost dead, leaving draining", strings.Join([]string{
		cellIs("workers", "ghost", "status", "dead"),
		cellIs("workers", "ghost", "live", "no"),
		cellIs("workers", "ghost", "draining", "-"),
		buttons("ghost") + ` === ''`,
		relShown(row("workers", "ghost")+" td.heartbeat", "ago"),
		cellIs("workers", "leaving", "status", "draining"),
		buttons("leaving") + ` === 'Undrain'`,
	}, " && "))
	e.screenshot("workers")
	e.do("dead only", setFilter("workers-status", "dead"))
	e.waitFor("the dead alone", fmt.Sprintf(`[...document.querySelectorAll('#workers tbody tr')].every((tr) => tr.querySelector('td.status').textContent === 'dead') && %s.split(',').includes('ghost')`, rowIDs("workers")))
}

// setFilter sets a filter's value as a person's typing or choice would,
// and tells the page.
func setFilter(id, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`((el) => { el.value = %s; el.dispatchEvent(new Event('input')); })(document.getElementById(%s))`, js(value), js(id)))
}
