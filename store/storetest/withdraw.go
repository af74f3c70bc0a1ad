package storetest

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Withdrawal: ending a world (archiving it, by SetWorldStatus or a
// Commit's Status) withdraws its unclaimed effects in the same
// transaction, and a Commit's Withdraw gives up named pending intents. A
// withdrawn effect is never claimed, keeps a record a reader can tell
// apart (EffectWithdrawn), and nobody settles it. An inflight effect is
// left alone: it may be executing, and its receipt still lands.
func withdrawTests() []testCase {
	return []testCase{
		{"ArchiveWithdrawsUnclaimedEffects", testArchiveWithdraws},
		{"CommitArchiveWithdrawsInTheSameTransaction", testCommitArchiveWithdraws},
		{"CommitWithdrawTakesOnlyTheWorldsPendingIntents", testCommitWithdraw},
		{"PauseWithdrawsNothing", testPauseKeepsEffects},
		{"ReapOfAnArchivedWorldWithdrawsInsteadOfRequeueing", testReapArchivedWithdraws},
		{"WithdrawnRecordIsSweptAfterRetention", testWithdrawnSwept},
		{"RetryOfAnArchivedWorldsEffectIsRefused", testRetryArchived},
		{"ReleaseOfAnArchivedWorldsEffectWithdrawsIt", testReleaseArchivedWithdraws},
		{"ReleaseNeverBringsAWithdrawnEffectBack", testReleaseNeverResurrects},
	}
}

// wantWithdrawn checks hash's record says withdrawn, since the store's
// clock at or after from.
func (f *fx) wantWithdrawn(hash string, from time.Time) {
	f.t.Helper()
	st := f.effectStatus(hash)
	if st.State != vocab.EffectWithdrawn || st.Receipt != nil || st.InboxSeq != 0 {
		f.t.Fatalf("EffectStatus(%s) = %+v, want withdrawn without a receipt", hash, st)
	}
	if st.CompletedAt.Before(from.Add(-time.Second)) {
		f.t.Fatalf("EffectStatus(%s).CompletedAt = %v, want the withdrawal's time (>= %v)", hash, st.CompletedAt, from)
	}
}

// wantUnsettleable checks that nobody settles the withdrawn hash: neither
// a claimant (c), nor an operator, nor a retry.
func (f *fx) wantUnsettleable(hash string, c vocab.Claim) {
	f.t.Helper()
	_, _, err := f.s.Complete(bg, hash, c, vocab.Receipt{Status: vocab.ReceiptOK})
	wantErr(f.t, err, store.ErrClaimLost, "Complete of a withdrawn effect")
	_, _, err = f.s.Resolve(bg, hash, vocab.Receipt{Status: vocab.ReceiptOK}, "operator")
	wantErr(f.t, err, store.ErrClaimLost, "Resolve of a withdrawn effect")
	_, err = f.s.RetryEffect(bg, hash, "operator")
	wantErr(f.t, err, store.ErrNotRetryable, "RetryEffect of a withdrawn effect")
}

func testArchiveWithdraws(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "busy")
	busy := f.claimOne("adapter", "busy")
	f.publish("w", e, "idle1", "idle2")
	ev := f.leased("v", "A")
	f.publish("v", ev, "other")
	before := f.now()
	f.setStatus("w", store.WorldArchived, "ended")

	f.wantWithdrawn("idle1", before)
	f.wantWithdrawn("idle2", before)
	if st := f.effectStatus("busy"); st.State != vocab.EffectInflight {
		t.Fatalf("the claimed effect after the archive: %+v, want still inflight", st)
	}
	got := f.claim("adapter", 10)
	if len(got) != 1 || got[0].IntentHash != "other" {
		t.Fatalf("Claim after archiving w = %+v, want only v's effect", got)
	}
	if items, err := f.s.ListEffects(bg, "w", 0, 10); err != nil || len(items) != 1 || items[0].IntentHash != "busy" {
		t.Fatalf("ListEffects(w) = %+v, %v; want only the inflight one", items, err)
	}
	if d, err := f.s.QueueDepths(bg); err != nil || d.EffectsPending != 0 || d.EffectsInflight != 2 {
		t.Fatalf("QueueDepths = %+v, %v; want 0 pending, 2 inflight", d, err)
	}
	f.wantUnsettleable("idle1", vocab.Claim{Worker: "adapter", Attempt: 1})
	// The inflight one may be executing: its receipt still lands, in the
	// archived world's inbox.
	seq, dup := f.complete("busy", busy.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("late")})
	if dup || seq == 0 {
		t.Fatalf("Complete of the inflight effect = %d, dup=%v", seq, dup)
	}
	// Re-publishing a withdrawn hash queues nothing (the record stays).
	if n := f.publish("v", ev, "idle1"); n != 0 {
		t.Fatalf("re-publishing a withdrawn hash queued %d", n)
	}
}

func testCommitArchiveWithdraws(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "early")
	before := f.now()
	res, err := f.s.Commit(bg, "w", e, store.CommitBatch{
		Intents: intents("late"),
		Status:  &store.StatusChange{Status: store.WorldArchived, Reason: "done"},
	})
	must(t, err, "Commit archiving w")
	if res.Published != 1 || res.Withdrawn != 2 {
		t.Fatalf("Commit = %+v, want 1 published and 2 withdrawn", res)
	}
	f.wantWithdrawn("early", before)
	f.wantWithdrawn("late", before)
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("Claim after the archiving commit = %+v", got)
	}
}

