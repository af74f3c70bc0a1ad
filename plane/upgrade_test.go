package plane_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// counterV2 is version 2 of the counter: N becomes Total, and the keys
// are kept.
type counterV2 struct {
	Total    int64
	Seen     []string
	Upgraded bool
}

func counterV2Def() *world.Def[counterV2] {
	d := world.New[counterV2](counterDef().Name(), 2)
	world.On(d, func(c *world.Ctx, s *counterV2, a Add) error {
		s.Total += a.By
		s.Seen = append(s.Seen, a.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counterV2, _ Get) error {
		c.Reply(s.Total)
		return nil
	})
	return d
}

// bothKernels carry v1 and v2 of the counter; fail makes the upgrade
// function fail.
func bothKernels(fail bool) plane.Kernels {
	return plane.Kernels{universe: world.Versions(world.Upgrade(counterDef(), counterV2Def(), func(s counter) (counterV2, error) {
		if fail {
			return counterV2{}, errors.New("this upgrade cannot migrate the counter")
		}
		return counterV2{Total: s.N, Seen: s.Seen, Upgraded: true}, nil
	}))}
}

func v2Kernels() plane.Kernels { return plane.Kernels{universe: counterV2Def().Kernel()} }

// sendAdds sends adds with keys k<from>…k<to-1>, each By 1.
func sendAdds(r *rig, c *plane.Client, id string, from, to int) error {
	for i := from; i < to; i++ {
		if _, err := c.Send(r.Ctx, id, Add{By: 1, Key: fmt.Sprint("k", i)}, fmt.Sprint("k", i)); err != nil {
			return err
		}
	}
	return nil
}

func keys(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprint("k", i))
	}
	return out
}

