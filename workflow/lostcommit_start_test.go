package workflow_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// amnesicStore's first Spawn answers from a primary that had the run's
// world, which the promoted asynchronous standby it fails over to lost:
// ErrWorldExists, while the world is nowhere to be read.
type amnesicStore struct {
	store.Store
	lies atomic.Int32
}

func (a *amnesicStore) Spawn(ctx context.Context, spec store.SpawnSpec) (store.Spawned, error) {
	if a.lies.Add(-1) >= 0 {
		return store.Spawned{}, store.Errorf("spawn", store.ErrWorldExists, spec.World, "")
	}
	return a.Store.Spawn(ctx, spec)
}

// TestAStartTheStoreContradictsIsMadeAgain: a start told the run exists
// by a store that then cannot find it (it lost the commit between the two
// answers) starts the run, instead of refusing it for good as not found.
func TestAStartTheStoreContradictsIsMadeAgain(t *testing.T) {
	onMemstore(t, 7, func(r *rig) error {
		def := payDef()
		wfs, w, _, err := r.serve("w1", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		am := &amnesicStore{Store: r.Store}
		am.lies.Store(1)
		cl, err := workflow.NewClient(am, wfs, r.Ex)
		if err != nil {
			return err
		}
		raw, err := event.Marshal(payIn{Account: "ann", Amount: 3})
		if err != nil {
			return err
		}
		created, err := cl.StartCBOR(r.Ctx, "pay", "p-1", raw)
		if err != nil || !created {
			return fmt.Errorf("start: created %v, %v; want created", created, err)
		}
		got, err := def.Result(r.Ctx, cl, "p-1")
		if err != nil || got != "ann:3" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		return nil
	})
}
