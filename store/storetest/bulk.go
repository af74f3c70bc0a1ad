package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Many worlds per worker (issue 7 item 11): bulk lease calls answer per
// world exactly as the single calls would, the worker's worlds page
// through an index, and the worker inventory is what the orchestrator reads.
func bulkTests() []testCase {
	return []testCase{
		{"RenewLeasesAnswersEachRefAsRenewWould", testRenewLeases},
		{"ReleaseLeasesAnswersEachRefAsReleaseWould", testReleaseLeases},
		{"ListWorkerWorldsPagesWithLeaseAndAssignment", testListWorkerWorldsPages},
		{"WorkerInventoryHeartbeatAndDraining", testWorkerInventory},
	}
}

// leaseMix is a worker A holding w-held, a stale epoch of w-stale (A
// re-acquired it), w-other held by B, w-expired whose lease ran out, and
// a ref to a world that does not exist.
func leaseMix(f *fx) []store.LeaseRef {
	held := f.leased("w-held", "A")
	f.leased("w-expired", "A")
	f.world("w-other")
	f.world("w-stale")
	staleRef := f.acquire("w-stale", "A").Epoch
	must(f.t, f.s.Release(bg, "w-stale", "A", staleRef), "Release")
	f.acquire("w-stale", "A")
	// w-expired runs out while the others are renewed.
	f.advance(leaseTTL / 2)
	_, err := f.s.Renew(bg, "w-held", "A", held, leaseTTL)
	must(f.t, err, "Renew")
	cur, _, _ := f.s.GetLease(bg, "w-stale")
	_, err = f.s.Renew(bg, "w-stale", "A", cur.Epoch, leaseTTL)
	must(f.t, err, "Renew")
	f.advance(leaseTTL/2 + margin)
	b := f.acquire("w-other", "B").Epoch
	exp, _, _ := f.s.GetLease(bg, "w-expired")
	return []store.LeaseRef{
		{World: "w-held", Epoch: held}, {World: "w-stale", Epoch: staleRef}, {World: "w-other", Epoch: b},
		{World: "w-expired", Epoch: exp.Epoch}, {World: "w-missing", Epoch: 1},
	}
}

func testRenewLeases(t *testing.T, open Factory) {
	f := setup(t, open)
	refs := leaseMix(f)
	before := f.now()
	got, err := f.s.RenewLeases(bg, "A", refs, leaseTTL)
	must(t, err, "RenewLeases")
	want := []error{nil, store.ErrStaleEpoch, store.ErrNotHolder, store.ErrNotHolder, store.ErrWorldNotFound}
	if len(got) != len(refs) {
		t.Fatalf("%d results for %d refs", len(got), len(refs))
	}
	for i, r := range got {
		if r.World != refs[i].World {
			t.Fatalf("result %d is for %s, want %s (in order)", i, r.World, refs[i].World)
		}
		if want[i] == nil {
			if r.Err != nil || r.Lease.Holder != "A" || r.Lease.Epoch != refs[i].Epoch || !near(r.Lease.ExpiresAt, before.Add(leaseTTL), timeTol) {
				t.Fatalf("renewal of %s = %+v", r.World, r)
			}
			continue
		}
		wantErr(t, r.Err, want[i], "RenewLeases of "+r.World)
		// The same answer Renew gives alone.
		_, alone := f.s.Renew(bg, refs[i].World, "A", refs[i].Epoch, leaseTTL)
		wantErr(t, alone, want[i], "Renew of "+r.World)
	}
	if l, _, _ := f.s.GetLease(bg, "w-held"); !l.ExpiresAt.Equal(got[0].Lease.ExpiresAt) {
		t.Fatalf("stored lease %+v, renewal answered %+v", l, got[0].Lease)
	}
	if l, _, _ := f.s.GetLease(bg, "w-other"); l.Holder != "B" {
		t.Fatalf("a refused renewal changed B's lease: %+v", l)
	}
	if got, err := f.s.RenewLeases(bg, "A", nil, leaseTTL); err != nil || len(got) != 0 {
		t.Fatalf("RenewLeases of nothing = %+v, %v", got, err)
	}
}

