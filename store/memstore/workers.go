package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
	"github.com/orrery-run/orrery/vocab"
)

// owner is the worker incarnation a claim rides on (store.ClaimFor); the
// zero owner is none.
type owner struct{ node, incarnation string }

// Heartbeat implements store.Workers.
func (s *backend) Heartbeat(ctx context.Context, worker string, capacity int, opts ...store.HeartbeatOption) (store.WorkerInfo, error) {
	const op = "heartbeat"
	if err := s.begin(ctx, op); err != nil {
		return store.WorkerInfo{}, err
	}
	defer s.end()
	now := s.now()
	o, _ := store.ResolveHeartbeatOptions(op, opts)
	if o.Promised() && s.st.retired[owner{worker, o.Incarnation}] {
		return store.WorkerInfo{}, store.Errorf(op, store.ErrFenced, "", "worker %s incarnation %s retired", worker, o.Incarnation)
	}
	wi, known := s.st.workers[worker]
	if !known {
		wi = &store.WorkerInfo{ID: worker, StartedAt: now}
		s.st.workers[worker] = wi
	}
	wi.Capacity, wi.HeartbeatAt, wi.AliveUntil = capacity, now, time.Time{}
	if o.Promised() {
		if prev := (owner{worker, wi.Incarnation}); known && wi.Incarnation != o.Incarnation && !s.st.retired[prev] {
			// A new process under the worker's id: its predecessor
			// is gone, or must be treated so.
			s.st.retire(prev, now)
		}
		wi.Incarnation, wi.AliveUntil = o.Incarnation, now.Add(o.TTL)
	}
	if o.Advertised() {
		wi.Capabilities = slices.Clone(o.Capabilities)
	}
	s.st.notify(store.TopicWorkers)
	return workerCopy(wi), nil
}

// RetireWorker implements store.Workers.
func (s *backend) RetireWorker(ctx context.Context, worker, incarnation string) (int, error) {
	if err := s.begin(ctx, "retire_worker"); err != nil {
		return 0, err
	}
	defer s.end()
	who := owner{worker, incarnation}
	if s.st.retired[who] {
		return 0, nil
	}
	n := s.st.retire(who, s.now())
	if wi := s.st.workers[worker]; wi != nil && wi.Incarnation == incarnation {
		wi.AliveUntil = s.now()
		s.st.notify(store.TopicWorkers)
	}
	return n, nil
}

// retire records who retired and requeues its claims (mu held).
func (st *state) retire(who owner, now time.Time) int {
	st.retired[who] = true
	return st.requeueOrphans(now)
}

// claimable refuses a claim for an incarnation known dead (mu held).
func (st *state) claimable(op string, by owner, now time.Time) error {
	if by.node != "" && st.dead(by, now) {
		return store.Errorf(op, store.ErrFenced, "", "worker %s incarnation %s is known dead", by.node, by.incarnation)
	}
	return nil
}

// dead reports whether the store knows by dead at now (mu held): retired,
// or named by its worker's record whose promise ran out.
func (st *state) dead(by owner, now time.Time) bool {
	if st.retired[by] {
		return true
	}
	wi := st.workers[by.node]
	return wi != nil && wi.Incarnation == by.incarnation && wi.Dead(now)
}

// ReapOrphans implements store.Workers.
func (s *backend) ReapOrphans(ctx context.Context) (int, error) {
	if err := s.begin(ctx, "reap_orphans"); err != nil {
		return 0, err
	}
	defer s.end()
	return s.st.requeueOrphans(s.now()), nil
}

// requeueOrphans requeues, revoking their claims, the inflight effects and
// claimed timers whose owner is known dead (mu held).
func (st *state) requeueOrphans(now time.Time) int {
	n := 0
	effects := false
	for _, e := range st.queued() {
		if e.item.State != vocab.EffectInflight || e.owner.node == "" || !st.dead(e.owner, now) {
			continue
		}
		// The revoked claim can no longer settle or release: its holder
		// is a process the store gave up on.
		e.item.ClaimedBy, e.item.ClaimExpires, e.owner = "", time.Time{}, owner{}
		if e.item.State = contract.ReleaseTo(st.worldStatus(e.item.World)); e.item.State == vocab.EffectWithdrawn {
			e.completedAt = now
		} else {
			effects = true
		}
		n++
	}
	timers := false
	for _, t := range st.timers {
		if t.item.State != store.TimerClaimed || t.owner.node == "" || !st.dead(t.owner, now) {
			continue
		}
		t.item.State = store.TimerScheduled
		t.item.ClaimedBy, t.item.ClaimExpires, t.owner = "", time.Time{}, owner{}
		timers = true
		n++
	}
	if effects {
		st.notify(store.TopicEffects)
	}
	if timers {
		st.notify(store.TopicTimers)
	}
	return n
}

// SetDraining implements store.Workers.
func (s *backend) SetDraining(ctx context.Context, worker string, draining bool) (store.WorkerInfo, error) {
	const op = "set_draining"
	if err := s.begin(ctx, op); err != nil {
		return store.WorkerInfo{}, err
	}
	defer s.end()
	wi := s.st.workers[worker]
	if wi == nil {
		return store.WorkerInfo{}, store.Errorf(op, store.ErrNotFound, "", "worker %s never sent a heartbeat", worker)
	}
	if wi.Draining != draining {
		wi.Draining = draining
		s.st.notify(store.TopicWorkers)
	}
	return workerCopy(wi), nil
}

// workerCopy is a caller's copy of a record: it shares no slice with the
// state, so a caller that edits its list edits nothing stored.
func workerCopy(wi *store.WorkerInfo) store.WorkerInfo {
	w := *wi
	if w.Capabilities = slices.Clone(wi.Capabilities); w.Capabilities == nil {
		w.Capabilities = []string{}
	}
	return w
}

// ListWorkers implements store.Workers.
func (s *backend) ListWorkers(ctx context.Context) ([]store.WorkerInfo, error) {
	if err := s.begin(ctx, "list_workers"); err != nil {
		return nil, err
	}
	defer s.end()
	out := make([]store.WorkerInfo, 0, len(s.st.workers))
	for _, id := range sortedKeys(s.st.workers) {
		out = append(out, workerCopy(s.st.workers[id]))
	}
	return out, nil
}
