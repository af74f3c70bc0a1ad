package workflow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
)

// The store's clock and the workers' disagree by seconds in these tests:
// the memstore reads the lab's clock plus an offset. A worker must judge
// its lease on its own clock, from before the request that granted or
// renewed it, never by the store's expiresAt.

// overlap counts the executions of each run's steps in progress, and the
// most there ever were at once.
type overlap struct {
	mu   sync.Mutex
	now  map[string]int
	most int
	runs map[string]int // executions per run
}

func (o *overlap) enter(run string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now[run]++
	o.runs[run]++
	o.most = max(o.most, o.now[run])
}

func (o *overlap) leave(run string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now[run]--
}

// slowSteps runs steps steps of 300ms (virtual time) each, noting each
// execution in o.
func slowSteps(ex actor.Executor, o *overlap, steps int) *workflow.Def[string, int] {
	return workflow.New("slow", 1, func(c *workflow.Ctx, run string) (int, error) {
		sum := 0
		for i := range steps {
			v, err := workflow.Step(c, fmt.Sprint("s", i), func(ctx context.Context) (int, error) {
				o.enter(run)
				defer o.leave(run)
				if err := actor.Sleep(ctx, ex, 300*time.Millisecond); err != nil {
					return 0, err
				}
				return i, nil
			})
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
}

// runSkewed starts workers on a memstore whose clock is skew ahead of the
// lab's, with a 1s lease, and runs runs runs of slowSteps to their end
// (within a minute of virtual time): each returns its result, no step of
// a run overlaps another of it, and each step executes exactly once.
func runSkewed(t *testing.T, seed uint64, skew time.Duration, workers, runs, steps int) {
	t.Helper()
	testrig.Lab(t, lab.Config{Seed: seed, Name: t.Name()}, func(env *lab.Env) error {
		st := memstore.New(memstore.WithClock(func() time.Time { return env.Lab.Now().Add(skew) }))
		o := &overlap{now: map[string]int{}, runs: map[string]int{}}
		def := slowSteps(env.Lab, o, steps)
		wfs, err := workflow.NewWorkflows(def)
		if err != nil {
			return err
		}
		for i := range workers {
			w, err := workflow.StartWorker(env.Ctx, env.Root, workflow.WorkerConfig{
				Worker: fmt.Sprint("w", i), Store: st.Restart(), Workflows: wfs,
				LeaseTTL: time.Second, ScanEvery: 100 * time.Millisecond, PollEvery: 100 * time.Millisecond})
			if err != nil {
				return err
			}
			defer w.Stop(env.Ctx)
		}
		cl, err := workflow.NewClient(st, wfs, env.Lab, workflow.WithPoll(time.Millisecond, 50*time.Millisecond))
		if err != nil {
			return err
		}
		for i := range runs {
			id := fmt.Sprint("run-", i)
			if err := def.Start(env.Ctx, cl, id, id); err != nil {
				return err
			}
		}
		want := steps * (steps - 1) / 2
		for deadline := env.Lab.Now().Add(time.Minute); ; {
			done := 0
			for i := range runs {
				s, err := cl.Get(env.Ctx, fmt.Sprint("run-", i))
				if err != nil {
					return err
				}
				if s.Status == workflow.StatusCompleted {
					done++
				}
			}
			if done == runs {
				break
			}
			if !env.Lab.Now().Before(deadline) {
				return fmt.Errorf("%d of %d runs completed after a minute (store clock %v off)", done, runs, skew)
			}
			if err := actor.Sleep(env.Ctx, env.Lab, 50*time.Millisecond); err != nil {
				return err
			}
		}
		for i := range runs {
			id := fmt.Sprint("run-", i)
			got, err := def.Result(env.Ctx, cl, id)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s returned %d, want %d", id, got, want)
			}
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.most > 1 {
			return fmt.Errorf("a run had %d step executions in progress at once (store clock %v off)", o.most, skew)
		}
		for run, n := range o.runs {
			if n != steps {
				return fmt.Errorf("%s executed %d steps, want %d: a lease was lost in steady state", run, n, steps)
			}
		}
		return nil
	})
}

// TestWorkersNeverRunAStepTwiceAtOnceWithTheStoreClockAhead: with the
// store's clock 3s ahead of the workers' and a 1s lease, two workers never
// run a step of one run at the same time, and no step runs twice: the
// holder renews on its own clock before the store's expiry, so the other
// worker never finds the lease lapsed.
func TestWorkersNeverRunAStepTwiceAtOnceWithTheStoreClockAhead(t *testing.T) {
	runSkewed(t, 61, 3*time.Second, 2, 3, 8)
}

// TestRunCompletesWithTheStoreClockBehind: with the store's clock 3s
// behind the worker's and a 1s lease, a run still starts and completes,
// each step once: the worker does not take the store's expiresAt, which
// its own clock has passed already, for its deadline.
func TestRunCompletesWithTheStoreClockBehind(t *testing.T) {
	runSkewed(t, 62, -3*time.Second, 1, 2, 8)
}

// TestSleepIsMeasuredOnTheStoresClock: a durable sleep's timer is due d
// after the store's now, the clock that judges it. With the store's clock
// 3s ahead of the worker's, or 3s behind, a 2s sleep lasts 2s: it neither
// returns at once (a due time taken from the worker's clock is already
// past by the store's) nor 3s late. The lease is long here, so that only
// the sleep's due time is at stake.
func TestSleepIsMeasuredOnTheStoresClock(t *testing.T) {
	for _, skew := range []time.Duration{3 * time.Second, -3 * time.Second} {
		t.Run(fmt.Sprint("store", skew), func(t *testing.T) {
			res := lab.Run(lab.Config{Seed: 63, Name: t.Name()}, func(env *lab.Env) error {
				st := memstore.New(memstore.WithClock(func() time.Time { return env.Lab.Now().Add(skew) }))
				r := &rig{&testrig.Rig{T: t, Backend: testrig.Memstore, Ctx: env.Ctx, Root: env.Root, Ex: env.Lab, Store: st, Mem: st,
					Poll: 10 * time.Millisecond, Polls: 100}}
				var before, after time.Time // the worker's clock around the sleep
				def := workflow.New("sleepy", 1, func(c *workflow.Ctx, in int) (int, error) {
					if _, err := workflow.Step(c, "before", func(context.Context) (int, error) { before = env.Lab.Now(); return 0, nil }); err != nil {
						return 0, err
					}
					if err := workflow.Sleep(c, 2*time.Second); err != nil {
						return 0, err
					}
					return workflow.Step(c, "after", func(context.Context) (int, error) { after = env.Lab.Now(); return in, nil })
				})
				wfs, err := workflow.NewWorkflows(def)
				if err != nil {
					return err
				}
				stopTimers, err := r.Background("timers", func(ctx context.Context) error { return fireTimers(ctx, r.Ex, r.Store) })
				if err != nil {
					return err
				}
				w, err := r.worker("A", st.Restart(), wfs, nil, func(c *workflow.WorkerConfig) { c.LeaseTTL = time.Minute })
				if err != nil {
					return err
				}
				defer w.Stop(env.Ctx)
				cl, err := r.client(wfs)
				if err != nil {
					return err
				}
				if err := def.Start(env.Ctx, cl, "run", 7); err != nil {
					return err
				}
				if got, err := def.Result(env.Ctx, cl, "run"); err != nil || got != 7 {
					return fmt.Errorf("result %d, %v; want 7", got, err)
				}
				if err := stopTimers(); err != nil {
					return err
				}
				if slept := after.Sub(before); slept < 2*time.Second || slept > 2500*time.Millisecond {
					return fmt.Errorf("a 2s sleep lasted %v with the store's clock %v off", slept, skew)
				}
				return nil
			})
			if res.Failure != nil {
				t.Fatal(res.Failure)
			}
		})
	}
}
