package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orrery-run/orrery/store"
)

// codes maps the SQLSTATEs the store's SQL raises (see migrations) to the
// store's sentinels (the list of version 2, migrations/0002_contract.sql).
var codes = map[string]error{
	"OR001": store.ErrWorldNotFound,
	"OR002": store.ErrWorldPaused,
	"OR003": store.ErrWorldArchived,
	"OR004": store.ErrWorldExists,
	"OR005": store.ErrSnapshotNotFound,
	"OR006": store.ErrNotFound,
	"OR007": store.ErrSnapshotConflict,
	"OR010": store.ErrFenced,
	"OR011": store.ErrLeaseHeld,
	"OR012": store.ErrNotHolder,
	"OR013": store.ErrStaleEpoch,
	"OR014": store.ErrNotAssigned,
	"OR015": store.ErrClaimLost,
	"OR016": store.ErrNotDue,
	"OR017": store.ErrNotRetryable,
	"OR020": store.ErrCursorMismatch,
	"OR021": store.ErrHeadMismatch,
	"OR030": store.ErrWatermarkConflict,
	"OR040": store.ErrInvalid,
}

// Immutable is the SQLSTATE the events trigger raises on an UPDATE or a
// DELETE outside compaction.
const Immutable = "OR100"

// dbErr maps an error to a *store.Error: the store's own SQLSTATEs to their
// sentinels, bad input the database refused (bad encoding, a value too
// large) to ErrInvalid, a finished context to its error. Anything else (the server is down, the disk is full) keeps the
// driver's error as its Kind, since the contract has no sentinel for it;
// errors.Is and errors.As still reach it. A *store.Error passes unchanged.
func dbErr(op, world string, err error) error {
	if err == nil {
		return nil
	}
	var se *store.Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		kind := context.Canceled
		if errors.Is(err, context.DeadlineExceeded) {
			kind = context.DeadlineExceeded
		}
		return &store.Error{Op: op, Kind: kind, World: world}
	}
	if errors.Is(err, store.ErrClosed) {
		return &store.Error{Op: op, Kind: store.ErrClosed, World: world}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if kind, ok := codes[pe.Code]; ok {
			return &store.Error{Op: op, Kind: kind, World: world, Detail: pe.Message}
		}
		switch pe.Code {
		case "22021", // character_not_in_repertoire (invalid UTF-8)
			"22P05", // untranslatable_character
			"22003", // numeric_value_out_of_range
			"54000", // program_limit_exceeded (a value too large)
			"22001": // string_data_right_truncation
			return &store.Error{Op: op, Kind: store.ErrInvalid, World: world, Detail: pe.Message}
		}
		if unavailableCode(pe.Code) {
			return &store.Error{Op: op, Kind: store.Unavailable(err), World: world, Detail: "postgres"}
		}
		return &store.Error{Op: op, Kind: err, World: world, Detail: "postgres"}
	}
	// Not an answer of the server at all: the connection could not be made
	// or broke (a restart, a terminated backend, a network cut), or the
	// commit was cut short of its synchronous replication (failover.go),
	// so whether the statement took effect is unknown.
	return &store.Error{Op: op, Kind: store.Unavailable(err), World: world, Detail: "postgres"}
}

// unavailableCode tells the SQLSTATEs of a server that cannot serve now:
// connection exceptions (class 08), an administrator's or a crash's
// shutdown and a server still starting (57P01–57P03), and insufficient
// resources (class 53: too many connections, out of memory or disk), and
// a server that takes no writes (25006: a standby, or a primary demoted by
// a failover; the connection is closed, see failover.go).
func unavailableCode(code string) bool {
	switch {
	case code == readOnlyCode:
		return true
	case len(code) == 5 && (code[:2] == "08" || code[:2] == "53"):
		return true
	case code == "57P01", code == "57P02", code == "57P03":
		return true
	}
	return false
}

// isDeadlock tells a transaction PostgreSQL rolled back to break a
// deadlock.
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// isTransient tells a conflict that rolled the transaction back and may
// succeed when run again.
func isTransient(err error) bool {
	if errors.Is(err, errRetryBatch) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", // serialization_failure
			"40P01": // deadlock_detected
			return true
		}
	}
	return false
}
