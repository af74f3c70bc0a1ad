package sqlite

import (
	"context"
	"database/sql"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// A request reads the rows a decision needs inside its own transaction,
// asks store/internal/contract, and only then writes: the decisions are
// the same in every backend, this file keeps only their storage.

// worldLease reads a world (found, status) and its lease in one query.
func (t *wtx) worldLease(world string) (found bool, status store.WorldStatus, l contract.LeaseRow, err error) {
	var (
		st string
		lc leaseCells
	)
	found, err = t.queryRow(`SELECT w.status, `+leaseCols+` FROM worlds w LEFT JOIN leases l ON l.world = w.id WHERE w.id = ?`,
		[]any{world}, append([]any{&st}, lc.dest()...)...)
	if err != nil || !found {
		return false, "", contract.LeaseRow{}, err
	}
	return true, store.WorldStatus(st), lc.row(), nil
}

// fence is the check every world mutation makes inside its own
// transaction (contract.Fence).
func (t *wtx) fence(op, world string, epoch uint64) error {
	found, _, l, err := t.worldLease(world)
	if err != nil {
		return err
	}
	return contract.Fence(op, world, epoch, found, l, t.now)
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

// claimWorldID reads whether a world has id and its stream's head, and
// asks contract.WorldID whether a new world may take it.
func (t *wtx) claimWorldID(op, id string) error {
	var one int
	found, err := t.queryRow(`SELECT 1 FROM worlds WHERE id = ?`, []any{id}, &one)
	if err != nil {
		return err
	}
	head, err := t.head(id)
	if err != nil {
		return err
	}
	return contract.WorldID(op, id, found, uint64(head))
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
func (s *backend) CreateWorld(ctx context.Context, universe, world string, seed *store.Snapshot) (store.World, error) {
	const op = "create_world"
	var out store.World
	err := s.write(ctx, op, world, func(t *wtx) error {
		var err error
		out, err = t.createWorld(op, universe, world, seed)
		return err
	})
	if err != nil {
		return store.World{}, err
	}
	return out, nil
}

// createWorld creates an active world inside the request, seeded when
// seed is set (its World and CreatedAt are the new world's).
func (t *wtx) createWorld(op, universe, world string, seed *store.Snapshot) (store.World, error) {
	if err := t.claimWorldID(op, world); err != nil {
		return store.World{}, err
	}
	var baseline any
	if seed != nil {
		baseline = int64(seed.Height)
	}
	if _, err := t.exec(`INSERT INTO worlds (id, universe, status, created_at, baseline_height) VALUES (?, ?, 'active', ?, ?)`,
		world, universe, t.nowNS, baseline); err != nil {
		return store.World{}, err
	}
	if seed != nil {
		if _, err := t.exec(`INSERT INTO snapshots (world, height, state, state_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
			world, int64(seed.Height), seed.State, seed.StateHash, t.nowNS); err != nil {
			return store.World{}, err
		}
		if err := t.seedHead(world, seed.Height); err != nil {
			return store.World{}, err
		}
	}
	return store.World{ID: world, Universe: universe, Status: store.WorldActive, CreatedAt: fromNS(t.nowNS)}, nil
}

// Spawn is CreateWorld, an Enqueue of each item and, with a holder,
// Acquire and an Append of the events, as one request: each step is the
// separate call's own code, and a typed refusal of any rolls the request
// back whole (its savepoint).
func (s *backend) Spawn(ctx context.Context, spec store.SpawnSpec) (store.Spawned, error) {
	const op = "spawn"
	var out store.Spawned
	err := s.write(ctx, op, spec.World, func(t *wtx) error {
		w, err := t.createWorld(op, spec.Universe, spec.World, nil)
		if err != nil {
			return err
		}
		out = store.Spawned{World: w, Seqs: make([]uint64, len(spec.Items))}
		inbox, err := t.ingressWorld(op, spec.World)
		if err != nil {
			return err
		}
		for i, it := range spec.Items {
			// The front refused a key given twice (checkSpawn in store/validate.go) and
			// the inbox is new, so no item is a duplicate.
			seq, _, err := t.enqueueInto(inbox, it.Kind, it.Payload, it.DedupeKey)
			if err != nil {
				return err
			}
			out.Seqs[i], inbox.last = seq, int64(seq)
		}
		if spec.Holder == "" {
			return nil
		}
		if out.Lease, err = t.acquire(op, spec.World, spec.Holder, spec.Incarnation, spec.TTL); err != nil {
			return err
		}
		// The events are a fenced Append under that lease expecting head 0:
		// createWorld found the stream without events, so none is a
		// duplicate and they get 1…n.
		if len(spec.Events) > 0 {
			out.Appended, _, err = t.append(spec.World, 0, spec.Events)
		}
		return err
	})
	if err != nil {
		return store.Spawned{}, err
	}
	return out, nil
}

// ForkWorld creates newWorld from src's snapshot at height. The snapshot
// row is copied inside SQLite (the state blob, never the journal), so a
// fork costs the same whatever the source's history length.
func (s *backend) ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (store.World, error) {
	const op = "fork_world"
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
		if err := t.claimWorldID(op, newWorld); err != nil {
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

// ForkWorldFrom implements store.Worlds: ForkWorld with the caller's
// state as the fork's baseline.
func (s *backend) ForkWorldFrom(ctx context.Context, src string, base store.Snapshot, newWorld string) (store.World, error) {
	const op = "fork_world_from"
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
		head, err := t.head(src)
		if err != nil {
			return err
		}
		if int64(base.Height) > head {
			return store.Errorf(op, store.ErrInvalid, src, "fork height %d passes the journal head %d", base.Height, head)
		}
		if err := t.claimWorldID(op, newWorld); err != nil {
			return err
		}
		h := int64(base.Height)
		if _, err := t.exec(`INSERT INTO worlds (id, universe, status, parent_world, parent_snapshot_hash, forked_at_height, created_at, baseline_height)
			VALUES (?, ?, 'active', ?, ?, ?, ?, ?)`,
			newWorld, universe, src, base.StateHash, h, t.nowNS, h); err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO snapshots (world, height, state, state_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
			newWorld, h, base.State, base.StateHash, t.nowNS); err != nil {
			return err
		}
		if err := t.seedHead(newWorld, base.Height); err != nil {
			return err
		}
		out = store.World{
			ID: newWorld, Universe: universe, Status: store.WorldActive,
			ParentWorld: src, ParentSnapshotHash: base.StateHash, ForkedAtHeight: base.Height,
			CreatedAt: fromNS(t.nowNS),
		}
		return nil
	})
	if err != nil {
		return store.World{}, err
	}
	return out, nil
}

const worldCols = `id, universe, status, status_reason, status_changed_at, parent_world, parent_snapshot_hash, forked_at_height, created_at`

func scanWorld(sc interface{ Scan(...any) error }) (store.World, error) {
	var (
		w       store.World
		status  string
		changed sql.NullInt64
		forked  int64
		created int64
	)
	if err := sc.Scan(&w.ID, &w.Universe, &status, &w.StatusReason, &changed, &w.ParentWorld, &w.ParentSnapshotHash, &forked, &created); err != nil {
		return store.World{}, err
	}
	w.Status = store.WorldStatus(status)
	w.StatusChangedAt = fromNullNS(changed)
	w.ForkedAtHeight = uint64(forked)
	w.CreatedAt = fromNS(created)
	return w, nil
}

// GetWorld reads a world's record.
func (s *backend) GetWorld(ctx context.Context, world string) (store.World, error) {
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
func (s *backend) ListWorlds(ctx context.Context, universe string, status store.WorldStatus) ([]store.World, error) {
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

// SetWorldStatus is the operator's path (contract.Transition): no lease,
// the reason and the store clock recorded. Leaving active releases the
// lease in the same transaction, so its holder is fenced at once.
func (s *backend) SetWorldStatus(ctx context.Context, world string, status store.WorldStatus, reason string) (store.World, error) {
	const op = "set_world_status"
	var out store.World
	err := s.write(ctx, op, world, func(t *wtx) error {
		if _, err := t.setStatus(op, world, status, reason); err != nil {
			return err
		}
		row, err := t.row(`SELECT `+worldCols+` FROM worlds WHERE id = ?`, world)
		if err != nil {
			return err
		}
		out, err = scanWorld(row)
		return err
	})
	if err != nil {
		return store.World{}, err
	}
	return out, nil
}

// setStatus moves world to status inside the request, as contract.Transition
// decides (SetWorldStatus, and a Commit's Status). Leaving active releases
// the lease in the same transaction, so its holder is fenced at once;
// archiving withdraws the world's pending effects
// (contract.WithdrawsPending), and it returns how many.
func (t *wtx) setStatus(op, world string, status store.WorldStatus, reason string) (withdrawn int, err error) {
	from, err := t.worldStatus(op, world)
	if err != nil {
		return 0, err
	}
	noop, endLease, err := contract.Transition(op, world, from, status)
	if err != nil || noop {
		return 0, err
	}
	if _, err := t.exec(`UPDATE worlds SET status = ?, status_reason = ?, status_changed_at = ? WHERE id = ?`,
		string(status), reason, t.nowNS, world); err != nil {
		return 0, err
	}
	t.notify(store.TopicAssignments)
	if contract.WithdrawsPending(status) {
		if withdrawn, err = t.withdrawAll(world); err != nil {
			return 0, err
		}
	}
	if !endLease {
		return withdrawn, nil
	}
	res, err := t.exec(`UPDATE leases SET holder = '', incarnation = '', expires_at = MIN(expires_at, ?) WHERE world = ? AND holder != ''`, t.nowNS, world)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if n > 0 {
		t.notify(store.TopicLeases)
	}
	return withdrawn, nil
}
