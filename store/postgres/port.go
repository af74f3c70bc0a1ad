package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orrery-run/orrery/store"
)

// The port (store.Exporter, store.Importer) over this schema. What the
// logical records map onto:
//
//   - a world's inbox cursor and active baseline live in its stream row,
//     which every world has (the world record carries them, and an import
//     of a world writes its stream row too);
//   - the idempotency key of a live event is the event row's; only the
//     keys of compacted events are in compacted_keys (event_key records);
//   - an inbox drain is a move of the cursor from lo to hi: its record
//     carries hi, and an import takes lo from the world's drain before
//     (0 for its first), which is the cursor that drain left;
//   - a timer's states are named due (scheduled) and inflight (claimed);
//   - the effect queue's seq is an identity column: an import writes the
//     source's seqs as they are and moves the identity past them (the
//     counter record, and FinishImport past the highest row).
//
// Export reads in one REPEATABLE READ READ ONLY transaction: every query
// of it sees one snapshot. The identity's counter is read there too, but
// a sequence is not transactional: it may be read above the snapshot's
// highest seq, which only keeps a later seq from being handed out twice.

var _ store.PortBackend = (*backend)(nil)

func optNSTime(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := fromNS(*v)
	return &t
}

func nsOpt(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	v := t.UnixNano()
	return &v
}

func seqOpt(v *int64) *uint64 {
	if v == nil {
		return nil
	}
	u := uint64(*v)
	return &u
}

func optSeqArg(v *uint64) *int64 {
	if v == nil {
		return nil
	}
	i := int64(*v)
	return &i
}

// Export implements store.Exporter.
func (s *backend) Export(ctx context.Context, emit func(store.PortRecord) error) error {
	const op = "export"
	if err := s.begin(op); err != nil {
		return err
	}
	var emitErr error
	out := func(r store.PortRecord) error {
		r.Format = store.PortFormat
		if err := emit(r); err != nil {
			emitErr = err
			return err
		}
		return nil
	}
	err := s.exportTx(ctx, out)
	if emitErr != nil && errors.Is(err, emitErr) {
		return emitErr
	}
	return dbErr(op, "", err)
}

func (s *backend) exportTx(ctx context.Context, out func(store.PortRecord) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a read-only transaction: nothing to keep
	steps := exportSteps(queryEach(ctx, tx), out)
	for _, k := range store.PortKinds() {
		if k == store.PortKindCounter {
			continue
		}
		if err := steps[k](filter{}); err != nil {
			return err
		}
	}
	v, err := effectSeqValue(ctx, tx)
	if err != nil {
		return err
	}
	return out(store.PortRecord{Kind: store.PortKindCounter,
		Counter: &store.PortCounter{Name: store.PortCounterEffectSeq, Value: uint64(v)}})
}

// filter narrows an export query to one key (PortLookup): cond is ANDed
// to its WHERE, args are its parameters. The zero filter keeps every row.
type filter struct {
	cond string
	args []any
}

func (f filter) where() string {
	if f.cond == "" {
		return "true"
	}
	return f.cond
}

// eachFunc runs an export query narrowed by f and calls row for each of
// its rows (now, or once a pipelined batch is sent).
type eachFunc func(f filter, query string, row func(pgx.Rows) error) error

