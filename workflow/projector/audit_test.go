package projector_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow/projector"
)

// scriptedClock is a store clock the test sets before each append, so
// persistedAt can go back as a real clock may.
type scriptedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *scriptedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *scriptedClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// appendAt appends one event per offset to run-1 of a new memstore, each
// written at t0 + offset seconds, and returns the store and the stored
// records in runSeq order.
func appendAt(t fataler, offsets []int) (*memstore.Store, []store.Record) {
	t.Helper()
	clock := &scriptedClock{}
	st := memstore.New(memstore.WithClock(clock.Now))
	for i, off := range offsets {
		clock.set(t0.Add(time.Duration(off) * time.Second))
		appendFree(t, st, "run-1", spec{typ: "AuditNote", step: "n", attempt: uint64(i + 1)})
	}
	recs, err := st.Read(bg, "run-1", 0, 0)
	if err != nil || len(recs) != len(offsets) {
		t.Fatalf("read back %d records, %v", len(recs), err)
	}
	return st, recs
}

// inWindow is the specification: the records with from <= persistedAt <
// to, in runSeq order.
func inWindow(recs []store.Record, from, to time.Time) []uint64 {
	var out []uint64
	for _, r := range recs {
		if !r.PersistedAt.Before(from) && r.PersistedAt.Before(to) {
			out = append(out, r.RunSeq)
		}
	}
	return out
}

func seqs(evs []event.Envelope) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.RunSeq
	}
	return out
}

// TestAuditSelectsByPersistedAtInRunSeqOrder: with persistedAt going back
// and forth along the stream, a window returns exactly the events written
// in [from, to), in runSeq order, its start included and its end
// excluded; an empty or inverted window returns nothing.
func TestAuditSelectsByPersistedAtInRunSeqOrder(t *testing.T) {
	ms, _ := appendAt(t, []int{5, 1, 9, 3, 3, 7, 0, 11, 2, 8, 6, 10})
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, c := range []struct {
		from, to int
		want     []uint64
	}{
		{3, 8, []uint64{1, 4, 5, 6, 11}}, // offsets 5, 3, 3, 7, 6
		{0, 1, []uint64{7}},              // the start is included
		{11, 12, []uint64{8}},            // the last offset
		{9, 11, []uint64{3, 12}},         // 11 itself is excluded
		{0, 12, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{4, 4, nil},   // empty
		{8, 3, nil},   // inverted
		{12, 20, nil}, // after everything
	} {
		got, err := projector.Audit(bg, ms, "run-1", at(c.from), at(c.to))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seqs(got), c.want) {
			t.Errorf("window [%ds, %ds): runSeqs %v, want %v", c.from, c.to, seqs(got), c.want)
		}
		for _, e := range got {
			if e.PersistedAt.Before(at(c.from)) || !e.PersistedAt.Before(at(c.to)) {
				t.Errorf("window [%ds, %ds): event %d written at %v", c.from, c.to, e.RunSeq, e.PersistedAt)
			}
		}
	}
	if got, err := projector.Audit(bg, ms, "no-such-run", at(0), at(20)); err != nil || len(got) != 0 {
		t.Fatalf("unknown stream: %v, %v", got, err)
	}
}

// TestAuditWindowProperty: for random persistedAt sequences (ties and
// steps back included), random windows and any page size, Audit returns
// exactly the specification's events, in runSeq order.
func TestAuditWindowProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		offsets := rapid.SliceOfN(rapid.IntRange(0, 20), 1, 30).Draw(rt, "offsets")
		st, recs := appendAt(rt, offsets)
		from := rapid.IntRange(-1, 21).Draw(rt, "from")
		to := rapid.IntRange(-1, 22).Draw(rt, "to")
		page := rapid.IntRange(1, 6).Draw(rt, "page")
		fromT, toT := t0.Add(time.Duration(from)*time.Second), t0.Add(time.Duration(to)*time.Second)
		want := inWindow(recs, fromT, toT)
		got, err := projector.AuditPaged(bg, st, "run-1", fromT, toT, page)
		if err != nil {
			rt.Fatalf("%v", err)
		}
		if !slices.Equal(seqs(got), want) {
			rt.Fatalf("window [%d, %d) page %d: %v, want %v", from, to, page, seqs(got), want)
		}
	})
}
