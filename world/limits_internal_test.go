package world

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// TestKernelLimitsFitTheStore pins the relation between the kernel's
// limits and the store's (event's shared constants): whatever a step
// within the kernel's limits produces, the store accepts, and a host can
// add one more such step to a commit that still has room for it.
func TestKernelLimitsFitTheStore(t *testing.T) {
	for _, c := range []struct {
		what       string
		got, bound int
	}{
		{"intents of two steps", 2 * MaxStepIntents, event.MaxBatch},
		{"timers and cancels of a step, and its firing's removal", MaxStepTimers + MaxStepCancels + 1, event.MaxBatch},
		{"params", MaxParamsBytes, event.MaxPayloadBytes},
		{"timer payload", MaxTimerBytes, event.MaxPayloadBytes},
		{"timer payload, read back as an input", MaxTimerBytes, MaxInputBytes},
		{"state", MaxStateBytes, event.MaxStateBytes},
		{"error text", MaxErrorBytes, event.MaxPayloadBytes},
		{"record", maxRecordBytes, event.MaxPayloadBytes},
	} {
		if c.got > c.bound {
			t.Errorf("%s: the kernel allows %d, the store %d", c.what, c.got, c.bound)
		}
	}
	// The largest record a step can write: the largest input, whose type
	// and call id the record copies out of it, the longest error, and a
	// hash per intent, timer and cancel at their limits.
	hash := strings.Repeat("f", 64)
	hashes := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = hash
		}
		return out
	}
	third := strings.Repeat("t", MaxInputBytes/3)
	rec := record{
		V: recordVersion,
		Input: recordInput{Seq: ^uint64(0), Kind: vocab.KindFabric, Type: third, CallID: third,
			Cause:   &Cause{FromWorld: third, FromHeight: ^uint64(0), CorrelationID: third},
			Payload: make([]byte, MaxInputBytes)},
		Outcome: OutcomeUnknownInput, Error: strings.Repeat("e", MaxErrorBytes), StateHash: hash,
		Intents: hashes(MaxStepIntents), Timers: hashes(MaxStepTimers), Cancels: hashes(MaxStepCancels),
		ReplyHash: hash, Refused: true,
	}
	b, err := event.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxRecordBytes {
		t.Fatalf("the largest record is %d bytes, over %d", len(b), maxRecordBytes)
	}
}

// TestBoundTextIsValidUTF8WithinItsLimit: whatever the text (invalid bytes
// that grow when replaced, a multi-byte character across the cut), the
// bounded text is valid UTF-8 of at most the limit, and a text within it
// is kept as it is.
func TestBoundTextIsValidUTF8WithinItsLimit(t *testing.T) {
	for name, s := range map[string]string{
		"short":                 "fine",
		"invalid, grows":        strings.Repeat("a\xff", MaxErrorBytes/2),
		"multi-byte at the cut": strings.Repeat("é", MaxErrorBytes) + "€",
		"long ascii":            strings.Repeat("x", 3*MaxErrorBytes),
	} {
		got := boundText(s, MaxErrorBytes)
		if len(got) > MaxErrorBytes || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes, valid UTF-8 %v", name, len(got), utf8.ValidString(got))
		}
		if len(s) <= MaxErrorBytes && utf8.ValidString(s) && got != s {
			t.Errorf("%s: a text within the limit was changed", name)
		}
	}
}
