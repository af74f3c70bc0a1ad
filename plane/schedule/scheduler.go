package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
)

// Starter starts what a tick targets. Every call must be idempotent by its
// run id or dedupe key: a tick's start may be repeated (by another
// scheduler, or after a crash between recording the tick and starting it)
// and must take effect once.
type Starter interface {
	// StartRun starts run runID of workflow with input (canonical CBOR);
	// a run already started under that id is success.
	StartRun(ctx context.Context, workflow, runID string, input []byte) error
	// RunEnded reports whether run runID has ended (a run that does not
	// exist has).
	RunEnded(ctx context.Context, runID string) (bool, error)
	// SendEvent enqueues an event of typeName with value into world,
	// deduplicated by key.
	SendEvent(ctx context.Context, world, typeName string, value []byte, key string) error
}

// ErrPermanent marks a Starter error that no retry can cure (an unknown
// workflow or world, an input that does not fit): the tick is dropped and
// counted failed instead of retried.
var ErrPermanent = errors.New("schedule: permanent start failure")

// Permanent wraps err as ErrPermanent.
func Permanent(err error) error { return fmt.Errorf("%w: %w", ErrPermanent, err) }

// Config configures a scheduler.
type Config struct {
	Store    store.Store
	Starter  Starter
	Executor actor.Executor
	Logger   *slog.Logger // nil: discarded
	// Retry is how long a tick whose start failed (not permanently) waits
	// before the next try, and how often a buffered tick looks whether
	// the previous run ended (default 1s).
	Retry time.Duration
	// Observe, when set, is told of every tick decided: what is "fired",
	// "missed", "skipped" or "failed".
	Observe func(schedule, what string, t Tick)
}

const dueBatch = 100

// Run runs a scheduler until ctx is done (it returns ctx's error). Any
// number of schedulers may run on one store: each tick is recorded by one
// compare-and-swap of its schedule, and its start is idempotent, so a
// tick starts once however many race, and a scheduler that dies between
// recording and starting leaves the start to the next one.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Store == nil || cfg.Starter == nil || cfg.Executor == nil {
		return errors.New("schedule: Config needs a Store, a Starter and an Executor")
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &scheduler{cfg: cfg}
	ex := cfg.Executor
	wake := ex.NewParker()
	stop, err := cfg.Store.Watch(ctx, wake, store.TopicSchedules)
	if err != nil {
		return err
	}
	defer stop()
	for {
		wait := s.pass(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var timer actor.Timer
		if wait >= 0 {
			timer = ex.AfterFunc(wait, wake.Unpark)
		}
		err := wake.Park(ctx)
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return err
		}
	}
}

type scheduler struct{ cfg Config }

// pass handles every due schedule and returns how long to sleep (-1: until
// a hint). Waits are differences of two readings of the store's clock,
// slept on the local one.
func (s *scheduler) pass(ctx context.Context) time.Duration {
	st := s.cfg.Store
	for {
		due, now, err := st.DueSchedules(ctx, dueBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("schedule: reading due schedules", "err", err)
			}
			return s.cfg.Retry
		}
		for _, r := range due {
			if err := s.process(ctx, r, now); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("schedule: tick", "schedule", r.ID, "err", err)
			}
		}
		if len(due) < dueBatch {
			break
		}
	}
	at, now, ok, err := st.NextScheduleDue(ctx)
	switch {
	case err != nil:
		return s.cfg.Retry
	case !ok:
		return -1
	}
	return max(at.Sub(now), 0)
}

// process decides a due schedule's ticks and records them in one
// compare-and-swap, then starts them. A lost swap means another scheduler
// or an operator wrote the schedule first: the next pass reads it again.
func (s *scheduler) process(ctx context.Context, r store.ScheduleRecord, now time.Time) error {
	sc, err := decode(r)
	if err != nil {
		return err
	}
	cad, err := sc.Spec.Normalize()
	if err != nil {
		return err
	}
	if len(sc.State.Pending) == 0 {
		if err := s.decide(ctx, &sc, cad, now); err != nil {
			return err
		}
		if sc, err = s.write(ctx, sc); err != nil {
			return ignoreConflict(err)
		}
	}
	return s.complete(ctx, sc)
}

