package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/orrery-run/orrery/store"
	migfiles "github.com/orrery-run/orrery/store/internal/migration"
)

// The schema is a list of migrations embedded in the binary, one file per
// version (migrations/NNNN_name.sql). Open applies, in one IMMEDIATE
// transaction, every version above the file's recorded one and records each
// in schema_version; a file already at the latest version is left alone, and
// a file from a newer binary (a version this one does not know) is refused.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

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
		out[i] = migration{version: m.Version, name: m.File, sql: m.SQL}
	}
	return out, nil
}

// SchemaVersion is the schema version this binary writes.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

func migrate(ctx context.Context, conn *sql.Conn, now time.Time) (err error) {
	ms, err := migrations()
	if err != nil {
		return &store.Error{Op: "open", Kind: store.ErrInvalid, Detail: err.Error()}
	}
	// Rebuilding a table that others reference (a CHECK cannot be altered)
	// needs foreign keys off, which SQLite allows only outside a
	// transaction; they are checked before COMMIT and on again after.
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return openErr(err)
	}
	defer func() {
		if _, ferr := conn.ExecContext(context.Background(), "PRAGMA foreign_keys = ON"); ferr != nil && err == nil {
			err = openErr(ferr)
		}
	}()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return openErr(err)
	}
	defer func() {
		if err != nil {
			conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return openErr(err)
	}
	var current int
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_version").Scan(&current); err != nil {
		return openErr(err)
	}
	if current > len(ms) {
		return store.Errorf("open", store.ErrInvalid, "", "schema version %d is newer than this binary's %d", current, len(ms))
	}
	if current == len(ms) {
		_, err := conn.ExecContext(ctx, "COMMIT")
		return openErrOrNil(err)
	}
	// A migration that records a time (a status change) reads the store
	// clock here rather than SQLite's own.
	if _, err := conn.ExecContext(ctx, `CREATE TEMP TABLE migration_clock (now INTEGER NOT NULL);
		INSERT INTO temp.migration_clock (now) VALUES (?)`, now.UnixNano()); err != nil {
		return openErr(err)
	}
	for _, m := range ms[current:] {
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			return &store.Error{Op: "open", Kind: err, Detail: "migration " + m.name}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, now.UnixNano()); err != nil {
			return openErr(err)
		}
	}
	if _, err := conn.ExecContext(ctx, "DROP TABLE temp.migration_clock"); err != nil {
		return openErr(err)
	}
	if err := foreignKeyCheck(ctx, conn); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return openErrOrNil(err)
}

// foreignKeyCheck fails the migration if a rebuilt table left a dangling
// reference.
func foreignKeyCheck(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return openErr(err)
	}
	defer rows.Close()
	if rows.Next() {
		var table string
		var rowid sql.NullInt64
		var parent string
		var fk int
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			return openErr(err)
		}
		return store.Errorf("open", store.ErrInvalid, "", "migration left a row of %s referencing a missing %s", table, parent)
	}
	return openErrOrNil(rows.Err())
}

func openErrOrNil(err error) error {
	if err == nil {
		return nil
	}
	return openErr(err)
}

// orrery_sha256(blob) is the SHA-256 of a payload (NULL counts as empty,
// as in the append path), for migrations that fill in payload hashes.
func init() {
	sqlitedrv.MustRegisterDeterministicScalarFunction("orrery_sha256", 1, func(_ *sqlitedrv.FunctionContext, args []driver.Value) (driver.Value, error) {
		var b []byte
		switch v := args[0].(type) {
		case nil:
		case []byte:
			b = v
		case string:
			b = []byte(v)
		default:
			return nil, fmt.Errorf("orrery_sha256: %T is not a blob", v)
		}
		sum := sha256.Sum256(b)
		return sum[:], nil
	})
}