func testCommitWithdraw(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	ev := f.leased("v", "A")
	f.publish("w", e, "claimed")
	c := f.claimOne("adapter", "claimed")
	f.publish("w", e, "done")
	d := f.claimOne("adapter", "done")
	f.complete("done", d.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	f.publish("w", e, "gone", "kept")
	f.publish("v", ev, "theirs")
	before := f.now()
	res, err := f.s.Commit(bg, "w", e, store.CommitBatch{Withdraw: []string{"gone", "claimed", "done", "theirs", "unknown"}})
	must(t, err, "Commit withdrawing")
	if res.Withdrawn != 1 {
		t.Fatalf("Commit.Withdrawn = %d, want 1 (only w's pending one)", res.Withdrawn)
	}
	f.wantWithdrawn("gone", before)
	for hash, want := range map[string]vocab.EffectState{
		"claimed": vocab.EffectInflight, "done": vocab.EffectDone, "theirs": vocab.EffectPending, "kept": vocab.EffectPending,
	} {
		if st := f.effectStatus(hash); st.State != want {
			t.Fatalf("EffectStatus(%s) = %s, want %s", hash, st.State, want)
		}
	}
	got := f.claim("adapter", 10)
	if len(got) != 2 || got[0].IntentHash != "kept" || got[1].IntentHash != "theirs" {
		t.Fatalf("Claim after the withdrawal = %+v, want kept and theirs", got)
	}
	f.complete("claimed", c.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
	// Withdraw is fenced with the rest of the commit.
	_, err = f.s.Commit(bg, "w", e+1, store.CommitBatch{Withdraw: []string{"kept"}})
	wantErr(t, err, store.ErrFenced, "a Commit's Withdraw under a wrong epoch")
}

func testPauseKeepsEffects(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	f.setStatus("w", store.WorldPaused, "hold")
	f.claimOne("adapter", "i1")
}

func testReapArchivedWithdraws(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1")
	f.setStatus("w", store.WorldArchived, "ended")
	f.advance(claimTTL + margin)
	before := f.now()
	n, err := f.s.ReapEffects(bg)
	must(t, err, "ReapEffects")
	if n != 1 {
		t.Fatalf("ReapEffects = %d, want 1", n)
	}
	f.wantWithdrawn("i1", before)
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("Claim after reaping an archived world's effect = %+v", got)
	}
	f.wantUnsettleable("i1", c.ClaimOf())
}

func testWithdrawnSwept(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	f.setStatus("w", store.WorldArchived, "ended")
	f.sweep()
	f.effectStatus("i1")
	f.advance(f.s.DedupeRetention() + margin)
	if n := f.sweep(); n < 1 {
		t.Fatalf("SweepDedupe after the retention = %d, want the withdrawn record swept", n)
	}
	_, err := f.s.EffectStatus(bg, "i1")
	wantErr(t, err, store.ErrNotFound, "EffectStatus of a swept withdrawn record")
}

// An operator's retry would put an ended world's effect back in a queue no
// claim serves it from: it is refused, and the record stays as it was.
func testRetryArchived(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1")
	f.setStatus("w", store.WorldArchived, "ended")
	f.complete("i1", c.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptError})
	_, err := f.s.RetryEffect(bg, "i1", "try again")
	wantErr(t, err, store.ErrWorldArchived, "RetryEffect of an archived world's effect")
	if st := f.effectStatus("i1"); st.State != vocab.EffectDone || st.Retries != 0 {
		t.Fatalf("EffectStatus after the refused retry = %+v", st)
	}
}

// An inflight effect of a world archived since, whose claim is handed back
// (a graceful stop that could not finish it, an outcome still unknown when
// the claim's budget ran out), is withdrawn: pending, no claim would ever
// take it (claims skip archived worlds) and nothing would end it.
func testReleaseArchivedWithdraws(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1")
	f.setStatus("w", store.WorldArchived, "ended")
	must(t, f.s.ReleaseEffect(bg, "i1", c.ClaimOf()), "ReleaseEffect")
	if st := f.effectStatus("i1"); st.State != vocab.EffectWithdrawn {
		t.Fatalf("released effect of an archived world is %+v, want withdrawn", st)
	}
}

// A withdrawn effect (reaped after its world was archived) stays
// withdrawn: a late release by its last claimant is ErrClaimLost.
func testReleaseNeverResurrects(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1")
	f.setStatus("w", store.WorldArchived, "ended")
	f.advance(claimTTL + margin)
	if _, err := f.s.ReapEffects(bg); err != nil {
		t.Fatal(err)
	}
	err := f.s.ReleaseEffect(bg, "i1", c.ClaimOf())
	wantErr(t, err, store.ErrClaimLost, "ReleaseEffect of a withdrawn effect")
	if st := f.effectStatus("i1"); st.State != vocab.EffectWithdrawn {
		t.Fatalf("ReleaseEffect turned a withdrawn effect into %+v", st)
	}
}
