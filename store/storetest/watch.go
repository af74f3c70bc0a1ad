package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Watch hints are hints (store package doc): correctness never depends on
// them, and a backend may lose one (a dropped LISTEN connection). So the
// conformance suite waits a bounded time for each hint and, when none
// comes, logs it and checks the durable state the hint was about instead.
// memstore's own tests require every hint.
func watchTests() []testCase {
	return []testCase{
		{"WatchHintsAfterEnqueuePublishAndSchedule", testWatchHints},
		{"WatchStopsOnCancelAndStopFunc", testWatchStop},
		{"WatchEachTopicIsHintedByItsOperations", testWatchTopics},
		{"WatchStopEndsHints", testWatchStopEndsHints},
		{"WatchRefusesBadTopicsAndAClosedStore", testWatchRefuses},
		{"NextDueIsTheEarliestUnclaimedTimer", testNextDue},
	}
}

const hintWait = 5 * time.Second

// awaitHint waits up to hintWait for a hint on ch; on a miss it logs and
// runs check, which must find the change in durable state.
func awaitHint(t *testing.T, ch <-chan struct{}, what string, check func()) {
	t.Helper()
	timer := time.NewTimer(hintWait)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Logf("no %s hint within %v (hints may be lost); checking state instead", what, hintWait)
		check()
	}
}

// watch registers a Signal on topics and returns it; the watch stops when
// the test ends.
func (f *fx) watch(topics ...string) *store.Signal {
	f.t.Helper()
	sig := store.NewSignal()
	stop, err := f.s.Watch(bg, sig, topics...)
	must(f.t, err, fmt.Sprint("Watch ", topics))
	f.t.Cleanup(stop)
	return sig
}

func testWatchHints(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	inbox := f.watch(store.TopicInbox("w")).C
	effects := f.watch(store.TopicEffects).C
	timers := f.watch(store.TopicTimers).C

	f.enqueue("w", "event", "", nil)
	awaitHint(t, inbox, "inbox", func() {
		if len(f.inbox("w")) != 1 {
			t.Fatal("the enqueued item is not in the inbox")
		}
	})
	f.publish("w", e, "i1")
	awaitHint(t, effects, "effects", func() {
		if st := f.effectStatus("i1"); st.State != vocab.EffectPending {
			t.Fatalf("published intent = %+v", st)
		}
	})
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule")
	awaitHint(t, timers, "timers", func() {
		f.advance(time.Second)
		if len(f.claimDue("tw", 1)) != 1 {
			t.Fatal("the scheduled timer is not claimable")
		}
	})
	// Hints coalesce: many changes may leave one hint, never block a writer.
	for i := 0; i < 100; i++ {
		f.enqueue("w", "event", "", nil)
	}
	awaitHint(t, inbox, "coalesced inbox", func() {
		if len(f.inbox("w")) != 101 {
			t.Fatal("items missing")
		}
	})
}

// Stopping a watch releases it (idempotently, also after the context of
// its registration ended: ctx bounds only the call); the store keeps
// working and never blocks on a waker nobody reads.
func testWatchStop(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	ctx, cancel := context.WithCancel(bg)
	stop1, err := f.s.Watch(ctx, store.NewSignal(), store.TopicInbox("w"))
	must(t, err, "Watch")
	stop2, err := f.s.Watch(bg, store.NewSignal(), store.TopicInbox("w"))
	must(t, err, "Watch")
	unread := f.watch(store.TopicInbox("w"))
	cancel()
	stop2()
	stop2() // idempotent
	stop1() // after its context ended: still fine
	for i := 0; i < 10; i++ {
		f.enqueue("w", "event", "", nil)
	}
	if len(f.inbox("w")) != 10 {
		t.Fatal("enqueues lost while watches stopped")
	}
	if len(unread.C) > 1 {
		t.Fatal("a Signal holds more than one hint")
	}
}

// drain empties a Signal, so that the next hint is the next operation's.
func drain(sig *store.Signal) {
	select {
	case <-sig.C:
	default:
	}
}

