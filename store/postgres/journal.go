package postgres

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
)

// appendReq is one Append or DrainToJournal waiting for a group commit.
type appendReq struct {
	ctx    context.Context
	op     string
	stream string
	events []store.Record
	head   *uint64 // ExpectedHead
	fence  *store.Fence
	// invalid is the request's validation failure, reported after the
	// fence check (the order the reference store answers in).
	invalid error

	drain                bool
	expCursor, newCursor uint64

	out  []store.Appended
	err  error
	done chan struct{}
}

func (r *appendReq) context() context.Context { return r.ctx }

func (r *appendReq) finish(err error) {
	if r.err == nil && err != nil {
		r.err = dbErr(r.op, r.stream, err)
	}
	close(r.done)
}

// Append implements store.Journal through the append committer: the call
// waits for the group commit that carries it.
func (s *Store) Append(ctx context.Context, stream string, events []store.Record, opts store.AppendOptions) ([]store.Appended, error) {
	const op = "append"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	r := &appendReq{ctx: ctx, op: op, stream: stream, events: events, head: opts.ExpectedHead, fence: opts.Fence, done: make(chan struct{})}
	r.invalid = validateRecords(op, stream, events)
	if opts.Fence == nil {
		if r.invalid != nil {
			return nil, r.invalid
		}
		if len(events) == 0 {
			return []store.Appended{}, nil
		}
	}
	return s.commitAppend(r)
}

// DrainToJournal implements store.Inbox: an append of entries to world's
// stream, fenced, with the cursor and the head both compared-and-swapped
// (the head even when every entry is a duplicate: the cursor already makes
// a retried drain fail), in the same group commit as other appends.
func (s *Store) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []store.Record) ([]store.Appended, error) {
	const op = "drain"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	r := &appendReq{
		ctx: ctx, op: op, stream: world, events: entries, head: &expectedHead,
		fence: &store.Fence{World: world, Epoch: epoch},
		drain: true, expCursor: expectedCursor, newCursor: newCursor,
		done: make(chan struct{}),
	}
	r.invalid = validateRecords(op, world, entries)
	if r.invalid == nil {
		for _, v := range []uint64{expectedCursor, expectedHead, newCursor} {
			if _, err := i64(op, world, "cursor or head", v); err != nil {
				r.invalid = err
			}
		}
	}
	return s.commitAppend(r)
}

func (s *Store) commitAppend(r *appendReq) ([]store.Appended, error) {
	if err := s.appends.do(r.stream, r, r.done); err != nil {
		return nil, dbErr(r.op, r.stream, err)
	}
	if r.err != nil {
		return nil, r.err
	}
	return r.out, nil
}

// validateRecords checks what the append authority requires of the input,
// and what PostgreSQL text can hold (valid UTF-8, no NUL).
func validateRecords(op, stream string, events []store.Record) error {
	if stream == "" {
		return store.Errorf(op, store.ErrInvalid, "", "empty stream")
	}
	if !validText(stream) {
		return store.Errorf(op, store.ErrInvalid, "", "stream id is not valid UTF-8 text")
	}
	for i := range events {
		ev := &events[i]
		if err := store.CheckRecord(ev); err != nil {
			if e, ok := err.(*store.Error); ok {
				e.Op = op
			}
			return err
		}
		for _, f := range []string{ev.EventID, ev.IdempotencyKey, ev.EventType, ev.StepID, ev.PlanID} {
			if !validText(f) {
				return store.Errorf(op, store.ErrInvalid, "", "event %q: a field is not valid UTF-8 text", ev.EventID)
			}
		}
		for _, v := range []uint64{ev.LogicalAttemptID, ev.EngineAttemptID, ev.PlanVersion} {
			if _, err := i64(op, "", "event field", v); err != nil {
				return err
			}
		}
		if err := checkTime(op, "", "emittedAt", ev.EmittedAt); err != nil {
			return err
		}
	}
	return nil
}

// validText reports whether s can be stored in a text column.
func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return false
		}
	}
	return true
}

// ---- reads ----

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

// limitArg turns a limit (<= 0: none) into SQL's LIMIT argument.
func limitArg(limit int) *int64 {
	if limit <= 0 {
		return nil
	}
	n := int64(limit)
	return &n
}

// Read implements store.Journal. A limit <= 0 means no limit.
func (s *Store) Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]store.Record, error) {
	const op = "read"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	after, err := i64(op, stream, "afterSeq", afterSeq)
	if err != nil {
		return nil, err
	}
	var out []store.Record
	err = s.retry(ctx, op, stream, func() error {
		rows, _ := s.pool.Query(ctx, `SELECT `+recordCols+` FROM events
			WHERE stream = $1 AND run_seq > $2 ORDER BY run_seq LIMIT $3`, stream, after, limitArg(limit))
		var err error
		out, err = pgx.CollectRows(rows, scanRecord)
		return err
	})
	return out, err
}

// Head implements store.Journal.
func (s *Store) Head(ctx context.Context, stream string) (uint64, error) {
	const op = "head"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var head int64
	err := s.retry(ctx, op, stream, func() error {
		return s.pool.QueryRow(ctx, `SELECT coalesce((SELECT head FROM streams WHERE stream = $1), 0)`, stream).Scan(&head)
	})
	return uint64(head), err
}

// ReadWindow implements store.Journal. A limit <= 0 means no limit.
func (s *Store) ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]store.Record, error) {
	const op = "read_window"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	lo, hi := clampNS(from), clampNS(to)
	var out []store.Record
	err := s.retry(ctx, op, stream, func() error {
		rows, _ := s.pool.Query(ctx, `SELECT `+recordCols+` FROM events
			WHERE stream = $1 AND persisted_at_ns >= $2 AND persisted_at_ns < $3
			ORDER BY run_seq LIMIT $4`, stream, lo, hi, limitArg(limit))
		var err error
		out, err = pgx.CollectRows(rows, scanRecord)
		return err
	})
	return out, err
}
