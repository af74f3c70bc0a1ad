package backup

import "errors"

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
