package sqlite

import (
	"context"
	"database/sql"

	"github.com/orrery-run/orrery/store"
)

// fence is the check every world mutation makes inside its own
// transaction: the world exists, and epoch is the epoch of its lease, which
// is held (not released) and unexpired by the store clock. An expired lease
// fences its holder even before anyone takes it over: a paused holder never
// writes.
func (t *wtx) fence(op, world string, epoch uint64) error {
	if world == "" {
		return store.Errorf(op, store.ErrInvalid, "", "empty world")
	}
	var (
		status  string
		holder  sql.NullString
		cur     sql.NullInt64
		expires sql.NullInt64
	)
	found, err := t.queryRow(`SELECT w.status, l.holder, l.epoch, l.expires_at FROM worlds w LEFT JOIN leases l ON l.world = w.id WHERE w.id = ?`,
		[]any{world}, &status, &holder, &cur, &expires)
	if err != nil {
		return err
	}
	switch {
	case !found:
		return store.Errorf(op, store.ErrWorldNotFound, world, "")
	case !cur.Valid:
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: the world was never leased", epoch)
	case uint64(cur.Int64) != epoch:
		return store.Errorf(op, store.ErrFenced, world, "epoch %d, lease epoch %d", epoch, cur.Int64)
	case holder.String == "":
		return store.Errorf(op, store.ErrFenced, world, "epoch %d was released", epoch)
	case expires.Int64 <= t.nowNS:
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: lease expired", epoch)
	}
	return nil
}

