package sqlite

import (
	"context"
	"database/sql"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Timers (protocol E). One row per intent hash: due → claimed → delivered.
// A delivered row is the dedupe record: the same hash scheduled again (a
// replayed timer.set) is a no-op until SweepDedupe removes it after the
// retention. A cancelled timer is deleted.

// Schedule persists a timer, fenced by epoch.
func (s *Store) Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	if intentHash == "" {
		return store.Errorf(op, store.ErrInvalid, world, "empty intent hash")
	}
	return s.write(ctx, op, world, func(t *wtx) error {
		if err := t.fence(op, world, epoch); err != nil {
			return err
		}
		res, err := t.exec(`INSERT INTO timers (intent_hash, world, deliver_at, payload, state) VALUES (?, ?, ?, ?, 'due')
			ON CONFLICT (intent_hash) DO NOTHING`, intentHash, world, ns(deliverAt), payload)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n > 0 {
			t.notify(store.TopicTimers)
		}
		return nil
	})
}

// CancelTimer removes a timer of world that has not fired (claimed or not),
// fenced by epoch, with its dedupe record: the same hash may be scheduled
// again. An unknown timer, another world's, or a fired one: ErrNotFound.
func (s *Store) CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	return s.write(ctx, op, world, func(t *wtx) error {
		if err := t.fence(op, world, epoch); err != nil {
			return err
		}
		res, err := t.exec(`DELETE FROM timers WHERE intent_hash = ? AND world = ? AND state IN ('due', 'claimed')`, intentHash, world)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return store.Errorf(op, store.ErrNotFound, world, "timer %s", intentHash)
		}
		t.notify(store.TopicTimers)
		return nil
	})
}

// ClaimDue claims up to n timers due at the store clock, in (deliverAt,
// intentHash) order.
func (s *Store) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration) ([]store.TimerItem, error) {
	const op = "claim_due"
	if err := checkWorker(op, "", worker, "claim ttl", ttl); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	var out []store.TimerItem
	err := s.write(ctx, op, "", func(t *wtx) error {
		out = out[:0]
		rows, err := t.query(`UPDATE timers SET state = 'claimed', attempt = attempt + 1, claimed_by = ?, claim_expires = ?
			WHERE intent_hash IN (SELECT intent_hash FROM timers WHERE state = 'due' AND deliver_at <= ? ORDER BY deliver_at, intent_hash LIMIT ?)
			RETURNING world, intent_hash, deliver_at, payload, payload IS NOT NULL, attempt, claim_expires`,
			worker, expiry(t.nowNS, ttl), t.nowNS, n)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				it                store.TimerItem
				deliver, att, exp int64
				hasPayload        bool
			)
			if err := rows.Scan(&it.World, &it.IntentHash, &deliver, &it.Payload, &hasPayload, &att, &exp); err != nil {
				return err
			}
			it.Payload = blob(it.Payload, hasPayload)
			it.DeliverAt, it.Attempt, it.ClaimedBy, it.ClaimExpires = fromNS(deliver), int(att), worker, fromNS(exp)
			out = append(out, it)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		sort.Slice(out, func(i, j int) bool {
			if !out[i].DeliverAt.Equal(out[j].DeliverAt) {
				return out[i].DeliverAt.Before(out[j].DeliverAt)
			}
			return out[i].IntentHash < out[j].IntentHash
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Fire enqueues the timer-fired item and marks the timer delivered, in one
// transaction. Like Complete, it delivers whatever the world's status, and
// needs no claim: a claim only keeps other timer workers away.
func (s *Store) Fire(ctx context.Context, intentHash string) (uint64, bool, error) {
	const op = "fire"
	var (
		seq uint64
		dup bool
	)
	err := s.write(ctx, op, "", func(t *wtx) error {
		var (
			world, state string
			payload      []byte
			hasPayload   bool
			inboxSeq     sql.NullInt64
		)
		found, err := t.queryRow(`SELECT world, state, payload, payload IS NOT NULL, inbox_seq FROM timers WHERE intent_hash = ?`,
			[]any{intentHash}, &world, &state, &payload, &hasPayload, &inboxSeq)
		if err != nil {
			return err
		}
		if !found {
			return store.Errorf(op, store.ErrNotFound, "", "timer %s", intentHash)
		}
		if state == "delivered" {
			seq, dup = uint64(inboxSeq.Int64), true
			return nil
		}
		seq, dup, err = t.enqueue(op, world, "timer", blob(payload, hasPayload), "timer:"+intentHash, true)
		if err != nil {
			return err
		}
		_, err = t.exec(`UPDATE timers SET state = 'delivered', claimed_by = '', claim_expires = NULL, payload = NULL,
			inbox_seq = ?, completed_at = ? WHERE intent_hash = ?`, int64(seq), t.nowNS, intentHash)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// ReapTimers requeues claimed timers whose claim expired (at or before the
// store clock).
func (s *Store) ReapTimers(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_timers", `UPDATE timers SET state = 'due', claimed_by = '', claim_expires = NULL
			WHERE state = 'claimed' AND claim_expires <= ?`, store.TopicTimers)
}
