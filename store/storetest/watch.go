package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
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

func testWatchHints(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	inbox, stopInbox := f.s.Watch(ctx, store.TopicInbox("w"))
	defer stopInbox()
	effects, stopEffects := f.s.Watch(ctx, store.TopicEffects)
	defer stopEffects()
	timers, stopTimers := f.s.Watch(ctx, store.TopicTimers)
	defer stopTimers()

	f.enqueue("w", "event", "", nil)
	awaitHint(t, inbox, "inbox", func() {
		if len(f.inbox("w")) != 1 {
			t.Fatal("the enqueued item is not in the inbox")
		}
	})
	f.publish("w", e, "i1")
	awaitHint(t, effects, "effects", func() {
		if st := f.effectStatus("i1"); st.State != store.EffectPending {
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

// Stopping a watch (its function or its context) releases it; the store
// keeps working and never blocks on a watcher nobody reads.
func testWatchStop(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	ctx, cancel := context.WithCancel(bg)
	_, stop1 := f.s.Watch(ctx, store.TopicInbox("w"))
	_, stop2 := f.s.Watch(bg, store.TopicInbox("w"))
	unread, stop3 := f.s.Watch(bg, store.TopicInbox("w"))
	defer stop3()
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
	_ = unread
}