// TestWorldUpgradeEndToEnd (every backend): a world written by v1 is
// upgraded while input keeps arriving: no input is lost or applied twice,
// the order holds, the journal has one WorldUpgraded record with v1
// records below it and v2 records above, and the world is snapshotted at
// its height. A host that carries v2 alone takes the world over from that
// snapshot. The state at a height below the upgrade, and a fork there, are
// v1's.
func TestWorldUpgradeEndToEnd(t *testing.T) {
	forEachBackend(t, 61, "world-upgrade", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		const id = "up"
		if err := createAssigned(ctx, st, id, "A"); err != nil {
			return err
		}
		// A carries v1 only: the world starts on v1.
		a, err := plane.StartHost(ctx, r.Root, r.hostConfig("A", r.handle(nil), nil))
		if err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: r.Ex})
		if err := sendAdds(r, c, id, 0, 10); err != nil {
			return err
		}
		if err := r.drained(id); err != nil {
			return err
		}
		a.Stop(ctx)

		// B carries both; input arrives before and after the upgrade.
		if err := st.Assign(ctx, id, store.Assignment{DesiredWorker: "B", Reason: "test"}, nil); err != nil {
			return err
		}
		cfgB := r.hostConfig("B", r.handle(nil), nil)
		cfgB.Kernels = bothKernels(false)
		// No periodic snapshot falls at the upgrade by chance: the one
		// there is the upgrade's own.
		cfgB.SnapshotEvery = 1000
		stB := cfgB.Store.(*handle)
		b, err := plane.StartHost(ctx, r.Root, cfgB)
		if err != nil {
			return err
		}
		ops, err := plane.NewOps(st, bothKernels(false))
		if err != nil {
			return err
		}
		if err := sendAdds(r, c, id, 10, 20); err != nil {
			return err
		}
		u, err := ops.UpgradeWorld(ctx, id, 2)
		if err != nil || u.Status != plane.UpgradeRequested || u.From != 1 {
			return fmt.Errorf("UpgradeWorld = %+v, %v", u, err)
		}
		if again, err := ops.UpgradeWorld(ctx, id, 2); err != nil || (again.Status != plane.UpgradePending && again.Status != plane.UpgradeAlready) {
			return fmt.Errorf("UpgradeWorld again = %+v, %v", again, err)
		}
		if err := sendAdds(r, c, id, 20, 30); err != nil {
			return err
		}
		if err := r.drained(id); err != nil {
			return err
		}
		journal, err := journalOf(ctx, st, id)
		if err != nil {
			return err
		}
		var at uint64
		steps := map[string]int{}
		for _, e := range journal {
			steps[e.StepID]++
			if e.EventType == world.EventWorldUpgraded {
				if u, err := world.RecordUpgraded(e); err == nil && u.From == 1 && u.To == 2 && u.Outcome == world.OutcomeOK {
					if at != 0 {
						return fmt.Errorf("two upgrades, at %d and %d", at, e.RunSeq)
					}
					at = e.RunSeq
				}
			}
		}
		if at == 0 {
			return fmt.Errorf("no upgrade record in %d records", len(journal))
		}
		for _, e := range journal {
			want := uint64(1)
			if e.RunSeq >= at {
				want = 2
			}
			if e.PlanVersion != want {
				return fmt.Errorf("record %d (%s) of version %d, the upgrade is at %d", e.RunSeq, e.EventType, e.PlanVersion, at)
			}
		}
		for s, n := range steps {
			if n != 1 {
				return fmt.Errorf("inbox step %s has %d records", s, n)
			}
		}
		if v, err := plane.WorldVersion(ctx, st, id); err != nil || v != 2 {
			return fmt.Errorf("WorldVersion = %d, %v", v, err)
		}
		if snap, ok, err := st.SnapshotBelow(ctx, id, at+1); err != nil || !ok || snap.Height != at || world.StateVersion(snap.State) != 2 {
			return fmt.Errorf("snapshot at the upgrade's height %d: %+v %v %v", at, snap.Height, ok, err)
		}
		checkV2 := func(kern plane.Kernels, n int) error {
			inst, _, err := plane.Restore(ctx, st, kern, id)
			if err != nil {
				return err
			}
			w, err := world.Load(counterV2Def(), id, inst.Snapshot())
			if err != nil {
				return err
			}
			s, _ := w.Value()
			if s.Total != int64(n) || !s.Upgraded || !slices.Equal(s.Seen, keys(0, n)) {
				return fmt.Errorf("state %+v, want total %d and keys k0…k%d in order", s, n, n-1)
			}
			return nil
		}
		if err := checkV2(bothKernels(false), 30); err != nil {
			return err
		}

		// B dies; C, which carries v2 alone, takes over from the
		// snapshot and never replays a v1 record.
		stB.Crash()
		b.Kill(ctx)
		if err := r.Advance(cfgB.LeaseTTL); err != nil {
			return err
		}
		if err := st.Assign(ctx, id, store.Assignment{DesiredWorker: "C", Reason: "test"}, nil); err != nil {
			return err
		}
		cfgC := r.hostConfig("C", r.handle(nil), nil)
		cfgC.Kernels = v2Kernels()
		cc, err := plane.StartHost(ctx, r.Root, cfgC)
		if err != nil {
			return err
		}
		defer cc.Stop(ctx)
		c2, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: v2Kernels(), Executor: r.Ex})
		if err := sendAdds(r, c2, id, 30, 35); err != nil {
			return err
		}
		if err := r.drained(id); err != nil {
			return err
		}
		if err := checkV2(v2Kernels(), 35); err != nil {
			return fmt.Errorf("after the takeover: %w", err)
		}

		// Below the upgrade: v1's state, and a fork there is a v1 world.
		below, err := ops.StateAt(ctx, id, at-1)
		if err != nil {
			return err
		}
		w1, err := world.Load(counterDef(), id, below)
		if err != nil {
			return fmt.Errorf("the state below the upgrade is not v1's: %w", err)
		}
		if s, _ := w1.Value(); s.N != int64(at-1) {
			return fmt.Errorf("v1 state at %d: N=%d", at-1, s.N)
		}
		if ups, err := ops.StateAt(ctx, id, at); err != nil || world.StateVersion(ups.State) != 2 {
			return fmt.Errorf("state at the upgrade: %v", err)
		}
		if _, err := ops.Derive(ctx, id, journal[at-2:at+1]); err != nil {
			return fmt.Errorf("derive across the upgrade: %w", err)
		}
		if _, err := ops.WorldFork(ctx, id, at-1, "up-fork"); err != nil {
			return err
		}
		if inst, _, err := plane.Restore(ctx, st, bothKernels(false), "up-fork"); err != nil || inst.(interface{ Version() uint64 }).Version() != 1 {
			return fmt.Errorf("the fork below the upgrade: %v", err)
		}
		// A downgrade is refused, nothing enqueued.
		if _, err := ops.UpgradeWorld(ctx, id, 1); !errors.Is(err, plane.ErrDowngrade) || !errors.Is(err, world.ErrDowngrade) {
			return fmt.Errorf("downgrade: %v", err)
		}
		return nil
	})
}

