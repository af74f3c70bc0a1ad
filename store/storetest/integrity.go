package storetest

import (
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/store"
)

// Record integrity (issue 7 items 5, 8 and 10): snapshots never pass the
// head and never silently replace another state; a duplicate key that
// carries a different record says so; heights under a compare-and-swap are
// gapless, so a producer knows them before it appends.
func integrityTests() []testCase {
	return []testCase{
		{"SnapshotAboveHeadEmptyHashOrConflictingStateIsRefused", testSnapshotIntegrity},
		{"SeededWorldNeedsAStateHash", testSeedNeedsHash},
		{"DuplicateKeyWithDifferentRecordIsAConflict", testDuplicateConflict},
		{"DuplicateKeyConflictWithinOneBatch", testConflictWithinBatch},
		{"DuplicateKeyConflictAfterCompaction", testConflictAfterCompact},
		{"ExpectedHeadGivesGaplessHeights", testGaplessHeights},
	}
}

func testSnapshotIntegrity(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	a := f.append("w", fenced("w", e), "a", "b")
	head := a[1].RunSeq
	wantErr(t, f.s.PutSnapshot(bg, "w", e, snap(head+1, "above")), store.ErrInvalid, "snapshot above the head")
	wantErr(t, f.s.PutSnapshot(bg, "w", e, store.Snapshot{Height: head, State: []byte("s")}), store.ErrInvalid, "snapshot without a state hash")
	if _, ok, err := f.s.ActiveSnapshot(bg, "w"); err != nil || ok {
		t.Fatalf("refused snapshots stored one: ok=%v, %v", ok, err)
	}
	must(t, f.s.PutSnapshot(bg, "w", e, snap(head, "s")), "PutSnapshot at the head")
	wantErr(t, f.s.PutSnapshot(bg, "w", e, snap(head, "other")), store.ErrSnapshotConflict, "another state at a stored height")
	must(t, f.s.PutSnapshot(bg, "w", e, snap(head, "s")), "the same snapshot again")
	s, ok, err := f.s.ActiveSnapshot(bg, "w")
	if err != nil || !ok || s.Height != head || s.StateHash != "hash-s" || string(s.State) != "s" {
		t.Fatalf("ActiveSnapshot = %+v, %v, %v; want the first snapshot unchanged", s, ok, err)
	}
	// A lower stored height keeps its own state too.
	must(t, f.s.PutSnapshot(bg, "w", e, snap(a[0].RunSeq, "low")), "PutSnapshot below")
	wantErr(t, f.s.PutSnapshot(bg, "w", e, snap(a[0].RunSeq, "low2")), store.ErrSnapshotConflict, "another state at the lower height")
	if fk, err := f.s.ForkWorld(bg, "w", a[0].RunSeq, "fork"); err != nil || fk.ParentSnapshotHash != "hash-low" {
		t.Fatalf("fork at the lower height = %+v, %v; want the first state there", fk, err)
	}
}

func testSeedNeedsHash(t *testing.T, open Factory) {
	f := setup(t, open)
	_, err := f.s.CreateWorld(bg, universe, "w", &store.Snapshot{Height: 3, State: []byte("s")})
	wantErr(t, err, store.ErrInvalid, "CreateWorld seeded without a state hash")
	_, err = f.s.GetWorld(bg, "w")
	wantErr(t, err, store.ErrWorldNotFound, "the refused world")
}

func testDuplicateConflict(t *testing.T, open Factory) {
	f := setup(t, open)
	first := f.append("run-1", freeOpts, "a")[0]
	check := func(what string, r store.Record, conflict bool) {
		t.Helper()
		got, err := f.s.Append(bg, "run-1", []store.Record{r}, freeOpts)
		must(t, err, what)
		if !got[0].Idempotent || got[0].Conflict != conflict || got[0].RunSeq != first.RunSeq || got[0].EventID != first.EventID {
			t.Fatalf("%s = %+v, want idempotent, conflict %v, the stored %+v", what, got[0], conflict, first)
		}
	}
	same := rec("a")
	check("identical record", same, false)
	other := rec("a")
	other.EventID, other.EmittedAt, other.StepID = "another-id", f.now(), "s2" // metadata only: the same record
	check("same type and payload, other metadata", other, false)
	payload := rec("a")
	payload.Payload = []byte{0xa1, 0x01, 0x02}
	check("another payload", payload, true)
	typ := rec("a")
	typ.EventType = "StepFailed"
	check("another event type", typ, true)
	// The stored record wins.
	if evs := f.read("run-1"); len(evs) != 1 || evs[0].EventType != "StepCompleted" || string(evs[0].Payload) != string(rec("a").Payload) {
		t.Fatalf("stored = %+v", evs)
	}
}

