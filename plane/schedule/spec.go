package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/orrery-run/orrery/store"
)

// Overlap says what a workflow schedule does when a tick comes while the
// run its previous tick started is still running.
type Overlap string

const (
	// OverlapSkip starts nothing for the tick (counted as skipped).
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne keeps one tick and starts it when the previous run
	// ends; a tick that finds one already kept is skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapAllow always starts a run.
	OverlapAllow Overlap = "allow"
)

// CatchUp says what a schedule does with ticks it missed (the scheduler
// was down, or every node was): ticks found more than OnTimeWindow past
// their fire time.
type CatchUp string

const (
	// CatchUpSkip fires none of the missed ticks: the schedule goes on
	// with its next tick.
	CatchUpSkip CatchUp = "skip"
	// CatchUpOnce fires one tick (the latest missed) for all of them.
	CatchUpOnce CatchUp = "once"
	// CatchUpAll fires the CatchUpLimit most recent missed ticks.
	CatchUpAll CatchUp = "all"
)

// OnTimeWindow is how late a tick may be found and still count as on time
// (fired whatever the catch-up policy). It is a constant, not a setting,
// so that every node decides a tick the same way.
const OnTimeWindow = time.Minute

// MaxCatchUpLimit bounds CatchUpLimit.
const MaxCatchUpLimit = 1000

// Duration is a time.Duration written in JSON as Go writes it ("90s").
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string ("1h30m").
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"90s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Spec is what a schedule does and when.
type Spec struct {
	// Cron is a cron expression: five fields (minute hour day-of-month
	// month day-of-week), an optional leading seconds field, or a
	// descriptor (@yearly, @monthly, @weekly, @daily, @hourly). Exactly
	// one of Cron and Every.
	Cron string `json:"cron,omitempty"`
	// Every is a fixed interval; its ticks are the instants
	// Unix epoch + Offset + k·Every, so every node computes the same ones.
	Every  Duration `json:"every,omitempty"`
	Offset Duration `json:"offset,omitempty"`
	// TimeZone is the IANA zone Cron is read in (default UTC); daylight
	// saving is the zone's: a time that does not exist is skipped and one
	// that happens twice fires once.
	TimeZone string `json:"time_zone,omitempty"`
	// Jitter delays each tick by an offset in [0, Jitter) derived from the
	// schedule id and the tick's nominal time, the same on every node.
	Jitter       Duration `json:"jitter,omitempty"`
	Overlap      Overlap  `json:"overlap,omitempty"`  // default skip
	CatchUp      CatchUp  `json:"catch_up,omitempty"` // default once
	CatchUpLimit int      `json:"catch_up_limit,omitempty"`
	Target       Target   `json:"target"`
}

// Target is what a tick starts: a workflow run or a world input.
type Target struct {
	// Workflow names a registered workflow; Input is its input as
	// canonical CBOR. Each tick's run id is RunID(schedule, tick).
	Workflow string `json:"workflow,omitempty"`
	Input    []byte `json:"input,omitempty"`
	// World receives an event of type Type with Value (canonical CBOR),
	// keyed DedupeKey(schedule, tick).
	World string `json:"world,omitempty"`
	Type  string `json:"type,omitempty"`
	Value []byte `json:"value,omitempty"`
}

// ErrInvalid: a spec, an id or an argument that cannot be used.
var ErrInvalid = errors.New("schedule: invalid")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cadence is a spec's nominal ticks.
type cadence interface {
	// Next is the first tick strictly after t (zero: none).
	Next(t time.Time) time.Time
}

type every struct{ d, off time.Duration }

func (e every) Next(t time.Time) time.Time {
	base := time.Unix(0, 0).UTC().Add(e.off)
	if t.Before(base) {
		return base
	}
	k := t.Sub(base) / e.d
	for n := base.Add(k * e.d); ; n = n.Add(e.d) {
		if n.After(t) {
			return n.UTC()
		}
	}
}

type zoned struct{ s cron.Schedule }