// worldStatus reads a world's status; ErrWorldNotFound if it has none.
func (t *wtx) worldStatus(op, world string) (store.WorldStatus, error) {
	var status string
	found, err := t.queryRow(`SELECT status FROM worlds WHERE id = ?`, []any{world}, &status)
	if err != nil {
		return "", err
	}
	if !found {
		return "", store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	return store.WorldStatus(status), nil
}

// requireActive maps a fenced or archived status to its error.
func requireActive(op, world string, status store.WorldStatus) error {
	switch status {
	case store.WorldFenced:
		return store.Errorf(op, store.ErrWorldFenced, world, "")
	case store.WorldArchived:
		return store.Errorf(op, store.ErrWorldArchived, world, "")
	}
	return nil
}

func validStatus(s store.WorldStatus) bool {
	switch s {
	case store.WorldActive, store.WorldFenced, store.WorldArchived:
		return true
	}
	return false
}

// claimWorldID checks that id is free. A world whose journal will start at
// a height (seeded or forked) also needs its stream to be empty.
func (t *wtx) claimWorldID(op, id string, needsEmptyStream bool) error {
	var one int
	found, err := t.queryRow(`SELECT 1 FROM worlds WHERE id = ?`, []any{id}, &one)
	if err != nil {
		return err
	}
	if found {
		return store.Errorf(op, store.ErrWorldExists, id, "")
	}
	if needsEmptyStream {
		head, err := t.head(id)
		if err != nil {
			return err
		}
		if head > 0 {
			return store.Errorf(op, store.ErrWorldExists, id, "its journal stream already has events")
		}
	}
	return nil
}

// seedHead starts a world's (empty) journal at a seed's or fork's height.
func (t *wtx) seedHead(stream string, h uint64) error {
	if _, err := t.exec(`INSERT INTO streams (stream, head) VALUES (?, ?)
		ON CONFLICT (stream) DO UPDATE SET head = excluded.head`, stream, int64(h)); err != nil {
		return err
	}
	t.setHead(stream, int64(h))
	return nil
}

// CreateWorld creates an active world, optionally seeded from a snapshot:
// the snapshot (its World set to the new world, CreatedAt to the store
// clock) becomes the baseline and the journal head is its height.
func (s *Store) CreateWorld(ctx context.Context, universe, world string, seed *store.Snapshot) (store.World, error) {
	const op = "create_world"
	if world == "" {
		return store.World{}, store.Errorf(op, store.ErrInvalid, "", "empty world id")
	}
	var seedCopy store.Snapshot
	if seed != nil {
		seedCopy = *seed
	}
	var out store.World
	err := s.write(ctx, op, world, func(t *wtx) error {
		if err := t.claimWorldID(op, world, seed != nil); err != nil {
			return err
		}
		var baseline any
		if seed != nil {
			baseline = int64(seedCopy.Height)
		}
		if _, err := t.exec(`INSERT INTO worlds (id, universe, status, created_at, baseline_height) VALUES (?, ?, 'active', ?, ?)`,
			world, universe, t.nowNS, baseline); err != nil {
			return err
		}
		if seed != nil {
			if _, err := t.exec(`INSERT INTO snapshots (world, height, state, state_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
				world, int64(seedCopy.Height), seedCopy.State, seedCopy.StateHash, t.nowNS); err != nil {
				return err
			}
			if err := t.seedHead(world, seedCopy.Height); err != nil {
				return err
			}
		}
		out = store.World{ID: world, Universe: universe, Status: store.WorldActive, CreatedAt: fromNS(t.nowNS)}
		return nil
	})
	if err != nil {
		return store.World{}, err
	}
	return out, nil
}

// ForkWorld creates newWorld from src's snapshot at height. The snapshot
// row is copied inside SQLite (the state blob, never the journal), so a
// fork costs the same whatever the source's history length.
func (s *Store) ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (store.World, error) {
	const op = "fork_world"
	if newWorld == "" {
		return store.World{}, store.Errorf(op, store.ErrInvalid, "", "empty world id")
	}
	var out store.World
	err := s.write(ctx, op, newWorld, func(t *wtx) error {
		var universe string
		found, err := t.queryRow(`SELECT universe FROM worlds WHERE id = ?`, []any{src}, &universe)
		if err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrWorldNotFound, src, "fork source")
		}
		var hash string
		found, err = t.queryRow(`SELECT state_hash FROM snapshots WHERE world = ? AND height = ?`, []any{src, int64(height)}, &hash)
		if err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrSnapshotNotFound, src, "no snapshot at height %d", height)
		}
		if err := t.claimWorldID(op, newWorld, true); err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO worlds (id, universe, status, parent_world, parent_snapshot_hash, forked_at_height, created_at, baseline_height)
			VALUES (?, ?, 'active', ?, ?, ?, ?, ?)`,
			newWorld, universe, src, hash, int64(height), t.nowNS, int64(height)); err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO snapshots (world, height, state, state_hash, created_at)
			SELECT ?, height, state, state_hash, ? FROM snapshots WHERE world = ? AND height = ?`,
			newWorld, t.nowNS, src, int64(height)); err != nil {
			return err
		}
		if err := t.seedHead(newWorld, height); err != nil {
			return err
		}
		out = store.World{
			ID: newWorld, Universe: universe, Status: store.WorldActive,
			ParentWorld: src, ParentSnapshotHash: hash, ForkedAtHeight: height,
			CreatedAt: fromNS(t.nowNS),
		}
		return nil
	})
	if err != nil {
		return store.World{}, err
	}
	return out, nil
}

const worldCols = `id, universe, status, parent_world, parent_snapshot_hash, forked_at_height, created_at`

func scanWorld(sc interface{ Scan(...any) error }) (store.World, error) {
	var (
		w       store.World
		status  string
		forked  int64
		created int64
	)
	if err := sc.Scan(&w.ID, &w.Universe, &status, &w.ParentWorld, &w.ParentSnapshotHash, &forked, &created); err != nil {
		return store.World{}, err
	}
	w.Status = store.WorldStatus(status)
	w.ForkedAtHeight = uint64(forked)
	w.CreatedAt = fromNS(created)
	return w, nil
}

// GetWorld reads a world's record.
func (s *Store) GetWorld(ctx context.Context, world string) (store.World, error) {
	const op = "get_world"
	if err := s.read(ctx, op); err != nil {
		return store.World{}, err
	}
	st, err := s.rstmt(ctx, `SELECT `+worldCols+` FROM worlds WHERE id = ?`)
	if err != nil {
		return store.World{}, dbErr(op, world, err)
	}
	w, err := scanWorld(st.QueryRowContext(ctx, world))
	if err == sql.ErrNoRows {
		return store.World{}, store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	if err != nil {
		return store.World{}, dbErr(op, world, err)
	}
	return w, nil
}

// ListWorlds lists a universe's worlds sorted by id, all of them when
// status is "".
func (s *Store) ListWorlds(ctx context.Context, universe string, status store.WorldStatus) ([]store.World, error) {
	const op = "list_worlds"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+worldCols+` FROM worlds
		WHERE universe = ? AND (? = '' OR status = ?) ORDER BY id`, universe, string(status), string(status))
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	var out []store.World
	for rows.Next() {
		w, err := scanWorld(rows)
		if err != nil {
			return nil, dbErr(op, "", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, "", err)
	}
	return out, nil
}

// SetWorldStatus changes a world's status, fenced by epoch.
func (s *Store) SetWorldStatus(ctx context.Context, world string, epoch uint64, status store.WorldStatus) error {
	const op = "set_world_status"
	if !validStatus(status) {
		return store.Errorf(op, store.ErrInvalid, world, "unknown world status %q", status)
	}
	return s.write(ctx, op, world, func(t *wtx) error {
		if err := t.fence(op, world, epoch); err != nil {
			return err
		}
		_, err := t.exec(`UPDATE worlds SET status = ? WHERE id = ?`, string(status), world)
		return err
	})
}
