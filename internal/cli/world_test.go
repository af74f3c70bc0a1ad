package cli_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
)

// accountOf reads an account world's state through `world state -o json`.
func (f *fixture) accountOf(id string) (api.State, ledger.Account) {
	f.t.Helper()
	var s api.State
	f.okJSON(&s, "world", "state", id)
	var a ledger.Account
	if err := json.Unmarshal(s.State, &a); err != nil {
		f.t.Fatalf("the state of %s is not an account: %v\n%s", id, err, s.State)
	}
	return s, a
}

func TestWorldCreateListShow(t *testing.T) {
	f := newFixture(t, fixtureOptions{})

	out := f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	if r := row(t, out, "alice"); !hasPrefix(r, "alice", ledger.UniverseAccount, "active", "-") || r[len(r)-1] != "-" {
		t.Fatalf("create's row %q, want alice %s active, no reason, no parent\n%s", r, ledger.UniverseAccount, out)
	}
	if h := rows(out)[0]; !hasPrefix(h, "ID", "UNIVERSE", "STATUS", "REASON", "CREATED", "PARENT") {
		t.Fatalf("create's header %q", h)
	}
	// The same id and universe again is a no-op that answers the world.
	var w api.World
	f.okJSON(&w, "world", "create", "alice", "--universe", ledger.UniverseAccount)
	if w.ID != "alice" || w.Universe != ledger.UniverseAccount || w.Status != "active" || w.Lineage != nil || w.CreatedAt.IsZero() {
		t.Fatalf("create -o json: %+v", w)
	}
	f.ok("world", "create", "t-1", "--universe", ledger.UniverseTransfer)

	out = f.ok("world", "list")
	if h := rows(out)[0]; !hasPrefix(h, "ID", "UNIVERSE", "STATUS", "CREATED", "PARENT") {
		t.Fatalf("list's header %q", h)
	}
	if r := row(t, out, "alice"); !hasPrefix(r, "alice", ledger.UniverseAccount, "active") {
		t.Fatalf("list's row %q", r)
	}
	if r := row(t, out, "t-1"); !hasPrefix(r, "t-1", ledger.UniverseTransfer, "active") {
		t.Fatalf("list's row %q", r)
	}
	var ws []api.World
	f.okJSON(&ws, "world", "list")
	if len(ws) != 2 || ws[0].ID != "alice" || ws[1].ID != "t-1" || ws[1].Universe != ledger.UniverseTransfer {
		t.Fatalf("list -o json: %+v", ws)
	}
	f.okJSON(&ws, "world", "list", "--universe", ledger.UniverseTransfer)
	if len(ws) != 1 || ws[0].ID != "t-1" {
		t.Fatalf("list --universe %s: %+v", ledger.UniverseTransfer, ws)
	}
	f.okJSON(&ws, "world", "list", "--status", "paused")
	if len(ws) != 0 {
		t.Fatalf("list --status paused: %+v", ws)
	}

	// A call places and runs the world, so show has a lease and a head.
	if got := f.ok("world", "call", "alice", "ledger/Open", `{"Owner":"alice"}`); got != "0\n" {
		t.Fatalf("Open replied %q, want the balance 0", got)
	}
	var v api.WorldView
	f.okJSON(&v, "world", "show", "alice")
	if v.ID != "alice" || v.Head != 1 || v.Lease == nil || v.Lease.Holder != "w1" || v.Lease.Epoch == 0 ||
		v.Assignment == nil || v.Assignment.Worker != "w1" || v.InboxCursor == nil || *v.InboxCursor != 1 {
		t.Fatalf("show -o json: %+v", v)
	}
	out = f.ok("world", "show", "alice")
	epoch := strconv.FormatUint(v.Lease.Epoch, 10)
	for _, want := range [][]string{{"id", "alice"}, {"universe", ledger.UniverseAccount}, {"status", "active"}, {"head", "1"}, {"inbox", "cursor", "1"}, {"lease", "w1", "epoch", epoch}, {"placed", "on", "w1"}} {
		if r := row(t, out, want[0]); !hasPrefix(r, want...) {
			t.Fatalf("show's row %q, want %q\n%s", r, want, out)
		}
	}
}

