package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/orrery-run/orrery/store"
)

func closedErr(op string) error {
	return &store.Error{Op: op, Kind: store.ErrClosed}
}

// ctxErr reports a caller's cancelled or expired context. Its Kind is the
// context's error (context.Canceled or context.DeadlineExceeded), since no
// store sentinel means "the caller gave up"; a write that fails this way was
// never started (see backend.write).
func ctxErr(op string, err error) error {
	return &store.Error{Op: op, Kind: err}
}

// dbErr wraps an error of the database itself (I/O, a full disk, a
// corrupted file). The contract has no sentinel for those: the Kind is the
// driver's error, so errors.Is and errors.As still reach it. A store error
// passes through unchanged.
func dbErr(op, world string, err error) error {
	if err == nil {
		return nil
	}
	var se *store.Error
	if errors.As(err, &se) {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ctxErr(op, err)
	case errors.Is(err, sql.ErrConnDone), isClosedDB(err):
		return closedErr(op)
	}
	return &store.Error{Op: op, Kind: err, World: world, Detail: "sqlite"}
}

// isClosedDB recognises database/sql's error for a closed *sql.DB, which it
// does not export.
func isClosedDB(err error) bool {
	return err != nil && err.Error() == "sql: database is closed"
}

// sentinels are the store's typed outcomes (everything but ErrClosed, which
// a request never produces itself).
var sentinels = []error{
	store.ErrLeaseHeld, store.ErrNotHolder, store.ErrStaleEpoch, store.ErrNotAssigned,
	store.ErrFenced, store.ErrHeadMismatch, store.ErrCursorMismatch, store.ErrWorldNotFound,
	store.ErrWorldExists, store.ErrWorldPaused, store.ErrWorldArchived, store.ErrSnapshotNotFound,
	store.ErrSnapshotConflict, store.ErrClaimLost, store.ErrNotDue, store.ErrNotRetryable, store.ErrEffectEnded,
	store.ErrNotFound, store.ErrWatermarkConflict, store.ErrInvalid, store.ErrConflict, store.ErrAssignmentChanged,
	store.ErrOverloaded,
	store.ErrScheduleConflict, store.ErrScheduleExists,
}

// isOutcome tells a request's typed failure (a *store.Error with a store
// sentinel, which rolls back only that request's savepoint) from a failure
// of the database (which poisons the transaction).
func isOutcome(err error) bool {
	var se *store.Error
	if !errors.As(err, &se) {
		return false
	}
	for _, k := range sentinels {
		if se.Kind == k {
			return true
		}
	}
	return false
}
