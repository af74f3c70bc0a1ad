// Package reaper runs the plane's housekeeping jobs on schedules derived
// from the durations they serve: the orphan reaper (store.ReapOrphans),
// which requeues at once the claims of a process the store knows dead (its
// heartbeats stopped, it retired, a restart superseded it); the effect and
// timer reapers, which requeue expired claims (store.ReapEffects,
// store.ReapTimers) so that the work of a claimant that rode on no
// heartbeat, or of a paused one, is claimed again; and the dedupe
// sweeper (store.SweepDedupe), which forgets completed dedupe records once
// their retention has passed.
//
// A claim can only expire ClaimTTL after it was made, so reaping every
// half TTL bounds the delay an expired claim adds to its work to 1.5 TTL;
// a dedupe record lives its retention, so sweeping every eighth of it
// (between a minute and an hour) bounds its overstay to that.
//
// What it never does: decide anything about the work it requeues (the
// store does), read the machine's clock, sleep or start goroutines outside
// the actor.Executor it is given. Run runs on the caller's goroutine.
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// Job is one periodic housekeeping call.
type Job struct {
	Name  string
	Every time.Duration
	Do    func(ctx context.Context) (int, error)
}

// Effects is the effect reaper for claims of claimTTL.
func Effects(st interface {
	ReapEffects(ctx context.Context) (int, error)
}, claimTTL time.Duration) Job {
	return Job{Name: "reap_effects", Every: halfTTL(claimTTL), Do: st.ReapEffects}
}

// Timers is the timer reaper for claims of claimTTL.
func Timers(st interface {
	ReapTimers(ctx context.Context) (int, error)
}, claimTTL time.Duration) Job {
	return Job{Name: "reap_timers", Every: halfTTL(claimTTL), Do: st.ReapTimers}
}

// Orphans is the orphan reaper (store.ReapOrphans) for workers whose
// heartbeats promise liveness for aliveTTL (store.AliveAs): it requeues
// the claims of the incarnations the store knows dead. It runs every
// twentieth of the promise, clamped to [10ms, 1s], so a dead process's
// work is claimable again at most that long after its promise ran out,
// which is itself at most aliveTTL after its death: the store decides who
// is dead on its own clock, and a query that finds no one dead writes
// nothing.
func Orphans(st interface {
	ReapOrphans(ctx context.Context) (int, error)
}, aliveTTL time.Duration) Job {
	return Job{Name: "reap_orphans", Every: OrphanPeriod(aliveTTL), Do: st.ReapOrphans}
}

// OrphanPeriod is the orphan reaper's period for a liveness promise of
// aliveTTL.
func OrphanPeriod(aliveTTL time.Duration) time.Duration {
	return min(max(aliveTTL/20, 10*time.Millisecond), time.Second)
}

// Dedupe is the dedupe sweeper, every eighth of the store's retention,
// clamped to [1m, 1h].
func Dedupe(st interface {
	SweepDedupe(ctx context.Context) (int, error)
	DedupeRetention() time.Duration
}) Job {
	every := min(max(st.DedupeRetention()/8, time.Minute), time.Hour)
	return Job{Name: "sweep_dedupe", Every: every, Do: st.SweepDedupe}
}

func halfTTL(ttl time.Duration) time.Duration { return max(ttl/2, time.Millisecond) }

// Config configures Run.
type Config struct {
	Executor actor.Executor // required
	Logger   *slog.Logger   // nil: discarded
	// Observe, when set, is called after every job run with what it did.
	Observe func(job string, n int, err error)
}

// ErrNoJobs is returned by Run without jobs.
var ErrNoJobs = errors.New("reaper: no jobs")

// Run runs each job every its period, the first time one period after the
// start, until ctx is done (it returns ctx's error). A job that fails is
// logged and runs again at its next period. Jobs due at the same instant
// run in the order given.
func Run(ctx context.Context, cfg Config, jobs ...Job) error {
	if cfg.Executor == nil {
		return errors.New("reaper: Config.Executor is required")
	}
	if len(jobs) == 0 {
		return ErrNoJobs
	}
	for _, j := range jobs {
		if j.Every <= 0 || j.Do == nil {
			return fmt.Errorf("reaper: job %q needs a positive period and a function", j.Name)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ex := cfg.Executor
	next := make([]time.Time, len(jobs))
	start := ex.Now()
	for i, j := range jobs {
		next[i] = start.Add(j.Every)
	}
	wake := ex.NewParker()
	for {
		at := next[0]
		for _, t := range next[1:] {
			if t.Before(at) {
				at = t
			}
		}
		timer := ex.AfterFunc(at.Sub(ex.Now()), wake.Unpark)
		err := wake.Park(ctx)
		timer.Stop()
		if err != nil {
			return err
		}
		now := ex.Now()
		for i, j := range jobs {
			if now.Before(next[i]) {
				continue
			}
			n, err := j.Do(ctx)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				log.Warn("reaper: job failed", "job", j.Name, "err", err)
			} else if n > 0 {
				log.Info("reaper: job done", "job", j.Name, "n", n)
			}
			if cfg.Observe != nil {
				cfg.Observe(j.Name, n, err)
			}
			// The next run keeps the phase, and skips periods missed.
			for !next[i].After(now) {
				next[i] = next[i].Add(j.Every)
			}
		}
	}
}
