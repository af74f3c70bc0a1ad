package cli_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
)

// records decodes `journal ... -o json`, one record per line.
func records(t testing.TB, out string) []api.Record {
	t.Helper()
	var rs []api.Record
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	for dec.More() {
		var r api.Record
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("journal -o json: %v\n%s", err, out)
		}
		rs = append(rs, r)
	}
	return rs
}

func heights(rs []api.Record) []uint64 {
	hs := make([]uint64, len(rs))
	for i, r := range rs {
		hs[i] = r.Height
	}
	return hs
}

func wantHeights(t testing.TB, what string, rs []api.Record, from, to uint64) {
	t.Helper()
	if len(rs) != int(to-from+1) {
		t.Fatalf("%s: heights %v, want %d … %d", what, heights(rs), from, to)
	}
	for i, r := range rs {
		if r.Height != from+uint64(i) {
			t.Fatalf("%s: heights %v, want %d … %d", what, heights(rs), from, to)
		}
	}
}

func TestJournalReadAndTail(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "alice", "ledger/Open", `{"Owner":"alice"}`)
	for i := 1; i <= 4; i++ {
		f.ok("world", "send", "alice", "ledger/Deposit", `{"Amount":`+strconv.Itoa(i)+`}`)
	}
	// Refused: a failed step is journaled too.
	f.fail(cli.ExitError, "world", "call", "alice", "ledger/Withdraw", `{"Amount":99}`)
	const head = 6

	out := f.ok("journal", "read", "alice")
	rs := rows(out)
	if !hasPrefix(rs[0], "HEIGHT", "PERSISTED", "INPUT", "TYPE", "OUTCOME", "STATE") || len(rs) != head+1 {
		t.Fatalf("journal read:\n%s", out)
	}
	// HEIGHT, PERSISTED (date and time), INPUT, TYPE, OUTCOME…
	if r := rs[1]; !hasPrefix(r, "1") || r[3] != "call#1" || r[4] != "ledger/Open" || r[5] != "ok" {
		t.Fatalf("the first record's row %q", r)
	}
	if r := rs[2]; !hasPrefix(r, "2") || r[3] != "event#2" || r[4] != "ledger/Deposit" || r[5] != "ok" {
		t.Fatalf("the second record's row %q", r)
	}
	if r := rs[head]; !hasPrefix(r, strconv.Itoa(head)) || r[4] != "ledger/Withdraw" || !strings.Contains(strings.Join(r, " "), "insufficient funds") {
		t.Fatalf("the failed step's row %q", r)
	}

	all := records(t, f.ok("journal", "read", "alice", "-o", "json"))
	wantHeights(t, "journal read -o json", all, 1, head)
	if in := all[1].Input; in == nil || in.Kind != "event" || in.Seq != 2 || in.Type != "ledger/Deposit" || all[1].Outcome != "ok" || len(all[1].StateHash) != 64 {
		t.Fatalf("record 2: %+v (input %+v)", all[1], all[1].Input)
	}
	if all[head-1].Error == "" {
		t.Fatalf("the failed step's record has no error: %+v", all[head-1])
	}
	// Pages of one record still read to the end.
	wantHeights(t, "journal read --after 2 --limit 1", records(t, f.ok("journal", "read", "alice", "--after", "2", "--limit", "1", "-o", "json")), 3, head)
	if out := f.ok("journal", "read", "alice", "--after", strconv.Itoa(head)); out != "" {
		t.Fatalf("journal read after the head printed %q", out)
	}

	wantHeights(t, "journal tail -n 2", records(t, f.ok("journal", "tail", "alice", "-n", "2", "-o", "json")), head-1, head)
	wantHeights(t, "journal tail", records(t, f.ok("journal", "tail", "alice", "-o", "json")), 1, head) // 10 > head
	out = f.ok("journal", "tail", "alice", "-n", "1")
	if rs := rows(out); len(rs) != 2 || !hasPrefix(rs[1], strconv.Itoa(head)) {
		t.Fatalf("journal tail -n 1:\n%s", out)
	}
	f.fail(cli.ExitNotFound, "journal", "read", "nope")
	f.fail(cli.ExitNotFound, "journal", "tail", "nope")
}

