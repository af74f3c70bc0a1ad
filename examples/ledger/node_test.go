package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/examples/ledger/audit"
	"github.com/orrery-run/orrery/orrerytest"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// These tests run the worlds on the test kit's node, in virtual time: the
// node's leases, timers and retries all wait on the kit's clock, and the
// waits below let it pass.

type env struct {
	t     *testing.T
	n     *orrerytest.Node
	audit *audit.Recorder // the audit service, in process
	ws    []*orrerytest.World
}

func (e *env) create(universe, id string) *orrerytest.World {
	w := e.n.Create(universe, id)
	e.ws = append(e.ws, w)
	return w
}

// account creates, opens and funds an account, through calls, so it is
// placed and running when this returns.
func (e *env) account(id string, deposit int64) {
	e.t.Helper()
	w := e.create(ledger.UniverseAccount, id)
	orrerytest.Call[int64](w, ledger.Open{Owner: id, AuditURL: "https://audit.example/" + id, AuditAbove: 1000})
	if deposit > 0 {
		orrerytest.Call[int64](w, ledger.Deposit{Amount: deposit, Ref: "initial"})
	}
}

func (e *env) start(id string, m ledger.Start) {
	e.t.Helper()
	e.create(ledger.UniverseTransfer, id).SendKey(m, "start")
}

func (e *env) accountState(id string) ledger.Account {
	e.t.Helper()
	return orrerytest.State[ledger.Account](e.n.World(id))
}

func (e *env) transferState(id string) ledger.Transfer {
	e.t.Helper()
	return orrerytest.State[ledger.Transfer](e.n.World(id))
}

// settled waits until transfer id has ended and nothing of it is left in
// flight: its source holds nothing for it, a completed one was captured at
// the source and deposited at the destination, and no world awaits a
// receipt.
func (e *env) settled(id string) ledger.Transfer {
	e.t.Helper()
	var tr ledger.Transfer
	e.n.Eventually(id+" to settle", time.Minute, func() bool {
		tr = e.transferState(id)
		if tr.Phase != ledger.PhaseCompleted && tr.Phase != ledger.PhaseFailed {
			return false
		}
		from := e.accountState(tr.From)
		if _, held := from.HoldFor(id); held {
			return false
		}
		if tr.Phase == ledger.PhaseCompleted && (!hasEntry(from, "capture", id) || !hasEntry(e.accountState(tr.To), "deposit", "transfer:"+id)) {
			return false
		}
		return e.n.Idle()
	})
	return tr
}

func hasEntry(a ledger.Account, kind, ref string) bool {
	for _, en := range a.History {
		if en.Kind == kind && en.Ref == ref {
			return true
		}
	}
	return false
}

func (e *env) total(ids ...string) int64 {
	var n int64
	for _, id := range ids {
		n += e.accountState(id).Balance
	}
	return n
}

// ledgerTest runs body against a fresh node in virtual time, then checks
// that every world replays to what its host holds.
func ledgerTest(t *testing.T, body func(t *testing.T, e *env)) {
	orrerytest.Test(t, func(t *testing.T) {
		e := &env{t: t, audit: &audit.Recorder{}}
		e.n = orrerytest.NewNode(t,
			orrerytest.Worlds(ledger.AccountDef(), ledger.TransferDef()),
			orrerytest.Adapters(adapter.Register(e.audit, adapter.NoRetry())),
			orrerytest.NodeConfig(func(c *node.Config) { c.LeaseTTL, c.ClaimTTL = 2*time.Second, 5*time.Second }))
		body(t, e)
		for _, w := range e.ws {
			w.AssertReplays()
		}
	})
}

func TestTransferCompletesAndConservesMoney(t *testing.T) {
	ledgerTest(t, func(t *testing.T, e *env) {
		e.account("alice", 500)
		e.account("bob", 100)
		before := e.total("alice", "bob")
		e.start("t-1", ledger.Start{From: "alice", To: "bob", Amount: 200, TimeoutMs: 10_000})
		tr := e.settled("t-1")
		if tr.Phase != ledger.PhaseCompleted || tr.TimerState != ledger.TimerCancelled {
			t.Fatalf("transfer %s (%s), timer %s", tr.Phase, tr.Reason, tr.TimerState)
		}
		alice, bob := e.accountState("alice"), e.accountState("bob")
		if alice.Balance != 300 || bob.Balance != 300 {
			t.Fatalf("balances alice %d, bob %d; want 300 and 300", alice.Balance, bob.Balance)
		}
		if after := e.total("alice", "bob"); after != before {
			t.Fatalf("money not conserved: %d before, %d after", before, after)
		}
		if got := orrerytest.Call[ledger.Transfer](e.n.World("t-1"), ledger.Status{}); got.Phase != ledger.PhaseCompleted {
			t.Fatalf("Status call: %+v", got)
		}
		timers, err := e.n.Store().ListTimers(e.n.Context(), "t-1", 10)
		if err != nil || len(timers) != 0 {
			t.Fatalf("timers left after completion: %v, %v", timers, err)
		}
	})
}

func TestInsufficientFundsTransferFailsAndReleases(t *testing.T) {
	ledgerTest(t, func(t *testing.T, e *env) {
		e.account("alice", 50)
		e.account("bob", 0)
		e.start("t-1", ledger.Start{From: "alice", To: "bob", Amount: 80, TimeoutMs: 10_000})
		tr := e.settled("t-1")
		if tr.Phase != ledger.PhaseFailed || tr.ReleaseMsg == "" || tr.TimerState != ledger.TimerCancelled {
			t.Fatalf("transfer %+v; want failed, released, timer cancelled", tr)
		}
		alice, bob := e.accountState("alice"), e.accountState("bob")
		if alice.Balance != 50 || alice.Available() != 50 || len(alice.Holds) != 0 || bob.Balance != 0 {
			t.Fatalf("alice %d (available %d, holds %v), bob %d", alice.Balance, alice.Available(), alice.Holds, bob.Balance)
		}
	})
}

