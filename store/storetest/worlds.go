package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

func worldTests() []testCase {
	return []testCase{
		{"CreateWorldAndErrWorldExists", testCreateWorld},
		{"CreateSeededWorldStartsAtTheSnapshotHeight", testSeededWorld},
		{"ForkWorldInOneStep", testForkWorld},
		{"ForkWorldErrors", testForkErrors},
		{"ForkWorldFromADerivedState", testForkWorldFrom},
		{"SetWorldStatusIsTheOperatorsPath", testSetWorldStatus},
		{"ListWorldsSortedAndFiltered", testListWorlds},
		{"WatermarkCASConflict", testWatermarks},
	}
}

func testCreateWorld(t *testing.T, open Factory) {
	f := setup(t, open)
	before := f.now()
	w := f.world("w")
	if w.ID != "w" || w.Universe != universe || w.Status != store.WorldActive || w.ParentWorld != "" || !near(w.CreatedAt, before, timeTol) {
		t.Fatalf("CreateWorld = %+v", w)
	}
	got, err := f.s.GetWorld(bg, "w")
	must(t, err, "GetWorld")
	if got.ID != w.ID || got.Universe != w.Universe || got.Status != w.Status || !got.CreatedAt.Equal(w.CreatedAt) {
		t.Fatalf("GetWorld = %+v, want %+v", got, w)
	}
	_, err = f.s.CreateWorld(bg, "another-universe", "w", nil)
	wantErr(t, err, store.ErrWorldExists, "CreateWorld of a taken id")
	_, err = f.s.GetWorld(bg, "nowhere")
	wantErr(t, err, store.ErrWorldNotFound, "GetWorld of an unknown world")
	if h := f.head("w"); h != 0 {
		t.Fatalf("Head of a new world = %d", h)
	}
	if _, ok, err := f.s.ActiveSnapshot(bg, "w"); err != nil || ok {
		t.Fatalf("ActiveSnapshot of an unseeded world: ok=%v, %v", ok, err)
	}
}

func testSeededWorld(t *testing.T, open Factory) {
	f := setup(t, open)
	seed := store.Snapshot{World: "elsewhere", Height: 42, State: []byte("seed-state"), StateHash: "hash-seed"}
	w, err := f.s.CreateWorld(bg, universe, "w", &seed)
	must(t, err, "CreateWorld seeded")
	seed.State[0] = 'X' // the store keeps its own copy
	if w.Status != store.WorldActive {
		t.Fatalf("seeded world = %+v", w)
	}
	if h := f.head("w"); h != 42 {
		t.Fatalf("Head of a world seeded at 42 = %d", h)
	}
	s, ok, err := f.s.ActiveSnapshot(bg, "w")
	if err != nil || !ok || s.World != "w" || s.Height != 42 || !bytes.Equal(s.State, []byte("seed-state")) || s.StateHash != "hash-seed" {
		t.Fatalf("ActiveSnapshot = %+v, %v, %v; want the seed as w's baseline", s, ok, err)
	}
	if evs := f.read("w"); len(evs) != 0 {
		t.Fatalf("a seeded world's journal has %d events", len(evs))
	}
	e := f.acquire("w", "A").Epoch
	a := f.append("w", store.AppendOptions{ExpectedHead: store.Head(42), Fence: &store.Fence{World: "w", Epoch: e}}, "first")
	if a[0].RunSeq <= 42 || f.head("w") != a[0].RunSeq {
		t.Fatalf("first append to a seeded world = %+v", a[0])
	}
}