// TestFailingUpgradeLeavesTheWorldServing (every backend): an upgrade
// whose function fails is journaled as an error outcome naming why, the
// world stays on v1 and keeps serving, and a host that lacks the target
// version fails it the same way.
func TestFailingUpgradeLeavesTheWorldServing(t *testing.T) {
	forEachBackend(t, 62, "world-upgrade-fails", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		const id = "uf"
		if err := createAssigned(ctx, st, id, "A"); err != nil {
			return err
		}
		a, err := plane.StartHost(ctx, r.Root, r.hostConfig("A", r.handle(nil), nil))
		if err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: r.Ex})
		if err := sendAdds(r, c, id, 0, 3); err != nil {
			return err
		}
		ops, err := plane.NewOps(st, kernels())
		if err != nil {
			return err
		}
		// A carries v1 alone: the upgrade fails there.
		if _, err := ops.UpgradeWorld(ctx, id, 2); err != nil {
			return err
		}
		if err := sendAdds(r, c, id, 3, 5); err != nil {
			return err
		}
		if err := r.drained(id); err != nil {
			return err
		}
		a.Stop(ctx)

		// B carries both, with an upgrade function that fails.
		if err := st.Assign(ctx, id, store.Assignment{DesiredWorker: "B", Reason: "test"}, nil); err != nil {
			return err
		}
		cfgB := r.hostConfig("B", r.handle(nil), nil)
		cfgB.Kernels = bothKernels(true)
		b, err := plane.StartHost(ctx, r.Root, cfgB)
		if err != nil {
			return err
		}
		defer b.Stop(ctx)
		opsB, _ := plane.NewOps(st, bothKernels(true))
		if u, err := opsB.UpgradeWorld(ctx, id, 2); err != nil || u.Status != plane.UpgradeRequested {
			return fmt.Errorf("a second request after the first failed: %+v %v", u, err)
		}
		if err := sendAdds(r, c, id, 5, 7); err != nil {
			return err
		}
		if err := r.drained(id); err != nil {
			return err
		}
		journal, err := journalOf(ctx, st, id)
		if err != nil {
			return err
		}
		var failures []world.Upgraded
		for _, e := range journal {
			if e.PlanVersion != 1 {
				return fmt.Errorf("record %d of version %d: the world left v1", e.RunSeq, e.PlanVersion)
			}
			if e.EventType == world.EventWorldUpgraded {
				u, err := world.RecordUpgraded(e)
				if err != nil {
					return err
				}
				failures = append(failures, u)
			}
		}
		if len(failures) != 2 || failures[0].Outcome != world.OutcomeError || failures[1].Outcome != world.OutcomeError ||
			failures[0].Error == "" || failures[1].Error == "" {
			return fmt.Errorf("upgrade records %+v, want two failures saying why", failures)
		}
		inst, _, err := plane.Restore(ctx, st, bothKernels(true), id)
		if err != nil {
			return err
		}
		w, err := world.Load(counterDef(), id, inst.Snapshot())
		if err != nil {
			return err
		}
		if s, _ := w.Value(); s.N != 7 || !slices.Equal(s.Seen, keys(0, 7)) {
			return fmt.Errorf("v1 state %+v, want all 7 adds in order", s)
		}
		return nil
	})
}

