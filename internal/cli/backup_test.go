package cli_test

import (
	"context"
	"database/sql"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/demo"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/postgres/pgtest"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/vocab"
)

var heldLine = regexp.MustCompile(`(?m)^held (\d+) `)

func held(t *testing.T, out string) int {
	t.Helper()
	m := heldLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no held count in:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// The commands docs/operations.md shows for SQLite: orrery backup of the
// demo's store (real worlds), refused over an existing file unless
// --force, then orrery restore into SQLite and PostgreSQL with every world
// replayed and the verification passed.
func TestBackupAndRestoreCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	if err := demo.Run(ctx, io.Discard, demo.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, demo.DBName)
	bak := filepath.Join(dir, "backup.db")
	r := runCLI(ctx, nil, "backup", "--from", src, "--to", bak)
	if r.code != cli.ExitOK || !strings.Contains(r.out, "checked: integrity ok") || !strings.Contains(r.out, "worlds: ") {
		t.Fatalf("orrery backup: %s", r)
	}
	checkFailure(t, runCLI(ctx, nil, "backup", "--from", src, "--to", bak), cli.ExitConflict, []string{"backup over an existing file"})
	if r := runCLI(ctx, nil, "backup", "--from", src, "--to", bak, "--force"); r.code != cli.ExitOK {
		t.Fatalf("orrery backup --force: %s", r)
	}
	targets := []string{filepath.Join(dir, "restored.db")}
	if dsn := os.Getenv(testrig.DSNEnv); dsn != "" {
		targets = append(targets, withSchema(dsn, pgtest.FreshSchema(t, dsn, "orrery_restore")))
	}
	for _, to := range targets {
		r := runCLI(ctx, nil, "restore", "--from", bak, "--to", to, "-q")
		if r.code != cli.ExitOK || !strings.Contains(r.out, "verification passed") {
			t.Fatalf("orrery restore --to %s: %s", to, r)
		}
		if strings.Contains(r.out, " 0 replayed") {
			t.Fatalf("orrery restore replayed no world:\n%s", r.out)
		}
		held(t, r.out)
		// A second restore into the now non-empty target is refused.
		checkFailure(t, runCLI(ctx, nil, "restore", "--from", bak, "--to", to, "-q"), cli.ExitConflict, []string{"restore into a non-empty target"})
		if strings.HasPrefix(to, "postgres") {
			// The logical backup of a PostgreSQL store restores as well.
			pgBak := filepath.Join(dir, "pg-logical.db")
			if r := runCLI(ctx, nil, "backup", "--from", to, "--to", pgBak); r.code != cli.ExitOK || !strings.Contains(r.out, "checked: integrity ok") {
				t.Fatalf("orrery backup --from postgres: %s", r)
			}
			if r := runCLI(ctx, nil, "restore", "--from", pgBak, "--to", filepath.Join(dir, "from-pg.db"), "-q"); r.code != cli.ExitOK || !strings.Contains(r.out, "verification passed") {
				t.Fatalf("orrery restore of the logical backup: %s", r)
			}
		}
	}
	bad := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(bad, []byte("not a store\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkFailure(t, runCLI(ctx, nil, "restore", "--from", bad, "--to", filepath.Join(dir, "never.db"), "-q"), cli.ExitError, []string{"restore of a text file"})
}

func withSchema(dsn, schema string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "schema=" + schema
}

// The commands docs/operations.md shows for PostgreSQL: pg_dump -Fc of
// the store's schema, pg_restore after the schema is lost, then
// orrery restore --in-place, which holds every effect the dump left open
// (as orrery restore does) before any node serves it.
func TestPgDumpRestoreThenHoldInPlace(t *testing.T) {
	dsn := os.Getenv(testrig.DSNEnv)
	if dsn == "" {
		t.Skipf("%s is not set", testrig.DSNEnv)
	}
	pgDump, err1 := exec.LookPath("pg_dump")
	pgRestore, err2 := exec.LookPath("pg_restore")
	if err1 != nil || err2 != nil {
		// The packaged PostgreSQL's own directory, when not on PATH.
		pgDump, pgRestore = "/usr/lib/postgresql/15/bin/pg_dump", "/usr/lib/postgresql/15/bin/pg_restore"
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	schema := pgtest.FreshSchema(t, dsn, "orrery_dump")
	store := withSchema(dsn, schema)
	// A store with an effect in flight and one pending when it is dumped.
	st, err := postgres.Open(ctx, dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateWorld(ctx, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(ctx, "w", "node", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(ctx, "w", l.Epoch, []vocab.Intent{
		{IntentHash: "charge", Kind: "http.request", Params: []byte("{}"), Origin: "test", PolicyContextHash: "p"},
		{IntentHash: "mail", Kind: "http.request", Params: []byte("{}"), Origin: "test", PolicyContextHash: "p"},
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Claim(ctx, "adapter", []string{"http.request"}, 1, time.Minute); err != nil || len(got) != 1 {
		t.Fatalf("Claim = %v, %v", got, err)
	}
	_ = st.Close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var open int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`.effects WHERE state IN ('pending', 'inflight')`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 2 {
		t.Fatalf("%d open effects before the dump, want 2", open)
	}
	dump := filepath.Join(dir, "orrery.dump")
	if out, err := exec.CommandContext(ctx, pgDump, "-Fc", "-n", schema, "-f", dump, dsn).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if _, err := db.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, pgRestore, "-d", dsn, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	r := runCLI(ctx, nil, "restore", "--in-place", "--to", store)
	if r.code != cli.ExitOK || held(t, r.out) != open {
		t.Fatalf("orrery restore --in-place: want %d held: %s", open, r)
	}
	var still int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`.effects WHERE state IN ('pending', 'inflight')`).Scan(&still); err != nil {
		t.Fatal(err)
	}
	if still != 0 {
		t.Fatalf("%d effects are still open after the hold", still)
	}
}

// orrery restore into a store a node serves (its heartbeat's promise
// unexpired) is refused with exit 4 (as migrate refuses a live source), one line naming the node and --force,
// and writes nothing; --force restores, holding the open effect.
func TestRestoreRefusesAServedTargetUnlessForced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dir := t.TempDir()
	src := filepath.Join(dir, "orrery.db")
	st, err := sqlite.Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateWorld(ctx, "u", "w", nil); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(ctx, "w", "node", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(ctx, "w", l.Epoch, []vocab.Intent{
		{IntentHash: "charge", Kind: "http.request", Params: []byte("{}"), Origin: "test", PolicyContextHash: "p"},
	}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	bak := filepath.Join(dir, "backup.db")
	if r := runCLI(ctx, nil, "backup", "--from", src, "--to", bak); r.code != cli.ExitOK {
		t.Fatalf("orrery backup: %s", r)
	}

	to := filepath.Join(dir, "served.db")
	dst, err := sqlite.Open(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Heartbeat(ctx, "node-a", 4, store.AliveAs("inc-1", time.Hour)); err != nil {
		t.Fatal(err)
	}
	args := []string{"restore", "--from", bak, "--to", to, "-q"}
	r := runCLI(ctx, nil, args...)
	checkFailure(t, r, cli.ExitConflict, args)
	if !strings.Contains(r.err, "node-a") || !strings.Contains(r.err, "--force") {
		t.Fatalf("the refusal does not name the live node and --force: %q", r.err)
	}
	if ws, err := dst.ListWorlds(ctx, "", ""); err != nil || len(ws) != 0 {
		t.Fatalf("a refused restore wrote worlds: %v, %v", ws, err)
	}
	r = runCLI(ctx, nil, append(args, "--force")...)
	if r.code != cli.ExitOK || !strings.Contains(r.out, "verification passed") || held(t, r.out) != 1 {
		t.Fatalf("orrery restore --force: %s", r)
	}
	if es, err := dst.EffectStatus(ctx, "charge"); err != nil || es.State != vocab.EffectHeld {
		t.Fatalf("EffectStatus(charge) after the forced restore = %+v, %v; want held", es, err)
	}
	_ = dst.Close()
}
