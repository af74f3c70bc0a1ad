package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"time"

	"github.com/orrery-run/orrery/store"
)

// The port (store.Exporter, store.Importer) over this schema. The
// logical records map onto the tables nearly one to one; what differs:
//
//   - a stream's head is exported as Journal.Head answers it (the higher
//     of the streams row's floor and the last runSeq), and imported as the
//     streams row's floor, which is then that same head;
//   - event_keys holds every idempotency key: a live event's key travels
//     with its event record, and only the keys whose events compaction
//     removed are event_key records;
//   - a world's last inbox seq is its highest inbox seq (items are never
//     deleted), so the world record's LastSeq is read, never written;
//   - an inbox item's key is live while inbox_dedupe holds it.

var _ store.PortBackend = (*backend)(nil)

func utcOpt(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromNS(v.Int64)
	return &t
}

func optNS(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixNano()
}

func optSeq(v sql.NullInt64) *uint64 {
	if !v.Valid {
		return nil
	}
	u := uint64(v.Int64)
	return &u
}

func optU64(v *uint64) any {
	if v == nil {
		return nil
	}
	return int64(*v)
}

func optStr(v sql.NullString) *string {
	if !v.Valid {
		return nil
	}
	s := v.String
	return &s
}

func strOrNil(v *string) any {
	if v == nil {
		return nil
	}
	return *v
}

