package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
)

// scanWorker reads a worker record: set_worker_draining's answer for id, or,
// with id "", a row that starts with the worker's id.
func scanWorker(id string, row pgx.Row) (store.WorkerInfo, error) {
	var cap, hb, started int64
	var alive *int64
	w := store.WorkerInfo{ID: id}
	dest := []any{&cap, &w.Draining, &hb, &started, &w.Incarnation, &alive, &w.Capabilities}
	if id == "" {
		dest = append([]any{&w.ID}, dest...)
	}
	err := row.Scan(dest...)
	w.Capacity, w.HeartbeatAt, w.StartedAt = int(cap), fromNS(hb), fromNS(started)
	if alive != nil {
		w.AliveUntil = fromNS(*alive)
	}
	if w.Capabilities == nil {
		w.Capabilities = []string{}
	}
	return w, err
}

// Heartbeat implements store.Workers (see the heartbeat_as function).
func (s *backend) Heartbeat(ctx context.Context, worker string, capacity int, opts ...store.HeartbeatOption) (store.WorkerInfo, error) {
	const op = "heartbeat"
	if err := s.begin(op); err != nil {
		return store.WorkerInfo{}, err
	}
	o, _ := store.ResolveHeartbeatOptions(op, opts)
	var w store.WorkerInfo
	err := s.retry(ctx, op, "", func() error {
		var cap, hb, started int64
		var alive *int64
		var fenced bool
		w = store.WorkerInfo{ID: worker}
		err := s.db.QueryRow(ctx, `SELECT * FROM heartbeat_as($1, $2, $3, $4, $5, $6, $7, $8)`,
			worker, int64(capacity), o.Promised(), o.Incarnation, int64(o.TTL), s.off(), o.Advertised(), capsArg(o.Capabilities)).
			Scan(&fenced, &cap, &w.Draining, &hb, &started, &w.Incarnation, &alive, &w.Capabilities)
		if err != nil {
			return err
		}
		if fenced {
			return store.Errorf(op, store.ErrFenced, "", "worker %s incarnation %s retired", worker, o.Incarnation)
		}
		w.Capacity, w.HeartbeatAt, w.StartedAt = int(cap), fromNS(hb), fromNS(started)
		if alive != nil {
			w.AliveUntil = fromNS(*alive)
		}
		if w.Capabilities == nil {
			w.Capabilities = []string{}
		}
		return nil
	})
	if err != nil {
		return store.WorkerInfo{}, err
	}
	s.hint(store.TopicWorkers)
	return w, nil
}

// RetireWorker implements store.Workers (see the retire_worker function).
func (s *backend) RetireWorker(ctx context.Context, worker, incarnation string) (int, error) {
	const op = "retire_worker"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	return s.requeued(ctx, op, `SELECT * FROM retire_worker($1, $2, $3)`, worker, incarnation, s.off())
}

// ReapOrphans implements store.Workers (see the requeue_orphans function).
func (s *backend) ReapOrphans(ctx context.Context) (int, error) {
	const op = "reap_orphans"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	return s.requeued(ctx, op, `SELECT * FROM requeue_orphans(now_ns($1))`, s.off())
}

// requeued runs a statement that answers requeue_orphans' counts, hints
// what changed and returns the total.
func (s *backend) requeued(ctx context.Context, op, sql string, args ...any) (int, error) {
	var e, wd, tm int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, sql, args...).Scan(&e, &wd, &tm)
	})
	if err != nil {
		return 0, err
	}
	if e > 0 {
		s.hint(store.TopicEffects)
	}
	if tm > 0 {
		s.hint(store.TopicTimers)
	}
	return int(e + wd + tm), nil
}

// capsArg is an advertised list as a text[] argument: never NULL.
func capsArg(caps []string) []string {
	if caps == nil {
		return []string{}
	}
	return caps
}

// SetDraining implements store.Workers (see the set_worker_draining function).
func (s *backend) SetDraining(ctx context.Context, worker string, draining bool) (store.WorkerInfo, error) {
	const op = "set_draining"
	if err := s.begin(op); err != nil {
		return store.WorkerInfo{}, err
	}
	var w store.WorkerInfo
	err := s.retry(ctx, op, "", func() error {
		var err error
		w, err = scanWorker(worker, s.db.QueryRow(ctx, `SELECT * FROM set_worker_draining($1, $2)`, worker, draining))
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
		rows, _ := s.db.Query(ctx, `SELECT worker, capacity, draining, heartbeat_at_ns, started_at_ns, incarnation, alive_until_ns,
				capabilities
			FROM workers ORDER BY worker`)
		var err error
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.WorkerInfo, error) {
			return scanWorker("", row)
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
