package memstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/orrery-run/orrery/store"
)

func cloneSchedule(r store.ScheduleRecord) store.ScheduleRecord {
	r.Spec = slices.Clone(r.Spec)
	r.State = slices.Clone(r.State)
	return r
}

// CreateSchedule implements store.Schedules.
func (s *backend) CreateSchedule(ctx context.Context, r store.ScheduleRecord) (store.ScheduleRecord, error) {
	const op = "create_schedule"
	if err := s.begin(ctx, op); err != nil {
		return store.ScheduleRecord{}, err
	}
	defer s.end()
	if _, ok := s.st.schedules[r.ID]; ok {
		return store.ScheduleRecord{}, store.Errorf(op, store.ErrScheduleExists, "", "schedule %s", r.ID)
	}
	now := s.now()
	r = cloneSchedule(r)
	r.Version, r.CreatedAt, r.UpdatedAt = store.FirstScheduleVersion(now), now, now
	s.st.schedules[r.ID] = r
	s.st.notify(store.TopicSchedules)
	return cloneSchedule(r), nil
}

// GetSchedule implements store.Schedules.
func (s *backend) GetSchedule(ctx context.Context, id string) (store.ScheduleRecord, error) {
	const op = "get_schedule"
	if err := s.begin(ctx, op); err != nil {
		return store.ScheduleRecord{}, err
	}
	defer s.end()
	r, ok := s.st.schedules[id]
	if !ok {
		return store.ScheduleRecord{}, store.Errorf(op, store.ErrNotFound, "", "schedule %s", id)
	}
	return cloneSchedule(r), nil
}

// ListSchedules implements store.Schedules.
func (s *backend) ListSchedules(ctx context.Context, after string, limit int) ([]store.ScheduleRecord, error) {
	if err := s.begin(ctx, "list_schedules"); err != nil {
		return nil, err
	}
	defer s.end()
	var out []store.ScheduleRecord
	for id, r := range s.st.schedules {
		if id > after {
			out = append(out, cloneSchedule(r))
		}
	}
	slices.SortFunc(out, func(a, b store.ScheduleRecord) int { return strings.Compare(a.ID, b.ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// UpdateSchedule implements store.Schedules.
func (s *backend) UpdateSchedule(ctx context.Context, r store.ScheduleRecord) (store.ScheduleRecord, error) {
	const op = "update_schedule"
	if err := s.begin(ctx, op); err != nil {
		return store.ScheduleRecord{}, err
	}
	defer s.end()
	cur, ok := s.st.schedules[r.ID]
	if !ok {
		return store.ScheduleRecord{}, store.Errorf(op, store.ErrNotFound, "", "schedule %s", r.ID)
	}
	if cur.Version != r.Version {
		return store.ScheduleRecord{}, store.Errorf(op, store.ErrScheduleConflict, "", "schedule %s is at version %d, not %d", r.ID, cur.Version, r.Version)
	}
	cur.Spec, cur.State, cur.Paused, cur.NextFireAt = slices.Clone(r.Spec), slices.Clone(r.State), r.Paused, r.NextFireAt
	cur.Version++
	cur.UpdatedAt = s.now()
	s.st.schedules[r.ID] = cur
	s.st.notify(store.TopicSchedules)
	return cloneSchedule(cur), nil
}

// DeleteSchedule implements store.Schedules.
func (s *backend) DeleteSchedule(ctx context.Context, id string) error {
	const op = "delete_schedule"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if _, ok := s.st.schedules[id]; !ok {
		return store.Errorf(op, store.ErrNotFound, "", "schedule %s", id)
	}
	delete(s.st.schedules, id)
	s.st.notify(store.TopicSchedules)
	return nil
}

// DueSchedules implements store.Schedules.
func (s *backend) DueSchedules(ctx context.Context, limit int) ([]store.ScheduleRecord, time.Time, error) {
	if err := s.begin(ctx, "due_schedules"); err != nil {
		return nil, time.Time{}, err
	}
	defer s.end()
	now := s.now()
	var out []store.ScheduleRecord
	for _, r := range s.st.schedules {
		if !r.NextFireAt.IsZero() && !r.NextFireAt.After(now) {
			out = append(out, cloneSchedule(r))
		}
	}
	slices.SortFunc(out, func(a, b store.ScheduleRecord) int {
		if c := a.NextFireAt.Compare(b.NextFireAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, now, nil
}

// NextScheduleDue implements store.Schedules.
func (s *backend) NextScheduleDue(ctx context.Context) (time.Time, time.Time, bool, error) {
	if err := s.begin(ctx, "next_schedule_due"); err != nil {
		return time.Time{}, time.Time{}, false, err
	}
	defer s.end()
	var at time.Time
	ok := false
	for _, r := range s.st.schedules {
		if !r.NextFireAt.IsZero() && (!ok || r.NextFireAt.Before(at)) {
			at, ok = r.NextFireAt, true
		}
	}
	return at, s.now(), ok, nil
}
