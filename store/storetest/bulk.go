package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
		{"AcquireLeasesAnswersEachWorldAsAcquireWould", testAcquireLeases},
		{"AcquireLeasesRaisesEpochsAfterReleaseAndExpiry", testAcquireLeasesEpochs},
		{"AcquireLeasesReportsTheInboxBacklog", testAcquireLeasesBacklog},
		{"AcquireLeasesReportsTheNextTimer", testAcquireLeasesNextTimer},
		{"AcquireLeasesOfManyWorldsInOneCall", testAcquireLeasesMany},
		{"AcquireLeasesCallErrorsAreTheCalls", testAcquireLeasesCallErrors},
		{"ConcurrentAcquireLeasesOneWinnerPerWorld", testConcurrentAcquireLeases},
		{"ListWorkerWorldsPagesWithLeaseAndAssignment", testListWorkerWorldsPages},
		{"ListWorkerWorldsReportsEachWorldsBacklog", testListWorkerWorldsBacklog},
		{"WorkerInventoryHeartbeatAndDraining", testWorkerInventory},
		{"WorkerCapabilitiesAdvertisedKeptAndReplaced", testWorkerCapabilities},
		{"WorkerCapabilitiesRefusesAbsurdLists", testWorkerCapabilitiesInvalid},
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

