package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/orrery-run/orrery/store"
)

// The worker inventory: one row per worker that ever sent a heartbeat,
// with the incarnation its last promise of liveness named and until when
// (alive_until, NULL: none) and the capabilities it last advertised (a
// JSON array, migration 12); retired_incarnations lists the incarnations
// that must never beat or claim again (migration 8).

const workerCols = `id, capacity, draining, heartbeat_at, started_at, incarnation, alive_until, capabilities`

func scanWorker(sc interface{ Scan(...any) error }) (store.WorkerInfo, error) {
	var (
		w           store.WorkerInfo
		capacity    int64
		hb, started int64
		alive       sql.NullInt64
		caps        string
	)
	if err := sc.Scan(&w.ID, &capacity, &w.Draining, &hb, &started, &w.Incarnation, &alive, &caps); err != nil {
		return store.WorkerInfo{}, err
	}
	w.Capacity, w.HeartbeatAt, w.StartedAt, w.AliveUntil = int(capacity), fromNS(hb), fromNS(started), fromNullNS(alive)
	w.Capabilities = []string{}
	if err := json.Unmarshal([]byte(caps), &w.Capabilities); err != nil {
		return store.WorkerInfo{}, fmt.Errorf("worker %s capabilities: %w", w.ID, err)
	}
	return w, nil
}

// capsJSON is the capabilities column's value for an advertised list.
func capsJSON(caps []string) string {
	if len(caps) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(caps) // a []string always marshals
	return string(b)
}

// Heartbeat records that worker is alive with capacity, keeping Draining;
// with a promise (store.AliveAs), as store.Workers.Heartbeat says.
func (s *backend) Heartbeat(ctx context.Context, worker string, capacity int, opts ...store.HeartbeatOption) (store.WorkerInfo, error) {
	const op = "heartbeat"
	o, _ := store.ResolveHeartbeatOptions(op, opts)
	var out store.WorkerInfo
	err := s.write(ctx, op, "", func(t *wtx) error {
		var alive any
		if o.Promised() {
			retired, err := t.retired(worker, o.Incarnation)
			if err != nil {
				return err
			}
			if retired {
				return store.Errorf(op, store.ErrFenced, "", "worker %s incarnation %s retired", worker, o.Incarnation)
			}
			var prev string
			found, err := t.queryRow(`SELECT incarnation FROM workers WHERE id = ?`, []any{worker}, &prev)
			if err != nil {
				return err
			}
			if found && prev != o.Incarnation {
				// A new process under the worker's id: its predecessor
				// is gone, or must be treated so.
				if _, err := t.retire(worker, prev); err != nil {
					return err
				}
			}
			alive = t.now.Add(o.TTL).UnixNano()
		}
		row, err := t.row(`INSERT INTO workers (id, capacity, draining, heartbeat_at, started_at, incarnation, alive_until, capabilities)
			VALUES (?1, ?2, 0, ?3, ?3, ?4, ?5, ?7)
			ON CONFLICT (id) DO UPDATE SET capacity = excluded.capacity, heartbeat_at = excluded.heartbeat_at,
				incarnation = CASE WHEN ?6 THEN excluded.incarnation ELSE workers.incarnation END,
				alive_until = excluded.alive_until,
				capabilities = CASE WHEN ?8 THEN excluded.capabilities ELSE workers.capabilities END
			RETURNING `+workerCols, worker, int64(capacity), t.nowNS, o.Incarnation, alive, o.Promised(),
			capsJSON(o.Capabilities), o.Advertised())
		if err != nil {
			return err
		}
		if out, err = scanWorker(row); err != nil {
			return err
		}
		t.notify(store.TopicWorkers)
		return nil
	})
	if err != nil {
		return store.WorkerInfo{}, err
	}
	return out, nil
}

