package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// The claimable queue. Effects (protocol D) and timers (protocol E) are one
// protocol on two tables, and this file is its only implementation: an item
// is ready, claimed or done. A claim moves up to n ready items, in the
// queue's order, to claimed for a worker until a TTL (attempts+1,
// claimed_by, claim_expires_ns), skipping the rows other claimers hold
// (SKIP LOCKED: claimers on many machines never wait for each other or take
// one item twice). A settle (Complete, Fire: a delivery, see deliveryTx)
// delivers the item into its world's inbox and marks it done as
// contract.Settle decides: under its latest claim, once due (a queue with
// due times); a done item answers its first delivery's seq, dup=true,
// whatever the claim. A reap puts the claimed items whose claim expired (at or
// before the store clock) back to ready, keeping their latest claim: that
// worker may still settle them until someone claims them anew. A claim or a
// reap may be lost in a crash (a claim is then simply not a claim), so
// neither waits for the WAL flush.
//
// A queue's descriptor says what differs: its table and state names, how
// its ready items are picked and ordered, what a claim returns, and what a
// settle delivers and records.

type queue struct {
	table, noun          string // noun names an item in errors
	ready, claimed, done string // the state column's values
	topic                string // the Watch topic of a claim's or reap's change

	// What a settle reads of an item (SQL of row x; NULL: the queue has
	// none), and the inbox dedupe key it delivers under (SQL of row x,
	// mirroring delivery's key; the batch's key probe reads it).
	retries, payload, dueAt, deliveryKey string
	// delivery is what a settle delivers: the inbox item's kind, payload
	// and dedupe key.
	delivery func(hash string, row *queueRow, r *deliveryReq) (kind string, payload []byte, key string)
	// settleSet is what a settle records besides the delivery (SQL of the
	// settled row's u.st, u.p and u.rr: a receipt's status and payload, and
	// the operator's reason when an operator settled).
	settleSet string

	// reapGone, when set, ends the expired claims whose item must not come
	// back (SQL of row x: an archived world's effects are withdrawn, not
	// requeued); its statement runs before the reap's.
	reapGone string

	// The protocol's statements, built from the above (newQueue).
	claimSQL, reapSQL, reapGoneSQL, lockSQL string
}

// newQueue builds q's statements. A claim's candidates are the ready items
// that filter (SQL of row x and of the clock, (SELECT t FROM clock)) admits in order, at most
// $4; partitioned, if set, wraps that pick (%s) to run it once per
// partition and merge the partitions' candidates (it then also selects
// pickCols). A claim's arguments are the worker, the TTL, the clock offset,
// n, then the partitioned pick's; it returns cols.
func newQueue(q queue, filter, order, pickCols, partitioned, cols string) *queue {
	pick := `SELECT x.intent_hash` + pickCols + ` FROM ` + q.table + ` x
		WHERE x.state = '` + q.ready + `' AND (SELECT open FROM gate) AND ` + filter + `
		ORDER BY ` + order + ` LIMIT $4 FOR UPDATE SKIP LOCKED`
	if partitioned != "" {
		pick = strings.Replace(partitioned, "%s", pick, 1)
	}
	// gate closes the claim for an incarnation known dead ($5, $6; see
	// ClaimFor), on the clock of the claim.
	q.claimSQL = `WITH clock AS MATERIALIZED (SELECT now_ns($3) AS t),
		gate AS MATERIALIZED (SELECT $5::text = '' OR NOT incarnation_dead($5, $6, (SELECT t FROM clock)) AS open),
		c AS (` + pick + `)
		UPDATE ` + q.table + ` x SET state = '` + q.claimed + `', attempts = x.attempts + 1, claimed_by = $1,
			claim_expires_ns = (SELECT t FROM clock) + $2, claim_node = $5, claim_incarnation = $6
		FROM c WHERE x.intent_hash = c.intent_hash
		RETURNING ` + cols
	// Every move back to ready forgets the claim's owner (so do
	// ReleaseEffect and RetryLater): a later claim by a binary of the
	// release before, which names no owner, must not be taken for the
	// dead owner's and revoked by the orphan reaper.
	q.reapSQL = `WITH c AS (
			SELECT x.intent_hash FROM ` + q.table + ` x
			WHERE x.state = '` + q.claimed + `' AND x.claim_expires_ns <= now_ns($1)
			FOR UPDATE SKIP LOCKED)
		UPDATE ` + q.table + ` x SET state = '` + q.ready + `', claim_expires_ns = NULL, claim_node = '', claim_incarnation = ''
		FROM c WHERE x.intent_hash = c.intent_hash`
	if q.reapGone != "" {
		q.reapGoneSQL = `WITH c AS (
				SELECT x.intent_hash FROM ` + q.table + ` x
				WHERE x.state = '` + q.claimed + `' AND x.claim_expires_ns <= now_ns($1) AND ` + q.reapGone + `
				FOR UPDATE OF x SKIP LOCKED)
			UPDATE ` + q.table + ` x SET state = '` + string(vocab.EffectWithdrawn) + `', claim_expires_ns = NULL,
				completed_at_ns = now_ns($1)
			FROM c WHERE x.intent_hash = c.intent_hash`
	}
	q.lockSQL = `SELECT intent_hash, world, state, inbox_seq, attempts, claimed_by, ` +
		q.retries + `, ` + q.payload + `, ` + q.dueAt + ` FROM ` + q.table + `
		WHERE intent_hash = ANY($1) ORDER BY intent_hash FOR UPDATE`
	return &q
}

