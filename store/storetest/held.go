package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Held effects (HoldEffect, ReleaseHeld, HoldOpenEffects, ReleaseAllHeld):
// an effect that may already have run is kept from every adapter until an
// operator releases it (it runs again) or resolves it (the receipt the
// external system gave). The hold revokes an inflight claim, so nothing
// an execution under way reports moves the effect on; the reapers, the
// retry schedule and the operator's retry leave a held effect alone; an
// archive or a Commit's Withdraw withdraws it as a pending one.
func heldTests() []testCase {
	return []testCase{
		{"HeldEffectIsNeverClaimedAndIsListedAsHeld", testHeldNotClaimed},
		{"HoldOfAnInflightEffectRevokesItsClaim", testHoldRevokesClaim},
		{"ReapersLeaveAHeldEffectAlone", testHeldNotReaped},
		{"HoldAndReleaseAreIdempotentAndRefuseEndedEffects", testHoldIdempotent},
		{"ReleaseMakesAHeldEffectClaimableAtOnce", testReleaseHeld},
		{"ResolveSettlesAHeldEffectButRetryDoesNot", testResolveHeld},
		{"ArchiveAndWithdrawTakeHeldEffects", testHeldWithdrawn},
		{"HoldOpenEffectsHoldsEveryOpenEffectAndReleaseAllHeldReleasesThem", testHoldAll},
		{"ReleaseOfAHeldEffectOfAnArchivedWorldWithdrawsIt", testReleaseHeldArchived},
		{"HoldAndReleaseRetriedAfterALostAnswerAnswerTruly", testHeldRetried},
	}
}

func (f *fx) hold(hash, reason string) store.EffectStatus {
	f.t.Helper()
	st, err := f.s.HoldEffect(bg, hash, reason)
	must(f.t, err, "HoldEffect "+hash)
	return st
}

func (f *fx) releaseHeld(hash, reason string) store.EffectStatus {
	f.t.Helper()
	st, err := f.s.ReleaseHeld(bg, hash, reason)
	must(f.t, err, "ReleaseHeld "+hash)
	return st
}

func (f *fx) depths() store.QueueDepths {
	f.t.Helper()
	d, err := f.s.QueueDepths(bg)
	must(f.t, err, "QueueDepths")
	return d
}

func testHeldNotClaimed(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1", "i2")
	before := f.now()
	st := f.hold("i1", "restored from a backup")
	if st.State != vocab.EffectHeld || st.HoldReason != "restored from a backup" || st.HeldAt.Before(before.Add(-time.Second)) {
		t.Fatalf("HoldEffect = %+v, want held with its reason and the store's time (>= %v)", st, before)
	}
	if got := f.effectStatus("i1"); got.State != vocab.EffectHeld || got.HoldReason != st.HoldReason || !got.HeldAt.Equal(st.HeldAt) {
		t.Fatalf("EffectStatus of a held effect = %+v, want what HoldEffect answered %+v", got, st)
	}
	if got := f.claim("adapter", 5); len(got) != 1 || got[0].IntentHash != "i2" {
		t.Fatalf("Claim with i1 held = %+v, want i2 alone", got)
	}
	if got := f.claim("adapter", 5); len(got) != 0 {
		t.Fatalf("Claim again = %+v, want nothing (i1 is held)", got)
	}
	if d := f.depths(); d.EffectsHeld != 1 || d.EffectsPending != 0 || d.EffectsInflight != 1 {
		t.Fatalf("QueueDepths = %+v, want 1 held, 0 pending, 1 inflight", d)
	}
	open1, err := f.s.ListEffects(bg, "w", 0, 10)
	must(t, err, "ListEffects")
	if len(open1) != 2 || open1[0].IntentHash != "i1" || open1[0].State != vocab.EffectHeld ||
		open1[0].HoldReason != "restored from a backup" || !open1[0].HeldAt.Equal(st.HeldAt) {
		t.Fatalf("ListEffects = %+v, want i1 held (with its reason and time) and i2", open1)
	}
	held, err := f.s.QueryEffects(bg, store.EffectFilter{States: []vocab.EffectState{vocab.EffectHeld}, Limit: 10})
	must(t, err, "QueryEffects held")
	if len(held) != 1 || held[0].IntentHash != "i1" || held[0].HoldReason != "restored from a backup" {
		t.Fatalf("QueryEffects(held) = %+v, want i1 alone", held)
	}
	// A held effect waits for no retry time: NextRetry knows nothing of it.
	f.publish("w", e, "i3")
	c3 := f.claimOne("adapter", "i3").ClaimOf()
	must(t, f.s.RetryLater(bg, "i3", c3, 10*time.Second, "503"), "RetryLater")
	f.hold("i3", "operator")
	if _, ok, err := f.s.NextRetry(bg, []string{effectKind}); err != nil || ok {
		t.Fatalf("NextRetry with the only waiting effect held = ok %v, %v; want none", ok, err)
	}
	f.advance(20 * time.Second)
	if got := f.claim("adapter", 5); len(got) != 0 {
		t.Fatalf("Claim after the held effect's retry time = %+v, want nothing", got)
	}
}

