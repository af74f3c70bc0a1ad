package backup

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"

	"github.com/orrery-run/orrery/plane/migrate"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/sqlite"
)

// BackupStore writes a logical backup of src (a PostgreSQL store, or any
// store with an exporter) into a new SQLite file at dst: the store's export
// is one consistent snapshot, so the file is one point in time of src
// while its nodes keep serving. It is restored as any backup is. It is a
// convenience beside PostgreSQL's own tools, not a replacement: it has no
// point-in-time recovery between backups.
func BackupStore(ctx context.Context, src store.Store, dst string, o Options) (Result, error) {
	now, start, err := begin(dst, o)
	if err != nil {
		return Result{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".partial-*")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "backup.db")
	if err := logicalCopy(ctx, src, file); err != nil {
		return Result{}, err
	}
	return finish(ctx, file, dst, now, start)
}

func logicalCopy(ctx context.Context, src store.Store, file string) error {
	dst, err := sqlite.Open(ctx, file)
	if err != nil {
		return err
	}
	// The nodes serving src are alive by design: the export is one
	// snapshot, which is what a backup is.
	_, err = migrate.Copy(ctx, src, dst, migrate.CopyOptions{Force: true})
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// The file must stand alone, as VACUUM INTO's does: leaving WAL mode
	// folds the WAL into it and removes it before it is renamed.
	db, err := sql.Open("sqlite", "file:"+file)
	if err != nil {
		return err
	}
	defer db.Close()
	var mode string
	return db.QueryRowContext(ctx, "PRAGMA journal_mode = DELETE").Scan(&mode)
}
