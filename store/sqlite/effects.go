package sqlite

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// Effects (protocols C and D). One row per intent hash carries the queue
// item and its dedupe record: pending → inflight (claimed) → done, and back
// to pending on a reap or an operator's retry. A done row keeps its params
// (a retry runs the effect again) and its receipt; SweepDedupe deletes it
// once contract.Sweepable says so, and only then can the same hash be
// published again.

// publish queues the intents whose hash was never published (or was
// swept), inside a fenced request (Publish, Commit).
func (t *wtx) publish(world string, intents []vocab.Intent) (int, error) {
	queued := 0
	for _, in := range intents {
		res, err := t.exec(`INSERT INTO effects (intent_hash, world, kind, params, origin, policy_context_hash, state, enqueued_at, retry_policy)
			VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (intent_hash) DO NOTHING`,
			in.IntentHash, world, in.Kind, in.Params, in.Origin, in.PolicyContextHash, t.nowNS, nilIfEmpty(in.Retry))
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		queued += int(n)
	}
	if queued > 0 {
		t.notify(store.TopicEffects)
	}
	return queued, nil
}

// withdraw withdraws world's intent hash if it is pending or held, inside a fenced
// request (a Commit's Withdraw), and returns 1 if it did.
func (t *wtx) withdraw(world, hash string) (int, error) {
	return t.rowsAffected(`UPDATE effects SET state = 'withdrawn', claim_expires = NULL, completed_at = ?
		WHERE intent_hash = ? AND world = ? AND state IN ('pending', 'held')`, t.nowNS, hash, world)
}

// withdrawAll withdraws every pending and held effect of world (its
// archiving).
func (t *wtx) withdrawAll(world string) (int, error) {
	return t.rowsAffected(`UPDATE effects SET state = 'withdrawn', claim_expires = NULL, completed_at = ?
		WHERE world = ? AND state IN ('pending', 'held')`, t.nowNS, world)
}