func testHoldRevokesClaim(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "a", "b", "c")
	ca := f.claimOne("adapter", "a").ClaimOf()
	cb := f.claimOne("adapter", "b").ClaimOf()
	cc := f.claimOne("adapter", "c").ClaimOf()
	for _, h := range []string{"a", "b", "c"} {
		if st := f.hold(h, "stop"); st.State != vocab.EffectHeld {
			t.Fatalf("HoldEffect(%s) of an inflight effect = %+v, want held", h, st)
		}
	}
	_, _, err := f.s.Complete(bg, "a", ca, vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, err, store.ErrClaimLost, "Complete of a held effect by its old claim")
	wantErr(t, f.s.ReleaseEffect(bg, "b", cb), store.ErrClaimLost, "ReleaseEffect of a held effect by its old claim")
	wantErr(t, f.s.RetryLater(bg, "c", cc, 0, "x"), store.ErrClaimLost, "RetryLater of a held effect by its old claim")
	res, err := f.s.CompleteMany(bg, []vocab.Completion{{IntentHash: "a", Claim: ca, Receipt: vocab.Receipt{Status: vocab.ReceiptOK}}})
	must(t, err, "CompleteMany")
	wantErr(t, res[0].Err, store.ErrClaimLost, "CompleteMany of a held effect by its old claim")
	for _, h := range []string{"a", "b", "c"} {
		if st := f.effectStatus(h); st.State != vocab.EffectHeld || st.Receipt != nil {
			t.Fatalf("EffectStatus(%s) after its old claim's calls = %+v, want held, no receipt", h, st)
		}
	}
	if items := f.inbox("w"); len(items) != 0 {
		t.Fatalf("inbox after the refused completions = %+v, want empty", items)
	}
	// Released, the next claim is the next attempt, and only it completes.
	f.releaseHeld("a", "ran nowhere")
	again := f.claimOne("adapter", "a")
	if again.Attempt != ca.Attempt+1 {
		t.Fatalf("claim after the release = attempt %d, want %d", again.Attempt, ca.Attempt+1)
	}
	_, _, err = f.s.Complete(bg, "a", ca, vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, err, store.ErrClaimLost, "Complete by the claim the hold revoked, after a new claim")
	f.complete("a", again.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
}

