package storetest

import (
	"testing"

	"github.com/orrery-run/orrery/store"
)

// Incarnations (Leases.Acquire): a lease records the holder's incarnation,
// one lifetime of a process under its worker id. A process restarted under
// the same worker id while its predecessor is frozen or partitioned (not
// dead) must never share the predecessor's epoch, or the store could not
// tell their writes apart.
func incarnationTests() []testCase {
	return []testCase{
		{"AcquireByANewIncarnationRaisesTheEpochAndFencesTheOld", testNewIncarnationTakesOver},
		{"AcquireLeasesByANewIncarnationRaisesTheEpochAndFencesTheOld", testNewIncarnationTakesOverInBulk},
		{"RetryBySameIncarnationIsIdempotent", testSameIncarnationRetry},
		{"DisplacedIncarnationCannotTakeTheLeaseBack", testDisplacedIncarnationRefused},
		{"IncarnationDisplacedAfterItsLeaseExpiredCannotTakeItBack", testDisplacedAfterExpiry},
		{"AcquireRefusesAnInvalidIncarnation", testInvalidIncarnation},
		{"SpawnRecordsTheHoldersIncarnation", testSpawnIncarnation},
	}
}

func (f *fx) acquireAs(world, worker, inc string) store.Lease {
	f.t.Helper()
	l, err := f.s.Acquire(bg, world, worker, leaseTTL, store.WithIncarnation(inc))
	must(f.t, err, "Acquire "+world+" by "+worker+"/"+inc)
	return l
}

// oldIncarnationFenced checks that incarnation A of worker W, which held
// world at epoch eA before another incarnation took it over at eB, can
// neither renew nor write, and that the takeover is what GetLease shows.
func (f *fx) oldIncarnationFenced(world string, eA, eB uint64, incB string) {
	t := f.t
	t.Helper()
	if eB <= eA {
		t.Fatalf("%s: the new incarnation got epoch %d, the old one held %d: it must rise", world, eB, eA)
	}
	got, ok, err := f.s.GetLease(bg, world)
	if err != nil || !ok || got.Holder != "W" || got.Incarnation != incB || got.Epoch != eB {
		t.Fatalf("%s: GetLease = %+v, %v, %v; want W/%s at epoch %d", world, got, ok, err, incB, eB)
	}
	_, err = f.s.Renew(bg, world, "W", eA, leaseTTL)
	wantErr(t, err, store.ErrStaleEpoch, world+": Renew by the old incarnation at its epoch")
	rs, err := f.s.RenewLeases(bg, "W", []store.LeaseRef{{World: world, Epoch: eA}}, leaseTTL)
	must(t, err, "RenewLeases")
	wantErr(t, rs[0].Err, store.ErrStaleEpoch, world+": RenewLeases by the old incarnation")
	before := f.worldState(world)
	_, err = f.s.Append(bg, world, []store.Record{rec(world + "-stale")}, fenced(world, eA))
	wantErr(t, err, store.ErrFenced, world+": Append under the old incarnation's fence")
	_, err = f.s.Commit(bg, world, eA, store.CommitBatch{ExpectedHead: f.head(world), Entries: []store.Record{rec(world + "-stale-commit")}})
	wantErr(t, err, store.ErrFenced, world+": Commit under the old incarnation's epoch")
	if after := f.worldState(world); after != before {
		t.Fatalf("%s: fenced writes changed the world:\n before %s\n after  %s", world, before, after)
	}
	// The new incarnation writes under its epoch.
	f.append(world, fenced(world, eB), world+"-new")
}

func testNewIncarnationTakesOver(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	a := f.acquireAs("w", "W", "inc-a")
	if a.Holder != "W" || a.Incarnation != "inc-a" {
		t.Fatalf("Acquire = %+v, want W/inc-a", a)
	}
	f.append("w", fenced("w", a.Epoch), "by-a")
	f.advance(leaseTTL / 4) // A's lease is unexpired: only its incarnation differs
	b := f.acquireAs("w", "W", "inc-b")
	if b.Holder != "W" || b.Incarnation != "inc-b" {
		t.Fatalf("Acquire by the new incarnation = %+v, want W/inc-b", b)
	}
	f.oldIncarnationFenced("w", a.Epoch, b.Epoch, "inc-b")
	// No incarnation named is the empty one: another incarnation too.
	c := f.acquire("w", "W")
	if c.Epoch != b.Epoch+1 || c.Incarnation != "" {
		t.Fatalf("Acquire naming no incarnation = %+v, want epoch %d", c, b.Epoch+1)
	}
}

