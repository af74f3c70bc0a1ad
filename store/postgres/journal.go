package postgres

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/store/internal/groupcommit"
)

// appendReq is one Append, Commit or DrainToJournal waiting for a group
// commit. A Commit is an append to its world's stream with the cycle's
// other writes attached (commit != nil); DrainToJournal is a Commit of
// only a cursor move and entries.
type appendReq struct {
	groupcommit.Ticket
	ctx    context.Context
	op     string
	stream string
	events []store.Record
	sums   [][sha256.Size]byte // SHA-256 of each event's payload
	head   *uint64             // ExpectedHead (a Commit's always)
	opts   store.AppendOptions // an Append's
	commit *commitReq

	res  appendResult
	done chan struct{}
}

// commitReq is the part of a Commit that is not the append.
type commitReq struct {
	epoch uint64
	b     *store.CommitBatch
}

func (r *appendReq) Context() context.Context  { return r.ctx }
func (r *appendReq) Answered() <-chan struct{} { return r.done }
func (r *appendReq) Refuse(err error)          { r.finish(err) }

func (r *appendReq) finish(err error) {
	if r.res.err == nil && err != nil {
		r.res.err = dbErr(r.op, r.stream, err)
	}
	close(r.done)
}

func newAppendReq(ctx context.Context, op, stream string, events []store.Record) *appendReq {
	r := &appendReq{ctx: ctx, op: op, stream: stream, events: events, done: make(chan struct{})}
	r.sums = make([][sha256.Size]byte, len(events))
	for i := range events {
		r.sums[i] = sha256.Sum256(events[i].Payload)
	}
	return r
}

// Append implements store.Journal through the append committer: the call
// waits for the group commit that carries it.
func (s *Store) Append(ctx context.Context, stream string, events []store.Record, opts store.AppendOptions) ([]store.Appended, error) {
	const op = "append"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	if err := store.CheckID(op, "stream", stream); err != nil {
		return nil, err
	}
	if err := store.CheckRecords(op, events); err != nil {
		return nil, err
	}
	if opts.Fence != nil {
		if err := store.CheckID(op, "fence world", opts.Fence.World); err != nil {
			return nil, err
		}
	}
	if opts.ExpectedHead != nil {
		if err := store.CheckInt(op, "expectedHead", *opts.ExpectedHead); err != nil {
			return nil, err
		}
	}
	r := newAppendReq(ctx, op, stream, events)
	r.head, r.opts = opts.ExpectedHead, opts
	if err := s.commitAppend(r); err != nil {
		return nil, err
	}
	return r.res.out, nil
}

// Commit implements store.Store: the world cycle's one transaction,
// group-committed with other appends and commits (see append.go).
func (s *Store) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	res, err := s.commitCycle(ctx, "commit", world, epoch, &b)
	if err != nil {
		return store.CommitResult{}, err
	}
	return res, nil
}

// DrainToJournal implements store.Inbox: a Commit of only a cursor move
// and entries.
func (s *Store) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []store.Record) ([]store.Appended, error) {
	res, err := s.commitCycle(ctx, "drain", world, epoch, &store.CommitBatch{
		ExpectedCursor: expectedCursor, NewCursor: newCursor, ExpectedHead: expectedHead, Entries: entries,
	})
	if err != nil {
		return nil, err
	}
	return res.Appended, nil
}

func (s *Store) commitCycle(ctx context.Context, op, world string, epoch uint64, b *store.CommitBatch) (store.CommitResult, error) {
	if err := s.begin(ctx, op); err != nil {
		return store.CommitResult{}, err
	}
	if err := checkFenced(op, world, epoch); err != nil {
		return store.CommitResult{}, err
	}
	if err := store.CheckCommit(op, b); err != nil {
		return store.CommitResult{}, err
	}
	r := newAppendReq(ctx, op, world, b.Entries)
	head := b.ExpectedHead
	r.head, r.commit = &head, &commitReq{epoch: epoch, b: b}
	if err := s.commitAppend(r); err != nil {
		return store.CommitResult{}, err
	}
	res := store.CommitResult{Appended: r.res.out, Head: r.res.head,
		Published: r.res.published, Scheduled: r.res.scheduled, Cancelled: r.res.cancelled, Withdrawn: r.res.withdrawn}
	var topics []string
	if res.Published > 0 {
		topics = append(topics, store.TopicEffects)
	}
	if res.Scheduled > 0 || res.Cancelled > 0 {
		topics = append(topics, store.TopicTimers)
	}
	if r.res.statusChanged {
		topics = append(topics, store.TopicAssignments)
	}
	if r.res.leaseEnded {
		topics = append(topics, store.TopicLeases)
	}
	s.hint(topics...)
	return res, nil
}

func (s *Store) commitAppend(r *appendReq) error {
	if err := s.appends.Do(r.stream, r); err != nil {
		return dbErr(r.op, r.stream, err)
	}
	return r.res.err
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
		br := s.pool.SendBatch(ctx, b)
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
func (s *Store) Floor(ctx context.Context, stream string) (uint64, error) {
	const op = "floor"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	var floor int64
	err := s.retry(ctx, op, stream, func() error {
		return s.pool.QueryRow(ctx, floorQuery, stream).Scan(&floor, new(*int64))
	})
	return uint64(floor), err
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
	var floor int64
	var floorAt *int64
	err := s.retry(ctx, op, stream, func() error {
		// After the events, as Read does.
		b := &pgx.Batch{}
		b.Queue(`SELECT `+recordCols+` FROM events
			WHERE stream = $1 AND persisted_at_ns >= $2 AND persisted_at_ns < $3
			ORDER BY run_seq LIMIT $4`, stream, lo, hi, limitArg(limit))
		b.Queue(floorQuery, stream)
		br := s.pool.SendBatch(ctx, b)
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