// TestOnlyHostsCarryingTheVersionGetTheWorld: with one host carrying v1
// alone and one carrying v1 and v2, a world on v2 (or with an upgrade to
// v2 waiting) is placed only on the second, and a host asked to take a
// world on a version it lacks gives it back.
func TestOnlyHostsCarryingTheVersionGetTheWorld(t *testing.T) {
	forEachBackend(t, 63, "world-upgrade-placement", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		old := plane.Capabilities(plane.CapabilitySet{Roles: plane.Roles(), Kernels: kernels()})
		both := plane.Capabilities(plane.CapabilitySet{Roles: plane.Roles(), Kernels: bothKernels(false)})
		if !slices.Contains(both, plane.WorldCapability(universe, 1)) || !slices.Contains(both, plane.WorldCapability(universe, 2)) {
			return fmt.Errorf("capabilities of a binary carrying both: %v", both)
		}
		if _, err := st.Heartbeat(ctx, "old", 100, store.Advertise(old)); err != nil {
			return err
		}
		if _, err := st.Heartbeat(ctx, "new", 100, store.Advertise(both)); err != nil {
			return err
		}
		// A world on v2: its last record is of version 2.
		var v2worlds []string
		for i := range 12 {
			id := fmt.Sprint("p", i)
			v2worlds = append(v2worlds, id)
			if _, err := createOn(r, counterV2Def().Kernel(), id); err != nil {
				return err
			}
		}
		// Worlds on v1 with an upgrade to v2 waiting need both too.
		ops, _ := plane.NewOps(st, bothKernels(false))
		for i := range 12 {
			id := fmt.Sprint("q", i)
			v2worlds = append(v2worlds, id)
			if _, err := createOn(r, counterDef().Kernel(), id); err != nil {
				return err
			}
			if u, err := ops.UpgradeWorld(ctx, id, 2); err != nil || u.Status != plane.UpgradeRequested {
				return fmt.Errorf("upgrade %s: %+v %v", id, u, err)
			}
		}
		o, err := plane.StartOrchestrator(ctx, r.Root, plane.OrchestratorConfig{ID: "o", Store: st, Universes: []string{universe}, LeaseTTL: time.Hour})
		if err != nil {
			return err
		}
		defer o.Stop(ctx)
		if err := r.WaitFor("the orchestrator leads", 10*time.Second, func() (bool, error) { return o.Leader(), nil }); err != nil {
			return err
		}
		if err := o.Reconcile(ctx); err != nil {
			return err
		}
		for _, id := range v2worlds {
			a, ok, err := st.GetAssignment(ctx, id)
			if err != nil || !ok || a.DesiredWorker != "new" {
				return fmt.Errorf("%s placed on %q (%v, %v), want new", id, a.DesiredWorker, ok, err)
			}
		}
		if err := o.Pin(ctx, "p0", "old"); !errors.Is(err, plane.ErrIneligible) {
			return fmt.Errorf("pin of a v2 world to a v1 host: %v", err)
		}

		// A v1 host told to take a v2 world gives it back.
		if err := st.Assign(ctx, "p1", store.Assignment{DesiredWorker: "old", Priority: 1, Reason: plane.ReasonPin}, nil); err != nil {
			return err
		}
		refused := make(chan plane.HostEvent, 16)
		cfg := r.hostConfig("old", r.handle(nil), nil)
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvNoVersion {
				select {
				case refused <- ev:
				default:
				}
			}
		}
		h, err := plane.StartHost(ctx, r.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(ctx)
		var got plane.HostEvent
		if err := r.WaitFor("old refuses p1", 10*time.Second, func() (bool, error) {
			select {
			case got = <-refused:
				return true, nil
			default:
				return false, nil
			}
		}); err != nil {
			return err
		}
		if got.World != "p1" || !errors.Is(got.Err, plane.ErrIneligible) {
			return fmt.Errorf("EvNoVersion %+v", got)
		}
		if head, _ := st.Head(ctx, "p1"); head != 1 {
			return fmt.Errorf("p1's head %d: the v1 host stepped it", head)
		}
		return nil
	})
}

