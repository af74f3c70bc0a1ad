package event

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// Seed 001 §2.3: a domain's source event-time goes in the payload as
// sourceOccurredAt, as int64 Unix nanoseconds.
func TestSourceOccurredAtLivesInPayload(t *testing.T) {
	at := time.Date(2026, 2, 16, 9, 30, 0, 42, time.FixedZone("X", 3600))
	p, err := WithSourceOccurredAt(EmptyPayload(), at)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{0xa1, 0x70}, "sourceOccurredAt"...)
	want = appendInt(want, at.UnixNano())
	if !bytes.Equal(p, want) {
		t.Fatalf("payload %x, want %x", p, want)
	}
	got, ok, err := SourceOccurredAt(p)
	if err != nil || !ok || !got.Equal(at) || got.Location() != time.UTC {
		t.Fatalf("SourceOccurredAt = %v %v %v", got, ok, err)
	}

	// Other entries are kept byte for byte and the result is canonical.
	base := mustMarshal(t, map[string]any{"a": 1, "zz": []any{"x", 1.5}, "sourceOccurredAs": true})
	p, err = WithSourceOccurredAt(base, at)
	if err != nil {
		t.Fatal(err)
	}
	if err := IsCanonical(p); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := Unmarshal(p, &m); err != nil || len(m) != 4 || m["a"] != uint64(1) {
		t.Fatalf("entries: %v %v", m, err)
	}
	// Setting twice replaces; a zero time removes.
	later := at.Add(time.Second)
	if p, err = WithSourceOccurredAt(p, later); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := SourceOccurredAt(p); !got.Equal(later) {
		t.Fatalf("after replace: %v", got)
	}
	if p, err = WithSourceOccurredAt(p, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, base) {
		t.Fatalf("after removal %x, want the original %x", p, base)
	}
	if _, ok, err := SourceOccurredAt(p); ok || err != nil {
		t.Fatalf("absent key: ok %v err %v", ok, err)
	}
	// An empty payload starts a new map.
	if p, err = WithSourceOccurredAt(nil, at); err != nil || !bytes.Equal(p, want) {
		t.Fatalf("from nil: %x %v", p, err)
	}
}

func TestSourceOccurredAtErrors(t *testing.T) {
	at := time.Unix(1, 0)
	for name, p := range map[string][]byte{
		"array":   {0x80},
		"integer": {0x01},
		"empty":   nil,
	} {
		if _, _, err := SourceOccurredAt(p); !errors.Is(err, ErrPayloadNotMap) {
			t.Errorf("SourceOccurredAt(%s) = %v", name, err)
		}
	}
	if _, err := WithSourceOccurredAt([]byte{0x80}, at); !errors.Is(err, ErrPayloadNotMap) {
		t.Errorf("WithSourceOccurredAt(array) = %v", err)
	}
	if _, err := WithSourceOccurredAt(unhex(t, "a2 6162 01 6161 02"), at); !errors.Is(err, ErrNotCanonical) {
		t.Errorf("WithSourceOccurredAt(unsorted) = %v", err)
	}
	if _, _, err := SourceOccurredAt(unhex(t, "a2 6161 01 6161 02")); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("SourceOccurredAt(duplicate) = %v", err)
	}
	text := mustMarshal(t, map[string]string{SourceOccurredAtKey: "yesterday"})
	if _, _, err := SourceOccurredAt(text); !errors.Is(err, ErrType) {
		t.Errorf("SourceOccurredAt(text value) = %v", err)
	}
	if _, err := WithSourceOccurredAt(EmptyPayload(), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, ErrTimeRange) {
		t.Errorf("year 3000: %v", err)
	}
}
