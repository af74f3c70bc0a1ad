package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Commit (issue 7 items 9 and 10): the world cycle's one fenced
// transaction. Everything in the batch is applied, or nothing is.
func commitTests() []testCase {
	return []testCase{
		{"CommitAppliesEveryPartAtomically", testCommitApplies},
		{"CommitFailureWritesNothingOfAnyPart", testCommitFailures},
		{"CommitCancelOfUnknownOrFiredTimerIsSkipped", testCommitCancelSkips},
		{"RetriedCommitAfterSuccessIsErrCursorMismatch", testCommitRetry},
	}
}

// commitFixture is a leased world with inbox items, a journal and a timer
// that a commit may cancel.
type commitFixture struct {
	f       *fx
	epoch   uint64
	seqs    []uint64 // inbox seqs
	head    uint64
	dueSoon time.Time
}

func newCommitFixture(t *testing.T, open Factory) *commitFixture {
	f := setup(t, open)
	c := &commitFixture{f: f, epoch: f.leased("w", "A")}
	for i := 0; i < 3; i++ {
		s, _ := f.enqueue("w", "event", fmt.Sprint("k", i), nil)
		c.seqs = append(c.seqs, s)
	}
	c.head = f.append("w", fenced("w", c.epoch), "before")[0].RunSeq
	c.dueSoon = f.now().Add(time.Hour)
	must(t, f.s.Schedule(bg, "w", c.epoch, "old-timer", c.dueSoon, nil), "Schedule")
	return c
}

// batch is a commit that touches every part.
func (c *commitFixture) batch() store.CommitBatch {
	return store.CommitBatch{
		ExpectedCursor: 0, NewCursor: c.seqs[1], ExpectedHead: c.head,
		Entries:      []store.Record{rec("e1"), rec("e2"), rec("e3")},
		Intents:      intents("i1", "i2"),
		Timers:       []vocab.TimerSet{{IntentHash: "t1", DeliverAt: c.dueSoon, Payload: []byte("tick")}},
		CancelTimers: []string{"old-timer"},
		Snapshot:     &store.Snapshot{Height: c.head + 2, State: []byte("st"), StateHash: "h2"},
	}
}

func testCommitApplies(t *testing.T, open Factory) {
	c := newCommitFixture(t, open)
	f := c.f
	res, err := f.s.Commit(bg, "w", c.epoch, c.batch())
	must(t, err, "Commit")
	if res.Head != c.head+3 || res.Published != 2 || res.Scheduled != 1 || res.Cancelled != 1 || len(res.Appended) != 3 {
		t.Fatalf("CommitResult = %+v", res)
	}
	for i, a := range res.Appended {
		if a.Idempotent || a.RunSeq != c.head+uint64(i)+1 {
			t.Fatalf("entry %d = %+v, want new at %d (gapless)", i, a, c.head+uint64(i)+1)
		}
	}
	if cur := f.cursor("w"); cur != c.seqs[1] {
		t.Fatalf("cursor = %d, want %d", cur, c.seqs[1])
	}
	if h := f.head("w"); h != res.Head {
		t.Fatalf("head = %d, want %d", h, res.Head)
	}
	if ids := fmt.Sprint(eventIDs(f.read("w"))); ids != "[ev-before ev-e1 ev-e2 ev-e3]" {
		t.Fatalf("journal = %s", ids)
	}
	effects, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if effectsSummary(effects) != "[i1 pending #0 r0][i2 pending #0 r0]" {
		t.Fatalf("effects = %s", effectsSummary(effects))
	}
	timers, err := f.s.ListTimers(bg, "w", 10)
	must(t, err, "ListTimers")
	if len(timers) != 1 || timers[0].IntentHash != "t1" || !timers[0].DeliverAt.Equal(c.dueSoon) || string(timers[0].Payload) != "tick" {
		t.Fatalf("timers = %+v, want t1 alone (old-timer cancelled)", timers)
	}
	s, ok, err := f.s.ActiveSnapshot(bg, "w")
	if err != nil || !ok || s.Height != c.head+2 || s.StateHash != "h2" {
		t.Fatalf("ActiveSnapshot = %+v, %v, %v", s, ok, err)
	}
	// The drained items' keys are drained (they still dedupe), and the
	// third item is still to come.
	if seq, dup := f.enqueue("w", "event", "k0", nil); !dup || seq != c.seqs[0] {
		t.Fatalf("drained key k0: %d dup %v", seq, dup)
	}
	// A commit of nothing but a cursor move, and one of nothing at all.
	res, err = f.s.Commit(bg, "w", c.epoch, store.CommitBatch{ExpectedCursor: c.seqs[1], NewCursor: c.seqs[2], ExpectedHead: res.Head})
	if err != nil || res.Head != c.head+3 || len(res.Appended) != 0 || f.cursor("w") != c.seqs[2] {
		t.Fatalf("cursor-only Commit = %+v, %v; cursor %d", res, err, f.cursor("w"))
	}
	if _, err := f.s.Commit(bg, "w", c.epoch, store.CommitBatch{ExpectedCursor: c.seqs[2], NewCursor: c.seqs[2], ExpectedHead: res.Head}); err != nil {
		t.Fatalf("empty Commit: %v", err)
	}
}

