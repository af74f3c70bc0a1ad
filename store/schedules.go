package store

import (
	"context"
	"errors"
	"time"
)

// TopicSchedules: a schedule was created, changed or deleted, so the next
// due time may have moved.
const TopicSchedules = "schedules"

// MaxScheduleBytes bounds a schedule's Spec and State each.
const MaxScheduleBytes = 64 << 10

// ErrScheduleConflict: an UpdateSchedule found the schedule at another
// version than its caller read (another scheduler or an operator wrote
// it since). Nothing was written; read it again and decide anew.
var ErrScheduleConflict = errors.New("store: schedule changed")

// FirstScheduleVersion is a created schedule's Version: the store's clock
// at the create, in nanoseconds (at least 1). A schedule deleted and
// created again under its id so starts far above any version the deleted
// one reached, and a writer that read the deleted one can never
// compare-and-swap over the new one (as it could if every schedule began
// at version 1).
func FirstScheduleVersion(now time.Time) uint64 { return uint64(max(now.UnixNano(), 1)) }

// ErrScheduleExists: CreateSchedule found the id taken.
var ErrScheduleExists = errors.New("store: schedule exists")

// ScheduleRecord is one durable schedule. The store keeps Spec and State
// as bytes (their meaning is the scheduler's, in plane/schedule) and
// judges only NextFireAt against its own clock: a schedule is due when
// NextFireAt is set and at or before the store's now. Version is the
// compare-and-swap token every write advances, so two schedulers that
// read one version can never both record the tick they decided on.
type ScheduleRecord struct {
	ID         string
	Spec       []byte    // what to do and when (opaque here)
	State      []byte    // progress: recorded ticks, counters (opaque here)
	Paused     bool      // kept for listing; the scheduler clears NextFireAt
	NextFireAt time.Time // zero: nothing due until someone writes one
	Version    uint64    // set by the store: FirstScheduleVersion at create, +1 per update
	CreatedAt  time.Time // the store's clock
	UpdatedAt  time.Time // the store's clock
}

// Schedules is the durable schedule table.
type Schedules interface {
	// CreateSchedule stores r as version 1 (ErrScheduleExists if its id
	// is taken) and returns it as stored.
	CreateSchedule(ctx context.Context, r ScheduleRecord) (ScheduleRecord, error)
	// GetSchedule reads one schedule; ErrNotFound if there is none.
	GetSchedule(ctx context.Context, id string) (ScheduleRecord, error)
	// ListSchedules lists up to limit schedules with id > after, by id.
	ListSchedules(ctx context.Context, after string, limit int) ([]ScheduleRecord, error)
	// UpdateSchedule writes r's Spec, State, Paused and NextFireAt if the
	// stored version is still r.Version (else ErrScheduleConflict, or
	// ErrNotFound once deleted), and returns the record at its new version.
	UpdateSchedule(ctx context.Context, r ScheduleRecord) (ScheduleRecord, error)
	// DeleteSchedule removes a schedule; ErrNotFound if there is none.
	DeleteSchedule(ctx context.Context, id string) error
	// DueSchedules returns up to limit schedules whose NextFireAt is at or
	// before the store's clock, earliest first, and that clock's reading.
	DueSchedules(ctx context.Context, limit int) (due []ScheduleRecord, now time.Time, err error)
	// NextScheduleDue returns the earliest NextFireAt of any schedule
	// (ok=false if none) with the store's clock, so a scheduler sleeps
	// for at-now on its own clock and never compares the two clocks.
	NextScheduleDue(ctx context.Context) (at, now time.Time, ok bool, err error)
}

// checkSchedule checks a record to create or update.
func checkSchedule(op string, r ScheduleRecord) error {
	if err := first(CheckID(op, "id", r.ID), checkTime(op, "nextFireAt", r.NextFireAt), CheckInt(op, "version", r.Version)); err != nil {
		return err
	}
	if len(r.Spec) == 0 {
		return invalid(op, "spec", "empty")
	}
	if len(r.Spec) > MaxScheduleBytes {
		return invalid(op, "spec", "%d bytes, at most %d", len(r.Spec), MaxScheduleBytes)
	}
	if len(r.State) > MaxScheduleBytes {
		return invalid(op, "state", "%d bytes, at most %d", len(r.State), MaxScheduleBytes)
	}
	return nil
}

// CreateSchedule implements Schedules.
func (f *Front) CreateSchedule(ctx context.Context, r ScheduleRecord) (ScheduleRecord, error) {
	const op = "create_schedule"
	if err := first(done(ctx, op), checkSchedule(op, r)); err != nil {
		return ScheduleRecord{}, err
	}
	return f.b.CreateSchedule(ctx, r)
}

// GetSchedule implements Schedules.
func (f *Front) GetSchedule(ctx context.Context, id string) (ScheduleRecord, error) {
	const op = "get_schedule"
	if err := first(done(ctx, op), CheckID(op, "id", id)); err != nil {
		return ScheduleRecord{}, err
	}
	return f.b.GetSchedule(ctx, id)
}

// ListSchedules implements Schedules.
func (f *Front) ListSchedules(ctx context.Context, after string, limit int) ([]ScheduleRecord, error) {
	const op = "list_schedules"
	if err := first(done(ctx, op), checkOptionalID(op, "after", after)); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxListLimit {
		return nil, invalid(op, "limit", "%d outside [1, %d]", limit, MaxListLimit)
	}
	return f.b.ListSchedules(ctx, after, limit)
}

// UpdateSchedule implements Schedules.
func (f *Front) UpdateSchedule(ctx context.Context, r ScheduleRecord) (ScheduleRecord, error) {
	const op = "update_schedule"
	if err := first(done(ctx, op), checkSchedule(op, r)); err != nil {
		return ScheduleRecord{}, err
	}
	if r.Version == 0 {
		return ScheduleRecord{}, invalid(op, "version", "0: read the schedule first")
	}
	return f.b.UpdateSchedule(ctx, r)
}

// DeleteSchedule implements Schedules.
func (f *Front) DeleteSchedule(ctx context.Context, id string) error {
	const op = "delete_schedule"
	if err := first(done(ctx, op), CheckID(op, "id", id)); err != nil {
		return err
	}
	return f.b.DeleteSchedule(ctx, id)
}

// DueSchedules implements Schedules.
func (f *Front) DueSchedules(ctx context.Context, limit int) ([]ScheduleRecord, time.Time, error) {
	const op = "due_schedules"
	if err := done(ctx, op); err != nil {
		return nil, time.Time{}, err
	}
	if limit <= 0 || limit > MaxListLimit {
		return nil, time.Time{}, invalid(op, "limit", "%d outside [1, %d]", limit, MaxListLimit)
	}
	return f.b.DueSchedules(ctx, limit)
}

// NextScheduleDue implements Schedules.
func (f *Front) NextScheduleDue(ctx context.Context) (time.Time, time.Time, bool, error) {
	if err := done(ctx, "next_schedule_due"); err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	return f.b.NextScheduleDue(ctx)
}
