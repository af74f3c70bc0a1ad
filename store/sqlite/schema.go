package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"time"

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
	for _, m := range ms[current:] {
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			return &store.Error{Op: "open", Kind: err, Detail: "migration " + m.name}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, now.UnixNano()); err != nil {
			return openErr(err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return openErr(err)
	}
	return nil
}
