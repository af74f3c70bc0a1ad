package storetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/store"
)

func inboxTests() []testCase {
	return []testCase{
		{"EnqueueAssignsIncreasingSeqAndReadInboxOrdersBySeq", testEnqueueOrder},
		{"EnqueueDedupeKeyReturnsExistingSeq", testEnqueueDedupe},
		{"EnqueueNeedsNoLeasePausedAcceptsArchivedRefuses", testEnqueueWorldStatus},
		{"DrainToJournalIsAtomic", testDrainAtomic},
		{"DrainCursorCannotPassTheLastSeq", testDrainCursorBound},
		{"InboxItemsAreKeptAfterDrain", testInboxKeptAfterDrain},
	}
}

func testEnqueueOrder(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	var seqs []uint64
	for i := 0; i < 5; i++ {
		seq, dup := f.enqueue("w", "event", "", []byte(fmt.Sprint("p", i)))
		if dup || (i > 0 && seq <= seqs[i-1]) || seq == 0 {
			t.Fatalf("Enqueue %d = %d, dup %v after %v", i, seq, dup, seqs)
		}
		seqs = append(seqs, seq)
	}
	items := f.inbox("w")
	if fmt.Sprint(itemSeqs(items)) != fmt.Sprint(seqs) {
		t.Fatalf("ReadInbox seqs = %v, want %v", itemSeqs(items), seqs)
	}
	for i, it := range items {
		if it.World != "w" || it.Kind != "event" || !bytes.Equal(it.Payload, []byte(fmt.Sprint("p", i))) || it.EnqueuedAt.IsZero() {
			t.Fatalf("item %d = %+v", i, it)
		}
	}
	got, err := f.s.ReadInbox(bg, "w", seqs[1], 2)
	must(t, err, "ReadInbox")
	if fmt.Sprint(itemSeqs(got)) != fmt.Sprint(seqs[2:4]) {
		t.Fatalf("ReadInbox(after %d, 2) = %v, want %v", seqs[1], itemSeqs(got), seqs[2:4])
	}
	if c := f.cursor("w"); c != 0 {
		t.Fatalf("Cursor of an undrained inbox = %d", c)
	}
}

func testEnqueueDedupe(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	f.world("v")
	seq, dup := f.enqueue("w", "event", "k", []byte("first"))
	if dup {
		t.Fatal("first Enqueue with a key reported dup")
	}
	again, dup := f.enqueue("w", "event", "k", []byte("second"))
	if !dup || again != seq {
		t.Fatalf("repeated key: seq %d dup %v, want %d true", again, dup, seq)
	}
	items := f.inbox("w")
	if len(items) != 1 || !bytes.Equal(items[0].Payload, []byte("first")) || items[0].DedupeKey != "k" {
		t.Fatalf("inbox after a duplicate = %+v", items)
	}
	// Empty keys never dedupe; keys are per world.
	a, _ := f.enqueue("w", "event", "", nil)
	b, dup := f.enqueue("w", "event", "", nil)
	if dup || a == b {
		t.Fatalf("two keyless items: %d, %d (dup %v)", a, b, dup)
	}
	if _, dup := f.enqueue("v", "event", "k", nil); dup {
		t.Fatal("a key of world w deduped an item of world v")
	}
	if n := len(f.inbox("w")); n != 3 {
		t.Fatalf("%d items in w, want 3", n)
	}
}

// Enqueue needs no lease; a paused world's input is accepted and waits, an
// archived world refuses it and stores nothing.
func testEnqueueWorldStatus(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("free")
	f.enqueue("free", "event", "", nil) // nobody holds a lease: fine
	_, _, err := f.s.Enqueue(bg, "nowhere", store.InboxItem{Kind: "event"})
	wantErr(t, err, store.ErrWorldNotFound, "Enqueue to an unknown world")
	f.leased("paused", "A")
	f.setStatus("paused", store.WorldPaused, "maintenance")
	if seq, dup := f.enqueue("paused", "event", "k", nil); dup || seq == 0 {
		t.Fatalf("Enqueue to a paused world = %d, dup %v", seq, dup)
	}
	f.leased("archived", "A")
	f.enqueue("archived", "event", "", nil)
	f.setStatus("archived", store.WorldArchived, "retired")
	_, _, err = f.s.Enqueue(bg, "archived", store.InboxItem{Kind: "event", DedupeKey: "late"})
	wantErr(t, err, store.ErrWorldArchived, "Enqueue to an archived world")
	if n := len(f.inbox("archived")); n != 1 {
		t.Fatalf("refused Enqueue stored an item: %d items", n)
	}
}

