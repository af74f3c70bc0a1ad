package storetest

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Read-only views (issue 7 item 13): an operator's and the metrics' look
// at the queues, which changes nothing.
func viewTests() []testCase {
	return []testCase{
		{"ListEffectsListTimersAndQueueDepthsReflectStateAndChangeNothing", testViews},
	}
}

func testViews(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ev := f.leased("v", "A")
	f.publish("w", e, "i1", "i2", "i3")
	f.publish("v", ev, "v1")
	c1 := f.claimOne("adapter", "i1").ClaimOf()
	f.claimOne("adapter", "i2")
	f.complete("i1", c1, vocab.Receipt{Status: vocab.ReceiptOK}) // done: not listed
	now := f.now()
	must(t, f.s.Schedule(bg, "w", e, "t-late", now.Add(time.Hour), nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t-b", now.Add(time.Second), nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t-a", now.Add(time.Second), nil), "Schedule")
	must(t, f.s.Schedule(bg, "v", ev, "t-v", now.Add(time.Second), nil), "Schedule")
	must(t, f.s.Schedule(bg, "w", e, "t-fired", now, nil), "Schedule")
	f.advance(2 * time.Second)
	for _, it := range f.claimDue("tw", 1) { // t-fired, the earliest
		f.fire(it.IntentHash, it.ClaimOf())
	}
	if got := f.claimDue("tw", 1); len(got) != 1 || got[0].IntentHash != "t-a" {
		t.Fatalf("ClaimDue = %+v, want t-a", got)
	}
	f.enqueue("w", "event", "", nil)
	f.enqueue("v", "event", "", nil)
	vLast, _ := f.enqueue("v", "event", "", nil)
	before := f.fingerprint()

	effects, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if len(effects) != 2 || effects[0].IntentHash != "i2" || effects[0].State != vocab.EffectInflight || effects[0].ClaimedBy != "adapter" ||
		effects[1].IntentHash != "i3" || effects[1].State != vocab.EffectPending || effects[1].World != "w" || effects[0].Seq >= effects[1].Seq {
		t.Fatalf("ListEffects(w) = %+v, want i2 inflight then i3 pending", effects)
	}
	page, err := f.s.ListEffects(bg, "w", effects[0].Seq, 10)
	must(t, err, "ListEffects after")
	if len(page) != 1 || page[0].IntentHash != "i3" {
		t.Fatalf("ListEffects(w, after i2) = %+v", page)
	}
	if page, _ := f.s.ListEffects(bg, "w", 0, 1); len(page) != 1 || page[0].IntentHash != "i2" {
		t.Fatalf("ListEffects(w, limit 1) = %+v", page)
	}
	timers, err := f.s.ListTimers(bg, "w", 10)
	must(t, err, "ListTimers")
	if timersSummary(timers) != timersSummary([]store.TimerItem{
		{IntentHash: "t-a", State: store.TimerClaimed, ClaimedBy: "tw", Attempt: 1, DeliverAt: now.Add(time.Second)},
		{IntentHash: "t-b", State: store.TimerScheduled, DeliverAt: now.Add(time.Second)},
		{IntentHash: "t-late", State: store.TimerScheduled, DeliverAt: now.Add(time.Hour)},
	}) {
		t.Fatalf("ListTimers(w) = %s", timersSummary(timers))
	}
	if page, _ := f.s.ListTimers(bg, "w", 2); len(page) != 2 || page[1].IntentHash != "t-b" {
		t.Fatalf("ListTimers(w, 2) = %+v", page)
	}
	d, err := f.s.QueueDepths(bg)
	must(t, err, "QueueDepths")
	want := store.QueueDepths{EffectsPending: 2, EffectsInflight: 1, TimersScheduled: 3, TimersClaimed: 1, InboxBacklog: 5}
	if d != want {
		t.Fatalf("QueueDepths = %+v, want %+v", d, want)
	}
	if after := f.fingerprint(); after != before {
		t.Fatalf("the views changed state:\nbefore %s\nafter  %s", before, after)
	}
	// The backlog shrinks when a world drains.
	_, err = f.s.DrainToJournal(bg, "v", ev, 0, 0, vLast, []store.Record{rec("x")})
	must(t, err, "DrainToJournal")
	if d, _ := f.s.QueueDepths(bg); d.InboxBacklog != 3 {
		t.Fatalf("InboxBacklog after draining v = %d, want 3", d.InboxBacklog)
	}
}
