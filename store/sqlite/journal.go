package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Append is the append authority (seed 001 §6): it runs as one request of a
// group commit, so concurrent appends to any streams share one fsync.
func (s *Store) Append(ctx context.Context, stream string, events []store.Record, opts store.AppendOptions) ([]store.Appended, error) {
	const op = "append"
	if stream == "" {
		return nil, store.Errorf(op, store.ErrInvalid, "", "empty stream")
	}
	if err := validate(op, events); err != nil {
		return nil, err
	}
	var expected *uint64
	if opts.ExpectedHead != nil {
		h := *opts.ExpectedHead
		expected = &h
	}
	var fence *store.Fence
	if opts.Fence != nil {
		f := *opts.Fence
		fence = &f
	}
	var out []store.Appended
	err := s.write(ctx, op, stream, func(t *wtx) error {
		if fence != nil {
			if err := t.fence(op, fence.World, fence.Epoch); err != nil {
				return err
			}
		}
		var err error
		out, err = t.append(op, stream, events, expected)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// validate checks every record, naming op in the error.
func validate(op string, events []store.Record) error {
	for i := range events {
		if err := store.CheckRecord(&events[i]); err != nil {
			if se, ok := err.(*store.Error); ok {
				se.Op = op
			}
			return err
		}
	}
	return nil
}

// append inserts the events that are new, in order, with runSeq following
// the stream's head and persistedAt from the store clock. Each key is
// inserted first (ON CONFLICT DO NOTHING): a conflict is a duplicate, within
// the batch or against history, answered with the first record's metadata.
// The single writer serialises racing appenders, so the first one wins and
// the others see its key. The head compare-and-swap is checked only if
// something new was inserted; on a mismatch the request's savepoint undoes
// the inserts.
func (t *wtx) append(op, stream string, events []store.Record, expectedHead *uint64) ([]store.Appended, error) {
	head, err := t.head(stream)
	if err != nil {
		return nil, err
	}
	out := make([]store.Appended, len(events))
	seq := head
	for i := range events {
		e := &events[i]
		res, err := t.exec(`INSERT INTO event_keys (stream, idempotency_key, event_id, run_seq, persisted_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (stream, idempotency_key) DO NOTHING`,
			stream, e.IdempotencyKey, e.EventID, seq+1, t.nowNS)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == 0 {
			var (
				id     string
				rs, pa int64
			)
			if _, err := t.queryRow(`SELECT event_id, run_seq, persisted_at FROM event_keys WHERE stream = ? AND idempotency_key = ?`,
				[]any{stream, e.IdempotencyKey}, &id, &rs, &pa); err != nil {
				return nil, err
			}
			out[i] = store.Appended{EventID: id, RunSeq: uint64(rs), PersistedAt: fromNS(pa), Idempotent: true}
			continue
		}
		seq++
		if _, err := t.exec(`INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, emitted_at, persisted_at,
			step_id, logical_attempt, engine_attempt, plan_id, plan_version, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			stream, seq, e.EventID, e.IdempotencyKey, e.EventType, nullNS(e.EmittedAt), t.nowNS,
			e.StepID, int64(e.LogicalAttemptID), int64(e.EngineAttemptID), e.PlanID, int64(e.PlanVersion), e.Payload); err != nil {
			return nil, err
		}
		out[i] = store.Appended{EventID: e.EventID, RunSeq: uint64(seq), PersistedAt: fromNS(t.nowNS)}
	}
	if seq == head {
		return out, nil // every event was a duplicate: idempotent, no head check
	}
	if expectedHead != nil && *expectedHead != uint64(head) {
		return nil, store.Errorf(op, store.ErrHeadMismatch, stream, "expected head %d, head is %d", *expectedHead, head)
	}
	t.setHead(stream, seq)
	return out, nil
}

// headQuery derives a stream's head: the highest runSeq in the journal, or
// the streams row's floor (a seed's or fork's height, or the head when a
// compaction removed the events below it), whichever is higher.
const headQuery = `SELECT MAX(
	COALESCE((SELECT head FROM streams WHERE stream = ?1), 0),
	COALESCE((SELECT MAX(run_seq) FROM events WHERE stream = ?1), 0))`

const recordCols = `stream, run_seq, event_id, idempotency_key, event_type, emitted_at, persisted_at,
	step_id, logical_attempt, engine_attempt, plan_id, plan_version, payload, payload IS NOT NULL`

func scanRecords(rows *sql.Rows) ([]store.Record, error) {
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		var (
			r                   store.Record
			seq, pa, la, ea, pv int64
			emitted             sql.NullInt64
			hasPayload          bool
		)
		if err := rows.Scan(&r.StreamID, &seq, &r.EventID, &r.IdempotencyKey, &r.EventType, &emitted, &pa,
			&r.StepID, &la, &ea, &r.PlanID, &pv, &r.Payload, &hasPayload); err != nil {
			return nil, err
		}
		r.RunSeq, r.LogicalAttemptID, r.EngineAttemptID, r.PlanVersion = uint64(seq), uint64(la), uint64(ea), uint64(pv)
		r.EmittedAt, r.PersistedAt = fromNullNS(emitted), fromNS(pa)
		r.Payload = blob(r.Payload, hasPayload)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Read returns up to limit events with runSeq > afterSeq, in runSeq order
// (limit <= 0: all of them).
func (s *Store) Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]store.Record, error) {
	const op = "read"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+recordCols+` FROM events WHERE stream = ? AND run_seq > ? ORDER BY run_seq LIMIT ?`,
		stream, int64(afterSeq), sqlLimit(limit))
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	out, err := scanRecords(rows)
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	return out, nil
}

// Head returns the stream's head (0 for a stream never appended to).
func (s *Store) Head(ctx context.Context, stream string) (uint64, error) {
	const op = "head"
	if err := s.read(ctx, op); err != nil {
		return 0, err
	}
	var head int64
	if _, err := s.queryRow(ctx, headQuery, []any{stream}, &head); err != nil {
		return 0, dbErr(op, stream, err)
	}
	return uint64(head), nil
}

// ReadWindow returns up to limit events with from <= persistedAt < to, in
// runSeq order (limit <= 0: all of them).
func (s *Store) ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]store.Record, error) {
	const op = "read_window"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+recordCols+` FROM events
		WHERE stream = ? AND persisted_at >= ? AND persisted_at < ? ORDER BY run_seq LIMIT ?`,
		stream, ns(from), ns(to), sqlLimit(limit))
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	out, err := scanRecords(rows)
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	return out, nil
}
