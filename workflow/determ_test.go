package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

func TestNowRandAndSideEffectReplayTheirRecords(t *testing.T) {
	forEachBackend(t, 71, func(r *rig) error {
		tl := newTally()
		def := workflow.New("determ", 1, func(c *workflow.Ctx, in int) (string, error) {
			now := c.Now()
			draw := c.Rand().IntN(1_000_000_000)
			id, err := workflow.SideEffect(c, "id", func() (int, error) { return tl.inc("id") * 100, nil })
			if err != nil {
				return "", err
			}
			if _, err := workflow.Step(c, "x", func(context.Context) (int, error) { return 0, nil }); err != nil {
				return "", err
			}
			return fmt.Sprintf("%d|%d|%d", now.UnixNano(), draw, id), nil
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		a, err := startResult(r, def, cl, "a", 0)
		if err != nil {
			return err
		}
		b, err := startResult(r, def, cl, "b", 0)
		if err != nil {
			return err
		}
		if tl.get("id") != 2 {
			return fmt.Errorf("the side effect ran %d times for two runs", tl.get("id"))
		}
		if strings.Split(a, "|")[1] == strings.Split(b, "|")[1] {
			return fmt.Errorf("runs a and b drew the same number (%s, %s): the source is not the run's", a, b)
		}
		if strings.HasPrefix(a, "0|") || strings.HasPrefix(a, "-") {
			return fmt.Errorf("a's time is %s", a)
		}
		// Replay answers from the records: the same time, draw and id,
		// and the side effect's function does not run again.
		if err := replays(r, def, "a", a); err != nil {
			return err
		}
		if tl.get("id") != 2 {
			return fmt.Errorf("the replay ran the side effect again")
		}
		// The time and the side effect ride with the step's write.
		_, err = r.streamShapes("a", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "sys:now", 1}, {event.StepCompleted, "sys:now", 1},
			{event.StepStarted, "id", 1}, {event.StepCompleted, "id", 1},
			{event.StepStarted, "x", 1}, {event.StepCompleted, "x", 1},
			{event.RunCompleted, "", 1},
		})
		return err
	})
}

func TestRunTimeoutFailsARunStillWaiting(t *testing.T) {
	forEachBackend(t, 72, func(r *rig) error {
		def := workflow.New("waiter", 1, func(c *workflow.Ctx, in int) (int, error) {
			if in == 1 {
				return 1, nil
			}
			return workflow.Await[int](c, "never")
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		return r.withTimers(func() error {
			began := r.Ex.Now()
			if err := def.Start(r.Ctx, cl, "stuck", 0, workflow.WithRunTimeout(time.Hour)); err != nil {
				return err
			}
			if err := r.timersDue(time.Hour, "stuck"); err != nil {
				return err
			}
			_, err := cl.Result(r.Ctx, "stuck")
			var re *workflow.RunError
			if !errors.As(err, &re) || !errors.Is(err, workflow.ErrFailed) || !strings.Contains(re.Message, "timed out after 1h0m0s") {
				return fmt.Errorf("stuck: %v, want failed by its run timeout", err)
			}
			if took := r.Ex.Now().Sub(began); !r.Real() && (took < time.Hour || took > time.Hour+time.Minute) {
				return fmt.Errorf("the one-hour run timeout took %v of virtual time", took)
			}
			// A run that ends in time is not touched by its timeout.
			if got, err := startResult(r, def, cl, "quick", 1); err != nil || got != 1 {
				return fmt.Errorf("quick: %d, %v", got, err)
			}
			return nil
		})
	})
}

// lostSchedules is a store handle whose Schedule calls never reach the
// store, as if its process died just before each.
type lostSchedules struct{ store.Store }

func (lostSchedules) Schedule(context.Context, string, uint64, string, time.Time, []byte) error {
	return nil
}

// TestRunTimeoutOutlivesACrash: the worker holding a run with a one-hour
// run timeout is killed while the run waits, before it scheduled the
// run's timer; the worker that takes it over schedules it and fails the run
// when it fires, an hour after the start (not after the takeover), with one
// end recorded. (Before the fix, the taker wrote nothing, scheduled
// nothing, and the run waited for ever.)
func TestRunTimeoutOutlivesACrash(t *testing.T) {
	forEachBackend(t, 73, func(r *rig) error {
		def := workflow.New("waiter", 1, func(c *workflow.Ctx, _ int) (int, error) {
			return workflow.Await[int](c, "never")
		})
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		return r.withTimers(func() error {
			hA := r.WorkerStore()
			// A dies before its timer is scheduled: its store handle drops
			// every Schedule (the window between the run's first write and
			// the timer's scheduling, made certain).
			wA, err := r.worker("A", lostSchedules{hA}, wfs, nil, nil)
			if err != nil {
				return err
			}
			began := r.Ex.Now()
			if err := def.Start(r.Ctx, cl, "stuck", 0, workflow.WithRunTimeout(time.Hour)); err != nil {
				return err
			}
			if err := r.WaitFor("the run to await", 20*time.Second, func() (bool, error) {
				evs, err := r.stream("stuck")
				return len(evs) > 0 && evs[len(evs)-1].StepID == "sys:await:never", err
			}); err != nil {
				return err
			}
			if ts, err := r.Store.ListTimers(r.Ctx, "stuck", 4); err != nil || len(ts) != 0 {
				return fmt.Errorf("before the takeover: timers %v, %v; want none", ts, err)
			}
			wB, err := r.killOver(hA, wA, "B", wfs)
			if err != nil {
				return err
			}
			defer wB.Stop(r.Ctx)
			if err := r.timersDue(time.Hour, "stuck"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(r.Ctx, 20*time.Second)
			_, err = cl.Result(ctx, "stuck")
			cancel()
			var re *workflow.RunError
			if !errors.As(err, &re) || !strings.Contains(re.Message, "timed out after 1h0m0s") {
				evs, _ := r.stream("stuck")
				for _, e := range evs {
					t.Logf("%d %s %s %d", e.RunSeq, e.EventType, e.StepID, e.LogicalAttemptID)
				}
				ts, terr := r.Store.ListTimers(r.Ctx, "stuck", 10)
				t.Logf("timers %+v %v", ts, terr)
				its, ierr := r.Store.ReadInbox(r.Ctx, "stuck", 0, 10)
				for _, it := range its {
					t.Logf("inbox %d %s", it.Seq, it.Kind)
				}
				t.Logf("inbox err %v", ierr)
				now, _ := r.Store.Now(r.Ctx)
				t.Logf("store now %v", now)
				return fmt.Errorf("stuck: %v, want failed by its run timeout", err)
			}
			if took := r.Ex.Now().Sub(began); !r.Real() && (took < time.Hour || took > time.Hour+time.Minute) {
				return fmt.Errorf("the one-hour run timeout took %v of virtual time across the crash", took)
			}
			evs, err := r.stream("stuck")
			if err != nil {
				return err
			}
			ends := 0
			for _, e := range evs {
				if e.EventType == event.RunFailed || e.EventType == event.RunCompleted || e.EventType == event.RunCancelled {
					ends++
				}
			}
			if ends != 1 {
				return fmt.Errorf("%d ends recorded, want 1", ends)
			}
			return nil
		})
	})
}
