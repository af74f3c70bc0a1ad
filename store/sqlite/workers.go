package sqlite

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// The worker inventory: one row per worker that ever sent a heartbeat.

const workerCols = `id, capacity, draining, heartbeat_at, started_at`

func scanWorker(sc interface{ Scan(...any) error }) (store.WorkerInfo, error) {
	var (
		w           store.WorkerInfo
		capacity    int64
		hb, started int64
	)
	if err := sc.Scan(&w.ID, &capacity, &w.Draining, &hb, &started); err != nil {
		return store.WorkerInfo{}, err
	}
	w.Capacity, w.HeartbeatAt, w.StartedAt = int(capacity), fromNS(hb), fromNS(started)
	return w, nil
}

// Heartbeat records that worker is alive with capacity, keeping Draining.
func (s *backend) Heartbeat(ctx context.Context, worker string, capacity int) (store.WorkerInfo, error) {
	const op = "heartbeat"
	var out store.WorkerInfo
	err := s.write(ctx, op, "", func(t *wtx) error {
		row, err := t.row(`INSERT INTO workers (id, capacity, draining, heartbeat_at, started_at) VALUES (?1, ?2, 0, ?3, ?3)
			ON CONFLICT (id) DO UPDATE SET capacity = excluded.capacity, heartbeat_at = excluded.heartbeat_at
			RETURNING `+workerCols, worker, int64(capacity), t.nowNS)
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
