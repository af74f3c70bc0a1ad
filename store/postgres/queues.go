package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

const queueCols = `name, concurrency, worker_concurrency, rate_limit, rate_period_ns, partitioned`

func scanQueue(row pgx.Row) (store.QueueSpec, error) {
	var q store.QueueSpec
	var c, wc, rl, period int64
	if err := row.Scan(&q.Name, &c, &wc, &rl, &period, &q.Partitioned); err != nil {
		return q, err
	}
	q.Concurrency, q.WorkerConcurrency, q.RateLimit, q.RatePeriod = int(c), int(wc), int(rl), time.Duration(period)
	return q, nil
}

const queuedCols = `queue, run, partition, priority, seq, enqueued_at_ns, worker, admitted_at_ns, needs`

func scanQueued(row pgx.Row) (store.QueuedRun, error) {
	var r store.QueuedRun
	var prio, seq, enq int64
	var adm *int64
	if err := row.Scan(&r.Queue, &r.Run, &r.Partition, &prio, &seq, &enq, &r.Worker, &adm, &r.Needs); err != nil {
		return r, err
	}
	r.Priority, r.Seq, r.EnqueuedAt = int(prio), uint64(seq), fromNS(enq)
	if adm != nil {
		r.AdmittedAt = fromNS(*adm)
	}
	return r, nil
}

// inTx runs fn in one transaction on the pool, again after a transient
// conflict.
func (s *backend) inTx(ctx context.Context, op, world string, fn func(tx pgx.Tx) error) error {
	if err := s.begin(op); err != nil {
		return err
	}
	return s.retry(ctx, op, world, func() error {
		return pgx.BeginFunc(ctx, s.db.p(), fn)
	})
}

// PutQueue implements store.Queues.
func (s *backend) PutQueue(ctx context.Context, q store.QueueSpec) error {
	return s.inTx(ctx, "put_queue", "", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO queues (`+queueCols+`) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, worker_concurrency = excluded.worker_concurrency,
			rate_limit = excluded.rate_limit, rate_period_ns = excluded.rate_period_ns, partitioned = excluded.partitioned`,
			q.Name, int64(q.Concurrency), int64(q.WorkerConcurrency), int64(q.RateLimit), int64(q.RatePeriod), q.Partitioned)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT notify_topic($1)`, store.TopicAssignments)
		return err
	})
}

// GetQueue implements store.Queues.
func (s *backend) GetQueue(ctx context.Context, name string) (store.QueueSpec, error) {
	const op = "get_queue"
	if err := s.begin(op); err != nil {
		return store.QueueSpec{}, err
	}
	var q store.QueueSpec
	err := s.retry(ctx, op, "", func() error {
		var err error
		q, err = scanQueue(s.db.QueryRow(ctx, `SELECT `+queueCols+` FROM queues WHERE name = $1`, name))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Errorf(op, store.ErrNotFound, "", "no queue %q", name)
		}
		return err
	})
	return q, err
}

// ListQueues implements store.Queues.
func (s *backend) ListQueues(ctx context.Context) ([]store.QueueSpec, error) {
	const op = "list_queues"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	var out []store.QueueSpec
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.db.Query(ctx, `SELECT `+queueCols+` FROM queues ORDER BY name`)
		var err error
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.QueueSpec, error) { return scanQueue(r) })
		return err
	})
	return out, err
}

