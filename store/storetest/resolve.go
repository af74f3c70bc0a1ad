package storetest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Resolve is an operator's receipt for an effect no adapter will complete
// (a stuck manual step, an answer that came out of band). It is Complete
// without the claim check: one terminal receipt per intent still holds, so
// whichever of the operator and the claim holder settles first wins and
// the other learns it (dup=true).
func resolveTests() []testCase {
	return []testCase{
		{"ResolvePendingEffectDeliversOneReceipt", testResolvePending},
		{"ResolveInflightEffectWinsAndTheClaimHolderGetsDup", testResolveInflight},
		{"ResolveDoneEffectIsDupAndChangesNothing", testResolveDone},
		{"ResolveUnknownIsErrNotFound", testResolveUnknown},
		{"ResolveInvalidReceiptIsErrInvalidAndWritesNothing", testResolveInvalid},
		{"ResolveAfterRetryEffectDeliversUnderTheRetrysKey", testResolveAfterRetry},
		{"ResolveDeliversWhateverTheWorldsStatus", testResolveArchived},
	}
}

// resolve is an operator's Resolve that must succeed.
func (f *fx) resolve(hash string, r vocab.Receipt, reason string) (uint64, bool) {
	f.t.Helper()
	seq, dup, err := f.s.Resolve(bg, hash, r, reason)
	must(f.t, err, "Resolve "+hash)
	return seq, dup
}

// receipts returns the receipt items of world's inbox.
func (f *fx) receipts(world string) []store.InboxItem {
	f.t.Helper()
	var out []store.InboxItem
	for _, it := range f.inbox(world) {
		if it.Kind == vocab.KindReceipt {
			out = append(out, it)
		}
	}
	return out
}

func testResolvePending(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.enqueue("w", "event", "", nil)
	f.publish("w", e, "i1", "i2")
	seq, dup := f.resolve("i1", vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("signed off by hand")}, "manual approval step")
	if dup || seq == 0 {
		t.Fatalf("Resolve of a pending effect = %d dup %v", seq, dup)
	}
	items := f.inbox("w")
	if len(items) != 2 || items[1].Seq != seq || items[1].Kind != vocab.KindReceipt || items[1].DedupeKey != store.ReceiptKey("i1", 0) ||
		!bytes.Equal(items[1].Payload, []byte("signed off by hand")) {
		t.Fatalf("inbox after Resolve = %+v, want the event then the receipt at seq %d under %s", items, seq, store.ReceiptKey("i1", 0))
	}
	st := f.effectStatus("i1")
	if st.State != vocab.EffectDone || st.InboxSeq != seq || st.Receipt == nil || st.Receipt.Status != vocab.ReceiptOK ||
		!bytes.Equal(st.Receipt.Payload, []byte("signed off by hand")) || st.CompletedAt.IsZero() || st.Attempts != 0 {
		t.Fatalf("EffectStatus after Resolve = %+v", st)
	}
	if !st.Resolved || st.ResolveReason != "manual approval step" {
		t.Fatalf("EffectStatus after Resolve: Resolved %v reason %q, want the operator's", st.Resolved, st.ResolveReason)
	}
	// Out of the queue: neither listed nor claimable; i2 is untouched.
	listed, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if len(listed) != 1 || listed[0].IntentHash != "i2" || listed[0].State != vocab.EffectPending {
		t.Fatalf("ListEffects after Resolve = %+v, want only i2 pending", listed)
	}
	got := f.claim("adapter", 10)
	if len(got) != 1 || got[0].IntentHash != "i2" {
		t.Fatalf("Claim after Resolve = %+v, want only i2", got)
	}
	// An adapter's completion records no operator.
	if st := f.effectStatus("i2"); st.Resolved || st.ResolveReason != "" {
		t.Fatalf("an unresolved effect reads as resolved: %+v", st)
	}
	f.complete("i2", got[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	if st := f.effectStatus("i2"); st.Resolved || st.ResolveReason != "" {
		t.Fatalf("an adapter's completion reads as an operator's: %+v", st)
	}
}

func testResolveInflight(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("stuck-adapter", "i1").ClaimOf()
	seq, dup := f.resolve("i1", vocab.Receipt{Status: vocab.ReceiptError, Payload: []byte("operator: upstream refused")}, "")
	if dup {
		t.Fatal("Resolve of an inflight effect reported dup")
	}
	// The claim holder comes back late: its result is not used.
	again, dup := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("adapter's late result")})
	if !dup || again != seq {
		t.Fatalf("the holder's Complete after Resolve = %d dup %v, want %d true", again, dup, seq)
	}
	res, err := f.s.CompleteMany(bg, []vocab.Completion{{IntentHash: "i1", Claim: c, Receipt: vocab.Receipt{Status: vocab.ReceiptOK}}})
	if err != nil || len(res) != 1 || res[0].Err != nil || !res[0].Dup || res[0].InboxSeq != seq {
		t.Fatalf("the holder's CompleteMany after Resolve = %+v, %v, want dup at %d", res, err, seq)
	}
	rs := f.receipts("w")
	if len(rs) != 1 || rs[0].Seq != seq || !bytes.Equal(rs[0].Payload, []byte("operator: upstream refused")) {
		t.Fatalf("receipts = %+v, want exactly the operator's at %d", rs, seq)
	}
	st := f.effectStatus("i1")
	if st.State != vocab.EffectDone || st.Receipt == nil || st.Receipt.Status != vocab.ReceiptError || !st.Resolved || st.ResolveReason != "" {
		t.Fatalf("EffectStatus = %+v, want done with the operator's error receipt (empty reason)", st)
	}
	// The expired claim is not requeued: the effect left the queue.
	f.advance(claimTTL + margin)
	if n, err := f.s.ReapEffects(bg); err != nil || n != 0 {
		t.Fatalf("ReapEffects after Resolve = %d, %v", n, err)
	}
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("a resolved effect was claimed again: %+v", got)
	}
}

