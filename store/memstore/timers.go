package memstore

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// timer is a timer's queue entry and dedupe record in one.
type timer struct {
	item        store.TimerItem // item.State is the record's state
	inboxSeq    uint64
	completedAt time.Time
	owner       owner // the incarnation the latest claim rides on (ClaimFor)
}

func (t *timer) view() store.TimerItem {
	it := t.item
	it.Payload = cloneBytes(it.Payload)
	return it
}

// Schedule implements protocol E's first step. Intent hashes are global.
func (s *backend) Schedule(ctx context.Context, worldID string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	ts := vocab.TimerSet{IntentHash: intentHash, DeliverAt: deliverAt, Payload: payload}
	if err := s.st.fence(op, worldID, epoch, s.now()); err != nil {
		return err
	}
	if s.st.schedule(worldID, ts) {
		s.st.notify(store.TopicTimers)
	}
	return nil
}

// schedule persists a timer unless its hash is known (mu held).
func (st *state) schedule(worldID string, ts vocab.TimerSet) bool {
	if _, ok := st.timers[ts.IntentHash]; ok {
		return false
	}
	st.timers[ts.IntentHash] = &timer{item: store.TimerItem{
		World: worldID, IntentHash: ts.IntentHash, DeliverAt: ts.DeliverAt.Round(0),
		Payload: cloneBytes(ts.Payload), State: store.TimerScheduled,
	}}
	return true
}

// CancelTimer implements store.Timers: a timer of this world that has not
// fired (claimed or not) is removed with its dedupe record, so the same
// hash may be scheduled again. An unknown or fired timer: ErrNotFound.
func (s *backend) CancelTimer(ctx context.Context, worldID string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := s.st.fence(op, worldID, epoch, s.now()); err != nil {
		return err
	}
	gone, err := s.st.cancelTimer(op, worldID, intentHash, false)
	if gone {
		s.st.notify(store.TopicTimers)
	}
	return err
}

// cancelTimer removes world's timer hash with its dedupe record when it
// has not fired (mu held); contract.CancelMissing answers for one that is
// not there to cancel (inCycle: a world cycle's CancelTimers).
func (st *state) cancelTimer(op, worldID, hash string, inCycle bool) (gone bool, err error) {
	t, ok := st.timers[hash]
	if !ok || t.item.World != worldID || t.item.State == store.TimerDelivered {
		return false, contract.CancelMissing(op, worldID, hash, inCycle)
	}
	delete(st.timers, hash)
	return true, nil
}

// sortTimers orders timers by (deliverAt, intentHash).
func sortTimers(ts []*timer) {
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i].item, ts[j].item
		if !a.DeliverAt.Equal(b.DeliverAt) {
			return a.DeliverAt.Before(b.DeliverAt)
		}
		return a.IntentHash < b.IntentHash
	})
}

// ClaimDue implements protocol E's claim.
func (s *backend) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...store.ClaimOption) ([]store.TimerItem, error) {
	const op = "claim_due"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	now := s.now()
	o, _ := store.ResolveClaimOptions(op, opts)
	by := owner{o.Node, o.Incarnation}
	if err := s.st.claimable(op, by, now); err != nil {
		return nil, err
	}
	var due []*timer
	for _, t := range s.st.timers {
		if t.item.State == store.TimerScheduled && contract.IsDue(t.item.DeliverAt, now) {
			due = append(due, t)
		}
	}
	sortTimers(due)
	var out []store.TimerItem
	for _, t := range due {
		if len(out) >= n {
			break
		}
		t.item.State = store.TimerClaimed
		t.item.Attempt++
		t.item.ClaimedBy = worker
		t.item.ClaimExpires = now.Add(ttl)
		t.owner = by
		out = append(out, t.view())
	}
	return out, nil
}

// Fire implements protocol E's acknowledgement (contract.Settle). Like
// Complete, it delivers whatever the world's status. The due time is
// checked before the claim: a timer that is not due cannot have been
// claimed, so ErrNotDue is the answer that says what is wrong.
func (s *backend) Fire(ctx context.Context, intentHash string, c vocab.Claim) (uint64, bool, error) {
	const op = "fire"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.end()
	now := s.now()
	t, dup, err := s.st.settleTimer(op, intentHash, contract.Claimant(c), now)
	if err != nil {
		return 0, false, err
	}
	if dup {
		return t.inboxSeq, true, nil
	}
	it, _ := s.st.deliverTimer(t, now)
	return it.Seq, false, nil
}

