package storetest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/orrery-run/orrery/store"
)

// FuzzAppend fuzzes the append authority's input: any record either appends
// (and reads back byte for byte, and a retry is idempotent) or fails with a
// typed *store.Error of kind ErrInvalid, and nothing panics. Backends call it
// from a Fuzz function with their factory.
func FuzzAppend(f *testing.F, open Factory) {
	f.Add("run-1", "ev-1", "key-1", "StepStarted", "step", uint64(1), uint64(1), []byte{0xa0})
	f.Add("", "", "", "", "", uint64(0), uint64(0), []byte(nil))
	f.Add("run|1", "ev\x00", "k\xff", "T", "", uint64(1), uint64(0), []byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, stream, id, key, typ, step string, logical, engine uint64, payload []byte) {
		h := open(t)
		r := store.Record{EventID: id, IdempotencyKey: key, EventType: typ, StepID: step,
			LogicalAttemptID: logical, EngineAttemptID: engine, Payload: payload}
		got, err := h.Store.Append(bg, stream, []store.Record{r}, freeOpts)
		if err != nil {
			var se *store.Error
			if !errors.As(err, &se) || !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("bad input gave %T %v, want a *store.Error of kind ErrInvalid", err, err)
			}
			if head, herr := h.Store.Head(bg, stream); herr == nil && head != 0 {
				t.Fatalf("a rejected append moved the head to %d", head)
			}
			return
		}
		evs, err := h.Store.Read(bg, stream, 0, 10)
		if err != nil || len(evs) != 1 {
			t.Fatalf("Read after append: %d events, %v", len(evs), err)
		}
		back := evs[0]
		if back.EventID != id || back.IdempotencyKey != key || back.EventType != typ || back.StepID != step ||
			back.LogicalAttemptID != logical || back.EngineAttemptID != engine || !bytes.Equal(back.Payload, payload) ||
			back.RunSeq != got[0].RunSeq {
			t.Fatalf("read back %+v, appended %+v", back, r)
		}
		again, err := h.Store.Append(bg, stream, []store.Record{r}, freeOpts)
		if err != nil || !again[0].Idempotent || again[0].RunSeq != got[0].RunSeq {
			t.Fatalf("retry = %+v, %v; want idempotent at runSeq %d", again, err, got[0].RunSeq)
		}
	})
}
