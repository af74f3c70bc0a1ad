package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Effects (protocols C and D). Intent hashes are global: Complete and
// EffectStatus name an intent by its hash alone, so one hash is one intent
// in the whole store (the runtime plane contract keys the dedupe by intent_hash per universe).
func effectTests() []testCase {
	return []testCase{
		{"PublishDedupesByIntentHash", testPublishDedupe},
		{"PublishIsFenced", testPublishFenced},
		{"ClaimMovesPendingToInflightInQueueOrder", testClaimOrder},
		{"CompleteEnqueuesReceiptAndMarksDoneAtomically", testComplete},
		{"ReapRequeuesExpiredClaimsWithNextAttempt", testReapEffects},
		{"ConcurrentClaimersNeverClaimTheSameItem", testConcurrentClaimers},
		{"CompleteAfterReapStillCountsOnce", testCompleteAfterReap},
		{"ReleaseEffectRequeuesAtOnceUnderItsLatestClaim", testReleaseEffect},
	}
}

// A released claim is claimable at once, without waiting for its expiry:
// a planned stop hands its work to another claimant immediately. Only the
// latest claim may release, a retried release is a no-op, and a done
// intent cannot be released.
func testReleaseEffect(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1", "i2")
	c := f.claimOne("adapter-1", "i1").ClaimOf()
	if got := f.claim("adapter-2", 5); len(got) != 1 || got[0].IntentHash != "i2" {
		t.Fatalf("Claim before the release = %+v, want i2 alone", got)
	}
	hint := f.watch(store.TopicEffects).C
	wantErr(t, f.s.ReleaseEffect(bg, "i1", vocab.Claim{Worker: "adapter-2", Attempt: c.Attempt}), store.ErrClaimLost, "ReleaseEffect by another worker")
	wantErr(t, f.s.ReleaseEffect(bg, "i1", vocab.Claim{Worker: c.Worker, Attempt: c.Attempt + 1}), store.ErrClaimLost, "ReleaseEffect of another attempt")
	if st := f.effectStatus("i1"); st.State != vocab.EffectInflight {
		t.Fatalf("a refused release changed the effect: %+v", st)
	}
	must(t, f.s.ReleaseEffect(bg, "i1", c), "ReleaseEffect")
	awaitHint(t, hint, "effects", func() {})
	if st := f.effectStatus("i1"); st.State != vocab.EffectPending || st.Attempts != 1 {
		t.Fatalf("EffectStatus after release = %+v, want pending after 1 attempt", st)
	}
	must(t, f.s.ReleaseEffect(bg, "i1", c), "ReleaseEffect again")
	// No clock moved: the claim had not expired, and the item is claimable.
	again := f.claim("adapter-2", 5)
	if len(again) != 1 || again[0].IntentHash != "i1" || again[0].Attempt != c.Attempt+1 || again[0].ClaimedBy != "adapter-2" {
		t.Fatalf("Claim after the release = %+v, want i1 at attempt %d", again, c.Attempt+1)
	}
	wantErr(t, f.s.ReleaseEffect(bg, "i1", c), store.ErrClaimLost, "ReleaseEffect by a claim that was superseded")
	f.complete("i1", again[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, f.s.ReleaseEffect(bg, "i1", again[0].ClaimOf()), store.ErrClaimLost, "ReleaseEffect of a done intent")
	wantErr(t, f.s.ReleaseEffect(bg, "never", c), store.ErrNotFound, "ReleaseEffect of an unknown intent")
	wantErr(t, f.s.ReleaseEffect(bg, "i2", vocab.Claim{Worker: "adapter-2"}), store.ErrInvalid, "ReleaseEffect with attempt 0")
}

func testPublishDedupe(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	if n := f.publish("w", e, "i1", "i2", "i1"); n != 2 {
		t.Fatalf("Publish [i1 i2 i1] queued %d, want 2", n)
	}
	if n := f.publish("w", e, "i1", "i3"); n != 1 {
		t.Fatalf("Publish [i1 i3] queued %d, want 1", n)
	}
	st := f.effectStatus("i3")
	if st.IntentHash != "i3" || st.World != "w" || st.State != vocab.EffectPending || st.Attempts != 0 || st.Receipt != nil {
		t.Fatalf("EffectStatus(i3) = %+v", st)
	}
	// Inflight and done intents are skipped too.
	items := f.claim("adapter", 10)
	if len(items) != 3 {
		t.Fatalf("claimed %d items, want 3 (each intent once)", len(items))
	}
	if n := f.publish("w", e, "i2"); n != 0 {
		t.Fatalf("re-publishing an inflight intent queued %d", n)
	}
	f.complete("i1", items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	if n := f.publish("w", e, "i1"); n != 0 {
		t.Fatalf("re-publishing a done intent queued %d", n)
	}
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("claimed %d items after re-publishing, want 0", len(got))
	}
	_, err := f.s.EffectStatus(bg, "never")
	wantErr(t, err, store.ErrNotFound, "EffectStatus of an unknown intent")
}

func testPublishFenced(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	_, err := f.s.Publish(bg, "w", e+1, intents("i1"))
	wantErr(t, err, store.ErrFenced, "Publish with a wrong epoch")
	f.advance(leaseTTL + margin)
	_, err = f.s.Publish(bg, "w", e, intents("i1"))
	wantErr(t, err, store.ErrFenced, "Publish under an expired lease")
	_, err = f.s.EffectStatus(bg, "i1")
	wantErr(t, err, store.ErrNotFound, "EffectStatus after fenced publishes")
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("fenced publishes queued %+v", got)
	}
}

