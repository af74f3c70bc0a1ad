package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// Append implements store.Journal through the append committer: the call
// waits for the group commit that carries it.
func (s *backend) Append(ctx context.Context, stream string, events []store.Record, opts store.AppendOptions) ([]store.Appended, error) {
	const op = "append"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	r := newAppendReq(ctx, op, stream, events)
	r.head, r.opts = opts.ExpectedHead, opts
	if err := s.commitAppend(r); err != nil {
		return nil, err
	}
	return r.res.out, nil
}

const recordCols = `stream, run_seq, event_id, idempotency_key, event_type, emitted_at_ns, persisted_at_ns,
	step_id, logical_attempt_id, engine_attempt_id, plan_id, plan_version, payload`

func scanRecord(row pgx.CollectableRow) (store.Record, error) {
	var r store.Record
	var seq, emitted, persisted, la, ea, pv int64
	err := row.Scan(&r.StreamID, &seq, &r.EventID, &r.IdempotencyKey, &r.EventType, &emitted, &persisted,
		&r.StepID, &la, &ea, &r.PlanID, &pv, &r.Payload)
	r.RunSeq, r.EmittedAt, r.PersistedAt = uint64(seq), fromNS(emitted), fromNS(persisted)
	r.LogicalAttemptID, r.EngineAttemptID, r.PlanVersion = uint64(la), uint64(ea), uint64(pv)
	return r, err
}

// Read implements store.Journal. A limit <= 0 means no limit.
func (s *backend) Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]store.Record, error) {
	const op = "read"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	after := seqArg(afterSeq)
	var out []store.Record
	var floor int64
	err := s.retry(ctx, op, stream, func() error {
		// One round trip, the floor read after the events: it only rises,
		// in the transaction that removes events, so a floor at or below
		// afterSeq now was so when the events were read, and they are
		// whole. A compaction in between refuses a read that was whole:
		// too strict, never silent.
		b := &pgx.Batch{}
		b.Queue(`SELECT `+recordCols+` FROM events
			WHERE stream = $1 AND run_seq > $2 ORDER BY run_seq LIMIT $3`, stream, after, limitArg(limit))
		b.Queue(floorQuery, stream)
		br := s.db.SendBatch(ctx, b)
		rows, _ := br.Query()
		var err error
		if out, err = pgx.CollectRows(rows, scanRecord); err != nil {
			br.Close()
			return err
		}
		if err := br.QueryRow().Scan(&floor, new(*int64)); err != nil {
			br.Close()
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, err
	}
	if err := contract.ReadFloor(stream, afterSeq, uint64(floor)); err != nil {
		return nil, err
	}
	return out, nil
}

// floorQuery reads a stream's compaction floor and the latest persistedAt
// it removed (NULL when none).
const floorQuery = `SELECT coalesce(max(compacted_to), 0), max(compacted_at_ns) FROM streams WHERE stream = $1`

// Floor implements store.Journal.
func (s *backend) Floor(ctx context.Context, stream string) (uint64, error) {
	const op = "floor"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var floor int64
	err := s.retry(ctx, op, stream, func() error {
		return s.db.QueryRow(ctx, floorQuery, stream).Scan(&floor, new(*int64))
	})
	return uint64(floor), err
}

// Head implements store.Journal.
func (s *backend) Head(ctx context.Context, stream string) (uint64, error) {
	const op = "head"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var head int64
	err := s.retry(ctx, op, stream, func() error {
		return s.db.QueryRow(ctx, `SELECT coalesce((SELECT head FROM streams WHERE stream = $1), 0)`, stream).Scan(&head)
	})
	return uint64(head), err
}

// ReadWindow implements store.Journal. A limit <= 0 means no limit.
func (s *backend) ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]store.Record, error) {
	const op = "read_window"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	lo, hi := clampNS(from), clampNS(to)
	var out []store.Record
	var floor int64
	var floorAt *int64
	err := s.retry(ctx, op, stream, func() error {
		// After the events, as Read does.
		b := &pgx.Batch{}
		b.Queue(`SELECT `+recordCols+` FROM events
			WHERE stream = $1 AND persisted_at_ns >= $2 AND persisted_at_ns < $3
			ORDER BY run_seq LIMIT $4`, stream, lo, hi, limitArg(limit))
		b.Queue(floorQuery, stream)
		br := s.db.SendBatch(ctx, b)
		rows, _ := br.Query()
		var err error
		if out, err = pgx.CollectRows(rows, scanRecord); err != nil {
			br.Close()
			return err
		}
		if err := br.QueryRow().Scan(&floor, &floorAt); err != nil {
			br.Close()
			return err
		}
		return br.Close()
	})
	if err != nil {
		return nil, err
	}
	var at time.Time
	if floorAt != nil {
		at = fromNS(*floorAt)
	}
	if err := contract.WindowFloor(stream, from, uint64(floor), at); err != nil {
		return nil, err
	}
	return out, nil
}