// The source is paused, so the hold waits in its inbox and the saga's
// timer fires first: the saga sends Release and fails. Once the source
// resumes it takes the hold and then releases it, and nothing stays held.
func TestTimedOutTransferFailsWithTheHoldReleased(t *testing.T) {
	ledgerTest(t, func(t *testing.T, e *env) {
		e.account("alice", 500)
		e.account("bob", 0)
		if _, err := e.n.Store().SetWorldStatus(e.n.Context(), "alice", store.WorldPaused, "test: unreachable source"); err != nil {
			t.Fatal(err)
		}
		e.start("t-1", ledger.Start{From: "alice", To: "bob", Amount: 100, TimeoutMs: 3000})
		e.n.Eventually("the timeout", time.Minute, func() bool { return e.transferState("t-1").Phase == ledger.PhaseFailed })
		if tr := e.transferState("t-1"); tr.TimerState != ledger.TimerFired || tr.ReleaseMsg == "" {
			t.Fatalf("transfer %+v; want the timer fired and a release sent", tr)
		}
		if _, err := e.n.Store().SetWorldStatus(e.n.Context(), "alice", store.WorldActive, "test: back"); err != nil {
			t.Fatal(err)
		}
		e.settled("t-1")
		alice := e.accountState("alice")
		if alice.Balance != 500 || len(alice.Holds) != 0 || !hasEntry(alice, "hold", "t-1") || !hasEntry(alice, "release", "t-1") {
			t.Fatalf("alice %d, holds %v, history %+v; want the hold taken and released", alice.Balance, alice.Holds, alice.History)
		}
		if bob := e.accountState("bob"); bob.Balance != 0 {
			t.Fatalf("bob got %d from a failed transfer", bob.Balance)
		}
	})
}

func TestLargeWithdrawalGetsExactlyOneAuditReceipt(t *testing.T) {
	ledgerTest(t, func(t *testing.T, e *env) {
		e.account("carol", 5000)
		carol := e.n.World("carol")
		orrerytest.Call[int64](carol, ledger.Withdraw{Amount: 999, Ref: "small"})
		orrerytest.Call[int64](carol, ledger.Withdraw{Amount: 2500, Ref: "car"})
		e.n.Eventually("the audit receipt", time.Minute, func() bool {
			a := e.accountState("carol")
			return len(a.Audits) == 1 && a.Audits[0].Outcome != ledger.AuditPending && e.n.Idle()
		})
		a := e.accountState("carol")
		if au := a.Audits[0]; au.Outcome != ledger.AuditOK || au.HTTPStatus != 204 || au.Ref != "car" || au.Amount != 2500 {
			t.Fatalf("audit %+v", au)
		}
		reqs := e.audit.Requests()
		if len(reqs) != 1 || reqs[0].Method != "POST" || reqs[0].URL != "https://audit.example/carol" {
			t.Fatalf("audit service got %+v", reqs)
		}
		items, err := e.n.Store().ReadInbox(e.n.Context(), "carol", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		receipts := 0
		for _, it := range items {
			if it.Kind == vocab.KindReceipt {
				receipts++
			}
		}
		if receipts != 1 {
			t.Fatalf("%d receipts in carol's inbox, want 1", receipts)
		}
	})
}

// Many transfers at once between three accounts: whatever order the
// holds land in, the transfers a source can always cover complete, one
// above all the money there is fails, the total is conserved, nothing stays
// held, and every world replays to what its host holds.
func TestConcurrentTransfersConserveMoneyAndReplay(t *testing.T) {
	ledgerTest(t, func(t *testing.T, e *env) {
		e.account("a", 1000)
		e.account("b", 100)
		e.account("c", 0)
		before := e.total("a", "b", "c")
		transfers := []ledger.Start{
			{From: "a", To: "b", Amount: 100}, // a sends 600 in all: always covered
			{From: "a", To: "c", Amount: 200},
			{From: "a", To: "b", Amount: 300},
			{From: "b", To: "c", Amount: 150}, // covered or not, by the order of arrival
			{From: "b", To: "a", Amount: 250},
			{From: "c", To: "a", Amount: 5000}, // more than there is
		}
		for i, m := range transfers {
			m.TimeoutMs = 20_000
			e.start(fmt.Sprintf("t-%d", i), m)
		}
		for i, m := range transfers {
			tr := e.settled(fmt.Sprintf("t-%d", i))
			switch {
			case m.From == "a" && tr.Phase != ledger.PhaseCompleted:
				t.Errorf("t-%d (%s→%s %d): %s, %s; a covers all it sends", i, m.From, m.To, m.Amount, tr.Phase, tr.Reason)
			case m.Amount > before && tr.Phase != ledger.PhaseFailed:
				t.Errorf("t-%d of %d, more than the %d there is: %s", i, m.Amount, before, tr.Phase)
			}
		}
		if after := e.total("a", "b", "c"); after != before {
			t.Fatalf("money not conserved: %d before, %d after", before, after)
		}
		for _, id := range []string{"a", "b", "c"} {
			if a := e.accountState(id); len(a.Holds) != 0 || a.Balance < 0 {
				t.Fatalf("%s: balance %d, holds %v", id, a.Balance, a.Holds)
			}
		}
	})
}
