package memstore

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// ---- the inbox ----

// enqueue appends one item to w's inbox (mu held) unless dedupeKey is known,
// in which case it answers the existing seq and dup=true.
func (st *state) enqueue(w *world, kind string, payload []byte, dedupeKey string, now time.Time) (uint64, bool) {
	if dedupeKey != "" {
		if k, ok := w.inboxKeys[dedupeKey]; ok {
			return k.seq, true
		}
	}
	w.lastSeq++
	w.inbox = append(w.inbox, store.InboxItem{
		Seq: w.lastSeq, World: w.rec.ID, Kind: kind, Payload: cloneBytes(payload),
		DedupeKey: dedupeKey, EnqueuedAt: now,
	})
	if dedupeKey != "" {
		w.inboxKeys[dedupeKey] = &inboxKey{seq: w.lastSeq}
	}
	st.notify(store.TopicInbox(w.rec.ID))
	return w.lastSeq, false
}

// ingress returns the world a producer's input is for (contract.Ingress).
func (st *state) ingress(op, id string) (*world, error) {
	w, ok := st.worlds[id]
	var status store.WorldStatus
	if ok {
		status = w.rec.Status
	}
	return w, contract.Ingress(op, id, ok, status)
}

// Enqueue implements store.Inbox.
func (s *Store) Enqueue(ctx context.Context, worldID string, item store.InboxItem) (uint64, bool, error) {
	const op = "enqueue"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.end()
	if err := store.CheckID(op, "world", worldID); err != nil {
		return 0, false, err
	}
	if err := store.CheckIngress(op, item); err != nil {
		return 0, false, err
	}
	w, err := s.st.ingress(op, worldID)
	if err != nil {
		return 0, false, err
	}
	seq, dup := s.st.enqueue(w, item.Kind, item.Payload, item.DedupeKey, s.now())
	return seq, dup, nil
}

