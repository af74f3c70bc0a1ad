package backup_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/backup"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/store/storetest"
	"github.com/orrery-run/orrery/vocab"
)

const kind = "http.request"

func intents(world string, i int) []vocab.Intent {
	out := make([]vocab.Intent, 3)
	for j := range out {
		h := fmt.Sprintf("%s-%d-%d", world, i, j)
		out[j] = vocab.Intent{IntentHash: h, Kind: kind, Params: []byte("params " + h), Origin: "test", PolicyContextHash: "pch"}
	}
	return out
}

// seed fills st through its importer with n generated worlds (journals,
// inbox, leases, effects done and pending, timers).
func seed(t testing.TB, ctx context.Context, st store.Store, n int) {
	t.Helper()
	im := st.(store.Importer)
	batch := make([]store.PortRecord, 0, 2000)
	_, err := storetest.PortGen(n, 4, 64, time.Now().Add(-time.Hour), func(r store.PortRecord) error {
		batch = append(batch, r)
		if len(batch) == cap(batch) {
			err := im.Import(ctx, batch)
			batch = batch[:0]
			return err
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = im.Import(ctx, batch)
	}
	if err == nil {
		err = im.FinishImport(ctx)
	}
	if err != nil {
		t.Fatalf("seeding %d worlds: %v", n, err)
	}
}

func openSQLite(t testing.TB, ctx context.Context, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// A backup taken while writers commit is one point in time: each writer's
// transaction publishes three effects at once, and the backup holds every
// world's effects in whole transactions. It restores into SQLite and
// PostgreSQL with every check of the migration passing, and the open
// effects it held are exactly the backup's pending and inflight ones.
// The writers' longest wait during the backup is logged (bench/README.md).
func TestABackupTakenUnderLoadIsOnePointInTimeAndRestoresVerified(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "orrery.db")
	src := openSQLite(t, ctx, srcPath)
	seed(t, ctx, src, 2000)

	stop := make(chan struct{})
	started := make(chan struct{}, 2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var stall time.Duration
	var ops int
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w := fmt.Sprintf("load-%d-%d", g, i)
				begin := time.Now()
				if _, err := src.CreateWorld(ctx, "u", w, nil); err != nil {
					t.Errorf("CreateWorld %s: %v", w, err)
					return
				}
				l, err := src.Acquire(ctx, w, "writer", time.Minute)
				if err != nil {
					t.Errorf("Acquire %s: %v", w, err)
					return
				}
				if _, err := src.Publish(ctx, w, l.Epoch, intents(w, i)); err != nil {
					t.Errorf("Publish %s: %v", w, err)
					return
				}
				d := time.Since(begin) / 3
				mu.Lock()
				stall = max(stall, d)
				ops++
				mu.Unlock()
				if i == 0 {
					started <- struct{}{}
				}
			}
		}()
	}
	<-started
	<-started
	mu.Lock()
	stall, opsBefore := 0, ops
	mu.Unlock()
	bak := filepath.Join(dir, "backup.db")
	res, err := backup.Backup(ctx, srcPath, bak, backup.Options{})
	mu.Lock()
	during, duringOps := stall, ops-opsBefore
	mu.Unlock()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of %.1f MB (%d worlds, %d events) in %s; %d writer operations during it, the longest took %s",
		float64(res.Bytes)/1e6, res.Worlds, res.Events, res.Elapsed, duringOps, during)

	db, err := sql.Open("sqlite", "file:"+bak+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var torn, loadWorlds int
	if err := db.QueryRow(`SELECT count(*) FROM (SELECT w.id FROM worlds w LEFT JOIN effects e ON e.world = w.id
		WHERE w.id LIKE 'load-%' GROUP BY w.id HAVING count(e.intent_hash) NOT IN (0, 3))`).Scan(&torn); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM worlds WHERE id LIKE 'load-%'`).Scan(&loadWorlds); err != nil {
		t.Fatal(err)
	}
	if torn != 0 {
		t.Fatalf("%d worlds of the backup hold part of one transaction's effects", torn)
	}
	if loadWorlds == 0 {
		t.Fatal("the backup holds none of the writers' worlds: it was not taken under load")
	}
	if res.Open() == 0 {
		t.Fatal("the backup has no open effect to hold")
	}

	for _, backend := range []string{testrig.SQLite, testrig.Postgres} {
		t.Run(backend, func(t *testing.T) {
			target := testrig.Open(t, ctx, backend, &testrig.Clock{})
			rr, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if !rr.Report.OK {
				t.Fatalf("verification failed: %v\n%+v", rr.Report.Err(), rr.Report.Differences)
			}
			if int64(rr.Held) != res.Open() {
				t.Fatalf("held %d effects, the backup has %d open", rr.Held, res.Open())
			}
			if rr.Report.Worlds != int(res.Worlds) {
				t.Fatalf("verified %d worlds, the backup has %d", rr.Report.Worlds, res.Worlds)
			}
			t.Logf("restored %d records into %s in %s (%.0f records/s), %d effects held",
				rr.Copy.Total(), backend, rr.Copy.Elapsed, float64(rr.Copy.Total())/rr.Copy.Elapsed.Seconds(), rr.Held)
		})
	}
}

// An effect open in an old backup may have run after it: the restore holds
// it (no claim hands it out, so no adapter runs it again), an operator's
// release lets it run once more under its unchanged intent hash, an
// operator's resolve settles it with the receipt instead; a done effect
// stays done. With the rerun rule it is claimable at once.
func TestAnOldBackupsOpenEffectIsHeldUntilAnOperatorDecides(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "orrery.db")
	src := openSQLite(t, ctx, srcPath)
	if _, err := src.CreateWorld(ctx, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	l, err := src.Acquire(ctx, "w", "node", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(h string) vocab.Intent {
		return vocab.Intent{IntentHash: h, Kind: kind, Params: []byte(h), Origin: "test", PolicyContextHash: "pch"}
	}
	if _, err := src.Publish(ctx, "w", l.Epoch, []vocab.Intent{mk("paid"), mk("pay"), mk("mail")}); err != nil {
		t.Fatal(err)
	}
	items, err := src.Claim(ctx, "adapter", []string{kind}, 2, time.Minute)
	if err != nil || len(items) != 2 || items[0].IntentHash != "paid" || items[1].IntentHash != "pay" {
		t.Fatalf("Claim = %+v, %v; want paid and pay", items, err)
	}
	if _, _, err := src.Complete(ctx, "paid", items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK}); err != nil {
		t.Fatal(err)
	}
	bak := filepath.Join(dir, "old.db")
	if _, err := backup.Backup(ctx, srcPath, bak, backup.Options{}); err != nil {
		t.Fatal(err)
	}
	// After the backup, on the live store, pay (inflight in the backup)
	// runs and its receipt is consumed; mail (pending in it) runs too.
	if _, _, err := src.Complete(ctx, "pay", items[1].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK}); err != nil {
		t.Fatal(err)
	}

	for _, backend := range []string{testrig.SQLite, testrig.Postgres} {
		t.Run(backend, func(t *testing.T) {
			target := testrig.Open(t, ctx, backend, &testrig.Clock{})
			rr, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if !rr.Report.OK {
				t.Fatalf("verification failed: %v", rr.Report.Err())
			}
			if rr.Held != 2 {
				t.Fatalf("held %d, want 2 (pay inflight, mail pending)", rr.Held)
			}
			for h, want := range map[string]vocab.EffectState{"paid": vocab.EffectDone, "pay": vocab.EffectHeld, "mail": vocab.EffectHeld} {
				st, err := target.EffectStatus(ctx, h)
				if err != nil || st.State != want {
					t.Fatalf("EffectStatus(%s) = %+v, %v; want %s", h, st, err, want)
				}
			}
			// No adapter is handed anything: nothing runs again.
			if got, err := target.Claim(ctx, "adapter", []string{kind}, 10, time.Minute); err != nil || len(got) != 0 {
				t.Fatalf("Claim after the restore = %+v, %v; want nothing", got, err)
			}
			// Release: it runs once more, under the same intent hash (the
			// idempotency key adapters send).
			if _, err := target.ReleaseHeld(ctx, "pay", "checked: not charged"); err != nil {
				t.Fatal(err)
			}
			got, err := target.Claim(ctx, "adapter", []string{kind}, 10, time.Minute)
			if err != nil || len(got) != 1 || got[0].IntentHash != "pay" {
				t.Fatalf("Claim after the release = %+v, %v; want pay alone", got, err)
			}
			// Resolve: the operator's receipt settles it and reaches the
			// world's inbox; it is never claimed.
			seq, _, err := target.Resolve(ctx, "mail", vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte(`{"id":"m-1"}`)}, "sent before the restore")
			if err != nil || seq == 0 {
				t.Fatalf("Resolve(mail) = %d, %v", seq, err)
			}
			if st, err := target.EffectStatus(ctx, "mail"); err != nil || st.State != vocab.EffectDone {
				t.Fatalf("EffectStatus(mail) after resolve = %+v, %v; want done", st, err)
			}
		})
	}

	t.Run("rerun", func(t *testing.T) {
		target := testrig.Open(t, ctx, testrig.SQLite, &testrig.Clock{})
		rr, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{Effects: backup.EffectsRerun, TempDir: t.TempDir()})
		if err != nil || !rr.Report.OK || rr.Held != 0 {
			t.Fatalf("Restore rerun = held %d, %v, %v", rr.Held, err, rr.Report)
		}
		got, err := target.Claim(ctx, "adapter", []string{kind}, 10, time.Minute)
		if err != nil || len(got) != 2 {
			t.Fatalf("Claim after a rerun restore = %+v, %v; want pay and mail", got, err)
		}
	})
}

func exported(t *testing.T, ctx context.Context, st store.Store) int {
	t.Helper()
	n := 0
	if err := st.(store.Exporter).Export(ctx, func(store.PortRecord) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A file that is not an Orrery store, a truncated backup and a backup of a
// newer format are each refused with a typed error before anything is
// written to the target.
func TestABadBackupIsRefusedAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "orrery.db")
	src := openSQLite(t, ctx, srcPath)
	seed(t, ctx, src, 300)
	good := filepath.Join(dir, "good.db")
	if _, err := backup.Backup(ctx, srcPath, good, backup.Options{}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", "file:"+other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('hello')"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	newer := write("newer.db", raw)
	db, err = sql.Open("sqlite", "file:"+newer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO schema_version (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	for _, c := range []struct {
		name string
		path string
		want error
	}{
		{"text", write("notes.txt", []byte("these are not the pages of a database\n")), backup.ErrNotStore},
		{"another SQLite database", other, backup.ErrNotStore},
		{"truncated", write("truncated.db", raw[:len(raw)/2]), backup.ErrCorrupt},
		{"newer format", newer, backup.ErrNewerFormat},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := testrig.Open(t, ctx, testrig.SQLite, &testrig.Clock{})
			before := exported(t, ctx, target)
			_, err := backup.Restore(ctx, c.path, target, backup.RestoreOptions{TempDir: t.TempDir()})
			if !errors.Is(err, c.want) {
				t.Fatalf("Restore = %v, want %v", err, c.want)
			}
			if after := exported(t, ctx, target); after != before {
				t.Fatalf("the target holds %d records after the refusal, %d before", after, before)
			}
		})
	}

	t.Run("an existing backup file is kept unless forced", func(t *testing.T) {
		if _, err := backup.Backup(ctx, srcPath, other, backup.Options{}); !errors.Is(err, backup.ErrExists) {
			t.Fatalf("Backup over an existing file = %v, want ErrExists", err)
		}
		if _, err := backup.Check(ctx, other); !errors.Is(err, backup.ErrNotStore) {
			t.Fatalf("the existing file was changed: Check = %v", err)
		}
		if _, err := backup.Backup(ctx, srcPath, other, backup.Options{Force: true}); err != nil {
			t.Fatalf("Backup --force = %v", err)
		}
		if _, err := backup.Check(ctx, other); err != nil {
			t.Fatalf("the forced backup: Check = %v", err)
		}
	})
}

// A logical backup of a PostgreSQL store (its export, one snapshot) is an
// SQLite file that passes Check, equals its source, and restores as any
// backup does.
func TestALogicalBackupOfPostgresRestoresVerified(t *testing.T) {
	ctx := context.Background()
	src := testrig.Open(t, ctx, testrig.Postgres, &testrig.Clock{})
	seed(t, ctx, src, 200)
	bak := filepath.Join(t.TempDir(), "pg.db")
	res, err := backup.BackupStore(ctx, src, bak, backup.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Worlds != 200 {
		t.Fatalf("the backup has %d worlds, want 200", res.Worlds)
	}
	if _, err := os.Stat(bak + "-wal"); err == nil {
		t.Fatal("the backup left a WAL beside it: the file does not stand alone")
	}
	if _, err := backup.BackupStore(ctx, src, bak, backup.Options{}); !errors.Is(err, backup.ErrExists) {
		t.Fatalf("a second backup to the same file = %v, want ErrExists", err)
	}
	target := testrig.Open(t, ctx, testrig.SQLite, &testrig.Clock{})
	rr, err := backup.Restore(ctx, bak, target, backup.RestoreOptions{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !rr.Report.OK || int64(rr.Held) != res.Open() || rr.Held == 0 {
		t.Fatalf("restore: held %d of %d open, report %v", rr.Held, res.Open(), rr.Report.Err())
	}
}

func openTarget(t *testing.T, ctx context.Context, backend string) store.Store {
	return testrig.Open(t, ctx, backend, &testrig.Clock{})
}
