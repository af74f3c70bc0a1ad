package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// backlogTests pin the bounded inbox (store.InboxItem.MaxBacklog): a
// producer's Enqueue past the bound is ErrOverloaded and writes nothing;
// a duplicate is still a duplicate; the store's own deliveries (receipts,
// timer firings, fabric) pass whatever the backlog.
func backlogTests() []testCase {
	return []testCase{
		{"BoundedEnqueueRefusesPastTheBoundAndWritesNothing", testBacklogRefuses},
		{"BoundedEnqueueRetriedAfterADrainIsAcceptedOnce", testBacklogRetryAfterDrain},
		{"BoundedEnqueueAnswersADuplicateAsADuplicate", testBacklogDuplicate},
		{"BoundedEnqueueNeverLetsConcurrentProducersPastTheBound", testBacklogConcurrent},
		{"StoreDeliveriesPassAFullInbox", testBacklogDeliveriesPass},
		{"BoundBelowRefuseNewIsInvalid", testBacklogNegative},
		{"RefuseNewAnswersOnlyDuplicates", testRefuseNew},
		{"PendingEffectsCountsEachKindsPendingOnly", testPendingEffects},
	}
}

func bounded(kind, key string, payload []byte, max int) store.InboxItem {
	return store.InboxItem{Kind: kind, DedupeKey: key, Payload: payload, MaxBacklog: max}
}

func testBacklogRefuses(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	for i := range 3 {
		_, dup, err := f.s.Enqueue(bg, "w", bounded("event", fmt.Sprint("k", i), nil, 3))
		must(t, err, fmt.Sprint("bounded Enqueue ", i))
		if dup {
			t.Fatalf("Enqueue %d reported dup", i)
		}
	}
	before := f.worldState("w")
	_, _, err := f.s.Enqueue(bg, "w", bounded("event", "k3", []byte("over"), 3))
	wantErr(t, err, store.ErrOverloaded, "Enqueue into a full inbox")
	_, _, err = f.s.Enqueue(bg, "w", bounded("event", "", nil, 1))
	wantErr(t, err, store.ErrOverloaded, "keyless Enqueue past a smaller bound")
	if after := f.worldState("w"); after != before {
		t.Fatalf("a refused Enqueue changed the world:\nbefore %s\nafter  %s", before, after)
	}
	// Unbounded and larger bounds still pass: the bound is the caller's.
	if _, _, err := f.s.Enqueue(bg, "w", bounded("event", "", nil, 0)); err != nil {
		t.Fatalf("unbounded Enqueue: %v", err)
	}
	if _, _, err := f.s.Enqueue(bg, "w", bounded("event", "", nil, 5)); err != nil {
		t.Fatalf("Enqueue under a larger bound: %v", err)
	}
}

func testBacklogRetryAfterDrain(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	s1, _, err := f.s.Enqueue(bg, "w", bounded("event", "a", nil, 1))
	must(t, err, "Enqueue a")
	_, _, err = f.s.Enqueue(bg, "w", bounded("event", "b", []byte("B"), 1))
	wantErr(t, err, store.ErrOverloaded, "Enqueue b into a full inbox")
	// The refused key left no dedupe record: once room frees, the same
	// request is accepted, and once only.
	_, err = f.s.DrainToJournal(bg, "w", e, 0, 0, s1, []store.Record{rec("a")})
	must(t, err, "DrainToJournal")
	s2, dup, err := f.s.Enqueue(bg, "w", bounded("event", "b", []byte("B"), 1))
	must(t, err, "Enqueue b after the drain")
	if dup || s2 <= s1 {
		t.Fatalf("retried Enqueue b = %d dup %v, want a new item after %d", s2, dup, s1)
	}
	again, dup, err := f.s.Enqueue(bg, "w", bounded("event", "b", []byte("B"), 1))
	must(t, err, "Enqueue b again")
	if !dup || again != s2 {
		t.Fatalf("Enqueue b again = %d dup %v, want the duplicate of %d", again, dup, s2)
	}
	n := 0
	for _, it := range f.inbox("w") {
		if it.DedupeKey == "b" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("inbox holds %d items keyed b, want 1", n)
	}
}

func testBacklogDuplicate(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	seq, _, err := f.s.Enqueue(bg, "w", bounded("event", "k", nil, 1))
	must(t, err, "Enqueue")
	again, dup, err := f.s.Enqueue(bg, "w", bounded("event", "k", nil, 1))
	if err != nil || !dup || again != seq {
		t.Fatalf("duplicate into a full inbox = %d dup %v err %v, want the duplicate of %d", again, dup, err, seq)
	}
}