// queryEach runs each query in tx at once, streaming its rows.
func queryEach(ctx context.Context, tx pgx.Tx) eachFunc {
	return func(f filter, query string, row func(pgx.Rows) error) error {
		rows, err := tx.Query(ctx, query, f.args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := row(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
}

// exportSteps returns each kind's export query (but the counter's), run
// by each and narrowed by a filter, each row given to out.
func exportSteps(each eachFunc, out func(store.PortRecord) error) map[store.PortKind]func(filter) error {
	return map[store.PortKind]func(filter) error{
		store.PortKindWorld: func(f filter) error {
			return each(f, `SELECT w.world, w.universe, w.status, w.status_reason, w.status_changed_at_ns, w.parent_world,
				w.parent_snapshot_hash, w.forked_at_height, w.created_at_ns, COALESCE(s.inbox_cursor, 0), w.inbox_seq,
				s.baseline_height
				FROM worlds w LEFT JOIN streams s ON s.stream = w.world WHERE `+f.where()+` ORDER BY w.world COLLATE "C"`, func(rows pgx.Rows) error {
				var w store.PortWorld
				var changed, created, forked, cursor, last int64
				var base *int64
				if err := rows.Scan(&w.ID, &w.Universe, &w.Status, &w.StatusReason, &changed, &w.ParentWorld,
					&w.ParentSnapshotHash, &forked, &created, &cursor, &last, &base); err != nil {
					return err
				}
				w.StatusChangedAt, w.CreatedAt, w.ForkedAtHeight = fromNS(changed), fromNS(created), uint64(forked)
				w.InboxCursor, w.LastSeq, w.BaselineHeight = uint64(cursor), uint64(last), seqOpt(base)
				return out(store.PortRecord{Kind: store.PortKindWorld, World: &w})
			})
		},
		store.PortKindStream: func(f filter) error {
			return each(f, `SELECT stream, head, compacted_to, compacted_at_ns FROM streams
				WHERE (head > 0 OR compacted_to > 0) AND `+f.where()+` ORDER BY stream COLLATE "C"`, func(rows pgx.Rows) error {
				var p store.PortStream
				var head, to int64
				var at *int64
				if err := rows.Scan(&p.Stream, &head, &to, &at); err != nil {
					return err
				}
				p.Head, p.CompactedTo, p.CompactedAt = uint64(head), uint64(to), optNSTime(at)
				return out(store.PortRecord{Kind: store.PortKindStream, Stream: &p})
			})
		},
		store.PortKindEvent: func(f filter) error {
			return each(f, `SELECT stream, run_seq, event_id, idempotency_key, event_type, emitted_at_ns, persisted_at_ns,
				step_id, logical_attempt_id, engine_attempt_id, plan_id, plan_version, payload
				FROM events WHERE `+f.where()+` ORDER BY stream COLLATE "C", run_seq`, func(rows pgx.Rows) error {
				var e store.PortEvent
				var seq, emitted, persisted, la, ea, pv int64
				if err := rows.Scan(&e.StreamID, &seq, &e.EventID, &e.IdempotencyKey, &e.EventType, &emitted, &persisted,
					&e.StepID, &la, &ea, &e.PlanID, &pv, &e.Payload); err != nil {
					return err
				}
				e.RunSeq, e.EmittedAt, e.PersistedAt = uint64(seq), fromNS(emitted), fromNS(persisted)
				e.LogicalAttemptID, e.EngineAttemptID, e.PlanVersion = uint64(la), uint64(ea), uint64(pv)
				return out(store.PortRecord{Kind: store.PortKindEvent, Event: &e})
			})
		},
		store.PortKindEventKey: func(f filter) error {
			return each(f, `SELECT stream, idempotency_key, event_id, run_seq, persisted_at_ns, event_type, payload_sha256
				FROM compacted_keys WHERE `+f.where()+` ORDER BY stream COLLATE "C", idempotency_key COLLATE "C"`, func(rows pgx.Rows) error {
				var k store.PortEventKey
				var seq, persisted int64
				if err := rows.Scan(&k.Stream, &k.IdempotencyKey, &k.EventID, &seq, &persisted, &k.EventType, &k.PayloadSHA256); err != nil {
					return err
				}
				k.RunSeq, k.PersistedAt = uint64(seq), fromNS(persisted)
				return out(store.PortRecord{Kind: store.PortKindEventKey, EventKey: &k})
			})
		},
		store.PortKindSnapshot: func(f filter) error {
			return each(f, `SELECT world, height, state, state_hash, created_at_ns FROM snapshots
				WHERE `+f.where()+` ORDER BY world COLLATE "C", height`, func(rows pgx.Rows) error {
				var p store.PortSnapshot
				var h, created int64
				if err := rows.Scan(&p.World, &h, &p.State, &p.StateHash, &created); err != nil {
					return err
				}
				p.Height, p.CreatedAt = uint64(h), fromNS(created)
				return out(store.PortRecord{Kind: store.PortKindSnapshot, Snapshot: &p})
			})
		},
		store.PortKindInbox: func(f filter) error {
			return each(f, `SELECT world, seq, kind, payload, COALESCE(dedupe_key, ''), enqueued_at_ns,
				key_live AND dedupe_key IS NOT NULL
				FROM inbox WHERE `+f.where()+` ORDER BY world COLLATE "C", seq`, func(rows pgx.Rows) error {
				var p store.PortInboxItem
				var seq, at int64
				if err := rows.Scan(&p.World, &seq, &p.Kind, &p.Payload, &p.DedupeKey, &at, &p.KeyLive); err != nil {
					return err
				}
				p.Seq, p.EnqueuedAt = uint64(seq), fromNS(at)
				return out(store.PortRecord{Kind: store.PortKindInbox, Inbox: &p})
			})
		},
		store.PortKindDrain: func(f filter) error {
			return each(f, `SELECT world, hi, drained_at_ns FROM inbox_drains WHERE `+f.where()+` ORDER BY world COLLATE "C", hi, lo`,
				func(rows pgx.Rows) error {
					var p store.PortDrain
					var hi, at int64
					if err := rows.Scan(&p.World, &hi, &at); err != nil {
						return err
					}
					p.Upto, p.DrainedAt = uint64(hi), fromNS(at)
					return out(store.PortRecord{Kind: store.PortKindDrain, Drain: &p})
				})
		},
		store.PortKindLease: func(f filter) error {
			return each(f, `SELECT world, holder, incarnation, epoch, expires_at_ns, took_over, displaced FROM leases
				WHERE `+f.where()+` ORDER BY world COLLATE "C"`, func(rows pgx.Rows) error {
				var p store.PortLease
				var epoch, exp int64
				if err := rows.Scan(&p.World, &p.Holder, &p.Incarnation, &epoch, &exp, &p.TookOver, &p.Displaced); err != nil {
					return err
				}
				p.Epoch, p.ExpiresAt = uint64(epoch), fromNS(exp)
				return out(store.PortRecord{Kind: store.PortKindLease, Lease: &p})
			})
		},
		store.PortKindAssignment: func(f filter) error {
			return each(f, `SELECT world, desired_worker, priority, reason FROM assignments WHERE `+f.where()+` ORDER BY world COLLATE "C"`,
				func(rows pgx.Rows) error {
					var p store.PortAssignment
					var prio int64
					if err := rows.Scan(&p.World, &p.DesiredWorker, &prio, &p.Reason); err != nil {
						return err
					}
					p.Priority = int(prio)
					return out(store.PortRecord{Kind: store.PortKindAssignment, Assignment: &p})
				})
		},
		store.PortKindEffect: func(f filter) error {
			return each(f, `SELECT seq, intent_hash, world, kind, params, origin, policy_context_hash, retry_policy, state,
				enqueued_at_ns, attempts, claimed_by, claim_expires_ns, claim_node, claim_incarnation, receipt_status,
				receipt_payload, inbox_seq, completed_at_ns, retries, retry_reason, resolve_reason, retry_at_ns, failures,
				last_error, hold_reason, held_at_ns, release_reason FROM effects WHERE `+f.where()+` ORDER BY seq`, func(rows pgx.Rows) error {
				var p store.PortEffect
				var seq, enq int64
				var attempts, retries, failures int32
				var exp, inboxSeq, done, retryAt, heldAt *int64
				if err := rows.Scan(&seq, &p.IntentHash, &p.World, &p.Kind, &p.Params, &p.Origin, &p.PolicyContextHash,
					&p.RetryPolicy, &p.State, &enq, &attempts, &p.ClaimedBy, &exp, &p.ClaimNode, &p.ClaimIncarnation,
					&p.ReceiptStatus, &p.ReceiptPayload, &inboxSeq, &done, &retries, &p.RetryReason, &p.ResolveReason,
					&retryAt, &failures, &p.LastError, &p.HoldReason, &heldAt, &p.ReleaseReason); err != nil {
					return err
				}
				p.Seq, p.EnqueuedAt, p.Attempts, p.Retries, p.Failures = uint64(seq), fromNS(enq), int(attempts), int(retries), int(failures)
				p.ClaimExpires, p.InboxSeq, p.CompletedAt, p.RetryAt = optNSTime(exp), seqOpt(inboxSeq), optNSTime(done), optNSTime(retryAt)
				p.HeldAt = optNSTime(heldAt)
				return out(store.PortRecord{Kind: store.PortKindEffect, Effect: &p})
			})
		},
		store.PortKindTimer: func(f filter) error {
			return each(f, `SELECT intent_hash, world, deliver_at_ns, payload,
				CASE state WHEN 'due' THEN 'scheduled' WHEN 'inflight' THEN 'claimed' ELSE state END, attempts, claimed_by, claim_expires_ns,
				claim_node, claim_incarnation, inbox_seq, completed_at_ns FROM timers WHERE `+f.where()+` ORDER BY intent_hash COLLATE "C"`,
				func(rows pgx.Rows) error {
					var p store.PortTimer
					var at int64
					var attempts int32
					var exp, inboxSeq, done *int64
					if err := rows.Scan(&p.IntentHash, &p.World, &at, &p.Payload, &p.State, &attempts, &p.ClaimedBy, &exp,
						&p.ClaimNode, &p.ClaimIncarnation, &inboxSeq, &done); err != nil {
						return err
					}
					p.DeliverAt, p.Attempt = fromNS(at), int(attempts)
					p.ClaimExpires, p.InboxSeq, p.CompletedAt = optNSTime(exp), seqOpt(inboxSeq), optNSTime(done)
					return out(store.PortRecord{Kind: store.PortKindTimer, Timer: &p})
				})
		},
		store.PortKindFabric: func(f filter) error {
			return each(f, `SELECT dest, message_id, seq, delivered_at_ns FROM fabric_dedupe
				WHERE `+f.where()+` ORDER BY dest COLLATE "C", message_id COLLATE "C"`, func(rows pgx.Rows) error {
				var p store.PortFabric
				var seq, at int64
				if err := rows.Scan(&p.Dest, &p.MessageID, &seq, &at); err != nil {
					return err
				}
				p.Seq, p.CompletedAt = uint64(seq), fromNS(at)
				return out(store.PortRecord{Kind: store.PortKindFabric, Fabric: &p})
			})
		},
		store.PortKindWatermark: func(f filter) error {
			return each(f, `SELECT projector, stream, mark FROM watermarks WHERE `+f.where()+` ORDER BY projector COLLATE "C", stream COLLATE "C"`,
				func(rows pgx.Rows) error {
					var p store.PortWatermark
					var v int64
					if err := rows.Scan(&p.Projector, &p.Stream, &v); err != nil {
						return err
					}
					p.Value = uint64(v)
					return out(store.PortRecord{Kind: store.PortKindWatermark, Watermark: &p})
				})
		},
		store.PortKindSchedule: func(f filter) error {
			return each(f, `SELECT `+scheduleCols+` FROM schedules WHERE `+f.where()+` ORDER BY id COLLATE "C"`,
				func(rows pgx.Rows) error {
					r, err := scanSchedule(rows)
					if err != nil {
						return err
					}
					return out(store.PortRecord{Kind: store.PortKindSchedule, Schedule: &store.PortSchedule{ID: r.ID, Spec: r.Spec,
						State: r.State, Paused: r.Paused, NextFireAt: r.NextFireAt, Version: r.Version, CreatedAt: r.CreatedAt,
						UpdatedAt: r.UpdatedAt}})
				})
		},
		store.PortKindQueue: func(f filter) error {
			return each(f, `SELECT `+queueCols+` FROM queues WHERE `+f.where()+` ORDER BY name COLLATE "C"`,
				func(rows pgx.Rows) error {
					q, err := scanQueue(rows)
					if err != nil {
						return err
					}
					return out(store.PortRecord{Kind: store.PortKindQueue, Queue: store.PortQueueOf(q)})
				})
		},
		store.PortKindQueuedRun: func(f filter) error {
			return each(f, `SELECT `+queuedCols+` FROM queued_runs WHERE `+f.where()+` ORDER BY run COLLATE "C"`,
				func(rows pgx.Rows) error {
					r, err := scanQueued(rows)
					if err != nil {
						return err
					}
					return out(store.PortRecord{Kind: store.PortKindQueuedRun, QueuedRun: store.PortQueuedRunOf(r)})
				})
		},
		// The rate windows' rows have no key of their own: grouped by
		// queue, partition and time.
		store.PortKindAdmission: func(f filter) error {
			return each(f, `SELECT queue, partition, at_ns, count(*) FROM queue_admissions WHERE `+f.where()+`
				GROUP BY queue, partition, at_ns ORDER BY queue COLLATE "C", partition COLLATE "C", at_ns`,
				func(rows pgx.Rows) error {
					var a store.PortAdmission
					var at, n int64
					if err := rows.Scan(&a.Queue, &a.Partition, &at, &n); err != nil {
						return err
					}
					a.At, a.Count = fromNS(at), int(n)
					return out(store.PortRecord{Kind: store.PortKindAdmission, Admission: &a})
				})
		},
	}
}

// raiseQueueSeqSQL moves queued_runs.seq's sequence past an imported
// entry's seq, so an entry enqueued on the target queues behind it.
const raiseQueueSeqSQL = `SELECT setval(s.n::regclass, greatest($1::bigint, COALESCE(pg_sequence_last_value(s.n::regclass), 0)))
	FROM (SELECT pg_get_serial_sequence(quote_ident(current_schema()) || '.queued_runs', 'seq') AS n) s`

// effectSeqSQL names the identity's sequence of effects.seq.
const effectSeqSQL = `pg_get_serial_sequence(quote_ident(current_schema()) || '.effects', 'seq')`

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// effectSeqValue reads the last seq the identity handed out (0: none).
func effectSeqValue(ctx context.Context, q querier) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, `SELECT COALESCE(pg_sequence_last_value(`+effectSeqSQL+`::regclass), 0)`).Scan(&v)
	return v, err
}

// Empty implements store.Importer.
func (s *backend) Empty(ctx context.Context) (bool, error) {
	const op = "empty"
	if err := s.begin(op); err != nil {
		return false, err
	}
	var held bool
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worlds) OR EXISTS (SELECT 1 FROM streams)
			OR EXISTS (SELECT 1 FROM events) OR EXISTS (SELECT 1 FROM compacted_keys) OR EXISTS (SELECT 1 FROM effects)
			OR EXISTS (SELECT 1 FROM timers) OR EXISTS (SELECT 1 FROM fabric_dedupe) OR EXISTS (SELECT 1 FROM watermarks)
			OR EXISTS (SELECT 1 FROM leases) OR EXISTS (SELECT 1 FROM schedules) OR EXISTS (SELECT 1 FROM queues)
			OR EXISTS (SELECT 1 FROM queued_runs) OR EXISTS (SELECT 1 FROM queue_admissions)`).Scan(&held)
	})
	return !held, err
}

// importCheck says what a queued statement of an import wrote: with
// conflict, a row that was not written is there already (ErrConflict).
type importCheck struct {
	world, what string
	conflict    bool // fewer rows written than asked is ErrConflict
	rows        int  // rows asked (0: one)
}

// eventRows and inboxRows gather a run of events or inbox items of a
// batch into one multi-row INSERT (the bulk of a store's records: a
// statement per row costs the server its fixed cost per row).
type eventRows struct {
	streams, ids, keys, types, steps, plans             []string
	seqs, emitted, persisted, logical, engine, versions []int64
	payloads, sums                                      [][]byte
}

func (e *eventRows) add(r *store.PortEvent, sum []byte) {
	e.streams, e.seqs, e.ids, e.keys = append(e.streams, r.StreamID), append(e.seqs, int64(r.RunSeq)), append(e.ids, r.EventID), append(e.keys, r.IdempotencyKey)
	e.types, e.emitted, e.persisted = append(e.types, r.EventType), append(e.emitted, toNS(r.EmittedAt)), append(e.persisted, toNS(r.PersistedAt))
	e.steps, e.logical, e.engine = append(e.steps, r.StepID), append(e.logical, int64(r.LogicalAttemptID)), append(e.engine, int64(r.EngineAttemptID))
	e.plans, e.versions, e.payloads, e.sums = append(e.plans, r.PlanID), append(e.versions, int64(r.PlanVersion)), append(e.payloads, r.Payload), append(e.sums, sum)
}

func (e *eventRows) flush(q func(importCheck, string, ...any)) {
	if len(e.streams) == 0 {
		return
	}
	q(importCheck{what: "an event of the batch", conflict: true, rows: len(e.streams)}, `INSERT INTO events (stream, run_seq,
		event_id, idempotency_key, event_type, emitted_at_ns, persisted_at_ns, step_id, logical_attempt_id,
		engine_attempt_id, plan_id, plan_version, payload, payload_sha256)
		SELECT u.* FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
			$8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::bigint[], $13::bytea[], $14::bytea[])
			AS u(stream, run_seq, event_id, idempotency_key, event_type, emitted_at_ns, persisted_at_ns, step_id,
			logical_attempt_id, engine_attempt_id, plan_id, plan_version, payload, payload_sha256)
		WHERE NOT EXISTS (SELECT 1 FROM compacted_keys k WHERE k.stream = u.stream AND k.idempotency_key = u.idempotency_key)
		ON CONFLICT DO NOTHING`,
		e.streams, e.seqs, e.ids, e.keys, e.types, e.emitted, e.persisted, e.steps, e.logical, e.engine, e.plans,
		e.versions, e.payloads, e.sums)
	*e = eventRows{}
}

type inboxRows struct {
	worlds, kinds []string
	keys          []*string
	seqs, at      []int64
	payloads      [][]byte
	live          []bool
}

func (in *inboxRows) add(p *store.PortInboxItem) {
	var key *string
	if p.DedupeKey != "" {
		key = &p.DedupeKey
	}
	in.worlds, in.seqs, in.kinds, in.payloads = append(in.worlds, p.World), append(in.seqs, int64(p.Seq)), append(in.kinds, p.Kind), append(in.payloads, p.Payload)
	in.keys, in.at, in.live = append(in.keys, key), append(in.at, toNS(p.EnqueuedAt)), append(in.live, p.KeyLive && key != nil)
}

func (in *inboxRows) flush(q func(importCheck, string, ...any)) {
	if len(in.worlds) == 0 {
		return
	}
	q(importCheck{what: "an inbox item or live key of the batch", conflict: true, rows: len(in.worlds)}, `INSERT INTO inbox
		(world, seq, kind, payload, dedupe_key, enqueued_at_ns, key_live)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::bigint[], $7::boolean[])
		ON CONFLICT DO NOTHING`, in.worlds, in.seqs, in.kinds, in.payloads, in.keys, in.at, in.live)
	// A world's last seq is at least its highest item's: a resumed copy
	// may import items a world record already imported had not counted
	// (the source took input between the two runs), and the next delivery
	// must not take a seq an item holds.
	q(importCheck{}, `UPDATE worlds y SET inbox_seq = m.s
		FROM (SELECT u.w, max(u.s) AS s FROM unnest($1::text[], $2::bigint[]) AS u(w, s) GROUP BY u.w) AS m
		WHERE y.world = m.w AND y.inbox_seq < m.s`, in.worlds, in.seqs)
	*in = inboxRows{}
}

// Import implements store.Importer: the batch is one transaction whose
// statements are sent in one pipelined round trip.
func (s *backend) Import(ctx context.Context, batch []store.PortRecord) error {
	const op = "import"
	if err := s.begin(op); err != nil {
		return err
	}
	return s.retry(ctx, op, "", func() error { return s.importTx(ctx, op, batch) })
}

func (s *backend) importTx(ctx context.Context, op string, batch []store.PortRecord) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rolled back unless committed
	var nowNS int64
	if err := tx.QueryRow(ctx, `SELECT now_ns($1)`, s.off()).Scan(&nowNS); err != nil {
		return err
	}
	now := fromNS(nowNS)

	// The worlds an inflight or held effect's withdrawal depends on, and
	// every world a row names (checked to exist before the commit).
	var openWorlds, named []string
	batchArchived := map[string]bool{}
	for _, r := range batch {
		switch r.Kind {
		case store.PortKindWorld:
			batchArchived[r.World.ID] = r.World.Status == store.WorldArchived
		case store.PortKindEffect:
			if r.Effect.State == "inflight" || r.Effect.State == "held" {
				openWorlds = append(openWorlds, r.Effect.World)
			}
		}
	}
	archived := map[string]bool{}
	if len(openWorlds) > 0 {
		rows, err := tx.Query(ctx, `SELECT world FROM worlds WHERE world = ANY($1) AND status = 'archived'`, openWorlds)
		if err != nil {
			return err
		}
		ws, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, w := range ws {
			archived[w] = true
		}
	}

	b := &pgx.Batch{}
	var checks []importCheck
	q := func(c importCheck, sql string, args ...any) {
		b.Queue(sql, args...)
		checks = append(checks, c)
	}
	drainLo := map[string]int64{}
	var ev eventRows
	var in inboxRows
	bw, bs, bd, bl, be, bt := newBulk(store.PortKindWorld), newBulk(store.PortKindStream), newBulk(store.PortKindDrain),
		newBulk(store.PortKindLease), newBulk(store.PortKindEffect), newBulk(store.PortKindTimer)
	bulks := []*bulk{bw, bs, bd, bl, be, bt}
	for _, r := range batch {
		isArchived := false
		if r.Kind == store.PortKindEffect {
			w := r.Effect.World
			isArchived = archived[w] || batchArchived[w]
		}
		r = store.PortImported(r, isArchived, now)
		if r.Kind != store.PortKindEvent {
			ev.flush(q)
		}
		if r.Kind != store.PortKindInbox {
			in.flush(q)
		}
		for _, x := range bulks {
			if x.kind != r.Kind {
				x.flush(q)
			}
		}
		switch r.Kind {
		case store.PortKindWorld:
			w := r.World
			bw.row(w.ID, w.Universe, string(w.Status), w.StatusReason, toNS(w.StatusChangedAt), w.ParentWorld,
				w.ParentSnapshotHash, int64(w.ForkedAtHeight), toNS(w.CreatedAt), int64(w.LastSeq), int64(w.InboxCursor),
				optSeqArg(w.BaselineHeight))
		case store.PortKindStream:
			p := r.Stream
			bs.row(p.Stream, int64(p.Head), int64(p.CompactedTo), nsOpt(p.CompactedAt))
		case store.PortKindEvent:
			e := r.Event
			sum := sha256.Sum256(e.Payload)
			ev.add(e, sum[:])
			continue
		case store.PortKindEventKey:
			k := r.EventKey
			q(importCheck{world: "", what: "key " + k.IdempotencyKey + " of stream " + k.Stream, conflict: true}, `INSERT INTO compacted_keys
				(stream, idempotency_key, event_id, run_seq, persisted_at_ns, event_type, payload_sha256)
				SELECT $1, $2, $3, $4, $5, $6, $7
				WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.stream = $1 AND e.idempotency_key = $2)
				ON CONFLICT DO NOTHING`,
				k.Stream, k.IdempotencyKey, k.EventID, int64(k.RunSeq), toNS(k.PersistedAt), k.EventType, k.PayloadSHA256)
		case store.PortKindSnapshot:
			p := r.Snapshot
			named = append(named, p.World)
			q(importCheck{world: p.World, what: "snapshot", conflict: true}, `INSERT INTO snapshots (world, height, state, state_hash, created_at_ns)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, p.World, int64(p.Height), p.State, p.StateHash, toNS(p.CreatedAt))
		case store.PortKindInbox:
			named = append(named, r.Inbox.World)
			in.add(r.Inbox)
			continue
		case store.PortKindDrain:
			p := r.Drain
			named = append(named, p.World)
			// lo is the cursor the world's drain before left: within the
			// batch, the last one; else (NULL here) the highest stored.
			var lo *int64
			if v, ok := drainLo[p.World]; ok {
				lo = &v
			}
			bd.row(p.World, lo, int64(p.Upto), toNS(p.DrainedAt))
			drainLo[p.World] = int64(p.Upto)
		case store.PortKindLease:
			p := r.Lease
			named = append(named, p.World)
			bl.row(p.World, p.Holder, p.Incarnation, p.TookOver, p.Displaced, int64(p.Epoch), toNS(p.ExpiresAt))
		case store.PortKindAssignment:
			p := r.Assignment
			named = append(named, p.World)
			q(importCheck{world: p.World, what: "assignment", conflict: true}, `INSERT INTO assignments (world, desired_worker, priority, reason)
				VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, p.World, p.DesiredWorker, int64(p.Priority), p.Reason)
		case store.PortKindEffect:
			p := r.Effect
			named = append(named, p.World)
			be.row(int64(p.Seq), p.IntentHash, p.World, p.Kind, p.Params, p.Origin, p.PolicyContextHash, p.RetryPolicy,
				p.State, toNS(p.EnqueuedAt), int32(p.Attempts), p.ClaimedBy, nsOpt(p.ClaimExpires), p.ClaimNode,
				p.ClaimIncarnation, p.ReceiptStatus, p.ReceiptPayload, optSeqArg(p.InboxSeq), nsOpt(p.CompletedAt),
				int32(p.Retries), p.RetryReason, p.ResolveReason, nsOpt(p.RetryAt), int32(p.Failures), p.LastError,
				p.HoldReason, nsOpt(p.HeldAt), p.ReleaseReason)
		case store.PortKindTimer:
			p := r.Timer
			named = append(named, p.World)
			bt.row(p.IntentHash, p.World, toNS(p.DeliverAt), p.Payload, p.State, int32(p.Attempt), p.ClaimedBy,
				nsOpt(p.ClaimExpires), p.ClaimNode, p.ClaimIncarnation, optSeqArg(p.InboxSeq), nsOpt(p.CompletedAt))
		case store.PortKindFabric:
			p := r.Fabric
			named = append(named, p.Dest)
			q(importCheck{world: p.Dest, what: "fabric message " + p.MessageID, conflict: true}, `INSERT INTO fabric_dedupe (dest, message_id,
				seq, delivered_at_ns) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
				p.Dest, p.MessageID, int64(p.Seq), toNS(p.CompletedAt))
		case store.PortKindWatermark:
			p := r.Watermark
			q(importCheck{world: "", what: "watermark " + p.Projector + "/" + p.Stream, conflict: true}, `INSERT INTO watermarks (projector,
				stream, mark) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, p.Projector, p.Stream, int64(p.Value))
		case store.PortKindSchedule:
			p := r.Schedule
			q(importCheck{world: "", what: "schedule " + p.ID, conflict: true}, `INSERT INTO schedules (`+scheduleCols+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`, p.ID, p.Spec, p.State, p.Paused,
				nullNS(p.NextFireAt), int64(p.Version), toNS(p.CreatedAt), toNS(p.UpdatedAt))
		case store.PortKindQueue:
			p := r.Queue
			q(importCheck{world: "", what: "queue " + p.Name, conflict: true}, `INSERT INTO queues (`+queueCols+`)
				VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, p.Name, int64(p.Concurrency),
				int64(p.WorkerConcurrency), int64(p.RateLimit), int64(p.RatePeriod), p.Partitioned)
		case store.PortKindQueuedRun:
			p := r.QueuedRun
			named = append(named, p.Run)
			var adm *int64
			if !p.AdmittedAt.IsZero() {
				v := toNS(p.AdmittedAt)
				adm = &v
			}
			// A seq held by another entry is a conflict as the run's key
			// is: the seq orders the queue.
			q(importCheck{world: p.Run, what: "queued run", conflict: true}, `INSERT INTO queued_runs (`+queuedCols+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`, p.Queue, p.Run, p.Partition,
				int64(p.Priority), int64(p.Seq), toNS(p.EnqueuedAt), p.Worker, adm, p.Needs)
			q(importCheck{}, raiseQueueSeqSQL, int64(p.Seq))
		case store.PortKindAdmission:
			p := r.Admission
			q(importCheck{world: "", what: "queue admission " + p.Queue + "/" + p.Partition, conflict: true, rows: p.Count},
				`INSERT INTO queue_admissions (queue, partition, at_ns) SELECT $1, $2, $3 FROM generate_series(1, $4::bigint)
				WHERE NOT EXISTS (SELECT 1 FROM queue_admissions WHERE queue = $1 AND partition = $2 AND at_ns = $3)`,
				p.Queue, p.Partition, toNS(p.At), int64(p.Count))
		case store.PortKindCounter:
			if r.Counter.Value > 0 {
				q(importCheck{}, raiseEffectSeqSQL, int64(r.Counter.Value))
			}
		}
	}
	ev.flush(q)
	in.flush(q)
	for _, x := range bulks {
		x.flush(q)
	}
	br := tx.SendBatch(ctx, b)
	for _, c := range checks {
		ct, err := br.Exec()
		if err != nil {
			br.Close()
			return importErr(err)
		}
		if c.conflict && ct.RowsAffected() < int64(max(c.rows, 1)) {
			br.Close()
			return store.Errorf("import", store.ErrConflict, c.world, "%s exists", c.what)
		}
	}
	if err := br.Close(); err != nil {
		return importErr(err)
	}
	if len(named) > 0 {
		var missing string
		err := tx.QueryRow(ctx, `SELECT u.w FROM unnest($1::text[]) AS u(w)
			WHERE NOT EXISTS (SELECT 1 FROM worlds x WHERE x.world = u.w) LIMIT 1`, named).Scan(&missing)
		switch {
		case err == nil:
			return store.Errorf(op, store.ErrWorldNotFound, missing, "a record of a world not imported")
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
	}
	// Hints for whoever watches the target already; correctness never
	// depends on them.
	if _, err := tx.Exec(ctx, `SELECT notify_topic(t) FROM unnest(ARRAY['effects', 'timers', 'leases', 'assignments']) AS t`); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if wasCut(tx.Conn()) {
		return errSyncRepCut // committed here; a standby may lack it (failover.go)
	}
	return nil
}