// ReadInbox implements store.Inbox. A limit <= 0 means no limit.
func (s *Store) ReadInbox(ctx context.Context, worldID string, afterSeq uint64, limit int) ([]store.InboxItem, error) {
	const op = "read_inbox"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	w, ok := s.st.worlds[worldID]
	if !ok {
		return nil, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	i := sort.Search(len(w.inbox), func(i int) bool { return w.inbox[i].Seq > afterSeq })
	var out []store.InboxItem
	for ; i < len(w.inbox) && (limit <= 0 || len(out) < limit); i++ {
		it := w.inbox[i]
		it.Payload = cloneBytes(it.Payload)
		out = append(out, it)
	}
	return out, nil
}

// Cursor implements store.Inbox.
func (s *Store) Cursor(ctx context.Context, worldID string) (uint64, error) {
	const op = "cursor"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.end()
	w, ok := s.st.worlds[worldID]
	if !ok {
		return 0, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	return w.cursor, nil
}

// ---- effects ----

// effect is an intent's queue entry and dedupe record in one: the queue
// holds it while pending or inflight, the record outlives it until swept.
type effect struct {
	item          store.EffectItem // item.State is the record's state
	retryReason   string
	resolveReason *string // the operator's, when Resolve gave the receipt
	receipt       *store.Receipt
	inboxSeq      uint64
	completedAt   time.Time
}

// Publish implements protocol C. Intent hashes are global: an intent once
// published is skipped until its dedupe record is swept.
func (s *Store) Publish(ctx context.Context, worldID string, epoch uint64, intents []store.Intent) (int, error) {
	const op = "publish"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.end()
	if err := checkWorldEpoch(op, worldID, epoch); err != nil {
		return 0, err
	}
	if err := store.CheckBatch(op, "intents", len(intents)); err != nil {
		return 0, err
	}
	for _, in := range intents {
		if err := store.CheckIntent(op, in); err != nil {
			return 0, err
		}
	}
	now := s.now()
	if err := s.st.fence(op, worldID, epoch, now); err != nil {
		return 0, err
	}
	return s.st.publish(worldID, intents, now), nil
}

// withdraw withdraws world's pending effects (mu held): those named by
// hashes, or every one when all. It returns how many.
func (st *state) withdraw(worldID string, hashes []string, all bool, now time.Time) int {
	n := 0
	take := func(e *effect) {
		if e != nil && e.item.World == worldID && e.item.State == store.EffectPending {
			e.item.State, e.item.ClaimExpires, e.completedAt = store.EffectWithdrawn, time.Time{}, now
			n++
		}
	}
	if all {
		for _, e := range st.effects {
			take(e)
		}
		return n
	}
	for _, h := range hashes {
		take(st.effects[h])
	}
	return n
}

// publish queues the intents not yet known (mu held) and returns how many.
func (st *state) publish(worldID string, intents []store.Intent, now time.Time) int {
	n := 0
	for _, in := range intents {
		if _, ok := st.effects[in.IntentHash]; ok {
			continue
		}
		st.effectSeq++
		in.Params = cloneBytes(in.Params)
		st.effects[in.IntentHash] = &effect{item: store.EffectItem{
			Intent: in, World: worldID, Seq: st.effectSeq, EnqueuedAt: now, State: store.EffectPending,
		}}
		n++
	}
	if n > 0 {
		st.notify(store.TopicEffects)
	}
	return n
}

// queued returns the pending and inflight effects in queue order (mu held).
func (st *state) queued() []*effect {
	var q []*effect
	for _, e := range st.effects {
		if e.item.State == store.EffectPending || e.item.State == store.EffectInflight {
			q = append(q, e)
		}
	}
	sort.Slice(q, func(i, j int) bool { return q[i].item.Seq < q[j].item.Seq })
	return q
}

func (e *effect) view() store.EffectItem {
	it := e.item
	it.Params = cloneBytes(it.Params)
	return it
}

// Claim implements protocol D's first step, by kind.
func (s *Store) Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration) ([]store.EffectItem, error) {
	const op = "claim"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	for _, err := range []error{
		store.CheckID(op, "worker", worker), store.CheckKinds(op, kinds), store.CheckBatch(op, "n", n), store.CheckTTL(op, "claimTTL", claimTTL),
	} {
		if err != nil {
			return nil, err
		}
	}
	now := s.now()
	var out []store.EffectItem
	for _, e := range s.st.queued() {
		if len(out) >= n {
			break
		}
		if e.item.State != store.EffectPending || !slices.Contains(kinds, e.item.Kind) {
			continue
		}
		if w := s.st.worlds[e.item.World]; w != nil && w.rec.Status == store.WorldArchived {
			// Archiving withdrew it; this guard only keeps the promise
			// whatever path a pending item of an ended world took.
			continue
		}
		e.item.State = store.EffectInflight
		e.item.Attempt++
		e.item.ClaimedBy = worker
		e.item.ClaimExpires = now.Add(claimTTL)
		out = append(out, e.view())
	}
	return out, nil
}

// Complete implements protocol D's acknowledgement: a CompleteMany of one.
func (s *Store) Complete(ctx context.Context, intentHash string, c store.Claim, r store.Receipt) (uint64, bool, error) {
	res, err := s.completeMany(ctx, "complete", []store.Completion{{IntentHash: intentHash, Claim: c, Receipt: r}})
	if err != nil {
		return 0, false, err
	}
	return res[0].InboxSeq, res[0].Dup, res[0].Err
}

// CompleteMany implements store.Effects: one "transaction" under the mutex,
// each item decided as Complete decides it.
func (s *Store) CompleteMany(ctx context.Context, cs []store.Completion) ([]store.CompleteResult, error) {
	return s.completeMany(ctx, "complete_many", cs)
}

// completeMany is the one completion path; op names the call (the hook's
// fault point), while each item's errors are Complete's.
func (s *Store) completeMany(ctx context.Context, op string, cs []store.Completion) ([]store.CompleteResult, error) {
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := store.CheckBatch(op, "completions", len(cs)); err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]store.CompleteResult, len(cs))
	for i, c := range cs {
		out[i].InboxSeq, out[i].Dup, out[i].Err = s.st.complete(c, now)
	}
	return out, nil
}

