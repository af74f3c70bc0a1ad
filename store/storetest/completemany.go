package storetest

import (
	"bytes"
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// CompleteMany (an adapter's batch of acknowledgements): one call, one
// transaction, and each completion answered exactly as Complete would
// answer it alone. An item's refusal does not abort the others: the suite
// pins that reading of the doc comment (a bad item next to good ones
// leaves the good ones completed).
func completeManyTests() []testCase {
	return []testCase{
		{"CompleteManyAnswersEachAsCompleteWould", testCompleteManyAnswers},
		{"CompleteManyDeliversUnderReceiptKeyToEachWorld", testCompleteManyWorlds},
		{"CompleteManyChecksTheCall", testCompleteManyCall},
	}
}

func okReceipt(payload string) vocab.Receipt {
	return vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte(payload)}
}

func testCompleteManyAnswers(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "good1", "done", "stale", "bad", "good2")
	claims := map[string]vocab.Claim{}
	for _, it := range f.claim("adapter", 10) {
		claims[it.IntentHash] = it.ClaimOf()
	}
	if len(claims) != 5 {
		t.Fatalf("claimed %d effects, want 5", len(claims))
	}
	doneSeq, _ := f.complete("done", claims["done"], okReceipt("first"))
	staleClaim := vocab.Claim{Worker: "intruder", Attempt: claims["stale"].Attempt}

	cs := []vocab.Completion{
		{IntentHash: "good1", Claim: claims["good1"], Receipt: okReceipt("r-good1")},
		{IntentHash: "done", Claim: vocab.Claim{Worker: "late", Attempt: 9}, Receipt: okReceipt("ignored")},
		{IntentHash: "stale", Claim: staleClaim, Receipt: okReceipt("ignored")},
		{IntentHash: "never", Claim: claims["good1"], Receipt: okReceipt("ignored")},
		{IntentHash: "bad", Claim: claims["bad"], Receipt: vocab.Receipt{Status: "maybe"}},
		{IntentHash: "", Claim: claims["good1"], Receipt: okReceipt("ignored")},
		{IntentHash: "good2", Claim: claims["good2"], Receipt: okReceipt("r-good2")},
		// A repeat in the same batch: its first occurrence completed it.
		{IntentHash: "good1", Claim: claims["good1"], Receipt: vocab.Receipt{Status: vocab.ReceiptError, Payload: []byte("again")}},
	}
	res, err := f.s.CompleteMany(bg, cs)
	must(t, err, "CompleteMany")
	if len(res) != len(cs) {
		t.Fatalf("%d results for %d completions", len(res), len(cs))
	}
	wantErrs := []error{nil, nil, store.ErrClaimLost, store.ErrNotFound, store.ErrInvalid, store.ErrInvalid, nil, nil}
	for i, r := range res {
		if wantErrs[i] != nil {
			wantErr(t, r.Err, wantErrs[i], "CompleteMany item "+cs[i].IntentHash)
			if r.InboxSeq != 0 || r.Dup {
				t.Fatalf("refused item %d answered seq %d dup %v", i, r.InboxSeq, r.Dup)
			}
		} else if r.Err != nil {
			t.Fatalf("item %d (%s): %v", i, cs[i].IntentHash, r.Err)
		}
	}
	if res[0].Dup || res[6].Dup || res[0].InboxSeq == 0 || res[6].InboxSeq <= res[0].InboxSeq {
		t.Fatalf("good completions = %+v and %+v, want new receipts in batch order", res[0], res[6])
	}
	if !res[1].Dup || res[1].InboxSeq != doneSeq {
		t.Fatalf("completion of a done intent = %+v, want its first seq %d, dup", res[1], doneSeq)
	}
	if !res[7].Dup || res[7].InboxSeq != res[0].InboxSeq {
		t.Fatalf("second occurrence of good1 = %+v, want seq %d dup", res[7], res[0].InboxSeq)
	}

	// Delivered exactly once each, under the receipt key, with the first
	// occurrence's payload.
	items := f.inbox("w")
	want := []struct {
		hash, payload string
		seq           uint64
	}{{"done", "first", doneSeq}, {"good1", "r-good1", res[0].InboxSeq}, {"good2", "r-good2", res[6].InboxSeq}}
	if len(items) != len(want) {
		t.Fatalf("inbox = %+v, want %d receipts", items, len(want))
	}
	for i, w := range want {
		it := items[i]
		if it.Seq != w.seq || it.Kind != vocab.KindReceipt || it.DedupeKey != store.ReceiptKey(w.hash, 0) || !bytes.Equal(it.Payload, []byte(w.payload)) {
			t.Fatalf("inbox item %d = %+v, want %s's receipt %q at seq %d", i, it, w.hash, w.payload, w.seq)
		}
	}
	if st := f.effectStatus("good1"); st.State != vocab.EffectDone || st.InboxSeq != res[0].InboxSeq ||
		st.Receipt == nil || st.Receipt.Status != vocab.ReceiptOK {
		t.Fatalf("EffectStatus(good1) = %+v", st)
	}
	// The refused items changed nothing.
	for _, h := range []string{"stale", "bad"} {
		if st := f.effectStatus(h); st.State != vocab.EffectInflight || st.Receipt != nil {
			t.Fatalf("EffectStatus(%s) after a refused completion = %+v", h, st)
		}
	}
	// Each answer is Complete's alone (the refused ones are still refused,
	// the done ones answer the same seq).
	for i, c := range cs {
		seq, dup, err := f.s.Complete(bg, c.IntentHash, c.Claim, c.Receipt)
		if wantErrs[i] != nil {
			wantErr(t, err, wantErrs[i], "Complete alone of "+c.IntentHash)
			continue
		}
		if err != nil || !dup || seq != res[i].InboxSeq {
			t.Fatalf("Complete alone of %s = %d %v %v, want %d dup", c.IntentHash, seq, dup, err, res[i].InboxSeq)
		}
	}
	// The stale and bad ones still complete under their real claims.
	res, err = f.s.CompleteMany(bg, []vocab.Completion{
		{IntentHash: "stale", Claim: claims["stale"], Receipt: okReceipt("r-stale")},
		{IntentHash: "bad", Claim: claims["bad"], Receipt: okReceipt("r-bad")},
	})
	must(t, err, "CompleteMany of the rest")
	for i, r := range res {
		if r.Err != nil || r.Dup {
			t.Fatalf("completion %d of the rest = %+v", i, r)
		}
	}
	if n := len(f.inbox("w")); n != 5 {
		t.Fatalf("%d inbox items, want 5 receipts", n)
	}
}

