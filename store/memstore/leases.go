package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/contract"
)

// AcquireLeases implements protocol A (contract.Acquire) for each world in
// order, in one transaction. The epoch counter lives in the lease record,
// which is never deleted, so an epoch is never handed out twice.
func (s *backend) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...store.AcquireOption) ([]store.AcquireResult, error) {
	const op = "acquire_leases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	o, _ := store.ResolveAcquireOptions(op, opts) // the front refused invalid ones
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

// RenewLeases implements protocol B for each ref, in one transaction. An
// expired lease is not renewed, even when nobody took it over: the holder
// must acquire it again (a new epoch), since its writes were already being
// fenced.
func (s *backend) RenewLeases(ctx context.Context, worker string, refs []store.LeaseRef, ttl time.Duration) ([]store.LeaseResult, error) {
	const op = "renew_leases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	now := s.now()
	out := make([]store.LeaseResult, len(refs))
	for i, r := range refs {
		l, err := s.st.renew(op, r.World, worker, r.Epoch, ttl, now)
		out[i] = store.LeaseResult{World: r.World, Lease: l, Err: err}
	}
	return out, nil
}

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

// ReleaseLeases implements store.Leases (contract.ReleaseCheck) for each
// ref, in one transaction: releasing an already released epoch is a no-op,
// and an expired lease may still be released by its holder.
func (s *backend) ReleaseLeases(ctx context.Context, worker string, refs []store.LeaseRef) ([]store.LeaseResult, error) {
	const op = "release_leases"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
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
func (s *backend) GetLease(ctx context.Context, worldID string) (store.Lease, bool, error) {
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
func (s *backend) Assign(ctx context.Context, worldID string, a store.Assignment, by *store.Fence) error {
	return s.assignmentWrite(ctx, "assign", worldID, by, func() error {
		s.st.assignments[worldID] = a
		s.st.notify(store.TopicAssignments)
		return nil
	})
}

// assignmentWrite runs write under the store's lock once by's authority
// and the world's existence are checked, as every assignment write does.
func (s *backend) assignmentWrite(ctx context.Context, op, worldID string, by *store.Fence, write func() error) error {
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.end()
	if err := s.authority(op, by); err != nil {
		return err
	}
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	return write()
}

// Unassign implements store.Leases; it is idempotent.
func (s *backend) Unassign(ctx context.Context, worldID string, by *store.Fence) error {
	return s.assignmentWrite(ctx, "unassign", worldID, by, func() error {
		if _, ok := s.st.assignments[worldID]; ok {
			delete(s.st.assignments, worldID)
			s.st.notify(store.TopicAssignments)
		}
		return nil
	})
}

// CompareAndAssign implements store.Leases.
func (s *backend) CompareAndAssign(ctx context.Context, worldID string, prev, next *store.Assignment, by *store.Fence) error {
	const op = "compare_and_assign"
	return s.assignmentWrite(ctx, op, worldID, by, func() error {
		var cur *store.Assignment
		if a, ok := s.st.assignments[worldID]; ok {
			cur = &a
		}
		write, err := contract.Reassign(op, worldID, cur, prev, next)
		if err != nil || !write {
			return err
		}
		if next == nil {
			delete(s.st.assignments, worldID)
		} else {
			s.st.assignments[worldID] = *next
		}
		s.st.notify(store.TopicAssignments)
		return nil
	})
}

// GetAssignment implements store.Leases.
func (s *backend) GetAssignment(ctx context.Context, worldID string) (store.Assignment, bool, error) {
	if err := s.begin(ctx, "get_assignment"); err != nil {
		return store.Assignment{}, false, err
	}
	defer s.end()
	a, ok := s.st.assignments[worldID]
	return a, ok, nil
}

// ListWorkerWorlds implements store.Leases. memstore scans its maps (it is
// the reference, not the scale test); the SQL backends page an index.
func (s *backend) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]store.WorkerWorld, error) {
	const op = "list_worker_worlds"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
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
		if w := s.st.worlds[id]; w != nil {
			out[i].Backlog = w.lastSeq > w.cursor
		}
	}
	return out, nil
}

// authority checks an assignment writer's fence (nil: an operator).
func (s *backend) authority(op string, by *store.Fence) error {
	if by == nil {
		return nil
	}
	return s.st.fence(op, by.World, by.Epoch, s.now())
}
