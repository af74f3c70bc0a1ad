package storetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/store"
)

func snapshotTests() []testCase {
	return []testCase{
		{"PutSnapshotIsFenced", testPutSnapshotFenced},
		{"ActiveBaselineOnlyMovesUp", testBaselineMovesUp},
		{"CompactRemovesOnlyEntriesAtOrBelowBaselineMinusRetain", testCompact},
		{"SnapshotBelowFindsTheHighestStoredSnapshotUnderAHeight", testSnapshotBelow},
	}
}

func snap(h uint64, state string) store.Snapshot {
	return store.Snapshot{Height: h, State: []byte(state), StateHash: "hash-" + state}
}

func testPutSnapshotFenced(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.append("w", fenced("w", e), "a")
	wantErr(t, f.s.PutSnapshot(bg, "w", e+1, snap(1, "s1")), store.ErrFenced, "PutSnapshot with a wrong epoch")
	if _, ok, err := f.s.ActiveSnapshot(bg, "w"); err != nil || ok {
		t.Fatalf("ActiveSnapshot after a fenced put: ok=%v, %v", ok, err)
	}
}

func testBaselineMovesUp(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	var seqs []uint64
	for i := 0; i < 8; i++ {
		seqs = append(seqs, f.append("w", fenced("w", e), fmt.Sprint(i))[0].RunSeq)
	}
	active := func() store.Snapshot {
		t.Helper()
		s, ok, err := f.s.ActiveSnapshot(bg, "w")
		if err != nil || !ok {
			t.Fatalf("ActiveSnapshot: ok=%v, %v", ok, err)
		}
		return s
	}
	must(t, f.s.PutSnapshot(bg, "w", e, snap(seqs[4], "s5")), "PutSnapshot")
	s := active()
	if s.World != "w" || s.Height != seqs[4] || !bytes.Equal(s.State, []byte("s5")) || s.StateHash != "hash-s5" || s.CreatedAt.IsZero() {
		t.Fatalf("ActiveSnapshot = %+v", s)
	}
	must(t, f.s.PutSnapshot(bg, "w", e, snap(seqs[2], "s3")), "PutSnapshot lower")
	if s := active(); s.Height != seqs[4] || s.StateHash != "hash-s5" {
		t.Fatalf("a lower snapshot moved the baseline down to %+v", s)
	}
	must(t, f.s.PutSnapshot(bg, "w", e, snap(seqs[7], "s8")), "PutSnapshot higher")
	if s := active(); s.Height != seqs[7] || s.StateHash != "hash-s8" {
		t.Fatalf("baseline after a higher snapshot = %+v", s)
	}
}

func testCompact(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	var seqs []uint64
	for i := 0; i < 10; i++ {
		seqs = append(seqs, f.append("w", fenced("w", e), fmt.Sprint(i))[0].RunSeq)
	}
	if n, err := f.s.Compact(bg, "w", e, 0); err != nil || n != 0 {
		t.Fatalf("Compact without a baseline = %d, %v; want 0", n, err)
	}
	head := f.head("w")
	base := seqs[7]
	must(t, f.s.PutSnapshot(bg, "w", e, snap(base, "s")), "PutSnapshot")
	_, err := f.s.Compact(bg, "w", e+1, 2)
	wantErr(t, err, store.ErrFenced, "Compact with a wrong epoch")
	n, err := f.s.Compact(bg, "w", e, 2)
	must(t, err, "Compact")
	var want []uint64
	removed := 0
	for _, s := range seqs {
		if s <= base-2 {
			removed++
		} else {
			want = append(want, s)
		}
	}
	if n != removed {
		t.Fatalf("Compact removed %d, want %d (runSeq <= %d)", n, removed, base-2)
	}
	evs, err := f.s.Read(bg, "w", base-2, 100)
	must(t, err, "Read from the floor")
	if got := runSeqs(evs); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Read after Compact = %v, want %v", got, want)
	}
	if h := f.head("w"); h != head {
		t.Fatalf("Compact moved the head from %d to %d", head, h)
	}
	if n, err := f.s.Compact(bg, "w", e, 2); err != nil || n != 0 {
		t.Fatalf("second Compact = %d, %v; want 0", n, err)
	}
	// Appends continue above the head.
	if a := f.append("w", fenced("w", e), "after"); a[0].RunSeq <= head {
		t.Fatalf("append after Compact at runSeq %d, head was %d", a[0].RunSeq, head)
	}
}

func testSnapshotBelow(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	var seqs []uint64
	for i := 0; i < 8; i++ {
		seqs = append(seqs, f.append("w", fenced("w", e), fmt.Sprint(i))[0].RunSeq)
	}
	below := func(h uint64) (store.Snapshot, bool) {
		t.Helper()
		s, ok, err := f.s.SnapshotBelow(bg, "w", h)
		must(t, err, "SnapshotBelow")
		return s, ok
	}
	if _, ok := below(seqs[7] + 1); ok {
		t.Fatal("SnapshotBelow found a snapshot where none is stored")
	}
	must(t, f.s.PutSnapshot(bg, "w", e, snap(seqs[2], "s3")), "PutSnapshot")
	must(t, f.s.PutSnapshot(bg, "w", e, snap(seqs[5], "s6")), "PutSnapshot")
	for _, c := range []struct {
		h    uint64
		want string // "" = none
	}{
		{seqs[2], ""}, {seqs[2] + 1, "s3"}, {seqs[5], "s3"}, {seqs[5] + 1, "s6"}, {seqs[7] + 100, "s6"},
	} {
		s, ok := below(c.h)
		switch {
		case c.want == "" && ok:
			t.Fatalf("SnapshotBelow(%d) = %+v, want none", c.h, s)
		case c.want != "" && (!ok || s.World != "w" || string(s.State) != c.want || s.StateHash != "hash-"+c.want || s.CreatedAt.IsZero()):
			t.Fatalf("SnapshotBelow(%d) = %+v, %v; want %s", c.h, s, ok, c.want)
		}
	}
	// The active baseline is the higher one; the lower one is still found.
	if s, ok, err := f.s.ActiveSnapshot(bg, "w"); err != nil || !ok || s.StateHash != "hash-s6" {
		t.Fatalf("ActiveSnapshot = %+v, %v, %v", s, ok, err)
	}
	_, _, err := f.s.SnapshotBelow(bg, "nope", 1)
	wantErr(t, err, store.ErrWorldNotFound, "SnapshotBelow of an unknown world")
	_, _, err = f.s.SnapshotBelow(bg, "w", 1<<63)
	wantErr(t, err, store.ErrInvalid, "SnapshotBelow past the int64 range")
}
