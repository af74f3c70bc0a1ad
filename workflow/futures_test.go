package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// withTimers runs the test timer worker beside body.
func (r *rig) withTimers(body func() error) error {
	stop, err := r.Background("timers", func(ctx context.Context) error { return fireTimers(ctx, r.Ex, r.Store) })
	if err != nil {
		return err
	}
	if err := body(); err != nil {
		_ = stop()
		return err
	}
	return stop()
}

// timersDue waits until each of runs has a timer scheduled, then, on a
// real store, moves its clock by d (under the lab virtual time passes by
// itself).
func (r *rig) timersDue(d time.Duration, runs ...string) error {
	if err := r.WaitFor("the timers", 20*time.Second, func() (bool, error) {
		for _, id := range runs {
			ts, err := r.Store.ListTimers(r.Ctx, id, 4)
			if errors.Is(err, store.ErrWorldNotFound) {
				return false, nil
			}
			if err != nil || len(ts) == 0 {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	if r.Real() {
		return r.Advance(d)
	}
	return nil
}

// replays checks that the run's recorded stream replays to want.
func replays[In, Out comparable](r *rig, def *workflow.Def[In, Out], run string, want Out) error {
	evs, err := r.stream(run)
	if err != nil {
		return err
	}
	raw, err := workflow.Replay(def, evs)
	if err != nil {
		return fmt.Errorf("replay of %s: %w", run, err)
	}
	var got Out
	if err := event.Unmarshal(raw, &got); err != nil || got != want {
		return fmt.Errorf("replay of %s: %v, %v; want %v", run, got, err, want)
	}
	return nil
}

func TestFanOutToFiftyChildrenTakesAboutOneChildsTime(t *testing.T) {
	forEachBackend(t, 61, func(r *rig) error {
		const n = 50
		kid := workflow.New("kid", 1, func(c *workflow.Ctx, in int) (int, error) {
			if err := workflow.Sleep(c, time.Minute); err != nil {
				return 0, err
			}
			return in * 2, nil
		})
		fan := workflow.New("fan", 1, func(c *workflow.Ctx, in int) (int, error) {
			fs := make([]*workflow.Future[int], n)
			for i := range fs {
				fs[i] = workflow.ChildAsync(c, kid, "kid-"+strconv.Itoa(i), i)
			}
			sum := 0
			for _, f := range fs {
				v, err := f.Get(c)
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		})
		_, w, cl, err := r.serve("w", fan, kid)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		return r.withTimers(func() error {
			began := r.Ex.Now()
			if err := fan.Start(r.Ctx, cl, "fan", 0); err != nil {
				return err
			}
			kids := make([]string, n)
			for i := range kids {
				kids[i] = "kid-" + strconv.Itoa(i)
			}
			if err := r.timersDue(time.Minute, kids...); err != nil {
				return err
			}
			got, err := fan.Result(r.Ctx, cl, "fan")
			if want := n * (n - 1); err != nil || got != want {
				return fmt.Errorf("result %d, %v; want %d", got, err, want)
			}
			if took := r.Ex.Now().Sub(began); !r.Real() && took > 3*time.Minute {
				return fmt.Errorf("50 children of one minute each took %v of virtual time: they ran one after another", took)
			}
			for _, id := range kids {
				evs, err := r.stream(id)
				if err != nil {
					return err
				}
				starts := 0
				for _, e := range evs {
					if e.EventType == event.RunStarted {
						starts++
					}
				}
				if starts != 1 {
					return fmt.Errorf("%s started %d times", id, starts)
				}
			}
			return replays(r, fan, "fan", n*(n-1))
		})
	})
}

func TestSelectTakesTheFirstToEndAndReplaysTheChoice(t *testing.T) {
	forEachBackend(t, 62, func(r *rig) error {
		sel := workflow.New("sel", 1, func(c *workflow.Ctx, in int) (int, error) {
			timer := workflow.NewTimer(c, time.Hour)
			sig := workflow.AwaitAsync[int](c, "go")
			i, err := workflow.Select(c, timer, sig)
			if err != nil {
				return 0, err
			}
			if i == 1 {
				v, err := sig.Get(c)
				return 100 + v, err
			}
			return 0, nil
		})
		_, w, cl, err := r.serve("w", sel)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		return r.withTimers(func() error {
			// The signal first.
			if err := sel.Start(r.Ctx, cl, "by-signal", 0); err != nil {
				return err
			}
			if err := r.timersDue(0, "by-signal"); err != nil {
				return err
			}
			if err := cl.Signal(r.Ctx, "by-signal", "go", 7, "k"); err != nil {
				return err
			}
			if got, err := sel.Result(r.Ctx, cl, "by-signal"); err != nil || got != 107 {
				return fmt.Errorf("by-signal: %d, %v; want 107", got, err)
			}
			if err := replays(r, sel, "by-signal", 107); err != nil {
				return err
			}
			// The timer first.
			if err := sel.Start(r.Ctx, cl, "by-timer", 0); err != nil {
				return err
			}
			if err := r.timersDue(time.Hour, "by-timer"); err != nil {
				return err
			}
			if got, err := sel.Result(r.Ctx, cl, "by-timer"); err != nil || got != 0 {
				return fmt.Errorf("by-timer: %d, %v; want 0", got, err)
			}
			return replays(r, sel, "by-timer", 0)
		})
	})
}

func TestAwaitWithTimeoutConsumesNoSignalWhenTheTimeoutComesFirst(t *testing.T) {
	forEachBackend(t, 63, func(r *rig) error {
		def := workflow.New("shipping", 1, func(c *workflow.Ctx, in int) (int, error) {
			v, ok, err := workflow.AwaitWithTimeout[int](c, "shipped", 2*time.Minute)
			if err != nil {
				return 0, err
			}
			if ok {
				return v, nil
			}
			// Timed out: the signal that comes later is the next Await's.
			late, err := workflow.Await[int](c, "shipped")
			return -late, err
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		return r.withTimers(func() error {
			began := r.Ex.Now()
			if err := def.Start(r.Ctx, cl, "late", 0); err != nil {
				return err
			}
			if err := r.timersDue(2*time.Minute, "late"); err != nil {
				return err
			}
			// The timeout is recorded (the await's end) before the signal.
			if err := r.WaitFor("the timeout", 10*time.Minute, func() (bool, error) {
				evs, err := r.stream("late")
				for _, e := range evs {
					if e.EventType == event.StepCompleted && e.StepID == "sys:await:shipped" {
						return true, err
					}
				}
				return false, err
			}); err != nil {
				return err
			}
			if took := r.Ex.Now().Sub(began); !r.Real() && (took < 2*time.Minute || took > 3*time.Minute) {
				return fmt.Errorf("the two-minute timeout took %v of virtual time", took)
			}
			if err := cl.Signal(r.Ctx, "late", "shipped", 5, "k"); err != nil {
				return err
			}
			if got, err := def.Result(r.Ctx, cl, "late"); err != nil || got != -5 {
				return fmt.Errorf("late: %d, %v; want -5", got, err)
			}
			if err := replays(r, def, "late", -5); err != nil {
				return err
			}
			// In time: the signal is the answer.
			if err := def.Start(r.Ctx, cl, "on-time", 0); err != nil {
				return err
			}
			if err := cl.Signal(r.Ctx, "on-time", "shipped", 3, "k"); err != nil {
				return err
			}
			if got, err := def.Result(r.Ctx, cl, "on-time"); err != nil || got != 3 {
				return fmt.Errorf("on-time: %d, %v; want 3", got, err)
			}
			return replays(r, def, "on-time", 3)
		})
	})
}

func TestStepAsyncRunsStepsSideBySide(t *testing.T) {
	forEachBackend(t, 64, func(r *rig) error {
		// Each step waits for the other to have started: run one after
		// the other, the first would wait until its timeout.
		type flag struct {
			set atomic.Bool
			p   actor.Parker
		}
		a, b := &flag{p: r.Ex.NewParker()}, &flag{p: r.Ex.NewParker()}
		rendezvous := func(mine, theirs *flag) func(ctx context.Context) (int, error) {
			return func(ctx context.Context) (int, error) {
				mine.set.Store(true)
				theirs.p.Unpark()
				for !theirs.set.Load() {
					if err := mine.p.Park(ctx); err != nil {
						return 0, workflow.Permanent(errors.New("the other step never ran beside this one"))
					}
				}
				return 1, nil
			}
		}
		def := workflow.New("pair", 1, func(c *workflow.Ctx, in int) (int, error) {
			fa := workflow.StepAsync(c, "a", rendezvous(a, b), workflow.WithTimeout(time.Minute))
			fb := workflow.StepAsync(c, "b", rendezvous(b, a), workflow.WithTimeout(time.Minute))
			x, err := fa.Get(c)
			if err != nil {
				return 0, err
			}
			y, err := fb.Get(c)
			return x + y, err
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, def, cl, "pair", 0); err != nil || got != 2 {
			return fmt.Errorf("pair: %d, %v; want 2", got, err)
		}
		return replays(r, def, "pair", 2)
	})
}

func TestACancelIsToldToTheFunctionAndDetachedCompensationRuns(t *testing.T) {
	forEachBackend(t, 65, func(r *rig) error {
		tl := newTally()
		def := workflow.New("order", 1, func(c *workflow.Ctx, in int) (int, error) {
			if _, err := workflow.Step(c, "charge", func(context.Context) (int, error) { tl.inc("charge"); return in, nil }); err != nil {
				return 0, err
			}
			_, err := workflow.Await[int](c, "shipped")
			if !errors.Is(err, workflow.ErrCancelled) {
				return 0, fmt.Errorf("the await returned %v, want the cancellation", err)
			}
			// Once told, steps on the run's Ctx are refused...
			if _, err := workflow.Step(c, "more", func(context.Context) (int, error) { tl.inc("more"); return 0, nil }); !errors.Is(err, workflow.ErrCancelled) {
				return 0, fmt.Errorf("a step after the cancel returned %v", err)
			}
			// ... and those on a detached one run.
			if _, err := workflow.Step(workflow.Detached(c), "refund", func(context.Context) (int, error) { tl.inc("refund"); return in, nil }); err != nil {
				return 0, err
			}
			return 0, err
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "o", 9); err != nil {
			return err
		}
		if err := r.waitStreamLen("the await", "o", 4); err != nil {
			return err
		}
		if err := cl.Cancel(r.Ctx, "o", "customer changed their mind"); err != nil {
			return err
		}
		_, err = cl.Result(r.Ctx, "o")
		var re *workflow.RunError
		if !errors.As(err, &re) || !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("result %v, want the run cancelled", err)
		}
		if c, m, f := tl.get("charge"), tl.get("more"), tl.get("refund"); c != 1 || m != 0 || f != 1 {
			return fmt.Errorf("charge %d, more %d, refund %d; want 1, 0, 1", c, m, f)
		}
		evs, err := r.streamShapes("o", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "charge", 1}, {event.StepCompleted, "charge", 1},
			{event.StepStarted, "sys:await:shipped", 1}, {event.StepSkipped, "sys:await:shipped", 1},
			{event.StepStarted, "refund", 1}, {event.StepCompleted, "refund", 1},
			{event.RunCancelled, "", 1},
		})
		if err != nil {
			return err
		}
		// The cancelled run replays to its recorded end.
		if _, err := workflow.Replay(def, evs); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("replay: %v, want cancelled", err)
		}
		return nil
	})
}

func TestParentClosePolicies(t *testing.T) {
	forEachBackend(t, 66, func(r *rig) error {
		kid := workflow.New("kid", 1, func(c *workflow.Ctx, in int) (int, error) {
			return workflow.Await[int](c, "go")
		})
		parent := workflow.New("parent", 1, func(c *workflow.Ctx, in int) (int, error) {
			workflow.ChildAsync(c, kid, "k-cancel", 1)
			workflow.ChildAsync(c, kid, "k-abandon", 2, workflow.WithParentClose(workflow.ParentCloseAbandon))
			workflow.ChildAsync(c, kid, "k-wait", 3, workflow.WithParentClose(workflow.ParentCloseWait))
			return 42, nil // returns without waiting for any of them
		})
		_, w, cl, err := r.serve("w", parent, kid)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := parent.Start(r.Ctx, cl, "p", 0); err != nil {
			return err
		}
		if err := r.WaitFor("the children", 20*time.Second, func() (bool, error) {
			_, err := cl.Get(r.Ctx, "k-wait")
			return err == nil, nil
		}); err != nil {
			return err
		}
		if _, err := cl.Result(r.Ctx, "k-cancel"); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("k-cancel: %v, want cancelled", err)
		}
		// The parent waits for k-wait: not ended while k-wait runs.
		if err := r.waitStreamLen("k-wait to await", "k-wait", 2); err != nil {
			return err
		}
		if sum, err := cl.Get(r.Ctx, "p"); err != nil || sum.Status != workflow.StatusRunning {
			return fmt.Errorf("the parent is %q (%v) while its ParentCloseWait child runs", sum.Status, err)
		}
		if err := cl.Signal(r.Ctx, "k-wait", "go", 30, "k"); err != nil {
			return err
		}
		if got, err := parent.Result(r.Ctx, cl, "p"); err != nil || got != 42 {
			return fmt.Errorf("parent: %d, %v", got, err)
		}
		// k-abandon outlives its parent and finishes on its own.
		if sum, err := cl.Get(r.Ctx, "k-abandon"); err != nil || sum.Status != workflow.StatusRunning && sum.Status != workflow.StatusPending {
			return fmt.Errorf("k-abandon is %q (%v) after its parent ended", sum.Status, err)
		}
		if err := cl.Signal(r.Ctx, "k-abandon", "go", 20, "k"); err != nil {
			return err
		}
		if got, err := kid.Result(r.Ctx, cl, "k-abandon"); err != nil || got != 20 {
			return fmt.Errorf("k-abandon: %d, %v", got, err)
		}
		return nil
	})
}

func TestBranchesTakeOverAfterACrashInTheirRecordedOrder(t *testing.T) {
	onMemstore(t, 67, func(r *rig) error {
		tl := newTally()
		// Two branches, each two awaits and a step; the signals come in an
		// order that interleaves them, and the worker crashes midway: the
		// next worker must replay the branches in the recorded order (or
		// it would diverge) and finish them.
		branch := func(name string) func(c *workflow.Ctx) (int, error) {
			return func(c *workflow.Ctx) (int, error) {
				x, err := workflow.Await[int](c, name+"1")
				if err != nil {
					return 0, err
				}
				y, err := workflow.Step(c, name+"-mid", func(context.Context) (int, error) { tl.inc(name); return x * 10, nil })
				if err != nil {
					return 0, err
				}
				z, err := workflow.Await[int](c, name+"2")
				return y + z, err
			}
		}
		def := workflow.New("two", 1, func(c *workflow.Ctx, in int) (int, error) {
			fa, fb := workflow.Go(c, branch("a")), workflow.Go(c, branch("b"))
			i, err := workflow.Select(c, fa, fb)
			if err != nil {
				return 0, err
			}
			a, err := fa.Get(c)
			if err != nil {
				return 0, err
			}
			b, err := fb.Get(c)
			return 1000*i + a + b, err
		})
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		hA := r.Mem.Restart()
		wA, err := r.worker("A", hA, wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "two", 0); err != nil {
			return err
		}
		signal := func(name string, v int) error { return cl.Signal(r.Ctx, "two", name, v, name) }
		if err := signal("b1", 2); err != nil {
			return err
		}
		if err := r.WaitFor("b's step", 10*time.Second, func() (bool, error) { return tl.get("b") == 1, nil }); err != nil {
			return err
		}
		if err := signal("a1", 1); err != nil {
			return err
		}
		if err := r.WaitFor("a's step", 10*time.Second, func() (bool, error) { return tl.get("a") == 1, nil }); err != nil {
			return err
		}
		if err := signal("a2", 3); err != nil {
			return err
		}
		if err := r.WaitFor("a2 recorded", 10*time.Second, func() (bool, error) {
			evs, err := r.stream("two")
			for _, e := range evs {
				if e.EventType == event.StepCompleted && e.StepID == "sys:await:a2" {
					return true, err
				}
			}
			return false, err
		}); err != nil {
			return err
		}
		wB, err := r.crashOver(hA, wA, "B", wfs)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if err := signal("b2", 4); err != nil {
			return err
		}
		// a ended first (index 0): 0 + (10+3) + (20+4).
		if got, err := def.Result(r.Ctx, cl, "two"); err != nil || got != 37 {
			return fmt.Errorf("result %d, %v; want 37", got, err)
		}
		return replays(r, def, "two", 37)
	})
}

// deadlocking has branch a wait (after a sleep) for branch b, which waits
// for a; fixed, b does not wait.
func deadlocking(fixed bool) *workflow.Def[int, int] {
	return workflow.New("knot", 1, func(c *workflow.Ctx, in int) (int, error) {
		var b *workflow.Future[int]
		a := workflow.Go(c, func(ac *workflow.Ctx) (int, error) {
			if err := workflow.Sleep(ac, time.Second); err != nil {
				return 0, err
			}
			return b.Get(ac)
		})
		b = workflow.Go(c, func(bc *workflow.Ctx) (int, error) {
			if fixed {
				return in, nil
			}
			return a.Get(bc)
		})
		return a.Get(c)
	})
}

// TestADeadlockedRunIsHeldAndAFixResumesIt: when every branch of a run
// waits for another, the run is held as a divergence is (blocked, with a
// reason naming the deadlock), once, not retried in a loop; code that
// does not deadlock there resumes it and it completes.
func TestADeadlockedRunIsHeldAndAFixResumesIt(t *testing.T) {
	forEachBackend(t, 133, func(r *rig) error {
		return r.withTimers(func() error {
			wfs, cl, err := r.clientFor(deadlocking(false))
			if err != nil {
				return err
			}
			wA, err := r.worker("A", r.WorkerStore(), wfs, nil, nil)
			if err != nil {
				return err
			}
			if err := deadlocking(false).Start(r.Ctx, cl, "k", 7); err != nil {
				return err
			}
			if err := r.timersDue(time.Second, "k"); err != nil {
				return err
			}
			if err := r.waitStatus(cl, "k", workflow.StatusBlocked); err != nil {
				return err
			}
			sum, err := cl.Get(r.Ctx, "k")
			if err != nil {
				return err
			}
			if want := "blocked: divergent at step 1: deadlock: every branch of the run waits for another"; sum.Error != want {
				return fmt.Errorf("the held run's reason %q, want %q", sum.Error, want)
			}
			// The worker does not spin on it: one hold is recorded.
			if !r.Real() {
				if err := actor.Sleep(r.Ctx, r.Ex, time.Minute); err != nil {
					return err
				}
			}
			evs, err := r.stream("k")
			if err != nil {
				return err
			}
			paused := 0
			for _, e := range evs {
				if e.EventType == event.RunPaused {
					paused++
				}
			}
			if paused != 1 {
				return fmt.Errorf("%d holds recorded, want 1", paused)
			}
			if err := wA.Stop(r.Ctx); err != nil {
				return err
			}
			fixed := deadlocking(true)
			wfs2, err := workflow.NewWorkflows(fixed)
			if err != nil {
				return err
			}
			wB, err := r.worker("B", r.WorkerStore(), wfs2, nil, nil)
			if err != nil {
				return err
			}
			defer wB.Stop(r.Ctx)
			if got, err := fixed.Result(r.Ctx, cl, "k"); err != nil || got != 7 {
				return fmt.Errorf("the fixed run: %d, %v; want 7", got, err)
			}
			return nil
		})
	})
}