var effectsQueue = newQueue(queue{
	table: "effects", noun: "intent",
	ready: string(vocab.EffectPending), claimed: string(vocab.EffectInflight), done: string(vocab.EffectDone),
	topic:   store.TopicEffects,
	retries: "retries", payload: "NULL::bytea", dueAt: "NULL::bigint",
	// store.ReceiptKey(hash, retries)
	deliveryKey: `'receipt:' || x.intent_hash || CASE WHEN x.retries = 0 THEN '' ELSE '#' || x.retries END`,
	// The receipt carries the payload; its status is in the EffectStatus.
	delivery: func(hash string, row *queueRow, r *deliveryReq) (string, []byte, string) {
		return vocab.KindReceipt, r.payload, store.ReceiptKey(hash, row.retries)
	},
	settleSet: `, receipt_status = u.st, receipt_payload = u.p, resolve_reason = u.rr`,
	reapGone:  `EXISTS (SELECT 1 FROM worlds w WHERE w.world = x.world AND w.status = 'archived')`,
},
	// Each kind's items come off effects_pending_by_kind in seq order;
	// the kinds' candidates merge by seq. An archived world's effects were
	// withdrawn with its archiving; the guard keeps the promise that no
	// claim hands one out whatever path left one pending.
	// A failed effect waits for its retry time, by the store's clock.
	`x.kind = ks.k AND NOT EXISTS (SELECT 1 FROM worlds w WHERE w.world = x.world AND w.status = 'archived')
		AND (x.retry_at_ns IS NULL OR x.retry_at_ns <= (SELECT t FROM clock))`, `x.seq`, `, x.seq`,
	`SELECT p.intent_hash FROM (SELECT DISTINCT k FROM unnest($7::text[]) AS k) AS ks, LATERAL (%s) AS p
		ORDER BY p.seq LIMIT $4`,
	`x.intent_hash, x.world, x.seq, x.kind, x.params, x.origin, x.policy_context_hash,
		x.enqueued_at_ns, x.attempts, x.claimed_by, x.claim_expires_ns, x.retries, x.state, x.retry_policy, x.failures, x.retry_at_ns, x.hold_reason, x.held_at_ns`)

var timersQueue = newQueue(queue{
	table: "timers", noun: "timer",
	ready: "due", claimed: "inflight", done: "delivered",
	topic:   store.TopicTimers,
	retries: "0", payload: "payload", dueAt: "deliver_at_ns",
	// store.TimerKey(hash)
	deliveryKey: `'timer:' || x.intent_hash`,
	// The timer-fired item carries the timer's payload.
	delivery: func(hash string, row *queueRow, _ *deliveryReq) (string, []byte, string) {
		return vocab.KindTimer, row.payload, store.TimerKey(hash)
	},
},
	`x.deliver_at_ns <= (SELECT t FROM clock)`, `x.deliver_at_ns, x.intent_hash`, "", "",
	`x.world, x.intent_hash, x.deliver_at_ns, x.payload, x.attempts, x.claimed_by, x.claim_expires_ns, x.state`)

// settled are the queues a delivery batch settles items of, in the order
// of its statements' parameters.
var settled = [...]*queue{qEffects: effectsQueue, qTimers: timersQueue}

const (
	qEffects = iota
	qTimers
)

// claim claims up to n of q's ready items for worker until the store clock
// plus ttl, in one transaction of one round trip; args are the partitioned
// pick's. It returns the claimed rows in no particular order.
func claim[T any](s *backend, ctx context.Context, op string, q *queue, worker string, n int, ttl time.Duration,
	by store.ClaimOptions, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	var out []T
	var dead bool
	err := s.oneTrip(ctx, op, "", func(b *batch) {
		b.queue(nil, "SET LOCAL synchronous_commit = off")
		dead = false
		if by.Node != "" {
			// The worker's row first, as a retirement locks it: a claim
			// either commits before a retirement (which then requeues
			// it) or sees it (and the gate closes). The answer's refusal
			// comes from this statement; the claim's own gate decides.
			b.queue(nil, `SELECT 1 FROM workers WHERE worker = $1 FOR SHARE`, by.Node)
			b.queue(func(br pgx.BatchResults) error {
				return br.QueryRow().Scan(&dead)
			}, `SELECT incarnation_dead($1, $2, now_ns($3))`, by.Node, by.Incarnation, s.off())
		}
		b.queue(func(br pgx.BatchResults) error {
			rows, _ := br.Query()
			var err error
			out, err = pgx.CollectRows(rows, scan)
			return err
		}, q.claimSQL, append([]any{worker, int64(ttl), s.off(), int32(n), by.Node, by.Incarnation}, args...)...)
	})
	if err != nil {
		return nil, err
	}
	if dead && len(out) == 0 {
		return nil, store.Errorf(op, store.ErrFenced, "", "worker %s incarnation %s is known dead", by.Node, by.Incarnation)
	}
	return out, nil
}