func testHeldNotReaped(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "ttl")
	f.claimOne("adapter", "ttl")
	f.hold("ttl", "stop")
	f.beat("node", "inc-1")
	f.publish("w", e, "orphan")
	f.claimFor("adapter", "node", "inc-1")
	f.hold("orphan", "stop")
	f.advance(claimTTL + time.Second)
	n, err := f.s.ReapEffects(bg)
	must(t, err, "ReapEffects")
	if n != 0 {
		t.Fatalf("ReapEffects = %d, want 0 (the expired claim was revoked by the hold)", n)
	}
	requeued, err := f.s.RetireWorker(bg, "node", "inc-1")
	must(t, err, "RetireWorker")
	n, err = f.s.ReapOrphans(bg)
	must(t, err, "ReapOrphans")
	if requeued != 0 || n != 0 {
		t.Fatalf("RetireWorker, ReapOrphans = %d, %d, want 0, 0 (the hold revoked the claim)", requeued, n)
	}
	for _, h := range []string{"ttl", "orphan"} {
		if st := f.effectStatus(h); st.State != vocab.EffectHeld {
			t.Fatalf("EffectStatus(%s) after the reapers = %s, want held", h, st.State)
		}
	}
	if got := f.claim("adapter", 5); len(got) != 0 {
		t.Fatalf("Claim after the reapers = %+v, want nothing", got)
	}
}

func testHoldIdempotent(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "h", "p", "d", "x")
	first := f.hold("h", "first")
	f.advance(2 * time.Second)
	if again := f.hold("h", "second"); again.HoldReason != "first" || !again.HeldAt.Equal(first.HeldAt) {
		t.Fatalf("HoldEffect of a held effect = %+v, want the first hold kept (%+v)", again, first)
	}
	if st := f.releaseHeld("p", "nothing to release"); st.State != vocab.EffectPending || st.ReleaseReason != "" {
		t.Fatalf("ReleaseHeld of a pending effect = %+v, want pending, unchanged", st)
	}
	items := f.claim("adapter", 2)
	if len(items) != 2 || items[0].IntentHash != "p" || items[1].IntentHash != "d" {
		t.Fatalf("Claim = %+v, want p and d", items)
	}
	if st := f.releaseHeld("p", "nothing"); st.State != vocab.EffectInflight {
		t.Fatalf("ReleaseHeld of an inflight effect = %+v, want inflight, unchanged", st)
	}
	f.complete("d", items[1].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	_, err := f.s.HoldEffect(bg, "d", "late")
	wantErr(t, err, store.ErrEffectEnded, "HoldEffect of a done effect")
	_, err = f.s.ReleaseHeld(bg, "d", "late")
	wantErr(t, err, store.ErrEffectEnded, "ReleaseHeld of a done effect")
	_, err = f.s.Commit(bg, "w", e, store.CommitBatch{Withdraw: []string{"x"}})
	must(t, err, "Commit withdrawing x")
	_, err = f.s.HoldEffect(bg, "x", "late")
	wantErr(t, err, store.ErrEffectEnded, "HoldEffect of a withdrawn effect")
	_, err = f.s.ReleaseHeld(bg, "x", "late")
	wantErr(t, err, store.ErrEffectEnded, "ReleaseHeld of a withdrawn effect")
	_, err = f.s.HoldEffect(bg, "unknown", "r")
	wantErr(t, err, store.ErrNotFound, "HoldEffect of an unknown effect")
	_, err = f.s.ReleaseHeld(bg, "unknown", "r")
	wantErr(t, err, store.ErrNotFound, "ReleaseHeld of an unknown effect")
	if st := f.effectStatus("d"); st.State != vocab.EffectDone || st.HoldReason != "" {
		t.Fatalf("EffectStatus(d) after the refused hold = %+v, want done, never held", st)
	}
}

func testReleaseHeld(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1").ClaimOf()
	must(t, f.s.RetryLater(bg, "i1", c, time.Hour, "503"), "RetryLater")
	held := f.hold("i1", "restore")
	hint := f.watch(store.TopicEffects).C
	st := f.releaseHeld("i1", "the provider has no record of it")
	awaitHint(t, hint, "effects", func() {})
	if st.State != vocab.EffectPending || st.ReleaseReason != "the provider has no record of it" ||
		st.HoldReason != "restore" || !st.HeldAt.Equal(held.HeldAt) || !st.RetryAt.IsZero() || st.Failures != 1 {
		t.Fatalf("ReleaseHeld = %+v, want pending, claimable at once, its hold and release recorded, its failures kept", st)
	}
	got := f.claim("adapter", 5)
	if len(got) != 1 || got[0].IntentHash != "i1" || got[0].Attempt != 2 {
		t.Fatalf("Claim after the release = %+v, want i1 at attempt 2 at once (the retry hour not waited)", got)
	}
	if d := f.depths(); d.EffectsHeld != 0 {
		t.Fatalf("QueueDepths.EffectsHeld after the release = %d, want 0", d.EffectsHeld)
	}
}

