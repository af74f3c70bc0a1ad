package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-run/orrery/store"
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
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql", name)
		}
		b, err := migrationFS.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %q: versions must be 1, 2, 3, … without gaps", m.name)
		}
	}
	return ms, nil
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