// FireHeld implements store.Timers: the settle of Fire by the holder of
// the world's lease (contract.LeaseHolder), once its fence holds.
func (s *backend) FireHeld(ctx context.Context, worldID string, epoch uint64, intentHash string) (store.HeldFiring, error) {
	const op = "fire_held"
	if err := s.begin(ctx, op); err != nil {
		return store.HeldFiring{}, err
	}
	defer s.end()
	now := s.now()
	if err := s.st.fence(op, worldID, epoch, now); err != nil {
		return store.HeldFiring{}, err
	}
	t, dup, err := s.st.settleTimer(op, intentHash, contract.LeaseHolder(worldID), now)
	if errors.Is(err, store.ErrNotDue) {
		return store.HeldFiring{DueAt: t.item.DeliverAt, Now: now}, err
	}
	if err != nil {
		return store.HeldFiring{}, err
	}
	res := store.HeldFiring{Dup: dup, DueAt: t.item.DeliverAt, Now: now}
	if dup {
		res.Item.Seq = t.inboxSeq
		return res, nil
	}
	if res.Item, res.Dup = s.st.deliverTimer(t, now); res.Dup {
		// The firing's key was in the inbox already (its timer record
		// swept, the hash scheduled again): that item answers.
		res.Item = store.InboxItem{Seq: res.Item.Seq}
	}
	return res, nil
}

// settleTimer decides a firing of the timer hash by by at now
// (contract.Settle); t is the timer when it was found.
func (st *state) settleTimer(op, hash string, by contract.By, now time.Time) (t *timer, dup bool, err error) {
	t, ok := st.timers[hash]
	var row contract.SettleRow
	if ok {
		row = contract.SettleRow{Found: true, World: t.item.World, Done: t.item.State == store.TimerDelivered, DueAt: &t.item.DeliverAt,
			Claim: contract.ClaimRow{Attempt: t.item.Attempt, ClaimedBy: t.item.ClaimedBy}}
	}
	dup, err = contract.Settle(op, "timer", hash, row, by, now)
	return t, dup, err
}

// deliverTimer enqueues t's firing into its world's inbox and marks it
// delivered (mu held), and returns the item as ReadInbox would; dup when
// the firing's dedupe key was there already (the item is then that one).
func (st *state) deliverTimer(t *timer, now time.Time) (store.InboxItem, bool) {
	w := st.worlds[t.item.World]
	seq, dup := st.enqueue(w, vocab.KindTimer, t.item.Payload, store.TimerKey(t.item.IntentHash), now)
	t.item.State = store.TimerDelivered
	t.item.ClaimExpires = time.Time{}
	t.inboxSeq, t.completedAt = seq, now
	i := sort.Search(len(w.inbox), func(i int) bool { return w.inbox[i].Seq >= seq })
	it := w.inbox[i]
	it.Payload = cloneBytes(it.Payload)
	return it, dup
}

// ReapTimers implements the timer reaper; like ReapEffects it keeps the
// latest claim.
func (s *backend) ReapTimers(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "reap_timers"); err != nil {
		return 0, err
	}
	defer s.end()
	now := s.now()
	n := 0
	for _, t := range s.st.timers {
		if t.item.State == store.TimerClaimed && contract.Expired(t.item.ClaimExpires, now) {
			t.item.State = store.TimerScheduled
			t.item.ClaimExpires = time.Time{}
			n++
		}
	}
	if n > 0 {
		s.st.notify(store.TopicTimers)
	}
	return n, nil
}

// NextDue implements store.Timers.
func (s *backend) NextDue(ctx context.Context) (time.Time, bool, error) {
	if err := s.begin(ctx, "next_due"); err != nil {
		return time.Time{}, false, err
	}
	defer s.end()
	var at time.Time
	ok := false
	for _, t := range s.st.timers {
		if t.item.State == store.TimerScheduled && (!ok || t.item.DeliverAt.Before(at)) {
			at, ok = t.item.DeliverAt, true
		}
	}
	return at, ok, nil
}