// runBackground runs a command in a goroutine until its context ends; the
// returned function (which may be called again) cancels it and returns its
// exit code.
func (f *fixture) runBackground(out, errOut *syncBuffer, args ...string) (stop func() int) {
	ctx, cancel := context.WithCancel(f.ctx)
	full := append([]string{"--addr", f.url}, args...)
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, full, cli.IO{Out: out, Err: errOut}, ledger.Kernels())
	}()
	code, ended := 0, false
	return func() int {
		cancel()
		if ended {
			return code
		}
		select {
		case code = <-done:
			ended = true
			return code
		case <-time.After(testTimeout):
			f.t.Fatalf("orrery %s did not end with its context", strings.Join(args, " "))
			return -1
		}
	}
}

func TestJournalFollow(t *testing.T) {
	for _, cmd := range [][]string{{"journal", "read", "alice", "--follow"}, {"journal", "tail", "alice", "-n", "1", "-f"}} {
		t.Run(cmd[1], func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
			f.ok("world", "call", "alice", "ledger/Open", `{"Owner":"alice"}`)
			f.ok("world", "call", "alice", "ledger/Deposit", `{"Amount":1}`)

			out, errOut := newSyncBuffer(), newSyncBuffer()
			stop := f.runBackground(out, errOut, append(cmd, "-o", "json")...)
			defer stop()
			first := uint64(1)
			if cmd[1] == "tail" {
				first = 2
			}
			out.waitFor(f.ctx, t, "the records so far", func(s string) bool { return strings.Count(s, "\n") == 3-int(first) })
			// A record journaled while it waits is printed.
			f.ok("world", "call", "alice", "ledger/Deposit", `{"Amount":2}`)
			out.waitFor(f.ctx, t, "the new record", func(s string) bool { return strings.Count(s, "\n") == 4-int(first) })
			if code := stop(); code != cli.ExitOK {
				t.Fatalf("ended by its context: exit %d, stderr %q", code, errOut.String())
			}
			wantHeights(t, strings.Join(cmd, " "), records(t, out.String()), first, 3)
			if errOut.String() != "" {
				t.Fatalf("stderr %q", errOut.String())
			}
		})
	}
}

