package world_test

import (
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// feedReceiptFor steps a receipt payload as the plane does: Input.ReceiptFor
// names the intent the store delivered it for.
func feedReceiptFor(f *feeder[Ledger], payload []byte, hash string) world.StepResult {
	f.t.Helper()
	f.seq++
	at := t0.Add(time.Duration(f.seq) * time.Second)
	res, err := f.w.Step(world.Input{Seq: f.seq, Kind: vocab.KindReceipt, Payload: payload, EnqueuedAt: at, ReceiptFor: hash}, at)
	if err != nil {
		f.t.Fatalf("Step(seq %d): %v", f.seq, err)
	}
	f.records = append(f.records, res.Record)
	f.results = append(f.results, res)
	return res
}

// TestUnreadableReceiptEndsItsEffectAsUnknown: a receipt over the kernel's
// input limit, and one that is not CBOR, each end the effect the store
// delivered them for: the handler gets a timeout receipt for that intent
// (the world cannot know what the unreadable one said), the effect is no
// longer awaited, the world goes on, and a replay of the journal does the
// same, byte for byte.
func TestUnreadableReceiptEndsItsEffectAsUnknown(t *testing.T) {
	f := newFeeder(t, effectsDef(), "acct")
	f.event(Deposit{Amount: 100})
	res := f.event(Burst{N: 2})
	if len(res.Intents) != 2 {
		t.Fatalf("%d intents, want 2", len(res.Intents))
	}
	big, tiny := res.Intents[0], res.Intents[1]
	// A receipt's wire form around a body too large for the kernel (not
	// EncodeReceipt, which checks the body under the same limit).
	oversized, err := event.Marshal(world.Receipt{IntentHash: big.IntentHash, Kind: big.Kind, Status: vocab.ReceiptOK,
		Body: make([]byte, world.MaxInputBytes)})
	if err != nil {
		t.Fatal(err)
	}
	if len(oversized) <= world.MaxInputBytes {
		t.Fatalf("the oversized receipt is %d bytes", len(oversized))
	}
	for _, c := range []struct {
		hash    string
		payload []byte
	}{{big.IntentHash, oversized}, {tiny.IntentHash, []byte{0xff, 0x00}}} {
		r := feedReceiptFor(f, c.payload, c.hash)
		wantOutcome(t, r, world.OutcomeOK)
	}
	if aw := f.w.Awaiting(); len(aw) != 0 {
		t.Fatalf("still awaiting %v after their receipts", aw)
	}
	want := []string{big.IntentHash[:8] + "/timeout", tiny.IntentHash[:8] + "/timeout"}
	if got := f.value().Paid; !slices.Equal(got, want) {
		t.Fatalf("the handler saw %v, want %v", got, want)
	}
	f.event(Deposit{Amount: 1})
	if got := f.value().Balance; got != 101 {
		t.Fatalf("balance %d after the receipts, want the world to go on", got)
	}
	w, err := world.Replay(effectsDef(), "acct", world.Snapshot{}, f.records)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if w.StateHash() != f.w.StateHash() || len(w.Awaiting()) != 0 {
		t.Fatal("replay differs")
	}
}

// TestUnreadableReceiptForNoAwaitedEffectIsMalformed: ReceiptFor counts only
// for an effect the world awaits; otherwise the unreadable input is a
// malformed one, as without it.
func TestUnreadableReceiptForNoAwaitedEffectIsMalformed(t *testing.T) {
	f := newFeeder(t, effectsDef(), "acct")
	res := feedReceiptFor(f, []byte{0xff}, "0000000000000000000000000000000000000000000000000000000000000000")
	wantOutcome(t, res, world.OutcomeError)
	if got := f.value().Paid; len(got) != 0 {
		t.Fatalf("the handler ran: %v", got)
	}
}
