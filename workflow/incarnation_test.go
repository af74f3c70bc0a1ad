package workflow_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
)

// TestRestartUnderSameWorkerIdFencesTheOldProcess: worker A runs step b
// and is cut off from its renewals (its lease is still unexpired); a new
// process starts under the same worker id A. It takes the run over at
// once at a higher epoch and runs b again, while the old process's
// completion of b is fenced by the store and never recorded, and the old
// process does not take the run back.
func TestRestartUnderSameWorkerIdFencesTheOldProcess(t *testing.T) {
	onMemstore(t, 5, func(r *rig) error {
		tl, g := newTally(), newGate(r.Ex)
		def := gated(tl, g)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		var partitioned atomic.Bool
		hOld := r.Mem.Restart(memstore.WithHook(func(op string) error {
			if op == "renew_leases" && partitioned.Load() {
				return errors.New("partitioned")
			}
			return nil
		}))
		evOld, evNew := &events{}, &events{}
		wOld, err := r.worker("A", hOld, wfs, evOld, func(c *workflow.WorkerConfig) { c.Incarnation = "A-1" })
		if err != nil {
			return err
		}
		defer wOld.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "run", 1); err != nil {
			return err
		}
		if err := r.WaitFor("step b running on the old process", 10*time.Second, func() (bool, error) { return g.entries() == 1, nil }); err != nil {
			return err
		}
		partitioned.Store(true)
		old, ok, err := r.Store.GetLease(r.Ctx, "run")
		if err != nil || !ok || old.Incarnation != "A-1" {
			return fmt.Errorf("the old process's lease %+v, %v, %v", old, ok, err)
		}
		wNew, err := r.worker("A", r.WorkerStore(), wfs, evNew, func(c *workflow.WorkerConfig) { c.Incarnation = "A-2" })
		if err != nil {
			return err
		}
		defer wNew.Stop(r.Ctx)
		if err := r.WaitFor("step b running on the new process too", 10*time.Second, func() (bool, error) { return g.entries() == 2, nil }); err != nil {
			return err
		}
		cur, _, err := r.Store.GetLease(r.Ctx, "run")
		if err != nil {
			return err
		}
		if cur.Epoch <= old.Epoch || cur.Incarnation != "A-2" {
			return fmt.Errorf("the new process's lease %+v: want A-2 above the old epoch %d", cur, old.Epoch)
		}
		if _, fenced := evOld.find(workflow.EvFenced, "run"); fenced {
			return errors.New("the old process stopped before its write was attempted: the test would not show the store's fence")
		}
		g.release()
		if got, err := def.Result(r.Ctx, cl, "run"); err != nil || got != 23 {
			return fmt.Errorf("result %d, %v; want 23", got, err)
		}
		if err := r.WaitFor("the old process fenced", 10*time.Second, func() (bool, error) {
			_, ok := evOld.find(workflow.EvFenced, "run")
			return ok, nil
		}); err != nil {
			return err
		}
		ev, _ := evOld.find(workflow.EvFenced, "run")
		if !errors.Is(ev.Err, store.ErrFenced) || ev.Epoch != old.Epoch {
			return fmt.Errorf("the old process's fence %+v (err %v), want store.ErrFenced at epoch %d", ev, ev.Err, old.Epoch)
		}
		if got := wOld.Runs(); len(got) != 0 {
			return fmt.Errorf("the old process still holds %v", got)
		}
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.EventType == event.StepCompleted && e.StepID == "b" && e.LogicalAttemptID == 1 {
				return errors.New("the old process's StepCompleted(b, 1) was recorded")
			}
		}
		return sameShapes(evs, []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "b", 1},
			{event.StepStarted, "b", 2}, {event.StepCompleted, "b", 2},
			{event.StepStarted, "c", 1}, {event.StepCompleted, "c", 1},
			{event.RunCompleted, "", 1},
		})
	})
}