// complete checks and applies one completion (mu held).
func (st *state) complete(c store.Completion, now time.Time) (uint64, bool, error) {
	const op = "complete"
	if err := store.CheckCompletion(op, c); err != nil {
		return 0, false, err
	}
	return st.settleEffect(op, c.IntentHash, contract.Claimant(c.Claim), c.Receipt, now)
}

// Resolve implements store.Effects: the completion path with an operator
// in the claimant's place (contract.Operator), so it completes exactly as
// Complete does, whatever the claim.
func (s *Store) Resolve(ctx context.Context, intentHash string, r store.Receipt, reason string) (uint64, bool, error) {
	const op = "resolve"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.end()
	if err := store.CheckResolve(op, intentHash, r, reason); err != nil {
		return 0, false, err
	}
	return s.st.settleEffect(op, intentHash, contract.Operator(reason), r, s.now())
}

// settleEffect is the one completion of an effect (mu held): contract.Settle
// decides for by, and the receipt enters the inbox whatever the world's
// status, because it is the durable answer to the world's own request.
func (st *state) settleEffect(op, hash string, by contract.By, r store.Receipt, now time.Time) (uint64, bool, error) {
	e, ok := st.effects[hash]
	var row contract.SettleRow
	if ok {
		row = contract.SettleRow{Found: true, World: e.item.World, Done: e.item.State == store.EffectDone,
			Withdrawn: e.item.State == store.EffectWithdrawn,
			Claim:     contract.ClaimRow{Attempt: e.item.Attempt, ClaimedBy: e.item.ClaimedBy}}
	}
	if dup, err := contract.Settle(op, "intent", hash, row, by, now); err != nil {
		return 0, false, err
	} else if dup {
		return e.inboxSeq, true, nil
	}
	w := st.worlds[e.item.World]
	seq, _ := st.enqueue(w, store.KindReceipt, r.Payload, store.ReceiptKey(hash, e.item.Retries), now)
	e.item.State = store.EffectDone
	e.item.ClaimExpires = time.Time{}
	e.receipt = &store.Receipt{Status: r.Status, Payload: cloneBytes(r.Payload)}
	e.resolveReason = by.OperatorReason()
	e.inboxSeq, e.completedAt = seq, now
	return seq, false, nil
}

// ReapEffects implements the effect reaper. A reap keeps the latest claim
// (ClaimedBy, Attempt): that worker may still complete until a new claim.
func (s *Store) ReapEffects(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "reap_effects"); err != nil {
		return 0, err
	}
	defer s.end()
	now := s.now()
	n := 0
	for _, e := range s.st.queued() {
		if e.item.State == store.EffectInflight && contract.Expired(e.item.ClaimExpires, now) {
			e.item.ClaimExpires = time.Time{}
			if w := s.st.worlds[e.item.World]; w != nil && w.rec.Status == store.WorldArchived {
				// An ended world asks for nothing more: its expired
				// claim is not handed to anyone else.
				e.item.State, e.completedAt = store.EffectWithdrawn, now
			} else {
				e.item.State = store.EffectPending
			}
			n++
		}
	}
	if n > 0 {
		s.st.notify(store.TopicEffects)
	}
	return n, nil
}

// ReleaseEffect implements store.Effects.
func (s *Store) ReleaseEffect(ctx context.Context, intentHash string, c store.Claim) error {
	const op = "release_effect"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return err
	}
	if err := store.CheckClaim(op, c); err != nil {
		return err
	}
	e, found := s.st.effects[intentHash]
	var state store.EffectState
	var row contract.ClaimRow
	if found {
		state, row = e.item.State, contract.ClaimRow{Attempt: e.item.Attempt, ClaimedBy: e.item.ClaimedBy}
	}
	noop, err := contract.ReleaseEffect(op, intentHash, found, state, row, c)
	if err != nil || noop {
		return err
	}
	var status store.WorldStatus
	if w, ok := s.st.worlds[e.item.World]; ok {
		status = w.rec.Status
	}
	e.item.State = contract.ReleaseTo(status)
	e.item.ClaimExpires = time.Time{}
	if e.item.State == store.EffectWithdrawn {
		e.completedAt = s.now()
		return nil
	}
	s.st.notify(store.TopicEffects)
	return nil
}

