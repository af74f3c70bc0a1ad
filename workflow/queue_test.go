package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// gauge counts the runs inside a step at once, and the most it saw.
type gauge struct {
	mu           sync.Mutex
	active, most int
	order        []int
}

func (g *gauge) enter(in int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active++
	g.most = max(g.most, g.active)
	g.order = append(g.order, in)
}

func (g *gauge) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.active--
}

func (g *gauge) get() (most int, order []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most, slices.Clone(g.order)
}

// gatedDef is a one-step workflow whose step waits for gt, counted by ga.
func gatedDef(name string, gt *gate, ga *gauge) *workflow.Def[int, int] {
	return workflow.New(name, 1, func(c *workflow.Ctx, in int) (int, error) {
		return workflow.Step(c, "work", func(ctx context.Context) (int, error) {
			ga.enter(in)
			defer ga.leave()
			return in, gt.wait(ctx)
		})
	})
}

// Three workers share a queue whose global limit is 2: never more than
// two of its runs run at once, the others wait recorded RunQueued and
// visible as queued, and every run completes.
func TestQueueGlobalLimitHoldsAcrossWorkers(t *testing.T) {
	forEachBackend(t, 41, func(r *rig) error {
		gt, ga := newGate(r.Ex), &gauge{}
		def := gatedDef("limited", gt, ga)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := wfs.AddQueues(workflow.Queue{Name: "q", Concurrency: 2}); err != nil {
			return err
		}
		for i := range 3 {
			w, err := r.worker(fmt.Sprintf("w%d", i), r.WorkerStore(), wfs, nil, nil)
			if err != nil {
				return err
			}
			defer w.Stop(r.Ctx)
		}
		const n = 6
		for i := range n {
			if err := def.Start(r.Ctx, cl, fmt.Sprintf("r%d", i), i, workflow.OnQueue("q")); err != nil {
				return err
			}
		}
		if err := r.waitEntries("two runs in their step", gt, 2); err != nil {
			return err
		}
		queued := 0
		for i := range n {
			s, err := cl.Get(r.Ctx, fmt.Sprintf("r%d", i))
			if err != nil {
				return err
			}
			if s.Status == workflow.StatusQueued {
				queued++
			}
		}
		if queued < n-2 {
			return fmt.Errorf("%d runs queued while two run, want at least %d", queued, n-2)
		}
		gt.release()
		for i := range n {
			if v, err := def.Result(r.Ctx, cl, fmt.Sprintf("r%d", i)); err != nil || v != i {
				return fmt.Errorf("r%d: %d, %v", i, v, err)
			}
		}
		if most, _ := ga.get(); most != 2 {
			return fmt.Errorf("%d runs of the queue ran at once, want the limit 2", most)
		}
		evs, err := r.stream("r5")
		if err != nil {
			return err
		}
		if err := sameShapes(evs, []shape{{event.RunQueued, "", 1}, {event.RunStarted, "", 1},
			{event.StepStarted, "work", 1}, {event.StepCompleted, "work", 1}, {event.RunCompleted, "", 1}}); err != nil {
			return err
		}
		left, err := r.Store.ListQueuedRuns(r.Ctx, "q")
		if err != nil || len(left) != 0 {
			return fmt.Errorf("queue after every run ended: %+v, %v", left, err)
		}
		return nil
	})
}

