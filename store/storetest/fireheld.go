package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// FireHeld: the holder of a world's lease fires that world's timer without
// a claim. It is fenced as Commit is, refuses what is not its world's or
// not due, and delivers exactly what Fire delivers, once, whoever fires
// first.
func fireHeldTests() []testCase {
	return []testCase{
		{"FireHeldDeliversWhatFireDelivers", testFireHeldDelivers},
		{"FireHeldOfADeliveredTimerAnswersTheFirstDelivery", testFireHeldDup},
		{"FireHeldBeatsAClaimAndTheWorkersFireIsADuplicate", testFireHeldBeatsClaim},
		{"FireHeldRefusesUnknownCancelledAndOtherWorldsTimers", testFireHeldNotFound},
		{"FireHeldBeforeDueIsErrNotDueAndSaysWhenItIsDue", testFireHeldNotDue},
		{"FireHeldIsFencedAsCommitIs", testFireHeldFenced},
	}
}

// timerItems returns the world's inbox items of kind timer.
func (f *fx) timerItems(world string) []store.InboxItem {
	f.t.Helper()
	var out []store.InboxItem
	for _, it := range f.inbox(world) {
		if it.Kind == vocab.KindTimer {
			out = append(out, it)
		}
	}
	return out
}

// noFiring reports whether res answers nothing (as with most errors).
func noFiring(res store.HeldFiring) bool {
	it := res.Item
	return !res.Dup && res.DueAt.IsZero() && res.Now.IsZero() && it.Seq == 0 && it.World == "" && it.Kind == "" &&
		it.Payload == nil && it.DedupeKey == "" && it.EnqueuedAt.IsZero()
}

func (f *fx) fireHeld(world string, epoch uint64, hash string) store.HeldFiring {
	f.t.Helper()
	res, err := f.s.FireHeld(bg, world, epoch, hash)
	must(f.t, err, "FireHeld "+hash)
	return res
}

// The firing FireHeld writes is the one Fire writes (kind timer, key
// TimerKey(hash), the timer's payload), it answers it exactly as ReadInbox
// reads it back, raises the world's inbox hint, and the timer is delivered:
// out of the queue and the views, and not cancellable.
func testFireHeldDelivers(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.enqueue("w", "event", "", nil)
	at := f.now().Add(time.Second)
	must(t, f.s.Schedule(bg, "w", e, "held", at, []byte("tick")), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "claimed", at, []byte("tick")), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "empty", at, nil), "Schedule")
	inbox := f.watch(store.TopicInbox("w")).C
	f.advance(2 * time.Second)

	res := f.fireHeld("w", e, "held")
	if res.Dup {
		t.Fatal("the first FireHeld reported dup")
	}
	awaitHint(t, inbox, "inbox", func() {})
	seq, dup := f.fire("claimed", f.claimTimer("tw", "claimed").ClaimOf())
	if dup {
		t.Fatal("Fire of the other timer reported dup")
	}
	empty := f.fireHeld("w", e, "empty")
	items := f.inbox("w")
	if len(items) != 4 {
		t.Fatalf("inbox after the firings = %+v, want the event and three firings", items)
	}
	byHeld, byFire, byHeldEmpty := items[1], items[2], items[3]
	if byFire.Seq != seq || res.Item.Seq != byHeld.Seq || empty.Item.Seq != byHeldEmpty.Seq {
		t.Fatalf("seqs: FireHeld %d and %d, Fire %d; inbox %v", res.Item.Seq, empty.Item.Seq, seq, itemSeqs(items))
	}
	// What FireHeld answers is the item ReadInbox reads, field for field.
	for _, c := range []struct {
		got, stored store.InboxItem
	}{{res.Item, byHeld}, {empty.Item, byHeldEmpty}} {
		if c.got.Seq != c.stored.Seq || c.got.World != c.stored.World || c.got.Kind != c.stored.Kind ||
			c.got.DedupeKey != c.stored.DedupeKey || !bytes.Equal(c.got.Payload, c.stored.Payload) ||
			!c.got.EnqueuedAt.Equal(c.stored.EnqueuedAt) {
			t.Fatalf("FireHeld answered %+v, the inbox holds %+v", c.got, c.stored)
		}
	}
	// And the item is Fire's, but for its own hash.
	if byHeld.World != "w" || byHeld.Kind != byFire.Kind || byHeld.Kind != vocab.KindTimer ||
		byHeld.DedupeKey != store.TimerKey("held") || byFire.DedupeKey != store.TimerKey("claimed") ||
		!bytes.Equal(byHeld.Payload, byFire.Payload) || !bytes.Equal(byHeld.Payload, []byte("tick")) ||
		len(byHeldEmpty.Payload) != 0 {
		t.Fatalf("FireHeld wrote %+v, Fire wrote %+v", byHeld, byFire)
	}
	if !near(byHeld.EnqueuedAt, f.now(), timeTol) {
		t.Fatalf("the firing was enqueued at %v, the store's clock reads %v", byHeld.EnqueuedAt, f.now())
	}
	if !res.DueAt.Equal(at) || res.Now.Before(at) {
		t.Fatalf("FireHeld's due time %v and clock %v, want %v and a clock past it", res.DueAt, res.Now, at)
	}
	// Delivered: gone from the queue and the view, and not cancellable.
	if got := f.claimDue("tw", 10); len(got) != 0 {
		t.Fatalf("a delivered timer was claimed: %+v", got)
	}
	if ts, err := f.s.ListTimers(bg, "w", 10); err != nil || len(ts) != 0 {
		t.Fatalf("timers after the firings = %+v, %v", ts, err)
	}
	wantErr(t, f.s.CancelTimer(bg, "w", e, "held"), store.ErrNotFound, "CancelTimer of a timer FireHeld fired")
}

