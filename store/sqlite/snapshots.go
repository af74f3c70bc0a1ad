package sqlite

import (
	"context"
	"database/sql"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// putSnapshot stores a snapshot inside a fenced request (PutSnapshot,
// Commit) against the journal head as the request sees it
// (contract.Snapshot), and makes it the active baseline if its height is
// above the current one. snap.World is ignored and CreatedAt is the store
// clock.
func (t *wtx) putSnapshot(op, world string, snap store.Snapshot, head int64) error {
	var existing string
	if _, err := t.queryRow(`SELECT state_hash FROM snapshots WHERE world = ? AND height = ?`, []any{world, int64(snap.Height)}, &existing); err != nil {
		return err
	}
	write, err := contract.Snapshot(op, world, snap, uint64(head), existing)
	if err != nil || !write {
		return err
	}
	if _, err := t.exec(`INSERT INTO snapshots (world, height, state, state_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
		world, int64(snap.Height), snap.State, snap.StateHash, t.nowNS); err != nil {
		return err
	}
	_, err = t.exec(`UPDATE worlds SET baseline_height = ? WHERE id = ? AND (baseline_height IS NULL OR baseline_height < ?)`,
		int64(snap.Height), world, int64(snap.Height))
	return err
}

// PutSnapshot stores a snapshot, fenced by epoch.
func (s *backend) PutSnapshot(ctx context.Context, world string, epoch uint64, snap store.Snapshot) error {
	_, err := s.commit(ctx, "put_snapshot", world, epoch, store.CommitBatch{Snapshot: &snap}, sideEffects)
	return err
}

// ActiveSnapshot returns the active baseline (ok=false if none).
func (s *backend) ActiveSnapshot(ctx context.Context, world string) (store.Snapshot, bool, error) {
	const op = "active_snapshot"
	if err := s.read(ctx, op); err != nil {
		return store.Snapshot{}, false, err
	}
	return s.snapshotOf(ctx, op, world, `w.baseline_height`)
}

// SnapshotBelow returns the highest stored snapshot below height.
func (s *backend) SnapshotBelow(ctx context.Context, world string, height uint64) (store.Snapshot, bool, error) {
	const op = "snapshot_below"
	if err := s.read(ctx, op); err != nil {
		return store.Snapshot{}, false, err
	}
	return s.snapshotOf(ctx, op, world, `(SELECT max(height) FROM snapshots WHERE world = w.id AND height < ?)`, int64(height))
}

// snapshotOf reads world's snapshot at the height the SQL expression at
// gives (over worlds w; its arguments come first): ok=false when it gives
// none, ErrWorldNotFound when there is no such world.
func (s *backend) snapshotOf(ctx context.Context, op, world, at string, atArgs ...any) (store.Snapshot, bool, error) {
	var (
		snap            store.Snapshot
		height, created sql.NullInt64
		hasState        bool
		hash            sql.NullString
	)
	found, err := s.queryRow(ctx, `SELECT s.height, s.state, s.state IS NOT NULL, s.state_hash, s.created_at
		FROM worlds w LEFT JOIN snapshots s ON s.world = w.id AND s.height = `+at+` WHERE w.id = ?`, append(atArgs, world),
		&height, &snap.State, &hasState, &hash, &created)
	if err != nil {
		return store.Snapshot{}, false, dbErr(op, world, err)
	}
	if !found {
		return store.Snapshot{}, false, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	if !hash.Valid {
		return store.Snapshot{}, false, nil
	}
	snap.StateHash = hash.String
	snap.World, snap.Height, snap.CreatedAt = world, uint64(height.Int64), fromNS(created.Int64)
	snap.State = blob(snap.State, hasState)
	return snap, true, nil
}

// Compact deletes the world's journal entries with runSeq <= baseline
// height - retain (contract.CompactTo), fenced by epoch.
//
// Immutability: the events table's delete trigger aborts any DELETE that no
// compaction gate covers. Compact opens the gate (a row of compaction_gate
// naming the stream and the highest runSeq it may delete), deletes, and
// closes the gate again, all inside its savepoint of the group transaction:
// the gate is never committed, so no other statement ever passes it. The
// idempotency keys (event_keys) are not compacted: a retried append of a
// compacted event is still answered with its metadata.
func (s *backend) Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error) {
	const op = "compact"
	var removed int
	err := s.write(ctx, op, world, func(t *wtx) error {
		removed = 0
		if err := t.fence(op, world, epoch); err != nil {
			return err
		}
		var baseline sql.NullInt64
		if _, err := t.queryRow(`SELECT baseline_height FROM worlds WHERE id = ?`, []any{world}, &baseline); err != nil {
			return err
		}
		upto, ok := contract.CompactTo(uint64(baseline.Int64), baseline.Valid, retain)
		if !ok {
			return nil
		}
		// The head survives the events it may remove: record it as the
		// stream's floor first. The compaction floor (compacted_to, and the
		// latest persistedAt removed) rises in the same savepoint, so no
		// reader ever sees the events gone and the floor still below them.
		head, err := t.head(world)
		if err != nil {
			return err
		}
		var removedAt sql.NullInt64
		if _, err := t.queryRow(`SELECT MAX(persisted_at) FROM events WHERE stream = ? AND run_seq <= ?`,
			[]any{world, int64(upto)}, &removedAt); err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO streams (stream, head, compacted_to, compacted_at) VALUES (?1, ?2, ?3, ?4)
			ON CONFLICT (stream) DO UPDATE SET head = MAX(head, excluded.head),
				compacted_to = MAX(compacted_to, excluded.compacted_to),
				compacted_at = COALESCE(MAX(compacted_at, excluded.compacted_at), compacted_at, excluded.compacted_at)`,
			world, head, int64(upto), removedAt); err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO compaction_gate (stream, upto) VALUES (?, ?)`, world, int64(upto)); err != nil {
			return err
		}
		res, err := t.exec(`DELETE FROM events WHERE stream = ? AND run_seq <= ?`, world, int64(upto))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if _, err := t.exec(`DELETE FROM compaction_gate WHERE stream = ?`, world); err != nil {
			return err
		}
		removed = int(n)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return removed, nil
}