func testBacklogConcurrent(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	const bound, producers = 5, 20
	var wg sync.WaitGroup
	errs := make([]error, producers)
	for i := range producers {
		wg.Go(func() {
			_, _, errs[i] = f.s.Enqueue(bg, "w", bounded("event", fmt.Sprint("p", i), nil, bound))
		})
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		default:
			wantErr(t, err, store.ErrOverloaded, fmt.Sprint("producer ", i))
		}
	}
	if got := len(f.inbox("w")); ok != bound || got != bound {
		t.Fatalf("%d producers under bound %d: %d accepted, inbox holds %d", producers, bound, ok, got)
	}
}

func testBacklogDeliveriesPass(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.world("v")
	_, _, err := f.s.Enqueue(bg, "w", bounded("event", "", nil, 1))
	must(t, err, "Enqueue")
	f.publish("w", e, "h1")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now().Add(time.Second), []byte("tick")), "Schedule")
	_, _, err = f.s.Enqueue(bg, "w", bounded("event", "", nil, 1))
	wantErr(t, err, store.ErrOverloaded, "Enqueue into the full inbox")

	c := f.claimOne("fx", "h1").ClaimOf()
	if _, dup := f.complete("h1", c, okReceipt("r")); dup {
		t.Fatal("Complete reported dup")
	}
	f.advance(2 * time.Second)
	if _, dup := f.fire("t1", f.claimTimer("tw", "t1").ClaimOf()); dup {
		t.Fatal("Fire reported dup")
	}
	res, err := f.s.Send(bg, "w", "m1", store.InboxItem{Payload: []byte("msg")})
	must(t, err, "Send")
	if res.Status == "" {
		t.Fatalf("Send = %+v", res)
	}
	kinds := map[string]int{}
	for _, it := range f.inbox("w") {
		kinds[it.Kind]++
	}
	if kinds[vocab.KindReceipt] != 1 || kinds[vocab.KindTimer] != 1 || kinds[vocab.KindFabric] != 1 || kinds["event"] != 1 {
		t.Fatalf("inbox kinds past the bound = %v, want one event and the receipt, firing and fabric message", kinds)
	}
}

func testBacklogNegative(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	_, _, err := f.s.Enqueue(bg, "w", bounded("event", "", nil, store.RefuseNew-1))
	wantErr(t, err, store.ErrInvalid, "Enqueue with a bound below RefuseNew")
	if n := len(f.inbox("w")); n != 0 {
		t.Fatalf("inbox holds %d items after an invalid Enqueue", n)
	}
}

func testPendingEffects(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	got, err := f.s.PendingEffects(bg)
	must(t, err, "PendingEffects")
	if len(got) != 0 {
		t.Fatalf("PendingEffects of an empty store = %v", got)
	}
	in := intents("h1", "h2", "m1", "m2", "m3")
	for i := 2; i < len(in); i++ {
		in[i].Kind = "mail.send"
	}
	_, err = f.s.Publish(bg, "w", e, in)
	must(t, err, "Publish")
	f.claimOne("fx", "h1") // inflight: no longer pending
	got, err = f.s.PendingEffects(bg)
	must(t, err, "PendingEffects")
	if len(got) != 2 || got["mail.send"] != 3 || got[effectKind] != 1 {
		t.Fatalf("PendingEffects = %v, want mail.send 3 and %s 1", got, effectKind)
	}
}

func testRefuseNew(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	before := f.worldState("w")
	_, _, err := f.s.Enqueue(bg, "w", bounded("event", "k", nil, store.RefuseNew))
	wantErr(t, err, store.ErrOverloaded, "RefuseNew into an empty inbox")
	if after := f.worldState("w"); after != before {
		t.Fatalf("a refused Enqueue changed the world:\nbefore %s\nafter  %s", before, after)
	}
	seq, _ := f.enqueue("w", "event", "k", nil)
	again, dup, err := f.s.Enqueue(bg, "w", bounded("event", "k", nil, store.RefuseNew))
	if err != nil || !dup || again != seq {
		t.Fatalf("RefuseNew of an accepted key = %d dup %v err %v, want the duplicate of %d", again, dup, err, seq)
	}
}
