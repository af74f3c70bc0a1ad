package storetest

import (
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Closed dedupe namespaces (issue 7 item 1): the store's own deliveries
// (receipts, timer firings, fabric messages) use kinds and dedupe keys a
// producer can never enqueue, so no producer can make a real receipt
// disappear by taking its key first.
func namespaceTests() []testCase {
	return []testCase{
		{"EnqueueRejectsStoreKindsAndKeys", testEnqueueRejectsStoreKindsAndKeys},
		{"CallsAndEventsNeverShareADedupeKey", testCallsAndEventsNeverShareADedupeKey},
		{"UpgradesHaveTheirOwnDedupeKeys", testUpgradesHaveTheirOwnDedupeKeys},
		{"ScheduleTicksHaveTheirOwnDedupeKeys", testScheduleTicksHaveTheirOwnDedupeKeys},
	}
}

func testEnqueueRejectsStoreKindsAndKeys(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule")
	for _, item := range []store.InboxItem{
		{Kind: "event", DedupeKey: store.ReceiptKey("i1", 0)},
		{Kind: "event", DedupeKey: store.ReceiptKey("i1", 1)},
		{Kind: "event", DedupeKey: store.TimerKey("t1")},
		{Kind: "event", DedupeKey: store.ReceiptKeyPrefix},
		{Kind: "event", DedupeKey: store.CallKeyPrefix + "x"},
		{Kind: vocab.KindCall, DedupeKey: "x"},
		{Kind: vocab.KindReceipt},
		{Kind: vocab.KindTimer},
		{Kind: vocab.KindFabric},
	} {
		_, _, err := f.s.Enqueue(bg, "w", item)
		wantErr(t, err, store.ErrInvalid, "Enqueue of kind "+item.Kind+" key "+item.DedupeKey)
	}
	if n := len(f.inbox("w")); n != 0 {
		t.Fatalf("refused enqueues stored %d items", n)
	}
	// A key that merely contains a reserved word is the producer's own.
	if _, dup := f.enqueue("w", "event", "my-receipt:i1", nil); dup {
		t.Fatal("a producer key outside the reserved prefixes deduped")
	}
	// The real deliveries go through, once each.
	c := f.claimOne("adapter", "i1").ClaimOf()
	seq, dup := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("r")})
	if dup {
		t.Fatal("Complete answered dup: a producer took the receipt's key")
	}
	f.advance(margin)
	tc := f.claimTimer("tw", "t1").ClaimOf()
	tseq, tdup := f.fire("t1", tc)
	if tdup {
		t.Fatal("Fire answered dup: a producer took the firing's key")
	}
	items := f.inbox("w")
	if len(items) != 3 || items[1].Seq != seq || items[1].Kind != vocab.KindReceipt || items[1].DedupeKey != store.ReceiptKey("i1", 0) ||
		items[2].Seq != tseq || items[2].Kind != vocab.KindTimer || items[2].DedupeKey != store.TimerKey("t1") {
		t.Fatalf("inbox = %+v, want the producer's item, the receipt and the firing", items)
	}
}

// A call's key and a producer's event key live in separate namespaces: an
// event keyed "call:X" is refused (it would pass for call X), and call X is
// enqueued once whatever events came before it.
func testCallsAndEventsNeverShareADedupeKey(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("w", "A")
	call := store.CallKeyPrefix + "X"
	if _, _, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: call}); err == nil {
		t.Fatal("an event keyed like a call was enqueued")
	} else {
		wantErr(t, err, store.ErrInvalid, "Enqueue of an event keyed "+call)
	}
	// The call itself goes in, once.
	seq, dup := f.enqueue("w", vocab.KindCall, call, nil)
	if dup {
		t.Fatal("call X deduped against a refused event")
	}
	again, dup := f.enqueue("w", vocab.KindCall, call, nil)
	if !dup || again != seq {
		t.Fatalf("call X again = seq %d dup %v, want %d dup", again, dup, seq)
	}
	// An event keyed with the bare call id is the producer's own.
	if _, dup := f.enqueue("w", "event", "X", nil); dup {
		t.Fatal("an event keyed with the bare call id deduped against the call")
	}
	if items := f.inbox("w"); len(items) != 2 || items[0].Kind != vocab.KindCall || items[1].Kind != "event" {
		t.Fatalf("inbox = %+v, want the call and the event", items)
	}
}

// An operator's upgrade request (kind upgrade) is keyed in its own
// namespace: an event cannot take an upgrade's key first (and so make the
// request disappear as a duplicate), and an upgrade has no other key.
func testUpgradesHaveTheirOwnDedupeKeys(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("w", "A")
	key := store.UpgradeKeyPrefix + "2@0"
	for _, item := range []store.InboxItem{
		{Kind: "event", DedupeKey: key},
		{Kind: vocab.KindUpgrade, DedupeKey: "2@0"},
		{Kind: vocab.KindUpgrade},
	} {
		_, _, err := f.s.Enqueue(bg, "w", item)
		wantErr(t, err, store.ErrInvalid, "Enqueue of kind "+item.Kind+" key "+item.DedupeKey)
	}
	seq, dup := f.enqueue("w", vocab.KindUpgrade, key, nil)
	if dup {
		t.Fatal("the upgrade deduped against a refused event")
	}
	again, dup := f.enqueue("w", vocab.KindUpgrade, key, nil)
	if !dup || again != seq {
		t.Fatalf("the upgrade again = seq %d dup %v, want %d dup", again, dup, seq)
	}
	if items := f.inbox("w"); len(items) != 1 || items[0].Kind != vocab.KindUpgrade || items[0].DedupeKey != key {
		t.Fatalf("inbox = %+v, want the upgrade alone", items)
	}
}

// A schedule's tick input is keyed in the schedules' namespace, which only
// an item marked ScheduleTick may use: a producer's event cannot take a
// tick's key first (the tick would dedupe against it and never happen),
// neither alone nor in a spawn's first items, and the mark opens no other
// key.
func testScheduleTicksHaveTheirOwnDedupeKeys(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("w", "A")
	key := store.ScheduleKeyPrefix + "daily:20261128T090000.000000000Z"
	for _, item := range []store.InboxItem{
		{Kind: "event", DedupeKey: key},
		{Kind: "event", DedupeKey: store.ScheduleKeyPrefix},
		{Kind: "event", DedupeKey: "x", ScheduleTick: true},
		{Kind: "event", ScheduleTick: true},
	} {
		_, _, err := f.s.Enqueue(bg, "w", item)
		wantErr(t, err, store.ErrInvalid, "Enqueue of key "+item.DedupeKey)
	}
	_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: "u", World: "w2", Items: []store.InboxItem{{Kind: "event", DedupeKey: key}}})
	wantErr(t, err, store.ErrInvalid, "Spawn with an item keyed like a tick")
	seq, dup, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: key, ScheduleTick: true})
	must(t, err, "the tick's Enqueue")
	if dup {
		t.Fatal("the tick deduped against a refused event")
	}
	again, dup, err := f.s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: key, ScheduleTick: true})
	must(t, err, "the tick's Enqueue again")
	if !dup || again != seq {
		t.Fatalf("the tick again = seq %d dup %v, want %d dup", again, dup, seq)
	}
	// A key that merely contains the word is the producer's own.
	if _, dup := f.enqueue("w", "event", "my-schedule:daily", nil); dup {
		t.Fatal("a producer key outside the prefix deduped")
	}
	if items := f.inbox("w"); len(items) != 2 || items[0].DedupeKey != key || items[1].DedupeKey != "my-schedule:daily" {
		t.Fatalf("inbox = %+v, want the tick and the producer's event", items)
	}
}