// appendFenced journals rec under a lease of a writer of the test's own,
// given back at once, as a host that stepped the world would have.
func appendFenced(r *rig, id string, rec store.Record) error {
	l, err := r.Store.Acquire(r.Ctx, id, "writer", time.Minute)
	if err != nil {
		return err
	}
	if _, err := r.Store.Append(r.Ctx, id, []store.Record{rec}, store.AppendOptions{Kind: store.WorldStream, Fence: &store.Fence{World: id, Epoch: l.Epoch}}); err != nil {
		return err
	}
	return r.Store.Release(r.Ctx, id, "writer", l.Epoch)
}

// createOn creates world id and journals one step of k (an Add of 1) as
// its first record: a world a binary carrying k wrote.
func createOn(r *rig, k world.Kernel, id string) (world.StepResult, error) {
	if _, err := r.Store.CreateWorld(r.Ctx, universe, id, nil); err != nil {
		return world.StepResult{}, err
	}
	inst, err := k.Load(id, world.Snapshot{})
	if err != nil {
		return world.StepResult{}, err
	}
	res, err := inst.Step(world.Input{Seq: 1, Kind: "event", Payload: mustEvent(Add{By: 1, Key: "a"}), EnqueuedAt: time.Unix(1, 0)}, time.Unix(1, 0))
	if err != nil {
		return world.StepResult{}, err
	}
	return res, appendFenced(r, id, res.Record)
}