// EnqueueRun implements store.Queues. It locks the world's row FOR SHARE
// (the lock order's first), so an archive of the run waits for it or it
// sees the archive: no entry outlives its run.
func (s *backend) EnqueueRun(ctx context.Context, r store.QueuedRun) (store.QueuedRun, bool, error) {
	const op = "enqueue_run"
	var out store.QueuedRun
	var dup bool
	err := s.inTx(ctx, op, r.Run, func(tx pgx.Tx) error {
		dup = false
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM worlds WHERE world = $1 FOR SHARE`, r.Run).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Errorf(op, store.ErrWorldNotFound, r.Run, "")
		} else if err != nil {
			return err
		}
		out, err = scanQueued(tx.QueryRow(ctx, `SELECT `+queuedCols+` FROM queued_runs WHERE run = $1`, r.Run))
		if err == nil {
			dup = true
			return nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if status == string(store.WorldArchived) {
			return store.Errorf(op, store.ErrWorldArchived, r.Run, "")
		}
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM queues WHERE name = $1 FOR SHARE`, r.Queue).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return store.Errorf(op, store.ErrNotFound, r.Run, "no queue %q", r.Queue)
		} else if err != nil {
			return err
		}
		// Two first enqueues of one run (its starter, a scan's repair) may
		// both find no entry: the second inserts nothing and answers the
		// first's.
		out, err = scanQueued(tx.QueryRow(ctx, `INSERT INTO queued_runs (queue, run, partition, priority, enqueued_at_ns, needs)
			VALUES ($1, $2, $3, $4, now_ns($5), $6) ON CONFLICT (run) DO NOTHING RETURNING `+queuedCols,
			r.Queue, r.Run, r.Partition, int64(r.Priority), s.off(), r.Needs))
		if errors.Is(err, pgx.ErrNoRows) {
			dup = true
			out, err = scanQueued(tx.QueryRow(ctx, `SELECT `+queuedCols+` FROM queued_runs WHERE run = $1`, r.Run))
			return err
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT notify_topic($1)`, store.TopicAssignments)
		return err
	})
	if err != nil {
		return store.QueuedRun{}, false, err
	}
	return out, dup, nil
}

// AdmitRuns implements store.Queues: the queue's row, locked FOR UPDATE,
// orders every admission of the queue, so two admitters never count the
// same slots.
func (s *backend) AdmitRuns(ctx context.Context, queue, worker string, max int, carries ...string) ([]store.QueuedRun, error) {
	const op = "admit_runs"
	var out []store.QueuedRun
	err := s.inTx(ctx, op, "", func(tx pgx.Tx) error {
		spec, err := scanQueue(tx.QueryRow(ctx, `SELECT `+queueCols+` FROM queues WHERE name = $1 FOR UPDATE`, queue))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Errorf(op, store.ErrNotFound, "", "no queue %q", queue)
		} else if err != nil {
			return err
		}
		var nowNS int64
		if err := tx.QueryRow(ctx, `SELECT now_ns($1)`, s.off()).Scan(&nowNS); err != nil {
			return err
		}
		now := fromNS(nowNS)
		rows, _ := tx.Query(ctx, `SELECT q.queue, q.run, q.partition, q.priority, q.seq, q.enqueued_at_ns, q.worker, q.admitted_at_ns, q.needs,
			w.status = 'active' FROM queued_runs q JOIN worlds w ON w.world = q.run WHERE q.queue = $1 ORDER BY q.priority, q.seq`, queue)
		var running []store.QueuedRun
		var waiting []contract.QueueCandidate
		var r store.QueuedRun
		var prio, seq, enq int64
		var adm *int64
		var active bool
		_, err = pgx.ForEachRow(rows, []any{&r.Queue, &r.Run, &r.Partition, &prio, &seq, &enq, &r.Worker, &adm, &r.Needs, &active}, func() error {
			e := r
			e.Priority, e.Seq, e.EnqueuedAt = int(prio), uint64(seq), fromNS(enq)
			if adm != nil {
				e.AdmittedAt = fromNS(*adm)
			}
			if e.Admitted() {
				running = append(running, e)
			} else {
				waiting = append(waiting, contract.QueueCandidate{QueuedRun: e, Active: active})
			}
			return nil
		})
		if err != nil {
			return err
		}
		var recent map[string]int
		if spec.RateLimit == 0 {
			_, err = tx.Exec(ctx, `DELETE FROM queue_admissions WHERE queue = $1`, queue)
		} else {
			recent = map[string]int{}
			from := toNS(contract.RateWindowStart(spec, now))
			if _, err = tx.Exec(ctx, `DELETE FROM queue_admissions WHERE queue = $1 AND at_ns <= $2`, queue, from); err != nil {
				return err
			}
			rows, _ := tx.Query(ctx, `SELECT partition, count(*) FROM queue_admissions WHERE queue = $1 GROUP BY partition`, queue)
			var p string
			var n int64
			_, err = pgx.ForEachRow(rows, []any{&p, &n}, func() error {
				recent[p] = int(n)
				return nil
			})
		}
		if err != nil {
			return err
		}
		out = contract.Admit(spec, running, waiting, recent, worker, carries, max, now)
		if len(out) == 0 {
			return nil
		}
		runs, parts := make([]string, len(out)), make([]string, len(out))
		for i, r := range out {
			runs[i], parts[i] = r.Run, r.Partition
		}
		if _, err := tx.Exec(ctx, `UPDATE queued_runs SET worker = $2, admitted_at_ns = $3 WHERE run = ANY($1)`, runs, worker, nowNS); err != nil {
			return err
		}
		if spec.RateLimit > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO queue_admissions (queue, partition, at_ns) SELECT $1, p, $3 FROM unnest($2::text[]) AS p`,
				queue, parts, nowNS); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `SELECT notify_topic($1)`, store.TopicAssignments)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListQueuedRuns implements store.Queues.
func (s *backend) ListQueuedRuns(ctx context.Context, queue string) ([]store.QueuedRun, error) {
	const op = "list_queued_runs"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	var out []store.QueuedRun
	err := s.retry(ctx, op, "", func() error {
		rows, _ := s.db.Query(ctx, `SELECT `+queuedCols+` FROM queued_runs WHERE queue = $1 ORDER BY priority, seq`, queue)
		var err error
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.QueuedRun, error) { return scanQueued(r) })
		return err
	})
	return out, err
}

// QueueRunOf implements store.Queues.
func (s *backend) QueueRunOf(ctx context.Context, run string) (store.QueuedRun, bool, error) {
	const op = "queue_run_of"
	if err := s.begin(op); err != nil {
		return store.QueuedRun{}, false, err
	}
	var out store.QueuedRun
	var ok bool
	err := s.retry(ctx, op, run, func() error {
		var err error
		out, err = scanQueued(s.db.QueryRow(ctx, `SELECT `+queuedCols+` FROM queued_runs WHERE run = $1`, run))
		ok = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return out, ok, err
}

// RecentAdmissions implements store.Queues.
func (s *backend) RecentAdmissions(ctx context.Context, queue string) (int, error) {
	const op = "recent_admissions"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var n int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT count(*) FROM queue_admissions a JOIN queues q ON q.name = a.queue
			WHERE a.queue = $1 AND a.at_ns > now_ns($2) - q.rate_period_ns`, queue, s.off()).Scan(&n)
	})
	return int(n), err
}
