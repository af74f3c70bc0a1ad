package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/demo"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/migrate"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/postgres/pgtest"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/workflow"
)

// pgSpec returns a postgres:// spec of a fresh schema (dropped when t
// ends), or skips without PostgreSQL.
func pgSpec(t *testing.T) (dsn, schema, spec string) {
	t.Helper()
	dsn = os.Getenv(testrig.DSNEnv)
	if dsn == "" {
		t.Skipf("%s is not set: skipping PostgreSQL (.ci/run sets it)", testrig.DSNEnv)
	}
	schema = pgtest.FreshSchema(t, dsn, "orrery_test")
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn, schema, dsn + sep + migrate.SchemaParam + "=" + schema
}

// The demo's database, with a payout run waiting for its approval,
// migrated to PostgreSQL with `orrery migrate` (docs/operations.md's
// command line): every check passes, the worlds replay on both stores;
// then a node served from PostgreSQL answers a call from the copied state
// and finishes the run.
func TestTheDemosDatabaseMigratesToPostgresAndServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, schema, to := pgSpec(t)
	dir := t.TempDir()
	if err := demo.Run(ctx, io.Discard, demo.Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	from := filepath.Join(dir, demo.DBName)
	src, err := sqlite.Open(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	wc, err := workflow.NewClient(src, nil, actor.NewEntropyExecutor())
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.PayoutDef().Start(ctx, wc, "p-1", ledger.Payout{Account: "alice", Amount: 50}); err != nil {
		t.Fatal(err)
	}
	alice, _, err := plane.Restore(ctx, src, ledger.Kernels(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ledger.AccountOf("alice", alice.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	// The demo kills a node: its liveness promise runs out a lease TTL
	// later, by the store's clock, and until then the source is live.
	testrig.WaitFor(t, "the demo's killed node to be known dead", time.Minute, 20*time.Millisecond, func() (bool, error) {
		live, err := migrate.LiveWorkers(ctx, src)
		return len(live.Workers) == 0, err
	})
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	r := runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "-o", "json")
	if r.code != cli.ExitOK {
		t.Fatalf("orrery migrate: %s", r)
	}
	var rep struct {
		migrate.Report
		Copy *migrate.Result `json:"copy"`
	}
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("the -o json output: %v\n%s", err, r.out)
	}
	if !rep.OK || rep.Copy == nil || rep.Replayed < 6 || rep.Runs != 1 || len(rep.Differences) != 0 ||
		// The orchestrator's lease world has no journal to replay and no
		// definition in a binary: it is listed, not passed silently.
		len(rep.NotReplayed) != 1 || rep.NotReplayed[0].World != "sys.orchestrator" {
		t.Fatalf("the verification: %s", r.out)
	}
	if !strings.Contains(r.err, "migrate: verifying") || !strings.Contains(r.err, "records/s") {
		t.Fatalf("no progress on stderr: %q", r.err)
	}
	// --verify-only, table output.
	r = runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "--verify-only", "--quiet")
	if r.code != cli.ExitOK || !strings.Contains(r.out, "verification passed") || r.err != "" {
		t.Fatalf("orrery migrate --verify-only: %s", r)
	}
	// Again into the copy: refused, it is not empty.
	r = runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "--quiet")
	if r.code != cli.ExitConflict || !strings.Contains(r.err, "not empty") {
		t.Fatalf("a second migrate into the copy: %s", r)
	}

	// A copy whose alice differs in her active snapshot's state: the
	// verification fails (exit 1), naming alice and no other world, and
	// the replay is what finds it (her journal is intact).
	tampered := filepath.Join(t.TempDir(), "tampered.db")
	verifyTampered(t, ctx, from, tampered)
	r = runCLI(ctx, nil, "migrate", "--from", from, "--to", tampered, "--verify-only", "--quiet")
	if r.code != cli.ExitError || !strings.Contains(r.err, "worlds differ: alice") || strings.Contains(r.err, "bob") {
		t.Fatalf("verifying a tampered copy: %s", r)
	}
	if !strings.Contains(r.out, "alice") || !(strings.Contains(r.out, migrate.CheckState) || strings.Contains(r.out, migrate.CheckReplay)) {
		t.Fatalf("the report does not show alice's replay differing:\n%s", r.out)
	}

	pg, err := postgres.Open(ctx, dsn, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	wfs, err := ledger.Workflows()
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(ctx, node.Config{Worker: "after-migration", Store: pg, Kernels: ledger.Kernels(), Workflows: wfs,
		LeaseTTL: 2 * time.Second, IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = n.Stop(context.WithoutCancel(ctx))
		}
	}()
	reply, err := n.Client().Call(ctx, "alice", ledger.Balance{})
	if err != nil {
		t.Fatal(err)
	}
	var balance int64
	if err := cbor.Unmarshal(reply, &balance); err != nil {
		t.Fatal(err)
	}
	if balance != want.Balance {
		t.Fatalf("alice's balance served from PostgreSQL is %d; the demo left %d", balance, want.Balance)
	}
	if err := n.Runs().Signal(ctx, "p-1", "approved", true, "approve-p-1"); err != nil {
		t.Fatal(err)
	}
	out, err := ledger.PayoutDef().Result(ctx, n.Runs(), "p-1")
	if err != nil {
		t.Fatal(err)
	}
	if !out.Approved || out.Notice != "paid 50 to alice" {
		t.Fatalf("the payout run finished with %+v", out)
	}
	stopped = true
	if err := n.Stop(ctx); err != nil {
		t.Fatalf("stopping the node: %v", err)
	}
	if err := pg.Close(); err != nil {
		t.Fatal(err)
	}
	// And the real command: `orrery serve` on the copy, then a call.
	url := serveInBackground(t, ctx, to)
	r = runCLI(ctx, nil, "--addr", url, "world", "call", "alice", "ledger/Balance", "-o", "json")
	if r.code != cli.ExitOK || !strings.Contains(r.out, strconv.FormatInt(want.Balance, 10)) {
		t.Fatalf("orrery world call alice ledger/Balance on `orrery serve --store <the copy>` (balance %d): %s", want.Balance, r)
	}
}

// serveInBackground runs `orrery serve --store spec` on a free port until
// t ends, and returns its API's URL, read from the line serve prints.
func serveInBackground(t *testing.T, ctx context.Context, spec string) string {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := cli.Run(sctx, []string{"serve", "--store", spec, "--listen", "127.0.0.1:0", "--worker-id", "served", "--lease-ttl", "2s"},
			cli.IO{Out: pw, Err: io.Discard, Getenv: func(string) string { return "" }}, ledger.Kernels())
		_ = pw.Close()
		done <- code
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != cli.ExitOK {
			t.Errorf("orrery serve exited %d", code)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("orrery serve printed no first line: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	_, url, ok := strings.Cut(strings.TrimSpace(line), "API ")
	if !ok {
		t.Fatalf("orrery serve's first line names no API: %q", line)
	}
	return url
}

// verifyTampered copies the store at from into a new SQLite file at to,
// with alice's active snapshot's state replaced by an earlier one of
// hers (its height and hash kept).
func verifyTampered(t *testing.T, ctx context.Context, from, to string) {
	t.Helper()
	src, err := sqlite.Open(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := sqlite.Open(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	snap, ok, err := src.ActiveSnapshot(ctx, "alice")
	if err != nil || !ok {
		t.Fatalf("alice has no active snapshot (%v): the demo snapshots every commit", err)
	}
	// Her state at an earlier snapshot, under the active one's height and
	// hash: a state she really had, so it decodes, but not hers there.
	var earlier []byte
	changed := false
	_, err = migrate.Copy(ctx, src, dst, migrate.CopyOptions{Transform: func(r *store.PortRecord) (bool, error) {
		if r.Kind != store.PortKindSnapshot || r.Snapshot.World != "alice" {
			return true, nil
		}
		if r.Snapshot.Height < snap.Height && !bytes.Equal(r.Snapshot.State, snap.State) {
			earlier = r.Snapshot.State
		}
		if r.Snapshot.Height == snap.Height && earlier != nil {
			s := r.Snapshot.Snapshot
			s.State = earlier
			r.Snapshot = &store.PortSnapshot{Snapshot: s}
			changed = true
		}
		return true, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Fatal("alice's active snapshot was not among the records copied")
	}
}

// A source a node still promises to be alive is refused with exit 4 and
// nothing is written; the same with a non-empty target.
func TestMigrateRefusesALiveSourceAndANonEmptyTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	from, to := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	src, err := sqlite.Open(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.CreateWorld(ctx, ledger.UniverseAccount, "alice", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Heartbeat(ctx, "node-a", 10, store.AliveAs("inc", time.Hour)); err != nil {
		t.Fatal(err)
	}
	r := runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "--quiet")
	if r.code != cli.ExitConflict || !strings.Contains(r.err, "live nodes") || !strings.Contains(r.err, "node-a") {
		t.Fatalf("migrate from a live source: %s", r)
	}
	if _, err := src.RetireWorker(ctx, "node-a", "inc"); err != nil {
		t.Fatal(err)
	}
	dst, err := sqlite.Open(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	if empty, err := dst.Empty(ctx); err != nil || !empty {
		t.Fatalf("the refused migrate wrote the target (empty %v, %v)", empty, err)
	}
	if _, err := dst.CreateWorld(ctx, ledger.UniverseAccount, "bob", nil); err != nil {
		t.Fatal(err)
	}
	_ = src.Close()
	_ = dst.Close()
	r = runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "--quiet")
	if r.code != cli.ExitConflict || !strings.Contains(r.err, "not empty") {
		t.Fatalf("migrate into a non-empty target: %s", r)
	}
	r = runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "--quiet", "--into-nonempty")
	if r.code != cli.ExitOK || !strings.Contains(r.out, "verification passed") {
		t.Fatalf("migrate --into-nonempty without collision: %s", r)
	}
}

// The argument checks: each bad pair is a usage error (exit 2) whose
// message says what is wrong, and the library's error is typed.
func TestMigrateArgumentValidation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	db := filepath.Join(dir, "a.db")
	cases := []struct {
		name     string
		from, to string
		want     error
		msg      string
	}{
		{"same file", db, db, migrate.ErrSameStore, "same store"},
		{"same file by another path", db, filepath.Join(dir, ".", "x", "..", "a.db"), migrate.ErrSameStore, "same store"},
		{"same database and schema", "postgres://u@h:5432/d", "postgresql://v@H/d", migrate.ErrSameStore, "same store"},
		{"memory", "memory", db, migrate.ErrBadSpec, "keeps nothing"},
		{"empty", "", db, nil, "needs --from and --to"},
		{"another scheme", "mysql://h/d", db, migrate.ErrBadSpec, "a SQLite path or a postgres:// DSN"},
		{"bad DSN", "postgres://u@h:notaport/d", db, migrate.ErrBadSpec, "invalid port"},
		{"bad DSN option", "postgres://u@h/d?sslmode=sometimes", db, migrate.ErrBadSpec, "not a valid PostgreSQL DSN"},
		{"no database", "postgres://u:secret@h:5432", db, migrate.ErrBadSpec, "names no database"},
		{"bad schema", "postgres://u@h/d?schema=Bad-Name", db, migrate.ErrBadSpec, "schema"},
		{"a directory", dir, db, migrate.ErrBadSpec, "is a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want != nil {
				if _, _, err := migrate.ParsePair(c.from, c.to); !errors.Is(err, c.want) {
					t.Fatalf("ParsePair(%q, %q) = %v, want %v", c.from, c.to, err, c.want)
				}
			}
			r := runCLI(ctx, nil, "migrate", "--from", c.from, "--to", c.to)
			if r.code != cli.ExitUsage || !strings.Contains(r.err, c.msg) || strings.Contains(r.err, "secret") {
				t.Fatalf("orrery migrate --from %q --to %q: %s", c.from, c.to, r)
			}
		})
	}
	// Two schemas of one database are two stores.
	if _, _, err := migrate.ParsePair("postgres://u@h/d?schema=a", "postgres://u@h/d?schema=b"); err != nil {
		t.Fatalf("two schemas of one database: %v", err)
	}
}

// FuzzParseSpec: a spec either parses or fails with ErrBadSpec, and a
// parsed spec is the same store as itself.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"orrery.db", "postgres://u:p@h:5432/d?sslmode=disable", "postgres://u@h/d?schema=x", "memory", "", "x://y", "postgres://%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := migrate.ParseSpec(s)
		if err != nil {
			if !errors.Is(err, migrate.ErrBadSpec) {
				t.Fatalf("ParseSpec(%q): untyped error %v", s, err)
			}
			return
		}
		if !sp.Same(sp) || (sp.Kind != "sqlite" && sp.Kind != "postgres") {
			t.Fatalf("ParseSpec(%q) = %+v", s, sp)
		}
	})
}