// testListWorkerWorldsBacklog: a row reports whether its world's inbox
// holds items beyond the cursor, for a leased world and for an assigned
// one, and stops reporting it once a commit moves the cursor past them.
func testListWorkerWorldsBacklog(t *testing.T, open Factory) {
	f := setup(t, open)
	epoch := f.leased("held", "A")
	f.world("assigned")
	must(t, f.s.Assign(bg, "assigned", store.Assignment{DesiredWorker: "A"}, nil), "Assign")
	backlog := func() map[string]bool {
		t.Helper()
		ws, err := f.s.ListWorkerWorlds(bg, "A", "", 10)
		must(t, err, "ListWorkerWorlds")
		out := map[string]bool{}
		for _, w := range ws {
			out[w.World] = w.Backlog
		}
		if len(out) != 2 {
			t.Fatalf("ListWorkerWorlds(A) listed %v, want held and assigned", out)
		}
		return out
	}
	if b := backlog(); b["held"] || b["assigned"] {
		t.Fatalf("empty inboxes reported a backlog: %v", b)
	}
	s1, _ := f.enqueue("held", "event", "k1", nil)
	s2, _ := f.enqueue("held", "event", "k2", nil)
	f.enqueue("assigned", "event", "k1", nil)
	if b := backlog(); !b["held"] || !b["assigned"] {
		t.Fatalf("inboxes with items reported none: %v", b)
	}
	head := f.head("held")
	_, err := f.s.Commit(bg, "held", epoch, store.CommitBatch{ExpectedCursor: 0, NewCursor: s1, ExpectedHead: head, Entries: []store.Record{rec("e1")}})
	must(t, err, "Commit")
	if b := backlog(); !b["held"] {
		t.Fatalf("one item of two consumed: no backlog reported: %v", b)
	}
	_, err = f.s.Commit(bg, "held", epoch, store.CommitBatch{ExpectedCursor: s1, NewCursor: s2, ExpectedHead: head + 1, Entries: []store.Record{rec("e2")}})
	must(t, err, "Commit")
	if b := backlog(); b["held"] || !b["assigned"] {
		t.Fatalf("after the cursor passed every item: %v, want held false, assigned true", b)
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

// acquireMix builds, for worker A, one world in every state an acquisition
// can meet, and returns the worlds to acquire in one call, with a world
// named twice (one that A takes, one that B holds) at the end:
//
//	a-free       never leased, an item in its inbox      taken, epoch 1, backlog
//	a-assigned   assigned to A                           taken, epoch 1
//	a-mine       A's live lease, its one item drained    kept as it is
//	a-released   A's lease released, two items waiting   taken, epoch 2, backlog
//	a-expired    B's lease, expired                      taken, epoch 2
//	a-held       B's live lease                          ErrLeaseHeld
//	a-elsewhere  assigned to B                           ErrNotAssigned
//	a-paused     paused                                  ErrWorldPaused
//	a-archived   archived                                ErrWorldArchived
//	a-missing    no such world                           ErrWorldNotFound
//	a-u2         never leased, in universe u2            taken, epoch 1
func acquireMix(f *fx) []string {
	f.world("a-free")
	f.enqueue("a-free", "event", "", nil)
	f.world("a-assigned")
	must(f.t, f.s.Assign(bg, "a-assigned", store.Assignment{DesiredWorker: "A"}, nil), "Assign")
	mine := f.leased("a-mine", "A")
	f.enqueue("a-mine", "event", "", nil)
	_, err := f.s.DrainToJournal(bg, "a-mine", mine, 0, 0, 1, []store.Record{rec("drained")})
	must(f.t, err, "DrainToJournal")
	rel := f.leased("a-released", "A")
	must(f.t, f.s.Release(bg, "a-released", "A", rel), "Release")
	f.enqueue("a-released", "event", "", nil)
	f.enqueue("a-released", "event", "", nil)
	f.leased("a-expired", "B")
	f.world("a-held")
	f.world("a-elsewhere")
	must(f.t, f.s.Assign(bg, "a-elsewhere", store.Assignment{DesiredWorker: "B"}, nil), "Assign")
	f.world("a-paused")
	f.setStatus("a-paused", store.WorldPaused, "")
	f.world("a-archived")
	f.setStatus("a-archived", store.WorldArchived, "")
	_, err = f.s.CreateWorld(bg, "u2", "a-u2", nil)
	must(f.t, err, "CreateWorld a-u2")
	// a-expired runs out; a-mine, renewed, does not.
	f.advance(leaseTTL / 2)
	_, err = f.s.Renew(bg, "a-mine", "A", mine, leaseTTL)
	must(f.t, err, "Renew")
	f.advance(leaseTTL/2 + margin)
	f.acquire("a-held", "B")
	return []string{"a-free", "a-assigned", "a-mine", "a-released", "a-expired", "a-held", "a-elsewhere",
		"a-paused", "a-archived", "a-missing", "a-u2", "a-free", "a-held"}
}

func testAcquireLeases(t *testing.T, open Factory) {
	// The same mix in two stores: one call of AcquireLeases in the first,
	// Acquire world after world (the same order) in the second. Every
	// answer must be the same.
	f, alone := setup(t, open), setup(t, open)
	ws := acquireMix(f)
	acquireMix(alone)
	mine, _, _ := f.s.GetLease(bg, "a-mine")
	before := f.now()
	got, err := f.s.AcquireLeases(bg, "A", ws, leaseTTL)
	must(t, err, "AcquireLeases")
	if len(got) != len(ws) {
		t.Fatalf("%d results for %d worlds", len(got), len(ws))
	}
	type verdict struct {
		err     error
		epoch   uint64
		backlog bool
	}
	want := []verdict{{nil, 1, true}, {nil, 1, false}, {nil, mine.Epoch, false}, {nil, 2, true}, {nil, 2, false},
		{store.ErrLeaseHeld, 0, false}, {store.ErrNotAssigned, 0, false}, {store.ErrWorldPaused, 0, false},
		{store.ErrWorldArchived, 0, false}, {store.ErrWorldNotFound, 0, false}, {nil, 1, false},
		{nil, 1, true}, {store.ErrLeaseHeld, 0, false}}
	aloneNow := alone.now()
	for i, r := range got {
		w := ws[i]
		if r.World != w {
			t.Fatalf("result %d is for %s, want %s (in order)", i, r.World, w)
		}
		single, serr := alone.s.Acquire(bg, w, "A", leaseTTL)
		if v := want[i]; v.err != nil {
			wantErr(t, r.Err, v.err, "AcquireLeases of "+w)
			wantErr(t, serr, v.err, "Acquire of "+w)
			if r.Lease != (store.Lease{}) || r.Universe != "" || r.Backlog {
				t.Fatalf("refused %s answered %+v", w, r)
			}
			continue
		}
		must(t, r.Err, "AcquireLeases of "+w)
		must(t, serr, "Acquire of "+w)
		if r.Lease.World != w || r.Lease.Holder != "A" || r.Lease.Epoch != want[i].epoch || single.Epoch != r.Lease.Epoch || single.Holder != "A" {
			t.Fatalf("%s: AcquireLeases %+v, Acquire alone %+v, want A at epoch %d", w, r.Lease, single, want[i].epoch)
		}
		// A fresh lease expires a TTL after the call (in each store's
		// clock); a kept one is the stored lease, unchanged.
		if w == "a-mine" {
			if !r.Lease.ExpiresAt.Equal(mine.ExpiresAt) {
				t.Fatalf("a-mine kept with expiry %v, its lease says %v", r.Lease.ExpiresAt, mine.ExpiresAt)
			}
		} else if !near(r.Lease.ExpiresAt, before.Add(leaseTTL), timeTol) || !near(single.ExpiresAt, aloneNow.Add(leaseTTL), timeTol) {
			t.Fatalf("%s expires at %v (alone %v), want a TTL after the call", w, r.Lease.ExpiresAt, single.ExpiresAt)
		}
		wantUniverse := universe
		if w == "a-u2" {
			wantUniverse = "u2"
		}
		if r.Universe != wantUniverse || r.Backlog != want[i].backlog {
			t.Fatalf("%s: universe %q backlog %v, want %q and %v", w, r.Universe, r.Backlog, wantUniverse, want[i].backlog)
		}
		if stored, _, _ := f.s.GetLease(bg, w); stored != r.Lease {
			t.Fatalf("%s: stored lease %+v, answered %+v", w, stored, r.Lease)
		}
	}
	// The world named twice: its second answer is the lease its first took.
	if got[11].Lease != got[0].Lease {
		t.Fatalf("a-free named twice: %+v then %+v", got[0].Lease, got[11].Lease)
	}
	if l, _, _ := f.s.GetLease(bg, "a-held"); l.Holder != "B" {
		t.Fatalf("a refused acquisition changed B's lease: %+v", l)
	}
	// Again, by the same holder: every lease taken is kept as it is (same
	// epoch, same expiry), and the refusals stand.
	f.advance(leaseTTL / 4)
	again, err := f.s.AcquireLeases(bg, "A", ws, leaseTTL)
	must(t, err, "AcquireLeases again")
	for i, r := range again {
		if want[i].err != nil {
			wantErr(t, r.Err, want[i].err, "AcquireLeases again of "+ws[i])
			continue
		}
		if r.Err != nil || r.Lease != got[i].Lease {
			t.Fatalf("re-acquiring %s = %+v, %v; want its lease %+v unchanged", ws[i], r.Lease, r.Err, got[i].Lease)
		}
	}
	if got, err := f.s.AcquireLeases(bg, "A", nil, leaseTTL); err != nil || len(got) != 0 {
		t.Fatalf("AcquireLeases of nothing = %+v, %v", got, err)
	}
}

func testAcquireLeasesEpochs(t *testing.T, open Factory) {
	f := setup(t, open)
	ws := []string{"e0", "e1", "e2"}
	for _, w := range ws {
		f.world(w)
	}
	epochs := func(worker string, ws ...string) []uint64 {
		t.Helper()
		res, err := f.s.AcquireLeases(bg, worker, ws, leaseTTL)
		must(t, err, "AcquireLeases")
		out := make([]uint64, len(res))
		for i, r := range res {
			must(t, r.Err, "AcquireLeases of "+r.World)
			if r.Lease.Holder != worker {
				t.Fatalf("%s held by %q, want %s", r.World, r.Lease.Holder, worker)
			}
			out[i] = r.Lease.Epoch
		}
		return out
	}
	if got := epochs("A", ws...); fmt.Sprint(got) != "[1 1 1]" {
		t.Fatalf("first epochs %v, want [1 1 1]", got)
	}
	_, err := f.s.ReleaseLeases(bg, "A", []store.LeaseRef{{World: "e0", Epoch: 1}})
	must(t, err, "ReleaseLeases")
	// Released: the next acquisition, even by the same worker, is a new
	// epoch; the others are still held and kept.
	if got := epochs("A", ws...); fmt.Sprint(got) != "[2 1 1]" {
		t.Fatalf("after e0's release: %v, want [2 1 1]", got)
	}
	// Expired: a new epoch for whoever takes it next, the old holder too.
	f.advance(leaseTTL + margin)
	if got := epochs("B", "e0", "e1"); fmt.Sprint(got) != "[3 2]" {
		t.Fatalf("B after expiry: %v, want [3 2]", got)
	}
	if got := epochs("A", "e2"); fmt.Sprint(got) != "[2]" {
		t.Fatalf("A after its own lease expired: %v, want [2]", got)
	}
	// The old epochs are fenced.
	_, err = f.s.Append(bg, "e2", []store.Record{rec("x")}, fenced("e2", 1))
	wantErr(t, err, store.ErrFenced, "append at the epoch before the re-acquisition")
}

func testAcquireLeasesBacklog(t *testing.T, open Factory) {
	f := setup(t, open)
	for _, w := range []string{"b-empty", "b-waiting", "b-drained", "b-more"} {
		f.world(w)
	}
	f.enqueue("b-waiting", "event", "", nil)
	// b-drained: its items drained; b-more: drained, then one more.
	for _, w := range []string{"b-drained", "b-more"} {
		e := f.acquire(w, "A").Epoch
		f.enqueue(w, "event", "", nil)
		f.enqueue(w, "event", "", nil)
		_, err := f.s.DrainToJournal(bg, w, e, 0, 0, 2, []store.Record{rec("d")})
		must(t, err, "DrainToJournal "+w)
	}
	f.enqueue("b-more", "event", "", nil)
	ws := []string{"b-empty", "b-waiting", "b-drained", "b-more"}
	res, err := f.s.AcquireLeases(bg, "A", ws, leaseTTL)
	must(t, err, "AcquireLeases")
	for i, want := range []bool{false, true, false, true} {
		r := res[i]
		must(t, r.Err, "AcquireLeases of "+r.World)
		if r.Backlog != want || r.Universe != universe {
			t.Fatalf("%s: backlog %v universe %q, want %v and %q", r.World, r.Backlog, r.Universe, want, universe)
		}
		// The flag says what ReadInbox after the cursor says.
		items, err := f.s.ReadInbox(bg, r.World, f.cursor(r.World), 1)
		must(t, err, "ReadInbox")
		if (len(items) > 0) != r.Backlog {
			t.Fatalf("%s: backlog %v, but the inbox holds %d items after the cursor", r.World, r.Backlog, len(items))
		}
	}
	// A refused world carries no backlog, however full its inbox.
	res, err = f.s.AcquireLeases(bg, "B", []string{"b-waiting"}, leaseTTL)
	must(t, err, "AcquireLeases by B")
	wantErr(t, res[0].Err, store.ErrLeaseHeld, "AcquireLeases of A's world by B")
	if res[0].Backlog || res[0].Universe != "" {
		t.Fatalf("refused answer %+v", res[0])
	}
}

// AcquireLeases reports each taken world's earliest timer not yet
// delivered: scheduled or claimed timers count, cancelled and delivered
// ones do not, and a refused world reports none.
func testAcquireLeasesNextTimer(t *testing.T, open Factory) {
	f := setup(t, open)
	ws := []string{"n-none", "n-two", "n-cancelled", "n-fired"}
	for _, w := range ws {
		f.world(w)
	}
	soon, later := f.now().Add(time.Hour), f.now().Add(2*time.Hour)
	e := f.acquire("n-two", "A").Epoch
	must(t, f.s.Schedule(bg, "n-two", e, "n-two-later", later, nil), "Schedule")
	must(t, f.s.Schedule(bg, "n-two", e, "n-two-soon", soon, nil), "Schedule")
	e = f.acquire("n-cancelled", "A").Epoch
	must(t, f.s.Schedule(bg, "n-cancelled", e, "n-cancelled-t", soon, nil), "Schedule")
	must(t, f.s.CancelTimer(bg, "n-cancelled", e, "n-cancelled-t"), "CancelTimer")
	e = f.acquire("n-fired", "A").Epoch
	must(t, f.s.Schedule(bg, "n-fired", e, "n-fired-t", f.now(), nil), "Schedule")
	_, err := f.s.FireHeld(bg, "n-fired", e, "n-fired-t")
	must(t, err, "FireHeld")
	res, err := f.s.AcquireLeases(bg, "A", ws, leaseTTL)
	must(t, err, "AcquireLeases")
	for i, want := range []time.Time{{}, soon, {}, {}} {
		r := res[i]
		must(t, r.Err, "AcquireLeases of "+r.World)
		if !r.NextTimer.Equal(want) {
			t.Fatalf("%s: next timer %v, want %v", r.World, r.NextTimer, want)
		}
	}
	// A claimed timer is not delivered: it still counts.
	claimed, err := f.s.ClaimDue(bg, "timer-worker", 10, leaseTTL)
	must(t, err, "ClaimDue")
	if len(claimed) != 0 {
		t.Fatalf("claimed %+v before any timer was due", claimed)
	}
	e = res[1].Lease.Epoch
	must(t, f.s.Schedule(bg, "n-two", e, "n-two-now", f.now(), nil), "Schedule")
	claimed, err = f.s.ClaimDue(bg, "timer-worker", 10, leaseTTL)
	must(t, err, "ClaimDue")
	if len(claimed) != 1 || claimed[0].IntentHash != "n-two-now" {
		t.Fatalf("claimed %+v, want n-two-now", claimed)
	}
	res, err = f.s.AcquireLeases(bg, "A", []string{"n-two"}, leaseTTL)
	must(t, err, "AcquireLeases again")
	must(t, res[0].Err, "AcquireLeases of n-two")
	if !res[0].NextTimer.Equal(claimed[0].DeliverAt) {
		t.Fatalf("n-two: next timer %v, want the claimed one's %v", res[0].NextTimer, claimed[0].DeliverAt)
	}
	// A refused world reports none.
	res, err = f.s.AcquireLeases(bg, "B", []string{"n-two"}, leaseTTL)
	must(t, err, "AcquireLeases by B")
	wantErr(t, res[0].Err, store.ErrLeaseHeld, "AcquireLeases of A's world by B")
	if !res[0].NextTimer.IsZero() {
		t.Fatalf("refused answer %+v", res[0])
	}
}

// More worlds than a backend may read or write in one statement, with a
// world named twice far apart: the answers are those of the small calls.
func testAcquireLeasesMany(t *testing.T, open Factory) {
	f := setup(t, open)
	const n = 600
	var ws []string
	for i := range n {
		id := fmt.Sprintf("m%03d", i)
		f.world(id)
		if i%7 == 3 {
			f.acquire(id, "B")
		}
		if i%11 == 5 {
			f.enqueue(id, "event", "", nil)
		}
		ws = append(ws, id)
	}
	ws = append(ws, "m010", "m003", "nope")
	res, err := f.s.AcquireLeases(bg, "A", ws, leaseTTL)
	must(t, err, "AcquireLeases")
	if len(res) != len(ws) {
		t.Fatalf("%d results for %d worlds", len(res), len(ws))
	}
	for i, r := range res {
		if r.World != ws[i] {
			t.Fatalf("result %d is for %s, want %s", i, r.World, ws[i])
		}
		var k int
		fmt.Sscanf(ws[i], "m%03d", &k)
		switch {
		case ws[i] == "nope":
			wantErr(t, r.Err, store.ErrWorldNotFound, "AcquireLeases of nope")
		case k%7 == 3:
			wantErr(t, r.Err, store.ErrLeaseHeld, "AcquireLeases of "+ws[i])
		default:
			if r.Err != nil || r.Lease.Holder != "A" || r.Lease.Epoch != 1 || r.Backlog != (k%11 == 5) {
				t.Fatalf("%s = %+v", ws[i], r)
			}
		}
	}
	if res[n].Lease != res[10].Lease {
		t.Fatalf("m010 named twice: %+v then %+v", res[10].Lease, res[n].Lease)
	}
	got, err := f.s.ListWorkerWorlds(bg, "A", "", store.MaxBatch)
	must(t, err, "ListWorkerWorlds")
	if want := n - (n+3)/7; len(got) != want {
		t.Fatalf("A holds %d worlds, want %d", len(got), want)
	}
}

func testAcquireLeasesCallErrors(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	ctx, cancel := context.WithCancel(bg)
	cancel()
	res, err := f.s.AcquireLeases(ctx, "A", []string{"w"}, leaseTTL)
	if !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("AcquireLeases with a cancelled context = %+v, %v", res, err)
	}
	if _, ok, _ := f.s.GetLease(bg, "w"); ok {
		t.Fatal("a cancelled AcquireLeases took the lease")
	}
	must(t, f.s.Close(), "Close")
	res, err = f.s.AcquireLeases(bg, "A", []string{"w"}, leaseTTL)
	wantErr(t, err, store.ErrClosed, "AcquireLeases on a closed store")
	if res != nil {
		t.Fatalf("a failed call answered %+v", res)
	}
}

// Acquirers racing for the same never leased worlds, each naming them in
// another order and mixed with single Acquires: every world has exactly
// one winner, at epoch 1, and every other acquirer is told ErrLeaseHeld
// (a backend that creates lease rows must cope with another caller
// creating the same row meanwhile).
func testConcurrentAcquireLeases(t *testing.T, open Factory) {
	f := setup(t, open)
	var ws []string
	for i := range 40 {
		ws = append(ws, fmt.Sprintf("c%02d", i))
		f.world(ws[i])
	}
	const n = 6
	res := make([][]store.AcquireResult, n)
	errs := make([]error, n)
	single := make([]error, len(ws))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		order := slices.Clone(ws)
		switch i % 3 {
		case 1:
			slices.Reverse(order)
		case 2:
			order = append(order[len(order)/2:], order[:len(order)/2]...)
		}
		wg.Go(func() {
			<-start
			res[i], errs[i] = f.s.AcquireLeases(bg, fmt.Sprintf("worker-%d", i), order, leaseTTL)
		})
	}
	for j := 0; j < len(ws); j += 4 {
		wg.Go(func() {
			<-start
			_, single[j] = f.s.Acquire(bg, ws[j], "single", leaseTTL)
		})
	}
	close(start)
	wg.Wait()
	winners := map[string][]string{}
	for i := range n {
		must(t, errs[i], fmt.Sprintf("AcquireLeases by worker-%d", i))
		for _, r := range res[i] {
			if r.Err == nil {
				if r.Lease.Epoch != 1 {
					t.Fatalf("%s won %s at epoch %d, want 1", r.Lease.Holder, r.World, r.Lease.Epoch)
				}
				winners[r.World] = append(winners[r.World], r.Lease.Holder)
				continue
			}
			wantErr(t, r.Err, store.ErrLeaseHeld, fmt.Sprintf("worker-%d's acquisition of %s", i, r.World))
		}
	}
	for j, err := range single {
		if j%4 != 0 {
			continue
		}
		if err == nil {
			winners[ws[j]] = append(winners[ws[j]], "single")
		} else {
			wantErr(t, err, store.ErrLeaseHeld, "single Acquire of "+ws[j])
		}
	}
	for _, w := range ws {
		l, ok, err := f.s.GetLease(bg, w)
		must(t, err, "GetLease")
		if len(winners[w]) != 1 || !ok || l.Holder != winners[w][0] || l.Epoch != 1 {
			t.Fatalf("%s: winners %v, stored lease %+v", w, winners[w], l)
		}
	}
}

