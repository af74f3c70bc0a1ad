package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Spawn is CreateWorld, the first Enqueues and, with a holder, the first
// Acquire in one transaction; a Commit's Status ends a world (or pauses
// it) in the transaction of its last cycle. Both are all or nothing, and
// each answers and hints exactly as the separate calls would.
func spawnTests() []testCase {
	return []testCase{
		{"SpawnCreatesTheWorldItsItemsAndItsFirstLease", testSpawnCreates},
		{"SpawnWithoutHolderTakesNoLease", testSpawnWithoutHolder},
		{"SpawnOfATakenIDIsErrWorldExistsAndWritesNothing", testSpawnTakenID},
		{"SpawnOfABadSpecIsErrInvalidAndWritesNothing", testSpawnBadSpec},
		{"SpawnedDedupeKeysDedupeLaterEnqueues", testSpawnKeysDedupe},
		{"SpawnHintsLeasesAndTheWorldsInbox", testSpawnHints},
		{"SpawnWithEventsOpensTheJournal", testSpawnEvents},
		{"SpawnWithEventsButNoHolderIsErrInvalidAndWritesNothing", testSpawnEventsNoHolder},
		{"SpawnWithBadEventsIsErrInvalidAndWritesNothing", testSpawnBadEvents},
		{"SpawnOfATakenIDWithEventsWritesNothing", testSpawnTakenIDEvents},
		{"CommitWithStatusArchivedEndsTheWorldAndItsLease", testCommitArchives},
		{"CommitWithStatusPausedEndsTheLeaseAndResumeGivesTheNextEpoch", testCommitPauses},
		{"CommitWithStatusWhoseOtherPartFailsChangesNothing", testCommitStatusAllOrNothing},
		{"CommitWithABadStatusIsErrInvalidAndWritesNothing", testCommitBadStatus},
	}
}

// spawnItems are three first inputs: two with dedupe keys, one without,
// one with an empty payload.
func spawnItems() []store.InboxItem {
	return []store.InboxItem{
		{Kind: "start", Payload: []byte("input"), DedupeKey: "run-start"},
		{Kind: "event"},
		{Kind: "event", Payload: []byte{0x00, 0xff}, DedupeKey: "k2"},
	}
}

func (f *fx) spawn(spec store.SpawnSpec) store.Spawned {
	f.t.Helper()
	sp, err := f.s.Spawn(bg, spec)
	must(f.t, err, "Spawn "+spec.World)
	return sp
}

func testSpawnCreates(t *testing.T, open Factory) {
	f := setup(t, open)
	before := f.now()
	items := spawnItems()
	sp := f.spawn(store.SpawnSpec{Universe: universe, World: "w", Items: items, Holder: "A", TTL: leaseTTL})

	if w := sp.World; w.ID != "w" || w.Universe != universe || w.Status != store.WorldActive || !near(w.CreatedAt, before, timeTol) {
		t.Fatalf("Spawned.World = %+v", w)
	}
	got, err := f.s.GetWorld(bg, "w")
	must(t, err, "GetWorld")
	if got.ID != "w" || got.Universe != universe || got.Status != store.WorldActive || !got.CreatedAt.Equal(sp.World.CreatedAt) {
		t.Fatalf("GetWorld = %+v, Spawn answered %+v", got, sp.World)
	}
	listed, err := f.s.ListWorlds(bg, universe, store.WorldActive)
	must(t, err, "ListWorlds")
	if len(listed) != 1 || listed[0].ID != "w" {
		t.Fatalf("ListWorlds(active) = %+v, want w", listed)
	}

	if fmt.Sprint(sp.Seqs) != "[1 2 3]" {
		t.Fatalf("Spawned.Seqs = %v, want [1 2 3]", sp.Seqs)
	}
	inbox := f.inbox("w")
	if len(inbox) != len(items) {
		t.Fatalf("inbox = %+v, want %d items", inbox, len(items))
	}
	for i, it := range inbox {
		want := items[i]
		if it.Seq != uint64(i+1) || it.World != "w" || it.Kind != want.Kind || !bytes.Equal(it.Payload, want.Payload) ||
			it.DedupeKey != want.DedupeKey || !near(it.EnqueuedAt, before, timeTol) {
			t.Fatalf("inbox item %d = %+v, want %+v at seq %d", i, it, want, i+1)
		}
	}
	if c, h := f.cursor("w"), f.head("w"); c != 0 || h != 0 {
		t.Fatalf("cursor %d head %d, want 0 0", c, h)
	}

	l := sp.Lease
	if l.World != "w" || l.Holder != "A" || l.Epoch != 1 || !near(l.ExpiresAt, before.Add(leaseTTL), timeTol) {
		t.Fatalf("Spawned.Lease = %+v, want A at epoch 1 expiring about %v", l, before.Add(leaseTTL))
	}
	stored, ok, err := f.s.GetLease(bg, "w")
	if err != nil || !ok || stored.Holder != "A" || stored.Epoch != 1 || !stored.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("GetLease = %+v, %v, %v; Spawn answered %+v", stored, ok, err, l)
	}
	// The lease is a real one: it fences the world's journal, and a
	// worker's cycle drains the spawned items under it.
	f.append("w", fenced("w", 1), "first")
	res, err := f.s.Commit(bg, "w", 1, store.CommitBatch{ExpectedCursor: 0, NewCursor: 3, ExpectedHead: 1, Entries: []store.Record{rec("second")}})
	if err != nil || res.Head != 2 || f.cursor("w") != 3 {
		t.Fatalf("Commit under the spawned lease = %+v, %v; cursor %d", res, err, f.cursor("w"))
	}
	// Its holder already holds it: Acquire answers it unchanged.
	if again := f.acquire("w", "A"); again.Epoch != 1 || !again.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("Acquire by the holder = %+v, want the spawned lease %+v", again, l)
	}
	_, err = f.s.Acquire(bg, "w", "B", leaseTTL)
	wantErr(t, err, store.ErrLeaseHeld, "Acquire by another worker")
	// Later input follows the spawned items.
	if seq, dup := f.enqueue("w", "event", "", nil); dup || seq != 4 {
		t.Fatalf("Enqueue after Spawn = %d dup %v, want 4", seq, dup)
	}
	// Spawn with no items at all is CreateWorld with a lease.
	empty := f.spawn(store.SpawnSpec{Universe: universe, World: "v", Holder: "A", TTL: leaseTTL})
	if len(empty.Seqs) != 0 || empty.Lease.Epoch != 1 || len(f.inbox("v")) != 0 {
		t.Fatalf("Spawn without items = %+v, inbox %+v", empty, f.inbox("v"))
	}
}