func testNewIncarnationTakesOverInBulk(t *testing.T, open Factory) {
	f := setup(t, open)
	ws := []string{"b1", "b2"}
	for _, w := range ws {
		f.world(w)
	}
	old, err := f.s.AcquireLeases(bg, "W", ws, leaseTTL, store.WithIncarnation("inc-a"))
	must(t, err, "AcquireLeases by inc-a")
	f.advance(leaseTTL / 4)
	// Named twice: the second occurrence finds the lease the first took.
	got, err := f.s.AcquireLeases(bg, "W", []string{"b1", "b2", "b1"}, leaseTTL, store.WithIncarnation("inc-b"))
	must(t, err, "AcquireLeases by inc-b")
	for i, r := range got {
		if r.Err != nil || r.Lease.Holder != "W" || r.Lease.Incarnation != "inc-b" {
			t.Fatalf("result %d = %+v, want W/inc-b", i, r)
		}
	}
	if got[2].Lease.Epoch != got[0].Lease.Epoch {
		t.Fatalf("a world named twice: epochs %d then %d, want the first's lease unchanged", got[0].Lease.Epoch, got[2].Lease.Epoch)
	}
	for i, w := range ws {
		if old[i].Err != nil || old[i].Lease.Incarnation != "inc-a" {
			t.Fatalf("first AcquireLeases result %d = %+v", i, old[i])
		}
		f.oldIncarnationFenced(w, old[i].Lease.Epoch, got[i].Lease.Epoch, "inc-b")
	}
}

func testSameIncarnationRetry(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	f.world("v")
	a := f.acquireAs("w", "W", "inc-a")
	f.advance(leaseTTL / 4)
	if again := f.acquireAs("w", "W", "inc-a"); again != a {
		t.Fatalf("retried Acquire by the same incarnation = %+v, want the unchanged %+v", again, a)
	}
	first, err := f.s.AcquireLeases(bg, "W", []string{"v"}, leaseTTL, store.WithIncarnation("inc-a"))
	must(t, err, "AcquireLeases")
	again, err := f.s.AcquireLeases(bg, "W", []string{"v", "w"}, leaseTTL, store.WithIncarnation("inc-a"))
	must(t, err, "retried AcquireLeases")
	if again[0].Err != nil || again[0].Lease != first[0].Lease || again[1].Err != nil || again[1].Lease != a {
		t.Fatalf("retried AcquireLeases = %+v, want the unchanged %+v and %+v", again, first[0].Lease, a)
	}
	// Another worker is still refused, whatever incarnation it names.
	_, err = f.s.Acquire(bg, "w", "X", leaseTTL, store.WithIncarnation("inc-a"))
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by another worker")
}

func testDisplacedIncarnationRefused(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	f.world("v")
	f.acquireAs("w", "W", "inc-a")
	f.acquireAs("v", "W", "inc-a")
	b := f.acquireAs("w", "W", "inc-b")
	// The old process thaws and tries again: it must not take the world
	// back from its successor (nor would the two ever stop trading it).
	_, err := f.s.Acquire(bg, "w", "W", leaseTTL, store.WithIncarnation("inc-a"))
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by the displaced incarnation")
	res, err := f.s.AcquireLeases(bg, "W", []string{"w", "v"}, leaseTTL, store.WithIncarnation("inc-a"))
	must(t, err, "AcquireLeases by the displaced incarnation")
	wantErr(t, res[0].Err, store.ErrLeaseHeld, "AcquireLeases by the displaced incarnation")
	if res[1].Err != nil || res[1].Lease.Incarnation != "inc-a" {
		t.Fatalf("inc-a's own lease on v: %+v (only the world taken from it is refused)", res[1])
	}
	if got, _, _ := f.s.GetLease(bg, "w"); got.Epoch != b.Epoch || got.Incarnation != "inc-b" {
		t.Fatalf("the refused acquisitions changed the lease: %+v, want %+v", got, b)
	}
	// A third incarnation is new: it takes over.
	if c := f.acquireAs("w", "W", "inc-c"); c.Epoch != b.Epoch+1 {
		t.Fatalf("Acquire by inc-c = %+v, want epoch %d", c, b.Epoch+1)
	}
	// Once the lease expires, it is free for anyone, the displaced too.
	f.advance(leaseTTL + margin)
	if again := f.acquireAs("w", "W", "inc-a"); again.Epoch != b.Epoch+2 || again.Incarnation != "inc-a" {
		t.Fatalf("Acquire by inc-a after the lease expired = %+v, want epoch %d", again, b.Epoch+2)
	}
}