func testResolveHeld(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "charge")
	c := f.claimOne("adapter", "charge").ClaimOf()
	f.hold("charge", "restore")
	_, err := f.s.RetryEffect(bg, "charge", "operator")
	wantErr(t, err, store.ErrNotRetryable, "RetryEffect of a held effect")
	seq, dup, err := f.s.Resolve(bg, "charge", vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("ch_123")}, "charged once, per the provider")
	must(t, err, "Resolve of a held effect")
	if dup {
		t.Fatal("Resolve of a held effect answered dup=true")
	}
	st := f.effectStatus("charge")
	if st.State != vocab.EffectDone || !st.Resolved || st.ResolveReason != "charged once, per the provider" || st.InboxSeq != seq ||
		st.HoldReason != "restore" {
		t.Fatalf("EffectStatus after Resolve = %+v, want done by the operator with its hold kept", st)
	}
	items := f.inbox("w")
	if len(items) != 1 || items[0].Kind != vocab.KindReceipt || string(items[0].Payload) != "ch_123" {
		t.Fatalf("inbox after Resolve = %+v, want the operator's receipt", items)
	}
	if _, dup, err := f.s.Complete(bg, "charge", c, vocab.Receipt{Status: vocab.ReceiptOK}); err != nil || !dup {
		t.Fatalf("Complete after Resolve = dup %v, %v; want dup=true", dup, err)
	}
}

func testHeldWithdrawn(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "arch", "gone", "kept")
	f.hold("arch", "restore")
	f.hold("gone", "restore")
	f.hold("kept", "restore")
	before := f.now()
	res, err := f.s.Commit(bg, "w", e, store.CommitBatch{Withdraw: []string{"gone"}})
	must(t, err, "Commit withdrawing a held effect")
	if res.Withdrawn != 1 {
		t.Fatalf("Commit.Withdrawn = %d, want 1", res.Withdrawn)
	}
	f.wantWithdrawn("gone", before)
	if st := f.effectStatus("kept"); st.State != vocab.EffectHeld {
		t.Fatalf("EffectStatus(kept) = %s, want held", st.State)
	}
	f.setStatus("w", store.WorldArchived, "done")
	f.wantWithdrawn("arch", before)
	f.wantWithdrawn("kept", before)
	f.wantUnsettleable("kept", vocab.Claim{Worker: "adapter", Attempt: 1})
	if d := f.depths(); d.EffectsHeld != 0 {
		t.Fatalf("QueueDepths.EffectsHeld after the archive = %d, want 0", d.EffectsHeld)
	}
}

