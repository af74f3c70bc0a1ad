package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orrery-run/orrery/store"
	migfiles "github.com/orrery-run/orrery/store/internal/migration"
)

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

// migrate brings schema up to the embedded version in one transaction,
// under a transaction-scoped advisory lock: concurrent openers (on any
// machine) wait for the first, then find nothing left to do. DDL is
// transactional in PostgreSQL, so a failed migration leaves nothing behind.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	const op = "migrate"
	ms, err := migrations()
	if err != nil {
		return store.Errorf(op, store.ErrInvalid, "", "%v", err)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrationLockClass, schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+ident); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+ident); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return err
		}
		if current > len(ms) {
			return store.Errorf(op, store.ErrInvalid, "", "schema %s is at version %d, newer than this binary's %d", schema, current, len(ms))
		}
		for _, m := range ms[current:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
	return dbErr(op, "", err)
}