// testWorkerCapabilities: a heartbeat's Advertise is recorded sorted and
// without duplicates, kept by heartbeats that do not advertise (with or
// without a promise) and by SetDraining, and replaced by the next Advertise.
func testWorkerCapabilities(t *testing.T, open Factory) {
	f := setup(t, open)
	check := func(what string, got store.WorkerInfo, want []string) {
		t.Helper()
		if !slices.Equal(got.Capabilities, want) {
			t.Fatalf("%s: Capabilities = %q, want %q", what, got.Capabilities, want)
		}
		ws, err := f.s.ListWorkers(bg)
		must(t, err, "ListWorkers")
		for _, w := range ws {
			if w.ID == got.ID && !slices.Equal(w.Capabilities, want) {
				t.Fatalf("%s: ListWorkers has Capabilities %q, want %q", what, w.Capabilities, want)
			}
		}
	}
	old, err := f.s.Heartbeat(bg, "old", 4)
	must(t, err, "Heartbeat without Advertise")
	check("a worker that never advertised", old, nil)

	caps := []string{"world:orders@2", "role:host", "effect:pay", "role:host", "world:orders@2"}
	a, err := f.s.Heartbeat(bg, "A", 4, store.Advertise(caps))
	must(t, err, "Heartbeat with Advertise")
	want := []string{"effect:pay", "role:host", "world:orders@2"}
	check("first Advertise", a, want)
	caps[0] = "edited-by-the-caller"
	a.Capabilities[0] = "edited-by-the-reader"
	check("after the caller edited its slices", mustWorker(t, f, "A"), want)

	f.advance(time.Second)
	k, err := f.s.Heartbeat(bg, "A", 8)
	must(t, err, "Heartbeat without Advertise")
	check("a heartbeat without Advertise", k, want)
	k, err = f.s.Heartbeat(bg, "A", 8, store.AliveAs("a1", time.Minute))
	must(t, err, "Heartbeat with AliveAs only")
	check("a heartbeat with AliveAs only", k, want)
	d, err := f.s.SetDraining(bg, "A", true)
	must(t, err, "SetDraining")
	check("SetDraining", d, want)

	r, err := f.s.Heartbeat(bg, "A", 8, store.AliveAs("a1", time.Minute), store.Advertise([]string{"role:effects", "effect:email"}))
	must(t, err, "Heartbeat with a new Advertise")
	check("a later Advertise", r, []string{"effect:email", "role:effects"})

	c, err := f.s.Heartbeat(bg, "A", 8, store.Advertise(nil))
	must(t, err, "Heartbeat advertising nothing")
	check("an empty Advertise", c, nil)
	if !store.HasCapability(c, "role:host") {
		t.Fatal("a worker whose record lists nothing must be taken as carrying everything")
	}
}