func testSpawnWithoutHolder(t *testing.T, open Factory) {
	f := setup(t, open)
	sp := f.spawn(store.SpawnSpec{Universe: universe, World: "w", Items: spawnItems()})
	if sp.Lease != (store.Lease{}) {
		t.Fatalf("Spawned.Lease = %+v, want zero without a holder", sp.Lease)
	}
	if l, ok, err := f.s.GetLease(bg, "w"); err != nil || ok {
		t.Fatalf("GetLease = %+v, %v, %v; want never leased", l, ok, err)
	}
	_, err := f.s.Append(bg, "w", []store.Record{rec("a")}, fenced("w", 1))
	wantErr(t, err, store.ErrFenced, "Append before any lease")
	if e := f.acquire("w", "B").Epoch; e != 1 {
		t.Fatalf("first Acquire after Spawn = epoch %d, want 1", e)
	}
	if n := len(f.inbox("w")); n != 3 {
		t.Fatalf("inbox has %d items, want 3", n)
	}
}

func testSpawnTakenID(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.enqueue("w", "event", "k2", nil)
	f.append("run-1", freeOpts, "a")
	fp := f.fingerprint()

	for _, c := range []struct{ what, id, universe, holder string }{
		{"an existing world", "w", universe, ""},
		{"an existing world, with a holder", "w", universe, "B"},
		{"an existing world, by its own holder", "w", universe, "A"},
		{"an existing world, in another universe", "w", "u2", "B"},
		{"a free stream with events", "run-1", universe, "B"},
	} {
		spec := store.SpawnSpec{Universe: c.universe, World: c.id, Items: spawnItems(), Holder: c.holder}
		if c.holder != "" {
			spec.TTL = leaseTTL
		}
		_, err := f.s.Spawn(bg, spec)
		wantErr(t, err, store.ErrWorldExists, "Spawn over "+c.what)
	}
	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused Spawns wrote:\nbefore %s\nafter  %s", fp, after)
	}
	if other, err := f.s.ListWorlds(bg, "u2", ""); err != nil || len(other) != 0 {
		t.Fatalf("ListWorlds(u2) = %+v, %v; want none", other, err)
	}
	_, err := f.s.GetWorld(bg, "run-1")
	wantErr(t, err, store.ErrWorldNotFound, "GetWorld of the free stream")
	// The existing world is untouched: its holder still writes.
	f.append("w", fenced("w", e), "b")
}