func TestLeaseAndWorkersList(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, id := range []string{"alice", "bob"} {
		f.ok("world", "create", id, "--universe", ledger.UniverseAccount)
		f.ok("world", "call", id, "ledger/Balance")
	}

	out := f.ok("lease", "list")
	if h := rows(out)[0]; !hasPrefix(h, "WORLD", "HOLDER", "EPOCH", "EXPIRES", "PLACED", "ON") {
		t.Fatalf("lease list's header %q", h)
	}
	// Besides the worlds, the list shows who holds the orchestrator's
	// lease: the acting orchestrator.
	var ls []api.LeaseRow
	f.okJSON(&ls, "lease", "list")
	if len(ls) != 3 || ls[2].World != "sys.orchestrator" || ls[2].Lease == nil || ls[2].Lease.Holder != "w1" {
		t.Fatalf("lease list -o json: %+v", ls)
	}
	for i, id := range []string{"alice", "bob"} {
		l := ls[i]
		if l.World != id || l.Worker != "w1" || l.Lease == nil || l.Lease.Holder != "w1" || l.Lease.Epoch == 0 || l.Lease.ExpiresAt.IsZero() ||
			l.Assignment == nil || l.Assignment.Worker != "w1" {
			t.Fatalf("lease list -o json, row %d: %+v (lease %+v, assignment %+v)", i, l, l.Lease, l.Assignment)
		}
		r := row(t, out, id)
		if !hasPrefix(r, id, "w1", strconv.FormatUint(l.Lease.Epoch, 10)) || r[len(r)-1] != "w1" {
			t.Fatalf("lease list's row %q", r)
		}
	}
	f.okJSON(&ls, "lease", "list", "--worker", "w1")
	if len(ls) != 3 {
		t.Fatalf("lease list --worker w1: %+v", ls)
	}
	f.okJSON(&ls, "lease", "list", "--worker", "w9")
	if len(ls) != 0 {
		t.Fatalf("lease list --worker w9: %+v", ls)
	}

	out = f.ok("workers", "list")
	if h := rows(out)[0]; !hasPrefix(h, "WORKER", "LIVE", "DRAINING", "HELD", "ASSIGNED", "HEARTBEAT") || !slices.Equal(h[len(h)-3:], []string{"CAPACITY", "ROLES", "STATUS"}) {
		t.Fatalf("workers list's header %q", h)
	}
	if r := row(t, out, "w1"); !hasPrefix(r, "w1", "true", "false", "2", "2") || r[len(r)-2] != "host,effects,timers,api,orchestrator" {
		t.Fatalf("workers list's row %q", r)
	}
	var ws []api.Worker
	f.okJSON(&ws, "workers", "list")
	if len(ws) != 1 || ws[0].ID != "w1" || !ws[0].Live || ws[0].Draining || ws[0].WorldsHeld != 2 || ws[0].WorldsAssigned != 2 || ws[0].HeartbeatAt.IsZero() {
		t.Fatalf("workers list -o json: %+v", ws)
	}

	// Drain without --wait marks the worker and answers at once; --undo
	// clears the mark.
	if out := f.ok("workers", "drain", "w1"); !hasPrefix(rows(out)[0], "w1", "draining=true") {
		t.Fatalf("workers drain: %q", out)
	}
	f.okJSON(&ws, "workers", "list")
	if !ws[0].Draining {
		t.Fatalf("after drain: %+v", ws[0])
	}
	var w api.Worker
	f.okJSON(&w, "workers", "drain", "w1", "--undo")
	if w.ID != "w1" || w.Draining {
		t.Fatalf("workers drain --undo -o json: %+v", w)
	}
	// The worlds come back to the undrained worker.
	if got := f.ok("world", "call", "alice", "ledger/Balance"); got != "0\n" {
		t.Fatalf("Balance after the drain was undone: %q", got)
	}
	f.fail(cli.ExitNotFound, "workers", "drain", "w9")
}

// audit waits until an account has one audit, settled if asked, and
// returns it.
func (f *fixture) audit(id string, settled bool) ledger.Audit {
	f.t.Helper()
	var a ledger.Audit
	f.eventually("the audit of "+id, func() bool {
		_, acct := f.accountOf(id)
		if len(acct.Audits) != 1 {
			return false
		}
		a = acct.Audits[0]
		return !settled || a.Outcome != ledger.AuditPending
	})
	return a
}

