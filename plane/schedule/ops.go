package schedule

import (
	"context"
	"errors"
	"time"

	"github.com/orrery-run/orrery/store"
)

// The operator's side: every change is a compare-and-swap of the schedule,
// retried on a conflict with a scheduler, so an operator's pause never
// erases a tick a scheduler recorded meanwhile, and the reverse.

// Create stores a new schedule, active, its first tick the first of its
// cadence after the store's now.
func Create(ctx context.Context, st store.Store, id string, spec Spec) (Schedule, error) {
	cad, err := spec.Normalize()
	if err != nil {
		return Schedule{}, err
	}
	if err := store.CheckID("create_schedule", "id", id); err != nil {
		return Schedule{}, invalidf("id: %v", err)
	}
	now, err := st.Now(ctx)
	if err != nil {
		return Schedule{}, err
	}
	sc := Schedule{ID: id, Spec: spec}
	sc.State.NextNominal = cad.Next(now)
	sc.NextFireAt = sc.fireAt(sc.State.NextNominal)
	rec, err := sc.record()
	if err != nil {
		return Schedule{}, err
	}
	out, err := st.CreateSchedule(ctx, rec)
	if err != nil {
		return Schedule{}, err
	}
	return decode(out)
}

// Get reads one schedule (store.ErrNotFound if none).
func Get(ctx context.Context, st store.Store, id string) (Schedule, error) {
	r, err := st.GetSchedule(ctx, id)
	if err != nil {
		return Schedule{}, err
	}
	return decode(r)
}

// List reads up to limit schedules after the id after, by id.
func List(ctx context.Context, st store.Store, after string, limit int) ([]Schedule, error) {
	rs, err := st.ListSchedules(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(rs))
	for _, r := range rs {
		sc, err := decode(r)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// Delete removes a schedule: no tick fires after it returns (a scheduler
// that recorded one before may still be starting it).
func Delete(ctx context.Context, st store.Store, id string) error { return st.DeleteSchedule(ctx, id) }

// update applies change to the schedule as read, with the store's now,
// until its swap wins.
func update(ctx context.Context, st store.Store, id string, change func(sc *Schedule, cad cadence, now time.Time)) (Schedule, error) {
	for {
		r, err := st.GetSchedule(ctx, id)
		if err != nil {
			return Schedule{}, err
		}
		sc, err := decode(r)
		if err != nil {
			return Schedule{}, err
		}
		cad, err := sc.Spec.Normalize()
		if err != nil {
			return Schedule{}, err
		}
		now, err := st.Now(ctx)
		if err != nil {
			return Schedule{}, err
		}
		change(&sc, cad, now)
		rec, err := sc.record()
		if err != nil {
			return Schedule{}, err
		}
		out, err := st.UpdateSchedule(ctx, rec)
		if errors.Is(err, store.ErrScheduleConflict) {
			continue
		}
		if err != nil {
			return Schedule{}, err
		}
		return decode(out)
	}
}

// Pause stops a schedule's ticks (ticks already recorded still start).
func Pause(ctx context.Context, st store.Store, id string) (Schedule, error) {
	return update(ctx, st, id, func(sc *Schedule, _ cadence, now time.Time) {
		sc.Paused = true
		sc.NextFireAt = time.Time{}
		if len(sc.State.Pending) > 0 {
			sc.NextFireAt = now
		}
	})
}

// Resume restarts a paused schedule at the first tick of its cadence
// after now: ticks that fell in the pause are not caught up.
func Resume(ctx context.Context, st store.Store, id string) (Schedule, error) {
	return update(ctx, st, id, func(sc *Schedule, cad cadence, now time.Time) {
		if !sc.Paused {
			return
		}
		sc.Paused = false
		sc.State.NextNominal = cad.Next(now)
		sc.NextFireAt = sc.fireAt(sc.State.NextNominal)
		if len(sc.State.Pending) > 0 {
			sc.NextFireAt = now
		}
	})
}

// Trigger records a tick now, keyed by the store's now ("manual-…"), to
// start at once whatever the overlap policy; the cadence is unchanged.
func Trigger(ctx context.Context, st store.Store, id string) (Tick, Schedule, error) {
	var tk Tick
	sc, err := update(ctx, st, id, func(sc *Schedule, _ cadence, now time.Time) {
		tk = Tick{Key: "manual-" + tickName(now), Nominal: now.UTC(), Manual: true}
		sc.State.Pending = append(sc.State.Pending, tk)
		if sc.Spec.Target.Workflow != "" {
			sc.State.LastRun = RunID(sc.ID, tk)
		}
		sc.NextFireAt = now
	})
	return tk, sc, err
}
