package plane_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

func assignedTo(env *lab.Env, st store.Store, id string) string {
	a, ok, err := st.GetAssignment(env.Ctx, id)
	if err != nil || !ok {
		return ""
	}
	return a.DesiredWorker
}

// TestOrchestratorPlacesPinsAndMovesWorlds: one orchestrator of two acts
// (the lease); it places every world on the rendezvous winner among live
// workers, leaves pins alone, moves a dead worker's worlds (their new
// holders acquire once the old leases expire), and a drained worker's
// worlds move without waiting for the TTL.
func TestOrchestratorPlacesPinsAndMovesWorlds(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 21, Name: "orchestrator"}, func(env *lab.Env) error {
		base := newStore(env)
		const n = 12
		var ids []string
		for i := range n {
			id := fmt.Sprint("o", i)
			ids = append(ids, id)
			if _, err := base.CreateWorld(env.Ctx, universe, id, nil); err != nil {
				return err
			}
		}
		hosts := map[string]*plane.Host{}
		stores := map[string]store.Store{}
		for _, w := range []string{"A", "B", "C"} {
			stores[w] = base.Restart()
			h, err := plane.StartHost(env.Ctx, env.Root, hostConfig(w, stores[w], nil))
			if err != nil {
				return err
			}
			hosts[w] = h
		}
		cfg := plane.OrchestratorConfig{Store: base, Universes: []string{universe}, LeaseTTL: 2 * time.Second}
		cfg.ID = "o1"
		o1, err := plane.StartOrchestrator(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		cfg.ID = "o2"
		o2, err := plane.StartOrchestrator(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer o2.Stop(env.Ctx)
		pinned := ids[0]
		if err := o1.Pin(env.Ctx, pinned, "C"); err != nil {
			return err
		}
		live := []string{"A", "B", "C"}
		placed := func() (bool, error) {
			for _, id := range ids[1:] {
				if assignedTo(env, base, id) != plane.Place(id, live) {
					return false, nil
				}
			}
			return assignedTo(env, base, pinned) == "C", nil
		}
		if err := testrig.WaitLab(env, "placement", 10*time.Second, placed); err != nil {
			return err
		}
		if o1.Leader() == o2.Leader() {
			return fmt.Errorf("leaders: o1 %v o2 %v; want exactly one", o1.Leader(), o2.Leader())
		}
		held := func() (bool, error) {
			for _, id := range ids {
				want := assignedTo(env, base, id)
				if h, ok := hosts[want]; !ok {
					return false, nil
				} else if _, ok := h.Lease(id); !ok {
					return false, nil
				}
			}
			return true, nil
		}
		if err := testrig.WaitLab(env, "every world held by its assignee", 10*time.Second, held); err != nil {
			return err
		}
		// The acting orchestrator dies: the other takes over after its TTL.
		leader, other := o1, o2
		if o2.Leader() {
			leader, other = o2, o1
		}
		if err := leader.Stop(env.Ctx); err != nil {
			return err
		}
		// Worker B dies: its worlds move to the rendezvous winner among A
		// and C once B's heartbeats age, and are held once its leases expire.
		var bWorlds []string
		for _, id := range ids[1:] {
			if assignedTo(env, base, id) == "B" {
				bWorlds = append(bWorlds, id)
			}
		}
		hosts["B"].Kill(env.Ctx)
		delete(hosts, "B")
		live = []string{"A", "C"}
		if err := testrig.WaitLab(env, "B's worlds moved", 20*time.Second, placed); err != nil {
			return err
		}
		if !other.Leader() {
			return fmt.Errorf("the surviving orchestrator did not take over")
		}
		if err := testrig.WaitLab(env, "moved worlds held", 20*time.Second, held); err != nil {
			return err
		}
		for _, id := range bWorlds {
			if l, _, _ := base.GetLease(env.Ctx, id); l.Epoch != 2 {
				return fmt.Errorf("%s moved at epoch %d, want 2", id, l.Epoch)
			}
		}
		// A planned drain of C: its unpinned worlds move to A at once
		// (released, not expired); the pin stays.
		start := env.Lab.Now()
		if err := hosts["C"].Drain(env.Ctx); err != nil {
			return err
		}
		live = []string{"A"}
		if err := testrig.WaitLab(env, "C drained", 20*time.Second, func() (bool, error) {
			for _, id := range ids[1:] {
				if _, ok := hosts["A"].Lease(id); !ok {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			return err
		}
		if took := env.Lab.Now().Sub(start); took >= 2*time.Second {
			return fmt.Errorf("the drain took %v: the successor waited for the TTL", took)
		}
		if assignedTo(env, base, pinned) != "C" {
			return fmt.Errorf("the pin moved")
		}
		for _, h := range hosts {
			if err := h.Stop(env.Ctx); err != nil {
				return err
			}
		}
		return other.Stop(env.Ctx)
	})
}

// TestPlaceIsStableRendezvous: removing a worker moves only its worlds,
// and every world goes to a worker of the list.
func TestPlaceIsStableRendezvous(t *testing.T) {
	all := []string{"a", "b", "c", "d"}
	less := []string{"a", "b", "d"}
	moved := 0
	for i := range 1000 {
		w := fmt.Sprint("world-", i)
		before, after := plane.Place(w, all), plane.Place(w, less)
		if before != "c" && before != after {
			t.Fatalf("%s moved from %s to %s though %s stayed", w, before, after, before)
		}
		if before == "c" {
			moved++
		}
	}
	if moved < 150 || moved > 350 {
		t.Fatalf("%d of 1000 worlds were on one of four workers", moved)
	}
	if plane.Place("w", nil) != "" {
		t.Fatal("a world was placed on no worker")
	}
}

// TestControllersSurviveAFailedWatch: the first Watch registrations of the
// orchestrator and of the host fail (a transient store error); both retry
// instead of dying silently, so the world is still placed, acquired and
// run.
func TestControllersSurviveAFailedWatch(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 22, Name: "watch-retry"}, func(env *lab.Env) error {
		base := newStore(env)
		if _, err := base.CreateWorld(env.Ctx, universe, "w", nil); err != nil {
			return err
		}
		failing := func() func(string) error {
			failed := 0
			return func(op string) error {
				if op == "watch" && failed < 3 {
					failed++
					return errStoreFault
				}
				return nil
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", base.Restart(memstore.WithHook(failing())), nil))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		o, err := plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{ID: "o",
			Store: base.Restart(memstore.WithHook(failing())), Universes: []string{universe}, LeaseTTL: 2 * time.Second})
		if err != nil {
			return err
		}
		defer o.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: base, Kernels: kernels(), Executor: env.Lab})
		if _, err := c.Send(env.Ctx, "w", Add{By: 2, Key: "a"}, "a"); err != nil {
			return err
		}
		if err := drained(env, base, "w"); err != nil {
			return fmt.Errorf("%w (assigned to %q, host error %v)", err, assignedTo(env, base, "w"), h.Err())
		}
		if h.Err() != nil {
			return fmt.Errorf("the host failed: %v", h.Err())
		}
		_, err = parity(env.Ctx, base, "w")
		return err
	})
}