// Seed 002 §7: the fork transaction allocates the world, sets its baseline
// to the source snapshot and its head to the snapshot's height, starts an
// empty inbox, records lineage, and inherits no pending effects, timers or
// idempotency caches. Intent hashes are global (see effectTests), so "no
// effects" is checked as: nothing queued or scheduled belongs to the fork,
// and the source's intents stay the source's; per-world dedupe (inbox keys,
// fabric message ids) starts empty.
func testForkWorld(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("src", "A")
	ab := f.append("src", fenced("src", e), "a", "b")
	f.append("src", fenced("src", e), "c")
	f.enqueue("src", "event", "k1", []byte("in"))
	if _, err := f.s.Send(bg, "src", "m1", store.InboxItem{Payload: []byte("msg")}); err != nil {
		t.Fatal(err)
	}
	f.publish("src", e, "i1")
	must(t, f.s.Schedule(bg, "src", e, "t1", f.now().Add(time.Second), nil), "Schedule")
	must(t, f.s.PutSnapshot(bg, "src", e, snap(ab[0].RunSeq, "at-a")), "PutSnapshot a")
	must(t, f.s.PutSnapshot(bg, "src", e, snap(ab[1].RunSeq, "at-b")), "PutSnapshot b")
	srcBefore := f.worldState("src")

	// Fork from a stored snapshot that is not the active baseline.
	height := ab[0].RunSeq
	w, err := f.s.ForkWorld(bg, "src", height, "fork")
	must(t, err, "ForkWorld")
	if w.ID != "fork" || w.Universe != universe || w.Status != store.WorldActive || w.ParentWorld != "src" ||
		w.ParentSnapshotHash != "hash-at-a" || w.ForkedAtHeight != height {
		t.Fatalf("ForkWorld = %+v", w)
	}
	if got, err := f.s.GetWorld(bg, "fork"); err != nil || got.ParentWorld != "src" || got.ForkedAtHeight != height || got.ParentSnapshotHash != "hash-at-a" {
		t.Fatalf("GetWorld(fork) = %+v, %v", got, err)
	}
	if h := f.head("fork"); h != height {
		t.Fatalf("fork head = %d, want the snapshot height %d", h, height)
	}
	if evs := f.read("fork"); len(evs) != 0 {
		t.Fatalf("fork journal = %v, want empty (baseline + empty tail)", eventIDs(evs))
	}
	s, ok, err := f.s.ActiveSnapshot(bg, "fork")
	if err != nil || !ok || s.World != "fork" || s.Height != height || !bytes.Equal(s.State, []byte("at-a")) || s.StateHash != "hash-at-a" {
		t.Fatalf("fork baseline = %+v, %v, %v", s, ok, err)
	}
	if items := f.inbox("fork"); len(items) != 0 || f.cursor("fork") != 0 {
		t.Fatalf("fork inbox = %+v, cursor %d; want empty", items, f.cursor("fork"))
	}
	if after := f.worldState("src"); after != srcBefore {
		t.Fatalf("ForkWorld changed the source:\nbefore %s\nafter  %s", srcBefore, after)
	}

	// A fresh world for leases and dedupe: any worker may lease it, and the
	// source's inbox keys and fabric message ids do not dedupe on the fork.
	ef := f.acquire("fork", "B").Epoch
	if _, dup := f.enqueue("fork", "event", "k1", nil); dup {
		t.Fatal("the source's inbox dedupe key deduped on the fork")
	}
	if r, err := f.s.Send(bg, "fork", "m1", store.InboxItem{}); err != nil || r.Status != store.FabricOK {
		t.Fatalf("m1 to the fork = %+v, %v; want ok", r, err)
	}
	a := f.append("fork", fenced("fork", ef), "b")
	if a[0].Idempotent || a[0].RunSeq <= height {
		t.Fatalf("fork's first append = %+v; the source's keys must not dedupe it", a[0])
	}
	// No effects or timers of the fork.
	if st := f.effectStatus("i1"); st.World != "src" {
		t.Fatalf("i1 now belongs to %q", st.World)
	}
	f.advance(2 * time.Second)
	for _, it := range f.claim("adapter", 100) {
		if it.World == "fork" {
			t.Fatalf("the fork inherited effect %+v", it)
		}
	}
	for _, it := range f.claimDue("tw", 100) {
		if it.World == "fork" {
			t.Fatalf("the fork inherited timer %+v", it)
		}
	}
}

