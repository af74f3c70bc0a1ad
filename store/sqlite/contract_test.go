package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// The queries that must scale with the page, not with the store (issue 7:
// a million worlds, long queues) walk an index: none scans a table.
func TestScalingQueriesUseIndexes(t *testing.T) {
	s, _, _ := openTemp(t)
	fullScan := regexp.MustCompile(`^SCAN (worlds|leases|assignments|effects|timers|inbox)\b`)
	for name, q := range map[string]string{
		"ListWorkerWorlds": workerWorldsQuery,
		"Claim (per kind)": `SELECT seq FROM effects WHERE kind = ? AND state = 'pending' ORDER BY seq LIMIT ?`,
		"ListEffects":      `SELECT seq FROM effects WHERE world = ? AND state IN ('pending', 'inflight') AND seq > ? ORDER BY seq LIMIT ?`,
		"ListTimers":       `SELECT intent_hash FROM timers WHERE world = ? AND state IN ('scheduled', 'claimed') ORDER BY deliver_at, intent_hash LIMIT ?`,
		"NextDue":          `SELECT MIN(deliver_at) FROM timers WHERE state = 'scheduled'`,
		"ClaimDue":         `SELECT intent_hash FROM timers WHERE state = 'scheduled' AND deliver_at <= ? ORDER BY deliver_at, intent_hash LIMIT ?`,
	} {
		rows, err := s.b.rdb.Query("EXPLAIN QUERY PLAN "+q, "a", 1, "b", 3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		usesIndex := false
		for _, step := range plan {
			if fullScan.MatchString(step) {
				t.Errorf("%s scans a table: %q in\n%s", name, step, strings.Join(plan, "\n"))
			}
			usesIndex = usesIndex || strings.Contains(step, "USING")
		}
		if !usesIndex {
			t.Errorf("%s uses no index:\n%s", name, strings.Join(plan, "\n"))
		}
	}
}

// A Commit is one request of the group committer (one savepoint of one
// transaction), whatever it carries; a Commit that fails in its last step
// (the snapshot) leaves nothing of the earlier ones.
func TestCommitIsOneRequest(t *testing.T) {
	s, clock, _ := openTemp(t)
	if _, err := s.CreateWorld(bg, "u", "w1", nil); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(bg, "w1", "worker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, _, err := s.Enqueue(bg, "w1", store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("in-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	batch := store.CommitBatch{
		ExpectedCursor: 0, NewCursor: 2, ExpectedHead: 0,
		Entries:  []store.Record{rec("a"), rec("b")},
		Intents:  []vocab.Intent{{IntentHash: "i1", Kind: "http"}},
		Timers:   []vocab.TimerSet{{IntentHash: "t1", DeliverAt: clock.Now().Add(time.Hour)}},
		Snapshot: &store.Snapshot{Height: 2, State: []byte("s"), StateHash: "h2"},
	}
	before := s.Stats()
	res, err := s.Commit(bg, "w1", l.Epoch, batch)
	if err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	if after.Requests-before.Requests != 1 || after.Transactions-before.Transactions != 1 {
		t.Fatalf("a Commit took %d requests in %d transactions, want 1 in 1",
			after.Requests-before.Requests, after.Transactions-before.Transactions)
	}
	if res.Head != 2 || res.Published != 1 || res.Scheduled != 1 || res.Appended[1].RunSeq != 2 {
		t.Fatalf("CommitResult %+v", res)
	}

	// The same cycle's successor, with a conflicting snapshot at height 2:
	// the cursor, the journal, the effect and the timer stay as they were.
	if _, _, err := s.Enqueue(bg, "w1", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	bad := store.CommitBatch{
		ExpectedCursor: 2, NewCursor: 3, ExpectedHead: 2,
		Entries:  []store.Record{rec("c")},
		Intents:  []vocab.Intent{{IntentHash: "i2", Kind: "http"}},
		Timers:   []vocab.TimerSet{{IntentHash: "t2", DeliverAt: clock.Now().Add(time.Hour)}},
		Snapshot: &store.Snapshot{Height: 2, State: []byte("other"), StateHash: "other"},
	}
	if _, err := s.Commit(bg, "w1", l.Epoch, bad); !errors.Is(err, store.ErrSnapshotConflict) {
		t.Fatalf("Commit with a conflicting snapshot: %v, want ErrSnapshotConflict", err)
	}
	if c, _ := s.Cursor(bg, "w1"); c != 2 {
		t.Fatalf("cursor %d after a failed commit, want 2", c)
	}
	if h, _ := s.Head(bg, "w1"); h != 2 {
		t.Fatalf("head %d after a failed commit, want 2", h)
	}
	if _, err := s.EffectStatus(bg, "i2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the failed commit's intent: %v, want ErrNotFound", err)
	}
	if ts, _ := s.ListTimers(bg, "w1", 10); len(ts) != 1 || ts[0].IntentHash != "t1" {
		t.Fatalf("timers after a failed commit: %+v", ts)
	}
}

// A Spawn (world, items, lease and first journal records) is one request,
// and a Commit that leaves active is still one: the status change rides in
// the cycle's savepoint.
func TestSpawnAndAStatusCommitAreOneRequestEach(t *testing.T) {
	s, _, _ := openTemp(t)
	oneRequest := func(what string, do func() error) {
		t.Helper()
		before := s.Stats()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		after := s.Stats()
		if after.Requests-before.Requests != 1 || after.Transactions-before.Transactions != 1 {
			t.Fatalf("%s took %d requests in %d transactions, want 1 in 1",
				what, after.Requests-before.Requests, after.Transactions-before.Transactions)
		}
	}
	var sp store.Spawned
	oneRequest("Spawn", func() error {
		var err error
		sp, err = s.Spawn(bg, store.SpawnSpec{Universe: "u", World: "w1", Holder: "worker", TTL: time.Minute,
			Items:  []store.InboxItem{{Kind: "start", DedupeKey: "run"}, {Kind: "event"}},
			Events: []store.Record{rec("run-started"), rec("step-started")}})
		return err
	})
	if len(sp.Seqs) != 2 || sp.Seqs[1] != 2 || sp.Lease.Epoch != 1 || len(sp.Appended) != 2 || sp.Appended[1].RunSeq != 2 {
		t.Fatalf("Spawned = %+v", sp)
	}
	if h, err := s.Head(bg, "w1"); err != nil || h != 2 {
		t.Fatalf("head after Spawn = %d, %v; want 2", h, err)
	}
	oneRequest("Commit with Status", func() error {
		_, err := s.Commit(bg, "w1", sp.Lease.Epoch, store.CommitBatch{
			NewCursor: 2, ExpectedHead: 2, Entries: []store.Record{rec("a")},
			Status: &store.StatusChange{Status: store.WorldArchived, Reason: "done"},
		})
		return err
	})
	if w, err := s.GetWorld(bg, "w1"); err != nil || w.Status != store.WorldArchived {
		t.Fatalf("world after the commit = %+v, %v", w, err)
	}
}

// RenewLeases and ReleaseLeases are one request (one transaction) each,
// with one result per ref as the single call would answer it.
func TestBulkLeaseCallsAreOneRequest(t *testing.T) {
	s, _, _ := openTemp(t)
	var refs []store.LeaseRef
	for i := 0; i < 3; i++ {
		w := fmt.Sprint("w", i)
		if _, err := s.CreateWorld(bg, "u", w, nil); err != nil {
			t.Fatal(err)
		}
		l, err := s.Acquire(bg, w, "worker", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, store.LeaseRef{World: w, Epoch: l.Epoch})
	}
	refs[1].Epoch++ // stale
	refs = append(refs, store.LeaseRef{World: "nowhere", Epoch: 1})
	before := s.Stats()
	res, err := s.RenewLeases(bg, "worker", refs, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Stats().Requests - before.Requests; d != 1 {
		t.Fatalf("RenewLeases took %d requests, want 1", d)
	}
	want := []error{nil, store.ErrStaleEpoch, nil, store.ErrWorldNotFound}
	for i, r := range res {
		if r.World != refs[i].World || !errors.Is(r.Err, want[i]) || (want[i] == nil) != (r.Err == nil) {
			t.Fatalf("RenewLeases result %d = %+v, want world %s and %v", i, r, refs[i].World, want[i])
		}
	}
	before = s.Stats()
	res, err = s.ReleaseLeases(bg, "worker", refs)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Stats().Requests - before.Requests; d != 1 {
		t.Fatalf("ReleaseLeases took %d requests, want 1", d)
	}
	for i, r := range res {
		if !errors.Is(r.Err, want[i]) || (want[i] == nil) != (r.Err == nil) {
			t.Fatalf("ReleaseLeases result %d = %+v, want %v", i, r, want[i])
		}
		if r.Err == nil && r.Lease.Holder != "" {
			t.Fatalf("ReleaseLeases result %d still held: %+v", i, r.Lease)
		}
	}
}

// openSchema1 writes a file at schema version 1 (as an older binary left
// it), with fill run on it, and returns its path.
func openSchema1(t *testing.T, fill string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
		ms[0].sql,
		`INSERT INTO schema_version VALUES (1, '0001_init.sql', 0)`,
		fill,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%v in\n%s", err, q)
		}
	}
	return path
}

// Opening a schema 1 file migrates it: a 'fenced' world (a status that no
// longer exists) becomes paused with a recorded reason and without a live
// lease, and can be resumed; a 'due' timer is scheduled and still fires;
// an event appended before the migration still reports a conflicting
// duplicate (its key got the payload hash).
func TestMigrationFromSchema1(t *testing.T) {
	clock := newManualClock()
	now := clock.Now().UnixNano()
	later := clock.Now().Add(time.Hour).UnixNano()
	path := openSchema1(t, fmt.Sprintf(`
		INSERT INTO worlds (id, universe, status, created_at) VALUES ('stuck', 'u', 'fenced', 1), ('ok', 'u', 'active', 1);
		INSERT INTO leases (world, holder, epoch, expires_at) VALUES ('stuck', 'old-worker', 4, %[2]d), ('ok', 'worker', 1, %[2]d);
		INSERT INTO timers (intent_hash, world, deliver_at, payload, state) VALUES ('t1', 'ok', %[1]d, x'01', 'due');
		INSERT INTO event_keys (stream, idempotency_key, event_id, run_seq, persisted_at) VALUES ('ok', 'key-a', 'ev-a', 1, 1);
		INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, persisted_at, step_id, logical_attempt,
			engine_attempt, plan_id, plan_version, payload) VALUES ('ok', 1, 'ev-a', 'key-a', 'StepCompleted', 1, 's1', 1, 1, 'p', 1, x'a0');
		INSERT INTO worlds (id, universe, status, created_at) VALUES ('cmp', 'u', 'active', 1);
		INSERT INTO streams (stream, head) VALUES ('cmp', 2);
		INSERT INTO event_keys (stream, idempotency_key, event_id, run_seq, persisted_at) VALUES
			('cmp', 'key-1', 'ev-1', 1, 10), ('cmp', 'key-2', 'ev-2', 2, 20), ('cmp', 'key-3', 'ev-3', 3, 30);
		INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, persisted_at, step_id, logical_attempt,
			engine_attempt, plan_id, plan_version, payload) VALUES ('cmp', 3, 'ev-3', 'key-3', 'StepCompleted', 30, 's3', 1, 1, 'p', 1, x'a0');
	`, now, later))
	s, err := Open(bg, path, WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	w, err := s.GetWorld(bg, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	if w.Status != store.WorldPaused || w.StatusReason == "" || !w.StatusChangedAt.Equal(clock.Now()) {
		t.Fatalf("migrated fenced world: %+v, want paused with a reason at the store clock", w)
	}
	if l, _, _ := s.GetLease(bg, "stuck"); l.Holder != "" || l.Epoch != 4 {
		t.Fatalf("migrated fenced world's lease %+v, want released at epoch 4", l)
	}
	if _, err := s.SetWorldStatus(bg, "stuck", store.WorldActive, "resumed after the upgrade"); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Acquire(bg, "stuck", "new-worker", time.Minute); err != nil || l.Epoch != 5 {
		t.Fatalf("acquire after resuming: %+v, %v; want epoch 5", l, err)
	}

	ts, err := s.ClaimDue(bg, "tw", 10, time.Minute)
	if err != nil || len(ts) != 1 || ts[0].State != store.TimerClaimed || string(ts[0].Payload) != "\x01" {
		t.Fatalf("ClaimDue of a migrated 'due' timer = %+v, %v", ts, err)
	}
	if _, _, err := s.Fire(bg, "t1", ts[0].ClaimOf()); err != nil {
		t.Fatal(err)
	}

	fence := &store.Fence{World: "ok", Epoch: 1}
	same := rec("a")
	got, err := s.Append(bg, "ok", []store.Record{same}, store.AppendOptions{Fence: fence})
	if err != nil || !got[0].Idempotent || got[0].Conflict || got[0].RunSeq != 1 {
		t.Fatalf("the same record again = %+v, %v; want idempotent without conflict", got, err)
	}
	changed := rec("a")
	changed.Payload = []byte{0xa1}
	got, err = s.Append(bg, "ok", []store.Record{changed}, store.AppendOptions{Fence: fence})
	if err != nil || !got[0].Idempotent || !got[0].Conflict {
		t.Fatalf("a changed payload under a migrated key = %+v, %v; want a conflict", got, err)
	}

	// A stream compacted before the floor was recorded gets its floor from
	// the keys left without their events.
	if f, err := s.Floor(bg, "cmp"); err != nil || f != 2 {
		t.Fatalf("Floor of a stream compacted before the migration = %d, %v; want 2", f, err)
	}
	if _, err := s.Read(bg, "cmp", 0, 10); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Read below the migrated floor: %v, want ErrCompacted", err)
	}
	if evs, err := s.Read(bg, "cmp", 2, 10); err != nil || len(evs) != 1 || evs[0].RunSeq != 3 {
		t.Fatalf("Read from the migrated floor = %+v, %v", evs, err)
	}
	if f, err := s.Floor(bg, "ok"); err != nil || f != 0 {
		t.Fatalf("Floor of a stream never compacted = %d, %v; want 0", f, err)
	}
}

// Opening a schema 2 file (per-key completion times) migrates its inbox
// dedupe keys to drain records: a completed key still deduplicates until a
// retention after its completion and is then swept, and a key whose item
// was never drained stays however long the world is away.
func TestMigrationKeepsInboxKeyRetention(t *testing.T) {
	clock := newManualClock()
	now := clock.Now().UnixNano()
	path := openSchema1(t, fmt.Sprintf(`
		INSERT INTO worlds (id, universe, status, created_at, inbox_cursor) VALUES ('w', 'u', 'active', 1, 1);
		INSERT INTO inbox (world, seq, kind, payload, dedupe_key, enqueued_at) VALUES ('w', 1, 'event', x'01', 'done', 1), ('w', 2, 'event', x'02', 'open', 1);
		INSERT INTO inbox_dedupe (world, dedupe_key, seq, completed_at) VALUES ('w', 'done', 1, %d), ('w', 'open', 2, NULL);
	`, now))
	s, err := Open(bg, path, WithClock(clock.Now), WithDedupeRetention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	enqueue := func(key string) (uint64, bool) {
		t.Helper()
		seq, dup, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return seq, dup
	}
	if seq, dup := enqueue("done"); !dup || seq != 1 {
		t.Fatalf("migrated completed key: seq %d dup %v, want 1 true", seq, dup)
	}
	clock.Advance(59 * time.Minute)
	if n, err := s.SweepDedupe(bg); err != nil || n != 0 {
		t.Fatalf("sweep before the retention = %d, %v; want 0", n, err)
	}
	clock.Advance(2 * time.Minute)
	if n, err := s.SweepDedupe(bg); err != nil || n != 1 {
		t.Fatalf("sweep after the retention = %d, %v; want 1", n, err)
	}
	if _, dup := enqueue("done"); dup {
		t.Fatal("migrated completed key still deduplicates after its retention and a sweep")
	}
	if seq, dup := enqueue("open"); !dup || seq != 2 {
		t.Fatalf("migrated pending key: seq %d dup %v, want 2 true", seq, dup)
	}
}

// Opening a file from before effects could be withdrawn rebuilds the
// effects table: its rows keep their state and queue order, the queue's
// high-water mark survives (a swept item's seq is not handed out again),
// and archiving the world then withdraws its pending effect.
func TestMigrationRebuildsEffectsForWithdrawal(t *testing.T) {
	clock := newManualClock()
	path := openSchema1(t, `
		INSERT INTO worlds (id, universe, status, created_at) VALUES ('w', 'u', 'active', 1);
		INSERT INTO leases (world, holder, epoch, expires_at) VALUES ('w', 'worker', 1, 9000000000000000000);
		INSERT INTO effects (seq, intent_hash, world, kind, params, origin, policy_context_hash, state, enqueued_at)
			VALUES (2, 'old-pending', 'w', 'k', x'01', 'o', 'p', 'pending', 1);
		UPDATE sqlite_sequence SET seq = 7 WHERE name = 'effects';
	`)
	s, err := Open(bg, path, WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Publish(bg, "w", 1, []vocab.Intent{{IntentHash: "new", Kind: "k", Origin: "o", PolicyContextHash: "p"}}); err != nil {
		t.Fatal(err)
	}
	items, err := s.ListEffects(bg, "w", 0, 10)
	if err != nil || len(items) != 2 || items[0].IntentHash != "old-pending" || items[0].Seq != 2 || items[1].Seq != 8 {
		t.Fatalf("ListEffects after the migration = %+v, %v; want old-pending at 2, new at 8", items, err)
	}
	if _, err := s.SetWorldStatus(bg, "w", store.WorldArchived, "ended"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"old-pending", "new"} {
		if st, err := s.EffectStatus(bg, h); err != nil || st.State != vocab.EffectWithdrawn {
			t.Fatalf("EffectStatus(%s) after archiving = %+v, %v; want withdrawn", h, st, err)
		}
	}
}
