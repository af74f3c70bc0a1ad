package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/orrerytest"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// These tests step the pure kernels directly, one input at a time, as a
// host would, with the test kit's Kernel: no store, no clock.

// sent decodes the one fabric message of a step: its destination, type
// and value.
func sent(t *testing.T, res world.StepResult) (world.FabricSendParams, vocab.Intent) {
	t.Helper()
	var sends []vocab.Intent
	for _, in := range res.Intents {
		if in.Kind == world.KindFabricSend {
			sends = append(sends, in)
		}
	}
	if len(sends) != 1 {
		t.Fatalf("step sent %d fabric messages, want 1 (outcome %s, err %v)", len(sends), res.Outcome, res.Err)
	}
	var p world.FabricSendParams
	if err := world.Decode(sends[0].Params, &p); err != nil {
		t.Fatal(err)
	}
	return p, sends[0]
}

func opened(t *testing.T, id string, deposit int64) *orrerytest.Kernel[ledger.Account] {
	t.Helper()
	f := orrerytest.NewKernel(t, ledger.AccountDef(), id)
	if res := f.Event(ledger.Open{Owner: id, AuditURL: "https://audit.example/", AuditAbove: 100}); res.Outcome != world.OutcomeOK {
		t.Fatalf("open: %v", res.Err)
	}
	if res := f.Event(ledger.Deposit{Amount: deposit, Ref: "init"}); res.Outcome != world.OutcomeOK {
		t.Fatalf("deposit: %v", res.Err)
	}
	return f
}

func TestHoldAnswersHeldToTheTransferWorld(t *testing.T) {
	a := opened(t, "alice", 500)
	p, _ := sent(t, a.Event(ledger.Hold{Transfer: "t-1", Amount: 200}))
	if p.DestUniverse != ledger.UniverseTransfer || p.DestWorld != "t-1" || p.Schema != "ledger/Held" {
		t.Fatalf("answer sent to %s/%s as %s", p.DestUniverse, p.DestWorld, p.Schema)
	}
	var held ledger.Held
	if err := world.Decode(p.ValueCBOR, &held); err != nil || held != (ledger.Held{Account: "alice", Amount: 200}) {
		t.Fatalf("held = %+v, %v", held, err)
	}
	s := a.State()
	if s.Balance != 500 || s.Available() != 300 || len(s.Holds) != 1 {
		t.Fatalf("after the hold: balance %d, available %d, holds %v", s.Balance, s.Available(), s.Holds)
	}
	// The same hold again promises nothing more.
	sent(t, a.Event(ledger.Hold{Transfer: "t-1", Amount: 200}))
	if s := a.State(); s.Available() != 300 {
		t.Fatalf("a repeated hold moved the available balance to %d", s.Available())
	}
	a.Event(ledger.Capture{Transfer: "t-1"})
	if s := a.State(); s.Balance != 300 || len(s.Holds) != 0 {
		t.Fatalf("after the capture: balance %d, holds %v", s.Balance, s.Holds)
	}
}

func TestHoldBeyondTheAvailableBalanceIsRefused(t *testing.T) {
	a := opened(t, "alice", 100)
	p, _ := sent(t, a.Event(ledger.Hold{Transfer: "t-1", Amount: 101}))
	if p.Schema != "ledger/Refused" {
		t.Fatalf("answer %s, want ledger/Refused", p.Schema)
	}
	if s := a.State(); len(s.Holds) != 0 || s.Balance != 100 {
		t.Fatalf("a refused hold left holds %v, balance %d", s.Holds, s.Balance)
	}
}

// A Release that overtakes its Hold (two effects, reordered by a crash)
// makes the late Hold be refused, so nothing stays promised.
func TestReleaseBeforeItsHoldRefusesTheLateHold(t *testing.T) {
	a := opened(t, "alice", 500)
	if res := a.Event(ledger.Release{Transfer: "t-9"}); res.Outcome != world.OutcomeOK {
		t.Fatal(res.Err)
	}
	p, _ := sent(t, a.Event(ledger.Hold{Transfer: "t-9", Amount: 100}))
	if p.Schema != "ledger/Refused" {
		t.Fatalf("late hold answered %s, want ledger/Refused", p.Schema)
	}
	if s := a.State(); len(s.Holds) != 0 || len(s.Voided) != 0 {
		t.Fatalf("holds %v, voided %v after the late hold", s.Holds, s.Voided)
	}
}