func mustEvent(v any) []byte {
	b, err := world.EncodeEvent(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestAnUpgradeToAVersionNoHostCarriesLeavesTheWorldPlaced: during a rolling
// upgrade (hosts carry different versions), an upgrade asked for a version
// no live host carries (a typo, a version not deployed yet) must not take
// the world out of service: it stays placed where its own version runs, so
// its input keeps being served and the host that reaches the upgrade
// records it failed.
func TestAnUpgradeToAVersionNoHostCarriesLeavesTheWorldPlaced(t *testing.T) {
	forEachBackend(t, 64, "world-upgrade-uncarried", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		old := plane.Capabilities(plane.CapabilitySet{Roles: plane.Roles(), Kernels: kernels()})
		both := plane.Capabilities(plane.CapabilitySet{Roles: plane.Roles(), Kernels: bothKernels(false)})
		if _, err := st.Heartbeat(ctx, "old", 100, store.Advertise(old)); err != nil {
			return err
		}
		if _, err := st.Heartbeat(ctx, "new", 100, store.Advertise(both)); err != nil {
			return err
		}
		if _, err := createOn(r, counterDef().Kernel(), "r0"); err != nil {
			return err
		}
		ops, _ := plane.NewOps(st, bothKernels(false))
		if _, err := ops.UpgradeWorld(ctx, "r0", 3); err != nil && !errors.Is(err, plane.ErrInvalid) && !errors.Is(err, world.ErrVersionNotCarried) {
			return fmt.Errorf("upgrade to 3: %v", err)
		}
		o, err := plane.StartOrchestrator(ctx, r.Root, plane.OrchestratorConfig{ID: "o", Store: st, Universes: []string{universe}, LeaseTTL: time.Hour})
		if err != nil {
			return err
		}
		defer o.Stop(ctx)
		if err := r.WaitFor("the orchestrator leads", 10*time.Second, func() (bool, error) { return o.Leader(), nil }); err != nil {
			return err
		}
		if err := o.Reconcile(ctx); err != nil {
			return err
		}
		a, ok, err := st.GetAssignment(ctx, "r0")
		if err != nil || !ok || a.DesiredWorker == "" {
			return fmt.Errorf("r0 unplaced (%+v, %v, %v): an upgrade to a version nobody carries took it out of service", a, ok, err)
		}
		if n := o.Unplaced(); n != 0 {
			return fmt.Errorf("%d worlds unplaced", n)
		}
		return nil
	})
}

// TestUnstampedSnapshotRestoresOnTheJournalsVersion (every backend): a
// world a binary carrying v2 alone wrote and snapshotted has a state that
// records no version. A binary carrying v1 and v2 restores it, its fork
// and its state at a height on v2, as the record at the snapshot's height
// says, not on the oldest version it carries; with that record compacted
// away and nothing else to tell, it refuses rather than guess.
func TestUnstampedSnapshotRestoresOnTheJournalsVersion(t *testing.T) {
	forEachBackend(t, 65, "world-upgrade-unstamped", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		const id = "u"
		res, l, err := unstampedSnapshotOn(r, id)
		if err != nil {
			return err
		}
		if world.StateVersion(res.State) != 0 {
			return fmt.Errorf("a single definition's state is stamped %d: the test needs an unstamped one", world.StateVersion(res.State))
		}
		both := bothKernels(false)
		versionOf := func(inst world.Instance) uint64 { return inst.(interface{ Version() uint64 }).Version() }
		inst, _, err := plane.Restore(ctx, st, both, id)
		if err != nil {
			return fmt.Errorf("restore: %v", err)
		}
		if v := versionOf(inst); v != 2 {
			return fmt.Errorf("restored on version %d, want 2 (the journal's)", v)
		}
		ops, err := plane.NewOps(st, both)
		if err != nil {
			return err
		}
		if at, err := ops.StateAt(ctx, id, 1); err != nil || at.Version != 2 {
			return fmt.Errorf("StateAt = version %d, %v; want 2", at.Version, err)
		}
		if _, err := ops.WorldFork(ctx, id, 1, "uf"); err != nil {
			return err
		}
		fork, _, err := plane.Restore(ctx, st, both, "uf")
		if err != nil {
			return fmt.Errorf("restore of the fork: %v", err)
		}
		if v := versionOf(fork); v != 2 {
			return fmt.Errorf("fork restored on version %d, want 2 (its parent's journal's)", v)
		}
		if _, err := st.Compact(ctx, id, l.Epoch, 0); err != nil {
			return err
		}
		if _, _, err := plane.Restore(ctx, st, both, id); !errors.Is(err, world.ErrVersionUnknown) {
			return fmt.Errorf("restore with the record compacted: %v, want ErrVersionUnknown", err)
		}
		return st.Release(ctx, id, "writer", l.Epoch)
	})
}

// unstampedSnapshotOn creates world id with v2's single definition (whose
// state records no version), steps it once and snapshots it at height 1,
// as a binary carrying that one version would have, under a lease of
// "writer" it returns.
func unstampedSnapshotOn(r *rig, id string) (world.StepResult, store.Lease, error) {
	res, err := createOn(r, counterV2Def().Kernel(), id)
	if err != nil {
		return res, store.Lease{}, err
	}
	l, err := r.Store.Acquire(r.Ctx, id, "writer", time.Minute)
	if err != nil {
		return res, l, err
	}
	return res, l, r.Store.PutSnapshot(r.Ctx, id, l.Epoch, store.Snapshot{World: id, Height: 1, State: res.State, StateHash: res.StateHash})
}