// testWatchTopics: every operation a Topic* doc lists hints that topic.
// A hint may be spurious (so a drained Signal is reused), and may be lost
// (then the durable state must show the change).
func testWatchTopics(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	sig := map[string]*store.Signal{}
	for _, topic := range []string{store.TopicInbox("w"), store.TopicEffects, store.TopicTimers, store.TopicAssignments, store.TopicLeases, store.TopicWorkers} {
		sig[topic] = f.watch(topic)
	}
	step := func(topic, what string, do func(), check func()) {
		t.Helper()
		drain(sig[topic])
		do()
		awaitHint(t, sig[topic].C, topic+" after "+what, check)
	}
	effect := func(h string, st vocab.EffectState) func() {
		return func() {
			if got := f.effectStatus(h); got.State != st {
				t.Fatalf("%s = %+v, want %s", h, got, st)
			}
		}
	}
	timerState := func(h string, want store.TimerState) func() {
		return func() {
			ts, err := f.s.ListTimers(bg, "w", 100)
			must(t, err, "ListTimers")
			for _, it := range ts {
				if it.IntentHash == h {
					if it.State != want {
						t.Fatalf("timer %s = %+v, want %s", h, it, want)
					}
					return
				}
			}
			if want != "" {
				t.Fatalf("timer %s missing", h)
			}
		}
	}
	inboxHas := func(n int) func() {
		return func() {
			if got := len(f.inbox("w")); got != n {
				t.Fatalf("inbox has %d items, want %d", got, n)
			}
		}
	}
	lease := func(w, holder string) func() {
		return func() {
			if l, _, _ := f.s.GetLease(bg, w); l.Holder != holder {
				t.Fatalf("lease of %s = %+v, want holder %q", w, l, holder)
			}
		}
	}
	assigned := func(w string, want bool) func() {
		return func() {
			if _, ok, _ := f.s.GetAssignment(bg, w); ok != want {
				t.Fatalf("assignment of %s: %v, want %v", w, ok, want)
			}
		}
	}
	inbox, effects, timers := store.TopicInbox("w"), store.TopicEffects, store.TopicTimers

	step(inbox, "Enqueue", func() { f.enqueue("w", "event", "", nil) }, inboxHas(1))
	step(effects, "Publish", func() { f.publish("w", e, "i1") }, effect("i1", vocab.EffectPending))
	step(effects, "Commit", func() {
		_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: f.head("w"), Intents: intents("i2")})
		must(t, err, "Commit")
	}, effect("i2", vocab.EffectPending))
	items := f.claim("adapter", 2)
	f.advance(claimTTL + margin)
	step(effects, "ReapEffects", func() {
		_, err := f.s.ReapEffects(bg)
		must(t, err, "ReapEffects")
	}, effect("i1", vocab.EffectPending))
	step(inbox, "Complete", func() {
		f.complete("i1", items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptError})
	}, inboxHas(2))
	step(effects, "RetryEffect", func() {
		_, err := f.s.RetryEffect(bg, "i1", "again")
		must(t, err, "RetryEffect")
	}, effect("i1", vocab.EffectPending))
	step(inbox, "Resolve", func() {
		_, _, err := f.s.Resolve(bg, "i1", vocab.Receipt{Status: vocab.ReceiptOK}, "answered out of band")
		must(t, err, "Resolve")
	}, inboxHas(3))
	e = f.acquire("w", "A").Epoch // the lease ran out above
	step(timers, "Schedule", func() { must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule") }, timerState("t1", store.TimerScheduled))
	step(timers, "CancelTimer", func() { must(t, f.s.CancelTimer(bg, "w", e, "t1"), "CancelTimer") }, timerState("t1", ""))
	step(timers, "Commit", func() {
		_, err := f.s.Commit(bg, "w", e, store.CommitBatch{ExpectedHead: f.head("w"), Timers: []vocab.TimerSet{{IntentHash: "t2", DeliverAt: f.now()}}})
		must(t, err, "Commit")
	}, timerState("t2", store.TimerScheduled))
	f.advance(margin)
	tc := f.claimDue("tw", 1)
	f.advance(claimTTL + margin)
	step(timers, "ReapTimers", func() {
		_, err := f.s.ReapTimers(bg)
		must(t, err, "ReapTimers")
	}, timerState("t2", store.TimerScheduled))
	step(inbox, "Fire", func() { f.fire("t2", tc[0].ClaimOf()) }, inboxHas(4))
	step(inbox, "Send", func() {
		_, err := f.s.Send(bg, "w", "m1", store.InboxItem{})
		must(t, err, "Send")
	}, inboxHas(5))
	step(store.TopicAssignments, "Assign", func() { must(t, f.s.Assign(bg, "w", store.Assignment{DesiredWorker: "A"}, nil), "Assign") }, assigned("w", true))
	step(store.TopicAssignments, "Unassign", func() { must(t, f.s.Unassign(bg, "w", nil), "Unassign") }, assigned("w", false))
	f.world("v")
	step(store.TopicLeases, "Acquire", func() { f.acquire("v", "B") }, lease("v", "B"))
	l, _, _ := f.s.GetLease(bg, "v")
	step(store.TopicLeases, "Release", func() { must(t, f.s.Release(bg, "v", "B", l.Epoch), "Release") }, lease("v", ""))
	l = f.acquire("v", "B")
	step(store.TopicLeases, "ReleaseLeases", func() {
		_, err := f.s.ReleaseLeases(bg, "B", []store.LeaseRef{{World: "v", Epoch: l.Epoch}})
		must(t, err, "ReleaseLeases")
	}, lease("v", ""))
	step(store.TopicLeases, "AcquireLeases", func() {
		res, err := f.s.AcquireLeases(bg, "B", []string{"v", "v"}, leaseTTL)
		must(t, err, "AcquireLeases")
		must(t, res[0].Err, "AcquireLeases of v")
	}, lease("v", "B"))
	step(store.TopicLeases, "SetWorldStatus revoking the lease", func() { f.setStatus("v", store.WorldPaused, "") }, lease("v", ""))
	step(store.TopicAssignments, "SetWorldStatus", func() { f.setStatus("v", store.WorldActive, "") }, func() {
		if w, _ := f.s.GetWorld(bg, "v"); w.Status != store.WorldActive {
			t.Fatalf("v = %+v", w)
		}
	})
	step(store.TopicWorkers, "Heartbeat", func() {
		_, err := f.s.Heartbeat(bg, "A", 1)
		must(t, err, "Heartbeat")
	}, func() {
		if ws, _ := f.s.ListWorkers(bg); len(ws) != 1 {
			t.Fatalf("workers = %+v", ws)
		}
	})
	step(store.TopicWorkers, "SetDraining", func() {
		_, err := f.s.SetDraining(bg, "A", true)
		must(t, err, "SetDraining")
	}, func() {
		if ws, _ := f.s.ListWorkers(bg); len(ws) != 1 || !ws[0].Draining {
			t.Fatalf("workers = %+v", ws)
		}
	})
}

// After stop, nothing reaches the Waker (checked at once: any later hint
// would have to come from a registration that no longer exists).
func testWatchStopEndsHints(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	sig := store.NewSignal()
	stop, err := f.s.Watch(bg, sig, store.TopicInbox("w"), store.TopicWorkers)
	must(t, err, "Watch")
	stop()
	drain(sig)
	f.enqueue("w", "event", "", nil)
	_, err = f.s.Heartbeat(bg, "A", 1)
	must(t, err, "Heartbeat")
	select {
	case <-sig.C:
		t.Fatal("a stopped watch was hinted")
	default:
	}
}

func testWatchRefuses(t *testing.T, open Factory) {
	f := setup(t, open)
	for _, topics := range [][]string{nil, {""}, {"bogus"}, {"inbox:"}, {store.TopicEffects, "nope"}, {store.TopicInbox("w\x00")}} {
		_, err := f.s.Watch(bg, store.NewSignal(), topics...)
		wantErr(t, err, store.ErrInvalid, fmt.Sprintf("Watch %q", topics))
	}
	_, err := f.s.Watch(bg, nil, store.TopicEffects)
	wantErr(t, err, store.ErrInvalid, "Watch with a nil waker")
	must(t, f.s.Close(), "Close")
	_, err = f.s.Watch(bg, store.NewSignal(), store.TopicEffects)
	wantErr(t, err, store.ErrClosed, "Watch on a closed store")
}

func testNextDue(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	next := func() (time.Time, bool) {
		t.Helper()
		at, ok, err := f.s.NextDue(bg)
		must(t, err, "NextDue")
		return at, ok
	}
	if _, ok := next(); ok {
		t.Fatal("NextDue without timers reported one")
	}
	now := f.now()
	late, soon := now.Add(time.Hour), now.Add(10*time.Minute)
	must(t, f.s.Schedule(bg, "w", e, "late", late, nil), "Schedule")
	if at, ok := next(); !ok || !at.Equal(late) {
		t.Fatalf("NextDue = %v %v, want %v", at, ok, late)
	}
	must(t, f.s.Schedule(bg, "w", e, "soon", soon, nil), "Schedule")
	if at, ok := next(); !ok || !at.Equal(soon) {
		t.Fatalf("NextDue = %v %v, want %v", at, ok, soon)
	}
	f.advance(11 * time.Minute)
	if at, _ := next(); !at.Equal(soon) {
		t.Fatalf("NextDue of a due, unclaimed timer = %v, want %v", at, soon)
	}
	c := f.claimTimer("tw", "soon").ClaimOf()
	if at, ok := next(); !ok || !at.Equal(late) {
		t.Fatalf("NextDue with soon claimed = %v %v, want %v", at, ok, late)
	}
	f.fire("soon", c)
	e = f.acquire("w", "A").Epoch
	must(t, f.s.CancelTimer(bg, "w", e, "late"), "CancelTimer")
	if at, ok := next(); ok {
		t.Fatalf("NextDue after firing and cancelling everything = %v", at)
	}
}