func TestWorldSendCallState(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "alice", "ledger/Open", `{"Owner":"alice"}`)

	out := f.ok("world", "send", "alice", "ledger/Deposit", `{"Amount":100,"Ref":"dep-1"}`, "--key", "dep-1")
	first, ok := strings.CutPrefix(strings.TrimSpace(out), "enqueued at inbox seq ")
	if !ok || strings.Contains(first, "duplicate") {
		t.Fatalf("send printed %q", out)
	}
	seq, err := strconv.ParseUint(first, 10, 64)
	if err != nil {
		t.Fatalf("send printed %q: %v", out, err)
	}
	// The same key again: the first event's seq, flagged a duplicate, and
	// nothing more enqueued.
	if out := f.ok("world", "send", "alice", "ledger/Deposit", `{"Amount":100,"Ref":"dep-1"}`, "--key", "dep-1"); out != "enqueued at inbox seq "+first+" (duplicate key: the first event's seq)\n" {
		t.Fatalf("the repeat printed %q, want the duplicate of seq %s", out, first)
	}
	var ack api.Ack
	f.okJSON(&ack, "world", "send", "alice", "ledger/Deposit", `{"Amount":100,"Ref":"dep-1"}`, "--key", "dep-1")
	if ack.Seq != seq || !ack.Duplicate {
		t.Fatalf("the repeat -o json: %+v, want seq %d duplicate", ack, seq)
	}
	f.okJSON(&ack, "world", "send", "alice", "ledger/Deposit", `{"Amount":5}`)
	if ack.Seq != seq+1 || ack.Duplicate {
		t.Fatalf("a new event -o json: %+v, want seq %d", ack, seq+1)
	}

	// The inbox is in order: the call is applied after both deposits.
	if got := f.ok("world", "call", "alice", "ledger/Balance"); got != "105\n" {
		t.Fatalf("Balance replied %q, want 105", got)
	}
	var res api.CallResult
	f.okJSON(&res, "world", "call", "alice", "ledger/Withdraw", `{"Amount":5,"Ref":"w-1"}`, "--call-id", "cli-call-1")
	if string(res.Reply) != "100" || res.CallID != "cli-call-1" || len(res.ReplyCBOR) == 0 {
		t.Fatalf("call -o json: %+v", res)
	}
	// The same call id again waits for the same call: no second withdrawal.
	f.okJSON(&res, "world", "call", "alice", "ledger/Withdraw", `{"Amount":5,"Ref":"w-1"}`, "--call-id", "cli-call-1")
	if string(res.Reply) != "100" {
		t.Fatalf("the repeated call replied %s, want the first reply 100", res.Reply)
	}
	// A handler that refuses is a failed call (exit 1), one line.
	r := f.fail(cli.ExitError, "world", "call", "alice", "ledger/Withdraw", `{"Amount":1000}`)
	if !strings.Contains(r.err, "insufficient funds") {
		t.Fatalf("the refused call's error %q does not say why", r.err)
	}

	var show api.WorldView
	f.okJSON(&show, "world", "show", "alice")
	out = f.ok("world", "state", "alice")
	header, body, _ := strings.Cut(out, "\n")
	st, acct := f.accountOf("alice")
	if header != "# height "+strconv.FormatUint(st.Height, 10)+", state hash "+st.Hash {
		t.Fatalf("state's header %q, want height %d hash %s", header, st.Height, st.Hash)
	}
	if st.Height != show.Head || len(st.Hash) != 64 || len(st.StateCBOR) == 0 {
		t.Fatalf("state -o json: height %d hash %q, show's head %d", st.Height, st.Hash, show.Head)
	}
	if acct.Owner != "alice" || acct.Balance != 100 || len(acct.History) != 4 {
		t.Fatalf("state: %+v, want alice's account with 100 after open, two deposits and a withdrawal", acct)
	}
	var pretty map[string]any
	if err := json.Unmarshal([]byte(body), &pretty); err != nil || pretty["Balance"] != float64(100) {
		t.Fatalf("state's table output is not the state as JSON (%v):\n%s", err, body)
	}
}

