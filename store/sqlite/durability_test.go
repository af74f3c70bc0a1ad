package sqlite

import (
	"bufio"
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// rawDB opens the store's file directly, as an operator's sqlite3 shell
// would, bypassing the store.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Journal records are immutable: a direct UPDATE or DELETE of the events
// table (or of the idempotency keys) fails, also from outside the store,
// and only Compact removes events.
func TestJournalRecordsAreImmutable(t *testing.T) {
	s, _, path := openTemp(t)
	if _, err := s.CreateWorld(bg, "u", "w1", nil); err != nil {
		t.Fatal(err)
	}
	lease, err := s.Acquire(bg, "w1", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Record
	for i := 0; i < 10; i++ {
		evs = append(evs, rec(fmt.Sprint(i)))
	}
	if _, err := s.Append(bg, "w1", evs, store.AppendOptions{Fence: &store.Fence{World: "w1", Epoch: lease.Epoch}}); err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	for _, q := range []string{
		`UPDATE events SET payload = x'00' WHERE stream = 'w1' AND run_seq = 1`,
		`UPDATE events SET run_seq = 100 WHERE stream = 'w1'`,
		`DELETE FROM events WHERE stream = 'w1' AND run_seq = 2`,
		`DELETE FROM events`,
		`UPDATE event_keys SET run_seq = 9 WHERE stream = 'w1'`,
		`DELETE FROM event_keys`,
	} {
		_, err := db.Exec(q)
		if err == nil || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("%s: %v, want the immutability trigger to abort it", q, err)
		}
	}
	if got, _ := s.Read(bg, "w1", 0, 0); len(got) != 10 || !bytes.Equal(got[0].Payload, []byte{0xa0}) {
		t.Fatalf("journal changed: %d events", len(got))
	}

	// Compaction deletes through its gate, and leaves no gate behind.
	if err := s.PutSnapshot(bg, "w1", lease.Epoch, store.Snapshot{Height: 6, State: []byte{1}, StateHash: "h6"}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Compact(bg, "w1", lease.Epoch, 2)
	if err != nil || n != 4 {
		t.Fatalf("Compact = %d, %v; want 4", n, err)
	}
	var gates int
	if err := db.QueryRow(`SELECT COUNT(*) FROM compaction_gate`).Scan(&gates); err != nil || gates != 0 {
		t.Fatalf("compaction gates left: %d, %v", gates, err)
	}
	if _, err := s.Read(bg, "w1", 0, 0); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("a read below the floor after compaction: %v, want ErrCompacted", err)
	}
	if got, err := s.Read(bg, "w1", 4, 0); err != nil || len(got) != 6 || got[0].RunSeq != 5 {
		t.Fatalf("after compaction: %d events, %v", len(got), err)
	}
	if _, err := db.Exec(`DELETE FROM events WHERE stream = 'w1' AND run_seq = 5`); err == nil {
		t.Fatal("a delete passed the trigger after compaction")
	}
	// A compacted event's idempotency key is still answered.
	again, err := s.Append(bg, "w1", []store.Record{rec("0")}, store.AppendOptions{Fence: &store.Fence{World: "w1", Epoch: lease.Epoch}})
	if err != nil || !again[0].Idempotent || again[0].RunSeq != 1 {
		t.Fatalf("re-append of a compacted event = %+v, %v", again, err)
	}
}

// Everything committed survives Close and Open: journal, worlds (with their
// status and its reason), leases (the epoch counter continues), inbox and
// cursor, effects, timers, snapshots, watermarks, fabric and dedupe
// records, and the worker inventory.
func TestReopenPreservesEverything(t *testing.T) {
	clock := newManualClock()
	path := filepath.Join(t.TempDir(), "orrery.db")
	s, err := Open(bg, path, WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.CreateWorld(bg, "u", "w1", nil)
	must(err)
	_, err = s.CreateWorld(bg, "u", "w2", nil)
	must(err)
	lease, err := s.Acquire(bg, "w1", "worker-a", time.Minute)
	must(err)
	must(s.Assign(bg, "w1", store.Assignment{DesiredWorker: "worker-a", Priority: 3, Reason: "r"}, nil))
	seq, _, err := s.Enqueue(bg, "w1", store.InboxItem{Kind: "event", Payload: []byte("in"), DedupeKey: "d1"})
	must(err)
	app, err := s.DrainToJournal(bg, "w1", lease.Epoch, 0, 0, seq, []store.Record{rec("a"), rec("b")})
	must(err)
	_, err = s.Publish(bg, "w1", lease.Epoch, []vocab.Intent{{IntentHash: "i1", Kind: "http.request", Params: []byte{1}}})
	must(err)
	must(s.Schedule(bg, "w1", lease.Epoch, "t1", clock.Now().Add(time.Hour), []byte("tick")))
	must(s.PutSnapshot(bg, "w1", lease.Epoch, store.Snapshot{Height: 2, State: []byte("state"), StateHash: "h2"}))
	must(s.CASWatermark(bg, "proj", "w1", 0, 2))
	_, err = s.Send(bg, "w2", "m1", store.InboxItem{Payload: []byte("hi")})
	must(err)
	_, err = s.SetWorldStatus(bg, "w2", store.WorldPaused, "maintenance")
	must(err)
	_, err = s.Heartbeat(bg, "worker-a", 7)
	must(err)
	_, err = s.SetDraining(bg, "worker-a", true)
	must(err)
	must(s.Close())

	s, err = Open(bg, path, WithClock(clock.Now))
	must(err)
	defer s.Close()
	evs, err := s.Read(bg, "w1", 0, 0)
	must(err)
	if len(evs) != 2 || evs[1].RunSeq != app[1].RunSeq || !evs[0].PersistedAt.Equal(app[0].PersistedAt) {
		t.Fatalf("journal after reopen: %+v", evs)
	}
	if h, _ := s.Head(bg, "w1"); h != 2 {
		t.Fatalf("head %d", h)
	}
	if c, _ := s.Cursor(bg, "w1"); c != seq {
		t.Fatalf("cursor %d", c)
	}
	if _, dup, _ := s.Enqueue(bg, "w1", store.InboxItem{Kind: "event", DedupeKey: "d1"}); !dup {
		t.Fatal("inbox dedupe key lost")
	}
	l, ok, err := s.GetLease(bg, "w1")
	if err != nil || !ok || l.Epoch != lease.Epoch || l.Holder != "worker-a" {
		t.Fatalf("lease after reopen: %+v %v %v", l, ok, err)
	}
	if a, ok, _ := s.GetAssignment(bg, "w1"); !ok || a.Priority != 3 {
		t.Fatalf("assignment after reopen: %+v", a)
	}
	if st, err := s.EffectStatus(bg, "i1"); err != nil || st.State != vocab.EffectPending {
		t.Fatalf("effect after reopen: %+v %v", st, err)
	}
	clock.Advance(2 * time.Hour)
	if ts, err := s.ClaimDue(bg, "tw", 10, time.Minute); err != nil || len(ts) != 1 || string(ts[0].Payload) != "tick" {
		t.Fatalf("timer after reopen: %+v %v", ts, err)
	}
	if snap, ok, _ := s.ActiveSnapshot(bg, "w1"); !ok || snap.StateHash != "h2" || string(snap.State) != "state" {
		t.Fatalf("snapshot after reopen: %+v", snap)
	}
	if v, _ := s.GetWatermark(bg, "proj", "w1"); v != 2 {
		t.Fatalf("watermark %d", v)
	}
	if r, err := s.Send(bg, "w2", "m1", store.InboxItem{}); err != nil || r.Status != store.FabricAlreadyEnqueued {
		t.Fatalf("fabric dedupe after reopen: %+v %v", r, err)
	}
	if w, err := s.GetWorld(bg, "w2"); err != nil || w.Status != store.WorldPaused || w.StatusReason != "maintenance" {
		t.Fatalf("world status after reopen: %+v %v", w, err)
	}
	if ws, err := s.ListWorkers(bg); err != nil || len(ws) != 1 || ws[0].Capacity != 7 || !ws[0].Draining {
		t.Fatalf("workers after reopen: %+v %v", ws, err)
	}
	// The lease expired meanwhile: a new holder gets the next epoch.
	must(s.Unassign(bg, "w1", nil))
	l2, err := s.Acquire(bg, "w1", "worker-b", time.Minute)
	if err != nil || l2.Epoch != lease.Epoch+1 {
		t.Fatalf("acquire after reopen: %+v %v", l2, err)
	}
}

// Opening is idempotent (the schema is applied once), and a file written
// by a newer schema is refused.
func TestSchemaVersioning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orrery.db")
	for i := 0; i < 3; i++ {
		s, err := Open(bg, path)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	db := rawDB(t, path)
	var n, v int
	if err := db.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_version`).Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != SchemaVersion() || v != SchemaVersion() {
		t.Fatalf("schema_version has %d rows up to %d, want %d", n, v, SchemaVersion())
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v", mode, err)
	}
	if _, err := db.Exec(`INSERT INTO schema_version (version, name, applied_at) VALUES (?, 'future.sql', 0)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bg, path); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("open of a newer schema: %v, want ErrInvalid", err)
	}
}