// TestReconcileReadsAssignmentsInPages: a reconcile pass learns the
// assignments through ListWorkerWorlds pages, one call per page of each
// worker, instead of one GetAssignment per world; it reads one world alone
// only when no worker of the inventory is desired for it (here a pin to a
// worker that never heartbeat), and that pin survives.
func TestReconcileReadsAssignmentsInPages(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 23, Name: "reconcile-pages"}, func(env *lab.Env) error {
		base := newStore(env)
		const n, page = 60, 7
		for i := range n {
			if _, err := base.CreateWorld(env.Ctx, universe, fmt.Sprint("o", i), nil); err != nil {
				return err
			}
		}
		for _, w := range []string{"A", "B", "C"} {
			if _, err := base.Heartbeat(env.Ctx, w, 100); err != nil {
				return err
			}
		}
		if err := base.Assign(env.Ctx, "o0", store.Assignment{DesiredWorker: "Z", Priority: 1, Reason: plane.ReasonPin}, nil); err != nil {
			return err
		}
		ops := map[string]int{}
		counting := false
		st := testrig.NewHandle(base, func(op string) error {
			if counting {
				ops[op]++
			}
			return nil
		})
		o, err := plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{ID: "o", Store: st,
			Universes: []string{universe}, LeaseTTL: 2 * time.Second, ListPage: page})
		if err != nil {
			return err
		}
		defer o.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "every world placed", 5*time.Second, func() (bool, error) {
			for i := range n {
				if assignedTo(env, base, fmt.Sprint("o", i)) == "" {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			return err
		}
		counting = true
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		counting = false
		perWorker := map[string]int{}
		for i := 1; i < n; i++ {
			perWorker[assignedTo(env, base, fmt.Sprint("o", i))]++
		}
		wantPages := 0
		for _, w := range []string{"A", "B", "C"} {
			wantPages += perWorker[w]/page + 1
		}
		if ops["get_assignment"] != 1 || ops["list_worker_worlds"] != wantPages {
			return fmt.Errorf("a pass over %d worlds made %d GetAssignment and %d ListWorkerWorlds calls; want 1 and %d (%v)",
				n, ops["get_assignment"], ops["list_worker_worlds"], wantPages, perWorker)
		}
		if a, ok, err := base.GetAssignment(env.Ctx, "o0"); err != nil || !ok || a.DesiredWorker != "Z" || a.Reason != plane.ReasonPin {
			return fmt.Errorf("the pin to an unknown worker became %+v (%v %v)", a, ok, err)
		}
		return nil
	})
}

