package postgres

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// Schedule implements protocol E's first step (see schedule_timer).
func (s *backend) Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	if err := s.begin(op); err != nil {
		return err
	}
	err := s.retry(ctx, op, world, func() error {
		_, err := s.db.Exec(ctx, `SELECT schedule_timer($1, $2, $3, $4, $5, $6)`,
			world, int64(epoch), intentHash, toNS(deliverAt), payload, s.off())
		return err
	})
	if err == nil {
		s.hint(store.TopicTimers)
	}
	return err
}

// CancelTimer implements store.Timers (see cancel_timer).
func (s *backend) CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	if err := s.begin(op); err != nil {
		return err
	}
	err := s.retry(ctx, op, world, func() error {
		_, err := s.db.Exec(ctx, `SELECT cancel_timer($1, $2, $3, $4)`, world, int64(epoch), intentHash, s.off())
		return err
	})
	if err == nil {
		s.hint(store.TopicTimers)
	}
	return err
}

// timerStates maps the timers table's states to the contract's.
var timerStates = map[string]store.TimerState{
	"due": store.TimerScheduled, "inflight": store.TimerClaimed, "delivered": store.TimerDelivered,
}

func scanTimer(row pgx.CollectableRow) (store.TimerItem, error) {
	var it store.TimerItem
	var at int64
	var exp *int64
	var attempts int32
	var state string
	err := row.Scan(&it.World, &it.IntentHash, &at, &it.Payload, &attempts, &it.ClaimedBy, &exp, &state)
	it.DeliverAt, it.Attempt, it.State = fromNS(at), int(attempts), timerStates[state]
	if exp != nil {
		it.ClaimExpires = fromNS(*exp)
	}
	return it, err
}

// ClaimDue implements protocol E's claim (queue.go).
func (s *backend) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...store.ClaimOption) ([]store.TimerItem, error) {
	const op = "claim_due"
	by, _ := store.ResolveClaimOptions(op, opts)
	if err := s.begin(op); err != nil {
		return nil, err
	}
	if n == 0 {
		return []store.TimerItem{}, nil
	}
	out, err := claim(s, ctx, op, timersQueue, worker, n, ttl, by, scanTimer)
	if err != nil {
		return nil, err
	}
	sortTimers(out)
	return out, nil
}

func sortTimers(ts []store.TimerItem) {
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if !a.DeliverAt.Equal(b.DeliverAt) {
			return a.DeliverAt.Before(b.DeliverAt)
		}
		return a.IntentHash < b.IntentHash
	})
}

// ReapTimers implements the timer reaper (queue.go).
func (s *backend) ReapTimers(ctx context.Context) (int, error) {
	return s.reap(ctx, "reap_timers", timersQueue)
}

// NextDue implements store.Timers: the head of timers_due.
func (s *backend) NextDue(ctx context.Context) (time.Time, bool, error) {
	const op = "next_due"
	if err := s.begin(op); err != nil {
		return time.Time{}, false, err
	}
	var at *int64
	err := s.retry(ctx, op, "", func() error {
		return s.db.QueryRow(ctx, `SELECT min(deliver_at_ns) FROM timers WHERE state = 'due'`).Scan(&at)
	})
	if err != nil || at == nil {
		return time.Time{}, false, err
	}
	return fromNS(*at), true, nil
}

// Fire implements protocol E's acknowledgement: like Complete, it delivers
// (kind timer, dedupe key store.TimerKey(intentHash), the timer's payload)
// whatever the world's status, once the timer is due (contract.Due) and
// for its latest claim.
func (s *backend) Fire(ctx context.Context, intentHash string, c vocab.Claim) (uint64, bool, error) {
	const op = "fire"
	if err := s.begin(op); err != nil {
		return 0, false, err
	}
	return s.deliver(&deliveryReq{ctx: ctx, op: op, kind: dFire, hash: intentHash, by: contract.Claimant(c)})
}