// The old process was frozen past its lease's expiry before its successor
// came: the successor takes the lease free, and the old one, thawing, must
// not take it back from it. A release forgets whom it displaced.
func testDisplacedAfterExpiry(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	a := f.acquireAs("w", "W", "inc-a")
	f.advance(leaseTTL + margin)
	b := f.acquireAs("w", "W", "inc-b")
	if b.Epoch != a.Epoch+1 {
		t.Fatalf("Acquire by inc-b after inc-a's lease expired = %+v, want epoch %d", b, a.Epoch+1)
	}
	_, err := f.s.Acquire(bg, "w", "W", leaseTTL, store.WithIncarnation("inc-a"))
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by inc-a, displaced after its lease expired")
	res, err := f.s.AcquireLeases(bg, "W", []string{"w"}, leaseTTL, store.WithIncarnation("inc-a"))
	must(t, err, "AcquireLeases")
	wantErr(t, res[0].Err, store.ErrLeaseHeld, "AcquireLeases by inc-a, displaced after its lease expired")
	// Another worker's expired lease displaces no incarnation of W.
	f.world("v")
	f.acquireAs("v", "X", "inc-a")
	f.advance(leaseTTL + margin)
	f.acquireAs("v", "W", "inc-b")
	if l := f.acquireAs("v", "W", "inc-a"); l.Incarnation != "inc-a" {
		t.Fatalf("inc-a over a lease W/inc-b took from X: %+v, want a takeover", l)
	}
	// After a release, nobody is displaced.
	cur, _, err := f.s.GetLease(bg, "w")
	must(t, err, "GetLease")
	must(t, f.s.Release(bg, "w", "W", cur.Epoch), "Release")
	f.acquireAs("w", "W", "inc-b")
	if l := f.acquireAs("w", "W", "inc-a"); l.Incarnation != "inc-a" {
		t.Fatalf("inc-a over a lease taken after a release: %+v, want a takeover", l)
	}
}

func testInvalidIncarnation(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	for name, bad := range sortedMap(badStrings) {
		if bad == "" {
			continue // the empty incarnation is a caller's that names none
		}
		_, err := f.s.Acquire(bg, "w", "W", leaseTTL, store.WithIncarnation(bad))
		wantErr(t, err, store.ErrInvalid, "Acquire with incarnation "+name)
		_, err = f.s.AcquireLeases(bg, "W", []string{"w"}, leaseTTL, store.WithIncarnation(bad))
		wantErr(t, err, store.ErrInvalid, "AcquireLeases with incarnation "+name)
	}
	if _, ok, err := f.s.GetLease(bg, "w"); err != nil || ok {
		t.Fatalf("refused acquisitions leased the world: ok=%v, %v", ok, err)
	}
}

// A world spawned with its first lease records the holder's incarnation
// as an Acquire does: the same incarnation's Acquire keeps the lease,
// another's takes it over and cannot be taken back from by the spawner.
func testSpawnIncarnation(t *testing.T, open Factory) {
	f := setup(t, open)
	sp, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "s", Holder: "W", Incarnation: "inc-a", TTL: leaseTTL})
	must(t, err, "Spawn")
	if sp.Lease.Holder != "W" || sp.Lease.Incarnation != "inc-a" {
		t.Fatalf("Spawn's lease %+v, want W/inc-a", sp.Lease)
	}
	if got, _, _ := f.s.GetLease(bg, "s"); got != sp.Lease {
		t.Fatalf("GetLease = %+v, want the spawned %+v", got, sp.Lease)
	}
	if again := f.acquireAs("s", "W", "inc-a"); again != sp.Lease {
		t.Fatalf("Acquire by the spawner = %+v, want the unchanged %+v", again, sp.Lease)
	}
	b := f.acquireAs("s", "W", "inc-b")
	f.oldIncarnationFenced("s", sp.Lease.Epoch, b.Epoch, "inc-b")
	_, err = f.s.Acquire(bg, "s", "W", leaseTTL, store.WithIncarnation("inc-a"))
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by the displaced spawner")
	_, err = f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: "t", Incarnation: "inc-a"})
	wantErr(t, err, store.ErrInvalid, "Spawn with an incarnation but no holder")
}