func TestCaptureWithoutAHoldFails(t *testing.T) {
	a := opened(t, "alice", 500)
	res := a.Event(ledger.Capture{Transfer: "t-1"})
	if res.Outcome != world.OutcomeError || !errors.Is(res.Err, ledger.ErrUnknownHold) {
		t.Fatalf("outcome %s, err %v; want ErrUnknownHold", res.Outcome, res.Err)
	}
	if s := a.State(); s.Balance != 500 {
		t.Fatalf("balance %d", s.Balance)
	}
}

func TestOpenIsOnceAndUnopenedAccountsOnlyReceive(t *testing.T) {
	f := orrerytest.NewKernel(t, ledger.AccountDef(), "zed")
	if res := f.Event(ledger.Deposit{Amount: 5}); res.Outcome != world.OutcomeOK {
		t.Fatalf("deposit to an unopened account: %v", res.Err)
	}
	if res := f.Event(ledger.Withdraw{Amount: 1}); !errors.Is(res.Err, ledger.ErrNotOpen) {
		t.Fatalf("withdraw from an unopened account: %v", res.Err)
	}
	if p, _ := sent(t, f.Event(ledger.Hold{Transfer: "t", Amount: 1})); p.Schema != "ledger/Refused" {
		t.Fatalf("hold on an unopened account answered %s", p.Schema)
	}
	f.Event(ledger.Open{Owner: "Zed"})
	if res := f.Event(ledger.Open{Owner: "Other"}); !errors.Is(res.Err, ledger.ErrAlreadyOpen) {
		t.Fatalf("second open: %v", res.Err)
	}
	if s := f.State(); s.Owner != "Zed" || s.AuditAbove != ledger.DefaultAuditAbove {
		t.Fatalf("owner %q, threshold %d", s.Owner, s.AuditAbove)
	}
}

func TestWithdrawalsAboveTheThresholdAreAudited(t *testing.T) {
	a := opened(t, "alice", 1000)
	if res := a.Event(ledger.Withdraw{Amount: 100, Ref: "small"}); len(res.Intents) != 0 {
		t.Fatalf("a withdrawal at the threshold emitted %d effects", len(res.Intents))
	}
	res := a.Event(ledger.Withdraw{Amount: 101, Ref: "big"})
	if len(res.Intents) != 1 || res.Intents[0].Kind != world.KindHTTPRequest {
		t.Fatalf("a withdrawal above the threshold emitted %v", res.Intents)
	}
	var req world.HTTPRequest
	if err := world.Decode(res.Intents[0].Params, &req); err != nil || req.Method != "POST" || req.URL != "https://audit.example/" {
		t.Fatalf("request %+v, %v", req, err)
	}
	if s := a.State(); len(s.Audits) != 1 || s.Audits[0].Outcome != ledger.AuditPending {
		t.Fatalf("audits %+v", s.Audits)
	}
	a.Receipt(res.Intents[0], vocab.ReceiptOK, world.HTTPResponse{Status: 500})
	s := a.State()
	if au := s.Audits[0]; au.Outcome != ledger.AuditError || au.HTTPStatus != 500 {
		t.Fatalf("a 500 answer recorded as %+v", au)
	}
	res = a.Event(ledger.Withdraw{Amount: 200, Ref: "big-2"})
	a.Receipt(res.Intents[0], vocab.ReceiptOK, world.HTTPResponse{Status: 204})
	if au := a.State().Audits[1]; au.Outcome != ledger.AuditOK || au.HTTPStatus != 204 {
		t.Fatalf("a 204 answer recorded as %+v", au)
	}
	// A second receipt for the same intent never reaches the handler.
	if res := a.Receipt(res.Intents[0], vocab.ReceiptError, nil); res.Outcome != world.OutcomeStale {
		t.Fatalf("duplicate receipt: outcome %s", res.Outcome)
	}
}

func TestAccountKeepsABoundedHistory(t *testing.T) {
	a := opened(t, "alice", 1)
	for i := range 2 * ledger.HistoryLen {
		a.Event(ledger.Deposit{Amount: int64(i + 1)})
	}
	s := a.State()
	if len(s.History) != ledger.HistoryLen {
		t.Fatalf("history of %d entries, want %d", len(s.History), ledger.HistoryLen)
	}
	if last := s.History[len(s.History)-1]; last.Amount != int64(2*ledger.HistoryLen) || last.Balance != s.Balance {
		t.Fatalf("last entry %+v, balance %d", last, s.Balance)
	}
}