func testResolveDone(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1").ClaimOf()
	seq, _ := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptError, Payload: []byte("503")})
	before := f.effectStatus("i1")
	inbox := f.inbox("w")
	for _, r := range []vocab.Receipt{{Status: vocab.ReceiptOK, Payload: []byte("operator")}, {Status: vocab.ReceiptError}} {
		again, dup := f.resolve("i1", r, "too late")
		if !dup || again != seq {
			t.Fatalf("Resolve of a done effect = %d dup %v, want %d true", again, dup, seq)
		}
	}
	after := f.effectStatus("i1")
	if after.State != before.State || after.InboxSeq != before.InboxSeq || after.Receipt == nil || after.Receipt.Status != vocab.ReceiptError ||
		!bytes.Equal(after.Receipt.Payload, []byte("503")) || after.Resolved || after.ResolveReason != "" || !after.CompletedAt.Equal(before.CompletedAt) {
		t.Fatalf("Resolve of a done effect changed it: before %+v, after %+v", before, after)
	}
	if got := f.inbox("w"); len(got) != len(inbox) {
		t.Fatalf("Resolve of a done effect enqueued: %d items, had %d", len(got), len(inbox))
	}
	// A resolved effect is done like any other: a second Resolve is dup.
	f.publish("w", e, "i2")
	first, _ := f.resolve("i2", vocab.Receipt{Status: vocab.ReceiptOK}, "first")
	if again, dup := f.resolve("i2", vocab.Receipt{Status: vocab.ReceiptTimeout}, "second"); !dup || again != first {
		t.Fatalf("second Resolve = %d dup %v, want %d true", again, dup, first)
	}
	if st := f.effectStatus("i2"); st.ResolveReason != "first" || st.Receipt.Status != vocab.ReceiptOK {
		t.Fatalf("second Resolve changed the record: %+v", st)
	}
}