func TestEffectsListResolveRetry(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	open := func(id, url string) {
		f.ok("world", "create", id, "--universe", ledger.UniverseAccount)
		f.ok("world", "call", id, "ledger/Open", `{"Owner":"`+id+`","AuditURL":"`+url+`","AuditAbove":10}`)
		f.ok("world", "call", id, "ledger/Deposit", `{"Amount":100}`)
		f.ok("world", "call", id, "ledger/Withdraw", `{"Amount":50,"Ref":"big"}`)
	}

	// carol's audit request never answers: it stays in flight until an
	// operator resolves it.
	open("carol", auditHang)
	intent := f.audit("carol", false).Intent
	var es []api.Effect
	f.eventually("carol's effect in flight", func() bool {
		f.okJSON(&es, "effects", "list", "--world", "carol")
		return len(es) == 1 && es[0].State == "inflight"
	})
	if e := es[0]; e.IntentHash != intent || e.World != "carol" || e.Kind != "http.request" || e.Attempt != 1 || e.ClaimedBy == "" || len(e.ParamsCBOR) == 0 {
		t.Fatalf("effects list -o json: %+v, want carol's audit %s", e, intent)
	}
	out := f.ok("effects", "list", "--world", "carol")
	if h := rows(out)[0]; !hasPrefix(h, "INTENT", "KIND", "STATE", "ATTEMPT", "CLAIMED", "BY", "ENQUEUED") {
		t.Fatalf("effects list's header %q", h)
	}
	if r := row(t, out, intent); !hasPrefix(r, intent, "http.request", "inflight", "1", es[0].ClaimedBy) {
		t.Fatalf("effects list's row %q", r)
	}
	// Only a failed effect can be retried.
	f.fail(cli.ExitConflict, "effects", "retry", intent)

	out = f.ok("effects", "resolve", intent, `{"status":202}`, "--status", "ok", "--reason", "approved by phone")
	seq, ok := strings.CutPrefix(strings.TrimSpace(out), "receipt at inbox seq ")
	if !ok || strings.Contains(seq, "already") {
		t.Fatalf("effects resolve printed %q", out)
	}
	if a := f.audit("carol", true); a.Outcome != ledger.AuditOK || a.HTTPStatus != 202 {
		t.Fatalf("carol's audit after the operator's receipt: %+v", a)
	}
	// A second receipt is refused politely: the first stands.
	var ack api.ReceiptAck
	f.okJSON(&ack, "effects", "resolve", intent, `{"status":500}`)
	if strconv.FormatUint(ack.Seq, 10) != seq || !ack.Duplicate {
		t.Fatalf("a second resolve: %+v, want seq %s duplicate", ack, seq)
	}
	if out := f.ok("effects", "resolve", intent); out != "receipt at inbox seq "+seq+" (already done: the first receipt stands)\n" {
		t.Fatalf("a second resolve printed %q", out)
	}
	f.okJSON(&es, "effects", "list", "--world", "carol")
	if len(es) != 0 {
		t.Fatalf("effects list after the receipt: %+v", es)
	}
	f.fail(cli.ExitConflict, "effects", "retry", intent)

	// dave's audit fails: an error receipt, which an operator may retry.
	open("dave", auditFail)
	a := f.audit("dave", true)
	if a.Outcome != ledger.AuditError {
		t.Fatalf("dave's audit: %+v, want an error", a)
	}
	out = f.ok("effects", "retry", a.Intent, "--reason", "the partner API is back")
	if r := rows(out)[0]; !hasPrefix(r, a.Intent) || r[len(r)-2] != "retries" || r[len(r)-1] != "1" {
		t.Fatalf("effects retry printed %q", out)
	}
	// The retry runs the effect again: the world gets a second receipt
	// (an error again), after which it can be retried once more.
	f.eventually("the retried effect's second receipt", func() bool {
		rs := records(t, f.ok("journal", "read", "dave", "-o", "json"))
		n := 0
		for _, r := range rs {
			if r.Input != nil && r.Input.Kind == "receipt" {
				n++
			}
		}
		return n == 2
	})
	var st api.EffectStatus
	f.okJSON(&st, "effects", "retry", a.Intent, "--reason", "again")
	if st.IntentHash != a.Intent || st.World != "dave" || st.Kind != "http.request" || st.Retries != 2 || st.RetryReason != "again" {
		t.Fatalf("effects retry -o json: %+v", st)
	}

	// Without --world the list is every world's (it was a usage error
	// while effects could be listed only one world at a time).
	out = f.ok("effects", "list", "--status", "all")
	if r := row(t, out, intent); !hasPrefix(r, intent, "http.request", "done") || len(r) < 9 || r[7] != "carol" || !strings.HasSuffix(strings.Join(r[8:], " "), "ago") {
		t.Fatalf("effects list across worlds: %q", r)
	}
	f.fail(cli.ExitUsage, "effects", "list", "--status", "sleeping")
	f.fail(cli.ExitNotFound, "effects", "retry", strings.Repeat("ab", 32))
	f.fail(cli.ExitUsage, "effects", "resolve", intent, "{not json")
}