func testReleaseLeases(t *testing.T, open Factory) {
	f := setup(t, open)
	refs := leaseMix(f)
	got, err := f.s.ReleaseLeases(bg, "A", refs)
	must(t, err, "ReleaseLeases")
	// An expired lease may still be released by its holder (as Release).
	want := []error{nil, store.ErrStaleEpoch, store.ErrNotHolder, nil, store.ErrWorldNotFound}
	for i, r := range got {
		if r.World != refs[i].World {
			t.Fatalf("result %d is for %s, want %s", i, r.World, refs[i].World)
		}
		if want[i] == nil {
			if r.Err != nil {
				t.Fatalf("release of %s = %v", r.World, r.Err)
			}
			if l, _, _ := f.s.GetLease(bg, r.World); l.Holder != "" || l.Epoch != refs[i].Epoch {
				t.Fatalf("lease of %s after release = %+v", r.World, l)
			}
			continue
		}
		wantErr(t, r.Err, want[i], "ReleaseLeases of "+r.World)
	}
	if l, _, _ := f.s.GetLease(bg, "w-stale"); l.Holder != "A" {
		t.Fatalf("a refused release changed w-stale: %+v", l)
	}
	// Retried: the released ones are no-ops, the rest answer as before.
	again, err := f.s.ReleaseLeases(bg, "A", refs)
	must(t, err, "ReleaseLeases again")
	for i, r := range again {
		if (want[i] == nil) != (r.Err == nil) {
			t.Fatalf("retried release of %s = %v", r.World, r.Err)
		}
	}
}

func testListWorkerWorldsPages(t *testing.T, open Factory) {
	f := setup(t, open)
	const n = 250
	var want []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("w%03d", i)
		f.world(id)
		switch i % 5 {
		case 0, 1: // leased by A
			f.acquire(id, "A")
			want = append(want, id)
		case 2: // assigned to A, not leased
			must(t, f.s.Assign(bg, id, store.Assignment{DesiredWorker: "A", Priority: i}, nil), "Assign")
			want = append(want, id)
		case 3: // B's
			f.acquire(id, "B")
		case 4: // A's lease, which will expire; assigned to A only every other one
			f.acquire(id, "A")
			if i%10 == 4 {
				must(t, f.s.Assign(bg, id, store.Assignment{DesiredWorker: "A"}, nil), "Assign")
			}
		}
	}
	// Renew what should stay live, then let the rest expire.
	f.advance(leaseTTL / 2)
	for i := 0; i < n; i += 5 {
		for _, j := range []int{i, i + 1} {
			id := fmt.Sprintf("w%03d", j)
			l, _, _ := f.s.GetLease(bg, id)
			_, err := f.s.Renew(bg, id, "A", l.Epoch, leaseTTL)
			must(t, err, "Renew "+id)
		}
		id := fmt.Sprintf("w%03d", i+3)
		l, _, _ := f.s.GetLease(bg, id)
		_, err := f.s.Renew(bg, id, "B", l.Epoch, leaseTTL)
		must(t, err, "Renew "+id)
	}
	f.advance(leaseTTL/2 + margin)
	for i := 4; i < n; i += 10 {
		want = append(want, fmt.Sprintf("w%03d", i)) // expired but assigned
	}
	slicesSort(want)

	var got []store.WorkerWorld
	after := ""
	for page := 0; ; page++ {
		ws, err := f.s.ListWorkerWorlds(bg, "A", after, 100)
		must(t, err, "ListWorkerWorlds")
		got = append(got, ws...)
		if len(ws) < 100 {
			break
		}
		after = ws[len(ws)-1].World
		if page > 5 {
			t.Fatal("pagination does not end")
		}
	}
	ids := make([]string, len(got))
	for i, w := range got {
		ids[i] = w.World
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("ListWorkerWorlds(A) = %v\nwant %v", ids, want)
	}
	now := f.now()
	for _, w := range got {
		var i int
		fmt.Sscanf(w.World, "w%03d", &i)
		switch i % 5 {
		case 0, 1:
			if w.Lease == nil || w.Lease.Holder != "A" || !now.Before(w.Lease.ExpiresAt) || w.Assignment != nil {
				t.Fatalf("%s = lease %+v assignment %+v, want A's live lease, no assignment", w.World, w.Lease, w.Assignment)
			}
		case 2:
			if w.Lease != nil || w.Assignment == nil || w.Assignment.DesiredWorker != "A" || w.Assignment.Priority != i {
				t.Fatalf("%s = lease %+v assignment %+v, want no lease, A's assignment", w.World, w.Lease, w.Assignment)
			}
		case 4:
			// The world's lease record is attached whatever its state.
			if w.Lease == nil || w.Lease.Epoch != 1 || now.Before(w.Lease.ExpiresAt) || w.Assignment == nil {
				t.Fatalf("%s = lease %+v assignment %+v, want its expired lease record and A's assignment", w.World, w.Lease, w.Assignment)
			}
		}
	}
	if ws, err := f.s.ListWorkerWorlds(bg, "A", want[len(want)-1], 100); err != nil || len(ws) != 0 {
		t.Fatalf("page after the last world = %+v, %v", ws, err)
	}
	if ws, err := f.s.ListWorkerWorlds(bg, "nobody", "", 100); err != nil || len(ws) != 0 {
		t.Fatalf("ListWorkerWorlds(nobody) = %+v, %v", ws, err)
	}
}

