package plane_test

import (
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// TestAnUnstampedSeedOfANamedVersionMakesARestorableWorld: a state that
// records no version (a one-version binary wrote it), taken with StateAt
// by a binary carrying two versions (which names the version, 2, from
// the journal), seeds a new world. The seeded world has no journal to
// name its version, so its state must record it: the world restores on
// v2. Before, its snapshot stayed unstamped and every restore refused
// with ErrVersionUnknown, leaving the world unrunnable.
func TestAnUnstampedSeedOfANamedVersionMakesARestorableWorld(t *testing.T) {
	forEachBackend(t, 66, "seed-version", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		const id = "u"
		if _, _, err := unstampedSnapshotOn(r, id); err != nil {
			return err
		}
		both := bothKernels(false)
		ops, err := plane.NewOps(st, both)
		if err != nil {
			return err
		}
		at, err := ops.StateAt(ctx, id, 1)
		if err != nil || at.Version != 2 {
			return fmt.Errorf("StateAt = version %d, %v; want 2", at.Version, err)
		}
		if _, err := ops.WorldCreateFromSeed(ctx, universe, "seeded", at); err != nil {
			return fmt.Errorf("create from seed: %v", err)
		}
		snap, _, err := st.ActiveSnapshot(ctx, "seeded")
		if err != nil {
			return err
		}
		if v := world.StateVersion(snap.State); v != 2 {
			return fmt.Errorf("the seeded world's state records version %d, want 2", v)
		}
		inst, _, err := plane.Restore(ctx, st, both, "seeded")
		if err != nil {
			return fmt.Errorf("restore of the seeded world: %v", err)
		}
		if v := inst.(interface{ Version() uint64 }).Version(); v != 2 {
			return fmt.Errorf("the seeded world restored on version %d, want 2", v)
		}
		return nil
	})
}
