package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Claims (issue 7 items 4 and 12): Complete and Fire present the claim they
// were handed, so a late worker learns it lost the item; a timer never
// fires before its due time; delivery stays exactly once whatever happens.
// Adapters claim by kind, and an operator may retry an effect that ended in
// an error.
func claimTests() []testCase {
	return []testCase{
		{"FireBeforeDueIsErrNotDueAndDeliversNothing", testFireBeforeDue},
		{"StaleClaimIsErrClaimLostAfterReapAndReclaim", testStaleClaims},
		{"ReapWithoutReclaimKeepsTheLatestClaim", testReapKeepsClaim},
		{"ClaimByKindReturnsOnlyThoseKinds", testClaimByKind},
		{"RetryEffectDeliversASecondReceipt", testRetryEffect},
		{"RetryEffectOnlyAfterAnErrorOrTimeout", testRetryNotRetryable},
	}
}

// A timer that is not due has never been claimed, so any claim is wrong as
// well: ErrNotDue is the answer (checked first), and nothing is delivered.
func testFireBeforeDue(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now().Add(time.Hour), []byte("p")), "Schedule")
	for _, c := range []vocab.Claim{{Worker: "tw", Attempt: 1}, {Worker: "other", Attempt: 3}} {
		_, _, err := f.s.Fire(bg, "t1", c)
		wantErr(t, err, store.ErrNotDue, "Fire an hour early")
	}
	if n := len(f.inbox("w")); n != 0 {
		t.Fatalf("an early Fire delivered: %d items", n)
	}
	if ts, err := f.s.ListTimers(bg, "w", 10); err != nil || len(ts) != 1 || ts[0].State != store.TimerScheduled {
		t.Fatalf("timers after an early Fire = %+v, %v", ts, err)
	}
	f.advance(time.Hour + margin)
	c := f.claimTimer("tw", "t1").ClaimOf()
	if seq, dup := f.fire("t1", c); dup || seq == 0 {
		t.Fatalf("Fire when due = %d dup %v", seq, dup)
	}
}

func testStaleClaims(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), []byte("tick")), "Schedule")
	f.advance(margin)
	ec1 := f.claimOne("slow", "i1").ClaimOf()
	tc1 := f.claimTimer("slow", "t1").ClaimOf()
	f.advance(claimTTL + margin)
	if n, err := f.s.ReapEffects(bg); err != nil || n != 1 {
		t.Fatalf("ReapEffects = %d, %v", n, err)
	}
	if n, err := f.s.ReapTimers(bg); err != nil || n != 1 {
		t.Fatalf("ReapTimers = %d, %v", n, err)
	}
	ec2 := f.claimOne("fast", "i1").ClaimOf()
	tc2 := f.claimTimer("fast", "t1").ClaimOf()
	if ec2.Attempt != ec1.Attempt+1 || tc2.Attempt != tc1.Attempt+1 {
		t.Fatalf("reclaims at attempts %d and %d, want %d and %d", ec2.Attempt, tc2.Attempt, ec1.Attempt+1, tc1.Attempt+1)
	}
	_, _, err := f.s.Complete(bg, "i1", ec1, vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, err, store.ErrClaimLost, "Complete under a reclaimed claim")
	_, _, err = f.s.Fire(bg, "t1", tc1)
	wantErr(t, err, store.ErrClaimLost, "Fire under a reclaimed claim")
	// Right attempt, wrong worker (and the reverse) is not the claim either.
	_, _, err = f.s.Complete(bg, "i1", vocab.Claim{Worker: "slow", Attempt: ec2.Attempt}, vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, err, store.ErrClaimLost, "Complete by another worker at the latest attempt")
	_, _, err = f.s.Fire(bg, "t1", vocab.Claim{Worker: "fast", Attempt: tc1.Attempt})
	wantErr(t, err, store.ErrClaimLost, "Fire by the latest worker at an old attempt")
	if n := len(f.inbox("w")); n != 0 {
		t.Fatalf("lost claims delivered %d items", n)
	}
	seq, dup := f.complete("i1", ec2, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("r")})
	tseq, tdup := f.fire("t1", tc2)
	if dup || tdup {
		t.Fatal("the latest claims' deliveries reported dup")
	}
	// Exactly once: every later attempt, with any claim, answers the first
	// delivery's seq with dup=true and delivers nothing.
	for _, c := range []vocab.Claim{ec1, ec2, {Worker: "x", Attempt: 99}} {
		if s, d := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptError}); !d || s != seq {
			t.Fatalf("Complete again with %+v = %d dup %v, want %d true", c, s, d, seq)
		}
	}
	for _, c := range []vocab.Claim{tc1, tc2, {Worker: "x", Attempt: 99}} {
		if s, d := f.fire("t1", c); !d || s != tseq {
			t.Fatalf("Fire again with %+v = %d dup %v, want %d true", c, s, d, tseq)
		}
	}
	if n := len(f.inbox("w")); n != 2 {
		t.Fatalf("%d inbox items, want the receipt and the firing", n)
	}
}

// After a reap nobody followed with a claim, the reaped claim is still the
// latest: the slow worker's result is used (reaps keep ClaimedBy and
// Attempt, and only a new claim changes them).
func testReapKeepsClaim(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("slow", "i1").ClaimOf()
	f.advance(claimTTL + margin)
	if n, err := f.s.ReapEffects(bg); err != nil || n != 1 {
		t.Fatalf("ReapEffects = %d, %v", n, err)
	}
	items, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if len(items) != 1 || items[0].State != vocab.EffectPending || items[0].ClaimedBy != "slow" || items[0].Attempt != c.Attempt || !items[0].ClaimExpires.IsZero() {
		t.Fatalf("reaped effect = %+v, want pending with the latest claim kept", items)
	}
	if _, dup := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK}); dup {
		t.Fatal("the reaped claim's Complete reported dup")
	}
}