// blobArg stores b as it is: nil as NULL, empty as a zero-length blob
// (read back with its "IS NOT NULL" flag, see blob).
func blobArg(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// Export implements store.Exporter: one read transaction, so every query
// sees the same state, each streamed row by row.
func (s *backend) Export(ctx context.Context, emit func(store.PortRecord) error) error {
	const op = "export"
	if err := s.read(ctx, op); err != nil {
		return err
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return dbErr(op, "", err)
	}
	defer tx.Rollback() //nolint:errcheck // a read transaction: nothing to keep
	// A deferred transaction's snapshot starts at its first read: take it
	// now, before any row is emitted.
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM worlds LIMIT 1`); err != nil {
		return dbErr(op, "", err)
	}
	ex := &sqliteExport{ctx: ctx, tx: tx, emit: emit}
	for _, step := range []func(filter) error{ex.worlds, ex.streams, ex.events, ex.eventKeys, ex.snapshots, ex.inbox,
		ex.drains, ex.leases, ex.assignments, ex.effects, ex.timers, ex.fabric, ex.watermarks, ex.schedules,
		ex.queues, ex.queuedRuns, ex.admissions} {
		if err := step(filter{}); err != nil {
			if ex.emitErr != nil && errors.Is(err, ex.emitErr) {
				return ex.emitErr
			}
			return dbErr(op, "", err)
		}
	}
	if err := ex.counters(); err != nil {
		if ex.emitErr != nil && errors.Is(err, ex.emitErr) {
			return ex.emitErr
		}
		return dbErr(op, "", err)
	}
	return nil
}

// filter narrows an export query to one key (PortLookup): cond is ANDed
// to its WHERE, args are its parameters. The zero filter keeps every row.
type filter struct {
	cond string
	args []any
}

func (f filter) where() string {
	if f.cond == "" {
		return "1"
	}
	return f.cond
}

type sqliteExport struct {
	ctx     context.Context
	tx      *sql.Tx
	emit    func(store.PortRecord) error
	emitErr error
}

func (ex *sqliteExport) out(r store.PortRecord) error {
	r.Format = store.PortFormat
	if err := ex.emit(r); err != nil {
		ex.emitErr = err
		return err
	}
	return nil
}

// each runs query with f's arguments and calls row for each row,
// streaming.
func (ex *sqliteExport) each(f filter, query string, row func(*sql.Rows) error) error {
	rows, err := ex.tx.QueryContext(ex.ctx, query, f.args...)
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

func (ex *sqliteExport) worlds(f filter) error {
	return ex.each(f, `SELECT w.id, w.universe, w.status, w.status_reason, w.status_changed_at, w.parent_world,
		w.parent_snapshot_hash, w.forked_at_height, w.created_at, w.inbox_cursor, w.baseline_height,
		COALESCE((SELECT MAX(i.seq) FROM inbox i WHERE i.world = w.id), 0)
		FROM worlds w WHERE `+f.where()+` ORDER BY w.id`, func(rows *sql.Rows) error {
		var w store.PortWorld
		var changed, base sql.NullInt64
		var forked, created, cursor, last int64
		if err := rows.Scan(&w.ID, &w.Universe, &w.Status, &w.StatusReason, &changed, &w.ParentWorld,
			&w.ParentSnapshotHash, &forked, &created, &cursor, &base, &last); err != nil {
			return err
		}
		w.StatusChangedAt, w.ForkedAtHeight, w.CreatedAt = fromNullNS(changed), uint64(forked), fromNS(created)
		w.InboxCursor, w.LastSeq, w.BaselineHeight = uint64(cursor), uint64(last), optSeq(base)
		return ex.out(store.PortRecord{Kind: store.PortKindWorld, World: &w})
	})
}

func (ex *sqliteExport) streams(f filter) error {
	return ex.each(f, `SELECT x.stream,
		MAX(COALESCE(s.head, 0), COALESCE((SELECT MAX(e.run_seq) FROM events e WHERE e.stream = x.stream), 0)),
		COALESCE(s.compacted_to, 0), s.compacted_at
		FROM (SELECT stream FROM streams UNION SELECT stream FROM event_keys) x
		LEFT JOIN streams s ON s.stream = x.stream WHERE `+f.where()+` ORDER BY x.stream`, func(rows *sql.Rows) error {
		var p store.PortStream
		var head, to int64
		var at sql.NullInt64
		if err := rows.Scan(&p.Stream, &head, &to, &at); err != nil {
			return err
		}
		if head == 0 && to == 0 {
			return nil
		}
		p.Head, p.CompactedTo, p.CompactedAt = uint64(head), uint64(to), utcOpt(at)
		return ex.out(store.PortRecord{Kind: store.PortKindStream, Stream: &p})
	})
}

func (ex *sqliteExport) events(f filter) error {
	return ex.each(f, `SELECT stream, run_seq, event_id, idempotency_key, event_type, emitted_at, persisted_at,
		step_id, logical_attempt, engine_attempt, plan_id, plan_version, payload, payload IS NOT NULL
		FROM events WHERE `+f.where()+` ORDER BY stream, run_seq`, func(rows *sql.Rows) error {
		var e store.PortEvent
		var seq, persisted, la, ea, pv int64
		var emitted sql.NullInt64
		var present bool
		if err := rows.Scan(&e.StreamID, &seq, &e.EventID, &e.IdempotencyKey, &e.EventType, &emitted, &persisted,
			&e.StepID, &la, &ea, &e.PlanID, &pv, &e.Payload, &present); err != nil {
			return err
		}
		e.RunSeq, e.EmittedAt, e.PersistedAt = uint64(seq), fromNullNS(emitted), fromNS(persisted)
		e.LogicalAttemptID, e.EngineAttemptID, e.PlanVersion = uint64(la), uint64(ea), uint64(pv)
		e.Payload = blob(e.Payload, present)
		return ex.out(store.PortRecord{Kind: store.PortKindEvent, Event: &e})
	})
}

func (ex *sqliteExport) eventKeys(f filter) error {
	return ex.each(f, `SELECT k.stream, k.idempotency_key, k.event_id, k.run_seq, k.persisted_at, k.event_type,
		k.payload_sha256 FROM event_keys k
		WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.stream = k.stream AND e.run_seq = k.run_seq)
		AND `+f.where()+` ORDER BY k.stream, k.idempotency_key`, func(rows *sql.Rows) error {
		var k store.PortEventKey
		var seq, persisted int64
		var et sql.NullString
		if err := rows.Scan(&k.Stream, &k.IdempotencyKey, &k.EventID, &seq, &persisted, &et, &k.PayloadSHA256); err != nil {
			return err
		}
		k.RunSeq, k.PersistedAt, k.EventType = uint64(seq), fromNS(persisted), optStr(et)
		return ex.out(store.PortRecord{Kind: store.PortKindEventKey, EventKey: &k})
	})
}

func (ex *sqliteExport) snapshots(f filter) error {
	return ex.each(f, `SELECT world, height, state, state IS NOT NULL, state_hash, created_at FROM snapshots
		WHERE `+f.where()+` ORDER BY world, height`, func(rows *sql.Rows) error {
		var p store.PortSnapshot
		var h, created int64
		var present bool
		if err := rows.Scan(&p.World, &h, &p.State, &present, &p.StateHash, &created); err != nil {
			return err
		}
		p.Height, p.State, p.CreatedAt = uint64(h), blob(p.State, present), fromNS(created)
		return ex.out(store.PortRecord{Kind: store.PortKindSnapshot, Snapshot: &p})
	})
}

func (ex *sqliteExport) inbox(f filter) error {
	return ex.each(f, `SELECT i.world, i.seq, i.kind, i.payload, i.payload IS NOT NULL, i.dedupe_key, i.enqueued_at,
		i.dedupe_key <> '' AND EXISTS (SELECT 1 FROM inbox_dedupe d
			WHERE d.world = i.world AND d.dedupe_key = i.dedupe_key AND d.seq = i.seq)
		FROM inbox i WHERE `+f.where()+` ORDER BY i.world, i.seq`, func(rows *sql.Rows) error {
		var p store.PortInboxItem
		var seq, at int64
		var present bool
		if err := rows.Scan(&p.World, &seq, &p.Kind, &p.Payload, &present, &p.DedupeKey, &at, &p.KeyLive); err != nil {
			return err
		}
		p.Seq, p.Payload, p.EnqueuedAt = uint64(seq), blob(p.Payload, present), fromNS(at)
		return ex.out(store.PortRecord{Kind: store.PortKindInbox, Inbox: &p})
	})
}

func (ex *sqliteExport) drains(f filter) error {
	return ex.each(f, `SELECT world, upto, drained_at FROM inbox_drains WHERE `+f.where()+` ORDER BY world, upto, rowid`, func(rows *sql.Rows) error {
		var p store.PortDrain
		var upto, at int64
		if err := rows.Scan(&p.World, &upto, &at); err != nil {
			return err
		}
		p.Upto, p.DrainedAt = uint64(upto), fromNS(at)
		return ex.out(store.PortRecord{Kind: store.PortKindDrain, Drain: &p})
	})
}

func (ex *sqliteExport) leases(f filter) error {
	return ex.each(f, `SELECT world, holder, incarnation, epoch, expires_at, took_over, displaced FROM leases
		WHERE `+f.where()+` ORDER BY world`,
		func(rows *sql.Rows) error {
			var p store.PortLease
			var epoch, exp int64
			if err := rows.Scan(&p.World, &p.Holder, &p.Incarnation, &epoch, &exp, &p.TookOver, &p.Displaced); err != nil {
				return err
			}
			p.Epoch, p.ExpiresAt = uint64(epoch), fromNS(exp)
			return ex.out(store.PortRecord{Kind: store.PortKindLease, Lease: &p})
		})
}

func (ex *sqliteExport) assignments(f filter) error {
	return ex.each(f, `SELECT world, desired_worker, priority, reason FROM assignments WHERE `+f.where()+` ORDER BY world`, func(rows *sql.Rows) error {
		var p store.PortAssignment
		if err := rows.Scan(&p.World, &p.DesiredWorker, &p.Priority, &p.Reason); err != nil {
			return err
		}
		return ex.out(store.PortRecord{Kind: store.PortKindAssignment, Assignment: &p})
	})
}

const sqliteEffectCols = `seq, intent_hash, world, kind, params, params IS NOT NULL, origin, policy_context_hash,
	retry_policy, retry_policy IS NOT NULL, state, enqueued_at, attempts, claimed_by, claim_expires, claim_node,
	claim_incarnation, receipt_status, receipt_payload, receipt_payload IS NOT NULL, inbox_seq, completed_at,
	retries, retry_reason, resolve_reason, retry_at, failures, last_error, hold_reason, held_at, release_reason`

func (ex *sqliteExport) effects(f filter) error {
	return ex.each(f, `SELECT `+sqliteEffectCols+` FROM effects WHERE `+f.where()+` ORDER BY seq`, func(rows *sql.Rows) error {
		var p store.PortEffect
		var seq, enq int64
		var pp, rp, rcp bool
		var exp, inboxSeq, done, retryAt, heldAt sql.NullInt64
		var rs, rr sql.NullString
		if err := rows.Scan(&seq, &p.IntentHash, &p.World, &p.Kind, &p.Params, &pp, &p.Origin, &p.PolicyContextHash,
			&p.RetryPolicy, &rp, &p.State, &enq, &p.Attempts, &p.ClaimedBy, &exp, &p.ClaimNode,
			&p.ClaimIncarnation, &rs, &p.ReceiptPayload, &rcp, &inboxSeq, &done,
			&p.Retries, &p.RetryReason, &rr, &retryAt, &p.Failures, &p.LastError, &p.HoldReason, &heldAt,
			&p.ReleaseReason); err != nil {
			return err
		}
		p.Seq, p.EnqueuedAt = uint64(seq), fromNS(enq)
		p.Params, p.RetryPolicy, p.ReceiptPayload = blob(p.Params, pp), blob(p.RetryPolicy, rp), blob(p.ReceiptPayload, rcp)
		p.ClaimExpires, p.InboxSeq, p.CompletedAt, p.RetryAt = utcOpt(exp), optSeq(inboxSeq), utcOpt(done), utcOpt(retryAt)
		p.ReceiptStatus, p.ResolveReason, p.HeldAt = optStr(rs), optStr(rr), utcOpt(heldAt)
		return ex.out(store.PortRecord{Kind: store.PortKindEffect, Effect: &p})
	})
}

func (ex *sqliteExport) timers(f filter) error {
	return ex.each(f, `SELECT intent_hash, world, deliver_at, payload, payload IS NOT NULL, state, attempt, claimed_by,
		claim_expires, claim_node, claim_incarnation, inbox_seq, completed_at FROM timers WHERE `+f.where()+`
		ORDER BY intent_hash`,
		func(rows *sql.Rows) error {
			var p store.PortTimer
			var at int64
			var present bool
			var exp, inboxSeq, done sql.NullInt64
			if err := rows.Scan(&p.IntentHash, &p.World, &at, &p.Payload, &present, &p.State, &p.Attempt, &p.ClaimedBy,
				&exp, &p.ClaimNode, &p.ClaimIncarnation, &inboxSeq, &done); err != nil {
				return err
			}
			p.DeliverAt, p.Payload = fromNS(at), blob(p.Payload, present)
			p.ClaimExpires, p.InboxSeq, p.CompletedAt = utcOpt(exp), optSeq(inboxSeq), utcOpt(done)
			return ex.out(store.PortRecord{Kind: store.PortKindTimer, Timer: &p})
		})
}

func (ex *sqliteExport) fabric(f filter) error {
	return ex.each(f, `SELECT dest, message_id, seq, completed_at FROM fabric_dedupe WHERE `+f.where()+`
		ORDER BY dest, message_id`,
		func(rows *sql.Rows) error {
			var p store.PortFabric
			var seq, at int64
			if err := rows.Scan(&p.Dest, &p.MessageID, &seq, &at); err != nil {
				return err
			}
			p.Seq, p.CompletedAt = uint64(seq), fromNS(at)
			return ex.out(store.PortRecord{Kind: store.PortKindFabric, Fabric: &p})
		})
}

func (ex *sqliteExport) watermarks(f filter) error {
	return ex.each(f, `SELECT projector, stream, value FROM watermarks WHERE `+f.where()+` ORDER BY projector, stream`, func(rows *sql.Rows) error {
		var p store.PortWatermark
		var v int64
		if err := rows.Scan(&p.Projector, &p.Stream, &v); err != nil {
			return err
		}
		p.Value = uint64(v)
		return ex.out(store.PortRecord{Kind: store.PortKindWatermark, Watermark: &p})
	})
}

func (ex *sqliteExport) schedules(f filter) error {
	return ex.each(f, `SELECT `+scheduleCols+` FROM schedules WHERE `+f.where()+` ORDER BY id`, func(rows *sql.Rows) error {
		r, err := scanSchedule(rows)
		if err != nil {
			return err
		}
		return ex.out(store.PortRecord{Kind: store.PortKindSchedule, Schedule: &store.PortSchedule{ID: r.ID, Spec: r.Spec,
			State: r.State, Paused: r.Paused, NextFireAt: r.NextFireAt, Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}})
	})
}

func (ex *sqliteExport) queues(f filter) error {
	return ex.each(f, `SELECT `+queueCols+` FROM queues WHERE `+f.where()+` ORDER BY name`, func(rows *sql.Rows) error {
		q, err := scanQueue(rows)
		if err != nil {
			return err
		}
		return ex.out(store.PortRecord{Kind: store.PortKindQueue, Queue: store.PortQueueOf(q)})
	})
}

func (ex *sqliteExport) queuedRuns(f filter) error {
	return ex.each(f, `SELECT `+queuedCols+` FROM queued_runs WHERE `+f.where()+` ORDER BY run`, func(rows *sql.Rows) error {
		r, err := scanQueued(rows)
		if err != nil {
			return err
		}
		return ex.out(store.PortRecord{Kind: store.PortKindQueuedRun, QueuedRun: store.PortQueuedRunOf(r)})
	})
}

// admissions groups the rate windows' rows by queue, partition and time:
// the rows have no key of their own.
func (ex *sqliteExport) admissions(f filter) error {
	return ex.each(f, `SELECT queue, partition, at, COUNT(*) FROM queue_admissions WHERE `+f.where()+`
		GROUP BY queue, partition, at ORDER BY queue, partition, at`, func(rows *sql.Rows) error {
		var a store.PortAdmission
		var at int64
		if err := rows.Scan(&a.Queue, &a.Partition, &at, &a.Count); err != nil {
			return err
		}
		a.At = time.Unix(0, at).UTC()
		return ex.out(store.PortRecord{Kind: store.PortKindAdmission, Admission: &a})
	})
}

func (ex *sqliteExport) counters() error {
	var seq int64
	err := ex.tx.QueryRowContext(ex.ctx, `SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'effects'), 0)`).Scan(&seq)
	if err != nil {
		return err
	}
	return ex.out(store.PortRecord{Kind: store.PortKindCounter,
		Counter: &store.PortCounter{Name: store.PortCounterEffectSeq, Value: uint64(seq)}})
}

// Empty implements store.Importer.
func (s *backend) Empty(ctx context.Context) (bool, error) {
	const op = "empty"
	if err := s.read(ctx, op); err != nil {
		return false, err
	}
	var held bool
	_, err := s.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worlds) OR EXISTS (SELECT 1 FROM event_keys)
		OR EXISTS (SELECT 1 FROM streams) OR EXISTS (SELECT 1 FROM effects) OR EXISTS (SELECT 1 FROM timers)
		OR EXISTS (SELECT 1 FROM fabric_dedupe) OR EXISTS (SELECT 1 FROM watermarks) OR EXISTS (SELECT 1 FROM leases)
		OR EXISTS (SELECT 1 FROM schedules) OR EXISTS (SELECT 1 FROM queues) OR EXISTS (SELECT 1 FROM queued_runs)
		OR EXISTS (SELECT 1 FROM queue_admissions)`,
		nil, &held)
	if err != nil {
		return false, dbErr(op, "", err)
	}
	return !held, nil
}