func testSpawnBadSpec(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("w", "A")
	f.append("run-1", freeOpts, "a")
	fp := f.fingerprint()

	good := func() store.SpawnSpec {
		return store.SpawnSpec{Universe: universe, World: "new", Items: spawnItems(), Holder: "A", TTL: leaseTTL}
	}
	type bad struct {
		what   string
		mutate func(*store.SpawnSpec)
	}
	cases := []bad{
		{"receipt kind", func(s *store.SpawnSpec) { s.Items[1].Kind = vocab.KindReceipt }},
		{"timer kind", func(s *store.SpawnSpec) { s.Items[1].Kind = vocab.KindTimer }},
		{"fabric kind", func(s *store.SpawnSpec) { s.Items[1].Kind = vocab.KindFabric }},
		{"empty kind", func(s *store.SpawnSpec) { s.Items[1].Kind = "" }},
		{"receipt key prefix", func(s *store.SpawnSpec) { s.Items[1].DedupeKey = store.ReceiptKeyPrefix + "x" }},
		{"timer key prefix", func(s *store.SpawnSpec) { s.Items[1].DedupeKey = store.TimerKeyPrefix + "x" }},
		{"a dedupe key given twice", func(s *store.SpawnSpec) { s.Items[1].DedupeKey = s.Items[0].DedupeKey }},
		{"over-long dedupe key", func(s *store.SpawnSpec) { s.Items[1].DedupeKey = strings.Repeat("k", store.MaxKeyBytes+1) }},
		{"payload over MaxPayloadBytes", func(s *store.SpawnSpec) { s.Items[1].Payload = make([]byte, store.MaxPayloadBytes+1) }},
		{"more than MaxBatch items", func(s *store.SpawnSpec) {
			s.Items = make([]store.InboxItem, store.MaxBatch+1)
			for i := range s.Items {
				s.Items[i].Kind = "event"
			}
		}},
		{"holder without TTL", func(s *store.SpawnSpec) { s.TTL = 0 }},
		{"TTL without holder", func(s *store.SpawnSpec) { s.Holder = "" }},
		{"negative TTL", func(s *store.SpawnSpec) { s.TTL = -time.Second }},
		{"TTL over MaxTTL", func(s *store.SpawnSpec) { s.TTL = store.MaxTTL + time.Second }},
	}
	for name, v := range sortedMap(badStrings) {
		cases = append(cases,
			bad{"world " + name, func(s *store.SpawnSpec) { s.World = v }},
			bad{"universe " + name, func(s *store.SpawnSpec) { s.Universe = v }},
			bad{"item kind " + name, func(s *store.SpawnSpec) { s.Items[0].Kind = v }},
		)
		if v != "" { // no holder is the empty holder
			cases = append(cases, bad{"holder " + name, func(s *store.SpawnSpec) { s.Holder = v }})
		}
	}
	for _, c := range cases {
		spec := good()
		c.mutate(&spec)
		_, err := f.s.Spawn(bg, spec)
		wantErr(t, err, store.ErrInvalid, "Spawn with "+c.what)
	}
	// A bad spec over a taken id is still ErrInvalid: validation first.
	spec := good()
	spec.World, spec.TTL = "w", 0
	_, err := f.s.Spawn(bg, spec)
	wantErr(t, err, store.ErrInvalid, "Spawn of a bad spec over a taken id")

	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused Spawns wrote:\nbefore %s\nafter  %s", fp, after)
	}
	_, err = f.s.GetWorld(bg, "new")
	wantErr(t, err, store.ErrWorldNotFound, "GetWorld after refused Spawns")
	// The refusals left the id free.
	f.spawn(good())
}

func testSpawnKeysDedupe(t *testing.T, open Factory) {
	f := setup(t, open)
	sp := f.spawn(store.SpawnSpec{Universe: universe, World: "w", Items: spawnItems()})
	if seq, dup := f.enqueue("w", "event", "k2", []byte("again")); !dup || seq != sp.Seqs[2] {
		t.Fatalf("Enqueue of a spawned key = %d dup %v, want %d true", seq, dup, sp.Seqs[2])
	}
	if seq, dup := f.enqueue("w", "start", "run-start", nil); !dup || seq != sp.Seqs[0] {
		t.Fatalf("Enqueue of the start key = %d dup %v, want %d true", seq, dup, sp.Seqs[0])
	}
	if n := len(f.inbox("w")); n != 3 {
		t.Fatalf("inbox has %d items after duplicate enqueues, want 3", n)
	}
}

func testSpawnHints(t *testing.T, open Factory) {
	f := setup(t, open)
	leases := f.watch(store.TopicLeases)
	inbox := f.watch(store.TopicInbox("w"))
	f.spawn(store.SpawnSpec{Universe: universe, World: "w", Items: spawnItems(), Holder: "A", TTL: leaseTTL})
	awaitHint(t, leases.C, "leases after Spawn", func() {
		if l, ok, err := f.s.GetLease(bg, "w"); err != nil || !ok || l.Holder != "A" {
			t.Fatalf("GetLease = %+v, %v, %v", l, ok, err)
		}
	})
	awaitHint(t, inbox.C, "inbox after Spawn", func() {
		if n := len(f.inbox("w")); n != 3 {
			t.Fatalf("inbox has %d items", n)
		}
	})
}

