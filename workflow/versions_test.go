package workflow_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// One binary carries several versions of a workflow: each is registered,
// Lookup gives the newest, and the capabilities name every version.
func TestWorkflowsCarrySeveralVersions(t *testing.T) {
	ok := func(*workflow.Ctx, int) (int, error) { return 0, nil }
	v1, v2, v3 := workflow.New("payout", 1, ok), workflow.New("payout", 2, ok), workflow.New("payout", 3, ok)
	other := workflow.New("refund", 7, ok)
	wfs, err := workflow.NewWorkflows(v3, other, v1, v2)
	if err != nil {
		t.Fatal(err)
	}
	if got := wfs.Names(); !slices.Equal(got, []string{"payout", "refund"}) {
		t.Errorf("names %v", got)
	}
	if got := wfs.Versions("payout"); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("versions %v, want [1 2 3]", got)
	}
	if d, ok := wfs.Lookup("payout"); !ok || d != workflow.Workflow(v3) {
		t.Errorf("Lookup gives %v, want the newest (v3)", d)
	}
	if d, ok := wfs.LookupVersion("payout", 1); !ok || d != workflow.Workflow(v1) {
		t.Errorf("LookupVersion(1) gives %v", d)
	}
	if _, ok := wfs.LookupVersion("payout", 4); ok {
		t.Error("LookupVersion(4) found a version never registered")
	}
	want := []string{"workflow:payout@1", "workflow:payout@2", "workflow:payout@3", "workflow:refund@7"}
	if got := wfs.Capabilities(); !slices.Equal(got, want) {
		t.Errorf("capabilities %v, want %v", got, want)
	}
}

// A start is refused with ErrVersionNotCarried only when some worker is
// live and none carries the version: no live worker at all, a worker that
// advertises nothing (an older binary), or a local worker carrying the
// version lets it through; a dead worker's or a stale heartbeat's
// capabilities count for nothing.
func TestStartRefusesAVersionNoLiveWorkerCarries(t *testing.T) {
	onMemstore(t, 43, func(r *rig) error {
		ok := func(_ *workflow.Ctx, in int) (int, error) { return in, nil }
		v1, v2 := workflow.New("pay", 1, ok), workflow.New("pay", 2, ok)
		_, cl, err := r.clientFor(v1, v2)
		if err != nil {
			return err
		}
		in, _ := event.Marshal(1)
		start := func(id string, opts ...workflow.StartOption) error {
			_, err := cl.StartCBOR(r.Ctx, "pay", id, in, opts...)
			return err
		}
		if err := start("nobody-live"); err != nil {
			return fmt.Errorf("no worker live at all: %v, want the start to wait for one", err)
		}
		beat := func(id string, caps []string, opts ...store.HeartbeatOption) error {
			if caps != nil {
				opts = append(opts, store.Advertise(caps))
			}
			_, err := r.Store.Heartbeat(r.Ctx, id, 10, opts...)
			return err
		}
		if err := beat("old", []string{"role:host", workflow.Capability("pay", 1)}); err != nil {
			return err
		}
		if err := start("v2-refused"); !errors.Is(err, workflow.ErrVersionNotCarried) {
			return fmt.Errorf("v2 (the newest) with only a v1 worker live: %v, want ErrVersionNotCarried", err)
		}
		if _, err := r.Store.GetWorld(r.Ctx, "v2-refused"); !errors.Is(err, store.ErrWorldNotFound) {
			return fmt.Errorf("a refused start wrote its run: %v", err)
		}
		if err := start("v1-ok", workflow.WithVersion(1)); err != nil {
			return fmt.Errorf("v1 with a v1 worker live: %v", err)
		}
		if err := start("v3", workflow.WithVersion(3)); !errors.Is(err, workflow.ErrInvalid) {
			return fmt.Errorf("a version the client does not register: %v, want ErrInvalid", err)
		}
		// A v2 worker whose liveness promise ran out, and one whose
		// heartbeat is older than the window, carry nothing.
		if err := beat("dead", []string{workflow.Capability("pay", 2)}, store.AliveAs("inc-1", time.Second)); err != nil {
			return err
		}
		if err := beat("stale", []string{workflow.Capability("pay", 2)}); err != nil {
			return err
		}
		if err := r.Advance(31 * time.Second); err != nil {
			return err
		}
		if err := beat("old", nil); err != nil { // still live, still v1 only
			return err
		}
		// A live process whose binary has v2 but that runs no runs (it
		// advertises roles, the runs' one not among them) carries nothing.
		if err := beat("api-only", []string{"role:api", workflow.Capability("pay", 2)}); err != nil {
			return err
		}
		if err := start("v2-dead"); !errors.Is(err, workflow.ErrVersionNotCarried) {
			return fmt.Errorf("v2 carried by a dead, a stale and an API-only worker only: %v, want ErrVersionNotCarried", err)
		}
		// A worker of this client carrying v2 lets the start through.
		wfs2, err := workflow.NewWorkflows(v1, v2)
		if err != nil {
			return err
		}
		w, err := r.worker("local", r.WorkerStore(), wfs2, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		local, err := workflow.NewClient(r.Store, wfs2, r.Ex, workflow.WithWorkers(w))
		if err != nil {
			return err
		}
		if _, err := local.StartCBOR(r.Ctx, "pay", "v2-local", in); err != nil {
			return fmt.Errorf("v2 from a process whose worker carries it: %v", err)
		}
		// The same start repeated where nobody live carries v2 is the
		// same run, not a refusal.
		if created, err := cl.StartCBOR(r.Ctx, "pay", "v2-local", in); err != nil || created {
			return fmt.Errorf("a repeated v2 start: created %v, %v; want the same run", created, err)
		}
		// An older binary, advertising nothing, carries every version.
		if err := beat("older", nil); err != nil {
			return err
		}
		if err := start("v2-older"); err != nil {
			return fmt.Errorf("v2 with a worker advertising nothing live: %v", err)
		}
		return nil
	})
}
