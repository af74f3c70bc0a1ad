package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

func leaseTests() []testCase {
	return []testCase{
		{"AcquireRenewRelease", testAcquireRenewRelease},
		{"EpochsStrictlyIncreaseAndAreNeverReused", testEpochsNeverReused},
		{"ConcurrentAcquirersExactlyOneWins", testConcurrentAcquirers},
		{"ExpiredLeaseIsTakenOverWithNextEpoch", testExpiredTakeover},
		{"RenewByNonHolderFailsWithErrNotHolder", testRenewNonHolder},
		{"RenewWithOldEpochFails", testRenewOldEpoch},
		{"ReleaseByNonHolderFails", testReleaseNonHolder},
		{"AssignmentToAnotherWorkerRefusesAcquire", testAssignment},
		{"ListWorkerWorldsIsSortedUnionOfLeasesAndAssignments", testWorkerWorlds},
		{"AcquireNeedsAnExistingActiveWorld", testAcquireWorldStatus},
		{"FencedAssignmentNeedsTheWritersLease", testFencedAssignment},
		{"CompareAndAssignWritesOnlyOverWhatItRead", testCompareAndAssign},
		{"CompareAndAssignRacersOneWins", testCompareAndAssignRace},
	}
}

func testAcquireRenewRelease(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	if _, ok, err := f.s.GetLease(bg, "w"); err != nil || ok {
		t.Fatalf("GetLease of a never-leased world: ok=%v, %v", ok, err)
	}
	before := f.now()
	l := f.acquire("w", "A")
	if l.World != "w" || l.Holder != "A" || l.Epoch < 1 || !near(l.ExpiresAt, before.Add(leaseTTL), timeTol) {
		t.Fatalf("Acquire = %+v, want holder A, epoch >= 1, expiry ≈ %v", l, before.Add(leaseTTL))
	}
	if got, ok, err := f.s.GetLease(bg, "w"); err != nil || !ok || got.Holder != "A" || got.Epoch != l.Epoch || !got.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("GetLease = %+v, %v, %v; want %+v", got, ok, err, l)
	}
	// The holder acquiring again gets its lease back unchanged.
	f.advance(leaseTTL / 4)
	if again := f.acquire("w", "A"); again.Epoch != l.Epoch || !again.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("re-Acquire by the holder = %+v, want the unchanged %+v", again, l)
	}
	r, err := f.s.Renew(bg, "w", "A", l.Epoch, leaseTTL)
	must(t, err, "Renew")
	if r.Epoch != l.Epoch || r.Holder != "A" || r.ExpiresAt.Sub(l.ExpiresAt) < leaseTTL/4-timeTol {
		t.Fatalf("Renew = %+v, want the expiry of %+v extended by ≈%v", r, l, leaseTTL/4)
	}
	// Renewed: still held after the original expiry.
	f.advance(leaseTTL - leaseTTL/4 + margin)
	_, err = f.s.Acquire(bg, "w", "B", leaseTTL)
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by B of a renewed lease")
	must(t, f.s.Release(bg, "w", "A", l.Epoch), "Release")
	got, ok, err := f.s.GetLease(bg, "w")
	if err != nil || !ok || got.Holder != "" || got.Epoch != l.Epoch {
		t.Fatalf("GetLease after Release = %+v, %v, %v; want no holder, epoch %d kept", got, ok, err, l.Epoch)
	}
	// Idempotent: a retried release succeeds.
	must(t, f.s.Release(bg, "w", "A", l.Epoch), "second Release")
	if b := f.acquire("w", "B"); b.Epoch != l.Epoch+1 || b.Holder != "B" {
		t.Fatalf("Acquire after Release = %+v, want B at epoch %d", b, l.Epoch+1)
	}
}