func TestWorldPauseResumeArchive(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "bob", "ledger/Deposit", `{"Amount":7}`)

	out := f.ok("world", "pause", "bob", "--reason", "incident 42")
	if r := row(t, out, "bob"); !hasPrefix(r, "bob", ledger.UniverseAccount, "paused", "incident", "42") {
		t.Fatalf("pause's row %q\n%s", r, out)
	}
	var v api.WorldView
	f.okJSON(&v, "world", "show", "bob")
	if v.Status != "paused" || v.StatusReason != "incident 42" || v.StatusChangedAt.IsZero() || v.Lease == nil || v.Lease.Holder != "" {
		t.Fatalf("show of a paused world: %+v", v)
	}
	if r := row(t, f.ok("world", "show", "bob"), "reason"); !hasPrefix(r, "reason", "incident", "42") {
		t.Fatalf("show's reason row %q", r)
	}
	// A call to a paused world is refused at once; an event still queues.
	f.fail(cli.ExitConflict, "world", "call", "bob", "ledger/Balance")
	f.ok("world", "send", "bob", "ledger/Deposit", `{"Amount":3}`)
	var ws []api.World
	f.okJSON(&ws, "world", "list", "--status", "paused")
	if len(ws) != 1 || ws[0].ID != "bob" {
		t.Fatalf("list --status paused: %+v", ws)
	}

	var w api.World
	f.okJSON(&w, "world", "resume", "bob", "--reason", "fixed")
	if w.Status != "active" || w.StatusReason != "fixed" {
		t.Fatalf("resume -o json: %+v", w)
	}
	// The queued deposit was kept; the new lease has a higher epoch.
	if got := f.ok("world", "call", "bob", "ledger/Balance"); got != "10\n" {
		t.Fatalf("Balance after resume %q, want 10", got)
	}
	if v.Lease == nil {
		t.Fatal("show of the paused world has no lease record")
	}
	paused := *v.Lease
	var resumed api.WorldView
	f.okJSON(&resumed, "world", "show", "bob")
	if resumed.Lease == nil || resumed.Lease.Epoch <= paused.Epoch {
		t.Fatalf("the lease after resume: %+v, want an epoch above the paused one's %+v", resumed.Lease, paused)
	}

	out = f.ok("world", "archive", "bob", "--reason", "closed")
	if r := row(t, out, "bob"); !hasPrefix(r, "bob", ledger.UniverseAccount, "archived", "closed") {
		t.Fatalf("archive's row %q", r)
	}
	f.fail(cli.ExitConflict, "world", "send", "bob", "ledger/Deposit", `{"Amount":1}`)
	f.fail(cli.ExitConflict, "world", "resume", "bob")
}

