package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Timers (protocol E). Like effects, timers are named by intent hash alone
// (Fire takes the hash and a claim), so hashes are global.
func timerTests() []testCase {
	return []testCase{
		{"ScheduleAndCancelAreFenced", testTimersFenced},
		{"ClaimDueClaimsOnlyDueTimers", testClaimDue},
		{"SameInstantTimersClaimInIntentHashOrder", testTimerOrder},
		{"FireIsAtomicAndDeduped", testFire},
		{"ReapTimersRequeuesExpiredClaims", testReapTimers},
		{"TimerSurvivesAnExpiredClaimAndFiresOnce", testTimerSurvives},
		{"LateFireAfterReapDeliversOnce", testLateFire},
		{"ScheduleSameIntentHashIsANoOp", testScheduleDedupe},
	}
}

func testTimersFenced(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	at := f.now().Add(time.Second)
	must(t, f.s.Schedule(bg, "w", e, "t1", at, nil), "Schedule")
	wantErr(t, f.s.Schedule(bg, "w", e+1, "t2", at, nil), store.ErrFenced, "Schedule with a wrong epoch")
	wantErr(t, f.s.CancelTimer(bg, "w", e+1, "t1"), store.ErrFenced, "CancelTimer with a wrong epoch")
	f.advance(2 * time.Second)
	if got := f.claimDue("tw", 10); len(got) != 1 || got[0].IntentHash != "t1" {
		t.Fatalf("ClaimDue = %+v, want t1 alone", got)
	}
	// Cancel with the right epoch removes a timer that has not fired.
	must(t, f.s.Schedule(bg, "w", e, "t3", at, nil), "Schedule")
	must(t, f.s.CancelTimer(bg, "w", e, "t3"), "CancelTimer")
	if got := f.claimDue("tw", 10); len(got) != 0 {
		t.Fatalf("a cancelled timer was claimed: %+v", got)
	}
	_, _, err := f.s.Fire(bg, "t3", vocab.Claim{Worker: "tw", Attempt: 1})
	wantErr(t, err, store.ErrNotFound, "Fire of a cancelled timer")
}

func testClaimDue(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	now := f.now()
	t1, t2 := now.Add(10*time.Second), now.Add(20*time.Second)
	must(t, f.s.Schedule(bg, "w", e, "t2", t2, []byte("two")), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t1", t1, []byte("one")), "Schedule")
	if got := f.claimDue("tw", 10); len(got) != 0 {
		t.Fatalf("ClaimDue before anything is due = %+v", got)
	}
	f.advance(15 * time.Second)
	got := f.claimDue("tw", 10)
	if len(got) != 1 {
		t.Fatalf("ClaimDue at +15s = %+v, want t1", got)
	}
	it := got[0]
	if it.IntentHash != "t1" || it.World != "w" || !near(it.DeliverAt, t1, time.Millisecond) || !bytes.Equal(it.Payload, []byte("one")) ||
		it.Attempt != 1 || it.ClaimedBy != "tw" || it.ClaimExpires.IsZero() {
		t.Fatalf("claimed timer = %+v", it)
	}
	if again := f.claimDue("tw2", 10); len(again) != 0 {
		t.Fatalf("a claimed timer was claimed again: %+v", again)
	}
	f.advance(10 * time.Second)
	if got := f.claimDue("tw", 10); len(got) != 1 || got[0].IntentHash != "t2" {
		t.Fatalf("ClaimDue at +25s = %+v, want t2", got)
	}
}

func testTimerOrder(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ev := f.leased("v", "A")
	at := f.now().Add(10 * time.Second)
	must(t, f.s.Schedule(bg, "w", e, "t-early", at.Add(-5*time.Second), nil), "Schedule")
	for _, h := range []string{"t-c", "t-a", "t-d", "t-b"} {
		world, epoch := "w", e
		if h == "t-d" {
			world, epoch = "v", ev // order is across worlds
		}
		must(t, f.s.Schedule(bg, world, epoch, h, at, nil), "Schedule "+h)
	}
	f.advance(20 * time.Second)
	var order []string
	for _, it := range f.claimDue("tw", 2) {
		order = append(order, it.IntentHash)
	}
	for _, it := range f.claimDue("tw", 10) {
		order = append(order, it.IntentHash)
	}
	if got := fmt.Sprint(order); got != "[t-early t-a t-b t-c t-d]" {
		t.Fatalf("claim order = %s, want (deliverAt, intentHash) order [t-early t-a t-b t-c t-d]", got)
	}
}

func testFire(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.enqueue("w", "event", "", nil)
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now().Add(time.Second), []byte("tick")), "Schedule")
	f.advance(2 * time.Second)
	c := f.claimTimer("tw", "t1").ClaimOf()
	seq, dup := f.fire("t1", c)
	if dup {
		t.Fatal("first Fire reported dup")
	}
	items := f.inbox("w")
	if len(items) != 2 || items[1].Seq != seq || items[1].Kind != "timer" || items[1].DedupeKey != "timer:t1" || !bytes.Equal(items[1].Payload, []byte("tick")) {
		t.Fatalf("inbox after Fire = %+v, want the timer item at seq %d", items, seq)
	}
	again, dup := f.fire("t1", vocab.Claim{Worker: "another", Attempt: 9})
	if !dup || again != seq {
		t.Fatalf("second Fire = %d dup %v, want %d true", again, dup, seq)
	}
	if n := len(f.inbox("w")); n != 2 {
		t.Fatalf("second Fire enqueued: %d items", n)
	}
	// Delivered: gone from the queue, not cancellable, and scheduling the
	// same hash again is a no-op.
	f.advance(claimTTL + margin)
	if _, err := f.s.ReapTimers(bg); err != nil {
		t.Fatal(err)
	}
	must(t, f.s.Schedule(bg, "w", f.acquire("w", "A").Epoch, "t1", f.now(), nil), "re-Schedule")
	if got := f.claimDue("tw", 10); len(got) != 0 {
		t.Fatalf("a delivered timer was claimed again: %+v", got)
	}
	_, _, err := f.s.Fire(bg, "never", c)
	wantErr(t, err, store.ErrNotFound, "Fire of an unknown timer")
}