func TestTimersList(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	// The transfer's source is paused: the Hold waits in its inbox, so
	// the transfer's timeout stays armed.
	f.ok("world", "create", "erin", "--universe", ledger.UniverseAccount)
	f.ok("world", "pause", "erin")
	f.ok("world", "create", "t-1", "--universe", ledger.UniverseTransfer)
	var res api.CallResult
	f.okJSON(&res, "world", "call", "t-1", "ledger/Start", `{"From":"erin","To":"bob","Amount":5,"TimeoutMs":3600000}`)
	var tr ledger.Transfer
	if err := json.Unmarshal(res.Reply, &tr); err != nil || tr.Timer == "" || tr.TimerState != ledger.TimerArmed {
		t.Fatalf("Start replied %s (%v)", res.Reply, err)
	}

	var tms []api.Timer
	f.okJSON(&tms, "timers", "list", "--world", "t-1")
	if len(tms) != 1 || tms[0].IntentHash != tr.Timer || tms[0].World != "t-1" || tms[0].State != "scheduled" ||
		tms[0].DeliverAt.UnixMilli() != tr.DeadlineMs || tr.DeadlineMs-tr.StartedMs != time.Hour.Milliseconds() {
		t.Fatalf("timers list -o json: %+v, want t-1's timeout %s at %d, an hour after %d", tms, tr.Timer, tr.DeadlineMs, tr.StartedMs)
	}
	out := f.ok("timers", "list", "--world", "t-1")
	if h := rows(out)[0]; !hasPrefix(h, "INTENT", "DUE", "STATE", "CLAIMED", "BY") {
		t.Fatalf("timers list's header %q", h)
	}
	if r := row(t, out, tr.Timer); len(r) < 6 || r[3] != "scheduled" || r[4] != "-" || r[5] != "t-1" || !strings.Contains(strings.Join(r[6:], " "), "in 59 min") {
		t.Fatalf("timers list's row %q", r)
	}
	f.okJSON(&tms, "timers", "list", "--world", "erin")
	if len(tms) != 0 {
		t.Fatalf("timers list of a world without timers: %+v", tms)
	}
	// Without --world the list is every world's; "timer" is "timers".
	f.okJSON(&tms, "timer", "list")
	if len(tms) != 1 || tms[0].World != "t-1" {
		t.Fatalf("timer list across worlds: %+v", tms)
	}
	f.fail(cli.ExitUsage, "timers", "list", "--status", "due")
}

// A drain with --wait on two nodes returns once every world the drained
// worker held runs on the other, and says how many moved.
func TestWorkersDrainWait(t *testing.T) {
	f := newFixture(t, fixtureOptions{workers: []string{"w1", "w2"}})
	ids := []string{"a1", "a2", "a3", "a4", "a5", "a6"}
	for _, id := range ids {
		f.ok("world", "create", id, "--universe", ledger.UniverseAccount)
		f.ok("world", "call", id, "ledger/Deposit", `{"Amount":1}`)
	}
	var ws []api.Worker
	f.okJSON(&ws, "workers", "list")
	if len(ws) != 2 || ws[0].WorldsHeld+ws[1].WorldsHeld != len(ids) {
		t.Fatalf("workers list -o json: %+v, want %d worlds held in all", ws, len(ids))
	}
	// Drain the worker that holds more (it holds one at least).
	victim, other := ws[0], ws[1]
	if other.WorldsHeld > victim.WorldsHeld {
		victim, other = other, victim
	}
	var drained struct {
		Worker string `json:"worker"`
		Worlds int    `json:"worlds"`
		Ms     struct {
			P50, P95, P99, Max float64
		} `json:"handoff_ms"`
	}
	f.okJSON(&drained, "workers", "drain", victim.ID, "--wait")
	if drained.Worker != victim.ID || drained.Worlds != victim.WorldsHeld || drained.Ms.Max < drained.Ms.P50 {
		t.Fatalf("workers drain %s --wait -o json: %+v, want %d worlds handed off", victim.ID, drained, victim.WorldsHeld)
	}
	var ls []api.LeaseRow
	f.okJSON(&ls, "lease", "list")
	moved := 0
	for _, l := range ls {
		if l.World == "sys.orchestrator" {
			continue
		}
		if l.Lease == nil || l.Lease.Holder != other.ID {
			t.Fatalf("after the drain, %s: lease %+v, want held by %s", l.World, l.Lease, other.ID)
		}
		moved++
	}
	if moved != len(ids) {
		t.Fatalf("after the drain: %+v", ls)
	}
	// Every world still answers, from the other worker.
	for _, id := range ids {
		if got := f.ok("world", "call", id, "ledger/Balance"); got != "1\n" {
			t.Fatalf("%s after the drain: %q", id, got)
		}
	}
	// The table form, on a worker that holds nothing now.
	out := f.ok("workers", "drain", victim.ID, "--wait")
	if out != victim.ID+" drained: 0 worlds handed off\nhandoff ms  p50 0.0  p95 0.0  p99 0.0  max 0.0\n" {
		t.Fatalf("a second drain --wait printed %q", out)
	}
}