// ForkWorldFrom forks at a height without a stored snapshot, from a state
// the caller derived: the fork is ForkWorld's in every other way, the
// source is untouched, and the height may not pass the source's head.
func testForkWorldFrom(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("src", "A")
	a := f.append("src", fenced("src", e), "a", "b", "c")
	f.world("taken")
	srcBefore := f.worldState("src")
	height := a[1].RunSeq
	base := store.Snapshot{World: "ignored", Height: height, State: []byte("derived-at-b"), StateHash: "hash-derived-at-b"}
	w, err := f.s.ForkWorldFrom(bg, "src", base, "fork")
	must(t, err, "ForkWorldFrom")
	base.State[0] = 'X' // the store keeps its own copy
	if w.ID != "fork" || w.Universe != universe || w.Status != store.WorldActive || w.ParentWorld != "src" ||
		w.ParentSnapshotHash != "hash-derived-at-b" || w.ForkedAtHeight != height || w.CreatedAt.IsZero() {
		t.Fatalf("ForkWorldFrom = %+v", w)
	}
	if got, err := f.s.GetWorld(bg, "fork"); err != nil || got.ParentWorld != "src" || got.ForkedAtHeight != height ||
		got.ParentSnapshotHash != "hash-derived-at-b" || got.Universe != universe || !got.CreatedAt.Equal(w.CreatedAt) {
		t.Fatalf("GetWorld(fork) = %+v, %v", got, err)
	}
	if h := f.head("fork"); h != height {
		t.Fatalf("fork head = %d, want %d", h, height)
	}
	if evs := f.read("fork"); len(evs) != 0 {
		t.Fatalf("fork journal = %v, want empty", eventIDs(evs))
	}
	s, ok, err := f.s.ActiveSnapshot(bg, "fork")
	if err != nil || !ok || s.World != "fork" || s.Height != height || !bytes.Equal(s.State, []byte("derived-at-b")) || s.StateHash != "hash-derived-at-b" {
		t.Fatalf("fork baseline = %+v, %v, %v", s, ok, err)
	}
	if after := f.worldState("src"); after != srcBefore {
		t.Fatalf("ForkWorldFrom changed the source:\nbefore %s\nafter  %s", srcBefore, after)
	}
	if _, ok, err := f.s.SnapshotBelow(bg, "src", a[2].RunSeq+1); err != nil || ok {
		t.Fatalf("the source has a snapshot after ForkWorldFrom: %v %v", ok, err)
	}
	ef := f.acquire("fork", "B").Epoch
	if got := f.append("fork", fenced("fork", ef), "b"); got[0].Idempotent || got[0].RunSeq <= height {
		t.Fatalf("fork's first append = %+v", got[0])
	}

	_, err = f.s.ForkWorldFrom(bg, "nowhere", snap(1, "x"), "new")
	wantErr(t, err, store.ErrWorldNotFound, "ForkWorldFrom of an unknown world")
	_, err = f.s.ForkWorldFrom(bg, "src", snap(a[2].RunSeq+1, "x"), "new")
	wantErr(t, err, store.ErrInvalid, "ForkWorldFrom past the source's head")
	_, err = f.s.ForkWorldFrom(bg, "src", snap(height, "x"), "taken")
	wantErr(t, err, store.ErrWorldExists, "ForkWorldFrom onto a taken id")
	_, err = f.s.ForkWorldFrom(bg, "src", snap(height, "x"), "fork")
	wantErr(t, err, store.ErrWorldExists, "ForkWorldFrom onto the fork again")
	_, err = f.s.GetWorld(bg, "new")
	wantErr(t, err, store.ErrWorldNotFound, "GetWorld after failed forks")
	if got, err := f.s.GetWorld(bg, "taken"); err != nil || got.ParentWorld != "" {
		t.Fatalf("a failed fork changed the existing world: %+v, %v", got, err)
	}
}

func testForkErrors(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("src", "A")
	a := f.append("src", fenced("src", e), "a")
	must(t, f.s.PutSnapshot(bg, "src", e, snap(a[0].RunSeq, "s")), "PutSnapshot")
	f.world("taken")
	_, err := f.s.ForkWorld(bg, "nowhere", 1, "new")
	wantErr(t, err, store.ErrWorldNotFound, "fork of an unknown world")
	_, err = f.s.ForkWorld(bg, "src", a[0].RunSeq+100, "new")
	wantErr(t, err, store.ErrSnapshotNotFound, "fork at a height without a snapshot")
	_, err = f.s.ForkWorld(bg, "src", a[0].RunSeq, "taken")
	wantErr(t, err, store.ErrWorldExists, "fork onto a taken id")
	// A failed fork leaves nothing behind.
	_, err = f.s.GetWorld(bg, "new")
	wantErr(t, err, store.ErrWorldNotFound, "GetWorld after failed forks")
	if got, err := f.s.GetWorld(bg, "taken"); err != nil || got.ParentWorld != "" {
		t.Fatalf("failed fork changed the existing world: %+v, %v", got, err)
	}
}

