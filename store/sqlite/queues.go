package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

const queueCols = `name, concurrency, worker_concurrency, rate_limit, rate_period_ns, partitioned`

type scanner interface{ Scan(dest ...any) error }

func scanQueue(sc scanner) (store.QueueSpec, error) {
	var q store.QueueSpec
	var period int64
	var part int
	if err := sc.Scan(&q.Name, &q.Concurrency, &q.WorkerConcurrency, &q.RateLimit, &period, &part); err != nil {
		return q, err
	}
	q.RatePeriod, q.Partitioned = time.Duration(period), part != 0
	return q, nil
}

const queuedCols = `queue, run, partition, priority, seq, enqueued_at, worker, admitted_at, needs`

func scanQueued(sc scanner) (store.QueuedRun, error) {
	var r store.QueuedRun
	var enq int64
	var adm sql.NullInt64
	if err := sc.Scan(&r.Queue, &r.Run, &r.Partition, &r.Priority, &r.Seq, &enq, &r.Worker, &adm, &r.Needs); err != nil {
		return r, err
	}
	r.EnqueuedAt = time.Unix(0, enq).UTC()
	if adm.Valid {
		r.AdmittedAt = time.Unix(0, adm.Int64).UTC()
	}
	return r, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// PutQueue implements store.Queues.
func (s *backend) PutQueue(ctx context.Context, q store.QueueSpec) error {
	const op = "put_queue"
	return s.write(ctx, op, "", func(t *wtx) error {
		if _, err := t.exec(`INSERT INTO queues (`+queueCols+`) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, worker_concurrency = excluded.worker_concurrency,
			rate_limit = excluded.rate_limit, rate_period_ns = excluded.rate_period_ns, partitioned = excluded.partitioned`,
			q.Name, q.Concurrency, q.WorkerConcurrency, q.RateLimit, int64(q.RatePeriod), b2i(q.Partitioned)); err != nil {
			return err
		}
		t.notify(store.TopicAssignments)
		return nil
	})
}

// GetQueue implements store.Queues.
func (s *backend) GetQueue(ctx context.Context, name string) (store.QueueSpec, error) {
	const op = "get_queue"
	if err := s.read(ctx, op); err != nil {
		return store.QueueSpec{}, err
	}
	st, err := s.rstmt(ctx, `SELECT `+queueCols+` FROM queues WHERE name = ?`)
	if err != nil {
		return store.QueueSpec{}, dbErr(op, "", err)
	}
	q, err := scanQueue(st.QueryRowContext(ctx, name))
	if err == sql.ErrNoRows {
		return store.QueueSpec{}, store.Errorf(op, store.ErrNotFound, "", "no queue %q", name)
	}
	if err != nil {
		return store.QueueSpec{}, dbErr(op, "", err)
	}
	return q, nil
}

// ListQueues implements store.Queues.
func (s *backend) ListQueues(ctx context.Context) ([]store.QueueSpec, error) {
	const op = "list_queues"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+queueCols+` FROM queues ORDER BY name`)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	var out []store.QueueSpec
	for rows.Next() {
		q, err := scanQueue(rows)
		if err != nil {
			return nil, dbErr(op, "", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, "", err)
	}
	return out, nil
}

// EnqueueRun implements store.Queues.
func (s *backend) EnqueueRun(ctx context.Context, r store.QueuedRun) (store.QueuedRun, bool, error) {
	const op = "enqueue_run"
	var out store.QueuedRun
	var dup bool
	err := s.write(ctx, op, r.Run, func(t *wtx) error {
		row, err := t.row(`SELECT `+queuedCols+` FROM queued_runs WHERE run = ?`, r.Run)
		if err != nil {
			return err
		}
		if out, err = scanQueued(row); err == nil {
			dup = true
			return nil
		} else if err != sql.ErrNoRows {
			return err
		}
		var one int
		found, err := t.queryRow(`SELECT 1 FROM queues WHERE name = ?`, []any{r.Queue}, &one)
		if err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrNotFound, r.Run, "no queue %q", r.Queue)
		}
		status, err := t.worldStatus(op, r.Run)
		if err != nil {
			return err
		}
		if status == store.WorldArchived {
			return store.Errorf(op, store.ErrWorldArchived, r.Run, "")
		}
		var seq int64
		if _, err := t.queryRow(`SELECT COALESCE(MAX(seq), 0) FROM queued_runs`, nil, &seq); err != nil {
			return err
		}
		// The seq only orders entries; a seq reused after the last entry
		// left orders the same way.
		r.Seq, r.EnqueuedAt = uint64(seq+1), t.now
		if _, err := t.exec(`INSERT INTO queued_runs (`+queuedCols+`) VALUES (?, ?, ?, ?, ?, ?, '', NULL, ?)`,
			r.Queue, r.Run, r.Partition, r.Priority, int64(r.Seq), t.nowNS, r.Needs); err != nil {
			return err
		}
		out = r
		t.notify(store.TopicAssignments)
		return nil
	})
	if err != nil {
		return store.QueuedRun{}, false, err
	}
	return out, dup, nil
}

