package postgres

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// A schema written by version 1 migrates in place: a "fenced" world
// becomes paused (with a recorded reason, its lease released so its old
// holder is fenced) and an operator can resume it;
// baselines move to the stream rows; a key appended by version 1 (no
// stored payload hash) still tells a conflicting re-append; a key
// compacted by version 1 stays a duplicate, with no conflict to tell.
func TestMigrationFromVersion1(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := freshSchema(t, dsn)
	ms, err := migrations()
	if err != nil || len(ms) < 2 || ms[0].version != 1 {
		t.Fatalf("migrations: %+v, %v", ms, err)
	}
	conn, err := pgx.Connect(bg, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	ident := pgx.Identifier{schema}.Sanitize()
	for _, sql := range []string{
		`CREATE SCHEMA ` + ident,
		`SET search_path TO ` + ident,
		`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
		ms[0].sql,
		`INSERT INTO schema_migrations (version, name) VALUES (1, '` + ms[0].name + `')`,
		`INSERT INTO worlds (world, universe, status, created_at_ns, baseline_height) VALUES
			('f', 'u', 'fenced', 1, NULL), ('a', 'u', 'active', 1, 2)`,
		// The holder that fenced f under version 1 kept its lease.
		`INSERT INTO leases (world, holder, epoch, expires_at_ns) VALUES ('f', 'A', 3, now_ns(0) + 3600000000000)`,
		`INSERT INTO streams (stream, head) VALUES ('a', 3)`,
		`INSERT INTO snapshots (world, height, state, state_hash, created_at_ns) VALUES ('a', 2, '\x01', 'h2', 1)`,
		`INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, emitted_at_ns, persisted_at_ns,
			step_id, logical_attempt_id, engine_attempt_id, plan_id, plan_version, payload)
			VALUES ('a', 3, 'ev-k3', 'key-k3', 'StepCompleted', -9223372036854775808, 5, 's1', 1, 1, 'p', 1, '\xa0')`,
		`INSERT INTO compacted_keys (stream, idempotency_key, event_id, run_seq, persisted_at_ns)
			VALUES ('a', 'key-k1', 'ev-k1', 1, 4)`,
	} {
		if _, err := conn.Exec(bg, sql); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}

	s := openStore(t, schema, nil)
	f, err := s.GetWorld(bg, "f")
	if err != nil || f.Status != store.WorldPaused || f.StatusReason == "" || f.StatusChangedAt.IsZero() {
		t.Fatalf("migrated fenced world = %+v, %v; want paused with a reason", f, err)
	}
	if _, err := s.Acquire(bg, "f", "A", time.Minute); !errors.Is(err, store.ErrWorldPaused) {
		t.Fatalf("Acquire of the migrated world: %v, want ErrWorldPaused", err)
	}
	if l, ok, err := s.GetLease(bg, "f"); err != nil || !ok || l.Holder != "" || l.Epoch != 3 {
		t.Fatalf("the migrated world's lease = %+v %v %v; want released at epoch 3", l, ok, err)
	}
	if _, err := s.Publish(bg, "f", 3, []vocab.Intent{{IntentHash: "x", Kind: "k"}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a write by the old holder after the migration: %v, want ErrFenced", err)
	}
	if _, err := s.SetWorldStatus(bg, "f", store.WorldActive, "resumed after the migration"); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Acquire(bg, "f", "A", time.Minute); err != nil || l.Epoch != 4 {
		t.Fatalf("Acquire after the resume = %+v, %v; want epoch 4", l, err)
	}
	if snap, ok, err := s.ActiveSnapshot(bg, "a"); err != nil || !ok || snap.Height != 2 || snap.StateHash != "h2" {
		t.Fatalf("ActiveSnapshot after the migration = %+v %v %v", snap, ok, err)
	}
	l, err := s.Acquire(bg, "a", "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fence := store.AppendOptions{Fence: &store.Fence{World: "a", Epoch: l.Epoch}}
	same := rec("k3")
	changed := rec("k3")
	changed.Payload = []byte{0xa1, 0x01, 0x02}
	got, err := s.Append(bg, "a", []store.Record{same, changed}, fence)
	if err != nil || !got[0].Idempotent || got[0].Conflict || got[0].RunSeq != 3 || !got[1].Idempotent || !got[1].Conflict {
		t.Fatalf("re-appending a version-1 key as is and changed = %+v, %v; want idempotent, then a conflict", got, err)
	}
	got, err = s.Append(bg, "a", []store.Record{rec("k1")}, fence)
	if err != nil || !got[0].Idempotent || got[0].Conflict || got[0].RunSeq != 1 {
		t.Fatalf("re-appending a key compacted by version 1 = %+v, %v", got, err)
	}
	got, err = s.Append(bg, "a", []store.Record{rec("k4")}, store.AppendOptions{Fence: fence.Fence, ExpectedHead: store.Head(3)})
	if err != nil || got[0].RunSeq != 4 || got[0].Idempotent {
		t.Fatalf("a new append after the migration = %+v, %v; want runSeq 4", got, err)
	}
	// The compaction version 1 did left its floor in compacted_keys.
	if f, err := s.Floor(bg, "a"); err != nil || f != 1 {
		t.Fatalf("Floor of a stream compacted by version 1 = %d, %v; want 1", f, err)
	}
	if _, err := s.Read(bg, "a", 0, 10); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Read below the migrated floor: %v, want ErrCompacted", err)
	}
	if evs, err := s.Read(bg, "a", 1, 10); err != nil || len(evs) != 2 || evs[0].RunSeq != 3 {
		t.Fatalf("Read from the migrated floor = %d records, %v", len(evs), err)
	}
}

// ListWorkerWorlds is index-backed: on a table of many worlds, the plan of
// a page scans the holder and assignment indexes and never a whole table,
// and paging through returns exactly the worker's worlds, in order.
func TestListWorkerWorldsPagesOnIndexes(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	conn := rawConn(t, s.Schema())
	const n = 20000
	// One world in 100 is leased by w1 (one in 200 expired), one in 80
	// assigned to w1: a worker's share of a big plane. The rest belong to
	// 50 other workers.
	for _, sql := range []string{
		`INSERT INTO worlds (world, universe, status, created_at_ns)
			SELECT format('w%s', lpad(i::text, 6, '0')), 'u', 'active', 0 FROM generate_series(1, $1) i`,
		`INSERT INTO leases (world, holder, epoch, expires_at_ns)
			SELECT format('w%s', lpad(i::text, 6, '0')),
				CASE WHEN i % 100 = 0 THEN 'w1' ELSE format('other-%s', i % 50) END, 1,
				CASE WHEN i % 200 = 0 THEN now_ns(0) - 1000000000 ELSE now_ns(0) + 3600000000000 END
			FROM generate_series(1, $1) i`,
		`INSERT INTO assignments (world, desired_worker, priority, reason)
			SELECT format('w%s', lpad(i::text, 6, '0')),
				CASE WHEN i % 80 = 0 THEN 'w1' ELSE format('other-%s', i % 50) END, 0, ''
			FROM generate_series(1, $1) i`,
	} {
		if _, err := conn.Exec(bg, sql, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(bg, `ANALYZE worlds, leases, assignments`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(bg, `EXPLAIN `+listWorkerWorldsSQL, "w1", "w010000", int64(100), int64(0))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "leases_by_holder") || !strings.Contains(plan, "assignments_by_worker") {
		t.Fatalf("a page is not index-backed:\n%s", plan)
	}

	var want []string
	for i := 1; i <= n; i++ {
		if (i%100 == 0 && i%200 != 0) || i%80 == 0 {
			want = append(want, fmt.Sprintf("w%06d", i))
		}
	}
	var got []string
	after := ""
	for {
		page, err := s.ListWorkerWorlds(bg, "w1", after, 50)
		if err != nil {
			t.Fatal(err)
		}
		for _, ww := range page {
			if ww.Lease == nil || ww.Assignment == nil {
				t.Fatalf("%s: lease %v, assignment %v; every world here has both", ww.World, ww.Lease, ww.Assignment)
			}
			if (ww.Lease.Holder == "w1") == (ww.Assignment.DesiredWorker == "w1") && ww.Lease.Holder != "w1" {
				t.Fatalf("%s: neither held by nor assigned to w1: %+v %+v", ww.World, ww.Lease, ww.Assignment)
			}
			got = append(got, ww.World)
		}
		if len(page) < 50 {
			break
		}
		after = page[len(page)-1].World
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("paged %d worlds, want %d (first %v, want %v)", len(got), len(want), got[:min(5, len(got))], want[:5])
	}
}

// Concurrent Commits of many worlds share transactions (group commit
// across worlds), and each world's heads stay gapless and its cycles'
// intents and timers all land.
func TestCommitGroupCommitsAcrossWorlds(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	const worlds, cycles = 16, 8
	epochs := make([]uint64, worlds)
	for w := range worlds {
		epochs[w] = leased(t, s, fmt.Sprint("w", w), "host").Epoch
		for i := range cycles {
			if _, _, err := s.Enqueue(bg, fmt.Sprint("w", w), store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("in-", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := s.Stats()
	var wg sync.WaitGroup
	for w := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			world := fmt.Sprint("w", w)
			for i := range cycles {
				res, err := s.Commit(bg, world, epochs[w], store.CommitBatch{
					ExpectedCursor: uint64(i), NewCursor: uint64(i + 1), ExpectedHead: uint64(2 * i),
					Entries: []store.Record{rec(fmt.Sprintf("%d-a", i)), rec(fmt.Sprintf("%d-b", i))},
					Intents: []vocab.Intent{{IntentHash: fmt.Sprintf("%s-i%d", world, i), Kind: "k"}},
					Timers:  []vocab.TimerSet{{IntentHash: fmt.Sprintf("%s-t%d", world, i), DeliverAt: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}},
				})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Head != uint64(2*i+2) || res.Appended[0].RunSeq != uint64(2*i+1) || res.Appended[1].RunSeq != uint64(2*i+2) ||
					res.Published != 1 || res.Scheduled != 1 {
					t.Errorf("%s cycle %d: %+v", world, i, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	reqs, txs := st.AppendRequests-before.AppendRequests, st.AppendTransactions-before.AppendTransactions
	t.Logf("%d commits in %d transactions", reqs, txs)
	if reqs != worlds*cycles || txs >= reqs {
		t.Fatalf("%d commits in %d transactions: no group commit", reqs, txs)
	}
	d, err := s.QueueDepths(bg)
	if err != nil || d.EffectsPending != worlds*cycles || d.TimersScheduled != worlds*cycles || d.InboxBacklog != 0 {
		t.Fatalf("QueueDepths = %+v, %v", d, err)
	}
}

// Two Commits of one world in one batch commit in two transactions, in
// order: the second sees the first's cursor, head and timers (it cancels
// the timer the first scheduled).
func TestCommitsOfOneWorldInOneBatchCommitInOrder(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	e := leased(t, s, "w", "host").Epoch
	for i := range 2 {
		if _, _, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("in-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(b store.CommitBatch) *appendReq {
		r := newAppendReq(bg, "commit", "w", b.Entries)
		r.head, r.commit = store.Head(b.ExpectedHead), &commitReq{epoch: e, b: &b}
		return r
	}
	at := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	batch := []*appendReq{
		mk(store.CommitBatch{ExpectedCursor: 0, NewCursor: 1, ExpectedHead: 0, Entries: []store.Record{rec("a")},
			Timers: []vocab.TimerSet{{IntentHash: "t1", DeliverAt: at}}}),
		mk(store.CommitBatch{ExpectedCursor: 1, NewCursor: 2, ExpectedHead: 1, Entries: []store.Record{rec("b")},
			CancelTimers: []string{"t1"}}),
	}
	before := s.Stats().AppendTransactions
	s.b.runAppends(batch)
	for i, r := range batch {
		<-r.done
		if r.res.err != nil || r.res.head != uint64(i+1) {
			t.Fatalf("commit %d: head %d, %v", i, r.res.head, r.res.err)
		}
	}
	if batch[0].res.scheduled != 1 || batch[1].res.cancelled != 1 {
		t.Fatalf("scheduled %d, cancelled %d; want 1 and 1", batch[0].res.scheduled, batch[1].res.cancelled)
	}
	if got := s.Stats().AppendTransactions - before; got != 2 {
		t.Fatalf("%d transactions, want 2", got)
	}
	if c, _ := s.Cursor(bg, "w"); c != 2 {
		t.Fatalf("cursor = %d, want 2", c)
	}
	if ts, err := s.ListTimers(bg, "w", 10); err != nil || len(ts) != 0 {
		t.Fatalf("timers = %+v, %v; want none", ts, err)
	}
}

// A batch that carries a Commit ending its world (Status archived), other
// worlds' appends and cycles, and appends of the ending world before and
// after its Commit, commits in one transaction and answers each request
// by batch order: the append before the Commit lands, the Commit archives
// the world and ends its lease, the one after it is ErrFenced and writes
// nothing, and the other worlds are untouched by it.
func TestStatusCommitFencesTheWorldsLaterAppendsInItsBatch(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	ew := leased(t, s, "w", "host").Epoch
	ev := leased(t, s, "v", "host").Epoch
	if _, _, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	appendTo := func(world string, epoch uint64, key string) *appendReq {
		r := newAppendReq(bg, "append", world, []store.Record{rec(key)})
		r.opts = store.AppendOptions{Fence: &store.Fence{World: world, Epoch: epoch}}
		return r
	}
	commit := func(world string, epoch uint64, b store.CommitBatch) *appendReq {
		r := newAppendReq(bg, "commit", world, b.Entries)
		r.head, r.commit = store.Head(b.ExpectedHead), &commitReq{epoch: epoch, b: &b}
		return r
	}
	batch := []*appendReq{
		appendTo("w", ew, "w-before"),
		appendTo("v", ev, "v-1"),
		commit("w", ew, store.CommitBatch{ExpectedCursor: 0, NewCursor: 1, ExpectedHead: 1, Entries: []store.Record{rec("w-last")},
			Status: &store.StatusChange{Status: store.WorldArchived, Reason: "run completed"}}),
		appendTo("w", ew, "w-after"),
		commit("v", ev, store.CommitBatch{ExpectedHead: 1, Entries: []store.Record{rec("v-2")}}),
		appendTo("v", ev, "v-3"),
	}
	if cutBatch(batch) != len(batch) {
		t.Fatalf("cutBatch splits the batch at %d", cutBatch(batch))
	}
	before := s.Stats().AppendTransactions
	s.b.runAppends(batch)
	for _, r := range batch {
		<-r.done
	}
	if got := s.Stats().AppendTransactions - before; got != 1 {
		t.Fatalf("%d transactions, want 1", got)
	}
	for i, want := range []struct {
		err    error
		runSeq uint64
	}{{nil, 1}, {nil, 1}, {nil, 2}, {store.ErrFenced, 0}, {nil, 2}, {nil, 3}} {
		r := batch[i]
		switch {
		case want.err != nil:
			if !errors.Is(r.res.err, want.err) {
				t.Fatalf("request %d (%s %s): %v, want %v", i, r.op, r.stream, r.res.err, want.err)
			}
		case r.res.err != nil || len(r.res.out) != 1 || r.res.out[0].RunSeq != want.runSeq || r.res.out[0].Idempotent:
			t.Fatalf("request %d (%s %s): %+v, %v; want new at %d", i, r.op, r.stream, r.res.out, r.res.err, want.runSeq)
		}
	}
	if c := batch[2].res; !c.statusChanged || !c.leaseEnded {
		t.Fatalf("the status Commit's result = %+v, want the status changed and the lease ended", c)
	}
	w, err := s.GetWorld(bg, "w")
	if err != nil || w.Status != store.WorldArchived || w.StatusReason != "run completed" {
		t.Fatalf("w = %+v, %v", w, err)
	}
	if l, _, err := s.GetLease(bg, "w"); err != nil || l.Holder != "" || l.Epoch != ew {
		t.Fatalf("w's lease = %+v, %v; want released at %d", l, err, ew)
	}
	for _, j := range []struct{ world, want string }{{"w", "[ev-w-before ev-w-last]"}, {"v", "[ev-v-1 ev-v-2 ev-v-3]"}} {
		world, want := j.world, j.want
		evs, err := s.Read(bg, world, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.EventID
		}
		if got := fmt.Sprint(ids); got != want {
			t.Fatalf("%s's journal = %s, want %s", world, got, want)
		}
	}
	if v, err := s.GetWorld(bg, "v"); err != nil || v.Status != store.WorldActive {
		t.Fatalf("v = %+v, %v", v, err)
	}
}

// A Commit that archives its world races Acquires of another machine: no
// acquisition ever lands between the status read and the write (the
// Commit locks the world row, which an Acquire holds FOR KEY SHARE while
// it decides), so the other machine only ever sees the lease held or the
// world archived, never a lease on an archived world.
func TestStatusCommitRacingAcquireNeverLeasesAnArchivedWorld(t *testing.T) {
	t.Parallel()
	a, b, _ := twoMachines(t)
	const worlds = 16
	epochs := make([]uint64, worlds)
	for i := range worlds {
		epochs[i] = leased(t, a, fmt.Sprint("w", i), "A").Epoch
	}
	var wg sync.WaitGroup
	for i := range worlds {
		world := fmt.Sprint("w", i)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := a.Commit(bg, world, epochs[i], store.CommitBatch{Entries: []store.Record{rec("last")},
				Status: &store.StatusChange{Status: store.WorldArchived, Reason: "done"}}); err != nil {
				t.Errorf("%s: Commit: %v", world, err)
			}
		}()
		go func() {
			defer wg.Done()
			for {
				l, err := b.Acquire(bg, world, "B", time.Minute)
				switch {
				case errors.Is(err, store.ErrLeaseHeld):
					continue
				case errors.Is(err, store.ErrWorldArchived):
					return
				default:
					t.Errorf("%s: Acquire = %+v, %v; want ErrLeaseHeld until ErrWorldArchived", world, l, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range worlds {
		world := fmt.Sprint("w", i)
		w, err := b.GetWorld(bg, world)
		l, _, lerr := b.GetLease(bg, world)
		if err != nil || lerr != nil || w.Status != store.WorldArchived || l.Holder != "" || l.Epoch != epochs[i] {
			t.Fatalf("%s = %+v (%v), lease %+v (%v); want archived, released at %d", world, w, err, l, lerr, epochs[i])
		}
	}
}

// Spawn over a free stream with events, or over a world, fails whole on
// PostgreSQL too: the failed create_world rolls the pipelined acquire,
// items and events back with it.
func TestSpawnIsOneTransaction(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	if _, err := s.Append(bg, "run-1", []store.Record{rec("a")}, store.AppendOptions{Kind: store.FreeStream}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Spawn(bg, store.SpawnSpec{Universe: "u", World: "run-1", Holder: "A", TTL: time.Minute,
		Items: []store.InboxItem{{Kind: "start"}}, Events: []store.Record{rec("run-started")}})
	if !errors.Is(err, store.ErrWorldExists) {
		t.Fatalf("Spawn over a free stream with events: %v, want ErrWorldExists", err)
	}
	var se *store.Error
	if !errors.As(err, &se) || se.World != "run-1" {
		t.Fatalf("Spawn over a free stream: %#v, want the error to name run-1", err)
	}
	conn := rawConn(t, s.Schema())
	var worlds, leases, items, events int
	if err := conn.QueryRow(bg, `SELECT (SELECT count(*) FROM worlds), (SELECT count(*) FROM leases), (SELECT count(*) FROM inbox),
		(SELECT count(*) FROM events)`).Scan(&worlds, &leases, &items, &events); err != nil {
		t.Fatal(err)
	}
	if worlds+leases+items != 0 || events != 1 {
		t.Fatalf("a refused Spawn left %d worlds, %d leases, %d inbox items, %d events (want the free stream's 1)", worlds, leases, items, events)
	}
}

// countRows counts the rows of a spawn in every table it writes.
func countRows(t *testing.T, conn *pgx.Conn, world string) (worlds, leases, items, events int) {
	t.Helper()
	if err := conn.QueryRow(bg, `SELECT (SELECT count(*) FROM worlds WHERE world = $1), (SELECT count(*) FROM leases WHERE world = $1),
		(SELECT count(*) FROM inbox WHERE world = $1), (SELECT count(*) FROM events WHERE stream = $1)`, world).
		Scan(&worlds, &leases, &items, &events); err != nil {
		t.Fatal(err)
	}
	return
}

// Spawn is one round trip whatever it carries (world, items, lease,
// events), and it leaves the head cache at the spawned head: the world's
// next append is one round trip too (the speculative path, no miss).
func TestSpawnIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	for _, c := range []struct {
		world  string
		holder string
		items  int
		events []store.Record
	}{
		{"bare", "", 0, nil},
		{"items", "", 2, nil},
		{"leased", "A", 2, nil},
		{"journal", "A", 2, []store.Record{rec("run-started"), rec("step-started")}},
		{"journal-only", "A", 0, []store.Record{rec("run-started")}},
	} {
		spec := store.SpawnSpec{Universe: "u", World: c.world, Holder: c.holder, Events: c.events}
		if c.holder != "" {
			spec.TTL = time.Minute
		}
		for i := range c.items {
			spec.Items = append(spec.Items, store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("k", i)})
		}
		before := s.Stats()
		sp, err := s.Spawn(bg, spec)
		if err != nil {
			t.Fatalf("Spawn %s: %v", c.world, err)
		}
		if trips := s.Stats().RoundTrips - before.RoundTrips; trips != 1 {
			t.Fatalf("Spawn %s took %d round trips, want 1", c.world, trips)
		}
		if len(sp.Seqs) != c.items || len(sp.Appended) != len(c.events) {
			t.Fatalf("Spawn %s = %+v", c.world, sp)
		}
		if c.holder == "" {
			continue
		}
		// The next append expects the spawned head and speculates on it.
		n := uint64(len(c.events))
		before = s.Stats()
		got, err := s.Append(bg, c.world, []store.Record{rec("next")},
			store.AppendOptions{Fence: &store.Fence{World: c.world, Epoch: sp.Lease.Epoch}, ExpectedHead: store.Head(n)})
		if err != nil || got[0].RunSeq != n+1 {
			t.Fatalf("Append to %s after Spawn = %+v, %v; want runSeq %d", c.world, got, err, n+1)
		}
		after := s.Stats()
		if trips, misses := after.RoundTrips-before.RoundTrips, after.SpeculationMisses-before.SpeculationMisses; trips != 1 || misses != 0 {
			t.Fatalf("the first Append to %s took %d round trips (%d misses), want 1 (0)", c.world, trips, misses)
		}
	}
}

// An outcome the one-trip Spawn rules out raises inside its transaction,
// which rolls back whole: a lease row a new world cannot have (planted
// here, as no store call can) fails spawn_world's assertion, and a
// failing write after it (an events trigger planted here) fails the
// spawn; neither leaves a row behind.
func TestSpawnRollsBackAnImpossibleOutcome(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	conn := rawConn(t, s.Schema())
	spec := func(world string) store.SpawnSpec {
		return store.SpawnSpec{Universe: "u", World: world, Holder: "A", TTL: time.Minute,
			Items: []store.InboxItem{{Kind: "start"}}, Events: []store.Record{rec("run-started")}}
	}

	if _, err := conn.Exec(bg, `INSERT INTO leases (world, holder, epoch, expires_at_ns) VALUES ('ghost', 'X', 7, 9223372036854775807)`); err != nil {
		t.Fatal(err)
	}
	_, err := s.Spawn(bg, spec("ghost"))
	if sqlState(err) != "OR050" {
		t.Fatalf("Spawn over a planted lease row: %v, want the assertion OR050", err)
	}
	if w, l, i, e := countRows(t, conn, "ghost"); w != 0 || l != 1 || i != 0 || e != 0 {
		t.Fatalf("the refused Spawn left %d worlds, %d leases (want the planted 1), %d items, %d events", w, l, i, e)
	}

	if _, err := conn.Exec(bg, `CREATE FUNCTION refuse_events() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'P0001'; END $$;
		CREATE TRIGGER refuse_events BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_events()`); err != nil {
		t.Fatal(err)
	}
	_, err = s.Spawn(bg, spec("w"))
	if sqlState(err) != "P0001" {
		t.Fatalf("Spawn whose events insert fails: %v, want the trigger's error", err)
	}
	if w, l, i, e := countRows(t, conn, "w"); w+l+i+e != 0 {
		t.Fatalf("the failed Spawn left %d worlds, %d leases, %d items, %d events", w, l, i, e)
	}
	if _, err := conn.Exec(bg, `DROP TRIGGER refuse_events ON events`); err != nil {
		t.Fatal(err)
	}
	sp, err := s.Spawn(bg, spec("w"))
	if err != nil || sp.Lease.Epoch != 1 || len(sp.Appended) != 1 || sp.Appended[0].RunSeq != 1 {
		t.Fatalf("Spawn after the failure = %+v, %v", sp, err)
	}
}