func (z zoned) Next(t time.Time) time.Time {
	n := z.s.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Normalize fills the defaults and checks s, returning its cadence.
func (s *Spec) Normalize() (cadence, error) {
	if s.Overlap == "" {
		s.Overlap = OverlapSkip
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpOnce
	}
	switch s.Overlap {
	case OverlapSkip, OverlapBufferOne, OverlapAllow:
	default:
		return nil, invalidf("overlap %q: one of skip, buffer_one, allow", s.Overlap)
	}
	switch s.CatchUp {
	case CatchUpSkip, CatchUpOnce:
		if s.CatchUpLimit != 0 {
			return nil, invalidf("catch_up_limit is for catch_up all")
		}
	case CatchUpAll:
		if s.CatchUpLimit < 1 || s.CatchUpLimit > MaxCatchUpLimit {
			return nil, invalidf("catch_up all needs catch_up_limit in [1, %d]", MaxCatchUpLimit)
		}
	default:
		return nil, invalidf("catch_up %q: one of skip, once, all", s.CatchUp)
	}
	if s.Jitter < 0 {
		return nil, invalidf("jitter must not be negative")
	}
	t := s.Target
	switch {
	case t.Workflow != "" && t.World == "" && t.Type == "" && len(t.Value) == 0:
	case t.World != "" && t.Type != "" && t.Workflow == "" && len(t.Input) == 0:
		if s.Overlap != OverlapSkip && s.Overlap != OverlapAllow {
			return nil, invalidf("overlap is for workflow targets")
		}
		s.Overlap = OverlapAllow
	default:
		return nil, invalidf("a target is a workflow (workflow, input) or a world input (world, type, value)")
	}
	if (s.Cron == "") == (s.Every == 0) {
		return nil, invalidf("give exactly one of cron and every")
	}
	if s.Every != 0 {
		if s.Every < Duration(time.Second) {
			return nil, invalidf("every must be at least 1s")
		}
		if s.Offset < 0 || s.Offset >= s.Every {
			return nil, invalidf("offset must be in [0, every)")
		}
		if s.TimeZone != "" {
			return nil, invalidf("time_zone is for cron schedules")
		}
		if s.Jitter >= s.Every {
			return nil, invalidf("jitter must be shorter than every")
		}
		return every{time.Duration(s.Every), time.Duration(s.Offset)}, nil
	}
	if s.Offset != 0 {
		return nil, invalidf("offset is for every schedules")
	}
	if strings.HasPrefix(s.Cron, "TZ=") || strings.HasPrefix(s.Cron, "CRON_TZ=") {
		return nil, invalidf("give the zone as time_zone, not in the expression")
	}
	if strings.HasPrefix(s.Cron, "@every") {
		return nil, invalidf("@every: use every")
	}
	loc := time.UTC
	if s.TimeZone != "" {
		var err error
		if loc, err = time.LoadLocation(s.TimeZone); err != nil || s.TimeZone == "Local" {
			return nil, invalidf("time_zone %q is not an IANA zone name", s.TimeZone)
		}
	}
	cs, err := parseCron(s.Cron)
	if err != nil {
		return nil, invalidf("cron %q: %v", s.Cron, err)
	}
	spec, ok := cs.(*cron.SpecSchedule)
	if !ok {
		return nil, invalidf("cron %q is not a calendar schedule", s.Cron)
	}
	spec.Location = loc
	return zoned{spec}, nil
}

// parseCron parses with the library, which panics on a few malformed
// inputs: those are invalid too.
func parseCron(expr string) (s cron.Schedule, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("malformed: %v", p)
		}
	}()
	return parser.Parse(expr)
}

// JitterOf is the delay of the tick at nominal time of schedule id: a hash
// of both, so every node computes the same one.
func JitterOf(id string, nominal time.Time, jitter time.Duration) time.Duration {
	if jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	var b [8]byte
	n := uint64(nominal.UnixNano())
	for i := range b {
		b[i] = byte(n >> (8 * i))
	}
	h.Write(b[:])
	return time.Duration(h.Sum64() % uint64(jitter))
}

// tickName is a tick's nominal time as it appears in run ids and keys.
func tickName(nominal time.Time) string {
	return nominal.UTC().Format("20060102T150405.000000000Z")
}

// RunID is the run a workflow schedule's tick starts: the same on every
// node, so a start repeated by another scheduler is the same run. It is in
// the schedules' namespace (store.ScheduleRunPrefix), which only the
// scheduler's start may use, so no other start can take a tick's id. A
// schedule id has neither '.' nor ':' (CheckID), so the schedule and the
// tick are read back unambiguously: schedule "a.b" cannot exist to
// collide with schedule "a".
func RunID(schedule string, t Tick) string {
	return store.ScheduleRunPrefix + schedule + "." + t.Key
}

// DedupeKey is the inbox key of a world schedule's tick, in the
// schedules' namespace (store.ScheduleKeyPrefix) that no other producer's
// input may use.
func DedupeKey(schedule string, t Tick) string {
	return store.ScheduleKeyPrefix + schedule + ":" + t.Key
}

// MaxIDBytes bounds a schedule id, so that its longest run id (the prefix,
// the id, a dot and a tick key) stays within a run id's bound.
const MaxIDBytes = 128

// CheckID checks a new schedule's id: 1 to MaxIDBytes of ASCII letters,
// digits, '-' and '_'. The separators of run ids and keys ('.' and ':')
// are excluded so that a schedule's ticks are never another's.
func CheckID(id string) error {
	if id == "" || len(id) > MaxIDBytes {
		return invalidf("id: 1 to %d bytes, got %d", MaxIDBytes, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return invalidf("id %q: letters, digits, '-' and '_' only", id)
		}
	}
	return nil
}