// deposedWrites records what an orchestrator's assignment writes returned
// once its store handle was released from a pause.
type deposedWrites struct {
	store.Store
	mu     sync.Mutex
	paused bool
	after  []error
}

func (d *deposedWrites) record(err error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.paused {
		d.after = append(d.after, err)
	}
	return err
}

func (d *deposedWrites) Assign(ctx context.Context, w string, a store.Assignment, by *store.Fence) error {
	return d.record(d.Store.Assign(ctx, w, a, by))
}

func (d *deposedWrites) Unassign(ctx context.Context, w string, by *store.Fence) error {
	return d.record(d.Store.Unassign(ctx, w, by))
}

func (d *deposedWrites) CompareAndAssign(ctx context.Context, w string, prev, next *store.Assignment, by *store.Fence) error {
	return d.record(d.Store.CompareAndAssign(ctx, w, prev, next, by))
}

// TestDeposedOrchestratorWritesNothing: the acting orchestrator is paused
// inside an assignment write for longer than its lease; the other one takes
// over and places the worlds. When the paused one resumes, the store
// refuses its write (ErrFenced: the write carries its lease's fence) and
// it stops acting; the successor's placement stands.
func TestDeposedOrchestratorWritesNothing(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 8, Name: "deposed-orchestrator"}, func(env *lab.Env) error {
		base := newStore(env)
		ids := []string{"d0", "d1", "d2", "d3"}
		for _, id := range ids {
			if _, err := base.CreateWorld(env.Ctx, universe, id, nil); err != nil {
				return err
			}
		}
		heartbeat := func(workers ...string) error {
			for _, w := range workers {
				if _, err := base.Heartbeat(env.Ctx, w, 100); err != nil {
					return err
				}
			}
			return nil
		}
		if err := heartbeat("A", "B"); err != nil {
			return err
		}
		var pause atomic.Bool
		var w1 *deposedWrites
		w1 = &deposedWrites{Store: base.Restart(memstore.WithHook(func(op string) error {
			if (op == "assign" || op == "unassign" || op == "compare_and_assign") && pause.CompareAndSwap(true, false) {
				// The process stops here for ten lease TTLs.
				err := sleep(env, 20*time.Second)
				w1.mu.Lock()
				w1.paused = true
				w1.mu.Unlock()
				return err
			}
			return nil
		}))}
		cfg := plane.OrchestratorConfig{Store: w1, Universes: []string{universe}, LeaseTTL: 2 * time.Second, LiveFor: time.Hour}
		cfg.ID = "o1"
		o1, err := plane.StartOrchestrator(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		live := []string{"A", "B"}
		placed := func() (bool, error) {
			for _, id := range ids {
				if assignedTo(env, base, id) != plane.Place(id, live) {
					return false, nil
				}
			}
			return true, nil
		}
		if err := testrig.WaitLab(env, "placement by o1", 10*time.Second, placed); err != nil {
			return err
		}
		if !o1.Leader() {
			return fmt.Errorf("o1 placed the worlds without leading")
		}
		cfg.ID, cfg.Store = "o2", base
		o2, err := plane.StartOrchestrator(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		// B is drained: o1 starts moving B's worlds and is paused in its
		// first write; o2 takes over once o1's lease expires and moves
		// them all to A.
		pause.Store(true)
		if _, err := base.SetDraining(env.Ctx, "B", true); err != nil {
			return err
		}
		live = []string{"A"}
		if err := testrig.WaitLab(env, "placement by o2", 15*time.Second, placed); err != nil {
			return err
		}
		if !o2.Leader() {
			return fmt.Errorf("o2 placed the worlds without leading")
		}
		// Undrain B: o2 moves worlds back; o1, when it wakes, holds a stale
		// view (B draining) and tries its write under its old fence.
		if _, err := base.SetDraining(env.Ctx, "B", false); err != nil {
			return err
		}
		live = []string{"A", "B"}
		if err := testrig.WaitLab(env, "o1 resumed", 30*time.Second, func() (bool, error) {
			w1.mu.Lock()
			defer w1.mu.Unlock()
			return len(w1.after) > 0, nil
		}); err != nil {
			return err
		}
		w1.mu.Lock()
		after := slices.Clone(w1.after)
		w1.mu.Unlock()
		for i, err := range after {
			if !errors.Is(err, store.ErrFenced) {
				return fmt.Errorf("o1's write %d after its pause returned %v, want ErrFenced", i, err)
			}
		}
		if o1.Leader() {
			return fmt.Errorf("o1 still believes it leads after a fenced write")
		}
		if err := testrig.WaitLab(env, "o2's placement", 10*time.Second, placed); err != nil {
			return err
		}
		if err := o1.Stop(env.Ctx); err != nil {
			return err
		}
		return o2.Stop(env.Ctx)
	})
}