// The writer runs with synchronous=FULL and foreign keys on unless told
// otherwise.
func TestPragmas(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want int // PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL
	}{
		{nil, 2},
		{[]Option{WithSynchronous(SyncNormal)}, 1},
		{[]Option{WithSynchronous(SyncOff)}, 0},
	} {
		s, _, _ := openTemp(t, tc.opts...)
		var sync, fk int
		if err := s.b.conn.QueryRowContext(bg, `PRAGMA synchronous`).Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if err := s.b.conn.QueryRowContext(bg, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if sync != tc.want || fk != 1 {
			t.Fatalf("synchronous %d (want %d), foreign_keys %d", sync, tc.want, fk)
		}
	}
	if _, err := Open(bg, filepath.Join(t.TempDir(), "x.db"), WithSynchronous("SOMETIMES")); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("unknown synchronous mode: %v", err)
	}
}

// crashChildEnv makes the test binary a child that appends until killed.
const crashChildEnv = "ORRERY_SQLITE_CRASH_CHILD"

// TestCrashChild is the child of TestCrashKeepsEveryAcknowledgedAppend: it
// appends forever, printing each acknowledged runSeq, until SIGKILL.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("run by TestCrashKeepsEveryAcknowledgedAppend")
	}
	s, err := Open(bg, path)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		got, err := s.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, free)
		if err != nil {
			fmt.Fprintln(w, "append:", err)
			w.Flush()
			os.Exit(2)
		}
		fmt.Fprintln(w, got[0].RunSeq)
		w.Flush()
	}
}

