package world_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

func TestRecordIsAValidSeed001Envelope(t *testing.T) {
	f := newFeeder(t, effectsDef(), "acct-9")
	f.event(Deposit{Amount: 4})
	res := f.event(Withdraw{Amount: 3})
	e := res.Record
	if err := e.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if err := e.VerifyKey(); err != nil {
		t.Fatalf("VerifyKey: %v", err)
	}
	want := event.Envelope{
		EventID: e.IdempotencyKey, StreamID: "acct-9", RunSeq: 2, EventType: world.EventWorldStepped,
		StepID: "inbox/2", LogicalAttemptID: 1, EngineAttemptID: 1, PlanID: "ledger", PlanVersion: 1,
		IdempotencyKey: event.IdempotencyKey("acct-9", "inbox/2", 1, world.EventWorldStepped, "ledger", 1),
	}
	if e.EventID != want.EventID || e.StreamID != want.StreamID || e.RunSeq != want.RunSeq || e.EventType != want.EventType ||
		e.StepID != want.StepID || e.LogicalAttemptID != 1 || e.EngineAttemptID != 1 || e.PlanID != want.PlanID ||
		e.PlanVersion != want.PlanVersion || e.IdempotencyKey != want.IdempotencyKey {
		t.Fatalf("record %+v\nwant     %+v", e, want)
	}
	var rec struct {
		V     int `cbor:"v"`
		Input struct {
			Seq     uint64 `cbor:"seq"`
			Kind    string `cbor:"kind"`
			Type    string `cbor:"type"`
			Payload []byte `cbor:"payload"`
		} `cbor:"input"`
		Outcome   string   `cbor:"outcome"`
		StateHash string   `cbor:"state_hash"`
		Intents   []string `cbor:"intents"`
	}
	decodePayload(t, e, &rec)
	if rec.Input.Seq != 2 || rec.Input.Kind != "event" || rec.Input.Type != "world_test.Withdraw" ||
		string(rec.Input.Payload) != string(mustEvent(t, Withdraw{Amount: 3})) {
		t.Fatalf("record input %+v", rec.Input)
	}
	if rec.Outcome != "ok" || rec.StateHash != res.StateHash || !slices.Equal(rec.Intents, []string{res.Intents[0].IntentHash}) {
		t.Fatalf("record %+v does not carry outcome, post-step state hash and intents", rec)
	}
}

