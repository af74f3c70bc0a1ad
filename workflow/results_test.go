package workflow_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// readCounter counts the stream reads made through it, by stream.
type readCounter struct {
	store.Store
	mu sync.Mutex
	n  map[string]int
}

func (c *readCounter) Read(ctx context.Context, stream string, after uint64, limit int) ([]event.Envelope, error) {
	c.mu.Lock()
	c.n[stream]++
	c.mu.Unlock()
	return c.Store.Read(ctx, stream, after, limit)
}

func (c *readCounter) reads(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[stream]
}

// outcome is a Result that runs in the background.
type outcome struct {
	mu   sync.Mutex
	done bool
	got  int
	err  error
}

func (o *outcome) finished() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}

func gatedAndQuick() (gated, quick *workflow.Def[int, int]) {
	gated = workflow.New("gated", 1, func(c *workflow.Ctx, in int) (int, error) {
		v, err := workflow.Await[int](c, "go")
		return in + v, err
	})
	quick = workflow.New("quick", 1, func(c *workflow.Ctx, in int) (int, error) {
		return workflow.Step(c, "one", func(context.Context) (int, error) { return in, nil })
	})
	return gated, quick
}

// awaitResult calls def.Result for run in a process of the rig.
func awaitResult(r *rig, def *workflow.Def[int, int], cl *workflow.Client, run string) (*outcome, func() error, error) {
	o := &outcome{}
	stop, err := r.Background("result-"+run, func(ctx context.Context) error {
		got, err := def.Result(ctx, cl, run)
		o.mu.Lock()
		o.done, o.got, o.err = true, got, err
		o.mu.Unlock()
		return nil
	})
	return o, stop, err
}

// With WithWorkers, a Result whose run is live on one of the workers
// reads nothing: the worker that ends the run hands it the end event, and
// the store's global status hints (other runs starting and ending
// meanwhile) do not wake it.
func TestResultWithWorkersIgnoresOtherRunsHints(t *testing.T) {
	forEachBackend(t, 21, func(r *rig) error {
		gated, quick := gatedAndQuick()
		wfs, w, err := r.work("w", gated, quick)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		counted := &readCounter{Store: r.Store, n: map[string]int{}}
		// A poll of an hour: any re-read within the test is a wake-up.
		waiter, err := workflow.NewClient(counted, wfs, r.Ex, workflow.WithPoll(time.Hour, time.Hour), workflow.WithWorkers(w))
		if err != nil {
			return err
		}
		others, err := r.client(wfs)
		if err != nil {
			return err
		}
		if err := gated.Start(r.Ctx, others, "gated-1", 40); err != nil {
			return err
		}
		if err := r.waitStreamLen("the await to start", "gated-1", 2); err != nil {
			return err
		}
		o, stop, err := awaitResult(r, gated, waiter, "gated-1")
		if err != nil {
			return err
		}
		defer stop()
		if err := r.WaitFor("the Result to wait", 10*time.Second, func() (bool, error) {
			return w.Waiters("gated-1") == 1, nil
		}); err != nil {
			return err
		}
		// Ten runs start and end: each raises a status hint at its start
		// (the assignment) and at its end (the archive).
		for i := range 10 {
			id := fmt.Sprintf("quick-%d", i)
			if err := quick.Start(r.Ctx, others, id, i); err != nil {
				return err
			}
			if got, err := quick.Result(r.Ctx, others, id); err != nil || got != i {
				return fmt.Errorf("%s: %d, %v", id, got, err)
			}
		}
		if n := counted.reads("gated-1"); n != 0 {
			return fmt.Errorf("the waiting Result read its stream %d times while other runs came and went, want 0 (the run is live on the worker)", n)
		}
		if o.finished() {
			return fmt.Errorf("the Result returned before its run ended")
		}
		if err := others.Signal(r.Ctx, "gated-1", "go", 2, ""); err != nil {
			return err
		}
		if err := r.WaitFor("the Result", 10*time.Second, func() (bool, error) { return o.finished(), nil }); err != nil {
			return err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.err != nil || o.got != 42 {
			return fmt.Errorf("result %d, %v; want 42", o.got, o.err)
		}
		// The worker handed the end over with its report: nothing was read.
		if n := counted.reads("gated-1"); n != 0 {
			return fmt.Errorf("the Result read its stream %d times, want 0", n)
		}
		return nil
	})
}

// A run that ends on a worker the client was not given is still seen, by
// Result's backoff.
func TestResultWithWorkersSeesOtherWorkersRunsByPolling(t *testing.T) {
	forEachBackend(t, 22, func(r *rig) error {
		_, quick := gatedAndQuick()
		wfs, err := workflow.NewWorkflows(quick)
		if err != nil {
			return err
		}
		// bystander runs nothing (it has another workflow); worker runs quick.
		idle := workflow.New("idle", 1, func(c *workflow.Ctx, in int) (int, error) { return in, nil })
		_, bystander, err := r.work("bystander", idle)
		if err != nil {
			return err
		}
		defer bystander.Stop(r.Ctx)
		w, err := r.worker("w", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		cl, err := workflow.NewClient(r.Store, wfs, r.Ex, workflow.WithPoll(time.Millisecond, 20*time.Millisecond), workflow.WithWorkers(bystander))
		if err != nil {
			return err
		}
		if got, err := startResult(r, quick, cl, "q", 7); err != nil || got != 7 {
			return fmt.Errorf("result %d, %v; want 7", got, err)
		}
		return nil
	})
}
