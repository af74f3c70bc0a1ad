package storetest

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Orphans (Workers.ReapOrphans, RetireWorker, Heartbeat with AliveAs,
// Claim and ClaimDue with ClaimFor): a claim that rides on a worker
// incarnation's liveness is requeued as soon as the store knows that
// incarnation dead, by its own clock, not at the claim's TTL; a live
// incarnation's claims are never touched; a revoked claim's holder can no
// longer settle it.
func orphanTests() []testCase {
	return []testCase{
		{"DeadIncarnationsClaimsAreRequeuedBeforeTheirTTL", testOrphansRequeuedAtDeath},
		{"SlowButHeartbeatingIncarnationKeepsItsClaims", testSlowIncarnationKeepsClaims},
		{"RetireWorkerRequeuesAtOnceAndRefusesLaterBeatsAndClaims", testRetireWorker},
		{"NewIncarnationsHeartbeatSupersedesTheOld", testIncarnationSuperseded},
		{"ClaimBeforeTheFirstHeartbeatIsNotAnOrphan", testClaimBeforeFirstBeat},
		{"ClaimsWithoutAnOwnerWaitForTheirTTL", testUnownedClaimsWait},
		{"OrphanOfAnArchivedWorldIsWithdrawn", testOrphanOfArchivedWorld},
		{"HeartbeatPromiseIsJudgedOnTheStoresClock", testPromiseOnStoreClock},
	}
}

// aliveTTL is the promise the tests' heartbeats make: well under claimTTL,
// so a claim recovered after it was recovered by its owner's death.
const aliveTTL = 10 * time.Second

func (f *fx) beat(worker, inc string) store.WorkerInfo {
	f.t.Helper()
	wi, err := f.s.Heartbeat(bg, worker, 8, store.AliveAs(inc, aliveTTL))
	must(f.t, err, "Heartbeat "+worker+"/"+inc)
	return wi
}

func (f *fx) claimFor(worker, node, inc string) vocab.EffectItem {
	f.t.Helper()
	items, err := f.s.Claim(bg, worker, []string{effectKind}, 1, claimTTL, store.ClaimFor(node, inc))
	must(f.t, err, "Claim for "+node+"/"+inc)
	if len(items) != 1 {
		f.t.Fatalf("Claim for %s/%s = %+v, want one item", node, inc, items)
	}
	return items[0]
}

func (f *fx) claimDueFor(worker, node, inc string) store.TimerItem {
	f.t.Helper()
	items, err := f.s.ClaimDue(bg, worker, 1, claimTTL, store.ClaimFor(node, inc))
	must(f.t, err, "ClaimDue for "+node+"/"+inc)
	if len(items) != 1 {
		f.t.Fatalf("ClaimDue for %s/%s = %+v, want one item", node, inc, items)
	}
	return items[0]
}

func (f *fx) reapOrphans(want int, what string) {
	f.t.Helper()
	n, err := f.s.ReapOrphans(bg)
	must(f.t, err, "ReapOrphans")
	if n != want {
		f.t.Fatalf("%s: ReapOrphans = %d, want %d", what, n, want)
	}
}

func (f *fx) effectState(hash string, want vocab.EffectState, what string) {
	f.t.Helper()
	if st := f.effectStatus(hash); st.State != want {
		f.t.Fatalf("%s: effect %s is %s, want %s", what, hash, st.State, want)
	}
}

// revoked checks that an effect claim and a timer claim the store requeued
// can no longer be settled or released by their holder, and that the next
// claims are the next attempts.
func (f *fx) revoked(eff vocab.EffectItem, tm store.TimerItem) {
	t := f.t
	t.Helper()
	ec := vocab.Claim{Worker: eff.ClaimedBy, Attempt: eff.Attempt}
	_, _, err := f.s.Complete(bg, eff.IntentHash, ec, vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("late")})
	wantErr(t, err, store.ErrClaimLost, "Complete by the dead holder")
	wantErr(t, f.s.ReleaseEffect(bg, eff.IntentHash, ec), store.ErrClaimLost, "ReleaseEffect by the dead holder")
	_, _, err = f.s.Fire(bg, tm.IntentHash, tm.ClaimOf())
	wantErr(t, err, store.ErrClaimLost, "Fire by the dead holder")
	f.beat("B", "b1")
	again := f.claimFor("B/effects", "B", "b1")
	if again.IntentHash != eff.IntentHash || again.Attempt != eff.Attempt+1 {
		t.Fatalf("reclaim = %s attempt %d, want %s attempt %d", again.IntentHash, again.Attempt, eff.IntentHash, eff.Attempt+1)
	}
	tagain := f.claimDueFor("B/timers", "B", "b1")
	if tagain.IntentHash != tm.IntentHash || tagain.Attempt != tm.Attempt+1 {
		t.Fatalf("timer reclaim = %+v, want %s attempt %d", tagain, tm.IntentHash, tm.Attempt+1)
	}
	if _, dup := f.complete(eff.IntentHash, vocab.Claim{Worker: again.ClaimedBy, Attempt: again.Attempt}, vocab.Receipt{Status: vocab.ReceiptOK}); dup {
		t.Fatal("the new holder's completion was a duplicate")
	}
	if _, dup := f.fire(tm.IntentHash, tagain.ClaimOf()); dup {
		t.Fatal("the new holder's firing was a duplicate")
	}
	// One receipt and one firing in the world's inbox, whatever the dead
	// holder tried.
	n := 0
	for _, it := range f.inbox(eff.World) {
		if it.Kind == vocab.KindReceipt || it.Kind == vocab.KindTimer {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("the world's inbox holds %d receipts and firings, want 2", n)
	}
}

// owned publishes effect e1 and a due timer t1 in world w and claims both
// for worker A's incarnation a1.
func (f *fx) owned() (vocab.EffectItem, store.TimerItem) {
	f.t.Helper()
	e := f.leased("w", "H")
	f.publish("w", e, "e1")
	must(f.t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule")
	f.advance(time.Second)
	f.beat("A", "a1")
	return f.claimFor("A/effects", "A", "a1"), f.claimDueFor("A/timers", "A", "a1")
}

func testOrphansRequeuedAtDeath(t *testing.T, open Factory) {
	f := setup(t, open)
	eff, tm := f.owned()
	f.advance(aliveTTL / 2)
	f.reapOrphans(0, "while A's promise holds")
	f.effectState("e1", vocab.EffectInflight, "while A's promise holds")
	f.advance(aliveTTL/2 + margin) // A's promise ran out; the claims' TTL has not
	if n, err := f.s.ReapEffects(bg); err != nil || n != 0 {
		t.Fatalf("ReapEffects = %d, %v: the claim's own TTL has not passed", n, err)
	}
	f.reapOrphans(2, "after A's promise ran out")
	f.effectState("e1", vocab.EffectPending, "after A's promise ran out")
	f.reapOrphans(0, "again")
	// A known-dead incarnation takes no new work until it beats again.
	l, _, err := f.s.GetLease(bg, "w")
	must(t, err, "GetLease")
	f.publish("w", l.Epoch, "e2")
	_, err = f.s.Claim(bg, "A/effects", []string{effectKind}, 1, claimTTL, store.ClaimFor("A", "a1"))
	wantErr(t, err, store.ErrFenced, "Claim for an incarnation whose promise ran out")
	f.revoked(eff, tm)
	// A that was only late beats again and claims anew.
	f.beat("A", "a1")
	if got := f.claimFor("A/effects", "A", "a1"); got.IntentHash != "e2" {
		t.Fatalf("A's claim after its new heartbeat = %+v, want e2", got)
	}
}

func testSlowIncarnationKeepsClaims(t *testing.T, open Factory) {
	f := setup(t, open)
	eff, tm := f.owned()
	// A beats every 0.7 promise for twice the promise: never dead.
	for range 3 {
		f.advance(aliveTTL * 7 / 10)
		f.beat("A", "a1")
		f.reapOrphans(0, "while A keeps beating")
	}
	f.effectState("e1", vocab.EffectInflight, "while A keeps beating")
	if _, dup := f.complete("e1", vocab.Claim{Worker: eff.ClaimedBy, Attempt: eff.Attempt}, vocab.Receipt{Status: vocab.ReceiptOK}); dup {
		t.Fatal("the slow holder's completion was a duplicate")
	}
	if _, dup := f.fire("t1", tm.ClaimOf()); dup {
		t.Fatal("the slow holder's firing was a duplicate")
	}
}

func testRetireWorker(t *testing.T, open Factory) {
	f := setup(t, open)
	eff, tm := f.owned()
	n, err := f.s.RetireWorker(bg, "A", "a1")
	must(t, err, "RetireWorker")
	if n != 2 {
		t.Fatalf("RetireWorker requeued %d, want 2", n)
	}
	f.effectState("e1", vocab.EffectPending, "after A retired")
	if n, err := f.s.RetireWorker(bg, "A", "a1"); err != nil || n != 0 {
		t.Fatalf("RetireWorker again = %d, %v; want a no-op", n, err)
	}
	ws, err := f.s.ListWorkers(bg)
	must(t, err, "ListWorkers")
	if len(ws) != 1 || ws[0].Incarnation != "a1" || !ws[0].Dead(f.now()) {
		t.Fatalf("ListWorkers = %+v, want A/a1 dead", ws)
	}
	_, err = f.s.Heartbeat(bg, "A", 8, store.AliveAs("a1", aliveTTL))
	wantErr(t, err, store.ErrFenced, "Heartbeat by a retired incarnation")
	_, err = f.s.Claim(bg, "A/effects", []string{effectKind}, 1, claimTTL, store.ClaimFor("A", "a1"))
	wantErr(t, err, store.ErrFenced, "Claim for a retired incarnation")
	_, err = f.s.ClaimDue(bg, "A/timers", 1, claimTTL, store.ClaimFor("A", "a1"))
	wantErr(t, err, store.ErrFenced, "ClaimDue for a retired incarnation")
	f.revoked(eff, tm)
}

func testIncarnationSuperseded(t *testing.T, open Factory) {
	f := setup(t, open)
	eff, tm := f.owned()
	f.advance(time.Second) // a1's promise holds: only a restart tells
	wi := f.beat("A", "a2")
	if wi.Incarnation != "a2" {
		t.Fatalf("Heartbeat by a2 = %+v", wi)
	}
	f.effectState("e1", vocab.EffectPending, "after a2's first heartbeat")
	_, err := f.s.Heartbeat(bg, "A", 8, store.AliveAs("a1", aliveTTL))
	wantErr(t, err, store.ErrFenced, "Heartbeat by the superseded incarnation")
	_, err = f.s.Claim(bg, "A/effects", []string{effectKind}, 1, claimTTL, store.ClaimFor("A", "a1"))
	wantErr(t, err, store.ErrFenced, "Claim for the superseded incarnation")
	if got, err := f.s.ListWorkers(bg); err != nil || len(got) != 1 || got[0].Incarnation != "a2" {
		t.Fatalf("ListWorkers = %+v, %v: the superseded incarnation's beat must not take the record back", got, err)
	}
	f.revoked(eff, tm)
}

func testClaimBeforeFirstBeat(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "H")
	f.publish("w", e, "e1")
	f.beat("A", "a1")
	f.advance(aliveTTL + margin) // a1 is dead
	// a2 claims before its first heartbeat: the store has no record of it.
	it := f.claimFor("A/effects", "A", "a2")
	f.reapOrphans(0, "a2 has not beaten yet")
	f.beat("A", "a2") // supersedes a1, not a2
	f.reapOrphans(0, "a2 beats")
	f.effectState("e1", vocab.EffectInflight, "a2 beats")
	if _, dup := f.complete("e1", vocab.Claim{Worker: it.ClaimedBy, Attempt: it.Attempt}, vocab.Receipt{Status: vocab.ReceiptOK}); dup {
		t.Fatal("a2's completion was a duplicate")
	}
}

func testUnownedClaimsWait(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "H")
	f.publish("w", e, "e1")
	f.beat("A", "a1")
	f.claimOne("A/effects", "e1")
	n, err := f.s.RetireWorker(bg, "A", "a1")
	if err != nil || n != 0 {
		t.Fatalf("RetireWorker = %d, %v; the claim named no owner", n, err)
	}
	f.advance(aliveTTL + margin)
	f.reapOrphans(0, "a claim without an owner")
	f.effectState("e1", vocab.EffectInflight, "a claim without an owner")
	f.advance(claimTTL)
	if n, err := f.s.ReapEffects(bg); err != nil || n != 1 {
		t.Fatalf("ReapEffects = %d, %v; want its TTL to recover it", n, err)
	}
}