func testClaimByKind(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	_, err := f.s.Publish(bg, "w", e, []vocab.Intent{
		{IntentHash: "h1", Kind: "http.request"}, {IntentHash: "m1", Kind: "mail.send"},
		{IntentHash: "h2", Kind: "http.request"}, {IntentHash: "p1", Kind: "payment.charge"},
	})
	must(t, err, "Publish")
	_, err = f.s.Claim(bg, "adapter", nil, 10, claimTTL)
	wantErr(t, err, store.ErrInvalid, "Claim without kinds")
	_, err = f.s.Claim(bg, "adapter", []string{}, 10, claimTTL)
	wantErr(t, err, store.ErrInvalid, "Claim with an empty kinds list")
	got, err := f.s.Claim(bg, "mailer", []string{"mail.send", "payment.charge"}, 10, claimTTL)
	must(t, err, "Claim mail and payments")
	if len(got) != 2 || got[0].IntentHash != "m1" || got[1].IntentHash != "p1" {
		t.Fatalf("Claim [mail.send payment.charge] = %+v, want m1 then p1", got)
	}
	got, err = f.s.Claim(bg, "web", []string{"http.request"}, 1, claimTTL)
	must(t, err, "Claim http")
	if len(got) != 1 || got[0].IntentHash != "h1" || got[0].Kind != "http.request" {
		t.Fatalf("Claim [http.request] n=1 = %+v, want h1", got)
	}
	if got, _ := f.s.Claim(bg, "other", []string{"unknown.kind"}, 10, claimTTL); len(got) != 0 {
		t.Fatalf("Claim of a kind nobody published = %+v", got)
	}
	if got := f.claim("web", 10); len(got) != 1 || got[0].IntentHash != "h2" {
		t.Fatalf("the rest of http.request = %+v, want h2", got)
	}
}

func testRetryEffect(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c1 := f.claimOne("adapter", "i1").ClaimOf()
	seq1, _ := f.complete("i1", c1, vocab.Receipt{Status: vocab.ReceiptError, Payload: []byte("503")})
	st, err := f.s.RetryEffect(bg, "i1", "upstream fixed")
	must(t, err, "RetryEffect")
	if st.IntentHash != "i1" || st.State != vocab.EffectPending || st.Retries != 1 || st.RetryReason != "upstream fixed" || st.Receipt != nil {
		t.Fatalf("RetryEffect = %+v, want pending, Retries 1, the reason, no receipt", st)
	}
	if got := f.effectStatus("i1"); got.State != vocab.EffectPending || got.Retries != 1 || got.RetryReason != "upstream fixed" {
		t.Fatalf("EffectStatus after retry = %+v", got)
	}
	// The attempt that already ended cannot pass as the retry's.
	_, _, err = f.s.Complete(bg, "i1", c1, vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, err, store.ErrClaimLost, "Complete of a retried effect under the finished attempt's claim")
	// Publishing the same intent again queues nothing: it is the same one.
	if n := f.publish("w", e, "i1"); n != 0 {
		t.Fatalf("re-publishing a retried intent queued %d", n)
	}
	it := f.claimOne("adapter", "i1")
	if it.Retries != 1 || it.Attempt != c1.Attempt+1 {
		t.Fatalf("retried claim = %+v, want Retries 1 at attempt %d", it, c1.Attempt+1)
	}
	seq2, dup := f.complete("i1", it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("200")})
	if dup || seq2 == seq1 {
		t.Fatalf("the retry's Complete = %d dup %v, want a new receipt after %d", seq2, dup, seq1)
	}
	items := f.inbox("w")
	if len(items) != 2 || items[0].DedupeKey != store.ReceiptKey("i1", 0) || items[1].DedupeKey != store.ReceiptKey("i1", 1) ||
		items[1].Seq != seq2 || !bytes.Equal(items[1].Payload, []byte("200")) {
		t.Fatalf("inbox = %+v, want the first receipt and the retry's under ReceiptKey(i1, 1)", items)
	}
	if st := f.effectStatus("i1"); st.State != vocab.EffectDone || st.InboxSeq != seq2 || st.Receipt == nil || st.Receipt.Status != vocab.ReceiptOK || st.Retries != 1 {
		t.Fatalf("EffectStatus after the retry completed = %+v", st)
	}
	// A timed-out effect is retryable too.
	f.publish("w", e, "i2")
	c := f.claimOne("adapter", "i2").ClaimOf()
	f.complete("i2", c, vocab.Receipt{Status: vocab.ReceiptTimeout})
	if st, err := f.s.RetryEffect(bg, "i2", ""); err != nil || st.State != vocab.EffectPending {
		t.Fatalf("RetryEffect of a timeout = %+v, %v", st, err)
	}
}

func testRetryNotRetryable(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "ok", "inflight", "pending")
	c := f.claimOne("adapter", "ok").ClaimOf()
	f.complete("ok", c, vocab.Receipt{Status: vocab.ReceiptOK})
	f.claimOne("adapter", "inflight") // queue order: "pending" stays pending
	for _, h := range []string{"ok", "inflight", "pending"} {
		before := f.effectStatus(h)
		_, err := f.s.RetryEffect(bg, h, "why not")
		wantErr(t, err, store.ErrNotRetryable, "RetryEffect of "+string(before.State)+" "+h)
		if after := f.effectStatus(h); after.State != before.State || after.Retries != 0 || after.RetryReason != "" {
			t.Fatalf("a refused retry changed %s: %+v", h, after)
		}
	}
	_, err := f.s.RetryEffect(bg, "never", "")
	wantErr(t, err, store.ErrNotFound, "RetryEffect of an unknown intent")
}