// TestReconcileWritesAssignmentsConcurrently: the assignment writes of one
// reconcile overlap in WriteConcurrency lanes (a drained worker's worlds
// move in a few round trips, not one per world), and not at all with one
// lane; either way every world ends up placed.
func TestReconcileWritesAssignmentsConcurrently(t *testing.T) {
	for _, c := range []struct {
		lanes   int
		overlap bool
	}{{1, false}, {8, true}} {
		res := lab.Run(lab.Config{Seed: 5, Name: fmt.Sprint("reconcile-lanes-", c.lanes)}, func(env *lab.Env) error {
			var mu sync.Mutex
			inFlight, most := 0, 0
			st := newStore(env, memstore.WithHook(func(op string) error {
				if op != "compare_and_assign" {
					return nil
				}
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				err := sleep(env, 20*time.Millisecond) // a store round trip
				mu.Lock()
				inFlight--
				mu.Unlock()
				return err
			}))
			const n = 24
			for i := range n {
				if _, err := st.CreateWorld(env.Ctx, universe, fmt.Sprint("r", i), nil); err != nil {
					return err
				}
			}
			if _, err := st.Heartbeat(env.Ctx, "A", 100); err != nil {
				return err
			}
			o, err := plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{ID: "o", Store: st,
				Universes: []string{universe}, LeaseTTL: 2 * time.Second, WriteConcurrency: c.lanes})
			if err != nil {
				return err
			}
			defer o.Stop(env.Ctx)
			if err := testrig.WaitLab(env, "every world placed", 10*time.Second, func() (bool, error) {
				for i := range n {
					if a, ok, err := st.GetAssignment(env.Ctx, fmt.Sprint("r", i)); err != nil || !ok || a.DesiredWorker != "A" {
						return false, err
					}
				}
				return true, nil
			}); err != nil {
				return err
			}
			mu.Lock()
			peak := most
			mu.Unlock()
			if (peak > 1) != c.overlap {
				return fmt.Errorf("WriteConcurrency %d: at most %d assignment writes in flight together", c.lanes, peak)
			}
			return nil
		})
		if res.Failure != nil {
			t.Fatal(res.Failure)
		}
	}
}

