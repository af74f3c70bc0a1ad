package backup

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/orrery-run/orrery/plane/migrate"
)

var (
	// ErrExists: the backup file exists and Force was not given.
	ErrExists = errors.New("backup: the file exists")
	// ErrNotStore: the file is not an Orrery store (not SQLite, or no
	// schema version).
	ErrNotStore = errors.New("backup: not an Orrery store")
	// ErrCorrupt: SQLite's integrity check fails (a truncated or damaged
	// file).
	ErrCorrupt = errors.New("backup: the file is damaged")
	// ErrNewerFormat: the file's schema is newer than this binary's.
	ErrNewerFormat = errors.New("backup: written by a newer binary")
	// ErrUnsupported: the source is not a SQLite file (a PostgreSQL store
	// is backed up with PostgreSQL's own tools).
	ErrUnsupported = errors.New("backup: unsupported source")
	// ErrBadEffects: an unknown rule for effects.
	ErrBadEffects = errors.New("backup: unknown effects rule")
)

// ErrTargetLive: a node serves the restore's target (a worker's liveness
// promise still runs by the target's clock), and Force was not given.
// The error is a *TargetLiveError.
var ErrTargetLive = errors.New("backup: the target is being served")

// TargetLiveError names the workers whose liveness promise still runs on
// the restore target's clock. errors.Is(err, ErrTargetLive).
type TargetLiveError struct{ migrate.Live }

func (e *TargetLiveError) Error() string {
	return fmt.Sprintf("%s (%s, alive until %s by the store's clock, %s from now): a node serving the target would act on the restored records as they are written; stop every node of the target and wait for its promise to run out, or pass --force",
		ErrTargetLive, strings.Join(e.Workers, ", "), e.Until.UTC().Format(time.RFC3339), e.Until.Sub(e.Now).Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrTargetLive) hold.
func (e *TargetLiveError) Unwrap() error { return ErrTargetLive }
