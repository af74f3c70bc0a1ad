package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
)

// The world page's tests keep a screenshot of each page they check, as a
// test artefact: under $ORRERY_TEST_ARTIFACTS_DIR/screenshots/<test>/, by
// default target/test-artifacts/screenshots/<test>/ at the module root
// (the lab keeps its crash packs beside them), where .ci/run leaves them.

// artifactsDir is where this test's screenshots go.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ORRERY_TEST_ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join("target", "test-artifacts")
	}
	if !filepath.IsAbs(dir) {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		root := wd
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				root = d
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
		dir = filepath.Join(root, dir)
	}
	name := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), "_")
	dir = filepath.Join(dir, "screenshots", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot keeps the whole page as <name>.png among the test's
// artefacts.
func (e *env) screenshot(name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.tab, actionBound)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		e.t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		e.t.Fatalf("screenshot %s is not a PNG (%d bytes)", name, len(png))
	}
	path := filepath.Join(artifactsDir(e.t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("screenshot: %s", path)
}

// wp is an expression reading the text of a world page element.
func wpText(sel string) string {
	return fmt.Sprintf(`((document.querySelector(%s)||{}).textContent||'')`, js(sel))
}

// TestWorldPage: a world's id on the Worlds tab leads to its page, which
// shows its record, its lease (holder, epoch, expiry absolute and
// relative), its current state, its inflight effect, and its journal
// newest first, each record with what its step did.
func TestWorldPage(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "http://audit.hold/", 100)
	// Above the audit threshold: an http.request the service holds, so it
	// stays inflight.
	if _, err := e.c.Call(e.ctx, "alice", "ledger/Withdraw", ledger.Withdraw{Amount: 40, Ref: "big"}, api.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	v := e.view("alice")

	e.open("/ui/")
	e.waitFor("alice's row", cellIs("worlds", "alice", "status", "active"))
	e.do("open alice's page", chromedp.Click(chromedp.CSS(row("worlds", "alice")+" td.id a")))
	e.waitFor("alice's page", strings.Join([]string{
		`location.hash === '#world/alice'`,
		visible("#world-page"),
		wpText("#wp-title") + ` === 'World alice'`,
		wpText("#wp-status") + ` === 'active'`,
		wpText("#wp-head") + fmt.Sprintf(` === %s`, js(fmt.Sprint(v.Head))),
		wpText("#wp-lease-holder") + fmt.Sprintf(` === %s`, js(worker)),
		wpText("#wp-lease-epoch") + fmt.Sprintf(` === %s`, js(fmt.Sprint(v.Lease.Epoch))),
		// Absolute and relative: "2026-… (in 2 s)" or, past, "(… ago)".
		`/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \((in .+|now|.+ ago)\)$/.test(` + wpText("#wp-lease-expires") + `)`,
		wpText("#wp-parent") + ` === '(not a fork)'`,
		wpText("#wp-forks") + ` === '(none)'`,
		wpText("#wp-state-label") + fmt.Sprintf(`.startsWith('at height %d (the head)')`, v.Head),
	}, " && "))
	var st struct{ Balance int64 }
	if err := json.Unmarshal([]byte(eval[string](e, `document.querySelector('#wp-state').textContent`)), &st); err != nil || st.Balance != 60 {
		t.Fatalf("the state shown: %+v %v", st, err)
	}
	e.waitFor("the inflight audit", `document.querySelectorAll('#wp-effects tbody tr').length === 1 && `+
		wpText("#wp-effects tbody tr td:nth-child(2)")+` === 'http.request' && `+
		wpText("#wp-effects tbody tr td:nth-child(3)")+` === 'inflight' && `+visible("#wp-timers-empty"))
	e.waitFor("every record, newest first", fmt.Sprintf(`document.querySelectorAll('#wp-journal tr.wp-record').length === %d && `+
		`document.querySelector('#wp-journal tr.wp-record').dataset.id === %s && `+
		wpText("#wp-journal tr.wp-record td.type")+` === 'ledger/Withdraw' && `+
		wpText("#wp-journal tr.wp-record td.did")+` === 'reply · 1 effect'`, v.Head, js(fmt.Sprint(v.Head))))
	e.screenshot("world-page")
}

// TestWorldPageExpandPayload: a record's ▸ opens its detail: the input's
// value as JSON, the reply, and the effect the step asked for with its
// params; ▾ closes it.
func TestWorldPageExpandPayload(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "http://audit.hold/", 100)
	if _, err := e.c.Call(e.ctx, "alice", "ledger/Withdraw", ledger.Withdraw{Amount: 40, Ref: "big"}, api.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	head := e.view("alice").Head
	e.open("/ui/#world/alice")
	rec := fmt.Sprintf(`#wp-journal tr.wp-record[data-id=%s]`, js(fmt.Sprint(head)))
	det := fmt.Sprintf(`#wp-journal tr.wp-detail[data-for=%s]`, js(fmt.Sprint(head)))
	e.waitFor("the withdrawal's record, closed", visible(rec)+" && !"+visible(det))
	e.do("expand it", chromedp.Click(chromedp.CSS(rec+" button.wp-expand")))
	e.waitFor("its payloads", strings.Join([]string{
		visible(det),
		textHas(det+" .wp-input pre", `"Amount": 40`),
		textHas(det+" .wp-input pre", `"Ref": "big"`),
		textHas(det+" .wp-reply pre", `"value": 60`),
		textHas(det+" .wp-intents pre", `"kind": "http.request"`),
		textHas(det+" .wp-intents pre", `"url": "http://audit.hold/"`),
		textIs(rec+" button.wp-expand", "▾"),
	}, " && "))
	e.screenshot("journal-expanded")
	e.do("close it", chromedp.Click(chromedp.CSS(rec+" button.wp-expand")))
	e.waitFor("closed again", "!"+visible(det))
}

// TestWorldPageStateAtHeight: the state at a height typed in, and from a
// record's "State here", is the state after that step; a height above the
// head shows the API's typed error; Current goes back to the head.
func TestWorldPageStateAtHeight(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100) // heights 1 (open) and 2 (deposit)
	if _, err := e.c.Call(e.ctx, "alice", "ledger/Deposit", ledger.Deposit{Amount: 5, Ref: "more"}, api.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	e.open("/ui/#world/alice")
	e.waitFor("the state at the head", wpText("#wp-state-label")+`.startsWith('at height 3 (the head)') && `+textHas("#wp-state", `"Balance": 105`))

	e.do("ask for height 2", chromedp.SetValue(chromedp.ID("wp-state-height"), "2"), chromedp.Click(chromedp.ID("wp-state-show")))
	e.waitFor("the state at 2", wpText("#wp-state-label")+`.startsWith('at height 2, hash ') && `+textHas("#wp-state", `"Balance": 100`)+
		" && "+textIs("#wp-fork-label", "Fork at height 2:"))
	s2, err := e.c.StateAt(e.ctx, "alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	if title := eval[string](e, `document.querySelector('#wp-state-label').title`); title != s2.Hash {
		t.Fatalf("the page's hash at 2 %q, the API's %q", title, s2.Hash)
	}
	e.screenshot("state-at-height")

	e.do("State here on record 1", chromedp.Click(chromedp.CSS(`#wp-journal tr.wp-record[data-id="1"] button.wp-state-here`)))
	e.waitFor("the state at 1", wpText("#wp-state-label")+`.startsWith('at height 1, ') && `+textHas("#wp-state", `"Balance": 0`)+
		` && document.querySelector('#wp-state-height').value === '1'`)

	e.do("ask for height 99", chromedp.SetValue(chromedp.ID("wp-state-height"), "99"), chromedp.Click(chromedp.ID("wp-state-show")))
	e.waitFor("the typed error", textHas("#wp-state", "invalid_argument (400)")+" && "+textHas("#wp-state", "above the journal head")+
		` && document.querySelector('#wp-state').classList.contains('error') && `+textIs("#wp-fork-label", "No state to fork from."))

	e.do("back to the head", chromedp.Click(chromedp.ID("wp-state-current")))
	e.waitFor("the head again", wpText("#wp-state-label")+`.startsWith('at height 3 (the head)')`)
}

// TestWorldPageForkFromHeight: with the state at a height shown, one
// click forks the world there: the API has the fork with its lineage and
// that height's state, the page lists it among the forks, and the fork's
// own page names its parent.
func TestWorldPageForkFromHeight(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100)
	if _, err := e.c.Call(e.ctx, "alice", "ledger/Deposit", ledger.Deposit{Amount: 5, Ref: "more"}, api.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	e.open("/ui/#world/alice")
	e.waitFor("the page", wpText("#wp-state-label")+`.startsWith('at height 3 (the head)')`)
	e.do("state at 2, fork there", chromedp.SetValue(chromedp.ID("wp-state-height"), "2"), chromedp.Click(chromedp.ID("wp-state-show")))
	e.waitFor("the state at 2", textIs("#wp-fork-label", "Fork at height 2:"))
	e.do("fork", chromedp.SendKeys(chromedp.ID("wp-fork-id"), "alice-at-2"), chromedp.Click(chromedp.ID("wp-fork-go")))
	e.waitFor("the fork made and listed", textHas("#notice", "fork alice at 2 → alice-at-2: alice-at-2 created at height 2")+
		` && document.querySelector('#notice').className === 'ok' && `+textIs("#wp-forks", "alice-at-2 @2"))
	f := e.view("alice-at-2")
	if f.Lineage == nil || f.Lineage.Parent != "alice" || f.Lineage.ForkedAtHeight != 2 {
		t.Fatalf("the fork in the API: %+v", f.World)
	}
	s, err := e.c.State(e.ctx, "alice-at-2")
	var acct ledger.Account
	if err != nil || json.Unmarshal(s.State, &acct) != nil || acct.Balance != 100 {
		t.Fatalf("the fork's state: %s %v", s.State, err)
	}
	e.screenshot("fork-listed")

	e.do("open the fork", chromedp.Click(chromedp.CSS(`#wp-forks a.wp-fork`)))
	e.waitFor("the fork's page", `location.hash === '#world/alice-at-2' && `+wpText("#wp-title")+` === 'World alice-at-2' && `+
		textIs("#wp-parent", "alice at height 2")+" && "+textHas("#wp-state", `"Balance": 100`)+" && "+
		textIs("#wp-journal-empty", "No records of its own yet: its history up to height 2 is alice's.")+
		` && document.querySelector('#wp-older').disabled && document.querySelector('#wp-newer').disabled`)
	e.screenshot("fork-page")
	e.do("back to the parent", chromedp.Click(chromedp.CSS(`#wp-parent a`)))
	e.waitFor("alice's page again", `location.hash === '#world/alice' && `+textIs("#wp-forks", "alice-at-2 @2"))
}

// TestWorldPageJournalPaging: a journal longer than a page shows its
// newest twenty records; Older shows the ones before, Newest comes back;
// a record journaled while the newest page is open appears on top.
func TestWorldPageJournalPaging(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.account("alice", "Alice", "", 100)
	for i := range 23 {
		if _, err := e.c.Send(e.ctx, "alice", "ledger/Deposit", ledger.Deposit{Amount: 1, Ref: fmt.Sprint("d", i)}, fmt.Sprint("d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.c.Call(e.ctx, "alice", "ledger/Balance", struct{}{}, api.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	head := e.view("alice").Head // 2 + 23 + 1
	e.open("/ui/#world/alice")
	e.waitFor("the newest page", fmt.Sprintf(`document.querySelectorAll('#wp-journal tr.wp-record').length === 20 && `+
		`document.querySelector('#wp-journal tr.wp-record').dataset.id === %s && `+textIs("#wp-page-label", fmt.Sprintf("heights %d–%d of %d", head-19, head, head))+
		` && document.querySelector('#wp-newer').disabled && !document.querySelector('#wp-older').disabled`, js(fmt.Sprint(head))))
	e.do("older", chromedp.Click(chromedp.ID("wp-older")))
	e.waitFor("the oldest records", fmt.Sprintf(`document.querySelectorAll('#wp-journal tr.wp-record').length === %d && `+
		textIs("#wp-page-label", fmt.Sprintf("heights 1–%d of %d", head-20, head))+` && document.querySelector('#wp-older').disabled`, head-20))
	e.screenshot("journal-older")
	e.do("newest", chromedp.Click(chromedp.ID("wp-newest")))
	e.waitFor("the newest page again", textIs("#wp-page-label", fmt.Sprintf("heights %d–%d of %d", head-19, head, head)))
	if _, err := e.c.Send(e.ctx, "alice", "ledger/Deposit", ledger.Deposit{Amount: 1, Ref: "live"}, "live"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the new record on top", fmt.Sprintf(`document.querySelector('#wp-journal tr.wp-record').dataset.id === %s`, js(fmt.Sprint(head+1))))
}
