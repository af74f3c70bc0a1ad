package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// A reader is told what it cannot read: runSeqs may have gaps, so a read
// that starts below what compaction removed is refused with the floor,
// never answered with what is left above it.
func floorTests() []testCase {
	return []testCase{
		{"ReadBelowTheCompactionFloorIsErrCompactedNamingTheFloor", testReadBelowFloor},
		{"CompactionFloorIsBaselineMinusRetainAndOnlyRises", testFloorOnlyRises},
		{"StreamWithoutCompactionReadsWholeAndHasFloorZero", testNoCompactionNoFloor},
		{"ReadWindowOverCompactedRecordsIsErrCompacted", testReadWindowBelowFloor},
		{"FencedCompactLeavesTheFloor", testFencedCompactLeavesFloor},
	}
}

func (f *fx) floor(stream string) uint64 {
	f.t.Helper()
	n, err := f.s.Floor(bg, stream)
	must(f.t, err, "Floor "+stream)
	return n
}

// wantCompacted fails unless err is a *store.CompactedError for stream
// with floor, matching store.ErrCompacted.
func wantCompacted(t testing.TB, err error, stream string, floor uint64, what string) *store.CompactedError {
	t.Helper()
	if !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("%s: got %v, want ErrCompacted", what, err)
	}
	var ce *store.CompactedError
	if !errors.As(err, &ce) || ce.Stream != stream || ce.Floor != floor {
		t.Fatalf("%s: %#v, want a *store.CompactedError of stream %s at floor %d", what, err, stream, floor)
	}
	return ce
}

// tenCompactedAtEight appends ten records to world w, snapshots at the
// eighth and compacts with retain: the runSeqs in order.
func (f *fx) tenCompactedAtEight(retain uint64) (epoch uint64, seqs []uint64) {
	f.t.Helper()
	epoch = f.leased("w", "A")
	for i := range 10 {
		seqs = append(seqs, f.append("w", fenced("w", epoch), fmt.Sprint("e", i))[0].RunSeq)
	}
	must(f.t, f.s.PutSnapshot(bg, "w", epoch, snap(seqs[7], "s8")), "PutSnapshot")
	_, err := f.s.Compact(bg, "w", epoch, retain)
	must(f.t, err, "Compact")
	return epoch, seqs
}

func testReadBelowFloor(t *testing.T, open Factory) {
	f := setup(t, open)
	_, seqs := f.tenCompactedAtEight(0)
	floor := seqs[7]
	if got := f.floor("w"); got != floor {
		t.Fatalf("Floor = %d, want %d (the snapshot's height)", got, floor)
	}
	for _, after := range []uint64{0, seqs[0], seqs[2], seqs[6], floor - 1} {
		evs, err := f.s.Read(bg, "w", after, 100)
		ce := wantCompacted(t, err, "w", floor, fmt.Sprintf("Read after %d", after))
		if ce.After != after || len(evs) != 0 {
			t.Fatalf("Read after %d: %d records and %+v; want none and the read's afterSeq", after, len(evs), ce)
		}
	}
	// From the floor on, the stream reads whole.
	evs, err := f.s.Read(bg, "w", floor, 100)
	must(t, err, "Read from the floor")
	if fmt.Sprint(runSeqs(evs)) != fmt.Sprint(seqs[8:]) {
		t.Fatalf("Read from the floor = %v, want %v", runSeqs(evs), seqs[8:])
	}
	if evs, err := f.s.Read(bg, "w", seqs[8], 100); err != nil || fmt.Sprint(runSeqs(evs)) != fmt.Sprint(seqs[9:]) {
		t.Fatalf("Read after %d = %v, %v; want %v", seqs[8], runSeqs(evs), err, seqs[9:])
	}
	if evs, err := f.s.Read(bg, "w", seqs[9], 100); err != nil || len(evs) != 0 {
		t.Fatalf("Read after the head = %v, %v; want none", runSeqs(evs), err)
	}
}

func testFloorOnlyRises(t *testing.T, open Factory) {
	f := setup(t, open)
	e, seqs := f.tenCompactedAtEight(2)
	floor := seqs[7] - 2
	if got := f.floor("w"); got != floor {
		t.Fatalf("Floor after Compact(retain 2) = %d, want %d", got, floor)
	}
	if _, err := f.s.Read(bg, "w", floor, 100); err != nil {
		t.Fatalf("Read from the floor: %v", err)
	}
	// A larger retain removes nothing and leaves the floor.
	if n, err := f.s.Compact(bg, "w", e, 5); err != nil || n != 0 {
		t.Fatalf("Compact(retain 5) = %d, %v; want 0", n, err)
	}
	if got := f.floor("w"); got != floor {
		t.Fatalf("Floor after a larger retain = %d, want %d kept", got, floor)
	}
	// A higher baseline raises it, and a read from the old floor is refused.
	must(t, f.s.PutSnapshot(bg, "w", e, snap(seqs[9], "s10")), "PutSnapshot")
	if _, err := f.s.Compact(bg, "w", e, 0); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if got := f.floor("w"); got != seqs[9] {
		t.Fatalf("Floor after compacting to the head = %d, want %d", got, seqs[9])
	}
	_, err := f.s.Read(bg, "w", floor, 100)
	wantCompacted(t, err, "w", seqs[9], "Read from the old floor")
	// Everything is compacted: the head stays, and appends read on above it.
	if evs, err := f.s.Read(bg, "w", seqs[9], 100); err != nil || len(evs) != 0 {
		t.Fatalf("Read from the floor at the head = %v, %v; want none", runSeqs(evs), err)
	}
	a := f.append("w", fenced("w", e), "after")
	if evs, err := f.s.Read(bg, "w", seqs[9], 100); err != nil || len(evs) != 1 || evs[0].RunSeq != a[0].RunSeq {
		t.Fatalf("Read after an append above the floor = %v, %v; want [%d]", runSeqs(evs), err, a[0].RunSeq)
	}
}

