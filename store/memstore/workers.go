package memstore

import (
	"context"

	"github.com/orrery-run/orrery/store"
)

// Heartbeat implements store.Workers.
func (s *backend) Heartbeat(ctx context.Context, worker string, capacity int) (store.WorkerInfo, error) {
	const op = "heartbeat"
	if err := s.begin(ctx, op); err != nil {
		return store.WorkerInfo{}, err
	}
	defer s.end()
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
	return *wi, nil
}

// ListWorkers implements store.Workers.
func (s *backend) ListWorkers(ctx context.Context) ([]store.WorkerInfo, error) {
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