func testCommitFailures(t *testing.T, open Factory) {
	c := newCommitFixture(t, open)
	f := c.f
	before := f.fingerprint()
	failures := []struct {
		what   string
		epoch  uint64
		mutate func(*store.CommitBatch)
		kind   error
	}{
		{"stale cursor", c.epoch, func(b *store.CommitBatch) { b.ExpectedCursor = c.seqs[0] }, store.ErrCursorMismatch},
		{"stale head", c.epoch, func(b *store.CommitBatch) { b.ExpectedHead = c.head - 1 }, store.ErrHeadMismatch},
		{"head from the future", c.epoch, func(b *store.CommitBatch) { b.ExpectedHead = c.head + 10 }, store.ErrHeadMismatch},
		{"stale epoch", c.epoch + 1, func(b *store.CommitBatch) {}, store.ErrFenced},
		{"newCursor past the last seq", c.epoch, func(b *store.CommitBatch) { b.NewCursor = c.seqs[2] + 1 }, store.ErrInvalid},
		{"snapshot above the new head", c.epoch, func(b *store.CommitBatch) { b.Snapshot.Height = c.head + 4 }, store.ErrInvalid},
		{"snapshot without a hash", c.epoch, func(b *store.CommitBatch) { b.Snapshot.StateHash = "" }, store.ErrInvalid},
		{"invalid intent", c.epoch, func(b *store.CommitBatch) { b.Intents[1].Kind = "" }, store.ErrInvalid},
		{"invalid timer", c.epoch, func(b *store.CommitBatch) { b.Timers[0].DeliverAt = time.Time{} }, store.ErrInvalid},
		{"invalid entry", c.epoch, func(b *store.CommitBatch) { b.Entries[2].EventType = "" }, store.ErrInvalid},
	}
	for _, x := range failures {
		b := c.batch()
		x.mutate(&b)
		_, err := f.s.Commit(bg, "w", x.epoch, b)
		wantErr(t, err, x.kind, "Commit with "+x.what)
		if after := f.fingerprint(); after != before {
			t.Fatalf("Commit with %s wrote:\nbefore %s\nafter  %s", x.what, before, after)
		}
	}
	// A snapshot conflicting with a stored one fails the whole commit too.
	must(t, f.s.PutSnapshot(bg, "w", c.epoch, snap(c.head, "stored")), "PutSnapshot")
	before = f.fingerprint()
	b := c.batch()
	b.Snapshot = &store.Snapshot{Height: c.head, StateHash: "another"}
	_, err := f.s.Commit(bg, "w", c.epoch, b)
	wantErr(t, err, store.ErrSnapshotConflict, "Commit with a conflicting snapshot")
	// And an expired lease fences it.
	f.advance(leaseTTL + margin)
	_, err = f.s.Commit(bg, "w", c.epoch, c.batch())
	wantErr(t, err, store.ErrFenced, "Commit under an expired lease")
	if after := f.fingerprint(); after != before {
		t.Fatalf("refused commits wrote:\nbefore %s\nafter  %s", before, after)
	}
}

func testCommitCancelSkips(t *testing.T, open Factory) {
	c := newCommitFixture(t, open)
	f := c.f
	ev := f.leased("v", "A")
	must(t, f.s.Schedule(bg, "v", ev, "v-timer", f.now(), nil), "Schedule on v")
	must(t, f.s.Schedule(bg, "w", c.epoch, "fired", f.now(), nil), "Schedule")
	f.advance(margin)
	for _, it := range f.claimDue("tw", 10) {
		if it.IntentHash == "fired" {
			f.fire("fired", it.ClaimOf())
		}
	}
	res, err := f.s.Commit(bg, "w", c.epoch, store.CommitBatch{
		ExpectedHead: c.head, CancelTimers: []string{"never-scheduled", "fired", "v-timer", "old-timer"},
	})
	must(t, err, "Commit cancelling unknown, fired, another world's and a live timer")
	if res.Cancelled != 1 {
		t.Fatalf("Cancelled = %d, want 1 (only old-timer)", res.Cancelled)
	}
	if ts, _ := f.s.ListTimers(bg, "v", 10); len(ts) != 1 || ts[0].IntentHash != "v-timer" {
		t.Fatalf("another world's timer = %+v, want it kept", ts)
	}
	if ts, _ := f.s.ListTimers(bg, "w", 10); len(ts) != 0 {
		t.Fatalf("w's timers = %+v, want none", ts)
	}
	// The fired timer's delivery stands.
	if seq, dup := f.fire("fired", vocab.Claim{Worker: "tw", Attempt: 1}); !dup || seq == 0 {
		t.Fatalf("fired timer = %d dup %v", seq, dup)
	}
}

// The cursor's compare-and-swap makes a retried commit fail instead of
// applying twice: the caller learns it already committed.
func testCommitRetry(t *testing.T, open Factory) {
	c := newCommitFixture(t, open)
	f := c.f
	_, err := f.s.Commit(bg, "w", c.epoch, c.batch())
	must(t, err, "Commit")
	after := f.fingerprint()
	_, err = f.s.Commit(bg, "w", c.epoch, c.batch())
	wantErr(t, err, store.ErrCursorMismatch, "the same Commit again")
	if again := f.fingerprint(); again != after {
		t.Fatalf("a retried Commit wrote:\nbefore %s\nafter  %s", after, again)
	}
	// Without a cursor move, the head's compare-and-swap does it (also when
	// every entry is a duplicate).
	b := store.CommitBatch{ExpectedCursor: c.seqs[1], NewCursor: c.seqs[1], ExpectedHead: c.head + 3, Entries: []store.Record{rec("e4")}}
	_, err = f.s.Commit(bg, "w", c.epoch, b)
	must(t, err, "Commit without a cursor move")
	_, err = f.s.Commit(bg, "w", c.epoch, b)
	wantErr(t, err, store.ErrHeadMismatch, "the same cursor-less Commit again")
}
