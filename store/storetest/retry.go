package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// An effect's retry schedule (RetryLater, NextRetry): a failed execution
// hands its claim back with a time, on the store's clock, before which no
// claim takes it; the time and the count of failures are durable, so the
// schedule outlives the worker that made it.
func retryTests() []testCase {
	return []testCase{
		{"RetryLaterHoldsTheEffectUntilItsRetryTime", testRetryLater},
		{"RetryLaterIsTheLatestClaimsAndIdempotent", testRetryLaterClaims},
		{"NextRetryIsTheWaitOnTheStoresClock", testNextRetry},
		{"OperatorRetryClearsTheRetrySchedule", testRetryScheduleClearedByOperator},
		{"IntentRetryPolicyIsKeptAndHandedToEveryClaim", testIntentRetryPolicyKept},
		{"RetryLaterOfAnArchivedWorldsEffectWithdrawsIt", testRetryLaterArchived},
	}
}

func testRetryLater(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1", "i2")
	c := f.claimOne("adapter-1", "i1").ClaimOf()
	hint := f.watch(store.TopicEffects).C
	must(t, f.s.RetryLater(bg, "i1", c, 10*time.Second, "connection refused"), "RetryLater")
	awaitHint(t, hint, "effects", func() {})
	st := f.effectStatus("i1")
	if st.State != vocab.EffectPending || st.Failures != 1 || st.LastError != "connection refused" || st.Attempts != 1 {
		t.Fatalf("EffectStatus after RetryLater = %+v, want pending, 1 failure, its error, 1 attempt", st)
	}
	if now := f.now(); !near(st.RetryAt, now.Add(10*time.Second), 2*time.Second) {
		t.Fatalf("RetryAt %v, want about the store's now %v + 10s", st.RetryAt, now)
	}
	// Not before its time: i2, behind it in queue order, is claimable.
	if got := f.claim("adapter-2", 5); len(got) != 1 || got[0].IntentHash != "i2" {
		t.Fatalf("Claim before the retry time = %+v, want i2 alone", got)
	}
	f.advance(9 * time.Second)
	if got := f.claim("adapter-2", 5); len(got) != 0 {
		t.Fatalf("Claim a second before the retry time = %+v, want nothing", got)
	}
	f.advance(2 * time.Second)
	got := f.claim("adapter-2", 5)
	if len(got) != 1 || got[0].IntentHash != "i1" || got[0].Attempt != 2 || got[0].Failures != 1 {
		t.Fatalf("Claim after the retry time = %+v, want i1 at attempt 2 with 1 failure", got)
	}
	// A second failure counts on.
	must(t, f.s.RetryLater(bg, "i1", got[0].ClaimOf(), time.Second, "reset"), "RetryLater again")
	f.advance(2 * time.Second)
	again := f.claim("adapter-1", 5)
	if len(again) != 1 || again[0].Failures != 2 {
		t.Fatalf("Claim after the second retry time = %+v, want i1 with 2 failures", again)
	}
	f.complete("i1", again[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	if st := f.effectStatus("i1"); st.State != vocab.EffectDone || st.Failures != 2 {
		t.Fatalf("EffectStatus once done = %+v, want done with its 2 failures kept", st)
	}
	// A zero delay is a release that counts the failure.
	f.publish("w", e, "i3")
	c3 := f.claimOne("adapter-1", "i3").ClaimOf()
	must(t, f.s.RetryLater(bg, "i3", c3, 0, ""), "RetryLater with no delay")
	if got := f.claim("adapter-1", 5); len(got) != 1 || got[0].IntentHash != "i3" || got[0].Failures != 1 {
		t.Fatalf("Claim after a zero-delay RetryLater = %+v, want i3 with 1 failure", got)
	}
}

func testRetryLaterClaims(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter-1", "i1").ClaimOf()
	wantErr(t, f.s.RetryLater(bg, "i1", vocab.Claim{Worker: "adapter-2", Attempt: c.Attempt}, time.Second, "x"), store.ErrClaimLost, "RetryLater by another worker")
	if st := f.effectStatus("i1"); st.State != vocab.EffectInflight || st.Failures != 0 {
		t.Fatalf("a refused RetryLater changed the effect: %+v", st)
	}
	must(t, f.s.RetryLater(bg, "i1", c, 10*time.Second, "first"), "RetryLater")
	at := f.effectStatus("i1").RetryAt
	f.advance(time.Second)
	// Its answer lost, the call is made again: nothing more happens.
	must(t, f.s.RetryLater(bg, "i1", c, 10*time.Second, "second"), "RetryLater retried")
	if st := f.effectStatus("i1"); st.Failures != 1 || !st.RetryAt.Equal(at) || st.LastError != "first" {
		t.Fatalf("a retried RetryLater changed the schedule: %+v (RetryAt was %v)", st, at)
	}
	f.advance(10 * time.Second)
	again := f.claimOne("adapter-2", "i1")
	wantErr(t, f.s.RetryLater(bg, "i1", c, time.Second, "x"), store.ErrClaimLost, "RetryLater by a superseded claim")
	f.complete("i1", again.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, f.s.RetryLater(bg, "i1", again.ClaimOf(), time.Second, "x"), store.ErrClaimLost, "RetryLater of a done intent")
	wantErr(t, f.s.RetryLater(bg, "never", c, time.Second, "x"), store.ErrNotFound, "RetryLater of an unknown intent")
	wantErr(t, f.s.RetryLater(bg, "i1", c, -time.Second, "x"), store.ErrInvalid, "RetryLater with a negative delay")
	wantErr(t, f.s.RetryLater(bg, "i1", c, store.MaxTTL+time.Second, "x"), store.ErrInvalid, "RetryLater past MaxTTL")
}

func testNextRetry(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	if _, ok, err := f.s.NextRetry(bg, []string{effectKind}); err != nil || ok {
		t.Fatalf("NextRetry of an empty queue = %v, %v; want none", ok, err)
	}
	f.publish("w", e, "i1", "i2", "i3")
	items := f.claim("adapter-1", 3)
	if len(items) != 3 {
		t.Fatalf("claimed %d", len(items))
	}
	must(t, f.s.RetryLater(bg, items[0].IntentHash, items[0].ClaimOf(), 30*time.Second, ""), "RetryLater 30s")
	must(t, f.s.RetryLater(bg, items[1].IntentHash, items[1].ClaimOf(), 10*time.Second, ""), "RetryLater 10s")
	wait, ok, err := f.s.NextRetry(bg, []string{effectKind})
	if err != nil || !ok || wait <= 8*time.Second || wait > 10*time.Second {
		t.Fatalf("NextRetry = %v, %v, %v; want the nearer retry, about 10s", wait, ok, err)
	}
	if _, ok, err := f.s.NextRetry(bg, []string{"other.kind"}); err != nil || ok {
		t.Fatalf("NextRetry of another kind = %v, %v; want none", ok, err)
	}
	f.advance(15 * time.Second)
	// The 10s retry is due (claimable, not waiting): the 30s one is next.
	if wait, ok, err = f.s.NextRetry(bg, []string{effectKind}); err != nil || !ok || wait <= 13*time.Second || wait > 15*time.Second {
		t.Fatalf("NextRetry once the first is due = %v, %v, %v; want about 15s", wait, ok, err)
	}
	f.advance(20 * time.Second)
	if _, ok, err := f.s.NextRetry(bg, []string{effectKind}); err != nil || ok {
		t.Fatalf("NextRetry once both are due = %v, %v; want none", ok, err)
	}
	wantErr(t, func() error { _, _, err := f.s.NextRetry(bg, nil); return err }(), store.ErrInvalid, "NextRetry of no kind")
}

func testRetryScheduleClearedByOperator(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter-1", "i1").ClaimOf()
	must(t, f.s.RetryLater(bg, "i1", c, time.Second, "503"), "RetryLater")
	f.advance(2 * time.Second)
	c = f.claimOne("adapter-1", "i1").ClaimOf()
	f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptError})
	st, err := f.s.RetryEffect(bg, "i1", "upstream fixed")
	must(t, err, "RetryEffect")
	if st.Failures != 0 || !st.RetryAt.IsZero() || st.LastError != "" {
		t.Fatalf("RetryEffect kept the retry schedule: %+v", st)
	}
	if got := f.claim("adapter-1", 1); len(got) != 1 || got[0].Failures != 0 {
		t.Fatalf("Claim after RetryEffect = %+v, want i1 with no failures", got)
	}
}

