package projector_test

import (
	"cmp"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow/projector"
	"github.com/orrery-run/orrery/world"
)

func mustCBOR(f *testing.F, v any) []byte {
	b, err := event.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzApply feeds the built-in projections arbitrary envelopes (any type,
// step, attempt, runSeq, time, key and payload bytes), after a few valid
// ones and followed by a failure carrying the same payload: no Apply
// fails or panics, and the readers stay sorted and consistent.
func FuzzApply(f *testing.F) {
	f.Add("run-1", event.StepFailed, "s", uint64(1), uint64(3), int64(0), "", []byte{0xff})
	f.Add("run-1", event.RunFailed, "", uint64(1), uint64(4), int64(-1), "", mustCBOR(f, map[string]any{"error": map[string]any{"message": "m"}}))
	f.Add("run-1", event.RunFailed, "", uint64(1), uint64(4), int64(1), "", mustCBOR(f, map[string]any{"error": 7}))
	f.Add("run-1", event.RunFailed, "", uint64(1), uint64(4), int64(1), "", mustCBOR(f, map[string]any{"error": strings.Repeat("é", 3000)}))
	f.Add("run-1", event.StepCompleted, "", uint64(0), uint64(math.MaxUint64), int64(math.MaxInt64), "k", []byte(nil))
	f.Add("", "", "", uint64(0), uint64(0), int64(math.MinInt64), "", []byte{})
	f.Add("run-1", "FutureEvent", "s", uint64(9), uint64(5), int64(5), "", []byte{0xa0})
	f.Add("w", world.EventWorldStepped, "inbox/1", uint64(1), uint64(3), int64(2), "", mustCBOR(f, map[string]any{"v": 1, "outcome": "ok"}))
	f.Add("w", world.EventWorldStepped, "inbox/1", uint64(1), uint64(3), int64(2), "", mustCBOR(f, map[string]any{"v": "1", "outcome": 3}))
	f.Add("run-1", event.StepStarted, "s", uint64(1), uint64(2), int64(0), "", []byte{0xa0}) // a duplicate of the prefix
	f.Add("run-1", event.RunStarted, "", uint64(1), uint64(1), int64(0), "", []byte{0xa0})   // at the watermark
	f.Add("run-1", event.RunStarted, "", uint64(1), uint64(3), int64(0), "", mustCBOR(f, map[string]any{"input": 1, "attrs": map[string]string{"k": "v", "e": ""}}))
	f.Add("run-1", event.StepCompleted, projector.AttrsStep+"#2", uint64(1), uint64(3), int64(0), "", mustCBOR(f, map[string]any{"value": mustCBOR(f, map[string]string{"k": "w"})}))
	f.Add("run-1", event.StepCompleted, projector.AttrsStep, uint64(1), uint64(3), int64(0), "", mustCBOR(f, map[string]any{"value": mustCBOR(f, map[string]int{"k": 1})}))
	f.Add("run-1", event.RunQueued, "", uint64(1), uint64(3), int64(0), "", mustCBOR(f, map[string]any{"attrs": 5}))
	f.Fuzz(func(t *testing.T, stream, typ, step string, attempt, seq uint64, at int64, key string, payload []byte) {
		runs, tl, worlds := projector.NewRuns(), projector.NewTimeline(), projector.NewWorlds()
		ps := []projector.Projector{runs, tl, worlds}
		prefix := []spec{{typ: event.RunStarted, attempt: 1}, {typ: event.StepStarted, step: "s", attempt: 1}}
		var feed []event.Envelope
		for i, s := range prefix {
			e := event.Envelope{StreamID: stream, RunSeq: uint64(i + 1), EventType: s.typ, StepID: s.step,
				LogicalAttemptID: s.attempt, PlanID: "wf", PlanVersion: 1, PersistedAt: t0, Payload: event.EmptyPayload()}
			e.IdempotencyKey = e.ComputeIdempotencyKey()
			feed = append(feed, e)
		}
		fuzzed := event.Envelope{StreamID: stream, RunSeq: seq, IdempotencyKey: key, EventType: typ, StepID: step,
			LogicalAttemptID: attempt, PlanID: "wf", PlanVersion: 1, PersistedAt: time.Unix(0, at), Payload: payload}
		failure := fuzzed
		failure.RunSeq, failure.EventType, failure.IdempotencyKey = seq+1, event.StepFailed, ""
		feed = append(feed, fuzzed, failure)
		for _, e := range feed {
			for _, p := range ps {
				if err := p.Apply(bg, stream, e); err != nil {
					t.Fatalf("%s: Apply(%+v): %v", p.Name(), e, err)
				}
			}
		}
		list := runs.List()
		if !slices.IsSortedFunc(list, func(a, b projector.Run) int { return strings.Compare(a.ID, b.ID) }) {
			t.Fatalf("runs not sorted: %+v", list)
		}
		for _, r := range list {
			if got, ok := runs.Get(r.ID); !ok || !reflect.DeepEqual(got, r) {
				t.Fatalf("Get(%q) = %+v, %v; List has %+v", r.ID, got, ok, r)
			}
			if len(r.LastError) > projector.MaxErrorBytes {
				t.Fatalf("LastError of %d bytes", len(r.LastError))
			}
			for k, v := range r.Attributes {
				if v == "" || !slices.Contains(runs.Match(map[string]string{k: v}), r.ID) {
					t.Fatalf("run %q carries %q=%q, which the index does not find", r.ID, k, v)
				}
			}
		}
		for _, id := range tl.Runs() {
			rt, ok := tl.Get(id)
			if !ok {
				t.Fatalf("timeline %q listed but not found", id)
			}
			for _, s := range rt.Steps {
				if len(s.Attempts) == 0 || s.Status != s.Attempts[len(s.Attempts)-1].Status ||
					!slices.IsSortedFunc(s.Attempts, func(a, b projector.Attempt) int { return cmp.Compare(a.Attempt, b.Attempt) }) {
					t.Fatalf("step %+v", s)
				}
			}
		}
		for _, w := range worlds.List() {
			o := w.Outcomes
			if o.OK+o.Error+o.Panic+o.UnknownInput+o.Stale+o.Other+o.Unreadable != w.Steps {
				t.Fatalf("world %+v: outcomes do not add up to its steps", w)
			}
		}
	})
}
