package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// Append is the append authority (the execution semantics contract §6): it runs as one request of a
// group commit, so concurrent appends to any streams share one fsync. A
// world's stream is written only under its own fence, a free stream with
// none (contract.AppendFence), decided in the same transaction.
func (s *backend) Append(ctx context.Context, stream string, events []store.Record, opts store.AppendOptions) ([]store.Appended, error) {
	const op = "append"
	var out []store.Appended
	err := s.write(ctx, op, stream, func(t *wtx) error {
		found, _, l, err := t.worldLease(stream)
		if err != nil {
			return err
		}
		if err := contract.AppendFence(op, stream, opts, found, l, t.now); err != nil {
			return err
		}
		head, err := t.head(stream)
		if err != nil {
			return err
		}
		var newHead int64
		out, newHead, err = t.append(stream, head, events)
		if err != nil {
			return err
		}
		return contract.AppendHead(op, stream, opts.ExpectedHead, uint64(head), newHead != head)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// append inserts the events that are new, in order, at head+1, head+2, …
// (gapless: the single writer owns the head) with persistedAt from the store
// clock. Each key is inserted first (ON CONFLICT DO NOTHING) with the
// record's eventType and payload hash: a conflict is a duplicate, within the
// batch or against history, answered with the first record's metadata and
// Conflict when the offered record differs. A caller that compare-and-swaps
// the head checks it against head itself; a failure rolls the request's
// savepoint back, inserts included.
func (t *wtx) append(stream string, head int64, events []store.Record) (_ []store.Appended, newHead int64, err error) {
	out := make([]store.Appended, len(events))
	seq := head
	for i := range events {
		e := &events[i]
		sum := sha256.Sum256(e.Payload)
		res, err := t.exec(`INSERT INTO event_keys (stream, idempotency_key, event_id, run_seq, persisted_at, event_type, payload_sha256)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream, idempotency_key) DO NOTHING`,
			stream, e.IdempotencyKey, e.EventID, seq+1, t.nowNS, e.EventType, sum[:])
		if err != nil {
			return nil, 0, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, 0, err
		} else if n == 0 {
			if out[i], err = t.duplicate(stream, e, sum[:]); err != nil {
				return nil, 0, err
			}
			continue
		}
		seq++
		if _, err := t.exec(`INSERT INTO events (stream, run_seq, event_id, idempotency_key, event_type, emitted_at, persisted_at,
			step_id, logical_attempt, engine_attempt, plan_id, plan_version, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			stream, seq, e.EventID, e.IdempotencyKey, e.EventType, nullNS(e.EmittedAt), t.nowNS,
			e.StepID, int64(e.LogicalAttemptID), int64(e.EngineAttemptID), e.PlanID, int64(e.PlanVersion), e.Payload); err != nil {
			return nil, 0, err
		}
		out[i] = store.Appended{EventID: e.EventID, RunSeq: uint64(seq), PersistedAt: fromNS(t.nowNS)}
	}
	if seq != head {
		t.setHead(stream, seq)
	}
	return out, seq, nil
}

// duplicate answers an event whose key exists: the stored record's metadata,
// and Conflict as contract.Conflict decides (keys of events compacted
// before schema 2 carry no eventType or hash: NULL).
func (t *wtx) duplicate(stream string, e *store.Record, sum []byte) (store.Appended, error) {
	var (
		id        string
		rs, pa    int64
		eventType sql.NullString
		stored    []byte
	)
	if _, err := t.queryRow(`SELECT event_id, run_seq, persisted_at, event_type, payload_sha256 FROM event_keys WHERE stream = ? AND idempotency_key = ?`,
		[]any{stream, e.IdempotencyKey}, &id, &rs, &pa, &eventType, &stored); err != nil {
		return store.Appended{}, err
	}
	return store.Appended{EventID: id, RunSeq: uint64(rs), PersistedAt: fromNS(pa), Idempotent: true,
		Conflict: contract.Conflict(eventType.String, stored, e.EventType, sum)}, nil
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
func (s *backend) Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]store.Record, error) {
	const op = "read"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+recordCols+` FROM events WHERE stream = ? AND run_seq > ? ORDER BY run_seq LIMIT ?`,
		stream, seqBound(afterSeq), sqlLimit(limit))
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	out, err := scanRecords(rows)
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	// The floor is read after the events: it only rises, in the
	// transaction that removes events, so a floor at or below afterSeq now
	// was so when the events were read, and they are whole. A compaction
	// in between refuses a read that was whole: too strict, never silent.
	floor, _, err := s.floor(ctx, stream)
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	if err := contract.ReadFloor(stream, afterSeq, floor); err != nil {
		return nil, err
	}
	return out, nil
}

// floor reads a stream's compaction floor and the latest persistedAt it
// removed (zero when none).
func (s *backend) floor(ctx context.Context, stream string) (uint64, time.Time, error) {
	var to int64
	var at sql.NullInt64
	if _, err := s.queryRow(ctx, `SELECT compacted_to, compacted_at FROM streams WHERE stream = ?`, []any{stream}, &to, &at); err != nil {
		return 0, time.Time{}, err
	}
	return uint64(to), fromNullNS(at), nil
}

// Floor returns the stream's compaction floor (0 when nothing was ever
// compacted).
func (s *backend) Floor(ctx context.Context, stream string) (uint64, error) {
	const op = "floor"
	if err := s.read(ctx, op); err != nil {
		return 0, err
	}
	floor, _, err := s.floor(ctx, stream)
	if err != nil {
		return 0, dbErr(op, stream, err)
	}
	return floor, nil
}

// Head returns the stream's head (0 for a stream never appended to).
func (s *backend) Head(ctx context.Context, stream string) (uint64, error) {
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
func (s *backend) ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]store.Record, error) {
	const op = "read_window"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+recordCols+` FROM events
		WHERE stream = ? AND persisted_at >= ? AND persisted_at < ? ORDER BY run_seq LIMIT ?`,
		stream, boundNS(from), boundNS(to), sqlLimit(limit))
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	out, err := scanRecords(rows)
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	// After the events, as Read does.
	floor, floorAt, err := s.floor(ctx, stream)
	if err != nil {
		return nil, dbErr(op, stream, err)
	}
	if err := contract.WindowFloor(stream, from, floor, floorAt); err != nil {
		return nil, err
	}
	return out, nil
}
