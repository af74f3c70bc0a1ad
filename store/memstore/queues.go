package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
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

// Enqueue implements store.Inbox.
func (s *Store) Enqueue(ctx context.Context, worldID string, item store.InboxItem) (uint64, bool, error) {
	const op = "enqueue"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.st.mu.Unlock()
	w, err := s.st.worldFor(op, worldID)
	if err != nil {
		return 0, false, err
	}
	if item.Kind == "" {
		return 0, false, store.Errorf(op, store.ErrInvalid, worldID, "empty kind")
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
	defer s.st.mu.Unlock()
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
	defer s.st.mu.Unlock()
	w, ok := s.st.worlds[worldID]
	if !ok {
		return 0, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	return w.cursor, nil
}

// DrainToJournal implements store.Inbox. The head is compared even when
// every entry is a duplicate: the cursor compare-and-swap already makes a
// retried drain fail, so the head check never needs relaxing here.
func (s *Store) DrainToJournal(ctx context.Context, worldID string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []store.Record) ([]store.Appended, error) {
	const op = "drain"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.st.mu.Unlock()
	now := s.now()
	if err := s.st.fence(op, worldID, epoch, now); err != nil {
		return nil, err
	}
	w := s.st.worlds[worldID]
	switch {
	case w.cursor != expectedCursor:
		return nil, store.Errorf(op, store.ErrCursorMismatch, worldID, "cursor is %d, expected %d", w.cursor, expectedCursor)
	case newCursor < expectedCursor:
		return nil, store.Errorf(op, store.ErrInvalid, worldID, "cursor cannot move back from %d to %d", expectedCursor, newCursor)
	case newCursor > w.lastSeq:
		return nil, store.Errorf(op, store.ErrInvalid, worldID, "cursor %d passes the last seq %d", newCursor, w.lastSeq)
	}
	out, err := s.st.append(op, worldID, entries, &expectedHead, true, now)
	if err != nil {
		return nil, err
	}
	// The drained items' dedupe keys complete now.
	i := sort.Search(len(w.inbox), func(i int) bool { return w.inbox[i].Seq > w.cursor })
	for ; i < len(w.inbox) && w.inbox[i].Seq <= newCursor; i++ {
		if k, ok := w.inboxKeys[w.inbox[i].DedupeKey]; ok && k.seq == w.inbox[i].Seq {
			k.drained, k.drainedAt = true, now
		}
	}
	w.cursor = newCursor
	return out, nil
}

// ---- effects ----

type effect struct {
	item        store.EffectItem
	state       store.EffectState
	receipt     *store.Receipt
	inboxSeq    uint64
	completedAt time.Time
}

// Publish implements protocol C. Intent hashes are global: an intent once
// published is skipped until its dedupe record is swept.
func (s *Store) Publish(ctx context.Context, worldID string, epoch uint64, intents []store.Intent) (int, error) {
	const op = "publish"
	if err := s.begin(ctx, op); err != nil {
		return 0, err
	}
	defer s.st.mu.Unlock()
	for _, in := range intents {
		if in.IntentHash == "" || in.Kind == "" {
			return 0, store.Errorf(op, store.ErrInvalid, worldID, "intent %q of kind %q", in.IntentHash, in.Kind)
		}
	}
	now := s.now()
	if err := s.st.fence(op, worldID, epoch, now); err != nil {
		return 0, err
	}
	n := 0
	for _, in := range intents {
		if _, ok := s.st.effects[in.IntentHash]; ok {
			continue
		}
		s.st.effectSeq++
		in.Params = cloneBytes(in.Params)
		s.st.effects[in.IntentHash] = &effect{
			item:  store.EffectItem{Intent: in, World: worldID, Seq: s.st.effectSeq, EnqueuedAt: now},
			state: store.EffectPending,
		}
		n++
	}
	if n > 0 {
		s.st.notify(store.TopicEffects)
	}
	return n, nil
}

// queued returns the pending and inflight effects in queue order (mu held).
func (st *state) queued() []*effect {
	var q []*effect
	for _, e := range st.effects {
		if e.state != store.EffectDone {
			q = append(q, e)
		}
	}
	sort.Slice(q, func(i, j int) bool { return q[i].item.Seq < q[j].item.Seq })
	return q
}

// Claim implements protocol D's first step.
func (s *Store) Claim(ctx context.Context, worker string, n int, claimTTL time.Duration) ([]store.EffectItem, error) {
	const op = "claim"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.st.mu.Unlock()
	if worker == "" || claimTTL <= 0 {
		return nil, store.Errorf(op, store.ErrInvalid, "", "worker %q, ttl %v", worker, claimTTL)
	}
	now := s.now()
	var out []store.EffectItem
	for _, e := range s.st.queued() {
		if len(out) >= n {
			break
		}
		if e.state != store.EffectPending {
			continue
		}
		e.state = store.EffectInflight
		e.item.Attempt++
		e.item.ClaimedBy = worker
		e.item.ClaimExpires = now.Add(claimTTL)
		it := e.item
		it.Params = cloneBytes(it.Params)
		out = append(out, it)
	}
	return out, nil
}

// Complete implements protocol D's acknowledgement. A pending intent (its
// claim reaped while the adapter was still working) may be completed too:
// the result exists, and losing it would execute the effect again. The
// receipt enters the inbox whatever the world's status, because it is the
// durable answer to the world's own request.
func (s *Store) Complete(ctx context.Context, intentHash string, r store.Receipt) (uint64, bool, error) {
	const op = "complete"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.st.mu.Unlock()
	e, ok := s.st.effects[intentHash]
	if !ok {
		return 0, false, store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
	}
	if e.state == store.EffectDone {
		return e.inboxSeq, true, nil
	}
	switch r.Status {
	case store.ReceiptOK, store.ReceiptError, store.ReceiptTimeout:
	default:
		return 0, false, store.Errorf(op, store.ErrInvalid, e.item.World, "receipt status %q", r.Status)
	}
	now := s.now()
	w := s.st.worlds[e.item.World]
	seq, dup := s.st.enqueue(w, "receipt", r.Payload, "receipt:"+intentHash, now)
	e.state = store.EffectDone
	e.receipt = &store.Receipt{Status: r.Status, Payload: cloneBytes(r.Payload)}
	e.inboxSeq = seq
	e.completedAt = now
	e.item.ClaimedBy, e.item.ClaimExpires = "", time.Time{}
	return seq, dup, nil
}

// ReapEffects implements the effect reaper.
func (s *Store) ReapEffects(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "reap_effects"); err != nil {
		return 0, err
	}
	defer s.st.mu.Unlock()
	now := s.now()
	n := 0
	for _, e := range s.st.queued() {
		if e.state == store.EffectInflight && expired(e.item.ClaimExpires, now) {
			e.state = store.EffectPending
			e.item.ClaimedBy, e.item.ClaimExpires = "", time.Time{}
			n++
		}
	}
	if n > 0 {
		s.st.notify(store.TopicEffects)
	}
	return n, nil
}

// EffectStatus implements store.Effects.
func (s *Store) EffectStatus(ctx context.Context, intentHash string) (store.EffectStatus, error) {
	const op = "effect_status"
	if err := s.begin(ctx, op); err != nil {
		return store.EffectStatus{}, err
	}
	defer s.st.mu.Unlock()
	e, ok := s.st.effects[intentHash]
	if !ok {
		return store.EffectStatus{}, store.Errorf(op, store.ErrNotFound, "", "intent %s", intentHash)
	}
	st := store.EffectStatus{
		IntentHash: intentHash, World: e.item.World, State: e.state, Attempts: e.item.Attempt,
		InboxSeq: e.inboxSeq, CompletedAt: e.completedAt,
	}
	if e.receipt != nil {
		st.Receipt = &store.Receipt{Status: e.receipt.Status, Payload: cloneBytes(e.receipt.Payload)}
	}
	return st, nil
}

// ---- timers ----

type timer struct {
	item        store.TimerItem
	claimed     bool
	delivered   bool
	inboxSeq    uint64
	completedAt time.Time
}

// Schedule implements protocol E's first step. Intent hashes are global.
func (s *Store) Schedule(ctx context.Context, worldID string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.st.mu.Unlock()
	if intentHash == "" {
		return store.Errorf(op, store.ErrInvalid, worldID, "empty intent hash")
	}
	if err := s.st.fence(op, worldID, epoch, s.now()); err != nil {
		return err
	}
	if _, ok := s.st.timers[intentHash]; ok {
		return nil
	}
	s.st.timers[intentHash] = &timer{item: store.TimerItem{
		World: worldID, IntentHash: intentHash, DeliverAt: deliverAt.Round(0), Payload: cloneBytes(payload),
	}}
	s.st.notify(store.TopicTimers)
	return nil
}

// CancelTimer implements store.Timers: a timer of this world that has not
// fired (claimed or not) is removed with its dedupe record, so the same
// hash may be scheduled again. An unknown or fired timer: ErrNotFound.
func (s *Store) CancelTimer(ctx context.Context, worldID string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.st.mu.Unlock()
	if err := s.st.fence(op, worldID, epoch, s.now()); err != nil {
		return err
	}
	t, ok := s.st.timers[intentHash]
	if !ok || t.item.World != worldID || t.delivered {
		return store.Errorf(op, store.ErrNotFound, worldID, "timer %s", intentHash)
	}
	delete(s.st.timers, intentHash)
	s.st.notify(store.TopicTimers)
	return nil
}

// ClaimDue implements protocol E's claim.
func (s *Store) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration) ([]store.TimerItem, error) {
	const op = "claim_due"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.st.mu.Unlock()
	if worker == "" || ttl <= 0 {
		return nil, store.Errorf(op, store.ErrInvalid, "", "worker %q, ttl %v", worker, ttl)
	}
	now := s.now()
	var due []*timer
	for _, t := range s.st.timers {
		if !t.delivered && !t.claimed && !t.item.DeliverAt.After(now) {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		a, b := due[i].item, due[j].item
		if !a.DeliverAt.Equal(b.DeliverAt) {
			return a.DeliverAt.Before(b.DeliverAt)
		}
		return a.IntentHash < b.IntentHash
	})
	var out []store.TimerItem
	for _, t := range due {
		if len(out) >= n {
			break
		}
		t.claimed = true
		t.item.Attempt++
		t.item.ClaimedBy = worker
		t.item.ClaimExpires = now.Add(ttl)
		it := t.item
		it.Payload = cloneBytes(it.Payload)
		out = append(out, it)
	}
	return out, nil
}

