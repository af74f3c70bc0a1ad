package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
)

// ---- worlds ----

// CreateWorld implements store.Worlds (see create_world).
func (s *Store) CreateWorld(ctx context.Context, universe, world string, seed *store.Snapshot) (store.World, error) {
	const op = "create_world"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	if world == "" || !validText(world) || !validText(universe) {
		return store.World{}, store.Errorf(op, store.ErrInvalid, "", "world id %q, universe %q", world, universe)
	}
	var h int64
	var state []byte
	var hash string
	if seed != nil {
		var err error
		if h, err = i64(op, world, "height", seed.Height); err != nil {
			return store.World{}, err
		}
		if !validText(seed.StateHash) {
			return store.World{}, store.Errorf(op, store.ErrInvalid, world, "state hash is not valid UTF-8 text")
		}
		state, hash = seed.State, seed.StateHash
	}
	var created int64
	err := s.retry(ctx, op, world, func() error {
		return s.pool.QueryRow(ctx, `SELECT create_world($1, $2, $3, $4, $5, $6, $7)`,
			universe, world, seed != nil, h, state, hash, s.off()).Scan(&created)
	})
	if err != nil {
		return store.World{}, err
	}
	return store.World{ID: world, Universe: universe, Status: store.WorldActive, CreatedAt: fromNS(created)}, nil
}

// ForkWorld implements store.Worlds (see fork_world): one transaction,
// whose cost is one snapshot row whatever the source's history.
func (s *Store) ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (store.World, error) {
	const op = "fork_world"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	if newWorld == "" || !validText(newWorld) || !validText(src) {
		return store.World{}, store.Errorf(op, store.ErrInvalid, "", "world ids %q, %q", src, newWorld)
	}
	h, err := i64(op, src, "height", height)
	if err != nil {
		return store.World{}, err
	}
	w := store.World{ID: newWorld, Status: store.WorldActive, ParentWorld: src, ForkedAtHeight: height}
	err = s.retry(ctx, op, src, func() error {
		var created int64
		err := s.pool.QueryRow(ctx, `SELECT * FROM fork_world($1, $2, $3, $4)`, src, h, newWorld, s.off()).
			Scan(&w.Universe, &w.ParentSnapshotHash, &created)
		w.CreatedAt = fromNS(created)
		return err
	})
	if err != nil {
		if se, ok := err.(*store.Error); ok && se.Kind == store.ErrWorldExists {
			se.World = newWorld
		}
		return store.World{}, err
	}
	return w, nil
}

const worldCols = `world, universe, status, parent_world, parent_snapshot_hash, forked_at_height, created_at_ns`

func scanWorld(row pgx.CollectableRow) (store.World, error) {
	var w store.World
	var status string
	var height, created int64
	err := row.Scan(&w.ID, &w.Universe, &status, &w.ParentWorld, &w.ParentSnapshotHash, &height, &created)
	w.Status, w.ForkedAtHeight, w.CreatedAt = store.WorldStatus(status), uint64(height), fromNS(created)
	return w, err
}

// GetWorld implements store.Worlds.
func (s *Store) GetWorld(ctx context.Context, world string) (store.World, error) {
	const op = "get_world"
	if err := s.begin(ctx, op); err != nil {
		return store.World{}, err
	}
	var w store.World
	err := s.retry(ctx, op, world, func() error {
		rows, _ := s.pool.Query(ctx, `SELECT `+worldCols+` FROM worlds WHERE world = $1`, world)
		var err error
		w, err = pgx.CollectExactlyOneRow(rows, scanWorld)
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrWorldNotFound, world, "")
		}
		return err
	})
	return w, err
}

// ListWorlds implements store.Worlds.
func (s *Store) ListWorlds(ctx context.Context, universe string, status store.WorldStatus) ([]store.World, error) {
	const op = "list_worlds"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	var out []store.World
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.pool.Query(ctx, `SELECT `+worldCols+` FROM worlds
			WHERE universe = $1 AND ($2 = '' OR status = $2) ORDER BY world`, universe, string(status))
		var err error
		out, err = pgx.CollectRows(rows, scanWorld)
		return err
	})
	return out, err
}

