package plane_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// TestRestartUnderSameWorkerFencesPausedPredecessor: host A is frozen
// inside a store call (not dead: its lease is still unexpired) and a new
// host is started under the same worker id A, as an orchestrator replaces
// a stuck instance that keeps its name. The new host takes the world over
// at once, at a higher epoch. When the old host thaws, its frozen commit
// is rejected by the store, it commits nothing more and does not take the
// world back, and the new host keeps running it.
func TestRestartUnderSameWorkerFencesPausedPredecessor(t *testing.T) {
	forEachBackend(t, 12, "restart-same-worker", func(r *rig) error {
		base, ctx := r.Store, r.Ctx
		if err := createAssigned(ctx, base, "z", "A"); err != nil {
			return err
		}
		var mu sync.Mutex // real backends call the hook from many goroutines
		armed, paused, thawed := false, false, false
		frozen := r.Ex.NewParker()
		var blocked []actor.Parker
		hook := func(op string) error {
			mu.Lock()
			if op == "commit" && armed && !paused && !thawed {
				paused = true
				frozen.Unpark()
			}
			if !paused {
				mu.Unlock()
				return nil
			}
			p := r.Ex.NewParker()
			blocked = append(blocked, p)
			mu.Unlock()
			_ = p.Park(ctx)
			return nil
		}
		// What the old host did from its freeze on: commits and
		// acquisitions must not happen; its fencing and its scans after
		// the thaw are what the test waits for.
		var late []plane.HostEvent
		var fencedErrs []error
		syncedAfterThaw := 0
		cfgOld := r.hostConfig("A", r.handle(hook), nil)
		cfgOld.Incarnation = "A-1"
		cfgOld.Observe = func(ev plane.HostEvent) {
			mu.Lock()
			defer mu.Unlock()
			if !paused && !thawed {
				return
			}
			switch ev.Kind {
			case plane.EvCommit, plane.EvAcquired:
				late = append(late, ev)
			case plane.EvFenced:
				if ev.World == "z" {
					fencedErrs = append(fencedErrs, ev.Err)
				}
			case plane.EvSynced:
				if thawed {
					syncedAfterThaw++
				}
			}
		}
		old, err := plane.StartHost(ctx, r.Root, cfgOld)
		if err != nil {
			return err
		}
		defer old.Stop(ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: r.Ex})
		if _, err := c.Send(ctx, "z", Add{By: 1, Key: "1"}, "1"); err != nil {
			return err
		}
		if err := r.drained("z"); err != nil {
			return err
		}
		oldEpoch, ok := old.Lease("z")
		if !ok {
			return fmt.Errorf("the old host does not hold z")
		}
		// Freeze the old host at its next commit: the whole worker stops,
		// renewals included, with its lease unexpired.
		mu.Lock()
		armed = true
		mu.Unlock()
		if _, err := c.Send(ctx, "z", Add{By: 2, Key: "2"}, "2"); err != nil {
			return err
		}
		if err := frozen.Park(ctx); err != nil {
			return err
		}
		// The replacement: same worker id, a new process.
		cfgNew := r.hostConfig("A", r.handle(nil), nil)
		cfgNew.Incarnation = "A-2"
		fresh, err := plane.StartHost(ctx, r.Root, cfgNew)
		if err != nil {
			return err
		}
		defer fresh.Stop(ctx)
		var newEpoch uint64
		if err := r.WaitFor("the new host takes z over", 10*time.Second, func() (bool, error) {
			newEpoch, ok = fresh.Lease("z")
			return ok, nil
		}); err != nil {
			return err
		}
		if newEpoch <= oldEpoch {
			return fmt.Errorf("the new host holds z at epoch %d, the frozen one at %d: a new incarnation must raise it", newEpoch, oldEpoch)
		}
		if err := r.drained("z"); err != nil {
			return err
		}
		mu.Lock()
		paused, thawed = false, true
		thaw := blocked
		blocked = nil
		mu.Unlock()
		for _, p := range thaw { // the old host resumes, its frozen commit first
			p.Unpark()
		}
		if err := r.WaitFor("the old host's thawed commit fenced by the store, then the old host failed", 10*time.Second, func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			storeFenced := false
			for _, err := range fencedErrs {
				storeFenced = storeFenced || errors.Is(err, store.ErrFenced)
			}
			// Its next heartbeat is refused (the new incarnation's
			// retired it), and a superseded host stops acting at once
			// (TestASupersededHostStopsActing): it fails, rather than
			// scanning on and trying to take z back.
			return storeFenced && errors.Is(old.Err(), plane.ErrHostFailed), nil
		}); err != nil {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Errorf("%w: fenced with %v, %d scans", err, fencedErrs, syncedAfterThaw)
		}
		if _, err := c.Send(ctx, "z", Add{By: 3, Key: "3"}, "3"); err != nil {
			return err
		}
		if err := r.drained("z"); err != nil {
			return err
		}
		mu.Lock()
		ran := late
		mu.Unlock()
		if len(ran) != 0 {
			return fmt.Errorf("the old host committed or acquired after it froze: %+v", ran)
		}
		if e, ok := fresh.Lease("z"); !ok || e != newEpoch {
			return fmt.Errorf("the new host holds z at %d (ok=%v), want still %d", e, ok, newEpoch)
		}
		l, _, err := base.GetLease(ctx, "z")
		if err != nil {
			return err
		}
		if l.Holder != "A" || l.Incarnation != "A-2" || l.Epoch != newEpoch {
			return fmt.Errorf("lease %+v, want A/A-2 at epoch %d", l, newEpoch)
		}
		snap, err := parity(ctx, base, "z")
		if err != nil {
			return err
		}
		v, _ := value(snap, "z")
		if v.N != 6 {
			return fmt.Errorf("state %+v, want N=6 (each add once)", v)
		}
		return nil
	})
}