func testOrphanOfArchivedWorld(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "H")
	f.publish("w", e, "e1")
	f.beat("A", "a1")
	f.claimFor("A/effects", "A", "a1")
	f.setStatus("w", store.WorldArchived, "done")
	f.advance(aliveTTL + margin)
	f.reapOrphans(1, "an archived world's orphan")
	f.effectState("e1", vocab.EffectWithdrawn, "an archived world's orphan")
}

func testPromiseOnStoreClock(t *testing.T, open Factory) {
	f := setup(t, open)
	wi := f.beat("A", "a1")
	if !wi.AliveUntil.Equal(wi.HeartbeatAt.Add(aliveTTL)) {
		t.Fatalf("AliveUntil %v, want HeartbeatAt %v + %v", wi.AliveUntil, wi.HeartbeatAt, aliveTTL)
	}
	if wi.Dead(f.now()) || !wi.Dead(wi.AliveUntil) {
		t.Fatalf("Dead: a promise holds until AliveUntil, then no more")
	}
	// A heartbeat without a promise records none.
	plain, err := f.s.Heartbeat(bg, "A", 8)
	must(t, err, "Heartbeat")
	if !plain.AliveUntil.IsZero() || plain.Incarnation != "a1" {
		t.Fatalf("Heartbeat without a promise = %+v, want no promise and the incarnation kept", plain)
	}
}