// RetryEffect implements store.Effects. The effect keeps its queue seq and
// its attempt count; its latest claim is cleared, so no completion of the
// attempt that already ended can pass as the retry's.
func (s *Store) RetryEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	const op = "retry_effect"
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	defer s.end()
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return store.EffectStatus{}, err
	}
	if err := store.CheckReason(op, reason); err != nil {
		return store.EffectStatus{}, err
	}
	e, ok := s.st.effects[intentHash]
	if !ok {
		return store.EffectStatus{}, store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
	}
	var rs store.ReceiptStatus
	if e.receipt != nil {
		rs = e.receipt.Status
	}
	if err := contract.Retryable(op, intentHash, e.item.State, rs); err != nil {
		return store.EffectStatus{}, err
	}
	if w := s.st.worlds[e.item.World]; w != nil && w.rec.Status == store.WorldArchived {
		return store.EffectStatus{}, store.Errorf(op, store.ErrWorldArchived, e.item.World, "intent %s", intentHash)
	}
	e.item.State = store.EffectPending
	e.item.Retries++
	e.item.ClaimedBy, e.item.ClaimExpires = "", time.Time{}
	e.retryReason = reason
	e.receipt, e.resolveReason, e.inboxSeq, e.completedAt = nil, nil, 0, time.Time{}
	s.st.notify(store.TopicEffects)
	return e.status(), nil
}

func (e *effect) status() store.EffectStatus {
	st := store.EffectStatus{
		IntentHash: e.item.IntentHash, World: e.item.World, Kind: e.item.Kind, State: e.item.State,
		Attempts: e.item.Attempt, Retries: e.item.Retries, RetryReason: e.retryReason,
		InboxSeq: e.inboxSeq, CompletedAt: e.completedAt,
	}
	if e.receipt != nil {
		st.Receipt = &store.Receipt{Status: e.receipt.Status, Payload: cloneBytes(e.receipt.Payload)}
	}
	if e.resolveReason != nil {
		st.Resolved, st.ResolveReason = true, *e.resolveReason
	}
	return st
}

// EffectStatus implements store.Effects.
func (s *Store) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
	const op = "effect_status"
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	defer s.end()
	e, ok := s.st.effects[intentHash]
	if !ok {
		return store.EffectStatus{}, store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
	}
	return e.status(), nil
}

// ---- timers ----

// timer is a timer's queue entry and dedupe record in one.
type timer struct {
	item        store.TimerItem // item.State is the record's state
	inboxSeq    uint64
	completedAt time.Time
}

func (t *timer) view() store.TimerItem {
	it := t.item
	it.Payload = cloneBytes(it.Payload)
	return it
}

// Schedule implements protocol E's first step. Intent hashes are global.
func (s *Store) Schedule(ctx context.Context, worldID string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := checkWorldEpoch(op, worldID, epoch); err != nil {
		return err
	}
	ts := store.TimerSet{IntentHash: intentHash, DeliverAt: deliverAt, Payload: payload}
	if err := store.CheckTimerSet(op, ts); err != nil {
		return err
	}
	if err := s.st.fence(op, worldID, epoch, s.now()); err != nil {
		return err
	}
	if s.st.schedule(worldID, ts) {
		s.st.notify(store.TopicTimers)
	}
	return nil
}

