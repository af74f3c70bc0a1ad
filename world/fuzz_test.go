package world_test

import (
	"errors"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

var fuzzKinds = []string{vocab.KindEvent, vocab.KindCall, vocab.KindReceipt, vocab.KindTimer, vocab.KindFabric, "other"}

// FuzzStepInput feeds any bytes, as any kind, to a world that awaits a
// receipt and a timer. The kernel must answer with a step (never an error
// of its own, never a panic) whose record is a valid envelope; an input
// that does not end ok leaves the handler's state as it was; and replaying
// the record reproduces the step.
func FuzzStepInput(f *testing.F) {
	def := effectsDef()
	setup := newFeeder(&testing.T{}, def, "fz")
	pay := setup.event(Burst{N: 1}).Intents[0]
	timer := setup.event(Remind{Name: "r", AfterSec: 1}).TimerSets[0]
	snap := setup.w.Snapshot()
	before, _ := setup.w.Value()
	beforeBytes, _ := event.Marshal(before)

	receipt, _ := world.EncodeReceipt(world.Receipt{IntentHash: pay.IntentHash, Kind: pay.Kind, Status: vocab.ReceiptOK})
	call, _ := world.EncodeCall("c", Ask{})
	fabric, _ := world.EncodeFabric(world.FabricSendParams{DestWorld: "fz", Mode: world.FabricTypedEvent, Schema: "world_test.Note", ValueCBOR: []byte{0xa1, 0x64, 'T', 'e', 'x', 't', 0x61, 'x'}}, vocab.Origin{World: "o", Height: 3}, "m")
	for i, p := range [][]byte{mustEventF(Deposit{Amount: 3}), call, receipt, timer.Payload, fabric, mustEventF(Fail{}), mustEventF(Boom{}), {0xa0}, {}} {
		f.Add(uint8(i%len(fuzzKinds)), p)
		f.Add(uint8((i+1)%len(fuzzKinds)), p)
	}
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		in := world.Input{Seq: 99, Kind: fuzzKinds[int(kind)%len(fuzzKinds)], Payload: payload, EnqueuedAt: t0}
		res, err := def.Step("fz", snap, in, t0)
		if err != nil {
			t.Fatalf("kernel error on input bytes: %v", err)
		}
		if err := res.Record.Validate(); err != nil {
			t.Fatalf("invalid record: %v", err)
		}
		if res.Outcome != world.OutcomeOK {
			if res.Err == nil {
				t.Fatalf("outcome %s without an error", res.Outcome)
			}
			w, err := world.Load(def, "fz", world.Snapshot{Height: res.Height, State: res.State})
			if err != nil {
				t.Fatal(err)
			}
			after, _ := w.Value()
			afterBytes, _ := event.Marshal(after)
			if string(afterBytes) != string(beforeBytes) {
				t.Fatalf("outcome %s changed the state", res.Outcome)
			}
		}
		// A malformed receipt or firing that names an awaited intent is
		// consumed (it cannot come again); any other malformed input
		// leaves the whole state, kernel part included, as it was.
		consumable := in.Kind == vocab.KindReceipt || in.Kind == vocab.KindTimer
		if res.Outcome == world.OutcomeError && errors.Is(res.Err, world.ErrMalformedInput) && !consumable && string(res.State) != string(snap.State) {
			t.Fatal("a malformed input changed the world's state")
		}
		w, err := world.Replay(def, "fz", snap, []event.Envelope{res.Record})
		if err != nil {
			t.Fatalf("replay of the step: %v", err)
		}
		if string(w.State()) != string(res.State) {
			t.Fatal("replay of the step gives another state")
		}
	})
}

func mustEventF(v any) []byte {
	b, err := world.EncodeEvent(v)
	if err != nil {
		panic(err)
	}
	return b
}