// spawnEvents are a run's first two journal records: its start and its
// first step's start, every field set (the producer's emittedAt too).
func spawnEvents() []store.Record {
	at := time.Date(2026, 3, 1, 9, 30, 0, 123456789, time.UTC)
	return []store.Record{
		{EventID: "ev-run", IdempotencyKey: "key-run", EventType: "RunStarted", EmittedAt: at,
			StepID: "RUN", LogicalAttemptID: 1, EngineAttemptID: 1, PlanID: "plan", PlanVersion: 3, Payload: []byte("input")},
		{EventID: "ev-step", IdempotencyKey: "key-step", EventType: "StepStarted", EmittedAt: at.Add(time.Millisecond),
			StepID: "s1", LogicalAttemptID: 2, EngineAttemptID: 5, PlanID: "plan", PlanVersion: 3, Payload: []byte{0x00, 0xff}},
	}
}

// sameRecord reports whether got is want as the store keeps it: every
// field the producer set, and the store's stream and runSeq.
func sameRecord(got, want store.Record, stream string, runSeq uint64) bool {
	return got.EventID == want.EventID && got.StreamID == stream && got.RunSeq == runSeq &&
		got.IdempotencyKey == want.IdempotencyKey && got.EventType == want.EventType &&
		got.EmittedAt.Equal(want.EmittedAt) && got.StepID == want.StepID &&
		got.LogicalAttemptID == want.LogicalAttemptID && got.EngineAttemptID == want.EngineAttemptID &&
		got.PlanID == want.PlanID && got.PlanVersion == want.PlanVersion && bytes.Equal(got.Payload, want.Payload)
}

func testSpawnEvents(t *testing.T, open Factory) {
	f := setup(t, open)
	before := f.now()
	evs := spawnEvents()
	sp := f.spawn(store.SpawnSpec{Universe: universe, World: "w", Items: spawnItems(), Holder: "A", TTL: leaseTTL, Events: evs})
	want := spawnEvents() // the caller's records may change after the call
	evs[0].Payload[0] = 'X'

	// Each event is new, at 1…n, persisted at the store's time.
	if len(sp.Appended) != len(want) {
		t.Fatalf("Spawned.Appended = %+v, want one per event", sp.Appended)
	}
	for i, a := range sp.Appended {
		if a.EventID != want[i].EventID || a.RunSeq != uint64(i+1) || a.Idempotent || a.Conflict || !near(a.PersistedAt, before, timeTol) {
			t.Fatalf("Spawned.Appended[%d] = %+v, want %s new at runSeq %d, persisted about %v", i, a, want[i].EventID, i+1, before)
		}
	}
	if h := f.head("w"); h != 2 {
		t.Fatalf("head = %d, want 2", h)
	}
	got := f.read("w")
	if len(got) != len(want) {
		t.Fatalf("journal = %v, want the two spawned events", eventIDs(got))
	}
	for i, r := range got {
		if !sameRecord(r, want[i], "w", uint64(i+1)) || !r.PersistedAt.Equal(sp.Appended[i].PersistedAt) {
			t.Fatalf("event %d reads back as %+v, want %+v at runSeq %d persisted at %v", i, r, want[i], i+1, sp.Appended[i].PersistedAt)
		}
	}
	first, last := sp.Appended[0].PersistedAt, sp.Appended[1].PersistedAt
	window, err := f.s.ReadWindow(bg, "w", first, last.Add(time.Nanosecond), 10)
	must(t, err, "ReadWindow")
	if ids := fmt.Sprint(eventIDs(window)); ids != "[ev-run ev-step]" {
		t.Fatalf("ReadWindow over the spawn = %s", ids)
	}
	if window, err = f.s.ReadWindow(bg, "w", last.Add(time.Nanosecond), last.Add(time.Hour), 10); err != nil || len(window) != 0 {
		t.Fatalf("ReadWindow after the spawn = %v, %v; want nothing", eventIDs(window), err)
	}
	// The items and the lease are those of a Spawn without events.
	if fmt.Sprint(sp.Seqs) != "[1 2 3]" || len(f.inbox("w")) != 3 || f.cursor("w") != 0 {
		t.Fatalf("Spawned.Seqs = %v, inbox %v, cursor %d", sp.Seqs, itemSeqs(f.inbox("w")), f.cursor("w"))
	}
	if sp.Lease.Holder != "A" || sp.Lease.Epoch != 1 {
		t.Fatalf("Spawned.Lease = %+v, want A at epoch 1", sp.Lease)
	}

	// A spawned key is a stored one: a retry is idempotent, a changed
	// record under it a conflict, whatever the head it expects.
	under := fenced("w", sp.Lease.Epoch)
	under.ExpectedHead = store.Head(0)
	again, err := f.s.Append(bg, "w", []store.Record{want[1]}, under)
	must(t, err, "Append of a spawned record")
	if a := again[0]; !a.Idempotent || a.Conflict || a.RunSeq != 2 || a.EventID != "ev-step" || !a.PersistedAt.Equal(last) {
		t.Fatalf("Append of a spawned record = %+v, want idempotent at runSeq 2 as %+v", a, sp.Appended[1])
	}
	changed := want[0]
	changed.Payload = []byte("another input")
	again, err = f.s.Append(bg, "w", []store.Record{changed}, under)
	must(t, err, "Append of a changed spawned record")
	if a := again[0]; !a.Idempotent || !a.Conflict || a.RunSeq != 1 || a.EventID != "ev-run" {
		t.Fatalf("Append of a changed spawned record = %+v, want a conflict at runSeq 1", a)
	}

	// The journal goes on under the spawned lease, at n+1: a fenced append
	// expecting head 2, then the cycle that drains the spawned items.
	under.ExpectedHead = store.Head(2)
	third, err := f.s.Append(bg, "w", []store.Record{rec("third")}, under)
	if err != nil || third[0].RunSeq != 3 || third[0].Idempotent {
		t.Fatalf("fenced Append expecting head 2 = %+v, %v; want runSeq 3", third, err)
	}
	res, err := f.s.Commit(bg, "w", sp.Lease.Epoch, store.CommitBatch{ExpectedCursor: 0, NewCursor: 3, ExpectedHead: 3, Entries: []store.Record{rec("fourth")}})
	if err != nil || res.Head != 4 || f.cursor("w") != 3 {
		t.Fatalf("Commit under the spawned lease = %+v, %v; cursor %d", res, err, f.cursor("w"))
	}
	if ids := fmt.Sprint(eventIDs(f.read("w"))); ids != "[ev-run ev-step ev-third ev-fourth]" {
		t.Fatalf("journal = %s", ids)
	}
	// Another worker is fenced out of the spawned journal.
	_, err = f.s.Append(bg, "w", []store.Record{rec("intruder")}, fenced("w", sp.Lease.Epoch+1))
	wantErr(t, err, store.ErrFenced, "Append under another epoch")
}

