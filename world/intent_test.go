package world_test

import (
	"testing"

	"github.com/orrery-run/orrery/world"
)

// TestIntentHashVectors pins the byte layout of intent_hash. The expected
// digests were computed outside Go (Python hashlib over the documented
// preimage L(world) U(height) U(index) L(kind) L(params)); a change to the
// layout breaks every stored intent, and this test.
func TestIntentHashVectors(t *testing.T) {
	for _, v := range []struct {
		world         string
		height, index uint64
		kind          string
		params        []byte
		want          string
	}{
		{"acct-1", 1, 0, "http.request", []byte{0xa0}, "2ba74b2bba4acb4859eae3fc71c3817490940d6269173e2b694a3e23891f8250"},
		{"", 0, 0, "", nil, "2c34ce1df23b838c5abf2a7f6437cca3d3067ed509ff25f11df6b11b582b51eb"},
		{"w", 1<<64 - 1, 7, "fabric.send", []byte{0xa1, 0x61, 0x61, 0x01}, "df9977233d9a417c30ecff4df4f3bfc687d3004d3d12d470560b47a883a38d5b"},
		{"ab", 1, 0, "c", nil, "4f96fb5562aa494392bcdc24aed46d4f525c864e8430e7a20255fd831f03617a"},
		{"a", 1, 0, "bc", nil, "f7e784f91ed9fd509fc425d80b17e38c3fcca9204518d6003b21668543457394"},
	} {
		if got := world.IntentHash(v.world, v.height, v.index, v.kind, v.params); got != v.want {
			t.Errorf("IntentHash(%q, %d, %d, %q, %x) = %s, want %s", v.world, v.height, v.index, v.kind, v.params, got, v.want)
		}
	}
}

// TestIntentHashOfStepIsFromWorldHeightIndexKindParams checks that the
// hashes a step hands out are IntentHash of the step's own coordinates:
// the world, the step's height, the order of emission and the canonical
// params.
func TestIntentHashOfStepIsFromWorldHeightIndexKindParams(t *testing.T) {
	f := newFeeder(t, effectsDef(), "fx-1")
	f.event(Deposit{Amount: 1})
	res := f.event(Burst{N: 3})
	wantOutcome(t, res, world.OutcomeOK)
	if len(res.Intents) != 3 {
		t.Fatalf("%d intents, want 3", len(res.Intents))
	}
	for i, it := range res.Intents {
		if want := world.IntentHash("fx-1", 2, uint64(i), it.Kind, it.Params); it.IntentHash != want {
			t.Errorf("intent %d: hash %s, want %s", i, it.IntentHash, want)
		}
		if it.Origin != "fx-1@2" {
			t.Errorf("intent %d: origin %q, want fx-1@2", i, it.Origin)
		}
	}
}