// The saga, stepped by hand: Start arms a timer and sends Hold; Held
// cancels the timer and sends Deposit; the deposit's receipt sends
// Capture and completes.
func TestTransferSagaStepsToCompletion(t *testing.T) {
	tr := orrerytest.NewKernel(t, ledger.TransferDef(), "t-1")
	res := tr.Event(ledger.Start{From: "alice", To: "bob", Amount: 50, TimeoutMs: 5000})
	if len(res.TimerSets) != 1 || !res.TimerSets[0].DeliverAt.Equal(tr.Now().Add(5*time.Second)) {
		t.Fatalf("start armed %v", res.TimerSets)
	}
	hold, holdIntent := sent(t, res)
	if hold.DestWorld != "alice" || hold.DestUniverse != ledger.UniverseAccount || hold.Schema != "ledger/Hold" {
		t.Fatalf("hold sent as %+v", hold)
	}
	tr.Receipt(holdIntent, vocab.ReceiptOK, nil)
	res = tr.Event(ledger.Held{Account: "alice", Amount: 50})
	if len(res.TimerCancels) != 1 {
		t.Fatalf("held cancelled %v", res.TimerCancels)
	}
	dep, depIntent := sent(t, res)
	if dep.DestWorld != "bob" || dep.Schema != "ledger/Deposit" {
		t.Fatalf("deposit sent as %+v", dep)
	}
	if s := tr.State(); s.Phase != ledger.PhaseHeld || s.TimerState != ledger.TimerCancelled {
		t.Fatalf("after held: %s, timer %s", s.Phase, s.TimerState)
	}
	capture, _ := sent(t, tr.Receipt(depIntent, vocab.ReceiptOK, nil))
	if capture.DestWorld != "alice" || capture.Schema != "ledger/Capture" {
		t.Fatalf("capture sent as %+v", capture)
	}
	if s := tr.State(); s.Phase != ledger.PhaseCompleted {
		t.Fatalf("phase %s after the deposit landed", s.Phase)
	}
}

func TestTransferTimeoutReleasesAndIgnoresALateHeld(t *testing.T) {
	tr := orrerytest.NewKernel(t, ledger.TransferDef(), "t-2")
	res := tr.Event(ledger.Start{From: "alice", To: "bob", Amount: 50, TimeoutMs: 1000})
	fire := res.TimerSets[0]
	rel, _ := sent(t, tr.Fire(fire))
	if rel.DestWorld != "alice" || rel.Schema != "ledger/Release" {
		t.Fatalf("timeout sent %+v", rel)
	}
	s := tr.State()
	if s.Phase != ledger.PhaseFailed || s.TimerState != ledger.TimerFired || s.Reason == "" {
		t.Fatalf("after the timeout: %+v", s)
	}
	if res := tr.Event(ledger.Held{Account: "alice", Amount: 50}); len(res.Intents) != 0 || res.Outcome != world.OutcomeOK {
		t.Fatalf("a late held did %v (%s)", res.Intents, res.Outcome)
	}
	if tr.State().Phase != ledger.PhaseFailed {
		t.Fatal("a late held revived the saga")
	}
}

func TestTransferUndeliverableDepositReleases(t *testing.T) {
	tr := orrerytest.NewKernel(t, ledger.TransferDef(), "t-3")
	tr.Event(ledger.Start{From: "alice", To: "nobody", Amount: 5})
	_, dep := sent(t, tr.Event(ledger.Held{Account: "alice", Amount: 5}))
	rel, _ := sent(t, tr.Receipt(dep, vocab.ReceiptError, nil))
	if rel.Schema != "ledger/Release" || rel.DestWorld != "alice" {
		t.Fatalf("an undeliverable deposit sent %+v", rel)
	}
	if s := tr.State(); s.Phase != ledger.PhaseFailed {
		t.Fatalf("phase %s", s.Phase)
	}
}

func TestStartValidates(t *testing.T) {
	for _, m := range []ledger.Start{
		{From: "a", To: "a", Amount: 1},
		{From: "", To: "b", Amount: 1},
		{From: "a", To: "b", Amount: 0},
		{From: "a", To: "b", Amount: 1, TimeoutMs: -1},
	} {
		tr := orrerytest.NewKernel(t, ledger.TransferDef(), "t")
		if res := tr.Event(m); !errors.Is(res.Err, ledger.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", m, res.Err)
		}
	}
	tr := orrerytest.NewKernel(t, ledger.TransferDef(), "t")
	tr.Event(ledger.Start{From: "a", To: "b", Amount: 1})
	if res := tr.Event(ledger.Start{From: "a", To: "b", Amount: 1}); !errors.Is(res.Err, ledger.ErrStarted) {
		t.Fatalf("second start: %v", res.Err)
	}
}
