package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/orrery-run/orrery/store"
)

const scheduleCols = `id, spec, state, paused, next_fire_at, version, created_at, updated_at`

func scanSchedule(sc scanner) (store.ScheduleRecord, error) {
	var r store.ScheduleRecord
	var next sql.NullInt64
	var version, created, updated int64
	if err := sc.Scan(&r.ID, &r.Spec, &r.State, &r.Paused, &next, &version, &created, &updated); err != nil {
		return r, err
	}
	r.NextFireAt, r.Version, r.CreatedAt, r.UpdatedAt = fromNullNS(next), uint64(version), fromNS(created), fromNS(updated)
	return r, nil
}

func (t *wtx) scheduleRow(id string) (store.ScheduleRecord, bool, error) {
	row, err := t.row(`SELECT `+scheduleCols+` FROM schedules WHERE id = ?`, id)
	if err != nil {
		return store.ScheduleRecord{}, false, err
	}
	r, err := scanSchedule(row)
	if err == sql.ErrNoRows {
		return r, false, nil
	}
	return r, err == nil, err
}

// CreateSchedule implements store.Schedules.
func (s *backend) CreateSchedule(ctx context.Context, r store.ScheduleRecord) (store.ScheduleRecord, error) {
	const op = "create_schedule"
	var out store.ScheduleRecord
	err := s.write(ctx, op, "", func(t *wtx) error {
		if _, found, err := t.scheduleRow(r.ID); err != nil {
			return err
		} else if found {
			return store.Errorf(op, store.ErrScheduleExists, "", "schedule %s", r.ID)
		}
		if _, err := t.exec(`INSERT INTO schedules (`+scheduleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Spec, r.State, r.Paused, nullNS(r.NextFireAt), int64(store.FirstScheduleVersion(fromNS(t.nowNS))), t.nowNS, t.nowNS); err != nil {
			return err
		}
		t.notify(store.TopicSchedules)
		out = r
		out.Version, out.CreatedAt, out.UpdatedAt = store.FirstScheduleVersion(fromNS(t.nowNS)), fromNS(t.nowNS), fromNS(t.nowNS)
		out.NextFireAt = normNS(r.NextFireAt)
		return nil
	})
	return out, dbErr(op, "", err)
}

// normNS is t as it reads back.
func normNS(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return fromNS(t.UnixNano())
}

// GetSchedule implements store.Schedules.
func (s *backend) GetSchedule(ctx context.Context, id string) (store.ScheduleRecord, error) {
	const op = "get_schedule"
	if err := s.read(ctx, op); err != nil {
		return store.ScheduleRecord{}, err
	}
	rows, err := s.query(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE id = ?`, id)
	if err != nil {
		return store.ScheduleRecord{}, dbErr(op, "", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return store.ScheduleRecord{}, dbErr(op, "", err)
		}
		return store.ScheduleRecord{}, store.Errorf(op, store.ErrNotFound, "", "schedule %s", id)
	}
	r, err := scanSchedule(rows)
	return r, dbErr(op, "", err)
}

func (s *backend) listSchedules(ctx context.Context, op, query string, args ...any) ([]store.ScheduleRecord, error) {
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	var out []store.ScheduleRecord
	for rows.Next() {
		r, err := scanSchedule(rows)
		if err != nil {
			return nil, dbErr(op, "", err)
		}
		out = append(out, r)
	}
	return out, dbErr(op, "", rows.Err())
}

// ListSchedules implements store.Schedules.
func (s *backend) ListSchedules(ctx context.Context, after string, limit int) ([]store.ScheduleRecord, error) {
	return s.listSchedules(ctx, "list_schedules", `SELECT `+scheduleCols+` FROM schedules WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
}

// UpdateSchedule implements store.Schedules.
func (s *backend) UpdateSchedule(ctx context.Context, r store.ScheduleRecord) (store.ScheduleRecord, error) {
	const op = "update_schedule"
	var out store.ScheduleRecord
	err := s.write(ctx, op, "", func(t *wtx) error {
		cur, found, err := t.scheduleRow(r.ID)
		switch {
		case err != nil:
			return err
		case !found:
			return store.Errorf(op, store.ErrNotFound, "", "schedule %s", r.ID)
		case cur.Version != r.Version:
			return store.Errorf(op, store.ErrScheduleConflict, "", "schedule %s is at version %d, not %d", r.ID, cur.Version, r.Version)
		}
		if _, err := t.exec(`UPDATE schedules SET spec = ?, state = ?, paused = ?, next_fire_at = ?, version = version + 1, updated_at = ?
			WHERE id = ?`, r.Spec, r.State, r.Paused, nullNS(r.NextFireAt), t.nowNS, r.ID); err != nil {
			return err
		}
		t.notify(store.TopicSchedules)
		out = r
		out.Version, out.CreatedAt, out.UpdatedAt = cur.Version+1, cur.CreatedAt, fromNS(t.nowNS)
		out.NextFireAt = normNS(r.NextFireAt)
		return nil
	})
	return out, dbErr(op, "", err)
}

// DeleteSchedule implements store.Schedules.
func (s *backend) DeleteSchedule(ctx context.Context, id string) error {
	const op = "delete_schedule"
	return dbErr(op, "", s.write(ctx, op, "", func(t *wtx) error {
		res, err := t.exec(`DELETE FROM schedules WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.Errorf(op, store.ErrNotFound, "", "schedule %s", id)
		}
		t.notify(store.TopicSchedules)
		return nil
	}))
}

// DueSchedules implements store.Schedules.
func (s *backend) DueSchedules(ctx context.Context, limit int) ([]store.ScheduleRecord, time.Time, error) {
	now := s.cfg.clock().Round(0)
	out, err := s.listSchedules(ctx, "due_schedules", `SELECT `+scheduleCols+` FROM schedules
		WHERE next_fire_at IS NOT NULL AND next_fire_at <= ? ORDER BY next_fire_at, id LIMIT ?`, now.UnixNano(), limit)
	return out, now, err
}

// NextScheduleDue implements store.Schedules.
func (s *backend) NextScheduleDue(ctx context.Context) (time.Time, time.Time, bool, error) {
	const op = "next_schedule_due"
	if err := s.read(ctx, op); err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	var at sql.NullInt64
	if _, err := s.queryRow(ctx, `SELECT MIN(next_fire_at) FROM schedules`, nil, &at); err != nil {
		return time.Time{}, time.Time{}, false, dbErr(op, "", err)
	}
	now := s.cfg.clock().Round(0)
	if !at.Valid {
		return time.Time{}, now, false, nil
	}
	return fromNS(at.Int64), now, true, nil
}