// testWorkerCapabilitiesInvalid: an advertised list too long, or with an
// empty, oversized or NUL-bearing entry, is ErrInvalid and changes nothing.
func testWorkerCapabilitiesInvalid(t *testing.T, open Factory) {
	f := setup(t, open)
	_, err := f.s.Heartbeat(bg, "A", 4, store.Advertise([]string{"role:host"}))
	must(t, err, "Heartbeat")
	tooMany := make([]string, store.MaxCapabilities+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("effect:k%05d", i)
	}
	for what, caps := range map[string][]string{
		"too many":       tooMany,
		"an empty entry": {"role:host", ""},
		"an oversized":   {"effect:" + strings.Repeat("x", store.MaxKeyBytes)},
		"a NUL":          {"effect:a\x00b"},
		"invalid UTF-8":  {"effect:\xff"},
	} {
		_, err := f.s.Heartbeat(bg, "A", 9, store.Advertise(caps))
		wantErr(t, err, store.ErrInvalid, "Heartbeat advertising "+what)
	}
	if w := mustWorker(t, f, "A"); w.Capacity != 4 || !slices.Equal(w.Capabilities, []string{"role:host"}) {
		t.Fatalf("refused heartbeats changed the record: %+v", w)
	}
	at := make([]string, store.MaxCapabilities)
	copy(at, tooMany)
	w, err := f.s.Heartbeat(bg, "A", 4, store.Advertise(at))
	must(t, err, "Heartbeat advertising MaxCapabilities")
	if len(w.Capabilities) != store.MaxCapabilities {
		t.Fatalf("advertised %d, recorded %d", store.MaxCapabilities, len(w.Capabilities))
	}
}

// mustWorker is worker id's record as ListWorkers has it.
func mustWorker(t *testing.T, f *fx, id string) store.WorkerInfo {
	t.Helper()
	ws, err := f.s.ListWorkers(bg)
	must(t, err, "ListWorkers")
	for _, w := range ws {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("ListWorkers has no %s: %+v", id, ws)
	return store.WorkerInfo{}
}