// RetireWorker implements store.Workers.
func (s *backend) RetireWorker(ctx context.Context, worker, incarnation string) (int, error) {
	const op = "retire_worker"
	var n int
	err := s.write(ctx, op, "", func(t *wtx) error {
		n = 0
		retired, err := t.retired(worker, incarnation)
		if err != nil || retired {
			return err
		}
		if n, err = t.retire(worker, incarnation); err != nil {
			return err
		}
		m, err := t.rowsAffected(`UPDATE workers SET alive_until = ? WHERE id = ? AND incarnation = ?`, t.nowNS, worker, incarnation)
		if m > 0 {
			t.notify(store.TopicWorkers)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// retired reports whether worker's incarnation is retired.
func (t *wtx) retired(worker, incarnation string) (bool, error) {
	var one int
	return t.queryRow(`SELECT 1 FROM retired_incarnations WHERE worker = ? AND incarnation = ?`, []any{worker, incarnation}, &one)
}

// retire records worker's incarnation retired and requeues its claims.
func (t *wtx) retire(worker, incarnation string) (int, error) {
	if _, err := t.exec(`INSERT INTO retired_incarnations (worker, incarnation, retired_at) VALUES (?, ?, ?)
		ON CONFLICT DO NOTHING`, worker, incarnation, t.nowNS); err != nil {
		return 0, err
	}
	return t.requeueOrphans()
}

// claimable refuses a claim on behalf of an incarnation known dead.
func (t *wtx) claimable(op string, by store.ClaimOptions) error {
	if by.Node == "" {
		return nil
	}
	var dead bool
	if _, err := t.queryRow(`SELECT `+deadSQL("?1", "?2"), []any{by.Node, by.Incarnation, t.nowNS}, &dead); err != nil {
		return err
	}
	if dead {
		return store.Errorf(op, store.ErrFenced, "", "worker %s incarnation %s is known dead", by.Node, by.Incarnation)
	}
	return nil
}

// deadSQL is whether the incarnation (node, inc: SQL) is known dead at ?3:
// retired, or named by its worker's record whose promise ran out.
func deadSQL(node, inc string) string {
	return `(EXISTS (SELECT 1 FROM retired_incarnations r WHERE r.worker = ` + node + ` AND r.incarnation = ` + inc + `)
		OR EXISTS (SELECT 1 FROM workers w WHERE w.id = ` + node + ` AND w.incarnation = ` + inc + `
			AND w.alive_until IS NOT NULL AND w.alive_until <= ?3))`
}

// The orphan requeues: a claim revoked (claimed_by cleared, so its old
// holder cannot settle or release it), an archived world's effect
// withdrawn as a reap would. ?3 is the store's clock.
var (
	requeueEffectsSQL = `UPDATE effects SET
			state = CASE WHEN world IN (SELECT id FROM worlds WHERE status = 'archived') THEN 'withdrawn' ELSE 'pending' END,
			completed_at = CASE WHEN world IN (SELECT id FROM worlds WHERE status = 'archived') THEN ?3 ELSE completed_at END,
			claimed_by = '', claim_expires = NULL, claim_node = '', claim_incarnation = ''
		WHERE state = 'inflight' AND claim_node <> '' AND ` + deadSQL("effects.claim_node", "effects.claim_incarnation") + `
		RETURNING state`
	requeueTimersSQL = `UPDATE timers SET state = 'scheduled', claimed_by = '', claim_expires = NULL, claim_node = '', claim_incarnation = ''
		WHERE state = 'claimed' AND claim_node <> '' AND ` + deadSQL("timers.claim_node", "timers.claim_incarnation")
)

// requeueOrphans requeues the claims of every incarnation known dead.
func (t *wtx) requeueOrphans() (int, error) {
	rows, err := t.query(requeueEffectsSQL, nil, nil, t.nowNS)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		var state string
		if err := rows.Scan(&state); err != nil {
			rows.Close()
			return 0, err
		}
		n++
		if state == "pending" {
			t.notify(store.TopicEffects)
		}
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	m, err := t.rowsAffected(requeueTimersSQL, nil, nil, t.nowNS)
	if err != nil {
		return 0, err
	}
	if m > 0 {
		t.notify(store.TopicTimers)
	}
	return n + m, nil
}

// anyOrphanSQL is whether a requeue would find anything at ?3: read
// first, so that the orphan reaper's pass over a healthy cluster costs a
// read, not a turn of the one committer.
var anyOrphanSQL = `SELECT EXISTS (SELECT 1 FROM effects WHERE state = 'inflight' AND claim_node <> '' AND ` +
	deadSQL("effects.claim_node", "effects.claim_incarnation") + `)
	OR EXISTS (SELECT 1 FROM timers WHERE state = 'claimed' AND claim_node <> '' AND ` +
	deadSQL("timers.claim_node", "timers.claim_incarnation") + `)`

// ReapOrphans implements store.Workers.
func (s *backend) ReapOrphans(ctx context.Context) (int, error) {
	const op = "reap_orphans"
	if err := s.read(ctx, op); err != nil {
		return 0, err
	}
	var found bool
	if _, err := s.queryRow(ctx, anyOrphanSQL, []any{nil, nil, s.cfg.clock().UnixNano()}, &found); err != nil {
		return 0, dbErr(op, "", err)
	}
	if !found {
		return 0, nil
	}
	var n int
	err := s.write(ctx, op, "", func(t *wtx) error {
		var err error
		n, err = t.requeueOrphans()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// SetDraining marks a worker draining or not; ErrNotFound if it never sent
// a heartbeat.
func (s *backend) SetDraining(ctx context.Context, worker string, draining bool) (store.WorkerInfo, error) {
	const op = "set_draining"
	var out store.WorkerInfo
	err := s.write(ctx, op, "", func(t *wtx) error {
		var prev bool
		found, err := t.queryRow(`SELECT draining FROM workers WHERE id = ?`, []any{worker}, &prev)
		if err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrNotFound, "", "worker %s", worker)
		}
		row, err := t.row(`UPDATE workers SET draining = ? WHERE id = ? RETURNING `+workerCols, draining, worker)
		if err != nil {
			return err
		}
		if out, err = scanWorker(row); err != nil {
			return err
		}
		if prev != draining {
			t.notify(store.TopicWorkers)
		}
		return nil
	})
	if err != nil {
		return store.WorkerInfo{}, err
	}
	return out, nil
}

// ListWorkers lists every worker, sorted by id.
func (s *backend) ListWorkers(ctx context.Context) ([]store.WorkerInfo, error) {
	const op = "list_workers"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+workerCols+` FROM workers ORDER BY id`)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	var out []store.WorkerInfo
	for rows.Next() {
		w, err := scanWorker(rows)
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