func testClaimOrder(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ev := f.leased("v", "A")
	f.publish("w", e, "i1")
	f.publish("v", ev, "i2")
	f.publish("w", e, "i3")
	before := f.now()
	got := f.claim("adapter-1", 2)
	if len(got) != 2 || got[0].IntentHash != "i1" || got[1].IntentHash != "i2" || got[1].Seq <= got[0].Seq {
		t.Fatalf("Claim(2) = %+v, want i1 then i2 in queue order", got)
	}
	want := intents("i1")[0]
	it := got[0]
	if it.World != "w" || it.Kind != want.Kind || !bytes.Equal(it.Params, want.Params) || it.Origin != want.Origin ||
		it.PolicyContextHash != want.PolicyContextHash || it.Attempt != 1 || it.ClaimedBy != "adapter-1" ||
		!near(it.ClaimExpires, before.Add(claimTTL), timeTol) || it.EnqueuedAt.IsZero() {
		t.Fatalf("claimed item = %+v", it)
	}
	if got[1].World != "v" {
		t.Fatalf("i2 claimed for world %q", got[1].World)
	}
	if st := f.effectStatus("i1"); st.State != vocab.EffectInflight || st.Attempts != 1 {
		t.Fatalf("EffectStatus(i1) after claim = %+v", st)
	}
	if rest := f.claim("adapter-2", 5); len(rest) != 1 || rest[0].IntentHash != "i3" || rest[0].ClaimedBy != "adapter-2" {
		t.Fatalf("second Claim = %+v, want i3", rest)
	}
	if none := f.claim("adapter-2", 5); len(none) != 0 {
		t.Fatalf("Claim of an empty queue = %+v", none)
	}
}

func testComplete(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.enqueue("w", "event", "", nil)
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1").ClaimOf()
	seq, dup := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("receipt-body")})
	if dup {
		t.Fatal("first Complete reported dup")
	}
	items := f.inbox("w")
	if len(items) != 2 || items[1].Seq != seq || items[1].Kind != "receipt" || items[1].DedupeKey != "receipt:i1" ||
		!bytes.Equal(items[1].Payload, []byte("receipt-body")) {
		t.Fatalf("inbox after Complete = %+v, want the receipt at seq %d", items, seq)
	}
	st := f.effectStatus("i1")
	if st.State != vocab.EffectDone || st.InboxSeq != seq || st.Attempts != 1 || st.Receipt == nil ||
		st.Receipt.Status != vocab.ReceiptOK || !bytes.Equal(st.Receipt.Payload, []byte("receipt-body")) || st.CompletedAt.IsZero() {
		t.Fatalf("EffectStatus after Complete = %+v", st)
	}
	// One terminal receipt per intent: a second completion (a retry, even
	// with another outcome or another claim) changes nothing.
	again, dup := f.complete("i1", vocab.Claim{Worker: "someone-else", Attempt: 7}, vocab.Receipt{Status: vocab.ReceiptError, Payload: []byte("late")})
	if !dup || again != seq {
		t.Fatalf("second Complete = %d dup %v, want %d true", again, dup, seq)
	}
	if n := len(f.inbox("w")); n != 2 {
		t.Fatalf("second Complete enqueued: %d items", n)
	}
	if st := f.effectStatus("i1"); st.Receipt == nil || st.Receipt.Status != vocab.ReceiptOK {
		t.Fatalf("second Complete changed the receipt: %+v", st)
	}
	// Removed from the queue: never reclaimed, even after a reap.
	f.advance(claimTTL + margin)
	if _, err := f.s.ReapEffects(bg); err != nil {
		t.Fatal(err)
	}
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("a completed intent was claimed again: %+v", got)
	}
	_, _, err := f.s.Complete(bg, "never", c, vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, err, store.ErrNotFound, "Complete of an unknown intent")
}

