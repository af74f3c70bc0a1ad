package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// The claimable queue. Effects (protocol D) and timers (protocol E) are one
// protocol on two tables, and this file is its only implementation: an item
// is ready, claimed or done. A claim moves up to n ready items, in the
// queue's order, to claimed for a worker until a TTL (attempt+1,
// claimed_by, claim_expires). A settle (Complete, Fire, an operator's
// Resolve) delivers the item into its world's inbox and marks it done as
// contract.Settle decides: under its latest claim (an operator needs
// none), once due (a queue with due times); a done item answers its first
// delivery's seq, dup=true, whatever the claim.
// A reap puts the claimed items whose claim expired (at or before the store
// clock, as contract.Expired) back to ready, keeping their latest claim:
// that worker may still settle them until someone claims them anew.
//
// A queue's descriptor says what differs: its table and state names, how
// its ready items are picked and ordered, what a claim returns, and what a
// settle delivers and records.

type queue struct {
	table, noun             string // noun names an item in errors
	ready, claimed, done    string // the state column's values
	attempt                 string // the attempt counter's column
	topic                   string // the Watch topic a reap hints
	retries, payload, dueAt string // what a settle reads of them (SQL; NULL: the queue has none)
	settleSet               string // what a settle records besides the delivery (SQL; its ? come from settleArgs)

	// delivery is what a settle delivers: the inbox item's kind, payload
	// and dedupe key.
	delivery func(hash string, row *queueRow, r vocab.Receipt) (kind string, payload []byte, key string)
	// settleArgs are settleSet's arguments.
	settleArgs func(r vocab.Receipt, by contract.By) []any

	// The protocol's statements, built from the above (newQueue).
	pickSQL, claimSQL, reapSQL, readSQL, settleSQL string
	// reapGoneSQL, when set, runs before reapSQL with the same argument:
	// it ends the expired claims whose item must not come back (an
	// archived world's effects are withdrawn, not requeued).
	reapGoneSQL string
}

// newQueue builds q's statements: pick selects the keys of one partition's
// ready items in claim order (by filter, its ? first, then the limit), a
// claim updates an item by key and returns cols.
func newQueue(q queue, key, filter, order, cols string) *queue {
	q.pickSQL = `SELECT ` + key + ` FROM ` + q.table + ` WHERE state = '` + q.ready + `' AND ` + filter +
		` ORDER BY ` + order + ` LIMIT ?`
	q.claimSQL = `UPDATE ` + q.table + ` SET state = '` + q.claimed + `', ` + q.attempt + ` = ` + q.attempt + ` + 1,
		claimed_by = ?, claim_expires = ?, claim_node = ?, claim_incarnation = ? WHERE ` + key + ` = ? RETURNING ` + cols
	q.reapSQL = `UPDATE ` + q.table + ` SET state = '` + q.ready + `', claim_expires = NULL
		WHERE state = '` + q.claimed + `' AND claim_expires <= ?`
	q.readSQL = `SELECT world, state, ` + q.attempt + `, claimed_by, inbox_seq, ` + q.retries + `, ` + q.payload + `, ` +
		q.payload + ` IS NOT NULL, ` + q.dueAt + ` FROM ` + q.table + ` WHERE intent_hash = ?`
	q.settleSQL = `UPDATE ` + q.table + ` SET state = '` + q.done + `', claim_expires = NULL, inbox_seq = ?, completed_at = ?, ` +
		q.settleSet + ` WHERE intent_hash = ?`
	return &q
}

var effectsQueue = newQueue(queue{
	table: "effects", noun: "intent",
	ready: string(vocab.EffectPending), claimed: string(vocab.EffectInflight), done: string(vocab.EffectDone),
	attempt: "attempts", topic: store.TopicEffects,
	retries: "retries", payload: "NULL", dueAt: "NULL",
	settleSet: "receipt_status = ?, receipt_payload = ?, resolve_reason = ?",
	// The receipt carries the payload under ReceiptKey(hash, retries); its
	// status, and the operator's reason when Resolve settled it, are in the
	// EffectStatus.
	delivery: func(hash string, row *queueRow, r vocab.Receipt) (string, []byte, string) {
		return vocab.KindReceipt, r.Payload, store.ReceiptKey(hash, int(row.retries))
	},
	reapGoneSQL: `UPDATE effects SET state = 'withdrawn', claim_expires = NULL, completed_at = ?1
		WHERE state = 'inflight' AND claim_expires <= ?1
		AND world IN (SELECT id FROM worlds WHERE status = 'archived')`,
	settleArgs: func(r vocab.Receipt, by contract.By) []any {
		var reason any
		if p := by.OperatorReason(); p != nil {
			reason = *p
		}
		return []any{string(r.Status), r.Payload, reason}
	},
},
	"seq",
	// An archived world's effects were withdrawn with its archiving; the
	// guard keeps the promise that no claim hands one out whatever path
	// left one pending.
	"kind = ? AND NOT EXISTS (SELECT 1 FROM worlds w WHERE w.id = effects.world AND w.status = 'archived')"+
		// A failed effect waits for its retry time (the store's clock; the
		// pick's last argument before the limit).
		" AND (retry_at IS NULL OR retry_at <= ?)",
	"seq", effectItemCols)

