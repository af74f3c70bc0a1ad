package workflow_test

import (
	"fmt"

	"testing"

	"github.com/orrery-run/orrery/workflow"
)

// echoDef is a one-step workflow answering its input.
func echoDef(name string, version uint64) *workflow.Def[int, int] {
	return workflow.New(name, version, func(c *workflow.Ctx, in int) (int, error) { return in, nil })
}

// queuedWaiting fails unless run is still queued and waiting: recorded
// RunQueued, its entry not admitted, so it holds no slot.
func queuedWaiting(r *rig, cl *workflow.Client, run string) error {
	s, err := cl.Get(r.Ctx, run)
	if err != nil || s.Status != workflow.StatusQueued {
		return fmt.Errorf("%s: %+v, %v; want queued", run, s, err)
	}
	e, ok, err := r.Store.QueueRunOf(r.Ctx, run)
	if err != nil || !ok || e.Admitted() {
		return fmt.Errorf("%s's entry = %+v ok=%v err=%v; want waiting, no slot", run, e, ok, err)
	}
	return nil
}

// carrying registers defs and the queue q (concurrency 1) in a registry of
// their own: what one binary of a mixed cluster carries.
func carrying(q workflow.Queue, defs ...workflow.Workflow) (*workflow.Workflows, error) {
	wfs, err := workflow.NewWorkflows(defs...)
	if err != nil {
		return nil, err
	}
	return wfs, wfs.AddQueues(q)
}

// A queue with one slot, a run of y enqueued ahead of a run of x, and the
// only live worker carrying x alone: x is admitted past y and completes,
// y waits without taking the slot, and a worker carrying y then runs it.
func TestQueueAdmitsOnlyWhatTheWorkerCarries(t *testing.T) {
	onMemstore(t, 47, func(r *rig) error {
		q := workflow.Queue{Name: "q", Concurrency: 1}
		x, y := echoDef("x", 1), echoDef("y", 1)
		wfs, cl, err := r.clientFor(x, y)
		if err != nil {
			return err
		}
		if err := wfs.AddQueues(q); err != nil {
			return err
		}
		if err := y.Start(r.Ctx, cl, "ry", 1, workflow.OnQueue("q")); err != nil {
			return err
		}
		if err := x.Start(r.Ctx, cl, "rx", 2, workflow.OnQueue("q")); err != nil {
			return err
		}
		onlyX, err := carrying(q, echoDef("x", 1))
		if err != nil {
			return err
		}
		wx, err := r.worker("wx", r.WorkerStore(), onlyX, nil, nil)
		if err != nil {
			return err
		}
		defer wx.Stop(r.Ctx)
		if v, err := x.Result(r.Ctx, cl, "rx"); err != nil || v != 2 {
			return fmt.Errorf("rx: %d, %v", v, err)
		}
		if err := queuedWaiting(r, cl, "ry"); err != nil {
			return err
		}
		onlyY, err := carrying(q, echoDef("y", 1))
		if err != nil {
			return err
		}
		wy, err := r.worker("wy", r.WorkerStore(), onlyY, nil, nil)
		if err != nil {
			return err
		}
		defer wy.Stop(r.Ctx)
		if v, err := y.Result(r.Ctx, cl, "ry"); err != nil || v != 1 {
			return fmt.Errorf("ry: %d, %v", v, err)
		}
		return nil
	})
}

// The version variant of a rolling upgrade: a run pinned to x@2 ahead of
// a run of x@1, the only live worker carrying x@1 alone: the x@1 run
// completes, the x@2 run waits until a worker carrying x@2 comes.
func TestQueueAdmitsOnlyTheVersionsTheWorkerCarries(t *testing.T) {
	onMemstore(t, 48, func(r *rig) error {
		q := workflow.Queue{Name: "q", Concurrency: 1}
		v1, v2 := echoDef("x", 1), echoDef("x", 2)
		wfs, cl, err := r.clientFor(v1, v2)
		if err != nil {
			return err
		}
		if err := wfs.AddQueues(q); err != nil {
			return err
		}
		if err := v2.Start(r.Ctx, cl, "r2", 2, workflow.OnQueue("q"), workflow.WithVersion(2)); err != nil {
			return err
		}
		if err := v1.Start(r.Ctx, cl, "r1", 1, workflow.OnQueue("q"), workflow.WithVersion(1)); err != nil {
			return err
		}
		old, err := carrying(q, echoDef("x", 1))
		if err != nil {
			return err
		}
		w1, err := r.worker("w-old", r.WorkerStore(), old, nil, nil)
		if err != nil {
			return err
		}
		defer w1.Stop(r.Ctx)
		if v, err := v1.Result(r.Ctx, cl, "r1"); err != nil || v != 1 {
			return fmt.Errorf("r1: %d, %v", v, err)
		}
		if err := queuedWaiting(r, cl, "r2"); err != nil {
			return err
		}
		upgraded, err := carrying(q, echoDef("x", 1), echoDef("x", 2))
		if err != nil {
			return err
		}
		w2, err := r.worker("w-new", r.WorkerStore(), upgraded, nil, nil)
		if err != nil {
			return err
		}
		defer w2.Stop(r.Ctx)
		if v, err := v2.Result(r.Ctx, cl, "r2"); err != nil || v != 2 {
			return fmt.Errorf("r2: %d, %v", v, err)
		}
		return nil
	})
}