// A process killed (SIGKILL) in the middle of appending, never closing the
// store, loses none of the appends it had acknowledged: each was committed
// to the WAL before its answer. This is a process crash; a power loss is
// what synchronous=FULL's fsync covers on top.
func TestCrashKeepsEveryAcknowledgedAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "orrery.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var acked uint64
	for sc.Scan() && acked < 200 {
		n, err := strconv.ParseUint(strings.TrimSpace(sc.Text()), 10, 64)
		if err != nil {
			continue // the test framework's own output
		}
		acked = n
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		if n, err := strconv.ParseUint(strings.TrimSpace(sc.Text()), 10, 64); err == nil {
			acked = n // acknowledged before the kill landed
		}
	}
	cmd.Wait()
	if acked < 200 {
		t.Fatalf("the child acknowledged only %d appends", acked)
	}
	s, err := Open(bg, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	head, err := s.Head(bg, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if head < acked {
		t.Fatalf("head %d after the crash, but %d appends were acknowledged", head, acked)
	}
	evs, err := s.Read(bg, "run-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.RunSeq != uint64(i+1) || e.EventID != fmt.Sprintf("ev-%d", i) {
			t.Fatalf("event %d after the crash: %+v", i, e)
		}
	}
	t.Logf("killed after %d acknowledged appends; %d survived", acked, head)
}

// Another connection writing the file (another process, an operator's
// shell) is noticed: the committer drops its cached heads instead of
// handing out a runSeq that is taken. The store's own checkpoints are not
// such writes.
func TestAnotherWriterIsNoticed(t *testing.T) {
	s, _, path := openTemp(t)
	for i := 0; i < 3; i++ {
		if _, err := s.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, free); err != nil {
			t.Fatal(err)
		}
	}
	// The store checkpoints at least once. The test runs the checkpoint
	// itself rather than waiting for the background checkpointer's turn,
	// which comes when a busy machine gives it one: a bound on attempts,
	// not on time.
	for i := 0; s.Stats().Checkpoints == 0; i++ {
		if i == 1000 {
			t.Fatalf("no checkpoint ran in %d attempts: %+v", i, s.Stats())
		}
		s.b.checkpoint(bg)
	}
	if _, err := s.Append(bg, "run-1", []store.Record{rec("3")}, free); err != nil {
		t.Fatal(err)
	}
	if n := s.b.stats.cacheResets.Load(); n != 0 {
		t.Fatalf("the store's own checkpoints reset the cache %d times", n)
	}
	db := rawDB(t, path)
	if _, err := db.Exec(`INSERT INTO event_keys (stream, idempotency_key, event_id, run_seq, persisted_at) VALUES ('run-1', 'key-x', 'ev-x', 5, 0);
		INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, persisted_at, step_id, logical_attempt, engine_attempt, plan_id, plan_version)
		VALUES ('run-1', 5, 'ev-x', 'key-x', 'StepCompleted', 0, 's', 1, 1, 'p', 1)`); err != nil {
		t.Fatal(err)
	}
	got, err := s.Append(bg, "run-1", []store.Record{rec("y")}, store.AppendOptions{Kind: store.FreeStream, ExpectedHead: store.Head(5)})
	if err != nil || got[0].RunSeq != 6 {
		t.Fatalf("append after another writer = %+v, %v; want runSeq 6", got, err)
	}
	if s.b.stats.cacheResets.Load() != 1 {
		t.Fatalf("cache resets %d, want 1", s.b.stats.cacheResets.Load())
	}
}