// A copy left part-way in the target (its first records imported, as a
// run stopped after some batches leaves it) is refused without --resume
// (exit 4) and completed with it, verified; a target holding one of the
// source's worlds as another world is a conflict under --resume (exit 4),
// never overwritten.
func TestMigrateResumeCompletesAnInterruptedCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	from, to, other := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db"), filepath.Join(dir, "c.db")
	src, err := sqlite.Open(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"alice", "bob", "carol"} {
		if _, err := src.CreateWorld(ctx, ledger.UniverseAccount, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	var recs []store.PortRecord
	if err := src.Export(ctx, func(r store.PortRecord) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	dst, err := sqlite.Open(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Import(ctx, recs[:2]); err != nil {
		t.Fatal(err)
	}
	o, err := sqlite.Open(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.CreateWorld(ctx, "another-universe", "alice", nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []interface{ Close() error }{src, dst, o} {
		_ = s.Close()
	}
	r := runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "--quiet")
	if r.code != cli.ExitConflict || !strings.Contains(r.err, "not empty") || !strings.Contains(r.err, "--resume") {
		t.Fatalf("migrate into a part-way copy without --resume: %s", r)
	}
	r = runCLI(ctx, nil, "migrate", "--from", from, "--to", to, "--quiet", "--resume")
	if r.code != cli.ExitOK || !strings.Contains(r.out, "verification passed") {
		t.Fatalf("migrate --resume: %s", r)
	}
	r = runCLI(ctx, nil, "migrate", "--from", from, "--to", other, "--quiet", "--resume")
	if r.code != cli.ExitConflict || !strings.Contains(r.err, "exists") {
		t.Fatalf("migrate --resume into a store holding another alice: %s", r)
	}
}
