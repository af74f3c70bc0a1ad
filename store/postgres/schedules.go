package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
)

const scheduleCols = `id, spec, state, paused, next_fire_at_ns, version, created_at_ns, updated_at_ns`

func scanSchedule(row pgx.Row) (store.ScheduleRecord, error) {
	var r store.ScheduleRecord
	var next *int64
	var version, created, updated int64
	if err := row.Scan(&r.ID, &r.Spec, &r.State, &r.Paused, &next, &version, &created, &updated); err != nil {
		return r, err
	}
	if next != nil {
		r.NextFireAt = fromNS(*next)
	}
	r.Version, r.CreatedAt, r.UpdatedAt = uint64(version), fromNS(created), fromNS(updated)
	return r, nil
}

func nullNS(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ns := t.UnixNano()
	return &ns
}

// scheduled hints a schedule change to this process's watchers and, through
// the database, to every other's.
func (s *backend) scheduled(ctx context.Context) {
	s.hint(store.TopicSchedules)
	_, _ = s.db.Exec(ctx, `SELECT notify_topic('schedules')`)
}

// CreateSchedule implements store.Schedules.
func (s *backend) CreateSchedule(ctx context.Context, r store.ScheduleRecord) (store.ScheduleRecord, error) {
	const op = "create_schedule"
	if err := s.begin(op); err != nil {
		return store.ScheduleRecord{}, err
	}
	var out store.ScheduleRecord
	err := s.retry(ctx, op, "", func() error {
		var err error
		out, err = scanSchedule(s.db.QueryRow(ctx, `INSERT INTO schedules (`+scheduleCols+`)
			VALUES ($1, $2, $3, $4, $5, greatest(now_ns($6), 1), now_ns($6), now_ns($6)) ON CONFLICT (id) DO NOTHING RETURNING `+scheduleCols,
			r.ID, r.Spec, r.State, r.Paused, nullNS(r.NextFireAt), s.off()))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Errorf(op, store.ErrScheduleExists, "", "schedule %s", r.ID)
		}
		return err
	})
	if err == nil {
		s.scheduled(ctx)
	}
	return out, err
}

// GetSchedule implements store.Schedules.
func (s *backend) GetSchedule(ctx context.Context, id string) (store.ScheduleRecord, error) {
	const op = "get_schedule"
	if err := s.begin(op); err != nil {
		return store.ScheduleRecord{}, err
	}
	var out store.ScheduleRecord
	err := s.retry(ctx, op, "", func() error {
		var err error
		out, err = scanSchedule(s.db.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Errorf(op, store.ErrNotFound, "", "schedule %s", id)
		}
		return err
	})
	return out, err
}

func (s *backend) listSchedules(ctx context.Context, op, query string, args ...any) ([]store.ScheduleRecord, error) {
	var out []store.ScheduleRecord
	err := s.retry(ctx, op, "", func() error {
		out = out[:0]
		rows, err := s.db.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanSchedule(rows)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// ListSchedules implements store.Schedules.
func (s *backend) ListSchedules(ctx context.Context, after string, limit int) ([]store.ScheduleRecord, error) {
	const op = "list_schedules"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	return s.listSchedules(ctx, op, `SELECT `+scheduleCols+` FROM schedules WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
}

// UpdateSchedule implements store.Schedules: the compare is the
// statement's WHERE, so two writers that read one version cannot both pass.
func (s *backend) UpdateSchedule(ctx context.Context, r store.ScheduleRecord) (store.ScheduleRecord, error) {
	const op = "update_schedule"
	if err := s.begin(op); err != nil {
		return store.ScheduleRecord{}, err
	}
	var out store.ScheduleRecord
	err := s.retry(ctx, op, "", func() error {
		var err error
		out, err = scanSchedule(s.db.QueryRow(ctx, `UPDATE schedules SET spec = $3, state = $4, paused = $5, next_fire_at_ns = $6,
			version = version + 1, updated_at_ns = now_ns($7) WHERE id = $1 AND version = $2 RETURNING `+scheduleCols,
			r.ID, int64(r.Version), r.Spec, r.State, r.Paused, nullNS(r.NextFireAt), s.off()))
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var v int64
		if err := s.db.QueryRow(ctx, `SELECT version FROM schedules WHERE id = $1`, r.ID).Scan(&v); errors.Is(err, pgx.ErrNoRows) {
			return store.Errorf(op, store.ErrNotFound, "", "schedule %s", r.ID)
		} else if err != nil {
			return err
		}
		return store.Errorf(op, store.ErrScheduleConflict, "", "schedule %s is at version %d, not %d", r.ID, v, r.Version)
	})
	if err == nil {
		s.scheduled(ctx)
	}
	return out, err
}

// DeleteSchedule implements store.Schedules.
func (s *backend) DeleteSchedule(ctx context.Context, id string) error {
	const op = "delete_schedule"
	if err := s.begin(op); err != nil {
		return err
	}
	err := s.retry(ctx, op, "", func() error {
		tag, err := s.db.Exec(ctx, `DELETE FROM schedules WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.Errorf(op, store.ErrNotFound, "", "schedule %s", id)
		}
		return nil
	})
	if err == nil {
		s.scheduled(ctx)
	}
	return err
}

// DueSchedules implements store.Schedules. The due test is against the
// database server's clock, read first and returned with the rows.
func (s *backend) DueSchedules(ctx context.Context, limit int) ([]store.ScheduleRecord, time.Time, error) {
	const op = "due_schedules"
	if err := s.begin(op); err != nil {
		return nil, time.Time{}, err
	}
	var now int64
	if err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT now_ns($1)`, s.off()).Scan(&now)
	}); err != nil {
		return nil, time.Time{}, err
	}
	out, err := s.listSchedules(ctx, op, `SELECT `+scheduleCols+` FROM schedules
		WHERE next_fire_at_ns IS NOT NULL AND next_fire_at_ns <= $1 ORDER BY next_fire_at_ns, id LIMIT $2`, now, limit)
	return out, fromNS(now), err
}

// NextScheduleDue implements store.Schedules.
func (s *backend) NextScheduleDue(ctx context.Context) (time.Time, time.Time, bool, error) {
	const op = "next_schedule_due"
	if err := s.begin(op); err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	var at *int64
	var now int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT min(next_fire_at_ns), now_ns($1) FROM schedules`, s.off()).Scan(&at, &now)
	})
	if err != nil || at == nil {
		return time.Time{}, fromNS(now), false, err
	}
	return fromNS(*at), fromNS(now), true, nil
}