// AdmitRuns implements store.Queues: one request of the single writer, so
// two admitters never count the same slots.
func (s *backend) AdmitRuns(ctx context.Context, queue, worker string, max int, carries ...string) ([]store.QueuedRun, error) {
	const op = "admit_runs"
	var out []store.QueuedRun
	err := s.write(ctx, op, "", func(t *wtx) error {
		row, err := t.row(`SELECT `+queueCols+` FROM queues WHERE name = ?`, queue)
		if err != nil {
			return err
		}
		spec, err := scanQueue(row)
		if err == sql.ErrNoRows {
			return store.Errorf(op, store.ErrNotFound, "", "no queue %q", queue)
		} else if err != nil {
			return err
		}
		rows, err := t.query(`SELECT q.queue, q.run, q.partition, q.priority, q.seq, q.enqueued_at, q.worker, q.admitted_at, q.needs, w.status
			FROM queued_runs q JOIN worlds w ON w.id = q.run WHERE q.queue = ? ORDER BY q.priority, q.seq`, queue)
		if err != nil {
			return err
		}
		var running []store.QueuedRun
		var waiting []contract.QueueCandidate
		for rows.Next() {
			var r store.QueuedRun
			var enq int64
			var adm sql.NullInt64
			var status string
			if err := rows.Scan(&r.Queue, &r.Run, &r.Partition, &r.Priority, &r.Seq, &enq, &r.Worker, &adm, &r.Needs, &status); err != nil {
				rows.Close()
				return err
			}
			r.EnqueuedAt = time.Unix(0, enq).UTC()
			if adm.Valid {
				r.AdmittedAt = time.Unix(0, adm.Int64).UTC()
			}
			if r.Admitted() {
				running = append(running, r)
			} else {
				waiting = append(waiting, contract.QueueCandidate{QueuedRun: r, Active: status == string(store.WorldActive)})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		recent, err := t.recentAdmissions(queue, spec)
		if err != nil {
			return err
		}
		out = contract.Admit(spec, running, waiting, recent, worker, carries, max, t.now)
		for _, r := range out {
			if _, err := t.exec(`UPDATE queued_runs SET worker = ?, admitted_at = ? WHERE run = ?`, worker, t.nowNS, r.Run); err != nil {
				return err
			}
			if spec.RateLimit > 0 {
				if _, err := t.exec(`INSERT INTO queue_admissions (queue, partition, at) VALUES (?, ?, ?)`, queue, r.Partition, t.nowNS); err != nil {
					return err
				}
			}
		}
		if len(out) > 0 {
			t.notify(store.TopicAssignments)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// recentAdmissions prunes queue's admissions outside its rate window and
// counts those inside, per partition.
func (t *wtx) recentAdmissions(queue string, spec store.QueueSpec) (map[string]int, error) {
	if spec.RateLimit == 0 {
		_, err := t.exec(`DELETE FROM queue_admissions WHERE queue = ?`, queue)
		return nil, err
	}
	from := contract.RateWindowStart(spec, t.now).UnixNano()
	if _, err := t.exec(`DELETE FROM queue_admissions WHERE queue = ? AND at <= ?`, queue, from); err != nil {
		return nil, err
	}
	rows, err := t.query(`SELECT partition, count(*) FROM queue_admissions WHERE queue = ? GROUP BY partition`, queue)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var p string
		var n int
		if err := rows.Scan(&p, &n); err != nil {
			return nil, err
		}
		out[p] = n
	}
	return out, rows.Err()
}

// ListQueuedRuns implements store.Queues.
func (s *backend) ListQueuedRuns(ctx context.Context, queue string) ([]store.QueuedRun, error) {
	const op = "list_queued_runs"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+queuedCols+` FROM queued_runs WHERE queue = ? ORDER BY priority, seq`, queue)
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer rows.Close()
	var out []store.QueuedRun
	for rows.Next() {
		r, err := scanQueued(rows)
		if err != nil {
			return nil, dbErr(op, "", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(op, "", err)
	}
	return out, nil
}

// QueueRunOf implements store.Queues.
func (s *backend) QueueRunOf(ctx context.Context, run string) (store.QueuedRun, bool, error) {
	const op = "queue_run_of"
	if err := s.read(ctx, op); err != nil {
		return store.QueuedRun{}, false, err
	}
	st, err := s.rstmt(ctx, `SELECT `+queuedCols+` FROM queued_runs WHERE run = ?`)
	if err != nil {
		return store.QueuedRun{}, false, dbErr(op, run, err)
	}
	r, err := scanQueued(st.QueryRowContext(ctx, run))
	if err == sql.ErrNoRows {
		return store.QueuedRun{}, false, nil
	}
	if err != nil {
		return store.QueuedRun{}, false, dbErr(op, run, err)
	}
	return r, true, nil
}

// RecentAdmissions implements store.Queues.
func (s *backend) RecentAdmissions(ctx context.Context, queue string) (int, error) {
	const op = "recent_admissions"
	if err := s.read(ctx, op); err != nil {
		return 0, err
	}
	var period int64
	found, err := s.queryRow(ctx, `SELECT rate_period_ns FROM queues WHERE name = ?`, []any{queue}, &period)
	if err != nil {
		return 0, dbErr(op, "", err)
	}
	if !found {
		return 0, nil
	}
	now := s.cfg.clock().Round(0)
	var n int
	if _, err := s.queryRow(ctx, `SELECT count(*) FROM queue_admissions WHERE queue = ? AND at > ?`,
		[]any{queue, now.Add(-time.Duration(period)).UnixNano()}, &n); err != nil {
		return 0, dbErr(op, "", err)
	}
	return n, nil
}
