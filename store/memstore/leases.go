package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// Acquire implements protocol A (contract.Acquire). The epoch counter lives
// in the lease record, which is never deleted, so an epoch is never handed
// out twice.
func (s *Store) Acquire(ctx context.Context, worldID, worker string, ttl time.Duration, opts ...store.AcquireOption) (store.Lease, error) {
	const op = "acquire"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, err
	}
	defer s.end()
	o, err := store.ResolveAcquireOptions(op, opts)
	for _, err := range []error{
		store.CheckID(op, "world", worldID), store.CheckID(op, "worker", worker), store.CheckTTL(op, "ttl", ttl), err,
	} {
		if err != nil {
			return store.Lease{}, err
		}
	}
	return s.st.acquire(op, worldID, worker, o.Incarnation, ttl, s.now())
}

// AcquireLeases implements store.Leases: one transaction, each world
// decided in order as Acquire would decide it.
func (s *Store) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...store.AcquireOption) ([]store.AcquireResult, error) {
	const op = "acquire_leases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := store.CheckAcquireLeases(op, worker, worlds, ttl); err != nil {
		return nil, err
	}
	o, err := store.ResolveAcquireOptions(op, opts)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]store.AcquireResult, len(worlds))
	for i, id := range worlds {
		l, err := s.st.acquire("acquire", id, worker, o.Incarnation, ttl, now)
		out[i] = store.AcquireResult{World: id, Lease: l, Err: err}
		if err == nil {
			w := s.st.worlds[id]
			out[i].Universe, out[i].Backlog = w.rec.Universe, w.lastSeq > w.cursor
			out[i].NextTimer = s.st.nextTimer(id)
		}
	}
	return out, nil
}

// nextTimer is the due time of world's earliest timer not yet delivered
// (zero: none) (mu held).
func (st *state) nextTimer(world string) time.Time {
	var next time.Time
	for _, t := range st.timers {
		if t.item.World == world && t.item.State != store.TimerDelivered && (next.IsZero() || t.item.DeliverAt.Before(next)) {
			next = t.item.DeliverAt
		}
	}
	return next
}

// acquire decides protocol A for one world and writes the lease it takes
// (mu held).
func (st *state) acquire(op, worldID, worker, inc string, ttl time.Duration, now time.Time) (store.Lease, error) {
	w, ok := st.worlds[worldID]
	if !ok {
		return store.Lease{}, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	a, assigned := st.assignments[worldID]
	next, keep, err := contract.Acquire(op, worldID, worker, inc, w.rec.Status, a.DesiredWorker, assigned, st.leaseRow(worldID), now, ttl)
	if err != nil {
		return store.Lease{}, err
	}
	if !keep {
		st.leases[worldID] = &next
		st.notify(store.TopicLeases)
	}
	return next.Lease(worldID), nil
}

// Renew implements protocol B. An expired lease is not renewed, even when
// nobody took it over: the holder must Acquire again (a new epoch), since
// its writes were already being fenced.
func (s *Store) Renew(ctx context.Context, worldID, worker string, epoch uint64, ttl time.Duration) (store.Lease, error) {
	const op = "renew"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, err
	}
	defer s.end()
	if err := checkLeaseCall(op, worker, ttl, store.LeaseRef{World: worldID, Epoch: epoch}); err != nil {
		return store.Lease{}, err
	}
	return s.st.renew(op, worldID, worker, epoch, ttl, s.now())
}

// RenewLeases implements store.Leases: one transaction, each ref answered
// as Renew would.
func (s *Store) RenewLeases(ctx context.Context, worker string, refs []store.LeaseRef, ttl time.Duration) ([]store.LeaseResult, error) {
	const op = "renew_leases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := checkLeaseCall(op, worker, ttl, refs...); err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]store.LeaseResult, len(refs))
	for i, r := range refs {
		l, err := s.st.renew(op, r.World, worker, r.Epoch, ttl, now)
		out[i] = store.LeaseResult{World: r.World, Lease: l, Err: err}
	}
	return out, nil
}

