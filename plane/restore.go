package plane

import (
	"context"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// Kernels maps a universe to the definition of its worlds: every world of
// a universe runs the same kernel.
type Kernels map[string]world.Kernel

func (k Kernels) of(op string, w store.World) (world.Kernel, error) {
	kern, ok := k[w.Universe]
	if !ok || kern == nil {
		return nil, errorf(op, ErrNoKernel, w.ID, detail("universe %q", w.Universe))
	}
	return kern, nil
}

// readPage bounds one journal read while restoring.
const readPage = 1024

// Baseline returns the snapshot a world restores from: its active
// snapshot, or the initial state at height 0. A fork's baseline at its fork
// point is the source's state with nothing awaited (world.Kernel.ForkState):
// the source's effects and timers stay with the source, so the fork must
// not wait for them. Every reader of a world (host, client, tests) goes
// through here, so they agree on it.
func Baseline(ctx context.Context, st store.Store, kern world.Kernel, rec store.World) (world.Snapshot, error) {
	snap, ok, err := st.ActiveSnapshot(ctx, rec.ID)
	if err != nil || !ok {
		return world.Snapshot{}, err
	}
	return baselineOf(ctx, st, kern, rec, snap)
}

// baselineBelow is the baseline from which the step at height can be
// derived again: the highest stored snapshot below it (which need not be
// the active one), or the initial state at height 0.
func baselineBelow(ctx context.Context, st store.Store, kern world.Kernel, rec store.World, height uint64) (world.Snapshot, error) {
	snap, ok, err := st.SnapshotBelow(ctx, rec.ID, height)
	if err != nil || !ok {
		return world.Snapshot{}, err
	}
	return baselineOf(ctx, st, kern, rec, snap)
}

func baselineOf(ctx context.Context, st store.Store, kern world.Kernel, rec store.World, snap store.Snapshot) (world.Snapshot, error) {
	v, err := snapshotVersion(ctx, st, kern, rec, snap)
	if err != nil {
		return world.Snapshot{}, err
	}
	base := world.Snapshot{Height: snap.Height, State: snap.State, Version: v}
	if rec.ParentWorld != "" && snap.Height == rec.ForkedAtHeight && snap.StateHash == rec.ParentSnapshotHash {
		var err error
		if base.State, err = kern.ForkState(snap.State); err != nil {
			return world.Snapshot{}, err
		}
	}
	return base, nil
}

// ReadTail reads world's journal after height, all of it.
func ReadTail(ctx context.Context, st store.Store, id string, after uint64) ([]event.Envelope, error) {
	var tail []event.Envelope
	for {
		page, err := st.Read(ctx, id, after, readPage)
		if err != nil {
			return nil, err
		}
		tail = append(tail, page...)
		if len(page) < readPage {
			return tail, nil
		}
		after = page[len(page)-1].RunSeq
	}
}

// Restore rebuilds world id at its journal head: its baseline (Baseline)
// plus the journal tail, replayed by world.Replay, which checks every step
// against its record. It also returns the inbox cursor, which a host that
// holds the lease reads consistently with the journal (nobody else writes
// either).
func Restore(ctx context.Context, st store.Store, kernels Kernels, id string) (world.Instance, uint64, error) {
	rec, err := st.GetWorld(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	kern, err := kernels.of("restore", rec)
	if err != nil {
		return nil, 0, err
	}
	base, err := Baseline(ctx, st, kern, rec)
	if err != nil {
		return nil, 0, err
	}
	tail, err := ReadTail(ctx, st, id, base.Height)
	if err != nil {
		return nil, 0, err
	}
	inst, err := kern.Replay(id, base, tail)
	if err != nil {
		return nil, 0, err
	}
	cursor, err := st.Cursor(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	return inst, cursor, nil
}