func testReapEffects(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1", "i2")
	first := f.claim("adapter-1", 1)
	f.advance(claimTTL / 3)
	n, err := f.s.ReapEffects(bg)
	must(t, err, "ReapEffects")
	if n != 0 {
		t.Fatalf("reaped %d unexpired claims", n)
	}
	f.advance(claimTTL)
	n, err = f.s.ReapEffects(bg)
	must(t, err, "ReapEffects")
	if n != 1 {
		t.Fatalf("reaped %d, want the one expired claim", n)
	}
	if st := f.effectStatus("i1"); st.State != vocab.EffectPending || st.Attempts != 1 {
		t.Fatalf("EffectStatus after reap = %+v, want pending after 1 attempt", st)
	}
	var again vocab.EffectItem
	for _, it := range f.claim("adapter-2", 2) {
		if it.IntentHash == "i1" {
			again = it
		}
	}
	// Requeued, not re-published: the same queue entry (the runtime plane contract moves
	// pending/<seq> to inflight/<seq> and back), so it keeps its Seq and
	// its place ahead of later intents.
	if again.IntentHash != first[0].IntentHash || again.Attempt != 2 || again.ClaimedBy != "adapter-2" || again.World != "w" || again.Seq != first[0].Seq {
		t.Fatalf("reclaimed item = %+v, want %s at attempt 2 with seq %d", again, first[0].IntentHash, first[0].Seq)
	}
	if st := f.effectStatus("i1"); st.State != vocab.EffectInflight || st.Attempts != 2 {
		t.Fatalf("EffectStatus after reclaim = %+v", st)
	}
	// Reclaimed by another worker: the first adapter's late completion has
	// lost its claim and changes nothing; the new claim completes, once, and
	// after that the first adapter learns its result was not used (dup).
	_, _, err = f.s.Complete(bg, "i1", first[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptTimeout})
	wantErr(t, err, store.ErrClaimLost, "Complete under the claim a reclaim replaced")
	if st := f.effectStatus("i1"); st.State != vocab.EffectInflight {
		t.Fatalf("a lost claim's Complete changed the effect: %+v", st)
	}
	seq, dup := f.complete("i1", again.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	if seq2, dup2 := f.complete("i1", first[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptTimeout}); dup || !dup2 || seq2 != seq {
		t.Fatalf("completions: (%d, %v) then (%d, %v)", seq, dup, seq2, dup2)
	}
}

func testConcurrentClaimers(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	const total, claimers = 120, 8
	var hashes []string
	for i := 0; i < total; i++ {
		hashes = append(hashes, fmt.Sprintf("i%03d", i))
	}
	for i := 0; i < total; i += 40 {
		f.publish("w", e, hashes[i:i+40]...)
	}
	claimed := make([][]vocab.EffectItem, claimers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < claimers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				items, err := f.s.Claim(bg, fmt.Sprint("adapter-", c), []string{effectKind}, 3, time.Hour)
				if err != nil {
					t.Errorf("claimer %d: %v", c, err)
					return
				}
				if len(items) == 0 {
					return
				}
				claimed[c] = append(claimed[c], items...)
			}
		}()
	}
	close(start)
	wg.Wait()
	seen := map[string]string{}
	for c, items := range claimed {
		for _, it := range items {
			if other, dup := seen[it.IntentHash]; dup {
				t.Fatalf("%s claimed by %s and adapter-%d", it.IntentHash, other, c)
			}
			if it.Attempt != 1 {
				t.Fatalf("%s claimed at attempt %d", it.IntentHash, it.Attempt)
			}
			seen[it.IntentHash] = fmt.Sprint("adapter-", c)
		}
	}
	if len(seen) != total {
		t.Fatalf("%d of %d intents claimed", len(seen), total)
	}
}

// Seed 002 crash window 2: an adapter whose claim was reaped while it was
// still working completes anyway. A reap keeps the latest claim (nobody
// claimed the intent anew), so its result is accepted, and the dedupe guard
// keeps it the one terminal receipt: the requeued entry is gone, a later
// completion is a duplicate.
func testCompleteAfterReap(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("slow-adapter", "i1").ClaimOf()
	f.advance(claimTTL + margin)
	if n, err := f.s.ReapEffects(bg); err != nil || n != 1 {
		t.Fatalf("ReapEffects = %d, %v", n, err)
	}
	seq, dup := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("late")})
	if dup {
		t.Fatal("late Complete reported dup")
	}
	if got := f.claim("adapter-2", 10); len(got) != 0 {
		t.Fatalf("a completed intent was still queued: %+v", got)
	}
	if again, dup, err := f.s.Complete(bg, "i1", c, vocab.Receipt{Status: vocab.ReceiptError}); err != nil || !dup || again != seq {
		t.Fatalf("second Complete = %d %v %v", again, dup, err)
	}
	receipts := 0
	for _, it := range f.inbox("w") {
		if it.Kind == "receipt" {
			receipts++
		}
	}
	if receipts != 1 {
		t.Fatalf("%d receipts in the inbox, want 1", receipts)
	}
}