func testReapTimers(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule")
	f.advance(time.Second)
	f.claimDue("tw", 1)
	f.advance(claimTTL / 3)
	n, err := f.s.ReapTimers(bg)
	must(t, err, "ReapTimers")
	if n != 0 {
		t.Fatalf("reaped %d unexpired claims", n)
	}
	f.advance(claimTTL)
	n, err = f.s.ReapTimers(bg)
	must(t, err, "ReapTimers")
	if n != 1 {
		t.Fatalf("reaped %d, want 1", n)
	}
	if got := f.claimDue("tw2", 1); len(got) != 1 || got[0].IntentHash != "t1" || got[0].Attempt != 2 || got[0].ClaimedBy != "tw2" {
		t.Fatalf("reclaim = %+v, want t1 at attempt 2", got)
	}
}

// Seed 002 crash window 3: the timer worker dies between claim and fire.
// The timer survives, is reclaimed after the reap, and fires exactly once.
func testTimerSurvives(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now().Add(time.Second), []byte("p")), "Schedule")
	f.advance(2 * time.Second)
	if got := f.claimDue("dies", 1); len(got) != 1 {
		t.Fatalf("first claim = %+v", got)
	}
	// The lease may move on: timers belong to the world, not the worker.
	f.advance(leaseTTL + margin)
	f.acquire("w", "B")
	if _, err := f.s.ReapTimers(bg); err != nil {
		t.Fatal(err)
	}
	got := f.claimDue("survivor", 10)
	if len(got) != 1 || got[0].IntentHash != "t1" {
		t.Fatalf("reclaim = %+v", got)
	}
	seq, _ := f.fire("t1", got[0].ClaimOf())
	// The dead worker's late Fire is a duplicate.
	if again, dup, err := f.s.Fire(bg, "t1", vocab.Claim{Worker: "dies", Attempt: 1}); err != nil || !dup || again != seq {
		t.Fatalf("late Fire = %d %v %v", again, dup, err)
	}
	var timers int
	for _, it := range f.inbox("w") {
		if it.Kind == "timer" {
			timers++
		}
	}
	if timers != 1 {
		t.Fatalf("%d timer items in the inbox, want 1", timers)
	}
}

func testScheduleDedupe(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	now := f.now()
	must(t, f.s.Schedule(bg, "w", e, "t1", now.Add(time.Second), []byte("first")), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t1", now.Add(time.Hour), []byte("second")), "second Schedule")
	f.advance(2 * time.Second)
	got := f.claimDue("tw", 10)
	if len(got) != 1 || !bytes.Equal(got[0].Payload, []byte("first")) {
		t.Fatalf("ClaimDue = %+v, want the first schedule of t1", got)
	}
}

// The timer worker's claim was reaped while it was still firing: its late
// Fire still delivers (a reap keeps the latest claim, and nobody claimed
// the timer anew), once; the requeued timer is gone.
func testLateFire(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), []byte("p")), "Schedule")
	f.advance(time.Second)
	c := f.claimTimer("slow", "t1").ClaimOf()
	f.advance(claimTTL + margin)
	if n, err := f.s.ReapTimers(bg); err != nil || n != 1 {
		t.Fatalf("ReapTimers = %d, %v", n, err)
	}
	seq, dup, err := f.s.Fire(bg, "t1", c)
	if err != nil || dup {
		t.Fatalf("late Fire = %d %v %v", seq, dup, err)
	}
	if got := f.claimDue("tw", 10); len(got) != 0 {
		t.Fatalf("a delivered timer was still queued: %+v", got)
	}
	if n := len(f.inbox("w")); n != 1 {
		t.Fatalf("%d inbox items, want 1", n)
	}
}