// With one slot, runs are admitted by priority (lower first), FIFO
// within a priority.
func TestQueueAdmitsByPriority(t *testing.T) {
	onMemstore(t, 42, func(r *rig) error {
		gt, ga := newGate(r.Ex), &gauge{}
		gt.release()
		def := gatedDef("prio", gt, ga)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := wfs.AddQueues(workflow.Queue{Name: "q", Concurrency: 1}); err != nil {
			return err
		}
		prios := []int{5, 1, 3, 1, 0}
		for i, p := range prios {
			if err := def.Start(r.Ctx, cl, fmt.Sprintf("r%d", i), i, workflow.OnQueue("q"), workflow.WithPriority(p)); err != nil {
				return err
			}
		}
		w, err := r.worker("w", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		for i := range prios {
			if _, err := def.Result(r.Ctx, cl, fmt.Sprintf("r%d", i)); err != nil {
				return err
			}
		}
		if _, order := ga.get(); !slices.Equal(order, []int{4, 1, 3, 2, 0}) {
			return fmt.Errorf("ran in order %v, want [4 1 3 2 0]", order)
		}
		return nil
	})
}

// A rate of two admissions a minute, in virtual time: no minute of the
// journal holds more than two RunStarted of the queue's runs.
func TestQueueRateLimitInVirtualTime(t *testing.T) {
	onMemstore(t, 43, func(r *rig) error {
		gt, ga := newGate(r.Ex), &gauge{}
		gt.release()
		def := gatedDef("rated", gt, ga)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := wfs.AddQueues(workflow.Queue{Name: "q", Rate: workflow.Rate{Limit: 2, Period: time.Minute}}); err != nil {
			return err
		}
		w, err := r.worker("w", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		const n = 5
		for i := range n {
			if err := def.Start(r.Ctx, cl, fmt.Sprintf("r%d", i), i, workflow.OnQueue("q")); err != nil {
				return err
			}
		}
		var starts []time.Time
		for i := range n {
			if _, err := def.Result(r.Ctx, cl, fmt.Sprintf("r%d", i)); err != nil {
				return err
			}
			evs, err := r.stream(fmt.Sprintf("r%d", i))
			if err != nil {
				return err
			}
			for _, e := range evs {
				if e.EventType == event.RunStarted {
					starts = append(starts, e.PersistedAt)
				}
			}
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		if len(starts) != n {
			return fmt.Errorf("%d RunStarted, want %d", len(starts), n)
		}
		for i := 2; i < n; i++ {
			if d := starts[i].Sub(starts[i-2]); d < time.Minute {
				return fmt.Errorf("three starts within %v: %v", d, starts)
			}
		}
		return nil
	})
}

// A worker that dies while running a queue's only admitted run: the run
// keeps its slot while another worker takes it over, so the waiting run
// is not admitted until the taken-over one ends. A cancelled queued run
// leaves the queue.
func TestQueueTakeoverKeepsTheSlotAndCancelLeaves(t *testing.T) {
	onMemstore(t, 44, func(r *rig) error {
		gt, ga := newGate(r.Ex), &gauge{}
		def := gatedDef("taken", gt, ga)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := wfs.AddQueues(workflow.Queue{Name: "q", Concurrency: 1}); err != nil {
			return err
		}
		h1 := r.Mem.Restart()
		ev1 := &events{}
		w1, err := r.worker("w1", h1, wfs, ev1, nil)
		if err != nil {
			return err
		}
		for i := range 3 {
			if err := def.Start(r.Ctx, cl, fmt.Sprintf("r%d", i), i, workflow.OnQueue("q")); err != nil {
				return err
			}
		}
		if err := r.waitEntries("r0 in its step", gt, 1); err != nil {
			return err
		}
		if err := cl.Cancel(r.Ctx, "r2", "not wanted"); err != nil {
			return err
		}
		if _, ok, err := r.Store.QueueRunOf(r.Ctx, "r2"); err != nil || ok {
			return fmt.Errorf("the cancelled queued run is still in its queue (%v, %v)", ok, err)
		}
		h1.Crash()
		w1.Kill(r.Ctx)
		ev2 := &events{}
		w2, err := r.worker("w2", r.WorkerStore(), wfs, ev2, nil)
		if err != nil {
			return err
		}
		defer w2.Stop(r.Ctx)
		if _, err := r.waitEvent("w2 takes r0 over", ev2, workflow.EvAcquired, "r0"); err != nil {
			return err
		}
		if err := r.waitEntries("r0 in its step again", gt, 2); err != nil {
			return err
		}
		e, ok, err := r.Store.QueueRunOf(r.Ctx, "r1")
		if err != nil || !ok || e.Admitted() {
			return fmt.Errorf("r1 while r0 is taken over: %+v ok=%v err=%v, want waiting", e, ok, err)
		}
		gt.release()
		for i := range 2 {
			if _, err := def.Result(r.Ctx, cl, fmt.Sprintf("r%d", i)); err != nil {
				return err
			}
		}
		if most, _ := ga.get(); most != 1 {
			return fmt.Errorf("%d runs ran at once, want 1", most)
		}
		if s, err := cl.Get(r.Ctx, "r2"); err != nil || s.Status != workflow.StatusCancelled {
			return fmt.Errorf("r2: %+v, %v", s, err)
		}
		return nil
	})
}

// A start on a queue nobody declared is refused; a priority without a
// queue too.
func TestQueueStartChecksItsOptions(t *testing.T) {
	onMemstore(t, 45, func(r *rig) error {
		gt, ga := newGate(r.Ex), &gauge{}
		def := gatedDef("opts", gt, ga)
		_, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "a", 1, workflow.OnQueue("nope")); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("start on an undeclared queue: %v, want ErrInvalid", err)
		}
		if err := def.Start(r.Ctx, cl, "b", 1, workflow.WithPriority(3)); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("priority without a queue: %v, want ErrInvalid", err)
		}
		// A queue made through the store (an operator's) serves a client
		// that does not declare it.
		if err := r.Store.PutQueue(r.Ctx, store.QueueSpec{Name: "ops", Concurrency: 1}); err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "c", 1, workflow.OnQueue("ops")); err != nil {
			return err
		}
		e, ok, err := r.Store.QueueRunOf(r.Ctx, "c")
		if err != nil || !ok || e.Queue != "ops" {
			return fmt.Errorf("c's entry: %+v %v %v", e, ok, err)
		}
		return nil
	})
}