func TestDrainingTheSameInboxItemTwiceYieldsTheSameIdempotencyKey(t *testing.T) {
	def := effectsDef()
	in := world.Input{Seq: 17, Kind: vocab.KindEvent, Payload: mustEvent(t, Deposit{Amount: 1}), EnqueuedAt: t0}
	// Once from the initial state, once after other work at another height
	// (a worker that crashed before its commit, and its successor).
	first, err := def.Step("w", world.Snapshot{}, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	f := newFeeder(t, def, "w")
	f.event(Deposit{Amount: 100})
	f.event(Deposit{Amount: 100})
	second, err := f.w.Step(in, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if first.Record.IdempotencyKey != second.Record.IdempotencyKey || first.Record.EventID != second.Record.EventID {
		t.Fatalf("keys %s and %s differ", first.Record.IdempotencyKey, second.Record.IdempotencyKey)
	}
	in.Seq++
	other, _ := def.Step("w", world.Snapshot{}, in, t0)
	if other.Record.IdempotencyKey == first.Record.IdempotencyKey {
		t.Fatal("another inbox item got the same key")
	}
}

func TestEmittedAtStaysOutOfThePayload(t *testing.T) {
	def := effectsDef()
	in := world.Input{Seq: 1, Kind: vocab.KindEvent, Payload: mustEvent(t, Deposit{Amount: 1}), EnqueuedAt: t0}
	a, _ := def.Step("w", world.Snapshot{}, in, t0)
	b, _ := def.Step("w", world.Snapshot{}, in, t0.Add(time.Hour))
	if string(a.Record.Payload) != string(b.Record.Payload) || a.StateHash != b.StateHash {
		t.Fatal("emittedAt changed what replay compares")
	}
	if !a.Record.EmittedAt.Equal(t0) || !b.Record.EmittedAt.Equal(t0.Add(time.Hour)) {
		t.Fatal("emittedAt is not the caller's")
	}
}

func TestReceiptIsHandledOnceAndNeverAwaitedAgain(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	res := f.event(Burst{N: 2})
	x, y := res.Intents[0].IntentHash, res.Intents[1].IntentHash
	if len(f.w.Awaiting()) != 2 {
		t.Fatalf("awaiting %v, want both intents", f.w.Awaiting())
	}
	got := f.receipt(world.Receipt{IntentHash: x, Kind: world.KindHTTPRequest, Status: vocab.ReceiptOK})
	wantOutcome(t, got, world.OutcomeOK)
	if aw := f.w.Awaiting(); len(aw) != 1 || aw[0].Hash != y || aw[0].Kind != world.KindHTTPRequest {
		t.Fatalf("awaiting %v after x's receipt, want only y", aw)
	}
	dup := f.receipt(world.Receipt{IntentHash: x, Kind: world.KindHTTPRequest, Status: vocab.ReceiptOK})
	wantOutcome(t, dup, world.OutcomeStale)
	if paid := f.value().Paid; len(paid) != 1 {
		t.Fatalf("handled receipts %v: a duplicate reached the handler", paid)
	}
	// Replaying the whole journal re-derives x and y, and still awaits only y:
	// the plane can never be told to publish x again.
	w, err := world.Replay(effectsDef(), "w1", world.Snapshot{}, f.records)
	if err != nil {
		t.Fatal(err)
	}
	if aw := w.Awaiting(); len(aw) != 1 || aw[0].Hash != y {
		t.Fatalf("replayed world awaits %v, want only y", aw)
	}
}

func TestReceiptConsumedEvenWhenItsHandlerFails(t *testing.T) {
	def := world.New[Ledger]("t", 1)
	world.On(def, func(c *world.Ctx, s *Ledger, b Burst) error {
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "u"})
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Ledger, r world.Receipt) error { return errors.New("no") })
	f := newFeeder(t, def, "w")
	h := f.event(Burst{}).Intents[0].IntentHash
	wantOutcome(t, f.receipt(world.Receipt{IntentHash: h, Kind: world.KindHTTPRequest, Status: vocab.ReceiptTimeout}), world.OutcomeError)
	if len(f.w.Awaiting()) != 0 {
		t.Fatal("a receipt whose handler failed is still awaited")
	}
}

// An operator retry's receipt (Retry > 0) reaches the handler after the
// world consumed the first execution's error, and replay agrees; a second
// receipt of the first execution is still stale.
func TestOperatorRetryReceiptReachesTheHandler(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	h := f.event(Burst{N: 1}).Intents[0].IntentHash
	wantOutcome(t, f.receipt(world.Receipt{IntentHash: h, Kind: world.KindHTTPRequest, Status: vocab.ReceiptError}), world.OutcomeOK)
	wantOutcome(t, f.receipt(world.Receipt{IntentHash: h, Kind: world.KindHTTPRequest, Status: vocab.ReceiptError}), world.OutcomeStale)
	retry := f.receipt(world.Receipt{IntentHash: h, Kind: world.KindHTTPRequest, Status: vocab.ReceiptOK, Retry: 1})
	wantOutcome(t, retry, world.OutcomeOK)
	if paid := f.value().Paid; len(paid) != 2 {
		t.Fatalf("handled receipts %v, want the error and the retry's", paid)
	}
	if len(f.w.Awaiting()) != 0 {
		t.Fatalf("awaiting %v after the retry's receipt", f.w.Awaiting())
	}
	w, err := world.Replay(effectsDef(), "w1", world.Snapshot{}, f.records)
	if err != nil {
		t.Fatal(err)
	}
	if string(w.State()) != string(f.w.State()) {
		t.Fatal("replay gives another state")
	}
}
