// Package hub is the in-process fan-out of Watch hints that every backend
// shares: a set of Wakers per topic, woken after a commit. It starts no
// goroutine and never blocks on a Waker, so it works under the lab.
package hub

import (
	"slices"
	"sync"

	"github.com/orrery-run/orrery/store"
)

// Hub is safe for concurrent use. The zero value is ready.
type Hub struct {
	mu     sync.Mutex
	closed bool
	next   uint64
	subs   map[string]map[uint64]store.Waker // topic -> id -> waker
}

// Add registers w on topics and returns the function that removes it
// (idempotent). On a closed hub it returns store.ErrClosed for op.
func (h *Hub) Add(op string, w store.Waker, topics []string) (func(), error) {
	if w == nil {
		return nil, store.Errorf(op, store.ErrInvalid, "", "nil waker")
	}
	if len(topics) == 0 {
		return nil, store.Errorf(op, store.ErrInvalid, "", "no topic")
	}
	for _, t := range topics {
		if !store.ValidTopic(t) {
			return nil, store.Errorf(op, store.ErrInvalid, "", "topic %q", t)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, store.Errorf(op, store.ErrClosed, "", "")
	}
	if h.subs == nil {
		h.subs = map[string]map[uint64]store.Waker{}
	}
	h.next++
	id := slices.Clone(topics) // the caller may reuse its slice
	key := h.next
	for _, t := range id {
		set := h.subs[t]
		if set == nil {
			set = map[uint64]store.Waker{}
			h.subs[t] = set
		}
		set[key] = w
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, t := range id {
				if set := h.subs[t]; set != nil {
					delete(set, key)
					if len(set) == 0 {
						delete(h.subs, t)
					}
				}
			}
		})
	}, nil
}

// Notify wakes every waker of each topic. Wakers never block, so it may be
// called with a backend's lock held.
func (h *Hub) Notify(topics ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range topics {
		set := h.subs[t]
		if len(set) == 0 {
			continue
		}
		// In registration order, so that a deterministic executor sees the
		// same wake-ups in the same order on every run.
		ids := make([]uint64, 0, len(set))
		for id := range set {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			set[id].Unpark()
		}
	}
}

// Close removes every registration; later Adds fail with ErrClosed.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.subs = nil
}
