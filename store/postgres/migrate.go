package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-run/orrery/store"
	migfiles "github.com/orrery-run/orrery/store/internal/migration"
)

// The schema comes from two places, read at Open in this order:
//
//   - migrations/NNNN_name.sql, the history: each applied once, in order,
//     recorded in schema_migrations, and never edited once applied (a
//     change is a new migration);
//   - functions.sql, the present: the current definition of every
//     function of the schema (CREATE OR REPLACE), applied after the
//     migrations in the same transaction. A migration that adds, changes
//     or drops a function makes the same change there, so that a reader
//     finds each function's definition in one place;
//     TestFunctionsSQLIsCurrent fails when the two disagree.

// functionsSQL is functions.sql.
//
//go:embed functions.sql
var functionsSQL string

// migration is one embedded file, migrations/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	ms, err := migfiles.Load(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	out := make([]migration, len(ms))
	for i, m := range ms {
		out[i] = migration{version: m.Version, name: m.Name, sql: m.SQL}
	}
	return out, nil
}

// migrationLockClass is the first key of the advisory lock that serialises
// migrations of one schema (the second is the schema's hash).
const migrationLockClass = 0x6f72 // "or"

// migrate brings schema up to the embedded version, then applies
// functions.sql, in one transaction under a transaction-scoped advisory
// lock: concurrent openers (on any machine) wait for the first, then find
// nothing left to do. DDL is transactional in PostgreSQL, so a failed
// migration leaves nothing behind.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	const op = "migrate"
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		applied, err := applyMigrations(ctx, tx, schema)
		if err != nil {
			return err
		}
		return applyFunctions(ctx, tx, applied > 0)
	})
	return dbErr(op, "", err)
}

// applyMigrations takes the schema's migration lock in tx, creates the
// schema if need be, sets tx's search_path to it, and applies the pending
// migrations; it returns how many it applied.
func applyMigrations(ctx context.Context, tx pgx.Tx, schema string) (int, error) {
	const op = "migrate"
	ms, err := migrations()
	if err != nil {
		return 0, store.Errorf(op, store.ErrInvalid, "", "%v", err)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrationLockClass, schema); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+ident); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		return 0, err
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return 0, err
	}
	if current > len(ms) {
		return 0, store.Errorf(op, store.ErrInvalid, "", "schema %s is at version %d, newer than this binary's %d", schema, current, len(ms))
	}
	for _, m := range ms[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return 0, fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return 0, err
		}
	}
	return len(ms) - current, nil
}

// applyFunctions applies functions.sql in tx (whose search_path is the
// store's schema) when a migration just ran or the file is not the one
// last applied. Applying it again is harmless, but each CREATE OR REPLACE
// makes every session of every process compile the function anew on its
// next call, which is the latency warm.go keeps off the hot paths: an Open
// that changes nothing leaves the functions as they are.
func applyFunctions(ctx context.Context, tx pgx.Tx, migrated bool) error {
	sum := sha256.Sum256([]byte(functionsSQL))
	hash := hex.EncodeToString(sum[:])
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_functions (
		one    boolean PRIMARY KEY DEFAULT true CHECK (one),
		sha256 text NOT NULL)`); err != nil {
		return err
	}
	if !migrated {
		var last string
		err := tx.QueryRow(ctx, `SELECT sha256 FROM schema_functions`).Scan(&last)
		if err != nil && err != pgx.ErrNoRows {
			return err
		}
		if last == hash {
			return nil
		}
	}
	if _, err := tx.Exec(ctx, functionsSQL); err != nil {
		return fmt.Errorf("functions.sql: %w", err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO schema_functions (sha256) VALUES ($1)
		ON CONFLICT (one) DO UPDATE SET sha256 = EXCLUDED.sha256`, hash)
	return err
}