func testSpawnEventsNoHolder(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("w", "A")
	f.append("run-1", freeOpts, "a")
	fp := f.fingerprint()
	for _, c := range []struct {
		what string
		spec store.SpawnSpec
	}{
		{"no holder", store.SpawnSpec{Universe: universe, World: "new", Items: spawnItems(), Events: spawnEvents()}},
		{"no holder, no items", store.SpawnSpec{Universe: universe, World: "new", Events: spawnEvents()[:1]}},
		{"no holder, over a taken id", store.SpawnSpec{Universe: universe, World: "w", Events: spawnEvents()}},
	} {
		_, err := f.s.Spawn(bg, c.spec)
		wantErr(t, err, store.ErrInvalid, "Spawn with events and "+c.what)
	}
	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused Spawns wrote:\nbefore %s\nafter  %s", fp, after)
	}
	_, err := f.s.GetWorld(bg, "new")
	wantErr(t, err, store.ErrWorldNotFound, "GetWorld after refused Spawns")
	if h, evs := f.head("new"), f.read("new"); h != 0 || len(evs) != 0 {
		t.Fatalf("refused Spawns left head %d and events %v on the new id", h, eventIDs(evs))
	}
}

func testSpawnBadEvents(t *testing.T, open Factory) {
	f := setup(t, open)
	f.leased("w", "A")
	f.append("run-1", freeOpts, "a")
	fp := f.fingerprint()
	cases := []struct {
		what   string
		mutate func(*store.SpawnSpec)
	}{
		{"an idempotency key given twice", func(s *store.SpawnSpec) { s.Events[1].IdempotencyKey = s.Events[0].IdempotencyKey }},
		{"a record given twice", func(s *store.SpawnSpec) { s.Events[1] = s.Events[0] }},
		{"an empty idempotency key", func(s *store.SpawnSpec) { s.Events[1].IdempotencyKey = "" }},
		{"an over-long idempotency key", func(s *store.SpawnSpec) { s.Events[1].IdempotencyKey = strings.Repeat("k", store.MaxKeyBytes+1) }},
		{"an idempotency key of invalid UTF-8", func(s *store.SpawnSpec) { s.Events[1].IdempotencyKey = "k\xff" }},
		{"a payload over MaxPayloadBytes", func(s *store.SpawnSpec) { s.Events[1].Payload = make([]byte, store.MaxPayloadBytes+1) }},
		{"an empty eventId", func(s *store.SpawnSpec) { s.Events[0].EventID = "" }},
		{"an empty eventType", func(s *store.SpawnSpec) { s.Events[0].EventType = "" }},
		{"logicalAttemptId 0", func(s *store.SpawnSpec) { s.Events[1].LogicalAttemptID = 0 }},
		{"more than MaxBatch events", func(s *store.SpawnSpec) {
			s.Events = make([]store.Record, store.MaxBatch+1)
			for i := range s.Events {
				s.Events[i] = rec(fmt.Sprint(i))
			}
		}},
	}
	for _, id := range []string{"new", "w"} { // validation first, also over a taken id
		for _, c := range cases {
			spec := store.SpawnSpec{Universe: universe, World: id, Items: spawnItems(), Holder: "B", TTL: leaseTTL, Events: spawnEvents()}
			c.mutate(&spec)
			_, err := f.s.Spawn(bg, spec)
			wantErr(t, err, store.ErrInvalid, "Spawn of "+id+" with "+c.what)
		}
	}
	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused Spawns wrote:\nbefore %s\nafter  %s", fp, after)
	}
	_, err := f.s.GetWorld(bg, "new")
	wantErr(t, err, store.ErrWorldNotFound, "GetWorld after refused Spawns")
	if h, evs := f.head("new"), f.read("new"); h != 0 || len(evs) != 0 {
		t.Fatalf("refused Spawns left head %d and events %v on the new id", h, eventIDs(evs))
	}
	// The refusals left the id and the keys free.
	sp := f.spawn(store.SpawnSpec{Universe: universe, World: "new", Holder: "B", TTL: leaseTTL, Events: spawnEvents()})
	if len(sp.Appended) != 2 || sp.Appended[0].Idempotent || sp.Appended[1].RunSeq != 2 {
		t.Fatalf("Spawn after the refusals = %+v", sp.Appended)
	}
}