// checkLeaseCall checks a lease call's arguments: the worker, the refs,
// and ttl unless the call takes none (a release passes noTTL).
func checkLeaseCall(op, worker string, ttl time.Duration, refs ...store.LeaseRef) error {
	if err := store.CheckID(op, "worker", worker); err != nil {
		return err
	}
	if ttl != noTTL {
		if err := store.CheckTTL(op, "ttl", ttl); err != nil {
			return err
		}
	}
	if err := store.CheckBatch(op, "refs", len(refs)); err != nil {
		return err
	}
	for _, r := range refs {
		if err := store.CheckID(op, "world", r.World); err != nil {
			return err
		}
		if err := store.CheckInt(op, "epoch", r.Epoch); err != nil {
			return err
		}
	}
	return nil
}

// noTTL marks a lease call without a duration (CheckTTL refuses it anyway).
const noTTL time.Duration = -1 << 63

func (st *state) renew(op, worldID, worker string, epoch uint64, ttl time.Duration, now time.Time) (store.Lease, error) {
	if _, ok := st.worlds[worldID]; !ok {
		return store.Lease{}, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	if err := contract.Holder(op, worldID, worker, epoch, st.leaseRow(worldID), now); err != nil {
		return store.Lease{}, err
	}
	l := st.leases[worldID]
	l.ExpiresAt = now.Add(ttl)
	return l.Lease(worldID), nil
}

// Release implements store.Leases (contract.ReleaseCheck): releasing an
// already released epoch is a no-op, and an expired lease may still be
// released by its holder.
func (s *Store) Release(ctx context.Context, worldID, worker string, epoch uint64) error {
	const op = "release"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := checkLeaseCall(op, worker, noTTL, store.LeaseRef{World: worldID, Epoch: epoch}); err != nil {
		return err
	}
	_, err := s.st.release(op, worldID, worker, epoch, s.now())
	return err
}

// ReleaseLeases implements store.Leases: one transaction, each ref
// answered as Release would.
func (s *Store) ReleaseLeases(ctx context.Context, worker string, refs []store.LeaseRef) ([]store.LeaseResult, error) {
	const op = "release_leases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	if err := checkLeaseCall(op, worker, noTTL, refs...); err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]store.LeaseResult, len(refs))
	for i, r := range refs {
		l, err := s.st.release(op, r.World, worker, r.Epoch, now)
		out[i] = store.LeaseResult{World: r.World, Lease: l, Err: err}
	}
	return out, nil
}

func (st *state) release(op, worldID, worker string, epoch uint64, now time.Time) (store.Lease, error) {
	if _, ok := st.worlds[worldID]; !ok {
		return store.Lease{}, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	noop, err := contract.ReleaseCheck(op, worldID, worker, epoch, st.leaseRow(worldID))
	if err != nil {
		return store.Lease{}, err
	}
	l := st.leases[worldID]
	if !noop {
		st.endLease(l, now)
	}
	return l.Lease(worldID), nil
}

// endLease releases l (mu held): the holder is cleared, the epoch kept,
// and the expiry brought forward to now, so nothing can still count on it.
func (st *state) endLease(l *contract.LeaseRow, now time.Time) {
	l.Holder, l.Incarnation = "", ""
	if l.ExpiresAt.After(now) {
		l.ExpiresAt = now
	}
	st.notify(store.TopicLeases)
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, worldID string) (store.Lease, bool, error) {
	const op = "get_lease"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, false, err
	}
	defer s.end()
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Lease{}, false, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	l := s.st.leases[worldID]
	if l == nil {
		return store.Lease{}, false, nil
	}
	return l.Lease(worldID), true, nil
}

// Assign implements store.Leases.
func (s *Store) Assign(ctx context.Context, worldID string, a store.Assignment, by *store.Fence) error {
	const op = "assign"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	for _, err := range []error{
		store.CheckID(op, "world", worldID), store.CheckOptionalID(op, "desiredWorker", a.DesiredWorker), store.CheckReason(op, a.Reason),
	} {
		if err != nil {
			return err
		}
	}
	if err := s.authority(op, by); err != nil {
		return err
	}
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	s.st.assignments[worldID] = a
	s.st.notify(store.TopicAssignments)
	return nil
}

// Unassign implements store.Leases; it is idempotent.
func (s *Store) Unassign(ctx context.Context, worldID string, by *store.Fence) error {
	const op = "unassign"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := store.CheckID(op, "world", worldID); err != nil {
		return err
	}
	if err := s.authority(op, by); err != nil {
		return err
	}
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	if _, ok := s.st.assignments[worldID]; ok {
		delete(s.st.assignments, worldID)
		s.st.notify(store.TopicAssignments)
	}
	return nil
}

// GetAssignment implements store.Leases.
func (s *Store) GetAssignment(ctx context.Context, worldID string) (store.Assignment, bool, error) {
	if err := s.begin(ctx, "get_assignment"); err != nil {
		return store.Assignment{}, false, err
	}
	defer s.end()
	a, ok := s.st.assignments[worldID]
	return a, ok, nil
}

// ListWorkerWorlds implements store.Leases. memstore scans its maps (it is
// the reference, not the scale test); the SQL backends page an index.
func (s *Store) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]store.WorkerWorld, error) {
	const op = "list_worker_worlds"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	for _, err := range []error{
		store.CheckID(op, "worker", worker), store.CheckOptionalID(op, "after", after), store.CheckBatch(op, "limit", limit),
	} {
		if err != nil {
			return nil, err
		}
	}
	now := s.now()
	var ids []string
	for id, l := range s.st.leases {
		if id > after && l.Holder == worker && !contract.Expired(l.ExpiresAt, now) {
			ids = append(ids, id)
		}
	}
	for id, a := range s.st.assignments {
		if id > after && a.DesiredWorker == worker {
			if l := s.st.leases[id]; l == nil || l.Holder != worker || contract.Expired(l.ExpiresAt, now) {
				ids = append(ids, id) // not already listed by its lease
			}
		}
	}
	sort.Strings(ids)
	if len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]store.WorkerWorld, len(ids))
	for i, id := range ids {
		out[i].World = id
		if l := s.st.leases[id]; l != nil {
			c := l.Lease(id)
			out[i].Lease = &c
		}
		if a, ok := s.st.assignments[id]; ok {
			out[i].Assignment = &a
		}
	}
	return out, nil
}