func testEpochsNeverReused(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	var epochs []uint64
	take := func(worker string) store.Lease {
		t.Helper()
		l := f.acquire("w", worker)
		epochs = append(epochs, l.Epoch)
		return l
	}
	l := take("A")
	must(t, f.s.Release(bg, "w", "A", l.Epoch), "Release")
	l = take("A") // the same worker after its own release: a new epoch
	must(t, f.s.Release(bg, "w", "A", l.Epoch), "Release")
	take("B")
	f.advance(leaseTTL + margin)
	take("C") // takeover of an expired lease
	f.advance(leaseTTL + margin)
	l = take("C") // the same worker after its own lease expired
	must(t, f.s.Release(bg, "w", "C", l.Epoch), "Release")
	take("A")
	for i := 1; i < len(epochs); i++ {
		if epochs[i] != epochs[i-1]+1 {
			t.Fatalf("epochs %v: each acquisition must be the previous epoch + 1", epochs)
		}
	}
}

func testConcurrentAcquirers(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	const n = 16
	leases := make([]store.Lease, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			leases[i], errs[i] = f.s.Acquire(bg, "w", fmt.Sprintf("worker-%02d", i), leaseTTL)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("two winners: %+v and %+v", leases[winner], leases[i])
			}
			winner = i
			continue
		}
		wantErr(t, err, store.ErrLeaseHeld, fmt.Sprintf("acquirer %d", i))
	}
	if winner < 0 {
		t.Fatal("no acquirer won")
	}
	got, ok, err := f.s.GetLease(bg, "w")
	if err != nil || !ok || got.Holder != leases[winner].Holder || got.Epoch != leases[winner].Epoch {
		t.Fatalf("GetLease = %+v, %v, %v; the winner is %+v", got, ok, err, leases[winner])
	}
}

func testExpiredTakeover(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	a := f.acquire("w", "A")
	f.advance(leaseTTL - margin)
	_, err := f.s.Acquire(bg, "w", "B", leaseTTL)
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by B before A's lease expired")
	f.advance(2 * margin)
	b := f.acquire("w", "B")
	if b.Holder != "B" || b.Epoch != a.Epoch+1 {
		t.Fatalf("takeover = %+v, want B at epoch %d", b, a.Epoch+1)
	}
	_, err = f.s.Acquire(bg, "w", "A", leaseTTL)
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by the old holder after the takeover")
}

func testRenewNonHolder(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	a := f.acquire("w", "A")
	_, err := f.s.Renew(bg, "w", "B", a.Epoch, leaseTTL)
	wantErr(t, err, store.ErrNotHolder, "Renew by a non-holder with the right epoch")
	must(t, f.s.Release(bg, "w", "A", a.Epoch), "Release")
	_, err = f.s.Renew(bg, "w", "A", a.Epoch, leaseTTL)
	wantErr(t, err, store.ErrNotHolder, "Renew of a released lease")
	f.world("never")
	_, err = f.s.Renew(bg, "never", "A", 1, leaseTTL)
	wantErr(t, err, store.ErrNotHolder, "Renew of a never-leased world")
}

// The contract (Leases.Renew) says ErrNotHolder when another worker (or
// nobody) holds the lease and ErrStaleEpoch when the epoch moved. So the old
// holder renewing after B's takeover gets ErrNotHolder; after it re-acquired
// itself (a new epoch), renewing with the old epoch is ErrStaleEpoch. An
// expired lease is held by nobody (Acquire may take it), so renewing it is
// ErrNotHolder even before anyone takes it over: the holder must Acquire
// again, with a new epoch.
func testRenewOldEpoch(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	a1 := f.acquire("w", "A")
	f.advance(leaseTTL + margin)
	_, err := f.s.Renew(bg, "w", "A", a1.Epoch, leaseTTL)
	wantErr(t, err, store.ErrNotHolder, "Renew of an expired lease nobody took over")
	a2 := f.acquire("w", "A")
	if a2.Epoch != a1.Epoch+1 {
		t.Fatalf("re-Acquire after expiry = %+v, want epoch %d", a2, a1.Epoch+1)
	}
	_, err = f.s.Renew(bg, "w", "A", a1.Epoch, leaseTTL)
	wantErr(t, err, store.ErrStaleEpoch, "Renew by the holder with its previous epoch")
	f.advance(leaseTTL + margin)
	b := f.acquire("w", "B")
	_, err = f.s.Renew(bg, "w", "A", a2.Epoch, leaseTTL)
	wantErr(t, err, store.ErrNotHolder, "Renew by the old holder after B's takeover")
	if got, _, _ := f.s.GetLease(bg, "w"); got.Holder != "B" || got.Epoch != b.Epoch || !got.ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("a failed Renew changed the lease: %+v, want %+v", got, b)
	}
}