func testResolveUnknown(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("w", "A")
	_, _, err := f.s.Resolve(bg, "never-published", vocab.Receipt{Status: vocab.ReceiptOK}, "")
	wantErr(t, err, store.ErrNotFound, "Resolve of an unknown intent")
	if n := len(f.inbox("w")); n != 0 {
		t.Fatalf("Resolve of an unknown intent enqueued %d items", n)
	}
	_, err = f.s.EffectStatus(bg, "never-published")
	wantErr(t, err, store.ErrNotFound, "EffectStatus after Resolve of an unknown intent")
}

// Every refused Resolve leaves the effect as it was: still inflight under
// the adapter's claim, which then completes it normally.
func testResolveInvalid(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1").ClaimOf()
	ok := vocab.Receipt{Status: vocab.ReceiptOK}
	for _, bad := range []struct {
		what   string
		hash   string
		r      vocab.Receipt
		reason string
	}{
		{"unknown status", "i1", vocab.Receipt{Status: "maybe"}, ""},
		{"empty status", "i1", vocab.Receipt{}, ""},
		{"payload over MaxReceiptBytes", "i1", vocab.Receipt{Status: vocab.ReceiptOK, Payload: make([]byte, store.MaxReceiptBytes+1)}, ""},
		{"reason over MaxReasonBytes", "i1", ok, strings.Repeat("r", store.MaxReasonBytes+1)},
		{"reason not UTF-8", "i1", ok, "r\xff"},
		{"empty intent hash", "", ok, ""},
		{"intent hash with NUL", "i\x001", ok, ""},
	} {
		_, _, err := f.s.Resolve(bg, bad.hash, bad.r, bad.reason)
		wantErr(t, err, store.ErrInvalid, "Resolve with "+bad.what)
	}
	if n := len(f.inbox("w")); n != 0 {
		t.Fatalf("refused Resolves enqueued %d items", n)
	}
	st := f.effectStatus("i1")
	if st.State != vocab.EffectInflight || st.Receipt != nil || st.Resolved {
		t.Fatalf("refused Resolves changed the effect: %+v", st)
	}
	if _, dup := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK}); dup {
		t.Fatal("the claim holder's Complete after refused Resolves reported dup")
	}
}

func testResolveAfterRetry(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1").ClaimOf()
	f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptError, Payload: []byte("503")})
	_, err := f.s.RetryEffect(bg, "i1", "upstream back")
	must(t, err, "RetryEffect")
	seq, dup := f.resolve("i1", vocab.Receipt{Status: vocab.ReceiptTimeout, Payload: []byte("gave up")}, "still nothing")
	if dup {
		t.Fatal("Resolve of a retried effect reported dup")
	}
	rs := f.receipts("w")
	if len(rs) != 2 || rs[1].Seq != seq || rs[1].DedupeKey != "receipt:i1#1" || rs[1].DedupeKey != store.ReceiptKey("i1", 1) ||
		!bytes.Equal(rs[1].Payload, []byte("gave up")) {
		t.Fatalf("receipts = %+v, want the first and the operator's under receipt:i1#1", rs)
	}
	st := f.effectStatus("i1")
	if st.State != vocab.EffectDone || st.Retries != 1 || st.RetryReason != "upstream back" || !st.Resolved || st.ResolveReason != "still nothing" ||
		st.InboxSeq != seq {
		t.Fatalf("EffectStatus = %+v", st)
	}
	// The operator's timeout is retryable like an adapter's, and the retry
	// clears the operator's mark with the receipt.
	st, err = f.s.RetryEffect(bg, "i1", "try once more")
	must(t, err, "RetryEffect of a resolved timeout")
	if st.State != vocab.EffectPending || st.Retries != 2 || st.Resolved || st.ResolveReason != "" || st.Receipt != nil {
		t.Fatalf("RetryEffect of a resolved effect = %+v, want pending with the operator's mark cleared", st)
	}
	if got := f.effectStatus("i1"); got.Resolved || got.ResolveReason != "" {
		t.Fatalf("EffectStatus after the retry = %+v", got)
	}
	it := f.claimOne("adapter", "i1")
	seq3, _ := f.complete("i1", it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	if rs := f.receipts("w"); len(rs) != 3 || rs[2].Seq != seq3 || rs[2].DedupeKey != store.ReceiptKey("i1", 2) {
		t.Fatalf("receipts = %+v, want the second retry's under %s", rs, store.ReceiptKey("i1", 2))
	}
	if got := f.effectStatus("i1"); got.Resolved {
		t.Fatalf("an adapter's completion after a retry reads as an operator's: %+v", got)
	}
}

