package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Options configure Backup.
type Options struct {
	// Force replaces an existing file (else ErrExists).
	Force bool
	// Clock is the local clock for Elapsed (nil: time.Now).
	Clock func() time.Time
}

// Result is what Backup wrote.
type Result struct {
	Info
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Backup writes a consistent copy of the SQLite store at src to dst while
// nodes may be serving src (see the package doc), then checks it.
func Backup(ctx context.Context, src, dst string, o Options) (Result, error) {
	now, start, err := begin(dst, o)
	if err != nil {
		return Result{}, err
	}
	if _, err := inspect(ctx, src, false); err != nil {
		return Result{}, fmt.Errorf("the source: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".partial-*")
	if err != nil {
		return Result{}, err
	}
	tmpName := tmp.Name()
	_ = tmp.Close()
	// VACUUM INTO refuses a file that exists (even empty): the name was
	// only reserved.
	if err := os.Remove(tmpName); err != nil {
		return Result{}, err
	}
	defer os.Remove(tmpName)
	if err := vacuumInto(ctx, src, tmpName); err != nil {
		return Result{}, err
	}
	return finish(ctx, tmpName, dst, now, start)
}

// begin starts a backup to dst: its clock and start, and a refusal of a
// dst that exists unless o.Force.
func begin(dst string, o Options) (now func() time.Time, start time.Time, err error) {
	now = o.Clock
	if now == nil {
		now = time.Now
	}
	if _, err := os.Stat(dst); err == nil && !o.Force {
		return nil, time.Time{}, fmt.Errorf("%w: %s (pass --force to replace it)", ErrExists, dst)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, err
	}
	return now, now(), nil
}

// finish checks the backup written at tmp and only then puts it at dst.
func finish(ctx context.Context, tmp, dst string, now func() time.Time, start time.Time) (Result, error) {
	info, err := Check(ctx, tmp)
	if err != nil {
		return Result{}, fmt.Errorf("checking the backup just written: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return Result{}, err
	}
	info.Path = dst
	return Result{Info: info, Elapsed: now().Sub(start)}, nil
}

func vacuumInto(ctx context.Context, src, dst string) error {
	q := url.Values{}
	// A writer's commit (or a checkpoint's) may hold the lock a reader
	// needs to open its snapshot for a moment.
	q.Add("_pragma", "busy_timeout(10000)")
	db, err := sql.Open("sqlite", "file:"+src+"?"+q.Encode())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("VACUUM INTO %s: %w", dst, classify(src, err))
	}
	return nil
}
