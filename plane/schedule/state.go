package schedule

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Tick is one firing of a schedule: a cadence tick at its nominal time, or
// an operator's trigger. Key identifies it (its run id and dedupe key are
// derived from it), so a tick is started at most once however often a
// scheduler tries.
type Tick struct {
	Key     string    `json:"key"`
	Nominal time.Time `json:"nominal"`
	Manual  bool      `json:"manual,omitempty"`
}

func cadenceTick(nominal time.Time) Tick { return Tick{Key: tickName(nominal), Nominal: nominal.UTC()} }

// State is a schedule's durable progress.
type State struct {
	// NextNominal is the next cadence tick not yet recorded (zero: none
	// left).
	NextNominal time.Time `json:"next_nominal"`
	// LastTick is the nominal time of the last cadence tick recorded.
	LastTick time.Time `json:"last_tick,omitzero"`
	// Pending are ticks recorded (decided to start) whose start is not
	// yet confirmed: any scheduler completes them, idempotently.
	Pending []Tick `json:"pending,omitempty"`
	// Buffered is buffer_one's tick, waiting for LastRun to end.
	Buffered *Tick `json:"buffered,omitempty"`
	// LastRun is the run of the latest started workflow tick.
	LastRun string `json:"last_run,omitempty"`
	// Counters, cluster-wide.
	Fired   uint64 `json:"fired"`
	Missed  uint64 `json:"missed"`
	Skipped uint64 `json:"skipped"`
	Failed  uint64 `json:"failed"`
	// LastResult says what the last tick did ("started sched.x.y",
	// "skipped: …", "failed: …"), LastFiredAt when (the store's clock).
	LastResult  string    `json:"last_result,omitempty"`
	LastFiredAt time.Time `json:"last_fired_at,omitzero"`
	// Incarnation tells this schedule from an earlier one deleted and
	// created again under its id: keyed triggers' ticks derive from it,
	// so a new schedule's trigger never dedupes against an old one's run.
	Incarnation string `json:"incarnation,omitempty"`
	// Triggers are the latest keyed triggers (at most MaxTriggerKeys,
	// oldest first): a trigger repeated with one of their keys answers
	// the tick it recorded and records nothing.
	Triggers []Triggered `json:"triggers,omitempty"`
}

// Triggered is a keyed trigger remembered: the digest of its key (never
// the key, whose size is the caller's) and the tick it recorded.
type Triggered struct {
	Key  string `json:"key"`
	Tick Tick   `json:"tick"`
}

// MaxTriggerKeys is how many keyed triggers a schedule remembers. A retry
// of an older one records its tick again, but under the same tick key, so
// its start still dedupes against the first (the run id or the input's
// key): nothing starts twice, only the counters see it twice.
const MaxTriggerKeys = 64

// Schedule is a schedule as read from the store.
type Schedule struct {
	ID         string
	Spec       Spec
	State      State
	Paused     bool
	NextFireAt time.Time // zero: nothing due (paused, or no tick left)
	Version    uint64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

func decode(r store.ScheduleRecord) (Schedule, error) {
	s := Schedule{ID: r.ID, Paused: r.Paused, NextFireAt: r.NextFireAt, Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if err := json.Unmarshal(r.Spec, &s.Spec); err != nil {
		return s, fmt.Errorf("schedule %s: spec: %w", r.ID, err)
	}
	if len(r.State) > 0 {
		if err := json.Unmarshal(r.State, &s.State); err != nil {
			return s, fmt.Errorf("schedule %s: state: %w", r.ID, err)
		}
	}
	return s, nil
}

func (s Schedule) record() (store.ScheduleRecord, error) {
	spec, err := json.Marshal(s.Spec)
	if err != nil {
		return store.ScheduleRecord{}, err
	}
	st, err := json.Marshal(s.State)
	if err != nil {
		return store.ScheduleRecord{}, err
	}
	return store.ScheduleRecord{ID: s.ID, Spec: spec, State: st, Paused: s.Paused, NextFireAt: s.NextFireAt, Version: s.Version}, nil
}

// fireAt is when a cadence tick at nominal fires.
func (s Schedule) fireAt(nominal time.Time) time.Time {
	if nominal.IsZero() {
		return nominal
	}
	return nominal.Add(JitterOf(s.ID, nominal, time.Duration(s.Spec.Jitter)))
}

// NextFireTimes are the fire times (jitter included) of the next n
// cadence ticks not yet recorded.
func (s Schedule) NextFireTimes(n int) []time.Time {
	out := []time.Time{}
	cad, err := s.Spec.Normalize()
	if err != nil {
		return out
	}
	for t := s.State.NextNominal; !t.IsZero() && len(out) < n; t = cad.Next(t) {
		out = append(out, s.fireAt(t))
	}
	return out
}