func testNoCompactionNoFloor(t *testing.T, open Factory) {
	f := setup(t, open)
	// A stream nobody wrote, a free stream and a world's stream with a
	// snapshot but no compaction: floor 0, read whole from 0.
	if got := f.floor("nobody"); got != 0 {
		t.Fatalf("Floor of an unknown stream = %d, want 0", got)
	}
	f.append("run-1", freeOpts, "a", "b", "c")
	if got, evs := f.floor("run-1"), f.read("run-1"); got != 0 || len(evs) != 3 {
		t.Fatalf("free stream: Floor %d, %d records; want 0 and 3", got, len(evs))
	}
	e := f.leased("w", "A")
	a := f.append("w", fenced("w", e), "a", "b", "c", "d")
	must(t, f.s.PutSnapshot(bg, "w", e, snap(a[2].RunSeq, "s")), "PutSnapshot")
	if got, evs := f.floor("w"), f.read("w"); got != 0 || len(evs) != 4 {
		t.Fatalf("snapshot without compaction: Floor %d, %d records; want 0 and 4", got, len(evs))
	}
	// A fork's stream starts above its fork height: a gap that no
	// compaction made, read from 0 without error (its world record says
	// where it starts).
	if _, err := f.s.ForkWorld(bg, "w", a[2].RunSeq, "fork"); err != nil {
		t.Fatal(err)
	}
	ef := f.acquire("fork", "B").Epoch
	fa := f.append("fork", fenced("fork", ef), "x")
	evs, err := f.s.Read(bg, "fork", 0, 100)
	if err != nil || len(evs) != 1 || evs[0].RunSeq != fa[0].RunSeq || fa[0].RunSeq <= a[2].RunSeq {
		t.Fatalf("fork read from 0 = %v, %v; want [%d] above the fork height %d", runSeqs(evs), err, fa[0].RunSeq, a[2].RunSeq)
	}
	if got := f.floor("fork"); got != 0 {
		t.Fatalf("fork Floor = %d, want 0", got)
	}
}

func testReadWindowBelowFloor(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	var seqs []uint64
	var at []time.Time
	for i := range 4 {
		a := f.append("w", fenced("w", e), fmt.Sprint("e", i))[0]
		seqs, at = append(seqs, a.RunSeq), append(at, a.PersistedAt)
		f.advance(time.Second) // each record at its own instant
	}
	// Before compaction the whole stream is in a wide window.
	wide := func() ([]store.Record, error) {
		return f.s.ReadWindow(bg, "w", at[0].Add(-time.Hour), at[3].Add(time.Hour), 100)
	}
	if evs, err := wide(); err != nil || len(evs) != 4 {
		t.Fatalf("ReadWindow before compaction = %v, %v", runSeqs(evs), err)
	}
	must(t, f.s.PutSnapshot(bg, "w", e, snap(seqs[1], "s2")), "PutSnapshot")
	if _, err := f.s.Compact(bg, "w", e, 0); err != nil {
		t.Fatal(err)
	}
	_, err := wide()
	ce := wantCompacted(t, err, "w", seqs[1], "ReadWindow over compacted records")
	if !near(ce.FloorAt, at[1], time.Millisecond) {
		t.Fatalf("FloorAt = %v, want the last removed record's persistedAt %v", ce.FloorAt, at[1])
	}
	// A window that starts at the last removed record may hold it.
	_, err = f.s.ReadWindow(bg, "w", at[1], at[3].Add(time.Hour), 100)
	wantCompacted(t, err, "w", seqs[1], "ReadWindow from the last removed record")
	// A window after FloorAt is whole.
	evs, err := f.s.ReadWindow(bg, "w", ce.FloorAt.Add(time.Nanosecond), at[3].Add(time.Hour), 100)
	if err != nil || fmt.Sprint(runSeqs(evs)) != fmt.Sprint(seqs[2:]) {
		t.Fatalf("ReadWindow after FloorAt = %v, %v; want %v", runSeqs(evs), err, seqs[2:])
	}
}

func testFencedCompactLeavesFloor(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	a := f.append("w", fenced("w", e), "a", "b", "c")
	must(t, f.s.PutSnapshot(bg, "w", e, snap(a[1].RunSeq, "s")), "PutSnapshot")
	_, err := f.s.Compact(bg, "w", e+1, 0)
	wantErr(t, err, store.ErrFenced, "Compact with a wrong epoch")
	if got, evs := f.floor("w"), f.read("w"); got != 0 || len(evs) != 3 {
		t.Fatalf("after a fenced Compact: Floor %d, %d records; want 0 and 3", got, len(evs))
	}
}
