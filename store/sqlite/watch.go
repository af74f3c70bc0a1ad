package sqlite

import (
	"context"
)

// Watch hints live in this process only: the committer fires them after a
// commit. Another process writing the same file would not wake these
// watchers, which is one more reason the store assumes it is the file's
// only writer; hints are never needed for correctness (store package doc).

type watcher struct {
	ch   chan struct{}
	stop func() bool // detaches the context's AfterFunc
}

// Watch returns a channel that receives a coalesced hint (buffer 1) after
// every commit that may have changed topic. The channel is closed when the
// returned stop function is called, ctx is done, or the store is closed.
func (s *Store) Watch(ctx context.Context, topic string) (<-chan struct{}, func()) {
	w := &watcher{ch: make(chan struct{}, 1)}
	s.watchMu.Lock()
	if s.closed.Load() || ctx.Err() != nil {
		s.watchMu.Unlock()
		close(w.ch)
		return w.ch, func() {}
	}
	set := s.watchers[topic]
	if set == nil {
		set = make(map[*watcher]struct{})
		s.watchers[topic] = set
	}
	set[w] = struct{}{}
	// Under the lock, so closeWatchers always finds stop set. If ctx is
	// already done, AfterFunc's goroutine waits for the lock, then unwatches.
	cancel := func() { s.unwatch(topic, w) }
	w.stop = context.AfterFunc(ctx, cancel)
	s.watchMu.Unlock()
	return w.ch, func() {
		w.stop()
		cancel()
	}
}

func (s *Store) unwatch(topic string, w *watcher) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	set := s.watchers[topic]
	if _, ok := set[w]; !ok {
		return // already stopped, or closed with the store
	}
	delete(set, w)
	if len(set) == 0 {
		delete(s.watchers, topic)
	}
	close(w.ch)
}

// notifyAll hints every watcher of topics (duplicates are harmless).
func (s *Store) notifyAll(topics []string) {
	if len(topics) == 0 {
		return
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for _, topic := range topics {
		for w := range s.watchers[topic] {
			select {
			case w.ch <- struct{}{}:
			default: // a hint is already pending: coalesce
			}
		}
	}
}

func (s *Store) closeWatchers() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for topic, set := range s.watchers {
		for w := range set {
			w.stop()
			close(w.ch)
		}
		delete(s.watchers, topic)
	}
}