func testDrainAtomic(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	var seqs []uint64
	for i := 0; i < 3; i++ {
		s, _ := f.enqueue("w", "event", "", nil)
		seqs = append(seqs, s)
	}
	got, err := f.s.DrainToJournal(bg, "w", e, 0, 0, seqs[1], []store.Record{rec("x"), rec("y")})
	must(t, err, "DrainToJournal")
	if len(got) != 2 || got[0].Idempotent || got[1].Idempotent || got[1].RunSeq <= got[0].RunSeq {
		t.Fatalf("DrainToJournal = %+v", got)
	}
	if c := f.cursor("w"); c != seqs[1] {
		t.Fatalf("Cursor = %d, want %d", c, seqs[1])
	}
	head := f.head("w")
	if head != got[1].RunSeq || fmt.Sprint(eventIDs(f.read("w"))) != "[ev-x ev-y]" {
		t.Fatalf("journal after drain: head %d, events %v", head, eventIDs(f.read("w")))
	}
	before := f.worldState("w")
	_, err = f.s.DrainToJournal(bg, "w", e, 0, head, seqs[2], []store.Record{rec("z")})
	wantErr(t, err, store.ErrCursorMismatch, "drain with a stale cursor")
	_, err = f.s.DrainToJournal(bg, "w", e, seqs[1], head-1, seqs[2], []store.Record{rec("z")})
	wantErr(t, err, store.ErrHeadMismatch, "drain with a stale head")
	_, err = f.s.DrainToJournal(bg, "w", e, seqs[1], head, seqs[2], []store.Record{rec("z"), {EventID: "bad"}})
	wantErr(t, err, store.ErrInvalid, "drain with an invalid entry")
	if after := f.worldState("w"); after != before {
		t.Fatalf("a failed drain changed the world:\nbefore %s\nafter  %s", before, after)
	}
	got, err = f.s.DrainToJournal(bg, "w", e, seqs[1], head, seqs[2], []store.Record{rec("z")})
	must(t, err, "DrainToJournal")
	if f.cursor("w") != seqs[2] || f.head("w") != got[0].RunSeq || got[0].RunSeq <= head {
		t.Fatalf("second drain: cursor %d head %d, %+v", f.cursor("w"), f.head("w"), got)
	}
}

func testDrainCursorBound(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	last, _ := f.enqueue("w", "event", "", nil)
	before := f.worldState("w")
	_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, last+1, []store.Record{rec("x")})
	wantErr(t, err, store.ErrInvalid, "drain past the last enqueued seq")
	if after := f.worldState("w"); after != before {
		t.Fatalf("a refused drain changed the world:\nbefore %s\nafter  %s", before, after)
	}
	_, err = f.s.DrainToJournal(bg, "w", e, 0, 0, last, []store.Record{rec("x")})
	must(t, err, "drain up to the last seq")
}

func testInboxKeptAfterDrain(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	a, _ := f.enqueue("w", "event", "ka", []byte("a"))
	b, _ := f.enqueue("w", "event", "", []byte("b"))
	_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, b, []store.Record{rec("a"), rec("b")})
	must(t, err, "DrainToJournal")
	items := f.inbox("w")
	if fmt.Sprint(itemSeqs(items)) != fmt.Sprint([]uint64{a, b}) || !bytes.Equal(items[0].Payload, []byte("a")) {
		t.Fatalf("inbox after drain = %+v", items)
	}
	// The drained item's key still dedupes (until retention, see Dedupe*).
	if seq, dup := f.enqueue("w", "event", "ka", nil); !dup || seq != a {
		t.Fatalf("drained key: seq %d dup %v, want %d true", seq, dup, a)
	}
}