// ---- the worker inventory ----

// Heartbeat implements store.Workers.
func (s *Store) Heartbeat(ctx context.Context, worker string, capacity int) (store.WorkerInfo, error) {
	const op = "heartbeat"
	if err := s.begin(ctx, op); err != nil {
		return store.WorkerInfo{}, err
	}
	defer s.end()
	if err := store.CheckHeartbeat(op, worker, capacity); err != nil {
		return store.WorkerInfo{}, err
	}
	now := s.now()
	wi := s.st.workers[worker]
	if wi == nil {
		wi = &store.WorkerInfo{ID: worker, StartedAt: now}
		s.st.workers[worker] = wi
	}
	wi.Capacity, wi.HeartbeatAt = capacity, now
	s.st.notify(store.TopicWorkers)
	return *wi, nil
}

// SetDraining implements store.Workers.
func (s *Store) SetDraining(ctx context.Context, worker string, draining bool) (store.WorkerInfo, error) {
	const op = "set_draining"
	if err := s.begin(ctx, op); err != nil {
		return store.WorkerInfo{}, err
	}
	defer s.end()
	if err := store.CheckID(op, "worker", worker); err != nil {
		return store.WorkerInfo{}, err
	}
	wi := s.st.workers[worker]
	if wi == nil {
		return store.WorkerInfo{}, store.Errorf(op, store.ErrNotFound, "", "worker %s never sent a heartbeat", worker)
	}
	if wi.Draining != draining {
		wi.Draining = draining
		s.st.notify(store.TopicWorkers)
	}
	return *wi, nil
}

// ListWorkers implements store.Workers.
func (s *Store) ListWorkers(ctx context.Context) ([]store.WorkerInfo, error) {
	if err := s.begin(ctx, "list_workers"); err != nil {
		return nil, err
	}
	defer s.end()
	out := make([]store.WorkerInfo, 0, len(s.st.workers))
	for _, id := range sortedKeys(s.st.workers) {
		out = append(out, *s.st.workers[id])
	}
	return out, nil
}

// authority checks an assignment writer's fence (nil: an operator).
func (s *Store) authority(op string, by *store.Fence) error {
	if by == nil {
		return nil
	}
	if err := store.CheckID(op, "fence world", by.World); err != nil {
		return err
	}
	return s.st.fence(op, by.World, by.Epoch, s.now())
}
