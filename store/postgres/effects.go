package postgres

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// Publish implements protocol C (see publish_effects).
func (s *backend) Publish(ctx context.Context, world string, epoch uint64, intents []vocab.Intent) (int, error) {
	const op = "publish"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	n := len(intents)
	hashes, kinds, origins, policies := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	params, retries := make([][]byte, n), make([][]byte, n)
	for i, in := range intents {
		hashes[i], kinds[i], origins[i], policies[i], params[i] = in.IntentHash, in.Kind, in.Origin, in.PolicyContextHash, in.Params
		if len(in.Retry) > 0 {
			retries[i] = in.Retry
		}
	}
	var queued int32
	err := s.retry(ctx, op, world, func() error {
		return s.db.QueryRow(ctx, `SELECT publish_effects($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			world, int64(epoch), hashes, kinds, params, origins, policies, retries, s.off()).Scan(&queued)
	})
	if err != nil {
		return 0, err
	}
	if queued > 0 {
		s.hint(store.TopicEffects)
	}
	return int(queued), nil
}

func scanEffect(row pgx.CollectableRow) (vocab.EffectItem, error) {
	var it vocab.EffectItem
	var seq, enq int64
	var exp *int64
	var attempts, retries int32
	var state string
	var failures int32
	var retryAt, heldAt *int64
	err := row.Scan(&it.IntentHash, &it.World, &seq, &it.Kind, &it.Params, &it.Origin, &it.PolicyContextHash,
		&enq, &attempts, &it.ClaimedBy, &exp, &retries, &state, &it.Retry, &failures, &retryAt, &it.HoldReason, &heldAt)
	it.Seq, it.EnqueuedAt, it.Attempt, it.Retries, it.State = uint64(seq), fromNS(enq), int(attempts), int(retries), vocab.EffectState(state)
	if exp != nil {
		it.ClaimExpires = fromNS(*exp)
	}
	it.Failures = int(failures)
	if retryAt != nil {
		it.RetryAt = fromNS(*retryAt)
	}
	if heldAt != nil {
		it.HeldAt = fromNS(*heldAt)
	}
	if len(it.Retry) == 0 {
		it.Retry = nil
	}
	return it, err
}

// Claim implements protocol D's claim by kind (queue.go).
func (s *backend) Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...store.ClaimOption) ([]vocab.EffectItem, error) {
	const op = "claim"
	by, _ := store.ResolveClaimOptions(op, opts)
	if err := s.begin(op); err != nil {
		return nil, err
	}
	if n == 0 {
		return []vocab.EffectItem{}, nil
	}
	out, err := claim(s, ctx, op, effectsQueue, worker, n, claimTTL, by, scanEffect, kinds)
	if err != nil {
		return nil, err
	}
	// RETURNING has no order: queue order is seq order.
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// withdrawSQL withdraws pending and held effects: the (world, hash) pairs
// $1, $2, and every pending or held one of the worlds $3, at the clock with offset $4. The
// rows are locked in intent-hash order, as a delivery locks them, after
// the world, lease and stream rows of the transaction's other writes (the
// schema's lock order); a row a claim or a delivery took meanwhile is
// re-checked once its lock is released and skipped unless still pending
// or held.
const withdrawSQL = `WITH c AS (
		SELECT e.intent_hash FROM effects e
		WHERE e.state IN ('pending', 'held') AND (e.world = ANY($3::text[])
			OR (e.world, e.intent_hash) IN (SELECT u.w, u.h FROM unnest($1::text[], $2::text[]) AS u(w, h)))
		ORDER BY e.intent_hash FOR UPDATE OF e)
	UPDATE effects x SET state = 'withdrawn', claim_expires_ns = NULL, completed_at_ns = now_ns($4)
	FROM c WHERE x.intent_hash = c.intent_hash AND x.state IN ('pending', 'held')
	RETURNING x.world`

// queueWithdrawals queues withdrawSQL on b; withdrawn, if set, is called
// with the world of each effect withdrawn.
func queueWithdrawals(b *batch, ws, hs, all []string, off int64, withdrawn func(world string)) {
	if ws == nil {
		ws, hs = []string{}, []string{}
	}
	if all == nil {
		all = []string{}
	}
	b.queue(func(br pgx.BatchResults) error {
		var w string
		return scanEach(br, []any{&w}, func() {
			if withdrawn != nil {
				withdrawn(w)
			}
		})
	}, withdrawSQL, ws, hs, all, off)
}

// ReapEffects implements the effect reaper (queue.go).
func (s *backend) ReapEffects(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_effects", effectsQueue)
}

const effectStatusCols = `world, kind, state, attempts, retries, retry_reason, receipt_status, receipt_payload, inbox_seq, completed_at_ns,
	resolve_reason, failures, retry_at_ns, last_error, hold_reason, held_at_ns, release_reason`

func scanEffectStatus(hash string, row pgx.Row) (store.EffectStatus, error) {
	st := store.EffectStatus{IntentHash: hash}
	var state string
	var attempts, retries int32
	var rstatus, resolveReason *string
	var rpayload []byte
	var seq, done, retryAt, heldAt *int64
	var failures int32
	if err := row.Scan(&st.World, &st.Kind, &state, &attempts, &retries, &st.RetryReason, &rstatus, &rpayload, &seq, &done,
		&resolveReason, &failures, &retryAt, &st.LastError, &st.HoldReason, &heldAt, &st.ReleaseReason); err != nil {
		return st, err
	}
	if heldAt != nil {
		st.HeldAt = fromNS(*heldAt)
	}
	st.Failures = int(failures)
	if retryAt != nil {
		st.RetryAt = fromNS(*retryAt)
	}
	if resolveReason != nil {
		st.Resolved, st.ResolveReason = true, *resolveReason
	}
	st.State, st.Attempts, st.Retries = vocab.EffectState(state), int(attempts), int(retries)
	if rstatus != nil {
		st.Receipt = &vocab.Receipt{Status: vocab.ReceiptStatus(*rstatus), Payload: rpayload}
	}
	if seq != nil {
		st.InboxSeq = uint64(*seq)
	}
	if done != nil {
		st.CompletedAt = fromNS(*done)
	}
	return st, nil
}

// EffectStatus implements store.Effects.
func (s *backend) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
	const op = "effect_status"
	if err := s.begin(op); err != nil {
		return store.EffectStatus{}, err
	}
	var st store.EffectStatus
	err := s.retry(ctx, op, "", func() error {
		var err error
		st, err = scanEffectStatus(intentHash, s.db.QueryRow(ctx, `SELECT `+effectStatusCols+` FROM effects WHERE intent_hash = $1`, intentHash))
		if err == pgx.ErrNoRows {
			return store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
		}
		return err
	})
	return st, err
}

// RetryEffect implements store.Effects: the effect's row is read under
// lock, contract.Retryable decides, and the row goes back to pending in
// the same transaction (its receipt fields cleared: the next completion
// delivers a new receipt, under the new retry count's key; its claim
// cleared: the attempt that ended cannot pass as the retry's).
func (s *backend) RetryEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	const op = "retry_effect"
	if err := s.begin(op); err != nil {
		return store.EffectStatus{}, err
	}
	var st store.EffectStatus
	var wstatus string
	err := s.twoTrips(ctx, op, "", func(b *batch) {
		b.queue(func(br pgx.BatchResults) error {
			var err error
			st, err = scanEffectStatus(intentHash, br.QueryRow())
			if err == pgx.ErrNoRows {
				return store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
			}
			return err
		}, `SELECT `+effectStatusCols+` FROM effects WHERE intent_hash = $1 FOR UPDATE`, intentHash)
		// Read, not locked: an archive that commits after this read has
		// withdrawn nothing of a done effect, and the claim's guard keeps
		// the retry from being handed out.
		b.queue(func(br pgx.BatchResults) error {
			wstatus = ""
			return scanEach(br, []any{&wstatus}, func() {})
		}, `SELECT w.status FROM worlds w JOIN effects e ON e.world = w.world WHERE e.intent_hash = $1`, intentHash)
	}, func(b *batch) error {
		var rs vocab.ReceiptStatus
		if st.Receipt != nil {
			rs = st.Receipt.Status
		}
		if err := contract.RetryEffect(op, intentHash, st.World, st.State, rs, store.WorldStatus(wstatus)); err != nil {
			return err
		}
		b.queue(func(br pgx.BatchResults) error {
			var err error
			st, err = scanEffectStatus(intentHash, br.QueryRow())
			return err
		}, `UPDATE effects SET state = 'pending', retries = retries + 1, retry_reason = $2,
				receipt_status = NULL, receipt_payload = NULL, resolve_reason = NULL, inbox_seq = NULL, completed_at_ns = NULL,
				claimed_by = '', claim_expires_ns = NULL, failures = 0, retry_at_ns = NULL, last_error = ''
			WHERE intent_hash = $1
			RETURNING `+effectStatusCols, intentHash, reason)
		b.queue(nil, `SELECT notify_topic('effects')`)
		return nil
	})
	if err != nil {
		return store.EffectStatus{}, err
	}
	s.hint(store.TopicEffects)
	return st, nil
}

// ReleaseEffect implements store.Effects: the row is locked, decided by
// contract.ReleaseEffect, and put back to pending as a reap of that one
// item would. Like a claim or a reap, a release lost in a crash is simply
// not a release (the claim expires), so it does not wait for the WAL.
func (s *backend) ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error {
	return s.release(ctx, "release_effect", intentHash, c, func(b *batch) {
		b.queue(nil, `UPDATE effects SET state = 'pending', claim_expires_ns = NULL, claim_node = '', claim_incarnation = ''
			WHERE intent_hash = $1`, intentHash)
	})
}

// RetryLater implements store.Effects: a release whose row waits for
// retry_at_ns, the store's clock plus delay. Lost in a crash it is a
// release that never happened: the claim expires and the effect runs
// again sooner, which at-least-once allows.
func (s *backend) RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error {
	off := s.off()
	return s.release(ctx, "retry_later", intentHash, c, func(b *batch) {
		b.queue(nil, `UPDATE effects SET state = 'pending', claim_expires_ns = NULL, claim_node = '', claim_incarnation = '', failures = failures + 1,
				retry_at_ns = now_ns($2) + $3, last_error = $4
			WHERE intent_hash = $1`, intentHash, off, int64(delay), lastError)
	})
}

// NextRetry implements store.Effects (effects_retry_at); the wait is
// computed in the server, on the store's clock.
func (s *backend) NextRetry(ctx context.Context, kinds []string) (time.Duration, bool, error) {
	const op = "next_retry"
	if err := s.begin(op); err != nil {
		return 0, false, err
	}
	var wait *int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `WITH clock AS MATERIALIZED (SELECT now_ns($1) AS t)
			SELECT min(retry_at_ns) - (SELECT t FROM clock) FROM effects
			WHERE state = 'pending' AND retry_at_ns IS NOT NULL AND retry_at_ns > (SELECT t FROM clock) AND kind = ANY($2::text[])`,
			s.off(), kinds).Scan(&wait)
	})
	if err != nil || wait == nil {
		return 0, false, err
	}
	return time.Duration(*wait), true, nil
}

// release hands an effect's claim c back as contract.ReleaseEffect decides,
// in one locked read and one write: an archived world's effect is
// withdrawn, otherwise requeue queues the pending row's update and
// TopicEffects is hinted.
func (s *backend) release(ctx context.Context, op, intentHash string, c vocab.Claim, requeue func(*batch)) error {
	if err := s.begin(op); err != nil {
		return err
	}
	var (
		found, noop, withdraw bool
		state, status         string
		row                   contract.ClaimRow
	)
	off := s.off()
	err := s.twoTrips(ctx, op, "", func(b *batch) {
		b.queue(nil, "SET LOCAL synchronous_commit = off")
		b.queue(func(br pgx.BatchResults) error {
			var att int32
			err := br.QueryRow().Scan(&state, &att, &row.ClaimedBy, &status)
			if err == pgx.ErrNoRows {
				found = false
				return nil
			}
			found, row.Attempt = err == nil, int(att)
			return err
		}, `SELECT e.state, e.attempts, e.claimed_by, coalesce(w.status, '')
			FROM effects e LEFT JOIN worlds w ON w.world = e.world
			WHERE e.intent_hash = $1 FOR UPDATE OF e`, intentHash)
	}, func(b *batch) error {
		var err error
		if noop, err = contract.ReleaseEffect(op, intentHash, found, vocab.EffectState(state), row, c); err != nil || noop {
			return err
		}
		if withdraw = contract.ReleaseTo(store.WorldStatus(status)) == vocab.EffectWithdrawn; withdraw {
			b.queue(nil, `UPDATE effects SET state = 'withdrawn', claim_expires_ns = NULL, completed_at_ns = now_ns($2)
				WHERE intent_hash = $1`, intentHash, off)
			return nil
		}
		requeue(b)
		b.queue(nil, `SELECT notify_topic('effects')`)
		return nil
	})
	if err != nil {
		return err
	}
	if !noop && !withdraw {
		s.hint(store.TopicEffects)
	}
	return nil
}

// CompleteMany implements store.Effects: one request of the delivery
// committer, so the batch commits in one transaction (shared with whatever
// other deliveries the committer groups with it) and one WAL flush, each
// completion decided as a Complete alone would be (its errors are
// Complete's), in order.
func (s *backend) CompleteMany(ctx context.Context, cs []vocab.Completion) ([]store.CompleteResult, error) {
	const op = "complete_many"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	out := make([]store.CompleteResult, len(cs))
	if len(cs) == 0 {
		return out, nil
	}
	parts := make([]*deliveryReq, len(cs))
	for i, c := range cs {
		parts[i] = &deliveryReq{ctx: ctx, op: "complete", kind: dComplete, hash: c.IntentHash, by: contract.Claimant(c.Claim),
			status: string(c.Receipt.Status), payload: c.Receipt.Payload}
	}
	r := &deliveryReq{ctx: ctx, op: op, parts: parts, done: make(chan struct{})}
	if err := s.deliveries.Do(parts[0].hash, r); err != nil {
		return nil, dbErr(op, "", err)
	}
	if r.res.err != nil {
		return nil, r.res.err
	}
	var inboxes []string
	for j, p := range parts {
		out[j] = store.CompleteResult{InboxSeq: p.res.seq, Dup: p.res.dup, Err: p.res.err}
		if p.res.err == nil && !p.res.dup {
			inboxes = append(inboxes, p.res.world)
		}
	}
	slices.Sort(inboxes)
	for _, w := range slices.Compact(inboxes) {
		s.hint(store.TopicInbox(w))
	}
	return out, nil
}

// Resolve implements store.Effects: an operator's completion is a
// Complete's delivery (the same request of the delivery committer, the
// same settle) with an operator in the claimant's place
// (contract.Operator), whose reason the settle records in resolve_reason.
func (s *backend) Resolve(ctx context.Context, intentHash string, r vocab.Receipt, reason string) (uint64, bool, error) {
	const op = "resolve"
	if err := s.begin(op); err != nil {
		return 0, false, err
	}
	return s.deliver(&deliveryReq{ctx: ctx, op: op, kind: dComplete, hash: intentHash, by: contract.Operator(reason),
		status: string(r.Status), payload: r.Payload})
}

// The hold revokes the claim as the orphan reaper does (claimed_by,
// claim_node and claim_incarnation cleared): no completion, release or
// retry of an execution already under way passes the claim check, which
// reads the row under the same lock.
const (
	holdSet = `state = 'held', claimed_by = '', claim_expires_ns = NULL, claim_node = '', claim_incarnation = '', hold_reason = $2, held_at_ns = now_ns($3), release_reason = ''`
	// An effect of a world archived since it was held is withdrawn
	// instead (contract.ReleaseTo): no claim serves an archived world.
	releaseSet = `state = CASE WHEN EXISTS (SELECT 1 FROM worlds w WHERE w.world = effects.world AND w.status = 'archived')
			THEN 'withdrawn' ELSE 'pending' END,
		completed_at_ns = CASE WHEN EXISTS (SELECT 1 FROM worlds w WHERE w.world = effects.world AND w.status = 'archived')
			THEN now_ns($3) ELSE completed_at_ns END,
		retry_at_ns = NULL, release_reason = $2`
)

// HoldEffect implements store.Effects (contract.HoldEffect).
func (s *backend) HoldEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	off := s.off()
	st, _, err := s.holdOrRelease(ctx, "hold_effect", intentHash, contract.HoldEffect, false,
		`UPDATE effects SET `+holdSet+` WHERE intent_hash = $1 RETURNING `+effectStatusCols, reason, off)
	return st, err
}

// ReleaseHeld implements store.Effects (contract.ReleaseHeld).
func (s *backend) ReleaseHeld(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	st, wrote, err := s.holdOrRelease(ctx, "release_held", intentHash, contract.ReleaseHeld, true,
		`UPDATE effects SET `+releaseSet+` WHERE intent_hash = $1 RETURNING `+effectStatusCols, reason, s.off())
	if err == nil && wrote {
		s.hint(store.TopicEffects)
	}
	return st, err
}

// holdOrRelease locks the effect's row, lets decide judge its state, and
// unless that is a no-op runs update ($1 the hash, then args) in the same
// transaction (with the effects topic's notification when claimable, as
// for a release), answering the record as it is now and whether it wrote.
func (s *backend) holdOrRelease(ctx context.Context, op, intentHash string,
	decide func(op, id string, found bool, state vocab.EffectState) (bool, error), claimable bool, update string, args ...any) (store.EffectStatus, bool, error) {
	if err := s.begin(op); err != nil {
		return store.EffectStatus{}, false, err
	}
	var (
		st          store.EffectStatus
		found, noop bool
	)
	err := s.twoTrips(ctx, op, "", func(b *batch) {
		b.queue(func(br pgx.BatchResults) error {
			var err error
			st, err = scanEffectStatus(intentHash, br.QueryRow())
			found = err == nil
			if err == pgx.ErrNoRows {
				return nil
			}
			return err
		}, `SELECT `+effectStatusCols+` FROM effects WHERE intent_hash = $1 FOR UPDATE`, intentHash)
	}, func(b *batch) error {
		var err error
		if noop, err = decide(op, intentHash, found, st.State); err != nil || noop {
			return err
		}
		b.queue(func(br pgx.BatchResults) error {
			var err error
			st, err = scanEffectStatus(intentHash, br.QueryRow())
			return err
		}, update, append([]any{intentHash}, args...)...)
		if claimable {
			b.queue(nil, `SELECT notify_topic('effects')`)
		}
		return nil
	})
	if err != nil {
		return store.EffectStatus{}, false, err
	}
	return st, !noop, nil
}

// HoldOpenEffects implements store.Effects: one statement, its rows locked
// in intent-hash order as every other multi-row write of effects locks
// them.
func (s *backend) HoldOpenEffects(ctx context.Context, reason string) (int, error) {
	const op = "hold_open_effects"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	off := s.off()
	var n int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `WITH c AS (
				SELECT e.intent_hash FROM effects e WHERE e.state IN ('pending', 'inflight') ORDER BY e.intent_hash FOR UPDATE OF e),
			u AS (UPDATE effects x SET `+strings.ReplaceAll(strings.ReplaceAll(holdSet, "$2", "$1"), "$3", "$2")+`
				FROM c WHERE x.intent_hash = c.intent_hash AND x.state IN ('pending', 'inflight') RETURNING 1)
			SELECT (SELECT count(*) FROM u)
				+ (SELECT count(*) FROM effects h WHERE h.state = 'held' AND h.hold_reason = $1)`, reason, off).Scan(&n)
	})
	return int(n), err
}

// ReleaseAllHeld implements store.Effects (effects_held).
func (s *backend) ReleaseAllHeld(ctx context.Context, reason string) (int, error) {
	const op = "release_all_held"
	if err := s.begin(op); err != nil {
		return 0, err
	}
	var n int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `WITH c AS (
				SELECT e.intent_hash FROM effects e WHERE e.state = 'held' ORDER BY e.intent_hash FOR UPDATE OF e),
			u AS (UPDATE effects SET `+strings.ReplaceAll(strings.ReplaceAll(releaseSet, "$2", "$1"), "$3", "$2")+`
				FROM c WHERE effects.intent_hash = c.intent_hash AND effects.state = 'held' RETURNING 1),
			n AS (SELECT count(*) AS n FROM u)
			SELECT n.n, (SELECT count(*) FROM (SELECT notify_topic('effects') WHERE n.n > 0) z) FROM n`, reason, s.off()).Scan(&n, new(int64))
	})
	if err == nil && n > 0 {
		s.hint(store.TopicEffects)
	}
	return int(n), err
}