// A timer the timer worker fired answers FireHeld with the first seq,
// dup, and nothing more enqueued; so does a second FireHeld.
func testFireHeldDup(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), []byte("p")), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t2", f.now(), []byte("p")), "Schedule")
	f.advance(time.Second)
	items := f.claimDue("tw", 1)
	if len(items) != 1 {
		t.Fatalf("ClaimDue = %+v", items)
	}
	first, _ := f.fire(items[0].IntentHash, items[0].ClaimOf())
	other := "t2"
	if items[0].IntentHash == "t2" {
		other = "t1"
	}
	if res := f.fireHeld("w", e, items[0].IntentHash); !res.Dup || res.Item.Seq != first {
		t.Fatalf("FireHeld after Fire = %+v, want dup at %d", res, first)
	}
	held := f.fireHeld("w", e, other)
	if again := f.fireHeld("w", e, other); !again.Dup || again.Item.Seq != held.Item.Seq || held.Dup {
		t.Fatalf("FireHeld twice = %+v then %+v, want a firing then dup at its seq", held, again)
	}
	if n := len(f.timerItems("w")); n != 2 {
		t.Fatalf("%d firings in the inbox, want 2", n)
	}
}

// The timer worker claimed the timer, then the holder fired it: the
// holder's firing is the one, and the worker's Fire under its (still
// latest) claim answers dup with that seq. One firing in the inbox.
func testFireHeldBeatsClaim(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now().Add(time.Second), []byte("p")), "Schedule")
	f.advance(2 * time.Second)
	c := f.claimTimer("tw", "t1").ClaimOf()
	res := f.fireHeld("w", e, "t1")
	if res.Dup {
		t.Fatal("FireHeld of a claimed timer reported dup")
	}
	if seq, dup := f.fire("t1", c); !dup || seq != res.Item.Seq {
		t.Fatalf("the worker's Fire after FireHeld = %d dup %v, want dup at %d", seq, dup, res.Item.Seq)
	}
	// A reap finds nothing to requeue: the timer is delivered.
	f.advance(claimTTL + margin)
	if n, err := f.s.ReapTimers(bg); err != nil || n != 0 {
		t.Fatalf("ReapTimers = %d, %v; want nothing", n, err)
	}
	if got := f.claimDue("tw2", 10); len(got) != 0 {
		t.Fatalf("the fired timer was claimed again: %+v", got)
	}
	if items := f.timerItems("w"); len(items) != 1 || items[0].Seq != res.Item.Seq {
		t.Fatalf("firings in the inbox = %+v, want the one at %d", items, res.Item.Seq)
	}
}