func testHoldAll(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ev := f.leased("v", "A")
	f.publish("w", e, "p1", "busy", "done", "held")
	f.publish("v", ev, "p2")
	items := f.claim("adapter", 3)
	f.complete("done", items[2].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	f.hold("held", "earlier")
	// p1 was claimed too: hand it back so it is pending again.
	must(t, f.s.ReleaseEffect(bg, "p1", items[0].ClaimOf()), "ReleaseEffect p1")
	n, err := f.s.HoldOpenEffects(bg, "restored backup of 06:00")
	must(t, err, "HoldOpenEffects")
	if n != 3 {
		t.Fatalf("HoldOpenEffects = %d, want 3 (p1, busy, p2)", n)
	}
	for h, reason := range map[string]string{"p1": "restored backup of 06:00", "busy": "restored backup of 06:00",
		"p2": "restored backup of 06:00", "held": "earlier"} {
		if st := f.effectStatus(h); st.State != vocab.EffectHeld || st.HoldReason != reason {
			t.Fatalf("EffectStatus(%s) = %+v, want held for %q", h, st, reason)
		}
	}
	if st := f.effectStatus("done"); st.State != vocab.EffectDone {
		t.Fatalf("EffectStatus(done) = %s, want done", st.State)
	}
	_, _, err = f.s.Complete(bg, "busy", items[1].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(t, err, store.ErrClaimLost, "Complete of an effect HoldOpenEffects held")
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("Claim after HoldOpenEffects = %+v, want nothing", got)
	}
	if n, err := f.s.HoldOpenEffects(bg, "again"); err != nil || n != 0 {
		t.Fatalf("HoldOpenEffects again = %d, %v; want 0", n, err)
	}
	hint := f.watch(store.TopicEffects).C
	n, err = f.s.ReleaseAllHeld(bg, "checked with the providers")
	must(t, err, "ReleaseAllHeld")
	awaitHint(t, hint, "effects", func() {})
	if n != 4 {
		t.Fatalf("ReleaseAllHeld = %d, want 4", n)
	}
	got := f.claim("adapter", 10)
	var hashes []string
	for _, it := range got {
		hashes = append(hashes, it.IntentHash)
	}
	slices.Sort(hashes)
	if !slices.Equal(hashes, []string{"busy", "held", "p1", "p2"}) {
		t.Fatalf("Claim after ReleaseAllHeld = %v, want busy, held, p1, p2", hashes)
	}
	if st := f.effectStatus("p2"); st.ReleaseReason != "checked with the providers" {
		t.Fatalf("EffectStatus(p2).ReleaseReason = %q, want the release's", st.ReleaseReason)
	}
	if n, err := f.s.ReleaseAllHeld(bg, "again"); err != nil || n != 0 {
		t.Fatalf("ReleaseAllHeld again = %d, %v; want 0", n, err)
	}
}

// An effect inflight when its world was archived, then held, is withdrawn
// by its release, singly or in bulk: no claim serves an archived world,
// so a pending one would wait for ever.
func testReleaseHeldArchived(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "one", "all")
	f.claim("adapter", 2)
	f.setStatus("w", store.WorldArchived, "ended")
	f.hold("one", "restore")
	f.hold("all", "restore")
	before := f.now()
	if st := f.releaseHeld("one", "checked"); st.State != vocab.EffectWithdrawn {
		t.Fatalf("ReleaseHeld of an archived world's effect = %+v, want withdrawn", st)
	}
	f.wantWithdrawn("one", before)
	n, err := f.s.ReleaseAllHeld(bg, "checked")
	must(t, err, "ReleaseAllHeld")
	if n != 1 {
		t.Fatalf("ReleaseAllHeld = %d, want 1", n)
	}
	f.wantWithdrawn("all", before)
	if d := f.depths(); d.EffectsHeld != 0 || d.EffectsPending != 0 {
		t.Fatalf("QueueDepths = %+v, want nothing held or pending", d)
	}
}