func testIntentRetryPolicyKept(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	in := intents("i1", "i2")
	in[0].Retry = []byte{0xa1, 0x61, 0x6d, 0x05} // {"m": 5}
	if n, err := f.s.Publish(bg, "w", e, in); err != nil || n != 2 {
		t.Fatalf("Publish = %d, %v", n, err)
	}
	items := f.claim("adapter-1", 2)
	if len(items) != 2 || !bytes.Equal(items[0].Retry, in[0].Retry) || items[1].Retry != nil {
		t.Fatalf("claimed %+v, want i1 with its policy and i2 with none (nil)", items)
	}
	must(t, f.s.RetryLater(bg, "i1", items[0].ClaimOf(), time.Second, ""), "RetryLater")
	f.advance(2 * time.Second)
	if again := f.claimOne("adapter-1", "i1"); !bytes.Equal(again.Retry, in[0].Retry) {
		t.Fatalf("the policy after a retry = %x, want %x", again.Retry, in[0].Retry)
	}
	listed, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if len(listed) != 2 || !bytes.Equal(listed[0].Retry, in[0].Retry) {
		t.Fatalf("ListEffects = %+v, want the policy kept", listed)
	}
	big := intents("i3")
	big[0].Retry = make([]byte, store.MaxRetryPolicyBytes+1)
	_, err = f.s.Publish(bg, "w", e, big)
	wantErr(t, err, store.ErrInvalid, "Publish of an intent whose policy is over its limit")
}

func testRetryLaterArchived(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter-1", "i1").ClaimOf()
	f.setStatus("w", store.WorldArchived, "done")
	must(t, f.s.RetryLater(bg, "i1", c, time.Second, "x"), "RetryLater of an archived world's effect")
	if st := f.effectStatus("i1"); st.State != vocab.EffectWithdrawn {
		t.Fatalf("EffectStatus = %+v, want withdrawn", st)
	}
}