func ignoreConflict(err error) error {
	if errors.Is(err, store.ErrScheduleConflict) || errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

func (s *scheduler) write(ctx context.Context, sc Schedule) (Schedule, error) {
	rec, err := sc.record()
	if err != nil {
		return sc, err
	}
	out, err := s.cfg.Store.UpdateSchedule(ctx, rec)
	if err != nil {
		return sc, err
	}
	sc.Version, sc.UpdatedAt = out.Version, out.UpdatedAt
	return sc, nil
}

func (s *scheduler) observe(id, what string, t Tick) {
	if s.cfg.Observe != nil {
		s.cfg.Observe(id, what, t)
	}
}

// maxScan bounds how many missed ticks one pass walks (a one-second
// cadence down for a year has millions); past it, the ones in between are
// counted missed without being walked.
const maxScan = 10000

// decide records in sc (not yet written) what the cadence ticks due at now
// come to, by the catch-up and overlap policies, and the next fire time.
func (s *scheduler) decide(ctx context.Context, sc *Schedule, cad cadence, now time.Time) error {
	st := &sc.State
	if sc.Paused {
		sc.NextFireAt = time.Time{}
		return nil
	}
	var onTime, late []time.Time
	var skippedAhead uint64
	t := st.NextNominal
	for n := 0; !t.IsZero() && !sc.fireAt(t).After(now); n++ {
		if n == maxScan {
			// Jump to the cadence around now; what lies between is missed.
			skippedAhead++
			t = cad.Next(now.Add(-time.Duration(sc.Spec.Jitter)).Add(-OnTimeWindow))
			continue
		}
		if now.Sub(sc.fireAt(t)) <= OnTimeWindow {
			onTime = append(onTime, t)
		} else {
			late = append(late, t)
		}
		t = cad.Next(t)
	}
	fire := onTime
	missed := uint64(len(late)) + skippedAhead
	if len(late) > 0 {
		keep := 0
		switch sc.Spec.CatchUp {
		case CatchUpOnce:
			keep = 1
		case CatchUpAll:
			keep = sc.Spec.CatchUpLimit
		}
		keep = min(keep, len(late))
		missed -= uint64(keep)
		fire = append(late[len(late)-keep:], onTime...)
		for _, m := range late[:len(late)-keep] {
			s.observe(sc.ID, "missed", cadenceTick(m))
		}
	}
	st.Missed += missed
	if skippedAhead > 0 {
		s.observe(sc.ID, "missed", Tick{})
	}
	// The previous run's state, read once: ticks decided in this pass
	// start runs that are certainly still running.
	running := false
	if sc.Spec.Target.Workflow != "" && sc.Spec.Overlap != OverlapAllow && st.LastRun != "" {
		ended, err := s.cfg.Starter.RunEnded(ctx, st.LastRun)
		if err != nil {
			return err
		}
		running = !ended
	}
	if st.Buffered != nil && !running {
		s.admit(sc, *st.Buffered)
		st.Buffered = nil
		running = true
	}
	for _, n := range fire {
		tk := cadenceTick(n)
		st.LastTick = tk.Nominal
		switch {
		case !running || sc.Spec.Overlap == OverlapAllow:
			s.admit(sc, tk)
			running = sc.Spec.Target.Workflow != ""
		case sc.Spec.Overlap == OverlapBufferOne && st.Buffered == nil:
			b := tk
			st.Buffered = &b
		default:
			st.Skipped++
			st.LastResult = "skipped " + tk.Key + ": the previous run is still running"
			s.observe(sc.ID, "skipped", tk)
		}
	}
	if len(late) > 0 && len(fire) == 0 {
		st.LastTick = late[len(late)-1].UTC()
		st.LastResult = fmt.Sprintf("missed %d ticks (catch-up skip)", missed)
	}
	st.NextNominal = t
	sc.NextFireAt = sc.fireAt(t)
	switch {
	case len(st.Pending) > 0:
		sc.NextFireAt = now // any scheduler may complete them
	case st.Buffered != nil:
		if poll := now.Add(s.cfg.Retry); sc.NextFireAt.IsZero() || poll.Before(sc.NextFireAt) {
			sc.NextFireAt = poll
		}
	}
	return nil
}

// admit records tk as decided to start.
func (s *scheduler) admit(sc *Schedule, tk Tick) {
	sc.State.Pending = append(sc.State.Pending, tk)
	if sc.Spec.Target.Workflow != "" {
		sc.State.LastRun = RunID(sc.ID, tk)
	}
}

// complete starts sc's pending ticks, then records them started. A start
// that fails (not permanently) stays pending and is tried again after
// Retry.
func (s *scheduler) complete(ctx context.Context, sc Schedule) error {
	if len(sc.State.Pending) == 0 {
		return nil
	}
	type outcome struct {
		tk  Tick
		err error
	}
	var done []outcome
	var retryErr error
	for _, tk := range sc.State.Pending {
		err := s.start(ctx, sc, tk)
		if err != nil && !errors.Is(err, ErrPermanent) {
			retryErr = err
			break
		}
		done = append(done, outcome{tk, err})
	}
	if len(done) == 0 && retryErr == nil {
		return nil
	}
	for attempt := 0; attempt < 8; attempt++ {
		cur := sc
		cur.State.Pending = sc.State.Pending[len(done):]
		for _, o := range done {
			if o.err != nil {
				cur.State.Failed++
				cur.State.LastResult = "failed " + o.tk.Key + ": " + o.err.Error()
				s.observe(sc.ID, "failed", o.tk)
			} else {
				cur.State.Fired++
				cur.State.LastResult = "started " + o.tk.Key
				s.observe(sc.ID, "fired", o.tk)
			}
		}
		now, err := s.cfg.Store.Now(ctx)
		if err != nil {
			return err
		}
		if len(done) > 0 {
			cur.State.LastFiredAt = now
		}
		switch {
		case len(cur.State.Pending) > 0:
			cur.NextFireAt = now.Add(s.cfg.Retry)
		case cur.Paused:
			cur.NextFireAt = time.Time{}
		default:
			cur.NextFireAt = sc.fireAt(cur.State.NextNominal)
			if cur.State.Buffered != nil {
				if poll := now.Add(s.cfg.Retry); cur.NextFireAt.IsZero() || poll.Before(cur.NextFireAt) {
					cur.NextFireAt = poll
				}
			}
		}
		_, err = s.write(ctx, cur)
		if err == nil {
			return retryErr
		}
		if !errors.Is(err, store.ErrScheduleConflict) {
			return ignoreConflict(err)
		}
		// Someone else wrote meanwhile (an operator's pause, another
		// scheduler recording the same starts): read again and take out
		// what is still pending of ours.
		r, err := s.cfg.Store.GetSchedule(ctx, sc.ID)
		if err != nil {
			return ignoreConflict(err)
		}
		fresh, err := decode(r)
		if err != nil {
			return err
		}
		still := map[string]bool{}
		for _, tk := range fresh.State.Pending {
			still[tk.Key] = true
		}
		var ours []outcome
		for _, o := range done {
			if still[o.tk.Key] {
				ours = append(ours, o)
			}
		}
		if len(ours) == 0 || len(ours) != len(done) || len(fresh.State.Pending) < len(ours) || fresh.State.Pending[0].Key != ours[0].tk.Key {
			// Another scheduler recorded these starts (or some of them):
			// they happened once; its record stands.
			return retryErr
		}
		sc = fresh
	}
	return fmt.Errorf("schedule %s: recording the starts kept conflicting", sc.ID)
}

func (s *scheduler) start(ctx context.Context, sc Schedule, tk Tick) error {
	t := sc.Spec.Target
	if t.Workflow != "" {
		return s.cfg.Starter.StartRun(ctx, t.Workflow, RunID(sc.ID, tk), t.Input)
	}
	return s.cfg.Starter.SendEvent(ctx, t.World, t.Type, t.Value, DedupeKey(sc.ID, tk))
}