// As Complete: the receipt answers the world's own request, so it lands
// whatever the world's status, archived included (for an effect claimed
// before the archive: archiving withdraws the unclaimed ones).
func testResolveArchived(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1", "i2")
	f.setStatus("w", store.WorldPaused, "maintenance")
	if _, dup := f.resolve("i1", vocab.Receipt{Status: vocab.ReceiptOK}, "paused world"); dup {
		t.Fatal("Resolve into a paused world reported dup")
	}
	f.claimOne("adapter", "i2")
	f.setStatus("w", store.WorldArchived, "retired")
	seq, dup := f.resolve("i2", vocab.Receipt{Status: vocab.ReceiptOK}, "archived world")
	if dup {
		t.Fatal("Resolve into an archived world reported dup")
	}
	if rs := f.receipts("w"); len(rs) != 2 || rs[1].Seq != seq {
		t.Fatalf("receipts = %+v, want both, the second at %d", rs, seq)
	}
}

// FuzzResolve fuzzes an operator's Resolve: any input either resolves the
// one inflight effect (its receipt in the inbox byte for byte, the reason
// recorded, a repeat dup), is ErrNotFound for another hash, or is a typed
// ErrInvalid that writes nothing; nothing panics. Backends call it from a
// Fuzz function with their factory.
func FuzzResolve(f *testing.F, open Factory) {
	f.Add("i1", "ok", []byte("done by hand"), "manual step")
	f.Add("i1", "timeout", []byte(nil), "")
	f.Add("other", "error", []byte{0xff}, "x")
	f.Add("i1", "maybe", []byte(nil), "")
	f.Add("", "ok", []byte(nil), "")
	f.Add("i1", "ok", []byte(nil), "r\xff")
	f.Fuzz(func(t *testing.T, hash, status string, payload []byte, reason string) {
		x := setup(t, open)
		e := x.leased("w", "A")
		x.publish("w", e, "i1")
		c := x.claimOne("adapter", "i1").ClaimOf()
		r := vocab.Receipt{Status: vocab.ReceiptStatus(status), Payload: payload}
		seq, dup, err := x.s.Resolve(bg, hash, r, reason)
		if err != nil {
			var se *store.Error
			if !errors.As(err, &se) || !(errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrNotFound) && hash != "i1") {
				t.Fatalf("Resolve(%q, %+v, %q) = %T %v, want ErrInvalid or, for another hash, ErrNotFound", hash, r, reason, err, err)
			}
			if n := len(x.inbox("w")); n != 0 {
				t.Fatalf("a refused Resolve enqueued %d items", n)
			}
			if st := x.effectStatus("i1"); st.State != vocab.EffectInflight || st.Resolved {
				t.Fatalf("a refused Resolve changed the effect: %+v", st)
			}
			return
		}
		if hash != "i1" || dup {
			t.Fatalf("Resolve(%q) = %d dup %v, want only i1 resolved, once", hash, seq, dup)
		}
		rs := x.receipts("w")
		if len(rs) != 1 || rs[0].Seq != seq || !bytes.Equal(rs[0].Payload, payload) {
			t.Fatalf("receipts = %+v, want the payload at %d", rs, seq)
		}
		if st := x.effectStatus("i1"); !st.Resolved || st.ResolveReason != reason || st.Receipt == nil || st.Receipt.Status != r.Status {
			t.Fatalf("EffectStatus = %+v, want the operator's receipt and reason %q", st, reason)
		}
		if again, dup := x.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK}); !dup || again != seq {
			t.Fatalf("the holder's Complete = %d dup %v, want %d true", again, dup, seq)
		}
	})
}
