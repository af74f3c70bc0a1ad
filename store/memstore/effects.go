package memstore

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// ---- effects ----

// effect is an intent's queue entry and dedupe record in one: the queue
// holds it while pending or inflight, the record outlives it until swept.
type effect struct {
	item          vocab.EffectItem // item.State is the record's state
	retryReason   string
	lastError     string
	resolveReason *string // the operator's, when Resolve gave the receipt
	receipt       *vocab.Receipt
	inboxSeq      uint64
	completedAt   time.Time
	owner         owner // the incarnation the latest claim rides on (ClaimFor)
	releaseReason string
}

// Publish implements protocol C. Intent hashes are global: an intent once
// published is skipped until its dedupe record is swept.
func (s *backend) Publish(ctx context.Context, worldID string, epoch uint64, intents []vocab.Intent) (int, error) {
	const op = "publish"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.end()
	now := s.now()
	if err := s.st.fence(op, worldID, epoch, now); err != nil {
		return 0, err
	}
	return s.st.publish(worldID, intents, now), nil
}

// withdraw withdraws world's pending and held effects (mu held): those named by
// hashes, or every one when all. It returns how many.
func (st *state) withdraw(worldID string, hashes []string, all bool, now time.Time) int {
	n := 0
	take := func(e *effect) {
		if e != nil && e.item.World == worldID && contract.Withdrawable(e.item.State) {
			e.item.State, e.item.ClaimExpires, e.completedAt = vocab.EffectWithdrawn, time.Time{}, now
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
func (st *state) publish(worldID string, intents []vocab.Intent, now time.Time) int {
	n := 0
	for _, in := range intents {
		if _, ok := st.effects[in.IntentHash]; ok {
			continue
		}
		st.effectSeq++
		in.Params, in.Retry = cloneBytes(in.Params), cloneBytes(in.Retry)
		st.effects[in.IntentHash] = &effect{item: vocab.EffectItem{
			Intent: in, World: worldID, Seq: st.effectSeq, EnqueuedAt: now, State: vocab.EffectPending,
		}}
		n++
	}
	if n > 0 {
		st.notify(store.TopicEffects)
	}
	return n
}

// queued returns the open (pending, inflight and held) effects in queue
// order (mu held).
func (st *state) queued() []*effect {
	var q []*effect
	for _, e := range st.effects {
		if s := e.item.State; s == vocab.EffectPending || s == vocab.EffectInflight || s == vocab.EffectHeld {
			q = append(q, e)
		}
	}
	sort.Slice(q, func(i, j int) bool { return q[i].item.Seq < q[j].item.Seq })
	return q
}

func (e *effect) view() vocab.EffectItem {
	it := e.item
	it.Params, it.Retry = cloneBytes(it.Params), cloneBytes(it.Retry)
	return it
}

// Claim implements protocol D's first step, by kind.
func (s *backend) Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...store.ClaimOption) ([]vocab.EffectItem, error) {
	const op = "claim"
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
	var out []vocab.EffectItem
	for _, e := range s.st.queued() {
		if len(out) >= n {
			break
		}
		if e.item.State != vocab.EffectPending || !slices.Contains(kinds, e.item.Kind) || e.item.RetryAt.After(now) {
			continue
		}
		if !contract.Serves(s.st.worldStatus(e.item.World)) {
			// Archiving withdrew it; this guard only keeps the promise
			// whatever path a pending item of an ended world took.
			continue
		}
		e.item.State = vocab.EffectInflight
		e.item.Attempt++
		e.item.ClaimedBy = worker
		e.item.ClaimExpires = now.Add(claimTTL)
		e.owner = by
		out = append(out, e.view())
	}
	return out, nil
}

// CompleteMany implements protocol D's acknowledgement: one "transaction"
// under the mutex, each completion decided in order as Complete decides it
// (its errors are Complete's).
func (s *backend) CompleteMany(ctx context.Context, cs []vocab.Completion) ([]store.CompleteResult, error) {
	if err := s.begin(ctx, "complete_many"); err != nil {
		return nil, err
	}
	defer s.end()
	now := s.now()
	out := make([]store.CompleteResult, len(cs))
	for i, c := range cs {
		out[i].InboxSeq, out[i].Dup, out[i].Err = s.st.settleEffect("complete", c.IntentHash, contract.Claimant(c.Claim), c.Receipt, now)
	}
	return out, nil
}

// Resolve implements store.Effects: the completion path with an operator
// in the claimant's place (contract.Operator), so it completes exactly as
// Complete does, whatever the claim.
func (s *backend) Resolve(ctx context.Context, intentHash string, r vocab.Receipt, reason string) (uint64, bool, error) {
	const op = "resolve"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.end()
	return s.st.settleEffect(op, intentHash, contract.Operator(reason), r, s.now())
}

// settleEffect is the one completion of an effect (mu held): contract.Settle
// decides for by, and the receipt enters the inbox whatever the world's
// status, because it is the durable answer to the world's own request.
func (st *state) settleEffect(op, hash string, by contract.By, r vocab.Receipt, now time.Time) (uint64, bool, error) {
	e, ok := st.effects[hash]
	var row contract.SettleRow
	if ok {
		row = contract.SettleRow{Found: true, World: e.item.World, Done: e.item.State == vocab.EffectDone,
			Withdrawn: e.item.State == vocab.EffectWithdrawn, Held: e.item.State == vocab.EffectHeld,
			Claim: contract.ClaimRow{Attempt: e.item.Attempt, ClaimedBy: e.item.ClaimedBy}}
	}
	if dup, err := contract.Settle(op, "intent", hash, row, by, now); err != nil {
		return 0, false, err
	} else if dup {
		return e.inboxSeq, true, nil
	}
	w := st.worlds[e.item.World]
	seq, _ := st.enqueue(w, vocab.KindReceipt, r.Payload, store.ReceiptKey(hash, e.item.Retries), now)
	e.item.State = vocab.EffectDone
	e.item.ClaimExpires = time.Time{}
	e.receipt = &vocab.Receipt{Status: r.Status, Payload: cloneBytes(r.Payload)}
	e.resolveReason = by.OperatorReason()
	e.inboxSeq, e.completedAt = seq, now
	return seq, false, nil
}

// ReapEffects implements the effect reaper. A reap keeps the latest claim
// (ClaimedBy, Attempt): that worker may still complete until a new claim.
func (s *backend) ReapEffects(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "reap_effects"); err != nil {
		return 0, err
	}
	defer s.end()
	now := s.now()
	n := 0
	for _, e := range s.st.queued() {
		if e.item.State == vocab.EffectInflight && contract.Expired(e.item.ClaimExpires, now) {
			// As a release of the expired claim: an ended world's
			// effect is withdrawn, not handed to anyone else.
			e.item.ClaimExpires = time.Time{}
			if e.item.State = contract.ReleaseTo(s.st.worldStatus(e.item.World)); e.item.State == vocab.EffectWithdrawn {
				e.completedAt = now
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
func (s *backend) ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error {
	return s.release(ctx, "release_effect", intentHash, c, nil)
}

// RetryLater implements store.Effects: a release whose item waits for its
// RetryAt, by this store's clock.
func (s *backend) RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error {
	return s.release(ctx, "retry_later", intentHash, c, func(e *effect, now time.Time) {
		e.item.Failures++
		e.item.RetryAt = now.Add(delay)
		e.lastError = lastError
	})
}

// release hands claim c of the effect back (contract.ReleaseEffect): to the
// queue, where retry (nil: none) marks when and why it runs again, or
// withdrawn when its world is gone. A release to the queue is hinted,
// a retry too: a pool that waits on its own timer learns of a later retry
// time through NextRetry.
func (s *backend) release(ctx context.Context, op, intentHash string, c vocab.Claim, retry func(e *effect, now time.Time)) error {
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	e, found := s.st.effects[intentHash]
	var state vocab.EffectState
	var row contract.ClaimRow
	if found {
		state, row = e.item.State, contract.ClaimRow{Attempt: e.item.Attempt, ClaimedBy: e.item.ClaimedBy}
	}
	noop, err := contract.ReleaseEffect(op, intentHash, found, state, row, c)
	if err != nil || noop {
		return err
	}
	now := s.now()
	e.item.State = contract.ReleaseTo(s.st.worldStatus(e.item.World))
	e.item.ClaimExpires = time.Time{}
	if e.item.State == vocab.EffectWithdrawn {
		e.completedAt = now
		return nil
	}
	if retry != nil {
		retry(e, now)
	}
	s.st.notify(store.TopicEffects)
	return nil
}

// NextRetry implements store.Effects.
func (s *backend) NextRetry(ctx context.Context, kinds []string) (time.Duration, bool, error) {
	if err := s.begin(ctx, "next_retry"); err != nil {
		return 0, false, err
	}
	defer s.end()
	now := s.now()
	var at time.Time
	ok := false
	for _, e := range s.st.effects {
		if e.item.State == vocab.EffectPending && e.item.RetryAt.After(now) && slices.Contains(kinds, e.item.Kind) &&
			(!ok || e.item.RetryAt.Before(at)) {
			at, ok = e.item.RetryAt, true
		}
	}
	if !ok {
		return 0, false, nil
	}
	return at.Sub(now), true, nil
}

// RetryEffect implements store.Effects. The effect keeps its queue seq and
// its attempt count; its latest claim is cleared, so no completion of the
// attempt that already ended can pass as the retry's.
func (s *backend) RetryEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	const op = "retry_effect"
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	defer s.end()
	e, ok := s.st.effects[intentHash]
	if !ok {
		return store.EffectStatus{}, store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
	}
	var rs vocab.ReceiptStatus
	if e.receipt != nil {
		rs = e.receipt.Status
	}
	if err := contract.RetryEffect(op, intentHash, e.item.World, e.item.State, rs, s.st.worldStatus(e.item.World)); err != nil {
		return store.EffectStatus{}, err
	}
	e.item.State = vocab.EffectPending
	e.item.Retries++
	e.item.ClaimedBy, e.item.ClaimExpires = "", time.Time{}
	e.item.Failures, e.item.RetryAt, e.lastError = 0, time.Time{}, ""
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
		Failures: e.item.Failures, RetryAt: e.item.RetryAt, LastError: e.lastError,
		HoldReason: e.item.HoldReason, HeldAt: e.item.HeldAt, ReleaseReason: e.releaseReason,
	}
	if e.receipt != nil {
		st.Receipt = &vocab.Receipt{Status: e.receipt.Status, Payload: cloneBytes(e.receipt.Payload)}
	}
	if e.resolveReason != nil {
		st.Resolved, st.ResolveReason = true, *e.resolveReason
	}
	return st
}

// EffectStatus implements store.Effects.
func (s *backend) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
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

// HoldEffect implements store.Effects. The hold revokes the claim as the
// orphan reaper does (no worker, no owner), so no completion, release or
// retry of an execution already under way passes ClaimCheck.
func (s *backend) HoldEffect(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	return s.decideHeld(ctx, "hold_effect", intentHash, contract.HoldEffect, func(e *effect) {
		e.hold(reason, s.now())
	})
}

// decideHeld is a hold or a release of one effect: decide is the
// contract's rule on its state, apply the change unless decide says it is
// a no-op (mu held).
func (s *backend) decideHeld(ctx context.Context, op, intentHash string,
	decide func(op, intentHash string, found bool, state vocab.EffectState) (noop bool, err error), apply func(e *effect)) (store.EffectStatus, error) {
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	defer s.end()
	e, found := s.st.effects[intentHash]
	var state vocab.EffectState
	if found {
		state = e.item.State
	}
	noop, err := decide(op, intentHash, found, state)
	if err != nil {
		return store.EffectStatus{}, err
	}
	if !noop {
		apply(e)
	}
	return e.status(), nil
}

// hold holds e (mu held; its state pending or inflight).
func (e *effect) hold(reason string, now time.Time) {
	e.item.State = vocab.EffectHeld
	e.item.ClaimedBy, e.item.ClaimExpires, e.owner = "", time.Time{}, owner{}
	e.item.HoldReason, e.item.HeldAt, e.releaseReason = reason, now, ""
}

// releaseHeld puts a held e back to pending, claimable at once (mu held), or
// withdraws it when its world was archived since: no claim serves an
// archived world, as for ReleaseEffect.
func (st *state) releaseHeld(e *effect, reason string, now time.Time) {
	e.item.State = contract.ReleaseTo(st.worldStatus(e.item.World))
	e.item.RetryAt = time.Time{}
	e.releaseReason = reason
	if e.item.State == vocab.EffectWithdrawn {
		e.completedAt = now
	}
}

// ReleaseHeld implements store.Effects.
func (s *backend) ReleaseHeld(ctx context.Context, intentHash, reason string) (store.EffectStatus, error) {
	return s.decideHeld(ctx, "release_held", intentHash, contract.ReleaseHeld, func(e *effect) {
		s.st.releaseHeld(e, reason, s.now())
		s.st.notify(store.TopicEffects)
	})
}

// HoldOpenEffects implements store.Effects.
func (s *backend) HoldOpenEffects(ctx context.Context, reason string) (int, error) {
	if err := s.begin(ctx, "hold_open_effects"); err != nil {
		return 0, err
	}
	defer s.end()
	now, n := s.now(), 0
	for _, e := range s.st.effects {
		if e.item.State == vocab.EffectPending || e.item.State == vocab.EffectInflight {
			e.hold(reason, now)
		}
		if e.item.State == vocab.EffectHeld && e.item.HoldReason == reason {
			n++
		}
	}
	return n, nil
}

// ReleaseAllHeld implements store.Effects.
func (s *backend) ReleaseAllHeld(ctx context.Context, reason string) (int, error) {
	if err := s.begin(ctx, "release_all_held"); err != nil {
		return 0, err
	}
	defer s.end()
	now, n := s.now(), 0
	for _, e := range s.st.effects {
		if e.item.State == vocab.EffectHeld {
			s.st.releaseHeld(e, reason, now)
			n++
		}
	}
	if n > 0 {
		s.st.notify(store.TopicEffects)
	}
	return n, nil
}