// SetWorldStatus is the operator's path: no lease, the reason and the
// store's time recorded, active <-> paused, active|paused -> archived,
// archived final, the same status again a no-op.
func testSetWorldStatus(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("w")
	var last store.World
	for i, st := range []store.WorldStatus{store.WorldPaused, store.WorldActive, store.WorldArchived} {
		before := f.now()
		reason := fmt.Sprint("reason-", i)
		w := f.setStatus("w", st, reason)
		if w.ID != "w" || w.Status != st || w.StatusReason != reason || !near(w.StatusChangedAt, before, timeTol) {
			t.Fatalf("SetWorldStatus %s = %+v", st, w)
		}
		got, err := f.s.GetWorld(bg, "w")
		must(t, err, "GetWorld")
		if got.Status != st || got.StatusReason != reason || !got.StatusChangedAt.Equal(w.StatusChangedAt) {
			t.Fatalf("GetWorld after %s = %+v, want %+v", st, got, w)
		}
		last = w
		f.advance(time.Second)
	}
	for _, st := range []store.WorldStatus{store.WorldActive, store.WorldPaused} {
		_, err := f.s.SetWorldStatus(bg, "w", st, "undo")
		wantErr(t, err, store.ErrWorldArchived, "SetWorldStatus "+string(st)+" of an archived world")
	}
	// The same status again: a no-op that keeps the recorded reason.
	if again := f.setStatus("w", store.WorldArchived, "again"); again.StatusReason != last.StatusReason || !again.StatusChangedAt.Equal(last.StatusChangedAt) {
		t.Fatalf("archiving an archived world = %+v, want the unchanged %+v", again, last)
	}
	f.world("v")
	_, err := f.s.SetWorldStatus(bg, "v", "fenced", "")
	wantErr(t, err, store.ErrInvalid, "SetWorldStatus to a status that no longer exists")
	_, err = f.s.SetWorldStatus(bg, "nowhere", store.WorldPaused, "")
	wantErr(t, err, store.ErrWorldNotFound, "SetWorldStatus of an unknown world")
	if w, _ := f.s.GetWorld(bg, "v"); w.Status != store.WorldActive || !w.StatusChangedAt.IsZero() || w.StatusReason != "" {
		t.Fatalf("a refused status change applied: %+v", w)
	}
}

func testListWorlds(t *testing.T, open Factory) {
	f := setup(t, open)
	for _, id := range []string{"c", "a", "b"} {
		f.world(id)
	}
	if _, err := f.s.CreateWorld(bg, "u2", "d", nil); err != nil {
		t.Fatal(err)
	}
	f.setStatus("b", store.WorldArchived, "")
	list := func(u string, st store.WorldStatus) string {
		t.Helper()
		ws, err := f.s.ListWorlds(bg, u, st)
		must(t, err, "ListWorlds")
		ids := make([]string, len(ws))
		for i, w := range ws {
			if w.Universe != u || (st != "" && w.Status != st) {
				t.Fatalf("ListWorlds(%s, %q) returned %+v", u, st, w)
			}
			ids[i] = w.ID
		}
		return fmt.Sprint(ids)
	}
	for _, c := range []struct {
		u    string
		st   store.WorldStatus
		want string
	}{
		{universe, "", "[a b c]"},
		{universe, store.WorldActive, "[a c]"},
		{universe, store.WorldArchived, "[b]"},
		{universe, store.WorldPaused, "[]"},
		{"u2", "", "[d]"},
		{"u3", "", "[]"},
	} {
		if got := list(c.u, c.st); got != c.want {
			t.Fatalf("ListWorlds(%s, %q) = %s, want %s", c.u, c.st, got, c.want)
		}
	}
}

func testWatermarks(t *testing.T, open Factory) {
	f := setup(t, open)
	get := func(p, s string) uint64 {
		t.Helper()
		v, err := f.s.GetWatermark(bg, p, s)
		must(t, err, "GetWatermark")
		return v
	}
	if v := get("proj", "run-1"); v != 0 {
		t.Fatalf("initial watermark = %d", v)
	}
	must(t, f.s.CASWatermark(bg, "proj", "run-1", 0, 5), "CAS 0→5")
	wantErr(t, f.s.CASWatermark(bg, "proj", "run-1", 0, 7), store.ErrWatermarkConflict, "CAS from a stale value")
	if v := get("proj", "run-1"); v != 5 {
		t.Fatalf("watermark after a conflict = %d, want 5", v)
	}
	must(t, f.s.CASWatermark(bg, "proj", "run-1", 5, 7), "CAS 5→7")
	// Independent per (projector, stream).
	if get("proj", "run-2") != 0 || get("other", "run-1") != 0 || get("proj", "run-1") != 7 {
		t.Fatal("watermarks leak between projectors or streams")
	}
	must(t, f.s.CASWatermark(bg, "other", "run-1", 0, 1), "CAS other")
}