func testSpawnTakenIDEvents(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.append("w", fenced("w", e), "before")
	f.append("run-1", freeOpts, "a")
	fp := f.fingerprint()
	for _, c := range []struct{ what, id, holder string }{
		{"an existing world", "w", "B"},
		{"an existing world, by its own holder", "w", "A"},
		{"a free stream with events", "run-1", "B"},
	} {
		_, err := f.s.Spawn(bg, store.SpawnSpec{Universe: universe, World: c.id, Items: spawnItems(), Holder: c.holder, TTL: leaseTTL, Events: spawnEvents()})
		wantErr(t, err, store.ErrWorldExists, "Spawn with events over "+c.what)
	}
	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused Spawns wrote:\nbefore %s\nafter  %s", fp, after)
	}
	if ids := fmt.Sprint(eventIDs(f.read("w"))); ids != "[ev-before]" || f.head("w") != 1 {
		t.Fatalf("the existing world's journal = %s, head %d", ids, f.head("w"))
	}
	// No spawned key was stored on either stream: appending the spawned
	// records there inserts them.
	under := fenced("w", e)
	under.ExpectedHead = store.Head(1)
	got, err := f.s.Append(bg, "w", spawnEvents(), under)
	must(t, err, "Append of the refused Spawn's events to the existing world")
	if got[0].Idempotent || got[1].Idempotent || got[0].RunSeq != 2 || got[1].RunSeq != 3 {
		t.Fatalf("Append of the refused Spawn's events = %+v, want new at 2 and 3", got)
	}
	got, err = f.s.Append(bg, "run-1", spawnEvents(), freeOpts)
	must(t, err, "Append of the refused Spawn's events to the free stream")
	if got[0].Idempotent || got[1].Idempotent {
		t.Fatalf("free Append of the refused Spawn's events = %+v, want new", got)
	}
}

// statusFixture is a leased world with two inbox items, one entry in its
// journal, and watches on the topics a status change hints.
type statusFixture struct {
	*fx
	epoch               uint64
	leases, assignments *store.Signal
}

func newStatusFixture(t *testing.T, open Factory) *statusFixture {
	f := setup(t, open)
	x := &statusFixture{fx: f, epoch: f.leased("w", "A")}
	f.enqueue("w", "event", "a", nil)
	f.enqueue("w", "event", "b", nil)
	f.append("w", fenced("w", x.epoch), "before")
	x.leases, x.assignments = f.watch(store.TopicLeases), f.watch(store.TopicAssignments)
	drain(x.leases)
	drain(x.assignments)
	return x
}

// lastCycle is a cycle that drains both items, appends two entries,
// publishes an intent and asks for status.
func (x *statusFixture) lastCycle(status store.WorldStatus, reason string) store.CommitBatch {
	return store.CommitBatch{
		ExpectedCursor: 0, NewCursor: 2, ExpectedHead: 1,
		Entries: []store.Record{rec("last-1"), rec("last-2")},
		Intents: intents("i-final"),
		Status:  &store.StatusChange{Status: status, Reason: reason},
	}
}