// TestEffectsHoldRelease: hold keeps an in-flight effect from its adapter
// (the list shows it held, with the reason), release runs it again at the
// next attempt, release --all-held releases every held one, resolve
// settles a held one with the operator's receipt; a done effect cannot be
// held (a conflict), release wants an intent or --all-held.
func TestEffectsHoldRelease(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "hal", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "hal", "ledger/Open", `{"Owner":"hal","AuditURL":"`+auditHang+`","AuditAbove":10}`)
	f.ok("world", "call", "hal", "ledger/Deposit", `{"Amount":100}`)
	f.ok("world", "call", "hal", "ledger/Withdraw", `{"Amount":50,"Ref":"big"}`)
	intent := f.audit("hal", false).Intent
	var es []api.Effect
	f.eventually("hal's effect in flight", func() bool {
		f.okJSON(&es, "effects", "list", "--world", "hal")
		return len(es) == 1 && es[0].State == "inflight"
	})

	out := f.ok("effects", "hold", intent, "--reason", "checking with the auditor")
	if r := rows(out)[0]; !hasPrefix(r, intent, "held", "checking") {
		t.Fatalf("effects hold printed %q", out)
	}
	var held []api.Effect // fresh: decoding into es would keep its absent fields
	f.okJSON(&held, "effects", "list", "--world", "hal", "--status", "held")
	if len(held) != 1 || held[0].State != "held" || held[0].HoldReason != "checking with the auditor" || held[0].ClaimedBy != "" || held[0].HeldAt.IsZero() {
		t.Fatalf("effects list --status held: %+v", held)
	}
	if r := row(t, f.ok("effects", "list", "--world", "hal"), intent); !hasPrefix(r, intent, "http.request", "held") {
		t.Fatalf("effects list's row of a held effect %q", r)
	}
	// Holding again changes nothing.
	var st api.EffectStatus
	f.okJSON(&st, "effects", "hold", intent, "--reason", "again")
	if st.State != "held" || st.HoldReason != "checking with the auditor" {
		t.Fatalf("a second hold: %+v", st)
	}

	f.okJSON(&st, "effects", "release", intent, "--reason", "the auditor never got it")
	if st.State != "pending" && st.State != "inflight" || st.ReleaseReason != "the auditor never got it" {
		t.Fatalf("effects release -o json: %+v", st)
	}
	f.eventually("the released effect claimed again", func() bool {
		f.okJSON(&es, "effects", "list", "--world", "hal")
		return len(es) == 1 && es[0].State == "inflight" && es[0].Attempt == 2
	})

	f.ok("effects", "hold", intent)
	var n api.HeldCount
	f.okJSON(&n, "effects", "release", "--all-held", "--reason", "all checked")
	if n.Released != 1 {
		t.Fatalf("effects release --all-held: %+v, want 1", n)
	}
	if out := f.ok("effects", "release", "--all-held"); strings.TrimSpace(out) != "released 0 held effects" {
		t.Fatalf("a second release --all-held printed %q", out)
	}

	f.ok("effects", "hold", intent, "--reason", "it ran: the auditor has it")
	f.ok("effects", "resolve", intent, `{"status":200}`, "--status", "ok", "--reason", "per the auditor")
	if a := f.audit("hal", true); a.Outcome != ledger.AuditOK || a.HTTPStatus != 200 {
		t.Fatalf("hal's audit after the operator's receipt: %+v", a)
	}
	f.fail(cli.ExitConflict, "effects", "hold", intent)
	f.fail(cli.ExitConflict, "effects", "release", intent)
	f.fail(cli.ExitUsage, "effects", "release")
	f.fail(cli.ExitUsage, "effects", "release", intent, "--all-held")
	f.fail(cli.ExitNotFound, "effects", "hold", strings.Repeat("ab", 32))
}
