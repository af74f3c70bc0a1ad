package sqlite

import (
	"context"
	"database/sql"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Effects (protocols C and D). One row per intent hash carries the queue
// item and its dedupe record: pending → inflight (claimed) → done. A done
// row keeps the receipt and drops the params; SweepDedupe deletes it after
// the retention, and only then can the same hash be published again.

// Publish queues the world's new intents, fenced by epoch (protocol C).
func (s *Store) Publish(ctx context.Context, world string, epoch uint64, intents []store.Intent) (int, error) {
	const op = "publish"
	for _, in := range intents {
		if in.IntentHash == "" || in.Kind == "" {
			return 0, store.Errorf(op, store.ErrInvalid, world, "intent needs a hash and a kind (%q, %q)", in.IntentHash, in.Kind)
		}
	}
	var queued int
	err := s.write(ctx, op, world, func(t *wtx) error {
		queued = 0
		if err := t.fence(op, world, epoch); err != nil {
			return err
		}
		for _, in := range intents {
			res, err := t.exec(`INSERT INTO effects (intent_hash, world, kind, params, origin, policy_context_hash, state, enqueued_at)
				VALUES (?, ?, ?, ?, ?, ?, 'pending', ?) ON CONFLICT (intent_hash) DO NOTHING`,
				in.IntentHash, world, in.Kind, in.Params, in.Origin, in.PolicyContextHash, t.nowNS)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			queued += int(n)
		}
		if queued > 0 {
			t.notify(store.TopicEffects)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return queued, nil
}

// Claim moves up to n pending items, in queue order, to inflight for worker
// (protocol D, step 1), in one statement.
func (s *Store) Claim(ctx context.Context, worker string, n int, claimTTL time.Duration) ([]store.EffectItem, error) {
	const op = "claim"
	if err := checkWorker(op, "", worker, "claim ttl", claimTTL); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	var out []store.EffectItem
	err := s.write(ctx, op, "", func(t *wtx) error {
		out = out[:0]
		rows, err := t.query(`UPDATE effects SET state = 'inflight', attempts = attempts + 1, claimed_by = ?, claim_expires = ?
			WHERE seq IN (SELECT seq FROM effects WHERE state = 'pending' ORDER BY seq LIMIT ?)
			RETURNING seq, intent_hash, world, kind, params, params IS NOT NULL, origin, policy_context_hash, enqueued_at, attempts, claim_expires`,
			worker, expiry(t.nowNS, claimTTL), n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				it                store.EffectItem
				seq, at, att, exp int64
				hasParams         bool
			)
			if err := rows.Scan(&seq, &it.IntentHash, &it.World, &it.Kind, &it.Params, &hasParams, &it.Origin, &it.PolicyContextHash,
				&at, &att, &exp); err != nil {
				return err
			}
			it.Params = blob(it.Params, hasParams)
			it.Seq, it.EnqueuedAt, it.Attempt = uint64(seq), fromNS(at), int(att)
			it.ClaimedBy, it.ClaimExpires = worker, fromNS(exp)
			out = append(out, it)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Complete delivers the receipt and closes the intent in one transaction
// (protocol D, steps 3–5). The receipt's inbox item carries r.Payload; its
// status is in the intent's EffectStatus. A pending intent (its claim
// reaped while the adapter was still at work) may be completed too: losing
// a result would execute the effect again. The receipt enters the inbox
// whatever the world's status: it answers the world's own request.
func (s *Store) Complete(ctx context.Context, intentHash string, r store.Receipt) (uint64, bool, error) {
	const op = "complete"
	var (
		seq uint64
		dup bool
	)
	err := s.write(ctx, op, "", func(t *wtx) error {
		var (
			world, state string
			inboxSeq     sql.NullInt64
		)
		found, err := t.queryRow(`SELECT world, state, inbox_seq FROM effects WHERE intent_hash = ?`, []any{intentHash}, &world, &state, &inboxSeq)
		if err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
		}
		if store.EffectState(state) == store.EffectDone {
			seq, dup = uint64(inboxSeq.Int64), true
			return nil
		}
		switch r.Status {
		case store.ReceiptOK, store.ReceiptError, store.ReceiptTimeout:
		default:
			return store.Errorf(op, store.ErrInvalid, world, "intent %s: unknown receipt status %q", intentHash, r.Status)
		}
		seq, dup, err = t.enqueue(op, world, "receipt", r.Payload, "receipt:"+intentHash, true)
		if err != nil {
			return err
		}
		_, err = t.exec(`UPDATE effects SET state = 'done', params = NULL, claimed_by = '', claim_expires = NULL,
			receipt_status = ?, receipt_payload = ?, inbox_seq = ?, completed_at = ? WHERE intent_hash = ?`,
			string(r.Status), r.Payload, int64(seq), t.nowNS, intentHash)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// ReapEffects requeues inflight items whose claim expired (at or before the
// store clock). They keep their queue position.
func (s *Store) ReapEffects(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_effects", `UPDATE effects SET state = 'pending', claimed_by = '', claim_expires = NULL
			WHERE state = 'inflight' AND claim_expires <= ?`, store.TopicEffects)
}

// reap runs one requeue statement (its only parameter is the store clock)
// and hints topic if anything came back.
func (s *Store) reap(ctx context.Context, op, query, topic string) (int, error) {
	var n int
	err := s.write(ctx, op, "", func(t *wtx) error {
		res, err := t.exec(query, t.nowNS)
		if err != nil {
			return err
		}
		m, err := res.RowsAffected()
		n = int(m)
		if n > 0 {
			t.notify(topic)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// EffectStatus reads an intent's dedupe record.
func (s *Store) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
	const op = "effect_status"
	if err := s.read(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	var (
		st             store.EffectStatus
		state          string
		attempts       int64
		rstatus        sql.NullString
		rpayload       []byte
		hasPayload     bool
		inboxSeq, done sql.NullInt64
	)
	found, err := s.queryRow(ctx, `SELECT world, state, attempts, receipt_status, receipt_payload, receipt_payload IS NOT NULL, inbox_seq, completed_at
		FROM effects WHERE intent_hash = ?`, []any{intentHash},
		&st.World, &state, &attempts, &rstatus, &rpayload, &hasPayload, &inboxSeq, &done)
	if err != nil {
		return store.EffectStatus{}, dbErr(op, "", err)
	}
	if !found {
		return store.EffectStatus{}, store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
	}
	st.IntentHash, st.State, st.Attempts = intentHash, store.EffectState(state), int(attempts)
	if rstatus.Valid {
		st.Receipt = &store.Receipt{Status: store.ReceiptStatus(rstatus.String), Payload: blob(rpayload, hasPayload)}
		st.InboxSeq = uint64(inboxSeq.Int64)
		st.CompletedAt = fromNullNS(done)
	}
	return st, nil
}