// schedule persists a timer unless its hash is known (mu held).
func (st *state) schedule(worldID string, ts store.TimerSet) bool {
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
func (s *Store) CancelTimer(ctx context.Context, worldID string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := checkWorldEpoch(op, worldID, epoch); err != nil {
		return err
	}
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return err
	}
	if err := s.st.fence(op, worldID, epoch, s.now()); err != nil {
		return err
	}
	t, ok := s.st.timers[intentHash]
	if !ok || t.item.World != worldID || t.item.State == store.TimerDelivered {
		return store.Errorf(op, store.ErrNotFound, worldID, "timer %s", intentHash)
	}
	delete(s.st.timers, intentHash)
	s.st.notify(store.TopicTimers)
	return nil
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
func (s *Store) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration) ([]store.TimerItem, error) {
	const op = "claim_due"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	for _, err := range []error{store.CheckID(op, "worker", worker), store.CheckBatch(op, "n", n), store.CheckTTL(op, "ttl", ttl)} {
		if err != nil {
			return nil, err
		}
	}
	now := s.now()
	var due []*timer
	for _, t := range s.st.timers {
		if t.item.State == store.TimerScheduled && !t.item.DeliverAt.After(now) {
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
		out = append(out, t.view())
	}
	return out, nil
}

// Fire implements protocol E's acknowledgement (contract.Settle). Like
// Complete, it delivers whatever the world's status. The due time is
// checked before the claim: a timer that is not due cannot have been
// claimed, so ErrNotDue is the answer that says what is wrong.
func (s *Store) Fire(ctx context.Context, intentHash string, c store.Claim) (uint64, bool, error) {
	const op = "fire"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.end()
	if err := store.CheckID(op, "intentHash", intentHash); err != nil {
		return 0, false, err
	}
	if err := store.CheckClaim(op, c); err != nil {
		return 0, false, err
	}
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
func (s *Store) FireHeld(ctx context.Context, worldID string, epoch uint64, intentHash string) (store.HeldFiring, error) {
	const op = "fire_held"
	if err := s.begin(ctx, op); err != nil {
		return store.HeldFiring{}, err
	}
	defer s.end()
	if err := store.CheckFireHeld(op, worldID, epoch, intentHash); err != nil {
		return store.HeldFiring{}, err
	}
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
	seq, dup := st.enqueue(w, store.KindTimer, t.item.Payload, store.TimerKey(t.item.IntentHash), now)
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
func (s *Store) ReapTimers(ctx context.Context) (int, error) {
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
func (s *Store) NextDue(ctx context.Context) (time.Time, bool, error) {
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

// ---- fabric ----

// Send implements protocol F. The destination's fabric dedupe records are
// separate from its inbox dedupe keys; item's Kind, Seq, World, EnqueuedAt
// and DedupeKey are ignored (the item is of kind "fabric" and carries no
// inbox dedupe key: messageID is its dedupe).
func (s *Store) Send(ctx context.Context, dest, messageID string, item store.InboxItem) (store.FabricResult, error) {
	const op = "send"
	if err := s.begin(ctx, op); err != nil {
		return store.FabricResult{}, err
	}
	defer s.end()
	for _, err := range []error{
		store.CheckID(op, "world", dest), store.CheckID(op, "messageId", messageID), store.CheckPayload(op, "payload", item.Payload),
	} {
		if err != nil {
			return store.FabricResult{}, err
		}
	}
	// The dedupe record first: a message delivered already answers as such
	// whatever its destination became since (archived by the very
	// message), so a retried send whose answer was lost learns it was
	// delivered instead of being refused.
	if w, ok := s.st.worlds[dest]; ok {
		if r, ok := w.fabric[messageID]; ok {
			return store.FabricResult{Status: store.FabricAlreadyEnqueued, Seq: r.seq}, nil
		}
	}
	w, err := s.st.ingress(op, dest)
	if err != nil {
		return store.FabricResult{}, err
	}
	now := s.now()
	seq, _ := s.st.enqueue(w, store.KindFabric, item.Payload, "", now)
	w.fabric[messageID] = &dedupeRecord{seq: seq, completedAt: now}
	return store.FabricResult{Status: store.FabricOK, Seq: seq}, nil
}

// ---- dedupe retention ----

// SweepDedupe implements store.Dedupe. Inbox items themselves stay.
func (s *Store) SweepDedupe(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "sweep_dedupe"); err != nil {
		return 0, err
	}
	defer s.end()
	now := s.now()
	gone := func(completedAt time.Time) bool { return !completedAt.Add(s.retention).After(now) }
	n := 0
	for _, w := range s.st.worlds {
		for key, k := range w.inboxKeys {
			if k.drained && gone(k.drainedAt) {
				delete(w.inboxKeys, key)
				n++
			}
		}
		for id, r := range w.fabric {
			if gone(r.completedAt) {
				delete(w.fabric, id)
				n++
			}
		}
	}
	// An effect's or timer's record goes only once its world has consumed
	// the delivery: a world offline past the retention still finds it, and
	// re-publishing the intent queues nothing.
	for h, e := range s.st.effects {
		if e.item.State == store.EffectWithdrawn && gone(e.completedAt) {
			// No receipt was delivered, so there is nothing for the
			// world to consume first.
			delete(s.st.effects, h)
			n++
			continue
		}
		if e.item.State == store.EffectDone &&
			contract.Sweepable(e.completedAt, e.inboxSeq, s.st.worlds[e.item.World].cursor, s.retention, now) {
			delete(s.st.effects, h)
			n++
		}
	}
	for h, t := range s.st.timers {
		if t.item.State == store.TimerDelivered &&
			contract.Sweepable(t.completedAt, t.inboxSeq, s.st.worlds[t.item.World].cursor, s.retention, now) {
			delete(s.st.timers, h)
			n++
		}
	}
	return n, nil
}

// ---- read-only views ----

// ListEffects implements store.Views.
func (s *Store) ListEffects(ctx context.Context, worldID string, afterSeq uint64, limit int) ([]store.EffectItem, error) {
	const op = "list_effects"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := s.st.checkView(op, worldID, limit); err != nil {
		return nil, err
	}
	var out []store.EffectItem
	for _, e := range s.st.queued() {
		if len(out) >= limit {
			break
		}
		if e.item.World == worldID && e.item.Seq > afterSeq {
			out = append(out, e.view())
		}
	}
	return out, nil
}

// ListTimers implements store.Views.
func (s *Store) ListTimers(ctx context.Context, worldID string, limit int) ([]store.TimerItem, error) {
	const op = "list_timers"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := s.st.checkView(op, worldID, limit); err != nil {
		return nil, err
	}
	var ts []*timer
	for _, t := range s.st.timers {
		if t.item.World == worldID && t.item.State != store.TimerDelivered {
			ts = append(ts, t)
		}
	}
	sortTimers(ts)
	out := []store.TimerItem{}
	for _, t := range ts {
		if len(out) >= limit {
			break
		}
		out = append(out, t.view())
	}
	return out, nil
}

func (st *state) checkView(op, worldID string, limit int) error {
	if err := store.CheckID(op, "world", worldID); err != nil {
		return err
	}
	if err := store.CheckBatch(op, "limit", limit); err != nil {
		return err
	}
	if _, ok := st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	return nil
}

// QueueDepths implements store.Views.
func (s *Store) QueueDepths(ctx context.Context) (store.QueueDepths, error) {
	if err := s.begin(ctx, "queue_depths"); err != nil {
		return store.QueueDepths{}, err
	}
	defer s.end()
	var d store.QueueDepths
	for _, e := range s.st.effects {
		switch e.item.State {
		case store.EffectPending:
			d.EffectsPending++
		case store.EffectInflight:
			d.EffectsInflight++
		}
	}
	for _, t := range s.st.timers {
		switch t.item.State {
		case store.TimerScheduled:
			d.TimersScheduled++
		case store.TimerClaimed:
			d.TimersClaimed++
		}
	}
	for _, w := range s.st.worlds {
		d.InboxBacklog += int64(w.lastSeq - w.cursor) // seqs are gapless here
	}
	return d, nil
}