// raiseEffectSeqSQL moves the effects' identity to at least $1, never
// back.
const raiseEffectSeqSQL = `SELECT setval(s.n::regclass, greatest($1::bigint, COALESCE(pg_sequence_last_value(s.n::regclass), 0)))
	FROM (SELECT ` + effectSeqSQL + ` AS n) s`

// importErr maps what the schema refuses of an imported row: a state its
// CHECK does not know, a value out of range.
func importErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "21000" { // cardinality_violation: a key twice in one multi-row upsert
		return store.Errorf("import", store.ErrConflict, "", "%s", pe.Message)
	}
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation: a queued run's queue or world
		if strings.Contains(pe.ConstraintName, "queue_fkey") {
			return store.Errorf("import", store.ErrNotFound, "", "%s", pe.Message)
		}
		return store.Errorf("import", store.ErrWorldNotFound, "", "%s", pe.Message)
	}
	if errors.As(err, &pe) && (pe.Code == "23514" || pe.Code == "23502") { // check_violation, not_null_violation
		return store.Errorf("import", store.ErrInvalid, "", "%s", pe.Message)
	}
	return err
}

// FinishImport implements store.Importer: the effects' identity past the
// highest imported seq, and the planner's statistics.
func (s *backend) FinishImport(ctx context.Context) error {
	const op = "finish_import"
	if err := s.begin(op); err != nil {
		return err
	}
	return s.retry(ctx, op, "", func() error {
		var m *int64
		if err := s.db.QueryRow(ctx, `SELECT max(seq) FROM effects`).Scan(&m); err != nil {
			return err
		}
		if m != nil && *m > 0 {
			if _, err := s.db.Exec(ctx, raiseEffectSeqSQL, *m); err != nil {
				return err
			}
		}
		_, err := s.db.Exec(ctx, `ANALYZE worlds, streams, events, compacted_keys, snapshots, inbox, inbox_drains,
			leases, assignments, effects, timers, fabric_dedupe, watermarks, queues, queued_runs, queue_admissions`)
		return err
	})
}

