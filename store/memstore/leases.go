package memstore

import (
	"context"
	"sort"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Acquire implements protocol A: the assignment is checked first, then the
// lease; a lease that is absent, released or expired is taken with the next
// epoch. The epoch counter lives in the lease record, which is never
// deleted, so an epoch is never handed out twice.
func (s *Store) Acquire(ctx context.Context, worldID, worker string, ttl time.Duration) (store.Lease, error) {
	const op = "acquire"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, err
	}
	defer s.st.mu.Unlock()
	if worker == "" || ttl <= 0 {
		return store.Lease{}, store.Errorf(op, store.ErrInvalid, worldID, "worker %q, ttl %v", worker, ttl)
	}
	if _, err := s.st.worldFor(op, worldID); err != nil {
		return store.Lease{}, err
	}
	if a, ok := s.st.assignments[worldID]; ok && a.DesiredWorker != "" && a.DesiredWorker != worker {
		return store.Lease{}, store.Errorf(op, store.ErrNotAssigned, worldID, "assigned to %s", a.DesiredWorker)
	}
	now := s.now()
	l := s.st.leases[worldID]
	if l != nil && l.Holder != "" && !expired(l.ExpiresAt, now) {
		if l.Holder == worker {
			return *l, nil
		}
		return store.Lease{}, store.Errorf(op, store.ErrLeaseHeld, worldID, "held by %s at epoch %d", l.Holder, l.Epoch)
	}
	if l == nil {
		l = &store.Lease{World: worldID}
		s.st.leases[worldID] = l
	}
	l.Epoch++
	l.Holder = worker
	l.ExpiresAt = now.Add(ttl)
	return *l, nil
}

// holderCheck is protocol B's test: an absent, released or expired lease is
// held by nobody (ErrNotHolder), as is one held by another worker; the
// holder of a live lease naming another epoch gets ErrStaleEpoch.
func (st *state) holderCheck(op, worldID, worker string, epoch uint64, now time.Time) (*store.Lease, error) {
	if _, ok := st.worlds[worldID]; !ok {
		return nil, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	l := st.leases[worldID]
	switch {
	case l == nil || l.Holder == "":
		return l, store.Errorf(op, store.ErrNotHolder, worldID, "lease not held")
	case l.Holder != worker:
		return l, store.Errorf(op, store.ErrNotHolder, worldID, "held by %s", l.Holder)
	case expired(l.ExpiresAt, now):
		return l, store.Errorf(op, store.ErrNotHolder, worldID, "lease expired")
	case l.Epoch != epoch:
		return l, store.Errorf(op, store.ErrStaleEpoch, worldID, "epoch %d, lease at %d", epoch, l.Epoch)
	}
	return l, nil
}

// Renew implements protocol B. An expired lease is not renewed, even when
// nobody took it over: the holder must Acquire again (a new epoch), since
// its writes were already being fenced.
func (s *Store) Renew(ctx context.Context, worldID, worker string, epoch uint64, ttl time.Duration) (store.Lease, error) {
	const op = "renew"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, err
	}
	defer s.st.mu.Unlock()
	if ttl <= 0 {
		return store.Lease{}, store.Errorf(op, store.ErrInvalid, worldID, "ttl %v", ttl)
	}
	now := s.now()
	l, err := s.st.holderCheck(op, worldID, worker, epoch, now)
	if err != nil {
		return store.Lease{}, err
	}
	l.ExpiresAt = now.Add(ttl)
	return *l, nil
}

// Release implements store.Leases. Releasing an already released epoch is a
// no-op (a retried release succeeds); an expired lease may still be
// released by its holder.
func (s *Store) Release(ctx context.Context, worldID, worker string, epoch uint64) error {
	const op = "release"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.st.mu.Unlock()
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	l := s.st.leases[worldID]
	switch {
	case l != nil && l.Holder == "" && l.Epoch == epoch:
		return nil
	case l == nil || l.Holder == "":
		return store.Errorf(op, store.ErrNotHolder, worldID, "lease not held")
	case l.Holder != worker:
		return store.Errorf(op, store.ErrNotHolder, worldID, "held by %s", l.Holder)
	case l.Epoch != epoch:
		return store.Errorf(op, store.ErrStaleEpoch, worldID, "epoch %d, lease at %d", epoch, l.Epoch)
	}
	now := s.now()
	l.Holder = ""
	if l.ExpiresAt.After(now) {
		l.ExpiresAt = now
	}
	return nil
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, worldID string) (store.Lease, bool, error) {
	const op = "get_lease"
	if err := s.begin(ctx, op); err != nil {
		return store.Lease{}, false, err
	}
	defer s.st.mu.Unlock()
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Lease{}, false, store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	l := s.st.leases[worldID]
	if l == nil {
		return store.Lease{}, false, nil
	}
	return *l, true, nil
}

// Assign implements store.Leases.
func (s *Store) Assign(ctx context.Context, worldID string, a store.Assignment) error {
	const op = "assign"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.st.mu.Unlock()
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	s.st.assignments[worldID] = a
	return nil
}

// Unassign implements store.Leases; it is idempotent.
func (s *Store) Unassign(ctx context.Context, worldID string) error {
	const op = "unassign"
	if err := s.begin(ctx, op); err != nil {
		return err
	}
	defer s.st.mu.Unlock()
	if _, ok := s.st.worlds[worldID]; !ok {
		return store.Errorf(op, store.ErrWorldNotFound, worldID, "")
	}
	delete(s.st.assignments, worldID)
	return nil
}

// GetAssignment implements store.Leases.
func (s *Store) GetAssignment(ctx context.Context, worldID string) (store.Assignment, bool, error) {
	if err := s.begin(ctx, "get_assignment"); err != nil {
		return store.Assignment{}, false, err
	}
	defer s.st.mu.Unlock()
	a, ok := s.st.assignments[worldID]
	return a, ok, nil
}

// WorkerWorlds implements store.Leases.
func (s *Store) WorkerWorlds(ctx context.Context, worker string) ([]string, error) {
	if err := s.begin(ctx, "worker_worlds"); err != nil {
		return nil, err
	}
	defer s.st.mu.Unlock()
	now := s.now()
	set := map[string]bool{}
	for id, l := range s.st.leases {
		if l.Holder == worker && !expired(l.ExpiresAt, now) {
			set[id] = true
		}
	}
	for id, a := range s.st.assignments {
		if a.DesiredWorker == worker {
			set[id] = true
		}
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}
