package world_test

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// feeder drives a World as the plane would: inbox seqs count up, the
// store's time advances a second per item, and the records are kept.
type feeder[S any] struct {
	t       *testing.T
	w       *world.World[S]
	seq     uint64
	records []event.Envelope
	results []world.StepResult
}

func newFeeder[S any](t *testing.T, def *world.Def[S], id string) *feeder[S] {
	t.Helper()
	w, err := world.Load(def, id, world.Snapshot{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return &feeder[S]{t: t, w: w}
}

func (f *feeder[S]) feed(kind string, payload []byte) world.StepResult {
	f.t.Helper()
	f.seq++
	at := t0.Add(time.Duration(f.seq) * time.Second)
	res, err := f.w.Step(world.Input{Seq: f.seq, Kind: kind, Payload: payload, EnqueuedAt: at}, at.Add(time.Millisecond))
	if err != nil {
		f.t.Fatalf("Step(seq %d): %v", f.seq, err)
	}
	f.records = append(f.records, res.Record)
	f.results = append(f.results, res)
	return res
}

func (f *feeder[S]) event(v any) world.StepResult {
	f.t.Helper()
	return f.feed(vocab.KindEvent, mustEvent(f.t, v))
}

func (f *feeder[S]) call(id string, v any) world.StepResult {
	f.t.Helper()
	b, err := world.EncodeCall(id, v)
	if err != nil {
		f.t.Fatalf("EncodeCall: %v", err)
	}
	return f.feed(vocab.KindCall, b)
}

func (f *feeder[S]) receipt(r world.Receipt) world.StepResult {
	f.t.Helper()
	b, err := world.EncodeReceipt(r)
	if err != nil {
		f.t.Fatalf("EncodeReceipt: %v", err)
	}
	return f.feed(vocab.KindReceipt, b)
}

func (f *feeder[S]) value() S {
	f.t.Helper()
	v, err := f.w.Value()
	if err != nil {
		f.t.Fatalf("Value: %v", err)
	}
	return v
}

func mustEvent(t *testing.T, v any) []byte {
	t.Helper()
	b, err := world.EncodeEvent(v)
	if err != nil {
		t.Fatalf("EncodeEvent(%T): %v", v, err)
	}
	return b
}

func wantOutcome(t *testing.T, res world.StepResult, want world.Outcome) {
	t.Helper()
	if res.Outcome != want {
		t.Fatalf("outcome %q (err %v), want %q", res.Outcome, res.Err, want)
	}
}