// FireHeld implements store.Timers: Fire's delivery by the holder of the
// world's lease (contract.LeaseHolder), fenced in the same transaction, in
// one statement and one round trip (the fire_held function, migration 10,
// pipelined between BEGIN and COMMIT so that its hint goes out after the
// commit: a burst of firings from many lanes does not commit one WAL
// flush at a time, see 0014_hints_after_commit.sql). Unlike a Fire it does
// not go through the delivery committer, whose batches take two round
// trips: the holder fires at the due time, and the round trip it saves is
// lateness its world's handler does not see.
func (s *backend) FireHeld(ctx context.Context, world string, epoch uint64, intentHash string) (store.HeldFiring, error) {
	const op = "fire_held"
	if err := s.begin(op); err != nil {
		return store.HeldFiring{}, err
	}
	var (
		f   firedHeld
		res store.HeldFiring
	)
	err := s.oneTrip(ctx, op, world, func(b *batch) {
		f = firedHeld{}
		b.queue(func(br pgx.BatchResults) error { return f.scan(br.QueryRow()) },
			fireHeldSQL, world, int64(epoch), intentHash, s.off())
	})
	if err == nil {
		res, err = f.decide(op, world, epoch, intentHash)
	}
	if err != nil {
		return res, err
	}
	if f.written && !f.dup {
		s.hint(store.TopicInbox(world))
	}
	return res, nil
}

// fireHeldSQL calls the fire_held function: $1 world, $2 epoch, $3 the
// timer's intent hash, $4 the clock's offset.
const fireHeldSQL = `SELECT * FROM fire_held($1, $2, $3, $4)`

// firedHeld is what the fire_held function answers: the rows it read under
// lock, and whether it wrote (dup: the firing's key was live already).
type firedHeld struct {
	found, leased, timerFound, written, dup bool
	holder, timerWorld, state, claimedBy    string
	epoch, exp, deliverAt, seq, now         int64
	attempts                                int32
	payload                                 []byte
}

func (f *firedHeld) scan(row pgx.Row) error {
	return row.Scan(&f.found, &f.leased, &f.holder, &f.epoch, &f.exp, &f.timerFound, &f.timerWorld, &f.state,
		&f.deliverAt, &f.attempts, &f.claimedBy, &f.seq, &f.payload, &f.now, &f.written, &f.dup)
}

// decide decides again with contract.Fence and contract.Settle on the rows
// the function read, and refuses an answer on which the two disagree.
func (f *firedHeld) decide(op, world string, epoch uint64, hash string) (store.HeldFiring, error) {
	now := fromNS(f.now)
	lease := contract.LeaseRow{Found: f.leased, Holder: f.holder, Epoch: uint64(f.epoch), ExpiresAt: fromNS(f.exp)}
	err := contract.Fence(op, world, epoch, f.found, lease, now)
	var res store.HeldFiring
	dup := false
	if err == nil {
		row := contract.SettleRow{Found: f.timerFound, World: f.timerWorld, Done: f.state == timersQueue.done,
			Claim: contract.ClaimRow{Attempt: int(f.attempts), ClaimedBy: f.claimedBy}}
		if f.timerFound {
			at := fromNS(f.deliverAt)
			row.DueAt = &at
			if f.timerWorld == world {
				res.DueAt, res.Now = at, now
			}
		}
		dup, err = contract.Settle(op, timersQueue.noun, hash, row, contract.LeaseHolder(world), now)
	}
	if (err == nil && !dup) != f.written {
		return store.HeldFiring{}, errDisagree(op, world)
	}
	switch {
	case err != nil:
		if errors.Is(err, store.ErrNotDue) {
			return store.HeldFiring{DueAt: res.DueAt, Now: res.Now}, err
		}
		return store.HeldFiring{}, err
	case dup || f.dup:
		// Delivered already; or (f.dup) the firing's key was live in the
		// inbox already, its timer record swept and the hash scheduled
		// again: that item answers.
		res.Dup, res.Item.Seq = true, uint64(f.seq)
	default:
		res.Item = store.InboxItem{Seq: uint64(f.seq), World: world, Kind: vocab.KindTimer, Payload: f.payload,
			DedupeKey: store.TimerKey(hash), EnqueuedAt: now}
	}
	return res, nil
}