func testWorkerInventory(t *testing.T, open Factory) {
	f := setup(t, open)
	_, err := f.s.SetDraining(bg, "A", true)
	wantErr(t, err, store.ErrNotFound, "SetDraining of a worker that never sent a heartbeat")
	if ws, err := f.s.ListWorkers(bg); err != nil || len(ws) != 0 {
		t.Fatalf("ListWorkers before any heartbeat = %+v, %v", ws, err)
	}
	for _, c := range []int{-1, store.MaxCapacity + 1} {
		_, err := f.s.Heartbeat(bg, "A", c)
		wantErr(t, err, store.ErrInvalid, fmt.Sprintf("Heartbeat with capacity %d", c))
	}
	if ws, err := f.s.ListWorkers(bg); err != nil || len(ws) != 0 {
		t.Fatalf("a refused Heartbeat wrote %+v, %v", ws, err)
	}
	t0 := f.now()
	b, err := f.s.Heartbeat(bg, "B", 10)
	must(t, err, "Heartbeat B")
	a, err := f.s.Heartbeat(bg, "A", 100)
	must(t, err, "Heartbeat A")
	if a.ID != "A" || a.Capacity != 100 || a.Draining || !near(a.HeartbeatAt, t0, timeTol) || !a.StartedAt.Equal(a.HeartbeatAt) {
		t.Fatalf("first Heartbeat = %+v", a)
	}
	d, err := f.s.SetDraining(bg, "A", true)
	must(t, err, "SetDraining")
	if !d.Draining || d.Capacity != 100 || !d.StartedAt.Equal(a.StartedAt) {
		t.Fatalf("SetDraining = %+v", d)
	}
	f.advance(time.Minute)
	a2, err := f.s.Heartbeat(bg, "A", 50)
	must(t, err, "Heartbeat A again")
	if !a2.Draining || a2.Capacity != 50 || !a2.StartedAt.Equal(a.StartedAt) || a2.HeartbeatAt.Sub(a.HeartbeatAt) < time.Minute-timeTol {
		t.Fatalf("second Heartbeat = %+v, want draining kept, capacity 50, StartedAt %v, HeartbeatAt a minute later", a2, a.StartedAt)
	}
	ws, err := f.s.ListWorkers(bg)
	must(t, err, "ListWorkers")
	if len(ws) != 2 || ws[0].ID != "A" || ws[1].ID != "B" || !ws[0].Draining || ws[1].Draining ||
		!ws[0].HeartbeatAt.Equal(a2.HeartbeatAt) || !ws[1].HeartbeatAt.Equal(b.HeartbeatAt) {
		t.Fatalf("ListWorkers = %+v", ws)
	}
	u, err := f.s.SetDraining(bg, "A", false)
	must(t, err, "SetDraining false")
	if u.Draining || !u.HeartbeatAt.Equal(a2.HeartbeatAt) {
		t.Fatalf("SetDraining false = %+v (it is not a heartbeat)", u)
	}
}