var timersQueue = newQueue(queue{
	table: "timers", noun: "timer",
	ready: string(store.TimerScheduled), claimed: string(store.TimerClaimed), done: string(store.TimerDelivered),
	attempt: "attempt", topic: store.TopicTimers,
	retries: "0", payload: "payload", dueAt: "deliver_at",
	settleSet: "payload = NULL",
	// The timer-fired item carries the timer's payload under TimerKey(hash).
	delivery: func(hash string, row *queueRow, _ vocab.Receipt) (string, []byte, string) {
		return vocab.KindTimer, blob(row.payload, row.hasPayload), store.TimerKey(hash)
	},
	settleArgs: func(vocab.Receipt, contract.By) []any { return nil },
}, "intent_hash", "deliver_at <= ?", "deliver_at, intent_hash", timerCols)

// claim claims up to n of q's ready items for worker until now+ttl, on
// behalf of by (checked by the caller: claimable), inside a request, and calls each with every claimed row (cols). parts are the
// pick's arguments, one list per partition (the kinds of a claim by kind):
// each partition's first n are read from its own index range, and several
// partitions merge by key, which is then the queue's order.
func claim[K cmp.Ordered](t *wtx, q *queue, worker string, n int, ttl time.Duration, by store.ClaimOptions, parts [][]any, each func(sc interface{ Scan(...any) error }) error) error {
	var keys []K
	for _, p := range parts {
		rows, err := t.query(q.pickSQL, append(p, n)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k K
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return err
			}
			keys = append(keys, k)
		}
		if err := rows.Close(); err != nil {
			return err
		}
	}
	if len(parts) > 1 {
		slices.Sort(keys)
		keys = keys[:min(n, len(keys))]
	}
	expires := t.now.Add(ttl).UnixNano()
	for _, k := range keys {
		row, err := t.row(q.claimSQL, worker, expires, by.Node, by.Incarnation, k)
		if err != nil {
			return err
		}
		if err := each(row); err != nil {
			return err
		}
	}
	return nil
}

// queueRow is what a settle reads of an item.
type queueRow struct {
	world, state, claimedBy string
	attempt, retries        int64
	inboxSeq, dueAt         sql.NullInt64
	payload                 []byte
	hasPayload              bool
}

// settle delivers q's item hash and marks it done, inside a request, as
// contract.Settle decides for by (a done item answers its first delivery);
// r is what a completion brings (an effect's receipt). A typed error
// (*store.Error) is the item's refusal and nothing was written; any other
// error is the database's.
func (t *wtx) settle(q *queue, op, hash string, by contract.By, r vocab.Receipt) (seq uint64, dup bool, err error) {
	s, err := t.settleItem(q, op, hash, by, r)
	if err != nil {
		return 0, false, err
	}
	return s.seq, s.dup, nil
}

// settled is a settle's outcome: the delivery's seq (the first delivery's
// when dup) and the item as the settle read it, before it changed it.
type settled struct {
	seq uint64
	dup bool
	row queueRow
}

// settleItem is settle, answering also what it read: a refusal as typed
// as settle's comes with the row (a timer's due time for ErrNotDue).
func (t *wtx) settleItem(q *queue, op, hash string, by contract.By, r vocab.Receipt) (s settled, err error) {
	row := &s.row
	found, err := t.queryRow(q.readSQL, []any{hash}, &row.world, &row.state, &row.attempt, &row.claimedBy, &row.inboxSeq,
		&row.retries, &row.payload, &row.hasPayload, &row.dueAt)
	if err != nil {
		return s, err
	}
	sr := contract.SettleRow{Found: found, World: row.world, Done: row.state == q.done,
		Withdrawn: row.state == string(vocab.EffectWithdrawn), Held: row.state == string(vocab.EffectHeld),
		Claim: contract.ClaimRow{Attempt: int(row.attempt), ClaimedBy: row.claimedBy}}
	if row.dueAt.Valid {
		at := fromNS(row.dueAt.Int64)
		sr.DueAt = &at
	}
	if s.dup, err = contract.Settle(op, q.noun, hash, sr, by, t.now); err != nil || s.dup {
		s.seq = uint64(row.inboxSeq.Int64)
		return s, err
	}
	kind, payload, key := q.delivery(hash, row, r)
	// deliver refuses (typed) before it writes: an item whose world is
	// gone is refused.
	seq, dup, err := t.deliver(op, row.world, kind, payload, key)
	if err != nil {
		return s, err
	}
	args := append([]any{int64(seq), t.nowNS}, q.settleArgs(r, by)...)
	if _, err := t.exec(q.settleSQL, append(args, hash)...); err != nil {
		return s, err
	}
	s.seq, s.dup = seq, dup
	return s, nil
}

// reap puts q's expired claims back to ready and hints q's topic if any
// came back.
func (s *backend) reap(ctx context.Context, op string, q *queue) (int, error) {
	var n int
	err := s.write(ctx, op, "", func(t *wtx) error {
		n = 0
		if q.reapGoneSQL != "" {
			gone, err := t.rowsAffected(q.reapGoneSQL, t.nowNS)
			if err != nil {
				return err
			}
			n = gone
		}
		res, err := t.exec(q.reapSQL, t.nowNS)
		if err != nil {
			return err
		}
		m, err := res.RowsAffected()
		n += int(m)
		if n > 0 {
			t.notify(q.topic)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
