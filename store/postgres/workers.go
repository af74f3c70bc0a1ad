package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
)

func scanWorker(id string, row pgx.Row) (store.WorkerInfo, error) {
	var cap, hb, started int64
	w := store.WorkerInfo{ID: id}
	err := row.Scan(&cap, &w.Draining, &hb, &started)
	w.Capacity, w.HeartbeatAt, w.StartedAt = int(cap), fromNS(hb), fromNS(started)
	return w, err
}

// Heartbeat implements store.Workers (see the heartbeat function).
func (s *backend) Heartbeat(ctx context.Context, worker string, capacity int) (store.WorkerInfo, error) {
	const op = "heartbeat"
	if err := s.begin(op); err != nil {
		return store.WorkerInfo{}, err
	}
	var w store.WorkerInfo
	err := s.retry(ctx, op, "", func() error {
		var err error
		w, err = scanWorker(worker, s.pool.QueryRow(ctx, `SELECT * FROM heartbeat($1, $2, $3)`, worker, int64(capacity), s.off()))
		return err
	})
	if err != nil {
		return store.WorkerInfo{}, err
	}
	s.hint(store.TopicWorkers)
	return w, nil
}

// SetDraining implements store.Workers (see the set_draining function).
func (s *backend) SetDraining(ctx context.Context, worker string, draining bool) (store.WorkerInfo, error) {
	const op = "set_draining"
	if err := s.begin(op); err != nil {
		return store.WorkerInfo{}, err
	}
	var w store.WorkerInfo
	err := s.retry(ctx, op, "", func() error {
		var err error
		w, err = scanWorker(worker, s.pool.QueryRow(ctx, `SELECT * FROM set_draining($1, $2)`, worker, draining))
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrNotFound, "", "worker %s never sent a heartbeat", worker)
		}
		return err
	})
	if err != nil {
		return store.WorkerInfo{}, err
	}
	s.hint(store.TopicWorkers)
	return w, nil
}

// ListWorkers implements store.Workers.
func (s *backend) ListWorkers(ctx context.Context) ([]store.WorkerInfo, error) {
	const op = "list_workers"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	out := []store.WorkerInfo{}
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.pool.Query(ctx, `SELECT worker, capacity, draining, heartbeat_at_ns, started_at_ns FROM workers ORDER BY worker`)
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.WorkerInfo, error) {
			var id string
			var cap, hb, started int64
			w := store.WorkerInfo{}
			err := row.Scan(&id, &cap, &w.Draining, &hb, &started)
			w.ID, w.Capacity, w.HeartbeatAt, w.StartedAt = id, int(cap), fromNS(hb), fromNS(started)
			return w, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
