package storetest

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Times (issue 7 item 6): a time outside [store.MinTime, store.MaxTime] is
// ErrInvalid on every backend and writes nothing (no backend may clamp it
// into its range, which would change an envelope's hash); a time inside
// reads back exactly, to the nanosecond. The zero time is "absent" and
// allowed where a time is optional (emittedAt).
func timeTests() []testCase {
	return []testCase{
		{"OutOfRangeTimesAreErrInvalidAndWriteNothing", testOutOfRangeTimes},
		{"InRangeTimesRoundTripExactly", testInRangeTimes},
	}
}

var outOfRange = []time.Time{
	time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), // year 1, not the zero time
	time.Date(1600, 6, 1, 0, 0, 0, 0, time.UTC),
	store.MinTime.Add(-time.Nanosecond),
	store.MaxTime.Add(time.Nanosecond),
	time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
}

func testOutOfRangeTimes(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	before := f.worldState("w")
	for _, at := range outOfRange {
		what := at.Format(time.RFC3339Nano)
		r := rec("x")
		r.EmittedAt = at
		_, err := f.s.Append(bg, "w", []store.Record{r}, fenced("w", e))
		wantErr(t, err, store.ErrInvalid, "Append with emittedAt "+what)
		_, err = f.s.Append(bg, "run-1", []store.Record{r}, freeOpts)
		wantErr(t, err, store.ErrInvalid, "free Append with emittedAt "+what)
		wantErr(t, f.s.Schedule(bg, "w", e, "t", at, nil), store.ErrInvalid, "Schedule at "+what)
		_, err = f.s.Commit(bg, "w", e, store.CommitBatch{Timers: []vocab.TimerSet{{IntentHash: "t", DeliverAt: at}}})
		wantErr(t, err, store.ErrInvalid, "Commit of a timer at "+what)
		_, err = f.s.Commit(bg, "w", e, store.CommitBatch{Entries: []store.Record{r}})
		wantErr(t, err, store.ErrInvalid, "Commit of an entry emitted at "+what)
	}
	// deliverAt is required: the zero time is no due time.
	wantErr(t, f.s.Schedule(bg, "w", e, "t", time.Time{}, nil), store.ErrInvalid, "Schedule at the zero time")
	if after := f.worldState("w"); after != before {
		t.Fatalf("refused writes changed the world:\nbefore %s\nafter  %s", before, after)
	}
	if h := f.head("run-1"); h != 0 {
		t.Fatalf("refused appends moved run-1 to %d", h)
	}
	if ts, err := f.s.ListTimers(bg, "w", 10); err != nil || len(ts) != 0 {
		t.Fatalf("refused schedules stored %+v, %v", ts, err)
	}
}

func testInRangeTimes(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	edges := []time.Time{
		store.MinTime,
		store.MinTime.Add(time.Nanosecond),
		time.Date(2026, 2, 16, 12, 30, 45, 123456789, time.UTC),
		store.MaxTime.Add(-time.Nanosecond),
		store.MaxTime,
	}
	var evs []store.Record
	for i, at := range edges {
		r := rec(string(rune('a' + i)))
		r.EmittedAt = at
		evs = append(evs, r)
	}
	noEmit := rec("zero") // emittedAt absent
	evs = append(evs, noEmit)
	_, err := f.s.Append(bg, "w", evs, fenced("w", e))
	must(t, err, "Append at the edges of the range")
	back := f.read("w")
	if len(back) != len(evs) {
		t.Fatalf("read %d events, want %d", len(back), len(evs))
	}
	for i := range edges {
		if !back[i].EmittedAt.Equal(edges[i]) {
			t.Fatalf("emittedAt %v reads back as %v", edges[i], back[i].EmittedAt)
		}
	}
	if !back[len(edges)].EmittedAt.IsZero() {
		t.Fatalf("an absent emittedAt reads back as %v", back[len(edges)].EmittedAt)
	}
	// Due times: Schedule and Commit, read back through ListTimers.
	for i, at := range edges[2:] {
		must(t, f.s.Schedule(bg, "w", e, string(rune('s'+i)), at, nil), "Schedule at "+at.String())
	}
	_, err = f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: f.head("w"), Timers: []vocab.TimerSet{{IntentHash: "c", DeliverAt: store.MaxTime.Add(-time.Microsecond - time.Nanosecond)}}})
	must(t, err, "Commit of a timer")
	ts, err := f.s.ListTimers(bg, "w", 10)
	must(t, err, "ListTimers")
	want := []time.Time{edges[2], store.MaxTime.Add(-time.Microsecond - time.Nanosecond), edges[3], edges[4]}
	if len(ts) != len(want) {
		t.Fatalf("ListTimers = %+v", ts)
	}
	for i := range want {
		if !ts[i].DeliverAt.Equal(want[i]) {
			t.Fatalf("timer %s due at %v reads back as %v", ts[i].IntentHash, want[i], ts[i].DeliverAt)
		}
	}
	// The earliest in-range due time is due at once, and fires.
	must(t, f.s.Schedule(bg, "w", e, "early", store.MinTime, nil), "Schedule at MinTime")
	got := f.claimDue("tw", 1)
	if len(got) != 1 || got[0].IntentHash != "early" || !got[0].DeliverAt.Equal(store.MinTime) {
		t.Fatalf("ClaimDue = %+v, want the timer due at MinTime", got)
	}
	f.fire("early", got[0].ClaimOf())
}