// Import implements store.Importer: the batch is one request of a group
// commit (its own savepoint), so a refused record rolls back the whole
// batch and nothing else.
func (s *backend) Import(ctx context.Context, batch []store.PortRecord) error {
	const op = "import"
	return s.write(ctx, op, "", func(t *wtx) error {
		streams := map[string]bool{}
		for _, r := range batch {
			if err := t.importRecord(op, r, streams); err != nil {
				return importErr(op, err)
			}
		}
		for stream := range streams {
			var head int64
			if _, err := t.queryRow(headQuery, []any{stream}, &head); err != nil {
				return err
			}
			t.setHead(stream, head)
		}
		for _, topic := range []string{store.TopicEffects, store.TopicTimers, store.TopicLeases, store.TopicAssignments} {
			t.notify(topic)
		}
		return nil
	})
}

// importErr maps a constraint the schema enforces to the caller's typed
// error: a row of a world the target does not hold, a state its schema
// does not know. Both fail one statement only, so the request's savepoint
// rolls back as for any typed refusal.
func importErr(op string, err error) error {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() {
		case 787: // SQLITE_CONSTRAINT_FOREIGNKEY: every reference is to a world
			return store.Errorf(op, store.ErrWorldNotFound, "", "%v", err)
		case 275, 1299: // SQLITE_CONSTRAINT_CHECK, SQLITE_CONSTRAINT_NOTNULL
			return store.Errorf(op, store.ErrInvalid, "", "%v", err)
		}
	}
	return err
}