func testConflictWithinBatch(t *testing.T, open Factory) {
	f := setup(t, open)
	changed := rec("a")
	changed.Payload = []byte{0x01}
	got, err := f.s.Append(bg, "run-1", []store.Record{rec("a"), rec("b"), rec("a"), changed}, freeOpts)
	must(t, err, "Append")
	if got[0].Idempotent || got[1].Idempotent || !got[2].Idempotent || got[2].Conflict || !got[3].Idempotent || !got[3].Conflict {
		t.Fatalf("batch = %+v, want new, new, idempotent, idempotent+conflict", got)
	}
	if got[3].RunSeq != got[0].RunSeq {
		t.Fatalf("conflicting duplicate at %d, first occurrence at %d", got[3].RunSeq, got[0].RunSeq)
	}
}

func testConflictAfterCompact(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	a := f.append("w", fenced("w", e), "a", "b", "c")
	must(t, f.s.PutSnapshot(bg, "w", e, snap(a[2].RunSeq, "s")), "PutSnapshot")
	if n, err := f.s.Compact(bg, "w", e, 0); err != nil || n != 3 {
		t.Fatalf("Compact = %d, %v; want 3", n, err)
	}
	changed := rec("a")
	changed.EventType = "Other"
	got, err := f.s.Append(bg, "w", []store.Record{rec("b"), changed}, fenced("w", e))
	must(t, err, "Append of compacted keys")
	if !got[0].Idempotent || got[0].Conflict || !got[1].Idempotent || !got[1].Conflict {
		t.Fatalf("after compaction = %+v, want idempotent, then idempotent+conflict", got)
	}
	if got[1].RunSeq != a[0].RunSeq {
		t.Fatalf("compacted duplicate at runSeq %d, stored at %d", got[1].RunSeq, a[0].RunSeq)
	}
	if h := f.head("w"); h != a[2].RunSeq {
		t.Fatalf("duplicates moved the head to %d", h)
	}
}

func testGaplessHeights(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	head := f.head("w")
	for round := 0; round < 4; round++ {
		keys := make([]string, round+1)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%d-%d", round, i)
		}
		got := f.append("w", store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: e}, ExpectedHead: store.Head(head)}, keys...)
		for i, a := range got {
			if a.RunSeq != head+uint64(i)+1 {
				t.Fatalf("round %d: event %d at runSeq %d, want %d (gapless after head %d)", round, i, a.RunSeq, head+uint64(i)+1, head)
			}
		}
		head += uint64(len(keys))
		if h := f.head("w"); h != head {
			t.Fatalf("round %d: head %d, want %d", round, h, head)
		}
	}
	// A batch with duplicates: only the new events take heights, in order.
	got := f.append("w", store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: e}, ExpectedHead: store.Head(head)}, "r0-0", "n1", "r1-1", "n2")
	if got[1].RunSeq != head+1 || got[3].RunSeq != head+2 {
		t.Fatalf("mixed batch = %+v, want the new events at %d and %d", got, head+1, head+2)
	}
	// A free stream under ExpectedHead too, and a seeded world from its height.
	fs := f.append("run-1", store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(0)}, "a", "b", "c")
	if fs[0].RunSeq != 1 || fs[2].RunSeq != 3 {
		t.Fatalf("free stream from head 0 = %+v, want 1..3", fs)
	}
	_, err := f.s.CreateWorld(bg, universe, "seeded", &store.Snapshot{Height: 40, StateHash: "h"})
	must(t, err, "CreateWorld seeded")
	es := f.acquire("seeded", "A").Epoch
	sg := f.append("seeded", store.AppendOptions{Fence: &store.Fence{World: "seeded", Epoch: es}, ExpectedHead: store.Head(40)}, "x", "y")
	if sg[0].RunSeq != 41 || sg[1].RunSeq != 42 {
		t.Fatalf("seeded world's first appends = %+v, want 41, 42", sg)
	}
}
