package schedule

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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
	if err := CheckID(id); err != nil {
		return Schedule{}, err
	}
	now, err := st.Now(ctx)
	if err != nil {
		return Schedule{}, err
	}
	var inc [12]byte
	if _, err := rand.Read(inc[:]); err != nil {
		return Schedule{}, err
	}
	sc := Schedule{ID: id, Spec: spec}
	sc.State.Incarnation = hex.EncodeToString(inc[:])
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
	return updateIf(ctx, st, id, func(sc *Schedule, cad cadence, now time.Time) bool {
		change(sc, cad, now)
		return true
	})
}

// updateIf is update whose change may decline (false): nothing is written
// and the schedule is answered as read.
func updateIf(ctx context.Context, st store.Store, id string, change func(sc *Schedule, cad cadence, now time.Time) bool) (Schedule, error) {
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
		if !change(&sc, cad, now) {
			return sc, nil
		}
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
// It is not idempotent: a caller that may repeat it uses TriggerKeyed.
func Trigger(ctx context.Context, st store.Store, id string) (Tick, Schedule, error) {
	tk, sc, _, err := TriggerKeyed(ctx, st, id, "")
	return tk, sc, err
}

// TriggerKeyed is Trigger made idempotent by the caller's key: the first
// trigger with a key records a tick, and a repeat (a client retrying after
// a lost answer) records nothing and answers the first's tick with dup
// true. The tick's key derives from the trigger's key and the schedule's
// incarnation, so even a repeat the schedule no longer remembers (past
// MaxTriggerKeys later triggers) starts the same run id or input key, and
// so nothing twice. An empty key is Trigger.
func TriggerKeyed(ctx context.Context, st store.Store, id, key string) (tk Tick, sc Schedule, dup bool, err error) {
	if key != "" {
		if err := store.CheckKey("trigger_schedule", "key", key); err != nil {
			return Tick{}, Schedule{}, false, invalidf("key: %v", err)
		}
	}
	sc, err = updateIf(ctx, st, id, func(sc *Schedule, _ cadence, now time.Time) bool {
		tk, dup = Tick{Key: "manual-" + tickName(now), Nominal: now.UTC(), Manual: true}, false
		if key != "" {
			digest := triggerDigest(*sc, key)
			for _, t := range sc.State.Triggers {
				if t.Key == digest {
					tk, dup = t.Tick, true
					return false
				}
			}
			tk.Key = "manual-" + digest
			sc.State.Triggers = append(sc.State.Triggers, Triggered{Key: digest, Tick: tk})
			if n := len(sc.State.Triggers); n > MaxTriggerKeys {
				sc.State.Triggers = append([]Triggered(nil), sc.State.Triggers[n-MaxTriggerKeys:]...)
			}
		}
		sc.State.Pending = append(sc.State.Pending, tk)
		if sc.Spec.Target.Workflow != "" {
			sc.State.LastRun = RunID(sc.ID, tk)
		}
		sc.NextFireAt = now
		return true
	})
	return tk, sc, dup, err
}

// triggerDigest is a keyed trigger's identity within its schedule: a
// fixed-size hex digest (so a tick key stays short and in the id alphabet
// whatever the caller's key) of the schedule's incarnation and the key.
// A schedule created before incarnations were recorded uses its creation
// time instead.
func triggerDigest(sc Schedule, key string) string {
	inc := sc.State.Incarnation
	if inc == "" {
		inc = sc.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	h := sha256.New()
	h.Write([]byte(inc))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:16])
}
