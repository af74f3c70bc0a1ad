package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// Timers (protocol E). One row per intent hash: scheduled → claimed →
// delivered, and back to scheduled on a reap. A delivered row is the
// dedupe record: the same hash scheduled again (a replayed timer.set) is a
// no-op until SweepDedupe removes it. A cancelled timer is deleted.

// schedule persists one timer inside a fenced request (Schedule, Commit);
// scheduled is false for a hash already known.
func (t *wtx) schedule(world string, ts vocab.TimerSet) (scheduled bool, err error) {
	res, err := t.exec(`INSERT INTO timers (intent_hash, world, deliver_at, payload, state) VALUES (?, ?, ?, ?, 'scheduled')
		ON CONFLICT (intent_hash) DO NOTHING`, ts.IntentHash, world, ts.DeliverAt.UnixNano(), ts.Payload)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if n > 0 {
		t.notify(store.TopicTimers)
	}
	return n > 0, err
}

// cancelTimer deletes one of world's timers that has not fired, inside a
// fenced request (CancelTimer, Commit); found is false when there is none.
func (t *wtx) cancelTimer(world, intentHash string) (found bool, err error) {
	res, err := t.exec(`DELETE FROM timers WHERE intent_hash = ? AND world = ? AND state IN ('scheduled', 'claimed')`, intentHash, world)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if n > 0 {
		t.notify(store.TopicTimers)
	}
	return n > 0, err
}

// Schedule persists a timer, fenced by epoch.
func (s *backend) Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	_, err := s.commit(ctx, "schedule", world, epoch, store.CommitBatch{
		Timers: []vocab.TimerSet{{IntentHash: intentHash, DeliverAt: deliverAt, Payload: payload}},
	}, sideEffects)
	return err
}

// CancelTimer removes a timer of world that has not fired (claimed or not),
// fenced by epoch, with its dedupe record: the same hash may be scheduled
// again. An unknown timer, another world's, or a fired one: ErrNotFound.
func (s *backend) CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error {
	_, err := s.commit(ctx, "cancel_timer", world, epoch, store.CommitBatch{CancelTimers: []string{intentHash}}, sideEffects)
	return err
}

const timerCols = `world, intent_hash, deliver_at, payload, payload IS NOT NULL, state, attempt, claimed_by, claim_expires`

func scanTimer(sc interface{ Scan(...any) error }) (store.TimerItem, error) {
	var (
		it           store.TimerItem
		deliver, att int64
		hasPayload   bool
		state        string
		exp          sql.NullInt64
	)
	if err := sc.Scan(&it.World, &it.IntentHash, &deliver, &it.Payload, &hasPayload, &state, &att, &it.ClaimedBy, &exp); err != nil {
		return store.TimerItem{}, err
	}
	it.Payload = blob(it.Payload, hasPayload)
	it.DeliverAt, it.State, it.Attempt, it.ClaimExpires = fromNS(deliver), store.TimerState(state), int(att), fromNullNS(exp)
	return it, nil
}

// ClaimDue claims up to n timers due at the store clock, in (deliverAt,
// intentHash) order (queue.go).
func (s *backend) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...store.ClaimOption) ([]store.TimerItem, error) {
	const op = "claim_due"
	by, _ := store.ResolveClaimOptions(op, opts)
	if n == 0 {
		return nil, nil
	}
	var out []store.TimerItem
	err := s.write(ctx, op, "", func(t *wtx) error {
		out = out[:0]
		if err := t.claimable(op, by); err != nil {
			return err
		}
		return claim[string](t, timersQueue, worker, n, ttl, by, [][]any{{t.nowNS}}, func(sc interface{ Scan(...any) error }) error {
			it, err := scanTimer(sc)
			out = append(out, it)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Fire enqueues the timer-fired item and marks the timer delivered, in one
// transaction, once the timer is due (contract.Due) and c is its latest
// claim (contract.ClaimCheck): a settle of the timers queue (queue.go).
// Like Complete, it delivers whatever the world's status.
func (s *backend) Fire(ctx context.Context, intentHash string, c vocab.Claim) (uint64, bool, error) {
	const op = "fire"
	var (
		seq uint64
		dup bool
	)
	err := s.write(ctx, op, "", func(t *wtx) error {
		var err error
		seq, dup, err = t.settle(timersQueue, op, intentHash, contract.Claimant(c), vocab.Receipt{})
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// FireHeld is Fire's settle by the holder of the world's lease
// (contract.LeaseHolder), in the same request as its fence: one
// transaction of the group commit.
func (s *backend) FireHeld(ctx context.Context, world string, epoch uint64, intentHash string) (store.HeldFiring, error) {
	const op = "fire_held"
	var res store.HeldFiring
	err := s.write(ctx, op, world, func(t *wtx) error {
		res = store.HeldFiring{}
		if err := t.fence(op, world, epoch); err != nil {
			return err
		}
		st, err := t.settleItem(timersQueue, op, intentHash, contract.LeaseHolder(world), vocab.Receipt{})
		if st.row.world == world && st.row.dueAt.Valid {
			res.DueAt, res.Now = fromNS(st.row.dueAt.Int64), fromNS(t.nowNS)
		}
		if err != nil {
			return err
		}
		res.Dup, res.Item.Seq = st.dup, st.seq
		if !st.dup {
			kind, payload, key := timersQueue.delivery(intentHash, &st.row, vocab.Receipt{})
			res.Item = store.InboxItem{Seq: st.seq, World: world, Kind: kind, Payload: payload, DedupeKey: key, EnqueuedAt: fromNS(t.nowNS)}
		}
		return nil
	})
	if errors.Is(err, store.ErrNotDue) {
		return store.HeldFiring{DueAt: res.DueAt, Now: res.Now}, err
	}
	if err != nil {
		return store.HeldFiring{}, err
	}
	return res, nil
}

// ReapTimers requeues claimed timers whose claim expired (queue.go),
// keeping their latest claim, as ReapEffects does.
func (s *backend) ReapTimers(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_timers", timersQueue)
}

// NextDue returns the earliest deliverAt of an unclaimed, undelivered timer
// (timers_due's first entry).
func (s *backend) NextDue(ctx context.Context) (time.Time, bool, error) {
	const op = "next_due"
	if err := s.read(ctx, op); err != nil {
		return time.Time{}, false, err
	}
	var at sql.NullInt64
	if _, err := s.queryRow(ctx, `SELECT MIN(deliver_at) FROM timers WHERE state = 'scheduled'`, nil, &at); err != nil {
		return time.Time{}, false, dbErr(op, "", err)
	}
	if !at.Valid {
		return time.Time{}, false, nil
	}
	return fromNS(at.Int64), true, nil
}
