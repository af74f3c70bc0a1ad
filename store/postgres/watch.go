package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Watch implements store.Store: a coalescing hint channel (buffer 1) for
// topic. Hints come from this process's own writes at once, and from every
// process's writes through LISTEN/NOTIFY on one dedicated connection,
// opened on the first Watch and reopened (with a hint to every watcher,
// since notifications may have been missed) if it drops. The channel is
// closed when the watch stops: the returned function, ctx, or Close. On a
// closed store it is returned closed.
func (s *Store) Watch(ctx context.Context, topic string) (<-chan struct{}, func()) {
	return s.hub.watch(ctx, topic)
}

type watcher struct {
	ch    chan struct{}
	topic string
	stopC func() bool
}

// hub fans hints out to watchers and owns the listener.
type hub struct {
	connCfg *pgx.ConnConfig
	channel string

	mu       sync.Mutex
	watchers map[string]map[*watcher]struct{}
	closed   bool
	started  bool
	ready    chan struct{} // closed when the first LISTEN is active (or the hub closes)
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newHub(cfg *pgx.ConnConfig, channel string) *hub {
	return &hub{
		connCfg:  cfg.Copy(),
		channel:  channel,
		watchers: map[string]map[*watcher]struct{}{},
		ready:    make(chan struct{}),
	}
}

// listenWait bounds how long the first Watch waits for the listener to be
// listening, so that a hint for a write made right after Watch returns is
// not missed; past it, Watch returns anyway (hints are never needed for
// correctness).
const listenWait = 5 * time.Second

func (h *hub) watch(ctx context.Context, topic string) (<-chan struct{}, func()) {
	w := &watcher{ch: make(chan struct{}, 1), topic: topic}
	h.mu.Lock()
	if h.closed || ctx.Err() != nil {
		h.mu.Unlock()
		close(w.ch)
		return w.ch, func() {}
	}
	set := h.watchers[topic]
	if set == nil {
		set = map[*watcher]struct{}{}
		h.watchers[topic] = set
	}
	set[w] = struct{}{}
	if !h.started {
		h.started = true
		lctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.wg.Add(1)
		go h.listen(lctx)
	}
	stop := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.remove(w)
	}
	w.stopC = context.AfterFunc(ctx, stop)
	ready := h.ready
	h.mu.Unlock()

	t := time.NewTimer(listenWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-ctx.Done():
	case <-t.C:
	}
	return w.ch, stop
}

// remove unregisters and closes w; mu is held.
func (h *hub) remove(w *watcher) {
	set := h.watchers[w.topic]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(h.watchers, w.topic)
	}
	close(w.ch)
	if w.stopC != nil {
		w.stopC()
	}
}

// signal hints every watcher of topic; a full buffer already holds a hint.
func (h *hub) signal(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers[topic] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// broadcast hints every watcher.
func (h *hub) broadcast() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.watchers {
		for w := range set {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// listen keeps one connection LISTENing on the store's channel and turns
// each notification (its payload is the topic) into a hint.
func (h *hub) listen(ctx context.Context) {
	defer h.wg.Done()
	first := true
	defer func() {
		if first {
			close(h.ready)
		}
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, h.connCfg)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{h.channel}.Sanitize())
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			if first {
				first = false
				close(h.ready)
			} else {
				h.broadcast()
			}
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				h.signal(n.Payload)
			}
		}
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// close ends every watch and stops the listener.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	var all []*watcher
	for _, set := range h.watchers {
		for w := range set {
			all = append(all, w)
		}
	}
	for _, w := range all {
		h.remove(w)
	}
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	h.wg.Wait()
}