// checkLeft checks what every Commit that leaves active leaves behind: the
// cycle applied, the world at status with reason and the store's time,
// the lease ended at its epoch, and the hints of a status change.
func (x *statusFixture) checkLeft(t *testing.T, res store.CommitResult, before time.Time, status store.WorldStatus, reason string) {
	t.Helper()
	if res.Head != 3 || len(res.Appended) != 2 || res.Published != 1 {
		t.Fatalf("CommitResult = %+v", res)
	}
	if ids := fmt.Sprint(eventIDs(x.read("w"))); ids != "[ev-before ev-last-1 ev-last-2]" {
		t.Fatalf("journal = %s", ids)
	}
	if c := x.cursor("w"); c != 2 {
		t.Fatalf("cursor = %d, want 2", c)
	}
	// Pausing keeps the cycle's intent for the adapters; archiving
	// withdraws it with the world's end (nobody is left to read its
	// receipt).
	want, withdrawn := vocab.EffectPending, 0
	if status == store.WorldArchived {
		want, withdrawn = vocab.EffectWithdrawn, 1
	}
	if st := x.effectStatus("i-final"); st.State != want || res.Withdrawn != withdrawn {
		t.Fatalf("the last cycle's intent = %+v, Withdrawn %d; want %s, %d", st, res.Withdrawn, want, withdrawn)
	}
	w, err := x.s.GetWorld(bg, "w")
	must(t, err, "GetWorld")
	if w.Status != status || w.StatusReason != reason || !near(w.StatusChangedAt, before, timeTol) {
		t.Fatalf("world = %+v, want %s (%q) changed about %v", w, status, reason, before)
	}
	l, ok, err := x.s.GetLease(bg, "w")
	if err != nil || !ok || l.Holder != "" || l.Epoch != x.epoch || l.ExpiresAt.After(x.now()) {
		t.Fatalf("lease = %+v, %v, %v; want released at epoch %d, expired", l, ok, err, x.epoch)
	}
	_, err = x.s.Append(bg, "w", []store.Record{rec("late")}, fenced("w", x.epoch))
	wantErr(t, err, store.ErrFenced, "the holder's Append after its last cycle")
	_, err = x.s.Renew(bg, "w", "A", x.epoch, leaseTTL)
	wantErr(t, err, store.ErrNotHolder, "the holder's Renew after its last cycle")
	awaitHint(t, x.leases.C, "leases after the status commit", func() {})
	awaitHint(t, x.assignments.C, "assignments after the status commit", func() {})
}

func testCommitArchives(t *testing.T, open Factory) {
	x := newStatusFixture(t, open)
	before := x.now()
	res, err := x.s.Commit(bg, "w", x.epoch, x.lastCycle(store.WorldArchived, "run completed"))
	must(t, err, "Commit with Status archived")
	x.checkLeft(t, res, before, store.WorldArchived, "run completed")
	_, err = x.s.Acquire(bg, "w", "A", leaseTTL)
	wantErr(t, err, store.ErrWorldArchived, "Acquire of the archived world")
	_, _, err = x.s.Enqueue(bg, "w", store.InboxItem{Kind: "event"})
	wantErr(t, err, store.ErrWorldArchived, "Enqueue to the archived world")
	_, err = x.s.SetWorldStatus(bg, "w", store.WorldActive, "")
	wantErr(t, err, store.ErrWorldArchived, "resume of the archived world")
	if active, err := x.s.ListWorlds(bg, universe, store.WorldActive); err != nil || len(active) != 0 {
		t.Fatalf("ListWorlds(active) = %+v, %v; want none", active, err)
	}
	// Its last cycle's intent was withdrawn with it: no adapter gets it.
	// (An effect claimed before the end still answers: withdraw.go.)
	if got := x.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("Claim after the archiving commit = %+v", got)
	}
}

func testCommitPauses(t *testing.T, open Factory) {
	x := newStatusFixture(t, open)
	before := x.now()
	res, err := x.s.Commit(bg, "w", x.epoch, x.lastCycle(store.WorldPaused, "waiting for approval"))
	must(t, err, "Commit with Status paused")
	x.checkLeft(t, res, before, store.WorldPaused, "waiting for approval")
	_, err = x.s.Acquire(bg, "w", "A", leaseTTL)
	wantErr(t, err, store.ErrWorldPaused, "Acquire of the paused world")
	// Input waits, and the resumed world's next lease is the next epoch.
	if seq, dup := x.enqueue("w", "approval", "", nil); dup || seq != 3 {
		t.Fatalf("Enqueue to the paused world = %d dup %v", seq, dup)
	}
	x.setStatus("w", store.WorldActive, "approved")
	if e := x.acquire("w", "A").Epoch; e != x.epoch+1 {
		t.Fatalf("epoch after resume = %d, want %d", e, x.epoch+1)
	}
}