// bulk gathers a run of one kind's records of a batch into the columns of
// one multi-row statement (bulkSQL), as eventRows and inboxRows do.
type bulk struct {
	kind store.PortKind
	cols []reflect.Value // each a slice, one element per row
	n    int
}

func newBulk(k store.PortKind) *bulk { return &bulk{kind: k} }

func (b *bulk) row(vals ...any) {
	if b.cols == nil {
		b.cols = make([]reflect.Value, len(vals))
		for i, v := range vals {
			b.cols[i] = reflect.MakeSlice(reflect.SliceOf(reflect.TypeOf(v)), 0, 64)
		}
	}
	for i, v := range vals {
		b.cols[i] = reflect.Append(b.cols[i], reflect.ValueOf(v))
	}
	b.n++
}

func (b *bulk) flush(q func(importCheck, string, ...any)) {
	if b.n == 0 {
		return
	}
	args := make([]any, len(b.cols))
	for i, c := range b.cols {
		args[i] = c.Interface()
	}
	for _, st := range bulkSQL[b.kind] {
		q(importCheck{what: st.what, conflict: st.what != "", rows: b.n}, st.sql, args[:st.args]...)
	}
	b.cols, b.n = nil, 0
}

// bulkSQL is each bulk kind's statements over its columns ($1…, in the
// order its row call gives them); a statement with a what must write every
// row (fewer is ErrConflict); args is how many columns it takes.
var bulkSQL = map[store.PortKind][]struct {
	what, sql string
	args      int
}{
	store.PortKindWorld: {
		{"a world of the batch", `INSERT INTO worlds (world, universe, status, status_reason, status_changed_at_ns,
			parent_world, parent_snapshot_hash, forked_at_height, created_at_ns, inbox_seq)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[],
				$8::bigint[], $9::bigint[], $10::bigint[])
			ON CONFLICT DO NOTHING`, 10},
		// Every world has its stream row, which holds its cursor and
		// baseline.
		{"", `INSERT INTO streams (stream, inbox_cursor, baseline_height)
			SELECT u.w, u.c, u.b FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
				$7::text[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[])
				AS u(w, a2, a3, a4, a5, a6, a7, a8, a9, a10, c, b)
			ON CONFLICT (stream) DO UPDATE SET inbox_cursor = EXCLUDED.inbox_cursor, baseline_height = EXCLUDED.baseline_height`, 12},
	},
	// A world's stream row exists already (its world made it) with head 0:
	// the record fills it in; a stream row with a head or a floor is there
	// already, a conflict.
	store.PortKindStream: {
		{"a stream of the batch", `INSERT INTO streams AS x (stream, head, compacted_to, compacted_at_ns)
			SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
			ON CONFLICT (stream) DO UPDATE SET head = EXCLUDED.head, compacted_to = EXCLUDED.compacted_to,
				compacted_at_ns = EXCLUDED.compacted_at_ns
			WHERE x.head = 0 AND x.compacted_to = 0`, 4},
	},
	// The cursor only moves forward: a world's drains are keyed by the
	// seq they reached (hi).
	store.PortKindDrain: {
		{"a drain of the batch", `INSERT INTO inbox_drains (world, lo, hi, drained_at_ns)
			SELECT u.w, COALESCE(u.lo, (SELECT max(d.hi) FROM inbox_drains d WHERE d.world = u.w), 0), u.hi, u.at
			FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(w, lo, hi, at)
			WHERE NOT EXISTS (SELECT 1 FROM inbox_drains d WHERE d.world = u.w AND d.hi = u.hi)`, 4},
	},
	store.PortKindLease: {
		{"a lease of the batch", `INSERT INTO leases (world, holder, incarnation, took_over, displaced, epoch, expires_at_ns)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::text[], $6::bigint[], $7::bigint[])
			ON CONFLICT DO NOTHING`, 7},
	},
	store.PortKindEffect: {
		{"an effect of the batch", `INSERT INTO effects (seq, intent_hash, world, kind, params, origin,
			policy_context_hash, retry_policy, state, enqueued_at_ns, attempts, claimed_by, claim_expires_ns, claim_node,
			claim_incarnation, receipt_status, receipt_payload, inbox_seq, completed_at_ns, retries, retry_reason,
			resolve_reason, retry_at_ns, failures, last_error, hold_reason, held_at_ns, release_reason)
			OVERRIDING SYSTEM VALUE
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::text[],
				$8::bytea[], $9::text[], $10::bigint[], $11::integer[], $12::text[], $13::bigint[], $14::text[], $15::text[],
				$16::text[], $17::bytea[], $18::bigint[], $19::bigint[], $20::integer[], $21::text[], $22::text[],
				$23::bigint[], $24::integer[], $25::text[], $26::text[], $27::bigint[], $28::text[])
			ON CONFLICT DO NOTHING`, 28},
	},
	store.PortKindTimer: {
		{"a timer of the batch", `INSERT INTO timers (intent_hash, world, deliver_at_ns, payload, state, attempts,
			claimed_by, claim_expires_ns, claim_node, claim_incarnation, inbox_seq, completed_at_ns)
			SELECT u.h, u.w, u.d, u.p, CASE u.st WHEN 'scheduled' THEN 'due' WHEN 'claimed' THEN 'inflight' ELSE u.st END,
				u.a, u.cb, u.ce, u.cn, u.ci, u.s, u.c
			FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::text[], $6::integer[], $7::text[],
				$8::bigint[], $9::text[], $10::text[], $11::bigint[], $12::bigint[])
				AS u(h, w, d, p, st, a, cb, ce, cn, ci, s, c)
			ON CONFLICT DO NOTHING`, 12},
	},
}