// TestReconcileKeepsPlacementsWhenNoWorkerIsLive: with every heartbeat
// stale (the store slow, not every worker gone), a reconcile leaves the
// placements alone instead of unassigning every world; once a worker is
// live again, placement resumes.
func TestReconcileKeepsPlacementsWhenNoWorkerIsLive(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 9, Name: "reconcile-no-live"}, func(env *lab.Env) error {
		st := newStore(env)
		for i := range 5 {
			if err := createAssigned(env.Ctx, st, fmt.Sprint("k", i), "A"); err != nil {
				return err
			}
		}
		if _, err := st.Heartbeat(env.Ctx, "A", 100); err != nil {
			return err
		}
		o, err := plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{ID: "o", Store: st,
			Universes: []string{universe}, LeaseTTL: 2 * time.Second})
		if err != nil {
			return err
		}
		defer o.Stop(env.Ctx)
		if err := sleep(env, 10*time.Second); err != nil { // A's heartbeat is long stale
			return err
		}
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		for i := range 5 {
			if a, ok, err := st.GetAssignment(env.Ctx, fmt.Sprint("k", i)); err != nil || !ok || a.DesiredWorker != "A" {
				return fmt.Errorf("k%d: assignment %+v %v %v after a reconcile with no live worker", i, a, ok, err)
			}
		}
		if _, err := st.Heartbeat(env.Ctx, "B", 100); err != nil {
			return err
		}
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		for i := range 5 {
			if a, _, err := st.GetAssignment(env.Ctx, fmt.Sprint("k", i)); err != nil || a.DesiredWorker != "B" {
				return fmt.Errorf("k%d: assignment %+v %v once B is live", i, a, err)
			}
		}
		return nil
	})
}

// pinFirstWrite is an orchestrator's store handle under which an operator
// pins the world of the orchestrator's first assignment write, to worker
// Z, just before that write reaches the store: after the reconcile read
// the world's assignment, before it writes its own.
type pinFirstWrite struct {
	store.Store
	operator store.Store
	mu       sync.Mutex
	pinned   string
}

func (p *pinFirstWrite) pinFirst(ctx context.Context, w string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pinned != "" {
		return nil
	}
	p.pinned = w
	return p.operator.Assign(ctx, w, store.Assignment{DesiredWorker: "Z", Priority: 1, Reason: plane.ReasonPin}, nil)
}

func (p *pinFirstWrite) Assign(ctx context.Context, w string, a store.Assignment, by *store.Fence) error {
	if err := p.pinFirst(ctx, w); err != nil {
		return err
	}
	return p.Store.Assign(ctx, w, a, by)
}

func (p *pinFirstWrite) CompareAndAssign(ctx context.Context, w string, prev, next *store.Assignment, by *store.Fence) error {
	if err := p.pinFirst(ctx, w); err != nil {
		return err
	}
	return p.Store.CompareAndAssign(ctx, w, prev, next, by)
}

// TestReconcileKeepsAPinWrittenMeanwhile: an operator pins a world after
// the reconcile read it unassigned and before the reconcile's write: the
// pin stays (the write compares with what was read, and is refused), the
// other worlds of the same pass are placed, and later passes leave the pin
// alone. (Before, the reconcile's write overwrote the pin.)
func TestReconcileKeepsAPinWrittenMeanwhile(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 17, Name: "reconcile-pin-meanwhile"}, func(env *lab.Env) error {
		base := newStore(env)
		ids := []string{"m0", "m1", "m2"}
		for _, id := range ids {
			if _, err := base.CreateWorld(env.Ctx, universe, id, nil); err != nil {
				return err
			}
		}
		if _, err := base.Heartbeat(env.Ctx, "A", 100); err != nil {
			return err
		}
		st := &pinFirstWrite{Store: base.Restart(), operator: base}
		o, err := plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{ID: "o", Store: st,
			Universes: []string{universe}, LeaseTTL: 2 * time.Second, LiveFor: time.Hour, WriteConcurrency: 1})
		if err != nil {
			return err
		}
		defer o.Stop(env.Ctx)
		others := func() (bool, error) {
			st.mu.Lock()
			pinned := st.pinned
			st.mu.Unlock()
			for _, id := range ids {
				if id != pinned && assignedTo(env, base, id) != "A" {
					return false, nil
				}
			}
			return pinned != "", nil
		}
		if err := testrig.WaitLab(env, "the other worlds placed", 10*time.Second, others); err != nil {
			return err
		}
		// Passes after the refused write (each hint starts one) leave
		// the pin alone.
		if err := sleep(env, 10*time.Second); err != nil {
			return err
		}
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		st.mu.Lock()
		pinned := st.pinned
		st.mu.Unlock()
		if a, ok, err := base.GetAssignment(env.Ctx, pinned); err != nil || !ok || a.DesiredWorker != "Z" || a.Reason != plane.ReasonPin {
			return fmt.Errorf("%s: assignment %+v ok=%v err=%v, want the pin to Z written during the reconcile", pinned, a, ok, err)
		}
		return nil
	})
}