func TestWorldFork(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "bob", "ledger/Open", `{"Owner":"bob"}`)
	f.ok("world", "call", "bob", "ledger/Deposit", `{"Amount":800}`)
	src, srcAcct := f.accountOf("bob")

	out := f.ok("world", "fork", "bob", "bob-what-if")
	parent := "bob@" + strconv.FormatUint(src.Height, 10)
	if r := row(t, out, "bob-what-if"); !hasPrefix(r, "bob-what-if", ledger.UniverseAccount, "active") || r[len(r)-1] != parent {
		t.Fatalf("fork's row %q, want parent %s\n%s", r, parent, out)
	}
	var w api.World
	f.okJSON(&w, "world", "fork", "bob", "bob-what-if") // a repeat answers the fork
	if w.ID != "bob-what-if" || w.Lineage == nil || w.Lineage.Parent != "bob" || w.Lineage.ForkedAtHeight != src.Height {
		t.Fatalf("fork -o json: %+v (lineage %+v)", w, w.Lineage)
	}
	if r := row(t, f.ok("world", "list"), "bob-what-if"); r[len(r)-1] != parent {
		t.Fatalf("list's fork row %q, want parent %s", r, parent)
	}
	if r := row(t, f.ok("world", "show", "bob-what-if"), "forked"); !hasPrefix(r, "forked", "from", "bob", "at", "height", strconv.FormatUint(src.Height, 10)) {
		t.Fatalf("show's lineage row %q", r)
	}
	_, forkAcct := f.accountOf("bob-what-if")
	if forkAcct.Owner != "bob" || forkAcct.Balance != srcAcct.Balance {
		t.Fatalf("the fork's state %+v, want the source's %+v", forkAcct, srcAcct)
	}
	// They diverge from there.
	f.ok("world", "call", "bob-what-if", "ledger/Withdraw", `{"Amount":300}`)
	if got := f.ok("world", "call", "bob", "ledger/Balance"); got != "800\n" {
		t.Fatalf("the source's balance %q after the fork's withdrawal, want 800", got)
	}
	if got := f.ok("world", "call", "bob-what-if", "ledger/Balance"); got != "500\n" {
		t.Fatalf("the fork's balance %q, want 500", got)
	}
	f.fail(cli.ExitNotFound, "world", "fork", "nope", "nope-2")
	// Any height of the journal forks (the state replayed up to it); one
	// above the head is invalid input.
	f.okJSON(&w, "world", "fork", "bob", "bob-opened", "--height", "1")
	if w.Lineage == nil || w.Lineage.Parent != "bob" || w.Lineage.ForkedAtHeight != 1 {
		t.Fatalf("fork --height 1: %+v", w)
	}
	if _, opened := f.accountOf("bob-opened"); opened.Owner != "bob" || opened.Balance != 0 {
		t.Fatalf("the fork at height 1: %+v, want bob's account just opened", opened)
	}
	f.fail(cli.ExitUsage, "world", "fork", "bob", "bob-old", "--height", "999")
}

func TestWorldUpgrade(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "bob", "ledger/Open", `{"Owner":"bob"}`)
	var u api.WorldUpgrade
	f.okJSON(&u, "world", "upgrade", "bob", "--to", "1")
	if u.Status != "already" || u.From != 1 || u.To != 1 {
		t.Fatalf("upgrade to the version it is on: %+v", u)
	}
	if r := row(t, f.ok("world", "show", "bob"), "version"); !hasPrefix(r, "version", "1") {
		t.Fatalf("show's version row %q", r)
	}
	// The binary carries v1 alone: the request is taken, ordered with the
	// world's input, and the upgrade fails there, leaving bob on v1.
	f.okJSON(&u, "world", "upgrade", "bob", "--to", "2")
	if u.Status != "requested" || u.Seq == 0 {
		t.Fatalf("upgrade to 2: %+v", u)
	}
	f.ok("world", "call", "bob", "ledger/Deposit", `{"Amount":5}`) // after the upgrade input
	if got := f.ok("world", "call", "bob", "ledger/Balance"); got != "5\n" {
		t.Fatalf("balance after a failed upgrade %q", got)
	}
	if r := row(t, f.ok("world", "show", "bob"), "version"); !hasPrefix(r, "version", "1") {
		t.Fatalf("show's version row after a failed upgrade %q", r)
	}
	if out := f.ok("world", "journal", "bob"); !strings.Contains(out, "WorldUpgraded") && !strings.Contains(out, "upgrade") {
		t.Fatalf("the journal does not show the upgrade record:\n%s", out)
	}
	var sum struct {
		Universe               string
		To                     uint64
		Asked, Already, Failed int
		Failures               []api.UpgradeFailure
	}
	f.okJSON(&sum, "world", "upgrade", "--universe", ledger.UniverseAccount, "--to", "1")
	if sum.Already != 1 || sum.Asked != 0 || sum.Failed != 0 {
		t.Fatalf("universe upgrade: %+v", sum)
	}
	f.fail(cli.ExitUsage, "world", "upgrade", "bob")
	f.fail(cli.ExitUsage, "world", "upgrade", "bob", "--universe", ledger.UniverseAccount, "--to", "2")
	f.fail(cli.ExitNotFound, "world", "upgrade", "nope", "--to", "2")
}
