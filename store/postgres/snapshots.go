package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// PutSnapshot implements store.Snapshots: the lease row (FOR SHARE) and
// the stream row (FOR UPDATE, as a Commit locks it: snapshots of one world
// never race) are read under lock with the snapshot stored at the height,
// and contract.Fence and contract.Snapshot decide.
func (s *backend) PutSnapshot(ctx context.Context, world string, epoch uint64, snap store.Snapshot) error {
	const op = "put_snapshot"
	if err := s.begin(op); err != nil {
		return err
	}
	snap.World = world
	var (
		lease          contract.LeaseRow
		found, located bool
		head, now      int64
		existing       string
	)
	return s.twoTrips(ctx, op, world, func(b *batch) {
		lease, found, located, existing = contract.LeaseRow{}, false, false, ""
		b.queue(func(br pgx.BatchResults) error {
			var holder string
			var e, exp int64
			return scanEach(br, []any{&holder, &e, &exp}, func() {
				lease = contract.LeaseRow{Found: true, Holder: holder, Epoch: uint64(e), ExpiresAt: fromNS(exp)}
			})
		}, `SELECT holder, epoch, expires_at_ns FROM leases WHERE world = $1 FOR SHARE`, world)
		b.queue(func(br pgx.BatchResults) error {
			return scanEach(br, []any{&head, &found, &now}, func() { located = true })
		}, `SELECT s.head, EXISTS (SELECT 1 FROM worlds x WHERE x.world = s.stream), now_ns($2)
			FROM streams s WHERE s.stream = $1 FOR UPDATE`, world, s.off())
		b.queue(func(br pgx.BatchResults) error {
			return scanEach(br, []any{&existing}, func() {})
		}, `SELECT state_hash FROM snapshots WHERE world = $1 AND height = $2`, world, int64(snap.Height))
	}, func(b *batch) error {
		if !located {
			found = false
		}
		if err := contract.Fence(op, world, epoch, found, lease, fromNS(now)); err != nil {
			return err
		}
		write, err := contract.Snapshot(op, world, snap, uint64(head), existing)
		if err != nil || !write {
			return err
		}
		b.queue(nil, `INSERT INTO snapshots (world, height, state, state_hash, created_at_ns) VALUES ($1, $2, $3, $4, $5)`,
			world, int64(snap.Height), snap.State, snap.StateHash, now)
		b.queue(nil, `UPDATE streams SET baseline_height = greatest(baseline_height, $2) WHERE stream = $1`, world, int64(snap.Height))
		return nil
	})
}

// ActiveSnapshot implements store.Snapshots.
func (s *backend) ActiveSnapshot(ctx context.Context, world string) (store.Snapshot, bool, error) {
	const op = "active_snapshot"
	if err := s.begin(op); err != nil {
		return store.Snapshot{}, false, err
	}
	return s.snapshotOf(ctx, op, world, `SELECT n.height, n.state, n.state_hash, n.created_at_ns
		FROM worlds x LEFT JOIN streams t ON t.stream = x.world
		LEFT JOIN snapshots n ON n.world = x.world AND n.height = t.baseline_height
		WHERE x.world = $1`, world)
}

// SnapshotBelow implements store.Snapshots.
func (s *backend) SnapshotBelow(ctx context.Context, world string, height uint64) (store.Snapshot, bool, error) {
	const op = "snapshot_below"
	if err := s.begin(op); err != nil {
		return store.Snapshot{}, false, err
	}
	return s.snapshotOf(ctx, op, world, `SELECT n.height, n.state, n.state_hash, n.created_at_ns
		FROM worlds x LEFT JOIN LATERAL (
			SELECT height, state, state_hash, created_at_ns FROM snapshots
			WHERE world = x.world AND height < $2 ORDER BY height DESC LIMIT 1) n ON true
		WHERE x.world = $1`, world, int64(height))
}

// snapshotOf runs query, which selects world's row (height, state, hash,
// creation time) with NULLs where there is no snapshot: ok=false then,
// ErrWorldNotFound when there is no row.
func (s *backend) snapshotOf(ctx context.Context, op, world, query string, args ...any) (store.Snapshot, bool, error) {
	var snap store.Snapshot
	var found bool
	err := s.retry(ctx, op, world, func() error {
		var height, created *int64
		var hash *string
		var state []byte
		err := s.db.QueryRow(ctx, query, args...).Scan(&height, &state, &hash, &created)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		if err != nil {
			return err
		}
		found = height != nil
		if found {
			snap = store.Snapshot{World: world, Height: uint64(*height), State: state, StateHash: *hash, CreatedAt: fromNS(*created)}
		}
		return nil
	})
	return snap, found, err
}

// Compact implements store.Snapshots (see compact): the only path that
// deletes journal events.
func (s *backend) Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error) {
	const op = "compact"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var n int32
	err := s.retry(ctx, op, world, func() error {
		return s.db.QueryRow(ctx, `SELECT compact($1, $2, $3, $4)`, world, int64(epoch), int64(retain), s.off()).Scan(&n)
	})
	return int(n), err
}