// Fire implements protocol E's acknowledgement. Like Complete, it delivers
// whatever the world's status, and whether or not the timer is claimed.
func (s *Store) Fire(ctx context.Context, intentHash string) (uint64, bool, error) {
	const op = "fire"
	if err := s.begin(ctx, op); err != nil {
		return 0, false, err
	}
	defer s.st.mu.Unlock()
	t, ok := s.st.timers[intentHash]
	if !ok {
		return 0, false, store.Errorf(op, store.ErrNotFound, "", "timer %s", intentHash)
	}
	if t.delivered {
		return t.inboxSeq, true, nil
	}
	now := s.now()
	seq, dup := s.st.enqueue(s.st.worlds[t.item.World], "timer", t.item.Payload, "timer:"+intentHash, now)
	t.delivered, t.claimed = true, false
	t.item.ClaimedBy, t.item.ClaimExpires = "", time.Time{}
	t.inboxSeq, t.completedAt = seq, now
	return seq, dup, nil
}

// ReapTimers implements the timer reaper.
func (s *Store) ReapTimers(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "reap_timers"); err != nil {
		return 0, err
	}
	defer s.st.mu.Unlock()
	now := s.now()
	n := 0
	for _, t := range s.st.timers {
		if t.claimed && !t.delivered && expired(t.item.ClaimExpires, now) {
			t.claimed = false
			t.item.ClaimedBy, t.item.ClaimExpires = "", time.Time{}
			n++
		}
	}
	if n > 0 {
		s.st.notify(store.TopicTimers)
	}
	return n, nil
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
	defer s.st.mu.Unlock()
	if messageID == "" {
		return store.FabricResult{}, store.Errorf(op, store.ErrInvalid, dest, "empty message id")
	}
	w, err := s.st.worldFor(op, dest)
	if err != nil {
		return store.FabricResult{}, err
	}
	if r, ok := w.fabric[messageID]; ok {
		return store.FabricResult{Status: store.FabricAlreadyEnqueued, Seq: r.seq}, nil
	}
	now := s.now()
	seq, _ := s.st.enqueue(w, "fabric", item.Payload, "", now)
	w.fabric[messageID] = &dedupeRecord{seq: seq, completedAt: now}
	return store.FabricResult{Status: store.FabricOK, Seq: seq}, nil
}

// ---- dedupe retention ----

// SweepDedupe implements store.Dedupe: completed effect, timer and fabric
// records and drained inbox keys whose completion + retention is at or
// before the store's clock. Pending and inflight effects, unfired timers
// and undrained inbox keys are never swept. Inbox items themselves stay.
func (s *Store) SweepDedupe(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "sweep_dedupe"); err != nil {
		return 0, err
	}
	defer s.st.mu.Unlock()
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
	for h, e := range s.st.effects {
		if e.state == store.EffectDone && gone(e.completedAt) {
			delete(s.st.effects, h)
			n++
		}
	}
	for h, t := range s.st.timers {
		if t.delivered && gone(t.completedAt) {
			delete(s.st.timers, h)
			n++
		}
	}
	return n, nil
}