// Receipts go to each effect's own world, under ReceiptKey with the
// effect's retry count, whatever the world's status (they answer the
// world's own requests).
func testCompleteManyWorlds(t *testing.T, open Factory) {
	f := setup(t, open)
	ew := f.leased("w", "A")
	ev := f.leased("v", "A")
	f.publish("w", ew, "w1", "w2")
	f.publish("v", ev, "v1", "v-retried")
	f.enqueue("v", "event", "", nil)
	// v-retried ended in an error and an operator retried it.
	var retried vocab.EffectItem
	for _, it := range f.claim("adapter", 10) {
		if it.IntentHash == "v-retried" {
			retried = it
		}
	}
	f.complete("v-retried", retried.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptError})
	if _, err := f.s.RetryEffect(bg, "v-retried", "try again"); err != nil {
		t.Fatal(err)
	}
	again := f.claimOne("adapter", "v-retried")
	f.setStatus("v", store.WorldPaused, "maintenance")
	items, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects w")
	vItems, err := f.s.ListEffects(bg, "v", 0, 10)
	must(t, err, "ListEffects v")
	var cs []vocab.Completion
	for _, it := range append(vItems, items...) {
		cs = append(cs, vocab.Completion{IntentHash: it.IntentHash, Claim: it.ClaimOf(), Receipt: okReceipt("r-" + it.IntentHash)})
	}
	if len(cs) != 4 || again.Retries != 1 {
		t.Fatalf("open effects %+v, retried claim %+v", cs, again)
	}
	res, err := f.s.CompleteMany(bg, cs)
	must(t, err, "CompleteMany")
	seqs := map[string]uint64{}
	for i, r := range res {
		if r.Err != nil || r.Dup {
			t.Fatalf("completion of %s = %+v", cs[i].IntentHash, r)
		}
		seqs[cs[i].IntentHash] = r.InboxSeq
	}
	for _, want := range []struct {
		world  string
		hashes []string
	}{{"w", []string{"w1", "w2"}}, {"v", []string{"v1", "v-retried"}}} {
		world, hashes := want.world, want.hashes
		inbox := f.inbox(world)
		var receipts []store.InboxItem
		for _, it := range inbox {
			if it.Kind == vocab.KindReceipt {
				receipts = append(receipts, it)
			}
		}
		if world == "v" {
			// The error receipt of the first attempt, then this batch's.
			receipts = receipts[1:]
		}
		if len(receipts) != len(hashes) {
			t.Fatalf("%s's receipts = %+v, want %v", world, receipts, hashes)
		}
		for i, h := range hashes {
			retries := 0
			if h == "v-retried" {
				retries = 1
			}
			it := receipts[i]
			if it.Seq != seqs[h] || it.DedupeKey != store.ReceiptKey(h, retries) || !bytes.Equal(it.Payload, []byte("r-"+h)) {
				t.Fatalf("%s's receipt %d = %+v, want %s at seq %d under %s", world, i, it, h, seqs[h], store.ReceiptKey(h, retries))
			}
		}
	}
	if n, err := f.s.ListEffects(bg, "w", 0, 10); err != nil || len(n) != 0 {
		t.Fatalf("w's open effects after CompleteMany = %+v, %v", n, err)
	}
}

// The call's own checks: an empty batch is an empty answer, a batch above
// store.MaxBatch is ErrInvalid for the call and completes nothing.
func testCompleteManyCall(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	it := f.claimOne("adapter", "i1")
	if res, err := f.s.CompleteMany(bg, nil); err != nil || len(res) != 0 {
		t.Fatalf("CompleteMany of nothing = %+v, %v", res, err)
	}
	big := make([]vocab.Completion, store.MaxBatch+1)
	for i := range big {
		big[i] = vocab.Completion{IntentHash: "i1", Claim: it.ClaimOf(), Receipt: okReceipt("r")}
	}
	res, err := f.s.CompleteMany(bg, big)
	wantErr(t, err, store.ErrInvalid, "CompleteMany above MaxBatch")
	if res != nil {
		t.Fatalf("a refused call answered %d results", len(res))
	}
	if st := f.effectStatus("i1"); st.State != vocab.EffectInflight || len(f.inbox("w")) != 0 {
		t.Fatalf("a refused call completed: %+v", st)
	}
	res, err = f.s.CompleteMany(bg, big[:store.MaxBatch])
	must(t, err, "CompleteMany of MaxBatch")
	if res[0].Err != nil || res[0].Dup || !res[1].Dup || !res[store.MaxBatch-1].Dup || res[store.MaxBatch-1].InboxSeq != res[0].InboxSeq {
		t.Fatalf("CompleteMany of MaxBatch repeats = %+v … %+v", res[0], res[store.MaxBatch-1])
	}
	if n := len(f.inbox("w")); n != 1 {
		t.Fatalf("%d receipts for one intent", n)
	}
}
