package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// functionsQuery lists the functions of the transaction's schema: each by
// name and argument types, its definition with the schema's name taken
// out, and whether this transaction wrote its catalog row.
const functionsQuery = `SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
		replace(pg_get_functiondef(p.oid), quote_ident(current_schema()) || '.', ''),
		p.xmin = pg_current_xact_id()::xid
	FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace`

type functionDef struct {
	def     string
	written bool // by the transaction that listed it
}

func listFunctions(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) map[string]functionDef {
	t.Helper()
	rows, _ := q.Query(bg, functionsQuery)
	out := map[string]functionDef{}
	var key string
	var f functionDef
	if _, err := pgx.ForEachRow(rows, []any{&key, &f.def, &f.written}, func() error { out[key] = f; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("the schema has no function")
	}
	return out
}

// The rule of functions.sql: it holds the current definition of every
// function of the schema. On a schema the migrations alone brought up to
// date, applying functions.sql must replace every function (none is
// missing from it), create none (none the migrations dropped or never
// made), and leave each body as the migrations left it (a migration that
// redefines a function without the same change to functions.sql fails
// here). And Open, which applies both, leaves those same definitions.
func TestFunctionsSQLIsCurrent(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	schema := freshSchema(t, dsn)
	conn := rawConn(t, schema)
	if err := pgx.BeginFunc(bg, conn, func(tx pgx.Tx) error {
		_, err := applyMigrations(bg, tx, schema)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	migrated := listFunctions(t, conn)

	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(bg) }()
	if _, err := tx.Exec(bg, functionsSQL); err != nil {
		t.Fatalf("applying functions.sql on the migrated schema: %v", err)
	}
	applied := listFunctions(t, tx)
	for key, f := range applied {
		m, ok := migrated[key]
		switch {
		case !ok:
			t.Errorf("functions.sql defines %s, which the migrations leave undefined (dropped, or never created)", key)
		case !f.written:
			t.Errorf("%s is a function of the schema missing from functions.sql", key)
		case f.def != m.def:
			t.Errorf("functions.sql's %s is not the one the migrations leave:\n--- migrations\n%s\n--- functions.sql\n%s", key, m.def, f.def)
		}
	}
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}

	s := openStore(t, "", nil)
	opened := listFunctions(t, rawConn(t, s.Schema()))
	if len(opened) != len(migrated) {
		t.Errorf("after Open the schema has %d functions, the migrations leave %d", len(opened), len(migrated))
	}
	for key, f := range opened {
		if m, ok := migrated[key]; !ok || m.def != f.def {
			t.Errorf("after Open, %s is not the one the migrations leave (present there: %v)", key, ok)
		}
	}
}

// Open applies functions.sql again when the schema last had another
// version of it: a function changed since (here by hand, as an older
// functions.sql would have left it) is back to its current definition.
func TestOpenReappliesChangedFunctionsSQL(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	conn := rawConn(t, s.Schema())
	want := listFunctions(t, conn)["expect_count(n bigint, want bigint, what text)"].def
	if !strings.Contains(want, "OR040") {
		t.Fatalf("expect_count is not the one this test knows:\n%s", want)
	}
	if _, err := conn.Exec(bg, `CREATE OR REPLACE FUNCTION expect_count(n bigint, want bigint, what text) RETURNS void
		LANGUAGE plpgsql AS $$ BEGIN END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(bg, `UPDATE schema_functions SET sha256 = 'an older functions.sql'`); err != nil {
		t.Fatal(err)
	}
	openStore(t, s.Schema(), nil)
	if got := listFunctions(t, conn)["expect_count(n bigint, want bigint, what text)"].def; got != want {
		t.Fatalf("after Open, expect_count is\n%s\nwant\n%s", got, want)
	}
}

// previousRelease is the schema version of the release before this one.
// Its binaries may still run beside this one during a rolling upgrade, so
// every function its schema had must stay, with the same arguments, until
// a later release; raise it when a release ships.
const previousRelease = 17

// TestTheReleaseBeforesFunctionsRemain: a schema brought up to date keeps
// every function the release before had. A migration that drops or
// re-signs one (the release before still calls it) fails here: the single
// world acquire, which this binary no longer calls, once did.
func TestTheReleaseBeforesFunctionsRemain(t *testing.T) {
	t.Parallel()
	dsn := testDSN(t)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < previousRelease {
		t.Fatalf("%d migrations, fewer than the release before's %d", len(ms), previousRelease)
	}
	old := freshSchema(t, dsn)
	oconn := rawConn(t, old)
	otx, err := oconn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = otx.Rollback(bg) }()
	ident := pgx.Identifier{old}.Sanitize()
	for _, q := range []string{`CREATE SCHEMA IF NOT EXISTS ` + ident, `SET LOCAL search_path TO ` + ident} {
		if _, err := otx.Exec(bg, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range ms[:previousRelease] {
		if _, err := otx.Exec(bg, m.sql); err != nil {
			t.Fatalf("migration %d (%s): %v", m.version, m.name, err)
		}
	}
	before := listFunctions(t, otx)

	cur := freshSchema(t, dsn)
	conn := rawConn(t, cur)
	tx, err := conn.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(bg) }()
	if _, err := applyMigrations(bg, tx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, functionsSQL); err != nil {
		t.Fatal(err)
	}
	now := listFunctions(t, tx)
	for key := range before {
		if _, ok := now[key]; !ok {
			t.Errorf("%s, a function of the release before (version %d), is gone: its binaries call it during a rolling upgrade", key, previousRelease)
		}
	}
}
