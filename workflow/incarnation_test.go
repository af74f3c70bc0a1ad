package workflow_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/store"
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
		_, g, def := r.gated()
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		hOld, partitioned := r.partitionable()
		evOld, evNew := &events{}, &events{}
		wOld, err := r.worker("A", hOld, wfs, evOld, func(c *workflow.WorkerConfig) { c.Incarnation = "A-1" })
		if err != nil {
			return err
		}
		defer wOld.Stop(r.Ctx)
		if err := r.startGated(def, cl, "step b running on the old process", g); err != nil {
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
		if err := r.waitEntries("step b running on the new process too", g, 2); err != nil {
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
		ev, err := r.waitEvent("the old process fenced", evOld, workflow.EvFenced, "run")
		if err != nil {
			return err
		}
		if !errors.Is(ev.Err, store.ErrFenced) || ev.Epoch != old.Epoch {
			return fmt.Errorf("the old process's fence %+v (err %v), want store.ErrFenced at epoch %d", ev, ev.Err, old.Epoch)
		}
		if got := wOld.Runs(); len(got) != 0 {
			return fmt.Errorf("the old process still holds %v", got)
		}
		return r.bRanAgainUnrecorded("the old process")
	})
}