func (t *wtx) rowsAffected(query string, args ...any) (int, error) {
	res, err := t.exec(query, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// Publish queues the world's new intents, fenced by epoch (protocol C).
func (s *backend) Publish(ctx context.Context, world string, epoch uint64, intents []vocab.Intent) (int, error) {
	res, err := s.commit(ctx, "publish", world, epoch, store.CommitBatch{Intents: intents}, sideEffects)
	if err != nil {
		return 0, err
	}
	return res.Published, nil
}

const effectItemCols = `seq, intent_hash, world, kind, params, params IS NOT NULL, origin, policy_context_hash, enqueued_at,
	state, attempts, claimed_by, claim_expires, retries, retry_policy, failures, retry_at, hold_reason, held_at`

func scanEffectItem(sc interface{ Scan(...any) error }) (vocab.EffectItem, error) {
	var (
		it                 vocab.EffectItem
		seq, at, att, retr int64
		hasParams          bool
		state              string
		exp, retryAt       sql.NullInt64
		heldAt             sql.NullInt64
		fails              int64
	)
	if err := sc.Scan(&seq, &it.IntentHash, &it.World, &it.Kind, &it.Params, &hasParams, &it.Origin, &it.PolicyContextHash,
		&at, &state, &att, &it.ClaimedBy, &exp, &retr, &it.Retry, &fails, &retryAt, &it.HoldReason, &heldAt); err != nil {
		return vocab.EffectItem{}, err
	}
	it.Params = blob(it.Params, hasParams)
	it.Seq, it.EnqueuedAt, it.State, it.Attempt, it.Retries = uint64(seq), fromNS(at), vocab.EffectState(state), int(att), int(retr)
	it.ClaimExpires = fromNullNS(exp)
	it.Failures, it.RetryAt = int(fails), fromNullNS(retryAt)
	it.HeldAt = fromNullNS(heldAt)
	if len(it.Retry) == 0 {
		it.Retry = nil
	}
	return it, nil
}

// Claim moves up to n pending items of the given kinds, in queue order, to
// inflight for worker (protocol D, step 1; queue.go). Each kind's oldest n
// come from its own range of effects_pending_by_kind, the merge keeps the n
// oldest overall: a claim reads O(kinds × n) index entries however long
// the queue.
func (s *backend) Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...store.ClaimOption) ([]vocab.EffectItem, error) {
	const op = "claim"
	by, _ := store.ResolveClaimOptions(op, opts)
	if n == 0 {
		return nil, nil
	}
	kinds = slices.Compact(slices.Sorted(slices.Values(kinds)))
	var out []vocab.EffectItem
	err := s.write(ctx, op, "", func(t *wtx) error {
		out = out[:0]
		if err := t.claimable(op, by); err != nil {
			return err
		}
		parts := make([][]any, len(kinds))
		for i, k := range kinds {
			parts[i] = []any{k, t.nowNS}
		}
		return claim[int64](t, effectsQueue, worker, n, claimTTL, by, parts, func(sc interface{ Scan(...any) error }) error {
			it, err := scanEffectItem(sc)
			out = append(out, it)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CompleteMany completes the batch in one request of the group commit, so
// in one transaction and one fsync, each item decided on its own.
func (s *backend) CompleteMany(ctx context.Context, cs []vocab.Completion) ([]store.CompleteResult, error) {
	const op = "complete_many"
	if len(cs) == 0 {
		// Nothing to write, but the call's own answer (a closed store)
		// stays the same whatever the items.
		if err := s.read(ctx, op); err != nil {
			return nil, err
		}
		return []store.CompleteResult{}, nil
	}
	out := make([]store.CompleteResult, len(cs))
	err := s.write(ctx, op, "", func(t *wtx) error {
		// A request may run again (a database failure reruns the group):
		// its answers are recomputed from the database each time.
		for i, c := range cs {
			res, err := t.complete(c)
			if err != nil {
				return err
			}
			out[i] = res
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// complete delivers one receipt and closes its intent (protocol D, steps
// 3–5): a settle of the effects queue (queue.go). The receipt enters the
// inbox whatever the world's status: it answers the world's own request. A
// typed refusal is the item's answer and writes nothing; the error is the
// database's, which fails the whole request.
func (t *wtx) complete(c vocab.Completion) (store.CompleteResult, error) {
	seq, dup, err := t.settle(effectsQueue, "complete", c.IntentHash, contract.Claimant(c.Claim), c.Receipt)
	if err != nil {
		if _, typed := err.(*store.Error); typed {
			return store.CompleteResult{Err: err}, nil
		}
		return store.CompleteResult{}, err
	}
	return store.CompleteResult{InboxSeq: seq, Dup: dup}, nil
}

// Resolve is an operator's completion: the settle of the effects queue
// that Complete runs, with an operator in the claimant's place
// (contract.Operator), in one request of the group commit. The reason is
// kept in resolve_reason.
func (s *backend) Resolve(ctx context.Context, intentHash string, r vocab.Receipt, reason string) (uint64, bool, error) {
	const op = "resolve"
	var (
		seq uint64
		dup bool
	)
	err := s.write(ctx, op, "", func(t *wtx) error {
		var err error
		seq, dup, err = t.settle(effectsQueue, op, intentHash, contract.Operator(reason), r)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// ReapEffects requeues inflight items whose claim expired (queue.go).
func (s *backend) ReapEffects(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_effects", effectsQueue)
}

// ReleaseEffect puts an inflight effect back to pending under its latest
// claim (contract.ReleaseEffect), as a reap of that one item would.
func (s *backend) ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error {
	return s.release(ctx, "release_effect", intentHash, c, func(t *wtx) error {
		_, err := t.exec(`UPDATE effects SET state = 'pending', claim_expires = NULL WHERE intent_hash = ?`, intentHash)
		return err
	})
}

// release hands an effect's claim c back as contract.ReleaseEffect decides:
// an archived world's effect is withdrawn, otherwise requeue writes the
// pending row and TopicEffects is hinted.
func (s *backend) release(ctx context.Context, op, intentHash string, c vocab.Claim, requeue func(*wtx) error) error {
	return s.write(ctx, op, "", func(t *wtx) error {
		var (
			state, status string
			row           contract.ClaimRow
			att           int64
		)
		found, err := t.queryRow(`SELECT e.state, e.attempts, e.claimed_by, coalesce(w.status, '')
			FROM effects e LEFT JOIN worlds w ON w.id = e.world WHERE e.intent_hash = ?`,
			[]any{intentHash}, &state, &att, &row.ClaimedBy, &status)
		if err != nil {
			return err
		}
		row.Attempt = int(att)
		noop, err := contract.ReleaseEffect(op, intentHash, found, vocab.EffectState(state), row, c)
		if err != nil || noop {
			return err
		}
		if contract.ReleaseTo(store.WorldStatus(status)) == vocab.EffectWithdrawn {
			_, err := t.exec(`UPDATE effects SET state = 'withdrawn', claim_expires = NULL, completed_at = ? WHERE intent_hash = ?`, t.nowNS, intentHash)
			return err
		}
		if err := requeue(t); err != nil {
			return err
		}
		t.notify(store.TopicEffects)
		return nil
	})
}

// RetryLater puts an inflight effect back to pending under its latest
// claim, as ReleaseEffect does, not claimable before now+delay by this
// store's clock.
func (s *backend) RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error {
	return s.release(ctx, "retry_later", intentHash, c, func(t *wtx) error {
		_, err := t.exec(`UPDATE effects SET state = 'pending', claim_expires = NULL, failures = failures + 1, retry_at = ?,
			last_error = ? WHERE intent_hash = ?`, t.now.Add(delay).UnixNano(), lastError, intentHash)
		return err
	})
}

// NextRetry reads the earliest retry time after the store's clock among
// the pending effects of kinds (effects_retry_at).
func (s *backend) NextRetry(ctx context.Context, kinds []string) (time.Duration, bool, error) {
	const op = "next_retry"
	if err := s.read(ctx, op); err != nil {
		return 0, false, err
	}
	now := s.cfg.clock().Round(0).UnixNano()
	kinds = slices.Compact(slices.Sorted(slices.Values(kinds)))
	q := `SELECT min(retry_at) FROM effects WHERE state = 'pending' AND retry_at IS NOT NULL AND retry_at > ? AND kind IN (?` +
		strings.Repeat(", ?", len(kinds)-1) + `)`
	args := []any{now}
	for _, k := range kinds {
		args = append(args, k)
	}
	var at sql.NullInt64
	if _, err := s.queryRow(ctx, q, args, &at); err != nil {
		return 0, false, dbErr(op, "", err)
	}
	if !at.Valid {
		return 0, false, nil
	}
	return time.Duration(at.Int64 - now), true, nil
}

// RetryEffect sends an effect whose terminal receipt was error or timeout
// back to pending (contract.RetryEffect), with Retries+1 and the reason. Its
// earlier claim is spent (its completion was the receipt being retried),
// so only a new claim may complete it.
func (s *backend) RetryEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	const op = "retry_effect"
	var out store.EffectStatus
	err := s.write(ctx, op, "", func(t *wtx) error {
		var (
			state, world, wstatus string
			rstatus               sql.NullString
		)
		found, err := t.queryRow(`SELECT e.state, e.receipt_status, e.world, w.status FROM effects e JOIN worlds w ON w.id = e.world
			WHERE e.intent_hash = ?`, []any{intentHash}, &state, &rstatus, &world, &wstatus)
		if err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
		}
		if err := contract.RetryEffect(op, intentHash, world, vocab.EffectState(state), vocab.ReceiptStatus(rstatus.String),
			store.WorldStatus(wstatus)); err != nil {
			return err
		}
		row, err := t.row(`UPDATE effects SET state = 'pending', retries = retries + 1, retry_reason = ?, claimed_by = '', claim_expires = NULL,
			receipt_status = NULL, receipt_payload = NULL, resolve_reason = NULL, inbox_seq = NULL, completed_at = NULL,
			failures = 0, retry_at = NULL, last_error = ''
			WHERE intent_hash = ? RETURNING `+effectStatusCols, reason, intentHash)
		if err != nil {
			return err
		}
		if out, err = scanEffectStatus(row); err != nil {
			return err
		}
		t.notify(store.TopicEffects)
		return nil
	})
	if err != nil {
		return store.EffectStatus{}, err
	}
	return out, nil
}

const effectStatusCols = `intent_hash, world, kind, state, attempts, retries, retry_reason,
	receipt_status, receipt_payload, receipt_payload IS NOT NULL, resolve_reason, inbox_seq, completed_at,
	failures, retry_at, last_error, hold_reason, held_at, release_reason`

func scanEffectStatus(sc interface{ Scan(...any) error }) (store.EffectStatus, error) {
	var (
		st                store.EffectStatus
		state             string
		attempts, retries int64
		rstatus           sql.NullString
		rpayload          []byte
		hasPayload        bool
		resolveReason     sql.NullString
		inboxSeq, done    sql.NullInt64
		fails             int64
		retryAt, heldAt   sql.NullInt64
	)
	if err := sc.Scan(&st.IntentHash, &st.World, &st.Kind, &state, &attempts, &retries, &st.RetryReason,
		&rstatus, &rpayload, &hasPayload, &resolveReason, &inboxSeq, &done,
		&fails, &retryAt, &st.LastError, &st.HoldReason, &heldAt, &st.ReleaseReason); err != nil {
		return store.EffectStatus{}, err
	}
	st.State, st.Attempts, st.Retries = vocab.EffectState(state), int(attempts), int(retries)
	st.Failures, st.RetryAt = int(fails), fromNullNS(retryAt)
	st.HeldAt = fromNullNS(heldAt)
	if st.State == vocab.EffectWithdrawn {
		st.CompletedAt = fromNullNS(done)
	}
	st.Resolved, st.ResolveReason = resolveReason.Valid, resolveReason.String
	if rstatus.Valid {
		st.Receipt = &vocab.Receipt{Status: vocab.ReceiptStatus(rstatus.String), Payload: blob(rpayload, hasPayload)}
		st.InboxSeq = uint64(inboxSeq.Int64)
		st.CompletedAt = fromNullNS(done)
	}
	return st, nil
}

// EffectStatus reads an intent's dedupe record.
func (s *backend) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
	const op = "effect_status"
	if err := s.read(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	st, err := s.rstmt(ctx, `SELECT `+effectStatusCols+` FROM effects WHERE intent_hash = ?`)
	if err != nil {
		return store.EffectStatus{}, dbErr(op, "", err)
	}
	out, err := scanEffectStatus(st.QueryRowContext(ctx, intentHash))
	if err == sql.ErrNoRows {
		return store.EffectStatus{}, store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
	}
	if err != nil {
		return store.EffectStatus{}, dbErr(op, "", err)
	}
	return out, nil
}

// The hold revokes the claim as the orphan reaper does (claimed_by,
// claim_node and claim_incarnation cleared): no completion, release or
// retry of an execution already under way passes the claim check.
const (
	holdSet = `state = 'held', claimed_by = '', claim_expires = NULL, claim_node = '', claim_incarnation = '', hold_reason = ?, held_at = ?, release_reason = ''`
	// An effect of a world archived since it was held is withdrawn
	// instead (contract.ReleaseTo): no claim serves an archived world.
	releaseSet = `state = CASE WHEN world IN (SELECT id FROM worlds WHERE status = 'archived') THEN 'withdrawn' ELSE 'pending' END,
		completed_at = CASE WHEN world IN (SELECT id FROM worlds WHERE status = 'archived') THEN ?2 ELSE completed_at END,
		retry_at = NULL, release_reason = ?1`
)

// HoldEffect holds a pending or inflight effect (contract.HoldEffect).
func (s *backend) HoldEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	return s.holdOrRelease(ctx, "hold_effect", intentHash, contract.HoldEffect, func(t *wtx) error {
		_, err := t.exec(`UPDATE effects SET `+holdSet+` WHERE intent_hash = ?`, reason, t.nowNS, intentHash)
		return err
	})
}

// ReleaseHeld puts a held effect back to pending (contract.ReleaseHeld).
func (s *backend) ReleaseHeld(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	return s.holdOrRelease(ctx, "release_held", intentHash, contract.ReleaseHeld, func(t *wtx) error {
		if _, err := t.exec(`UPDATE effects SET `+releaseSet+` WHERE intent_hash = ?3`, reason, t.nowNS, intentHash); err != nil {
			return err
		}
		t.notify(store.TopicEffects)
		return nil
	})
}

// holdOrRelease reads the effect's state, lets decide judge it, writes
// with write unless it is a no-op, and answers the record as it is now.
func (s *backend) holdOrRelease(ctx context.Context, op, intentHash string,
	decide func(op, id string, found bool, state vocab.EffectState) (bool, error), write func(*wtx) error) (store.EffectStatus, error) {
	var out store.EffectStatus
	err := s.write(ctx, op, "", func(t *wtx) error {
		var state string
		found, err := t.queryRow(`SELECT state FROM effects WHERE intent_hash = ?`, []any{intentHash}, &state)
		if err != nil {
			return err
		}
		noop, err := decide(op, intentHash, found, vocab.EffectState(state))
		if err != nil {
			return err
		}
		if !noop {
			if err := write(t); err != nil {
				return err
			}
		}
		row, err := t.row(`SELECT `+effectStatusCols+` FROM effects WHERE intent_hash = ?`, intentHash)
		if err != nil {
			return err
		}
		out, err = scanEffectStatus(row)
		return err
	})
	if err != nil {
		return store.EffectStatus{}, err
	}
	return out, nil
}

// HoldOpenEffects holds every pending and inflight effect in one request.
func (s *backend) HoldOpenEffects(ctx context.Context, reason string) (int, error) {
	var n int
	err := s.write(ctx, "hold_open_effects", "", func(t *wtx) error {
		if _, err := t.exec(`UPDATE effects SET `+holdSet+` WHERE state IN ('pending', 'inflight')`, reason, t.nowNS); err != nil {
			return err
		}
		_, err := t.queryRow(`SELECT count(*) FROM effects WHERE state = 'held' AND hold_reason = ?`, []any{reason}, &n)
		return err
	})
	return n, err
}

// ReleaseAllHeld releases every held effect in one request (effects_held).
func (s *backend) ReleaseAllHeld(ctx context.Context, reason string) (int, error) {
	var n int
	err := s.write(ctx, "release_all_held", "", func(t *wtx) error {
		var err error
		if n, err = t.rowsAffected(`UPDATE effects SET `+releaseSet+` WHERE state = 'held'`, reason, t.nowNS); err != nil {
			return err
		}
		if n > 0 {
			t.notify(store.TopicEffects)
		}
		return nil
	})
	return n, err
}
