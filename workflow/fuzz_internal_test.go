package workflow

import (
	"errors"
	"testing"

	"github.com/orrery-run/orrery/event"
)

var lifecycleTypes = []string{
	event.RunQueued, event.RunStarted, event.RunPaused, event.RunResumed, event.RunCompleted, event.RunFailed,
	event.RunCancelled, event.StepStarted, event.StepCompleted, event.StepFailed, event.StepSkipped, "FutureType",
}

func seedPayload(f *testing.F, typ int, v any) {
	b, err := event.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(typ), b)
}

// typedDecodeError reports whether err is one of the errors the decoders
// promise.
func typedDecodeError(err error) bool {
	var de *event.DecodeError
	return errors.As(err, &de) || errors.Is(err, ErrInvalid)
}

// FuzzDecodeStepPayload feeds recorded-event payloads to the decoder every
// worker, client and replay reads a stream with: it never panics, fails
// only with typed errors, and decodes canonical input stably.
func FuzzDecodeStepPayload(f *testing.F) {
	seedPayload(f, 7, map[string]any{"kind": "step"})
	seedPayload(f, 7, map[string]any{"kind": "sleep", "deliver_at": int64(1e18), "timer": "ab"})
	seedPayload(f, 7, map[string]any{"kind": "nope"})
	seedPayload(f, 8, map[string]any{"value": 42, "seq": 3})
	seedPayload(f, 8, map[string]any{"seq": 3})
	seedPayload(f, 9, map[string]any{"error": "boom", "final": true, "timeout": true})
	seedPayload(f, 9, map[string]any{"error": 7})
	seedPayload(f, 10, map[string]any{"reason": "cancelled"})
	seedPayload(f, 1, map[string]any{"input": []any{1, "x"}})
	seedPayload(f, 1, map[string]any{})
	seedPayload(f, 2, map[string]any{"control": 4, "sourceOccurredAt": int64(1)})
	seedPayload(f, 4, map[string]any{"output": map[string]any{"a": 1}})
	seedPayload(f, 5, map[string]any{"error": "x", "divergence": map[string]any{"index": 1, "recorded": "a", "got": "b"}})
	seedPayload(f, 5, map[string]any{"divergence": "not a map"})
	seedPayload(f, 11, map[string]any{})
	f.Add(uint8(8), []byte{0xa1, 0x65, 'v', 'a', 'l', 'u', 'e'}) // truncated
	f.Add(uint8(9), []byte{0xff})
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, typ uint8, payload []byte) {
		et := lifecycleTypes[int(typ)%len(lifecycleTypes)]
		v, err := decodePayload(et, payload)
		if err != nil {
			if !typedDecodeError(err) {
				t.Fatalf("%s %x: untyped error %T %v", et, payload, err, err)
			}
			return
		}
		if !event.IsKnown(et) {
			if v != nil {
				t.Fatalf("an unknown type decoded to %v", v)
			}
			return
		}
		again, err := decodePayload(et, payload)
		if err != nil || again == nil {
			t.Fatalf("%s %x: a second decode: %v, %v", et, payload, again, err)
		}
	})
}

// FuzzDecodeSignal feeds signal items to the decoder a run reads its
// inbox with.
func FuzzDecodeSignal(f *testing.F) {
	for _, v := range []any{
		map[string]any{"name": "vote", "value": "yes"},
		map[string]any{"name": "vote", "value": nil},
		map[string]any{"name": "", "value": 1},
		map[string]any{"name": "sys:x", "value": 1},
		map[string]any{"name": "a#b", "value": 1},
		map[string]any{"name": 3, "value": 1},
		map[string]any{"value": 1},
		[]any{"vote", "yes"},
	} {
		b, err := event.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xa2, 0x64, 'n', 'a', 'm', 'e'})
	f.Fuzz(func(t *testing.T, payload []byte) {
		name, value, err := decodeSignal(payload)
		if err != nil {
			if !typedDecodeError(err) {
				t.Fatalf("%x: untyped error %T %v", payload, err, err)
			}
			return
		}
		if name == "" || len(value) == 0 {
			t.Fatalf("%x: decoded an empty name or value", payload)
		}
		if err := event.IsCanonical(value); err != nil {
			t.Fatalf("%x: the value %x is not canonical: %v", payload, value, err)
		}
	})
}

// FuzzCanonInput feeds the type-erased start's input decoder (what an API
// hands StartCBOR): it never panics, fails only with ErrInvalid, and what it
// accepts it stores canonically and stably, as a typed Start would.
func FuzzCanonInput(f *testing.F) {
	type in struct {
		Account string
		Amount  int64
		Tags    []string
	}
	def := New("fz", 1, func(*Ctx, in) (int, error) { return 0, nil })
	for _, v := range []any{
		map[string]any{"Account": "alice", "Amount": int64(50)},
		map[string]any{"Account": "a", "Tags": []any{"x", "y"}},
		map[string]any{"Account": int64(1)},
		map[string]any{"Other": true},
		"alice", nil, []any{int64(1)},
	} {
		b, err := event.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff})
	f.Add([]byte{0xa1, 0x67, 'A', 'c', 'c'})
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := def.canonInput(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := event.IsCanonical(out); err != nil {
			t.Fatalf("stored input not canonical: %v", err)
		}
		again, err := def.canonInput(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not stable: %x vs %x (%v)", out, again, err)
		}
	})
}
