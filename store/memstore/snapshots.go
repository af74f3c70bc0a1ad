package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// PutSnapshot implements store.Snapshots.
func (s *backend) PutSnapshot(ctx context.Context, world string, epoch uint64, snap store.Snapshot) error {
	const op = "put_snapshot"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	now := s.now()
	if err := s.st.fence(op, world, epoch, now); err != nil {
		return err
	}
	write, err := s.st.planSnapshot(op, world, snap, s.st.head(world))
	if err != nil {
		return err
	}
	s.st.applySnapshot(world, snap, write, now)
	return nil
}

// planSnapshot decides a snapshot against head (mu held).
func (st *state) planSnapshot(op, world string, snap store.Snapshot, head uint64) (write bool, err error) {
	existing := ""
	if prev, ok := st.worlds[world].snapshots[snap.Height]; ok {
		existing = prev.StateHash
	}
	return contract.Snapshot(op, world, snap, head, existing)
}

// applySnapshot stores snap when write, and makes it the active baseline
// when contract.Rebase says so.
func (st *state) applySnapshot(world string, snap store.Snapshot, write bool, now time.Time) {
	w := st.worlds[world]
	if write {
		snap.World = world
		snap.State = cloneBytes(snap.State)
		snap.CreatedAt = now
		w.snapshots[snap.Height] = snap
	}
	if contract.Rebase(w.baseline, w.hasBaseline, snap.Height) {
		w.hasBaseline, w.baseline = true, snap.Height
	}
}

// ActiveSnapshot implements store.Snapshots.
func (s *backend) ActiveSnapshot(ctx context.Context, world string) (store.Snapshot, bool, error) {
	const op = "active_snapshot"
	if err := s.begin(ctx, op); err != nil {
		return store.Snapshot{}, false, err
	}
	defer s.end()
	w, ok := s.st.worlds[world]
	if !ok {
		return store.Snapshot{}, false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	if !w.hasBaseline {
		return store.Snapshot{}, false, nil
	}
	snap := w.snapshots[w.baseline]
	snap.State = cloneBytes(snap.State)
	return snap, true, nil
}

// SnapshotBelow implements store.Snapshots.
func (s *backend) SnapshotBelow(ctx context.Context, world string, height uint64) (store.Snapshot, bool, error) {
	const op = "snapshot_below"
	if err := s.begin(ctx, op); err != nil {
		return store.Snapshot{}, false, err
	}
	defer s.end()
	w, ok := s.st.worlds[world]
	if !ok {
		return store.Snapshot{}, false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	var best store.Snapshot
	found := false
	for h, snap := range w.snapshots {
		if h < height && (!found || h > best.Height) {
			best, found = snap, true
		}
	}
	best.State = cloneBytes(best.State)
	return best, found, nil
}

// Compact implements store.Snapshots.
func (s *backend) Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error) {
	const op = "compact"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.end()
	if err := s.st.fence(op, world, epoch, s.now()); err != nil {
		return 0, err
	}
	w := s.st.worlds[world]
	cut, ok := contract.CompactTo(w.baseline, w.hasBaseline, retain)
	if !ok {
		return 0, nil
	}
	str := s.st.stream(world)
	n := sort.Search(len(str.records), func(i int) bool { return str.records[i].RunSeq > cut })
	for _, r := range str.records[:n] {
		if r.PersistedAt.After(str.floorAt) {
			str.floorAt = r.PersistedAt
		}
	}
	str.floor = max(str.floor, cut)
	str.records = append([]store.Record(nil), str.records[n:]...)
	return n, nil
}
