package cli_test

import (
	"context"
	"database/sql"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/demo"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/vocab"
)

// haEnv names the script that sets up PostgreSQL servers of the test's own
// on this machine (.ci/pg-ha; it runs as root). .ci/run sets it for its
// failover step; without it the test skips.
const haEnv = "ORRERY_TEST_PG_HA"

// backupServers keeps the test's servers apart from the failover tests'
// (prefix ha, ports 5440 and 5441), which may run at the same time: its
// own cluster names, directories and ports.
var backupServers = []string{"PG_HA_PREFIX=orrery_bb", "PG_HA_PRIMARY_PORT=5450", "PG_HA_COPY_PORT=5451", "PG_HA_STANDBY_PORT=5452"}

// The physical backup docs/operations.md describes for PostgreSQL: a
// primary that archives its WAL, a base backup taken with pg_basebackup
// while it holds a store, more writes after it, then a new server on a
// copy of the base backup that replays the archive, and orrery restore
// --in-place on it. The recovered store equals the primary's (orrery
// migrate --verify-only: counts, heads, snapshots, inboxes, effects, every
// world replayed on both), writes made after the base backup included, and
// the restore holds every effect left open.
func TestPgBasebackupAndWALArchiveRecoverTheStore(t *testing.T) {
	script := os.Getenv(haEnv)
	if script == "" {
		t.Skipf("%s is not set: the base backup test needs PostgreSQL servers of its own (.ci/run's failover step sets it)", haEnv)
	}
	pg := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), backupServers...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	pg("up", "single")
	t.Cleanup(func() { pg("down") })
	primary := pg("dsn-primary", "postgres")

	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	// Real worlds: the demo's, put on the primary by orrery restore.
	dir := t.TempDir()
	if err := demo.Run(ctx, io.Discard, demo.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(ctx, nil, "restore", "--from", filepath.Join(dir, demo.DBName), "--to", primary, "-q"); r.code != cli.ExitOK {
		t.Fatalf("orrery restore onto the primary: %s", r)
	}
	// Effects pending before the base backup, and after it, in a world
	// written after it: only the archive has those. (None is in flight:
	// the verification takes its target for an import, whose claims the
	// copy released, and a physical copy keeps them.)
	st, err := postgres.Open(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	publish := func(world string, hashes ...string) {
		t.Helper()
		if _, err := st.CreateWorld(ctx, "u", world, nil); err != nil {
			t.Fatal(err)
		}
		l, err := st.Acquire(ctx, world, "node", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var intents []vocab.Intent
		for _, h := range hashes {
			intents = append(intents, vocab.Intent{IntentHash: h, Kind: "bb.request", Params: []byte("{}"), Origin: "test", PolicyContextHash: "p"})
		}
		if _, err := st.Publish(ctx, world, l.Epoch, intents); err != nil {
			t.Fatal(err)
		}
	}
	publish("before", "charge", "mail")
	pg("basebackup")
	publish("after", "refund")
	_ = st.Close()

	pg("recover")
	recovered := pg("dsn-copy", "postgres")
	// The world written after the base backup came from the archive.
	cp, err := postgres.Open(ctx, recovered)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.GetWorld(ctx, "after"); err != nil {
		t.Fatalf("the world written after the base backup, on the recovered server: %v", err)
	}
	_ = cp.Close()
	r := runCLI(ctx, nil, "migrate", "--from", primary, "--to", recovered, "--verify-only", "-q")
	if r.code != cli.ExitOK || !strings.Contains(r.out, "verification passed") || strings.Contains(r.out, " 0 replayed") {
		t.Fatalf("orrery migrate --verify-only between the primary and the recovered server: %s", r)
	}
	open := openEffects(ctx, t, primary)
	if open < 3 {
		t.Fatalf("%d open effects on the primary, want at least the test's 3", open)
	}
	r = runCLI(ctx, nil, "restore", "--in-place", "--to", recovered)
	if r.code != cli.ExitOK || held(t, r.out) != open {
		t.Fatalf("orrery restore --in-place on the recovered server: want %d held: %s", open, r)
	}
	if still := openEffects(ctx, t, recovered); still != 0 {
		t.Fatalf("%d effects are still open on the recovered server after the hold", still)
	}
}

// openEffects counts the store's effects pending or in flight.
func openEffects(ctx context.Context, t *testing.T, dsn string) int {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+postgres.DefaultSchema+`.effects WHERE state IN ('pending', 'inflight')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
