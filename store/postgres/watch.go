package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/internal/hub"
)

// Watch implements store.Store. The wakers live in a local hub
// (store/internal/hub); hints reach it from this process's own commits at
// once, and from every process's commits through LISTEN/NOTIFY on one
// dedicated connection, opened at Open (so that the first Watch need not
// wait for it) and reopened if it drops. Notifications sent while it was
// down are lost, so a reconnect makes up for them (resync): it hints every
// watched topic but the inbox ones, and of those only the worlds whose
// inbox holds items beyond their cursor, read once the new connection
// listens. A host watches the inbox of every world it holds, passive ones
// included, and a hint wakes a passive world (a restore); hinting them
// all would restore every world the host holds at once, just when the
// database is coming back. Every NOTIFY is sent inside the transaction of
// the change, so PostgreSQL delivers it only after the commit. The
// registration holds no goroutine of its own: the listener is the
// store's, and ends at Close.
func (s *backend) Watch(ctx context.Context, w store.Waker, topics ...string) (func(), error) {
	const op = "watch"
	if err := s.begin(op); err != nil {
		return nil, err
	}
	return s.watch.add(ctx, op, w, topics)
}

// hint wakes this process's watchers of topics after a commit.
func (s *backend) hint(topics ...string) {
	if len(topics) > 0 {
		s.watch.local.Notify(topics...)
	}
}

// watchHub owns the local hub and the listener.
type watchHub struct {
	connCfg *pgx.ConnConfig
	channel string
	check   time.Duration // see WithListenerCheck
	local   hub.Hub

	mu      sync.Mutex
	topics  map[string]int // watched topic -> registrations, for the hint after a reconnect
	closed  bool
	started bool
	ready   chan struct{} // closed when the first LISTEN is active (or the hub closes)
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newWatchHub(cfg *pgx.ConnConfig, channel string, check time.Duration) *watchHub {
	return &watchHub{connCfg: cfg.Copy(), channel: channel, check: check, topics: map[string]int{}, ready: make(chan struct{})}
}

// listenWait bounds how long the first Watch waits for the listener to be
// listening, so that a hint for a write made right after Watch returns is
// not missed; past it, Watch returns anyway (hints are never needed for
// correctness).
const listenWait = 5 * time.Second

func (h *watchHub) add(ctx context.Context, op string, w store.Waker, topics []string) (func(), error) {
	remove, err := h.local.Add(op, w, topics)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		remove()
		return nil, store.Errorf(op, store.ErrClosed, "", "")
	}
	for _, t := range topics {
		h.topics[t]++
	}
	h.startLocked()
	ready := h.ready
	h.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			remove()
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, t := range topics {
				if h.topics[t]--; h.topics[t] <= 0 {
					delete(h.topics, t)
				}
			}
		})
	}

	t := time.NewTimer(listenWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
		stop()
		return nil, &store.Error{Op: op, Kind: ctx.Err()}
	}
	return stop, nil
}

// start opens the listener, unless it is open or the hub closed.
func (h *watchHub) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.startLocked()
	}
}

func (h *watchHub) startLocked() {
	if !h.started {
		h.started = true
		lctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.wg.Add(1)
		go h.listen(lctx)
	}
}

// resyncPage bounds the worlds one backlog query of a resync names.
const resyncPage = 10_000

// backlogSQL selects, of the worlds named, those whose inbox holds items
// beyond their cursor.
const backlogSQL = `SELECT y.world FROM worlds y LEFT JOIN streams s ON s.stream = y.world
	WHERE y.world = ANY($1::text[]) AND y.inbox_seq > coalesce(s.inbox_cursor, 0)`

// resync hints, after a reconnect, what the notifications missed while the
// listener was down may have concerned: every watched topic but the inbox
// ones, then the inbox topics of the worlds that have a backlog, read on
// conn (which listens already, so a change committed after the read is
// notified). If the read fails, every inbox topic is hinted: a spurious
// wake costs a restore, a lost one a world that waits for its next input.
func (h *watchHub) resync(ctx context.Context, conn *pgx.Conn) {
	h.mu.Lock()
	var other, inbox []string
	for t := range h.topics {
		if w, ok := store.InboxTopicWorld(t); ok {
			inbox = append(inbox, w)
		} else {
			other = append(other, t)
		}
	}
	h.mu.Unlock()
	slices.Sort(other)
	slices.Sort(inbox)
	h.local.Notify(other...)
	for len(inbox) > 0 {
		page := inbox[:min(len(inbox), resyncPage)]
		inbox = inbox[len(page):]
		backlog, err := worldsWithBacklog(ctx, conn, page)
		if err != nil {
			backlog = page
		}
		topics := make([]string, len(backlog))
		for i, w := range backlog {
			topics[i] = store.TopicInbox(w)
		}
		h.local.Notify(topics...)
	}
}

func worldsWithBacklog(ctx context.Context, conn *pgx.Conn, worlds []string) ([]string, error) {
	rows, _ := conn.Query(ctx, backlogSQL, worlds)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// listen keeps one connection LISTENing on the store's channel and turns
// each notification (its payload is the topic) into a hint.
func (h *watchHub) listen(ctx context.Context) {
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
				h.resync(ctx, conn)
			}
			h.deliver(ctx, conn)
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

// defaultListenerCheck is how long the listener waits quietly, unless
// WithListenerCheck says otherwise, before it checks that its server is
// still there and still the primary.
const defaultListenerCheck = 10 * time.Second

// deliver delivers conn's notifications until it fails. A server that
// stopped answering (cut off), or that a failover demoted, sends nothing
// and says nothing: the listener asks it after every h.check of silence,
// and leaves it for the DSN's primary when it no longer answers as one.
func (h *watchHub) deliver(ctx context.Context, conn *pgx.Conn) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, h.check)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			h.local.Notify(n.Payload)
			continue
		}
		if ctx.Err() != nil || conn.IsClosed() || !errors.Is(err, context.DeadlineExceeded) {
			return
		}
		// LISTEN again: harmless on the primary, refused by a standby
		// (25006), and it fails on a connection that leads nowhere.
		cctx, cancel := context.WithTimeout(ctx, h.check)
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{h.channel}.Sanitize())
		cancel()
		if err != nil {
			return
		}
	}
}

// close ends every watch and stops the listener.
func (h *watchHub) close() {
	h.local.Close()
	h.mu.Lock()
	h.closed = true
	cancel := h.cancel
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	h.wg.Wait()
}
