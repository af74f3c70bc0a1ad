package memstore

import (
	"context"
	"slices"

	"github.com/orrery-run/orrery/store"
)

// Watch implements store.Store: w is registered on the shared hub, and this
// handle remembers the registration so that its Crash or Close ends it.
func (s *backend) Watch(ctx context.Context, w store.Waker, topics ...string) (func(), error) {
	const op = "watch"
	if err := s.begin(ctx, op); err != nil {
		return nil, err
	}
	defer s.end()
	// A copy: the hub keeps the slice, which the caller may reuse.
	remove, err := s.st.hub.Add(op, w, slices.Clone(topics))
	if err != nil {
		return nil, err
	}
	s.watchID++
	id := s.watchID
	if s.watches == nil {
		s.watches = map[uint64]func(){}
	}
	s.watches[id] = remove
	return func() {
		remove() // idempotent, and takes only the hub's lock
		s.st.mu.Lock()
		delete(s.watches, id)
		s.st.mu.Unlock()
	}, nil
}

// dropWatches ends every watch of this handle (mu held).
func (s *backend) dropWatches() {
	for _, id := range sortedKeys(s.watches) {
		s.watches[id]()
	}
	s.watches = nil
}