// SetWorldStatus implements store.Worlds (see set_world_status).
func (s *Store) SetWorldStatus(ctx context.Context, world string, epoch uint64, status store.WorldStatus) error {
	const op = "set_world_status"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	switch status {
	case store.WorldActive, store.WorldFenced, store.WorldArchived:
	default:
		return store.Errorf(op, store.ErrInvalid, world, "unknown status %q", status)
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil {
		return err
	}
	return s.retry(ctx, op, world, func() error {
		_, err := s.pool.Exec(ctx, `SELECT set_world_status($1, $2, $3, $4)`, world, e, string(status), s.off())
		return err
	})
}

// ---- snapshots ----

// PutSnapshot implements store.Snapshots (see put_snapshot).
func (s *Store) PutSnapshot(ctx context.Context, world string, epoch uint64, snap store.Snapshot) error {
	const op = "put_snapshot"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil {
		return err
	}
	h, err := i64(op, world, "height", snap.Height)
	if err != nil {
		return err
	}
	if !validText(snap.StateHash) {
		return store.Errorf(op, store.ErrInvalid, world, "state hash is not valid UTF-8 text")
	}
	return s.retry(ctx, op, world, func() error {
		_, err := s.pool.Exec(ctx, `SELECT put_snapshot($1, $2, $3, $4, $5, $6)`, world, e, h, snap.State, snap.StateHash, s.off())
		return err
	})
}

// ActiveSnapshot implements store.Snapshots.
func (s *Store) ActiveSnapshot(ctx context.Context, world string) (store.Snapshot, bool, error) {
	const op = "active_snapshot"
	if err := s.begin(ctx, op); err != nil {
		return store.Snapshot{}, false, err
	}
	var snap store.Snapshot
	var found bool
	err := s.retry(ctx, op, world, func() error {
		var height, created *int64
		var hash *string
		var state []byte
		err := s.pool.QueryRow(ctx, `SELECT n.height, n.state, n.state_hash, n.created_at_ns
			FROM worlds x LEFT JOIN snapshots n ON n.world = x.world AND n.height = x.baseline_height
			WHERE x.world = $1`, world).Scan(&height, &state, &hash, &created)
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
func (s *Store) Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error) {
	const op = "compact"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	e, err := i64(op, world, "epoch", epoch)
	if err != nil {
		return 0, err
	}
	if retain > 1<<63-1 {
		retain = 1<<63 - 1
	}
	var n int32
	err = s.retry(ctx, op, world, func() error {
		return s.pool.QueryRow(ctx, `SELECT compact($1, $2, $3, $4)`, world, e, int64(retain), s.off()).Scan(&n)
	})
	return int(n), err
}

// ---- projector watermarks ----

// GetWatermark implements store.Watermarks (0 when never set).
func (s *Store) GetWatermark(ctx context.Context, projector, stream string) (uint64, error) {
	const op = "get_watermark"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var m int64
	err := s.retry(ctx, op, "", func() error {
		return s.pool.QueryRow(ctx, `SELECT coalesce((SELECT mark FROM watermarks WHERE projector = $1 AND stream = $2), 0)`,
			projector, stream).Scan(&m)
	})
	return uint64(m), err
}

// CASWatermark implements store.Watermarks. A watermark never set is 0.
func (s *Store) CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error {
	const op = "cas_watermark"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	o, err := i64(op, "", "watermark", old)
	if err != nil {
		return err
	}
	nx, err := i64(op, "", "watermark", next)
	if err != nil {
		return err
	}
	if !validText(projector) || !validText(stream) {
		return store.Errorf(op, store.ErrInvalid, "", "projector and stream must be valid UTF-8 text")
	}
	return s.retry(ctx, op, "", func() error {
		var sql string
		if o == 0 {
			sql = `INSERT INTO watermarks AS w (projector, stream, mark) VALUES ($1, $2, $4)
				ON CONFLICT (projector, stream) DO UPDATE SET mark = EXCLUDED.mark WHERE w.mark = $3`
		} else {
			sql = `UPDATE watermarks SET mark = $4 WHERE projector = $1 AND stream = $2 AND mark = $3`
		}
		tag, err := s.pool.Exec(ctx, sql, projector, stream, o, nx)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.Errorf(op, store.ErrWatermarkConflict, "", "%s on %s is not at %d", projector, stream, old)
		}
		return nil
	})
}