// TestOrchestratorRestartedUnderItsIDTakesTheLeadAtANewEpoch: a node's
// orchestrator is started again under the same ID while the old one still
// holds the orchestrator lease (frozen, say). The new one leads at once at
// a higher epoch; a placement written under the old one's fence is
// rejected, the old one stops leading and does not take the lead back.
func TestOrchestratorRestartedUnderItsIDTakesTheLeadAtANewEpoch(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 9, Name: "orchestrator-restart"}, func(env *lab.Env) error {
		ctx := env.Ctx
		base := newStore(env)
		if _, err := base.CreateWorld(ctx, universe, "d0", nil); err != nil {
			return err
		}
		if _, err := base.Heartbeat(ctx, "A", 100); err != nil {
			return err
		}
		cfg := plane.OrchestratorConfig{ID: "node-1", Incarnation: "node-1/a", Store: base, Universes: []string{universe},
			LeaseTTL: 2 * time.Second, LiveFor: time.Hour}
		old, err := plane.StartOrchestrator(ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer old.Stop(ctx)
		if err := testrig.WaitLab(env, "the old orchestrator leads", 10*time.Second, func() (bool, error) { return old.Leader(), nil }); err != nil {
			return err
		}
		first, _, err := base.GetLease(ctx, plane.OrchestratorWorld)
		if err != nil {
			return err
		}
		cfg.Incarnation = "node-1/b"
		fresh, err := plane.StartOrchestrator(ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer fresh.Stop(ctx)
		// Well within the old lease's TTL: only the incarnation differs.
		if err := testrig.WaitLab(env, "the new orchestrator leads", time.Second, func() (bool, error) { return fresh.Leader(), nil }); err != nil {
			return err
		}
		cur, _, err := base.GetLease(ctx, plane.OrchestratorWorld)
		if err != nil {
			return err
		}
		if cur.Epoch <= first.Epoch || cur.Incarnation != "node-1/b" {
			return fmt.Errorf("orchestrator lease %+v after the restart, want node-1/b above epoch %d", cur, first.Epoch)
		}
		err = base.Assign(ctx, "d0", store.Assignment{DesiredWorker: "A"}, &store.Fence{World: plane.OrchestratorWorld, Epoch: first.Epoch})
		if !errors.Is(err, store.ErrFenced) {
			return fmt.Errorf("an assignment under the old orchestrator's fence: %v, want ErrFenced", err)
		}
		// Several TTLs on, the old one has tried to renew and to acquire
		// again: it does not lead, and the new one still does.
		if err := sleep(env, 5*cfg.LeaseTTL); err != nil {
			return err
		}
		if old.Leader() || !fresh.Leader() {
			return fmt.Errorf("after the restart: old leads=%v, new leads=%v; want only the new", old.Leader(), fresh.Leader())
		}
		if l, _, err := base.GetLease(ctx, plane.OrchestratorWorld); err != nil || l.Incarnation != "node-1/b" || l.Epoch != cur.Epoch {
			return fmt.Errorf("orchestrator lease %+v (%v), want node-1/b still at epoch %d", l, err, cur.Epoch)
		}
		return nil
	})
}