func testReleaseNonHolder(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	a := f.acquire("w", "A")
	wantErr(t, f.s.Release(bg, "w", "B", a.Epoch), store.ErrNotHolder, "Release by a non-holder")
	if got, _, _ := f.s.GetLease(bg, "w"); got.Holder != "A" || got.Epoch != a.Epoch {
		t.Fatalf("a failed Release changed the lease: %+v", got)
	}
	_, err := f.s.Acquire(bg, "w", "B", leaseTTL)
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by B after its failed Release")
}

func testAssignment(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	if _, ok, err := f.s.GetAssignment(bg, "w"); err != nil || ok {
		t.Fatalf("GetAssignment before Assign: ok=%v, %v", ok, err)
	}
	want := store.Assignment{DesiredWorker: "B", Priority: 3, Reason: "rebalance"}
	must(t, f.s.Assign(bg, "w", want, nil), "Assign")
	if got, ok, err := f.s.GetAssignment(bg, "w"); err != nil || !ok || got != want {
		t.Fatalf("GetAssignment = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	_, err := f.s.Acquire(bg, "w", "A", leaseTTL)
	wantErr(t, err, store.ErrNotAssigned, "Acquire by a worker the assignment does not name")
	if _, ok, _ := f.s.GetLease(bg, "w"); ok {
		t.Fatal("a refused Acquire wrote a lease")
	}
	b := f.acquire("w", "B")
	must(t, f.s.Release(bg, "w", "B", b.Epoch), "Release")
	must(t, f.s.Unassign(bg, "w", nil), "Unassign")
	if _, ok, err := f.s.GetAssignment(bg, "w"); err != nil || ok {
		t.Fatalf("GetAssignment after Unassign: ok=%v, %v", ok, err)
	}
	if a := f.acquire("w", "A"); a.Epoch != b.Epoch+1 {
		t.Fatalf("Acquire after Unassign = %+v", a)
	}
	// An assignment that names no worker restricts nobody.
	f.world("w2")
	must(t, f.s.Assign(bg, "w2", store.Assignment{Reason: "any"}, nil), "Assign without a worker")
	f.acquire("w2", "C")
}

func testWorkerWorlds(t *testing.T, open Factory) {
	f := setup(t, open)
	for _, w := range []string{"w3", "w1", "w2", "w4", "w5"} {
		f.world(w)
	}
	f.acquire("w3", "A")
	f.acquire("w1", "A")
	f.acquire("w5", "B")
	must(t, f.s.Assign(bg, "w2", store.Assignment{DesiredWorker: "A"}, nil), "Assign")
	must(t, f.s.Assign(bg, "w1", store.Assignment{DesiredWorker: "A"}, nil), "Assign") // leased and assigned: once
	must(t, f.s.Assign(bg, "w4", store.Assignment{DesiredWorker: "B"}, nil), "Assign")
	list := func(worker string) string {
		t.Helper()
		ws, err := f.s.ListWorkerWorlds(bg, worker, "", 100)
		must(t, err, "ListWorkerWorlds")
		ids := make([]string, len(ws))
		for i, w := range ws {
			ids[i] = w.World
		}
		return fmt.Sprint(ids)
	}
	if got := list("A"); got != "[w1 w2 w3]" {
		t.Fatalf("WorkerWorlds(A) = %s, want [w1 w2 w3]", got)
	}
	if got := list("B"); got != "[w4 w5]" {
		t.Fatalf("WorkerWorlds(B) = %s, want [w4 w5]", got)
	}
	if got := list("nobody"); got != "[]" {
		t.Fatalf("WorkerWorlds(nobody) = %s", got)
	}
	// Expired leases no longer count; assignments still do.
	f.advance(leaseTTL + margin)
	if got := list("A"); got != "[w1 w2]" {
		t.Fatalf("WorkerWorlds(A) after expiry = %s, want [w1 w2]", got)
	}
}

// Acquire needs an existing active world: paused is ErrWorldPaused,
// archived ErrWorldArchived, and a refused Acquire leaves the lease as the
// status change left it (released, epoch kept).
func testAcquireWorldStatus(t *testing.T, open Factory) {
	f := setup(t, open)
	_, err := f.s.Acquire(bg, "nowhere", "A", leaseTTL)
	wantErr(t, err, store.ErrWorldNotFound, "Acquire of an unknown world")
	for _, c := range []struct {
		status store.WorldStatus
		kind   error
	}{{store.WorldPaused, store.ErrWorldPaused}, {store.WorldArchived, store.ErrWorldArchived}} {
		id := "w-" + string(c.status)
		e := f.leased(id, "A")
		f.setStatus(id, c.status, "operator")
		_, err := f.s.Acquire(bg, id, "B", leaseTTL)
		wantErr(t, err, c.kind, "Acquire of a "+string(c.status)+" world")
		_, err = f.s.Acquire(bg, id, "A", leaseTTL)
		wantErr(t, err, c.kind, "Acquire by the former holder of a "+string(c.status)+" world")
		if l, _, _ := f.s.GetLease(bg, id); l.Holder != "" || l.Epoch != e {
			t.Fatalf("lease of a %s world = %+v, want released at epoch %d", c.status, l, e)
		}
	}
}

// An assignment written under a fence (the orchestrator's own lease) is
// written only while that lease is held at that epoch and unexpired: a
// deposed writer, paused past its TTL and replaced, gets ErrFenced and
// changes nothing; the new holder's fence and an operator's nil one work.
func testFencedAssignment(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("orch")
	f.world("w")
	old := &store.Fence{World: "orch", Epoch: f.acquire("orch", "O1").Epoch}
	first := store.Assignment{DesiredWorker: "A", Reason: "rendezvous"}
	must(t, f.s.Assign(bg, "w", first, old), "Assign under the holder's fence")
	f.advance(leaseTTL + time.Second) // O1 is paused past its TTL
	err := f.s.Assign(bg, "w", store.Assignment{DesiredWorker: "B", Reason: "rendezvous"}, old)
	wantErr(t, err, store.ErrFenced, "Assign under an expired fence")
	nu := &store.Fence{World: "orch", Epoch: f.acquire("orch", "O2").Epoch}
	err = f.s.Assign(bg, "w", store.Assignment{DesiredWorker: "B", Reason: "rendezvous"}, old)
	wantErr(t, err, store.ErrFenced, "Assign under the deposed holder's fence")
	wantErr(t, f.s.Unassign(bg, "w", old), store.ErrFenced, "Unassign under the deposed holder's fence")
	if got, ok, err := f.s.GetAssignment(bg, "w"); err != nil || !ok || got != first {
		t.Fatalf("after the refused writes: %+v, %v, %v; want %+v unchanged", got, ok, err, first)
	}
	second := store.Assignment{DesiredWorker: "C", Reason: "rendezvous"}
	must(t, f.s.Assign(bg, "w", second, nu), "Assign under the new holder's fence")
	if got, _, _ := f.s.GetAssignment(bg, "w"); got != second {
		t.Fatalf("assignment %+v, want %+v", got, second)
	}
	must(t, f.s.Unassign(bg, "w", nil), "an operator's Unassign")
	err = f.s.Assign(bg, "w", first, &store.Fence{World: "nowhere", Epoch: 1})
	wantErr(t, err, store.ErrWorldNotFound, "Assign under a fence naming no world")
	if _, ok, _ := f.s.GetAssignment(bg, "w"); ok {
		t.Fatal("a refused Assign wrote an assignment")
	}
}

// CompareAndAssign writes only over the assignment its caller read: a
// placement decided on "none" does not overwrite a pin written since, nor
// a removal one moved meanwhile; an assignment that already is the one
// asked for is a success (a retry), and a refused compare writes nothing
// and raises no error but ErrAssignmentChanged. The fence is checked as
// Assign's is.
func testCompareAndAssign(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("orch")
	f.world("w")
	get := func() *store.Assignment {
		t.Helper()
		a, ok, err := f.s.GetAssignment(bg, "w")
		must(t, err, "GetAssignment")
		if !ok {
			return nil
		}
		return &a
	}
	same := func(what string, got, want *store.Assignment) {
		t.Helper()
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Fatalf("%s: assignment %+v, want %+v", what, got, want)
		}
	}
	placed := &store.Assignment{DesiredWorker: "A", Reason: "rendezvous"}
	pin := &store.Assignment{DesiredWorker: "B", Priority: 1, Reason: "pin"}
	must(t, f.s.CompareAndAssign(bg, "w", nil, nil, nil), "CompareAndAssign none over none")
	same("after none over none", get(), nil)
	must(t, f.s.CompareAndAssign(bg, "w", nil, placed, nil), "CompareAndAssign over none")
	same("after the placement", get(), placed)
	must(t, f.s.CompareAndAssign(bg, "w", nil, placed, nil), "the same placement again (a retry)")

	must(t, f.s.Assign(bg, "w", *pin, nil), "the pin")
	wantErr(t, f.s.CompareAndAssign(bg, "w", nil, placed, nil), store.ErrAssignmentChanged, "a placement decided on none over a pin")
	wantErr(t, f.s.CompareAndAssign(bg, "w", placed, &store.Assignment{DesiredWorker: "C", Reason: "rendezvous"}, nil),
		store.ErrAssignmentChanged, "a move decided on the old placement over a pin")
	wantErr(t, f.s.CompareAndAssign(bg, "w", placed, nil, nil), store.ErrAssignmentChanged, "a removal decided on the old placement")
	// A field other than the worker differs: still a change.
	wantErr(t, f.s.CompareAndAssign(bg, "w", &store.Assignment{DesiredWorker: "B", Reason: "pin"}, nil, nil),
		store.ErrAssignmentChanged, "a removal decided on another priority")
	same("after the refused writes", get(), pin)

	moved := &store.Assignment{DesiredWorker: "C", Reason: "pin"}
	must(t, f.s.CompareAndAssign(bg, "w", pin, moved, nil), "a move over what was read")
	same("after the move", get(), moved)
	must(t, f.s.CompareAndAssign(bg, "w", moved, nil, nil), "a removal over what was read")
	same("after the removal", get(), nil)
	must(t, f.s.CompareAndAssign(bg, "w", moved, nil, nil), "the same removal again (a retry)")

	old := &store.Fence{World: "orch", Epoch: f.acquire("orch", "O1").Epoch}
	must(t, f.s.CompareAndAssign(bg, "w", nil, placed, old), "CompareAndAssign under the holder's fence")
	f.advance(leaseTTL + time.Second)
	f.acquire("orch", "O2")
	wantErr(t, f.s.CompareAndAssign(bg, "w", placed, pin, old), store.ErrFenced, "CompareAndAssign under a deposed fence")
	same("after the fenced write", get(), placed)
	wantErr(t, f.s.CompareAndAssign(bg, "nowhere", nil, placed, nil), store.ErrWorldNotFound, "CompareAndAssign of an unknown world")
	wantErr(t, f.s.CompareAndAssign(bg, "nowhere", nil, nil, nil), store.ErrWorldNotFound, "CompareAndAssign of none on an unknown world")
}

// Writers that all read "none" and place a world at once on different
// workers: exactly one writes, the others are told the assignment changed,
// and the one written is the winner's.
func testCompareAndAssignRace(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = f.s.CompareAndAssign(bg, "w", nil, &store.Assignment{DesiredWorker: fmt.Sprintf("W%d", i), Reason: "rendezvous"}, nil)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("W%d and W%d both placed the world", winner, i)
		case err == nil:
			winner = i
		default:
			wantErr(t, err, store.ErrAssignmentChanged, fmt.Sprintf("W%d's placement after another's", i))
		}
	}
	if winner < 0 {
		t.Fatal("no placement won")
	}
	if a, ok, err := f.s.GetAssignment(bg, "w"); err != nil || !ok || a.DesiredWorker != fmt.Sprintf("W%d", winner) {
		t.Fatalf("assignment %+v, %v, %v; want the winner W%d's", a, ok, err, winner)
	}
}