// PortLookup implements store.PortBackend: each record's key looked up
// by the export's own query for its kind, narrowed to the key, all of
// them pipelined in one round trip of one read-only transaction.
func (s *backend) PortLookup(ctx context.Context, batch []store.PortRecord) ([]*store.PortRecord, error) {
	const op = "import"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	var out []*store.PortRecord
	err := s.retry(ctx, op, "", func() error {
		out = make([]*store.PortRecord, len(batch))
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a read-only transaction: nothing to keep
		b := &pgx.Batch{}
		// queued is the record whose query is being queued, cur the one
		// whose rows are being read (the batch's callbacks run in order).
		queued, cur := 0, 0
		queue := func(f filter, query string, row func(pgx.Rows) error) error {
			i := queued
			b.Queue(query, f.args...).Query(func(rows pgx.Rows) error {
				cur = i
				for rows.Next() {
					if err := row(rows); err != nil {
						return err
					}
				}
				return rows.Err()
			})
			return nil
		}
		steps := exportSteps(queue, func(x store.PortRecord) error {
			if out[cur] == nil {
				x.Format = store.PortFormat
				out[cur] = &x
			}
			return nil
		})
		for i, r := range batch {
			var f filter
			switch r.Kind {
			case store.PortKindWorld:
				f = filter{"w.world = $1", []any{r.World.ID}}
			case store.PortKindStream:
				f = filter{"stream = $1", []any{r.Stream.Stream}}
			case store.PortKindEvent:
				f = filter{"stream = $1 AND run_seq = $2", []any{r.Event.StreamID, int64(r.Event.RunSeq)}}
			case store.PortKindEventKey:
				f = filter{"stream = $1 AND idempotency_key = $2", []any{r.EventKey.Stream, r.EventKey.IdempotencyKey}}
			case store.PortKindSnapshot:
				f = filter{"world = $1 AND height = $2", []any{r.Snapshot.World, int64(r.Snapshot.Height)}}
			case store.PortKindInbox:
				f = filter{"world = $1 AND seq = $2", []any{r.Inbox.World, int64(r.Inbox.Seq)}}
			case store.PortKindDrain:
				f = filter{"world = $1 AND hi = $2", []any{r.Drain.World, int64(r.Drain.Upto)}}
			case store.PortKindLease:
				f = filter{"world = $1", []any{r.Lease.World}}
			case store.PortKindAssignment:
				f = filter{"world = $1", []any{r.Assignment.World}}
			case store.PortKindEffect:
				f = filter{"intent_hash = $1", []any{r.Effect.IntentHash}}
			case store.PortKindTimer:
				f = filter{"intent_hash = $1", []any{r.Timer.IntentHash}}
			case store.PortKindFabric:
				f = filter{"dest = $1 AND message_id = $2", []any{r.Fabric.Dest, r.Fabric.MessageID}}
			case store.PortKindWatermark:
				f = filter{"projector = $1 AND stream = $2", []any{r.Watermark.Projector, r.Watermark.Stream}}
			case store.PortKindSchedule:
				f = filter{"id = $1", []any{r.Schedule.ID}}
			case store.PortKindQueue:
				f = filter{"name = $1", []any{r.Queue.Name}}
			case store.PortKindQueuedRun:
				f = filter{"run = $1", []any{r.QueuedRun.Run}}
			case store.PortKindAdmission:
				f = filter{"queue = $1 AND partition = $2 AND at_ns = $3", []any{r.Admission.Queue, r.Admission.Partition,
					toNS(r.Admission.At)}}
			default:
				continue
			}
			queued = i
			if err := steps[r.Kind](f); err != nil {
				return err
			}
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
	return out, err
}