// An unknown timer, a cancelled one and another world's are all
// ErrNotFound, and nothing is written (the other world's timer stays
// scheduled, and fires later for its own holder).
func testFireHeldNotFound(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ev := f.leased("v", "B")
	must(t, f.s.Schedule(bg, "w", e, "cancelled", f.now(), nil), "Schedule")
	must(t, f.s.CancelTimer(bg, "w", e, "cancelled"), "CancelTimer")
	must(t, f.s.Schedule(bg, "v", ev, "v-timer", f.now(), []byte("v")), "Schedule")
	f.advance(time.Second)
	for _, h := range []string{"never", "cancelled", "v-timer"} {
		res, err := f.s.FireHeld(bg, "w", e, h)
		wantErr(t, err, store.ErrNotFound, "FireHeld of "+h)
		if !noFiring(res) {
			t.Fatalf("FireHeld of %s answered %+v with its error", h, res)
		}
	}
	if n := len(f.inbox("w")) + len(f.inbox("v")); n != 0 {
		t.Fatalf("refused firings enqueued %d items", n)
	}
	if ts, err := f.s.ListTimers(bg, "v", 10); err != nil || len(ts) != 1 || ts[0].State != store.TimerScheduled {
		t.Fatalf("v's timer after w's holder tried it = %+v, %v", ts, err)
	}
	if res := f.fireHeld("v", ev, "v-timer"); res.Dup || len(f.timerItems("v")) != 1 {
		t.Fatalf("v's holder firing its timer = %+v", res)
	}
	// Its world's own delivered timer is still another world's to w.
	_, err := f.s.FireHeld(bg, "w", e, "v-timer")
	wantErr(t, err, store.ErrNotFound, "FireHeld of another world's delivered timer")
}

// Before its due time by the store's clock a timer is ErrNotDue, and the
// answer says when it is due and what the store's clock read, so that the
// holder comes back then; nothing is written. Once due it fires.
func testFireHeldNotDue(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	at := f.now().Add(10 * time.Second)
	must(t, f.s.Schedule(bg, "w", e, "t1", at, nil), "Schedule")
	res, err := f.s.FireHeld(bg, "w", e, "t1")
	wantErr(t, err, store.ErrNotDue, "FireHeld ten seconds early")
	if !res.DueAt.Equal(at) || !near(res.Now, f.now(), timeTol) || !near(res.Now.Add(10*time.Second), at, timeTol) {
		t.Fatalf("the early FireHeld answered due %v at clock %v, want %v at about %v", res.DueAt, res.Now, at, f.now())
	}
	if !noFiring(store.HeldFiring{Dup: res.Dup, Item: res.Item}) {
		t.Fatalf("the early FireHeld answered an item: %+v", res)
	}
	if n := len(f.inbox("w")); n != 0 {
		t.Fatalf("an early FireHeld enqueued %d items", n)
	}
	if ts, err := f.s.ListTimers(bg, "w", 10); err != nil || len(ts) != 1 || ts[0].State != store.TimerScheduled {
		t.Fatalf("timers after an early FireHeld = %+v, %v", ts, err)
	}
	f.advance(res.DueAt.Sub(res.Now) + margin)
	if res := f.fireHeld("w", e, "t1"); res.Dup || len(f.timerItems("w")) != 1 {
		t.Fatalf("FireHeld once due = %+v", res)
	}
}

// The fence is Commit's: another epoch, an expired lease (before anyone
// takes it over), a released one, and one taken over are ErrFenced; an
// unknown world is ErrWorldNotFound. Nothing is written, and the timer
// stays for the rightful holder.
func testFireHeldFenced(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), []byte("p")), "Schedule")
	f.advance(time.Second)
	refused := func(world string, epoch uint64, kind error, what string) {
		t.Helper()
		res, err := f.s.FireHeld(bg, world, epoch, "t1")
		wantErr(t, err, kind, what)
		if !noFiring(res) {
			t.Fatalf("%s answered %+v with its error", what, res)
		}
		if n := len(f.inbox("w")); n != 0 {
			t.Fatalf("%s enqueued %d items", what, n)
		}
	}
	refused("w", e+1, store.ErrFenced, "FireHeld at a later epoch")
	refused("w", e-1, store.ErrFenced, "FireHeld at an earlier epoch")
	refused("nowhere", e, store.ErrWorldNotFound, "FireHeld in an unknown world")
	f.advance(leaseTTL + margin)
	refused("w", e, store.ErrFenced, "FireHeld under an expired lease")
	e2 := f.acquire("w", "B").Epoch
	refused("w", e, store.ErrFenced, "FireHeld by the deposed holder")
	must(t, f.s.Release(bg, "w", "B", e2), "Release")
	refused("w", e2, store.ErrFenced, "FireHeld under a released lease")
	e3 := f.acquire("w", "C").Epoch
	if res := f.fireHeld("w", e3, "t1"); res.Dup || len(f.timerItems("w")) != 1 {
		t.Fatalf("FireHeld by the current holder = %+v", res)
	}
}
