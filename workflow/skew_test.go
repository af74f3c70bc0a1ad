package workflow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
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
	res := lab.Run(lab.Config{Seed: seed, Name: t.Name()}, func(env *lab.Env) error {
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
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
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