func testCommitStatusAllOrNothing(t *testing.T, open Factory) {
	f := setup(t, open)
	eA := f.leased("w", "A")
	f.enqueue("w", "event", "a", nil)
	f.append("w", fenced("w", eA), "before")
	must(t, f.s.PutSnapshot(bg, "w", eA, store.Snapshot{Height: 1, State: []byte("s"), StateHash: "h1"}), "PutSnapshot")
	// A's lease runs out and B takes over: A's epoch is stale.
	f.advance(leaseTTL + margin)
	eB := f.acquire("w", "B").Epoch
	fp := f.fingerprint()
	lease, _, err := f.s.GetLease(bg, "w")
	must(t, err, "GetLease")

	archive := func(mutate func(*store.CommitBatch)) store.CommitBatch {
		b := store.CommitBatch{
			ExpectedCursor: 0, NewCursor: 1, ExpectedHead: 1,
			Entries: []store.Record{rec("last")}, Intents: intents("i1"),
			Status: &store.StatusChange{Status: store.WorldArchived, Reason: "done"},
		}
		mutate(&b)
		return b
	}
	for _, c := range []struct {
		what  string
		epoch uint64
		b     store.CommitBatch
		kind  error
	}{
		{"head mismatch", eB, archive(func(b *store.CommitBatch) { b.ExpectedHead = 0 }), store.ErrHeadMismatch},
		{"cursor mismatch", eB, archive(func(b *store.CommitBatch) { b.ExpectedCursor, b.NewCursor = 1, 1 }), store.ErrCursorMismatch},
		{"stale epoch", eA, archive(func(*store.CommitBatch) {}), store.ErrFenced},
		{"snapshot conflict", eB, archive(func(b *store.CommitBatch) {
			b.Snapshot = &store.Snapshot{Height: 1, State: []byte("t"), StateHash: "other"}
		}), store.ErrSnapshotConflict},
		{"paused, head mismatch", eB, archive(func(b *store.CommitBatch) {
			b.ExpectedHead, b.Status.Status = 5, store.WorldPaused
		}), store.ErrHeadMismatch},
	} {
		_, err := f.s.Commit(bg, "w", c.epoch, c.b)
		wantErr(t, err, c.kind, "Commit with Status and a "+c.what)
	}
	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused Commits wrote:\nbefore %s\nafter  %s", fp, after)
	}
	w, err := f.s.GetWorld(bg, "w")
	if err != nil || w.Status != store.WorldActive || w.StatusReason != "" || !w.StatusChangedAt.IsZero() {
		t.Fatalf("world after refused Commits = %+v, %v; want active, never changed", w, err)
	}
	if l, _, _ := f.s.GetLease(bg, "w"); l.Holder != lease.Holder || l.Epoch != lease.Epoch || !l.ExpiresAt.Equal(lease.ExpiresAt) {
		t.Fatalf("lease after refused Commits = %+v, want %+v", l, lease)
	}
	if _, err := f.s.EffectStatus(bg, "i1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("EffectStatus of a refused Commit's intent: %v, want ErrNotFound", err)
	}
	// B's own cycle still commits, and ends the world.
	if _, err := f.s.Commit(bg, "w", eB, archive(func(*store.CommitBatch) {})); err != nil {
		t.Fatalf("the holder's Commit: %v", err)
	}
	if w, _ := f.s.GetWorld(bg, "w"); w.Status != store.WorldArchived {
		t.Fatalf("world after the holder's Commit = %+v", w)
	}
}

func testCommitBadStatus(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.enqueue("w", "event", "a", nil)
	fp := f.fingerprint()
	for _, c := range []struct {
		what string
		sc   store.StatusChange
	}{
		{"active", store.StatusChange{Status: store.WorldActive}},
		{"an unknown status", store.StatusChange{Status: "fenced"}},
		{"no status", store.StatusChange{Reason: "why"}},
		{"an over-long reason", store.StatusChange{Status: store.WorldArchived, Reason: strings.Repeat("r", store.MaxReasonBytes+1)}},
		{"a reason of invalid UTF-8", store.StatusChange{Status: store.WorldPaused, Reason: "r\xff"}},
	} {
		sc := c.sc
		_, err := f.s.Commit(bg, "w", e, store.CommitBatch{NewCursor: 1, Entries: []store.Record{rec("x")}, Status: &sc})
		wantErr(t, err, store.ErrInvalid, "Commit with Status "+c.what)
	}
	if after := f.fingerprint(); after != fp {
		t.Fatalf("refused Commits wrote:\nbefore %s\nafter  %s", fp, after)
	}
}