// reap puts q's expired claims back to ready and hints q's topic if any
// came back.
func (s *backend) reap(ctx context.Context, op string, q *queue) (int, error) {
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var n int64
	err := s.twoTrips(ctx, op, "", func(b *batch) {
		b.queue(nil, "SET LOCAL synchronous_commit = off")
		n = 0
		if q.reapGoneSQL != "" {
			b.queue(func(br pgx.BatchResults) error {
				tag, err := br.Exec()
				n += tag.RowsAffected()
				return err
			}, q.reapGoneSQL, s.off())
		}
		b.queue(func(br pgx.BatchResults) error {
			tag, err := br.Exec()
			n += tag.RowsAffected()
			return err
		}, q.reapSQL, s.off())
	}, func(b *batch) error {
		if n > 0 {
			b.queue(nil, `SELECT notify_topic($1)`, q.topic)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.hint(q.topic)
	}
	return int(n), nil
}

// queueRow is what a settle reads, under lock, of an item.
type queueRow struct {
	world     string
	state     string
	payload   []byte // a timer's
	inboxSeq  int64
	claim     contract.ClaimRow
	retries   int    // an effect's
	deliverAt *int64 // a timer's
}

// scanQueueRow reads one row of q.lockSQL into rows.
func scanQueueRow(br pgx.BatchResults, rows map[string]*queueRow) error {
	var h string
	var q queueRow
	var seq *int64
	var attempts, retries int32
	return scanEach(br, []any{&h, &q.world, &q.state, &seq, &attempts, &q.claim.ClaimedBy, &retries, &q.payload, &q.deliverAt}, func() {
		row := q
		if seq != nil {
			row.inboxSeq = *seq
		}
		row.claim.Attempt, row.retries = int(attempts), int(retries)
		rows[h] = &row
	})
}

// settle decides r, a settle of q's item under lock (row; nil: there is
// none) by r.by, at the batch's clock now (contract.Settle): done means the
// item's first delivery answers (dup).
func (q *queue) settle(r *deliveryReq, row *queueRow, now time.Time) (done bool, err error) {
	sr := contract.SettleRow{Found: row != nil}
	if row != nil {
		sr.Done, sr.Claim = row.state == q.done, row.claim
		sr.Withdrawn = row.state == string(vocab.EffectWithdrawn)
		sr.Held = row.state == string(vocab.EffectHeld)
		if row.deliverAt != nil {
			at := fromNS(*row.deliverAt)
			sr.DueAt = &at
		}
	}
	return contract.Settle(r.op, q.noun, r.hash, sr, r.by, now)
}

// settleArrays is how many parameters each queue's settled items take in
// the write statement (settleCTEs).
const settleArrays = 5

// settleCTEs returns the write statement's part that marks the settled
// items of every queue done: queue i's arrays are parameters
// first+settleArrays*i onwards (hashes, inbox seqs, receipt statuses,
// receipt payloads, operators' reasons), and now is the SQL of the clock.
func settleCTEs(first int, now string) string {
	var b strings.Builder
	p := func(i int) string { return "$" + strconv.Itoa(i) }
	for i, q := range settled {
		at := first + settleArrays*i
		b.WriteString(`,
			settled_` + q.table + ` AS (
				UPDATE ` + q.table + ` x SET state = '` + q.done + `', inbox_seq = u.s, completed_at_ns = ` + now + `,
					claim_expires_ns = NULL` + q.settleSet + `
				FROM unnest(` + p(at) + `::text[], ` + p(at+1) + `::bigint[], ` + p(at+2) + `::text[], ` + p(at+3) + `::bytea[], ` +
			p(at+4) + `::text[]) AS u(h, s, st, p, rr)
				WHERE x.intent_hash = u.h)`)
	}
	return b.String()
}

// settledWorlds returns the SQL of the worlds of every queue's items at
// stake: queue i's hashes are parameter first+i.
func settledWorlds(first int) string {
	var parts []string
	for i, q := range settled {
		parts = append(parts, `SELECT x.world FROM `+q.table+` x WHERE x.intent_hash = ANY($`+strconv.Itoa(first+i)+`)`)
	}
	return strings.Join(parts, "\n\t\t\tUNION ")
}

// settledKeys returns the SQL of the (world, dedupe key) of every queue's
// items at stake: queue i's hashes are parameter first+i.
func settledKeys(first int) string {
	var parts []string
	for i, q := range settled {
		parts = append(parts, `SELECT x.world, `+q.deliveryKey+` FROM `+q.table+` x WHERE x.intent_hash = ANY($`+strconv.Itoa(first+i)+`)`)
	}
	return strings.Join(parts, "\n\t\t\t\tUNION ALL ")
}