// insert runs an INSERT … ON CONFLICT DO NOTHING and reports a row that
// was not written (its key exists) as ErrConflict.
func (t *wtx) insert(op, world, what, query string, args ...any) error {
	n, err := t.rowsAffected(query, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.Errorf(op, store.ErrConflict, world, "%s exists", what)
	}
	return nil
}

func (t *wtx) importRecord(op string, r store.PortRecord, streams map[string]bool) error {
	archived := false
	if r.Kind == store.PortKindEffect && (r.Effect.State == "inflight" || r.Effect.State == "held") {
		var status string
		if _, err := t.queryRow(`SELECT status FROM worlds WHERE id = ?`, []any{r.Effect.World}, &status); err != nil {
			return err
		}
		archived = status == string(store.WorldArchived)
	}
	r = store.PortImported(r, archived, t.now)
	switch r.Kind {
	case store.PortKindWorld:
		w := r.World
		return t.insert(op, w.ID, "world", `INSERT INTO worlds (id, universe, status, status_reason, status_changed_at,
			parent_world, parent_snapshot_hash, forked_at_height, created_at, inbox_cursor, baseline_height)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			w.ID, w.Universe, string(w.Status), w.StatusReason, nullNS(w.StatusChangedAt), w.ParentWorld,
			w.ParentSnapshotHash, int64(w.ForkedAtHeight), w.CreatedAt.UnixNano(), int64(w.InboxCursor), optU64(w.BaselineHeight))
	case store.PortKindStream:
		p := r.Stream
		streams[p.Stream] = true
		return t.insert(op, "", "stream "+p.Stream, `INSERT INTO streams (stream, head, compacted_to, compacted_at)
			VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, p.Stream, int64(p.Head), int64(p.CompactedTo), optNS(p.CompactedAt))
	case store.PortKindEvent:
		e := r.Event
		streams[e.StreamID] = true
		sum := sha256.Sum256(e.Payload)
		if err := t.insert(op, "", "key "+e.IdempotencyKey+" of stream "+e.StreamID, `INSERT INTO event_keys (stream,
			idempotency_key, event_id, run_seq, persisted_at, event_type, payload_sha256) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, e.StreamID, e.IdempotencyKey, e.EventID, int64(e.RunSeq), e.PersistedAt.UnixNano(),
			e.EventType, sum[:]); err != nil {
			return err
		}
		return t.insert(op, "", "event of stream "+e.StreamID, `INSERT INTO events (stream, run_seq, event_id,
			idempotency_key, event_type, emitted_at, persisted_at, step_id, logical_attempt, engine_attempt, plan_id,
			plan_version, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			e.StreamID, int64(e.RunSeq), e.EventID, e.IdempotencyKey, e.EventType, nullNS(e.EmittedAt),
			e.PersistedAt.UnixNano(), e.StepID, int64(e.LogicalAttemptID), int64(e.EngineAttemptID), e.PlanID,
			int64(e.PlanVersion), blobArg(e.Payload))
	case store.PortKindEventKey:
		k := r.EventKey
		streams[k.Stream] = true
		var sum any
		if k.PayloadSHA256 != nil {
			sum = k.PayloadSHA256
		}
		return t.insert(op, "", "key "+k.IdempotencyKey+" of stream "+k.Stream, `INSERT INTO event_keys (stream,
			idempotency_key, event_id, run_seq, persisted_at, event_type, payload_sha256) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, k.Stream, k.IdempotencyKey, k.EventID, int64(k.RunSeq), k.PersistedAt.UnixNano(),
			strOrNil(k.EventType), sum)
	case store.PortKindSnapshot:
		p := r.Snapshot
		return t.insert(op, p.World, "snapshot", `INSERT INTO snapshots (world, height, state, state_hash, created_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, p.World, int64(p.Height), blobArg(p.State), p.StateHash,
			p.CreatedAt.UnixNano())
	case store.PortKindInbox:
		p := r.Inbox
		if err := t.insert(op, p.World, "inbox item", `INSERT INTO inbox (world, seq, kind, payload, dedupe_key, enqueued_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, p.World, int64(p.Seq), p.Kind, blobArg(p.Payload),
			p.DedupeKey, p.EnqueuedAt.UnixNano()); err != nil {
			return err
		}
		t.notify(store.TopicInbox(p.World))
		if !p.KeyLive || p.DedupeKey == "" {
			return nil
		}
		return t.insert(op, p.World, "inbox key "+p.DedupeKey, `INSERT INTO inbox_dedupe (world, dedupe_key, seq)
			VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, p.World, p.DedupeKey, int64(p.Seq))
	case store.PortKindDrain:
		p := r.Drain
		// The cursor only moves forward: a world's drains are keyed by the
		// seq they reached.
		var exists bool
		if _, err := t.queryRow(`SELECT EXISTS (SELECT 1 FROM inbox_drains WHERE world = ? AND upto = ?)`,
			[]any{p.World, int64(p.Upto)}, &exists); err != nil {
			return err
		}
		if exists {
			return store.Errorf(op, store.ErrConflict, p.World, "drain to %d exists", p.Upto)
		}
		n, err := t.rowsAffected(`INSERT INTO inbox_drains (world, upto, drained_at)
			SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM worlds WHERE id = ?)`,
			p.World, int64(p.Upto), p.DrainedAt.UnixNano(), p.World)
		if err == nil && n == 0 {
			err = store.Errorf(op, store.ErrWorldNotFound, p.World, "a drain of a world not imported")
		}
		return err
	case store.PortKindLease:
		p := r.Lease
		return t.insert(op, p.World, "lease", `INSERT INTO leases (world, holder, incarnation, took_over, displaced,
			epoch, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			p.World, p.Holder, p.Incarnation, p.TookOver, p.Displaced, int64(p.Epoch), p.ExpiresAt.UnixNano())
	case store.PortKindAssignment:
		p := r.Assignment
		return t.insert(op, p.World, "assignment", `INSERT INTO assignments (world, desired_worker, priority, reason)
			VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, p.World, p.DesiredWorker, p.Priority, p.Reason)
	case store.PortKindEffect:
		p := r.Effect
		return t.insert(op, p.World, "effect "+p.IntentHash, `INSERT INTO effects (seq, intent_hash, world, kind,
			params, origin, policy_context_hash, retry_policy, state, enqueued_at, attempts, claimed_by, claim_expires,
			claim_node, claim_incarnation, receipt_status, receipt_payload, inbox_seq, completed_at, retries,
			retry_reason, resolve_reason, retry_at, failures, last_error, hold_reason, held_at, release_reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			int64(p.Seq), p.IntentHash, p.World, p.Kind, blobArg(p.Params), p.Origin, p.PolicyContextHash,
			blobArg(p.RetryPolicy), p.State, p.EnqueuedAt.UnixNano(), p.Attempts, p.ClaimedBy, optNS(p.ClaimExpires),
			p.ClaimNode, p.ClaimIncarnation, strOrNil(p.ReceiptStatus), blobArg(p.ReceiptPayload), optU64(p.InboxSeq),
			optNS(p.CompletedAt), p.Retries, p.RetryReason, strOrNil(p.ResolveReason), optNS(p.RetryAt), p.Failures,
			p.LastError, p.HoldReason, optNS(p.HeldAt), p.ReleaseReason)
	case store.PortKindTimer:
		p := r.Timer
		return t.insert(op, p.World, "timer "+p.IntentHash, `INSERT INTO timers (intent_hash, world, deliver_at, payload,
			state, attempt, claimed_by, claim_expires, claim_node, claim_incarnation, inbox_seq, completed_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			p.IntentHash, p.World, p.DeliverAt.UnixNano(), blobArg(p.Payload), p.State, p.Attempt, p.ClaimedBy,
			optNS(p.ClaimExpires), p.ClaimNode, p.ClaimIncarnation, optU64(p.InboxSeq), optNS(p.CompletedAt))
	case store.PortKindFabric:
		p := r.Fabric
		var found bool
		if _, err := t.queryRow(`SELECT EXISTS (SELECT 1 FROM worlds WHERE id = ?)`, []any{p.Dest}, &found); err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrWorldNotFound, p.Dest, "a fabric record of a world not imported")
		}
		return t.insert(op, p.Dest, "fabric message "+p.MessageID, `INSERT INTO fabric_dedupe (dest, message_id, seq,
			completed_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, p.Dest, p.MessageID, int64(p.Seq), p.CompletedAt.UnixNano())
	case store.PortKindWatermark:
		p := r.Watermark
		return t.insert(op, "", "watermark "+p.Projector+"/"+p.Stream, `INSERT INTO watermarks (projector, stream, value)
			VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, p.Projector, p.Stream, int64(p.Value))
	case store.PortKindSchedule:
		p := r.Schedule
		return t.insert(op, "", "schedule "+p.ID, `INSERT INTO schedules (`+scheduleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, p.ID, p.Spec, p.State, p.Paused, nullNS(p.NextFireAt), int64(p.Version),
			p.CreatedAt.UnixNano(), p.UpdatedAt.UnixNano())
	case store.PortKindQueue:
		p := r.Queue
		return t.insert(op, "", "queue "+p.Name, `INSERT INTO queues (`+queueCols+`) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, p.Name, p.Concurrency, p.WorkerConcurrency, p.RateLimit, int64(p.RatePeriod), b2i(p.Partitioned))
	case store.PortKindQueuedRun:
		p := r.QueuedRun
		var known bool
		if _, err := t.queryRow(`SELECT EXISTS (SELECT 1 FROM queues WHERE name = ?)`, []any{p.Queue}, &known); err != nil {
			return err
		}
		if !known {
			return store.Errorf(op, store.ErrNotFound, p.Run, "no queue %q", p.Queue)
		}
		var adm any
		if !p.AdmittedAt.IsZero() {
			adm = p.AdmittedAt.UnixNano()
		}
		// A seq held by another run is a conflict as the run's key is:
		// the seq orders the queue, so two entries never share one.
		return t.insert(op, p.Run, "queued run", `INSERT INTO queued_runs (`+queuedCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, p.Queue, p.Run, p.Partition, p.Priority, int64(p.Seq), p.EnqueuedAt.UnixNano(), p.Worker, adm, p.Needs)
	case store.PortKindAdmission:
		p := r.Admission
		var held bool
		if _, err := t.queryRow(`SELECT EXISTS (SELECT 1 FROM queue_admissions WHERE queue = ? AND partition = ? AND at = ?)`,
			[]any{p.Queue, p.Partition, p.At.UnixNano()}, &held); err != nil {
			return err
		}
		if held {
			return store.Errorf(op, store.ErrConflict, "", "queue admission %s/%s exists", p.Queue, p.Partition)
		}
		for range p.Count {
			if _, err := t.exec(`INSERT INTO queue_admissions (queue, partition, at) VALUES (?, ?, ?)`,
				p.Queue, p.Partition, p.At.UnixNano()); err != nil {
				return err
			}
		}
		return nil
	case store.PortKindCounter:
		// AUTOINCREMENT's high-water mark: raised, never lowered, so a seq
		// the source handed out (its row swept since) is not handed out
		// again.
		v := int64(r.Counter.Value)
		if _, err := t.exec(`UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'effects'`, v); err != nil {
			return err
		}
		_, err := t.exec(`INSERT INTO sqlite_sequence (name, seq) SELECT 'effects', ?
			WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'effects')`, v)
		return err
	}
	return store.Errorf(op, store.ErrInvalid, "", "unknown record kind %q", r.Kind)
}

// FinishImport implements store.Importer: the planner's statistics,
// which a bulk load leaves behind.
func (s *backend) FinishImport(ctx context.Context) error {
	return s.write(ctx, "finish_import", "", func(t *wtx) error {
		_, err := t.exec(`PRAGMA optimize`)
		return err
	})
}

// PortLookup implements store.PortBackend: each record's key looked up
// by the export's own query for its kind, in one read transaction.
func (s *backend) PortLookup(ctx context.Context, batch []store.PortRecord) ([]*store.PortRecord, error) {
	const op = "import"
	if err := s.read(ctx, op); err != nil {
		return nil, err
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, dbErr(op, "", err)
	}
	defer tx.Rollback() //nolint:errcheck // a read transaction: nothing to keep
	out := make([]*store.PortRecord, len(batch))
	for i, r := range batch {
		var found *store.PortRecord
		ex := &sqliteExport{ctx: ctx, tx: tx, emit: func(x store.PortRecord) error {
			if found == nil {
				found = &x
			}
			return nil
		}}
		var err error
		switch r.Kind {
		case store.PortKindWorld:
			err = ex.worlds(filter{"w.id = ?", []any{r.World.ID}})
		case store.PortKindStream:
			err = ex.streams(filter{"x.stream = ?", []any{r.Stream.Stream}})
		case store.PortKindEvent:
			err = ex.events(filter{"stream = ? AND run_seq = ?", []any{r.Event.StreamID, int64(r.Event.RunSeq)}})
		case store.PortKindEventKey:
			err = ex.eventKeys(filter{"k.stream = ? AND k.idempotency_key = ?", []any{r.EventKey.Stream, r.EventKey.IdempotencyKey}})
		case store.PortKindSnapshot:
			err = ex.snapshots(filter{"world = ? AND height = ?", []any{r.Snapshot.World, int64(r.Snapshot.Height)}})
		case store.PortKindInbox:
			err = ex.inbox(filter{"i.world = ? AND i.seq = ?", []any{r.Inbox.World, int64(r.Inbox.Seq)}})
		case store.PortKindDrain:
			err = ex.drains(filter{"world = ? AND upto = ?", []any{r.Drain.World, int64(r.Drain.Upto)}})
		case store.PortKindLease:
			err = ex.leases(filter{"world = ?", []any{r.Lease.World}})
		case store.PortKindAssignment:
			err = ex.assignments(filter{"world = ?", []any{r.Assignment.World}})
		case store.PortKindEffect:
			err = ex.effects(filter{"intent_hash = ?", []any{r.Effect.IntentHash}})
		case store.PortKindTimer:
			err = ex.timers(filter{"intent_hash = ?", []any{r.Timer.IntentHash}})
		case store.PortKindFabric:
			err = ex.fabric(filter{"dest = ? AND message_id = ?", []any{r.Fabric.Dest, r.Fabric.MessageID}})
		case store.PortKindWatermark:
			err = ex.watermarks(filter{"projector = ? AND stream = ?", []any{r.Watermark.Projector, r.Watermark.Stream}})
		case store.PortKindSchedule:
			err = ex.schedules(filter{"id = ?", []any{r.Schedule.ID}})
		case store.PortKindQueue:
			err = ex.queues(filter{"name = ?", []any{r.Queue.Name}})
		case store.PortKindQueuedRun:
			err = ex.queuedRuns(filter{"run = ?", []any{r.QueuedRun.Run}})
		case store.PortKindAdmission:
			err = ex.admissions(filter{"queue = ? AND partition = ? AND at = ?", []any{r.Admission.Queue, r.Admission.Partition,
				r.Admission.At.UnixNano()}})
		}
		if err != nil {
			return nil, dbErr(op, "", err)
		}
		if found != nil {
			found.Format = store.PortFormat
		}
		out[i] = found
	}
	return out, nil
}