// testHeldRetried: an operator's hold or release whose answer was lost
// is sent again; the retry is told what happened, not refused because the
// effect moved on since (the release withdrew it, it ran and ended, its
// world's archive withdrew it). A hold or release of another reason is
// still refused.
func testHeldRetried(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ea := f.leased("arch", "A")
	f.publish("arch", ea, "gone", "archived-held")
	f.publish("w", e, "ran")
	f.claimOne("adapter", "gone")

	// A release that withdrew an archived world's effect, retried.
	f.setStatus("arch", store.WorldArchived, "done with it")
	f.hold("gone", "check it")
	first := f.releaseHeld("gone", "it never ran")
	if first.State != vocab.EffectWithdrawn {
		t.Fatalf("ReleaseHeld of an archived world's held effect = %+v, want withdrawn", first)
	}
	again, err := f.s.ReleaseHeld(bg, "gone", "it never ran")
	must(t, err, "ReleaseHeld retried after it withdrew the effect")
	if again.State != vocab.EffectWithdrawn || again.ReleaseReason != "it never ran" || !again.CompletedAt.Equal(first.CompletedAt) {
		t.Fatalf("ReleaseHeld retried = %+v, want the first release's withdrawn status %+v", again, first)
	}
	_, err = f.s.ReleaseHeld(bg, "gone", "another release")
	wantErr(t, err, store.ErrEffectEnded, "ReleaseHeld of another reason of a withdrawn effect")

	// The archive withdrew a pending effect never held: a hold has no
	// earlier attempt to answer for.
	_, err = f.s.HoldEffect(bg, "archived-held", "hold it")
	wantErr(t, err, store.ErrEffectEnded, "HoldEffect of an effect the archive withdrew, never held")

	// A release, then the effect ran and ended; the release retried.
	f.hold("ran", "may have charged")
	f.releaseHeld("ran", "it did not")
	it := f.claimOne("adapter", "ran")
	f.complete("ran", it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	st, err := f.s.ReleaseHeld(bg, "ran", "it did not")
	must(t, err, "ReleaseHeld retried after the effect ran")
	if st.State != vocab.EffectDone || st.ReleaseReason != "it did not" || st.HoldReason != "may have charged" {
		t.Fatalf("ReleaseHeld retried after the effect ran = %+v, want done with the hold's and release's reasons", st)
	}
	// The hold retried likewise: it happened, and the effect ran since.
	st, err = f.s.HoldEffect(bg, "ran", "may have charged")
	must(t, err, "HoldEffect retried after the effect was released and ran")
	if st.State != vocab.EffectDone || st.HoldReason != "may have charged" {
		t.Fatalf("HoldEffect retried after the effect ran = %+v, want done with its hold's reason", st)
	}
	_, err = f.s.HoldEffect(bg, "ran", "another hold")
	wantErr(t, err, store.ErrEffectEnded, "HoldEffect of another reason of a done effect")
	_, err = f.s.ReleaseHeld(bg, "ran", "")
	wantErr(t, err, store.ErrEffectEnded, "ReleaseHeld without a reason of a done effect")

	// A hold of a pending effect its world's archive then withdrew.
	e2 := f.leased("w2", "A")
	f.publish("w2", e2, "w2-held")
	f.hold("w2-held", "hold before the archive")
	f.setStatus("w2", store.WorldArchived, "done")
	if st := f.effectStatus("w2-held"); st.State != vocab.EffectWithdrawn {
		t.Fatalf("a held effect of an archived world = %+v, want withdrawn", st)
	}
	st, err = f.s.HoldEffect(bg, "w2-held", "hold before the archive")
	must(t, err, "HoldEffect retried after the archive withdrew the effect")
	if st.State != vocab.EffectWithdrawn || st.HoldReason != "hold before the archive" {
		t.Fatalf("HoldEffect retried after the archive = %+v, want withdrawn with its hold's reason", st)
	}

	// HoldOpenEffects retried answers how many are held under its reason.
	e3 := f.leased("w3", "A")
	f.publish("w3", e3, "o1", "o2")
	f.claimOne("adapter", "o1")
	n, err := f.s.HoldOpenEffects(bg, "restore")
	must(t, err, "HoldOpenEffects")
	if n != 2 {
		t.Fatalf("HoldOpenEffects = %d, want 2 (o1, o2)", n)
	}
	n, err = f.s.HoldOpenEffects(bg, "restore")
	must(t, err, "HoldOpenEffects retried")
	if n != 2 {
		t.Fatalf("HoldOpenEffects retried = %d, want 2: the effects held under its reason", n)
	}
	f.publish("w3", e3, "o3")
	if n, err = f.s.HoldOpenEffects(bg, "restore"); err != nil || n != 3 {
		t.Fatalf("HoldOpenEffects with one more open effect = %d, %v; want 3", n, err)
	}
	f.releaseHeld("o1", "checked")
	if n, err = f.s.HoldOpenEffects(bg, "restore"); err != nil || n != 3 {
		t.Fatalf("HoldOpenEffects after a release = %d, %v; want 3 (o1 held again)", n, err)
	}
	if n, err = f.s.HoldOpenEffects(bg, "another"); err != nil || n != 0 {
		t.Fatalf("HoldOpenEffects of another reason = %d, %v; want 0", n, err)
	}
}
