package storetest

import (
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// World status (issue 7 item 3) is an operator's decision, recorded with a
// reason and the store's time, made without a lease. Fencing a stale
// worker is the epoch's job, never a stored status, so no status is a trap:
// a paused world resumes, and its next lease has a higher epoch.
func statusTests() []testCase {
	return []testCase{
		{"PauseFencesTheHolderAtOnceAndResumeGivesAHigherEpoch", testPauseResume},
		{"PausedWorldAcceptsInputAndRefusesAcquire", testPausedWorld},
		{"ArchivedWorldRefusesInputAcquireAndResume", testArchivedWorld},
		{"SameStatusTwiceIsANoOp", testSameStatusTwice},
	}
}

func testPauseResume(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.append("w", fenced("w", e), "a")
	before := f.now()
	w := f.setStatus("w", store.WorldPaused, "disk full") // no lease, no epoch
	if w.Status != store.WorldPaused || w.StatusReason != "disk full" || !near(w.StatusChangedAt, before, timeTol) {
		t.Fatalf("pause = %+v", w)
	}
	// The holder is fenced at once, though its lease had not expired.
	_, err := f.s.Append(bg, "w", []store.Record{rec("b")}, fenced("w", e))
	wantErr(t, err, store.ErrFenced, "the holder's append after the pause")
	_, err = f.s.Publish(bg, "w", e, intents("i1"))
	wantErr(t, err, store.ErrFenced, "the holder's publish after the pause")
	_, err = f.s.Renew(bg, "w", "A", e, leaseTTL)
	wantErr(t, err, store.ErrNotHolder, "the holder's renewal after the pause")
	l, ok, err := f.s.GetLease(bg, "w")
	if err != nil || !ok || l.Holder != "" || l.Epoch != e || l.ExpiresAt.After(f.now()) {
		t.Fatalf("lease after the pause = %+v, %v, %v; want released at epoch %d, expired", l, ok, err, e)
	}
	// Nothing of the holder's lease survives to a later acquire either.
	f.advance(leaseTTL + margin)
	w = f.setStatus("w", store.WorldActive, "disk replaced")
	if w.Status != store.WorldActive || w.StatusReason != "disk replaced" {
		t.Fatalf("resume = %+v", w)
	}
	e2 := f.acquire("w", "B").Epoch
	if e2 <= e {
		t.Fatalf("epoch after resume = %d, want above %d", e2, e)
	}
	f.append("w", fenced("w", e2), "b")
	if n := len(f.read("w")); n != 2 {
		t.Fatalf("%d events, want 2", n)
	}
	// Also when the same worker comes back at once.
	f.setStatus("w", store.WorldPaused, "again")
	f.setStatus("w", store.WorldActive, "")
	if e3 := f.acquire("w", "B").Epoch; e3 <= e2 {
		t.Fatalf("epoch after an immediate resume = %d, want above %d", e3, e2)
	}
}

func testPausedWorld(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	f.setStatus("w", store.WorldPaused, "")
	seq, dup := f.enqueue("w", "event", "k", []byte("waits"))
	if dup || seq == 0 {
		t.Fatalf("Enqueue to a paused world = %d dup %v", seq, dup)
	}
	_, err := f.s.Acquire(bg, "w", "A", leaseTTL)
	wantErr(t, err, store.ErrWorldPaused, "Acquire of a paused world")
	if _, ok, _ := f.s.GetLease(bg, "w"); ok {
		t.Fatal("a refused Acquire wrote a lease")
	}
	f.setStatus("w", store.WorldActive, "")
	e := f.acquire("w", "A").Epoch
	// The input that waited is there to drain.
	_, err = f.s.DrainToJournal(bg, "w", e, 0, 0, seq, []store.Record{rec("k")})
	must(t, err, "DrainToJournal of the input that waited")
}

func testArchivedWorld(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1").ClaimOf()
	f.setStatus("w", store.WorldPaused, "")
	f.setStatus("w", store.WorldArchived, "retired") // paused -> archived
	_, _, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: "event"})
	wantErr(t, err, store.ErrWorldArchived, "Enqueue to an archived world")
	_, err = f.s.Acquire(bg, "w", "A", leaseTTL)
	wantErr(t, err, store.ErrWorldArchived, "Acquire of an archived world")
	for _, st := range []store.WorldStatus{store.WorldActive, store.WorldPaused} {
		_, err := f.s.SetWorldStatus(bg, "w", st, "")
		wantErr(t, err, store.ErrWorldArchived, "SetWorldStatus "+string(st)+" of an archived world")
	}
	if w, _ := f.s.GetWorld(bg, "w"); w.Status != store.WorldArchived || w.StatusReason != "retired" {
		t.Fatalf("archived world = %+v", w)
	}
	// The answers to its own requests still land.
	seq, dup := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK})
	if dup || len(f.inbox("w")) != 1 || f.inbox("w")[0].Seq != seq {
		t.Fatalf("receipt for an archived world: seq %d dup %v, inbox %+v", seq, dup, f.inbox("w"))
	}
	// active -> archived directly, too.
	f.world("v")
	if w := f.setStatus("v", store.WorldArchived, ""); w.Status != store.WorldArchived {
		t.Fatalf("archive of an active world = %+v", w)
	}
}

func testSameStatusTwice(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	// Active again: nothing changes, not even the lease.
	if w := f.setStatus("w", store.WorldActive, "noise"); w.StatusReason != "" || !w.StatusChangedAt.IsZero() {
		t.Fatalf("active -> active = %+v, want the record unchanged", w)
	}
	if l, _, _ := f.s.GetLease(bg, "w"); l.Holder != "A" || l.Epoch != e {
		t.Fatalf("active -> active changed the lease: %+v", l)
	}
	first := f.setStatus("w", store.WorldPaused, "first")
	f.advance(margin)
	again := f.setStatus("w", store.WorldPaused, "second")
	if again.StatusReason != "first" || !again.StatusChangedAt.Equal(first.StatusChangedAt) {
		t.Fatalf("paused -> paused = %+v, want the unchanged %+v", again, first)
	}
}
