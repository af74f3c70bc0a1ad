package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/orrery-run/orrery/store/sqlite"
)

// Info is what Check found in a store file.
type Info struct {
	Path          string           `json:"path"`
	Bytes         int64            `json:"bytes"`
	SchemaVersion int              `json:"schema_version"`
	Worlds        int64            `json:"worlds"`
	Events        int64            `json:"events"`
	Effects       map[string]int64 `json:"effects"` // by state
}

// Open effects are those the restore's rule is about.
func (i Info) Open() int64 { return i.Effects["pending"] + i.Effects["inflight"] }

func readOnlyDSN(path string) string {
	q := url.Values{}
	q.Add("mode", "ro")
	q.Add("_pragma", "busy_timeout(10000)")
	return "file:" + path + "?" + q.Encode()
}

// Check proves path is an intact Orrery store this binary can read (see
// the package doc) without writing to it.
func Check(ctx context.Context, path string) (Info, error) { return inspect(ctx, path, true) }

// inspect is Check; without integrity it skips SQLite's integrity_check,
// which reads every page (a backup's source is read whole by the backup
// itself, and its file is checked).
func inspect(ctx context.Context, path string, integrity bool) (Info, error) {
	info := Info{Path: path, Effects: map[string]int64{}}
	fi, err := os.Stat(path)
	if err != nil {
		return info, err
	}
	if !fi.Mode().IsRegular() {
		return info, fmt.Errorf("%w: %s is not a regular file", ErrNotStore, path)
	}
	info.Bytes = fi.Size()
	db, err := sql.Open("sqlite", readOnlyDSN(path))
	if err != nil {
		return info, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if integrity {
		var res string
		if err := db.QueryRowContext(ctx, "PRAGMA integrity_check(1)").Scan(&res); err != nil {
			return info, classify(path, err)
		}
		if res != "ok" {
			return info, fmt.Errorf("%w: %s: integrity_check: %s", ErrCorrupt, path, res)
		}
	}
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ('schema_version', 'worlds', 'events', 'effects')`).Scan(&tables); err != nil {
		return info, classify(path, err)
	}
	if tables != 4 {
		return info, fmt.Errorf("%w: %s has no Orrery schema", ErrNotStore, path)
	}
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_version").Scan(&info.SchemaVersion); err != nil {
		return info, classify(path, err)
	}
	if info.SchemaVersion == 0 {
		return info, fmt.Errorf("%w: %s records no schema version", ErrNotStore, path)
	}
	if v := sqlite.SchemaVersion(); info.SchemaVersion > v {
		return info, fmt.Errorf("%w: %s is at schema version %d, this binary reads up to %d", ErrNewerFormat, path, info.SchemaVersion, v)
	}
	if err := db.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM worlds), (SELECT count(*) FROM events)").Scan(&info.Worlds, &info.Events); err != nil {
		return info, classify(path, err)
	}
	rows, err := db.QueryContext(ctx, "SELECT state, count(*) FROM effects GROUP BY state")
	if err != nil {
		return info, classify(path, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return info, classify(path, err)
		}
		info.Effects[s] = n
	}
	return info, classify(path, rows.Err())
}

// classify names SQLite's complaints about a file that is not a store, or
// not a whole one.
func classify(path string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "not a database"):
		return fmt.Errorf("%w: %s: %v", ErrNotStore, path, err)
	case strings.Contains(msg, "malformed"), strings.Contains(msg, "corrupt"), strings.Contains(msg, "disk I/O"),
		strings.Contains(msg, "short read"):
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return fmt.Errorf("reading %s: %w", path, err)
}
