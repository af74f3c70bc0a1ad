package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// Event names of GET /v1/events. Each event's data is one JSON value: the
// current row of what changed, so a client applies an event by replacing
// its row, and never needs the events before it.
const (
	EventQueues  = "queues"  // Queues
	EventWorker  = "worker"  // Worker
	EventWorld   = "world"   // WorldView
	EventRemoved = "removed" // Removed: a world, worker or run the stream no longer follows
	// EventRun (a Run, the row of GET /v1/runs) is sent only by a server
	// with a runs backend (Config.Runs).
	EventRun     = "run"
	EventSummary = "summary" // Summary
	// EventSynced ({}) follows the whole current state, which a stream
	// sends first: a client that has applied the events up to it shows
	// what the store holds.
	EventSynced = "synced"
	// EventError (an Error body) says a poll failed; the rows stay as
	// last sent until a later poll succeeds.
	EventError = "error"
)

// Defaults and bounds of the event streams.
const (
	DefaultMaxEventStreams = 16
	DefaultEventPoll       = 250 * time.Millisecond
	// MaxEventWorlds bounds the worlds a stream follows: the first ones
	// by id. Summary says how many there are in all.
	MaxEventWorlds = 1000
	// MaxEventRuns bounds the runs a stream follows: the first ones by
	// id. Summary says how many there are in all.
	MaxEventRuns = 1000
	// eventKeepAlive is how often an idle stream writes a comment, so
	// that proxies keep it open and a vanished client is noticed.
	eventKeepAlive = 15 * time.Second
	// eventWriteTimeout bounds one write to a stream's client.
	eventWriteTimeout = 10 * time.Second
	// eventRetryMs is the reconnection delay a stream suggests to
	// EventSource clients.
	eventRetryMs = 2000
)

// Summary counts what the event stream follows.
type Summary struct {
	Worlds         int `json:"worlds"`          // every world of the server's universes
	WorldsStreamed int `json:"worlds_streamed"` // the first MaxEventWorlds of them, by id
	Workers        int `json:"workers"`
	// Runs and RunsStreamed count the workflow runs, on a server with a
	// runs backend only.
	Runs         int `json:"runs,omitempty"`
	RunsStreamed int `json:"runs_streamed,omitempty"`
}

// Removed names a row the stream no longer follows: Kind is "world",
// "worker" or "run".
type Removed struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// StreamEvent is one event of GET /v1/events: its name (one of the
// Event* constants) and its JSON data.
type StreamEvent struct {
	Name string
	Data json.RawMessage
}

// sseEvent is one row of the streamed state, or a signal.
type sseEvent struct {
	key  string // the row: "queues", "summary", "worker/<id>", "world/<id>", "run/<id>"; signals have their own
	kind string // "world", "worker" or "run" for rows that can be removed
	id   string
	name string
	data []byte
	cmp  []byte // what a change is judged by (nil: data)
}

func (e sseEvent) compared() []byte {
	if e.cmp != nil {
		return e.cmp
	}
	return e.data
}

// eventHub is the one poller of a server's event streams and their
// subscribers. The poller runs while at least one stream is open: each
// round reads the rows and hands each subscriber those that changed,
// coalesced by row, so a slow client never holds the poller up and never
// holds more than one pending event per row.
type eventHub struct {
	s     *Server
	ex    actor.Executor
	max   int
	every time.Duration

	mu      sync.Mutex
	subs    []*eventSub
	run     *pollRun   // the running poller, nil when no stream is open
	state   []sseEvent // the last successful round's rows, in order
	polled  bool       // state holds a round of run's
	failing bool       // run's last round failed
	errEv   sseEvent
}

// pollRun is one poller's life, from the first stream opened to the last
// one closed.
type pollRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// eventSub is one stream's pending events, coalesced by row and kept in
// the order each row was first queued.
type eventSub struct {
	full    bool // send the whole state after the next round
	order   []string
	pending map[string]sseEvent
	wake    chan struct{} // one slot: something is pending
}

func (sub *eventSub) queue(e sseEvent) {
	if _, ok := sub.pending[e.key]; !ok {
		sub.order = append(sub.order, e.key)
	}
	sub.pending[e.key] = e
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

var syncedEvent = sseEvent{key: "synced", name: EventSynced, data: []byte("{}")}

// queueAll queues the whole state, then synced (and the failure, while
// polls fail).
func (h *eventHub) queueAll(sub *eventSub) {
	for _, e := range h.state {
		sub.queue(e)
	}
	sub.queue(syncedEvent)
	if h.failing {
		sub.queue(h.errEv)
	}
}

// subscribe adds a stream, starting the poller for the first one. It
// answers false when the server has its maximum of streams open.
func (h *eventHub) subscribe() (*eventSub, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= h.max {
		return nil, false
	}
	sub := &eventSub{pending: map[string]sseEvent{}, wake: make(chan struct{}, 1)}
	h.subs = append(h.subs, sub)
	switch {
	case h.run == nil:
		ctx, cancel := context.WithCancel(context.Background())
		run := &pollRun{ctx: ctx, cancel: cancel, done: make(chan struct{})}
		h.run, h.state, h.polled, h.failing = run, nil, false, false
		sub.full = true
		h.ex.Go(func() { h.poll(run) })
	case !h.polled:
		sub.full = true
	default:
		h.queueAll(sub)
	}
	return sub, true
}

// unsubscribe removes a stream; the last one stops the poller and waits
// for it, so no goroutine outlives the streams.
func (h *eventHub) unsubscribe(sub *eventSub) {
	h.mu.Lock()
	for i, s := range h.subs {
		if s == sub {
			h.subs = append(h.subs[:i], h.subs[i+1:]...)
			break
		}
	}
	var run *pollRun
	if len(h.subs) == 0 && h.run != nil {
		run, h.run, h.state, h.polled, h.failing = h.run, nil, nil, false, false
	}
	h.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
}

// take hands a stream its pending events, in order.
func (h *eventHub) take(sub *eventSub) []sseEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(sub.order) == 0 {
		return nil
	}
	out := make([]sseEvent, 0, len(sub.order))
	for _, k := range sub.order {
		out = append(out, sub.pending[k])
	}
	sub.order = sub.order[:0]
	clear(sub.pending)
	return out
}

// poll reads the rows every h.every on the executor's clock until run
// ends.
func (h *eventHub) poll(run *pollRun) {
	defer close(run.done)
	for {
		evs, err := h.s.streamState(run.ctx)
		if run.ctx.Err() != nil {
			return
		}
		h.publish(run, evs, err)
		tick := make(chan struct{})
		t := h.ex.AfterFunc(h.every, func() { close(tick) })
		select {
		case <-run.ctx.Done():
			t.Stop()
			return
		case <-tick:
		}
	}
}

// publish hands every subscriber what changed since the last round (the
// whole state to those that joined before the first).
func (h *eventHub) publish(run *pollRun, evs []sseEvent, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run != run {
		return
	}
	if err != nil {
		if !h.failing {
			h.s.log.Warn("api: event stream poll failed", "err", err)
			e := toError(err)
			b, _ := json.Marshal(e)
			h.errEv = sseEvent{key: "error", name: EventError, data: b}
			for _, sub := range h.subs {
				sub.queue(h.errEv) // also to a stream still waiting for its first state
			}
		}
		h.failing = true
		return
	}
	h.failing = false
	changed := diffEvents(h.state, evs)
	h.state, h.polled = evs, true
	for _, sub := range h.subs {
		if sub.full {
			sub.full = false
			h.queueAll(sub)
			continue
		}
		for _, e := range changed {
			sub.queue(e)
		}
	}
}

// diffEvents is what a client that has applied prev must apply to show
// next: the rows of next that are new or changed, in next's order, then
// the removal of the rows next no longer has, in prev's order.
func diffEvents(prev, next []sseEvent) []sseEvent {
	old := make(map[string][]byte, len(prev))
	for _, e := range prev {
		old[e.key] = e.compared()
	}
	seen := make(map[string]bool, len(next))
	var out []sseEvent
	for _, e := range next {
		seen[e.key] = true
		if c, ok := old[e.key]; !ok || !bytes.Equal(c, e.compared()) {
			out = append(out, e)
		}
	}
	for _, e := range prev {
		if !seen[e.key] && e.kind != "" {
			b, _ := json.Marshal(Removed{Kind: e.kind, ID: e.id})
			out = append(out, sseEvent{key: e.key, kind: e.kind, id: e.id, name: EventRemoved, data: b})
		}
	}
	return out
}

// streamState reads every row a stream shows: the queue depths, the
// workers, the first MaxEventWorlds worlds, the first MaxEventRuns runs
// (with a runs backend), and the summary.
func (s *Server) streamState(ctx context.Context) ([]sseEvent, error) {
	var out []sseEvent
	add := func(key, kind, id, name string, v, cmp any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		e := sseEvent{key: key, kind: kind, id: id, name: name, data: b}
		if cmp != nil {
			if e.cmp, err = json.Marshal(cmp); err != nil {
				return err
			}
		}
		out = append(out, e)
		return nil
	}
	st := s.cfg.Store
	d, err := st.QueueDepths(ctx)
	if err != nil {
		return nil, err
	}
	if err := add("queues", "", "", EventQueues, queuesOf(d), nil); err != nil {
		return nil, err
	}
	workers, err := st.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	now, err := st.Now(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		wv, err := s.workerView(ctx, w, now)
		if err != nil {
			return nil, err
		}
		if err := add("worker/"+w.ID, "worker", w.ID, EventWorker, wv, nil); err != nil {
			return nil, err
		}
	}
	recs, err := s.worldRecords(ctx, "", "")
	if err != nil {
		return nil, err
	}
	n := min(len(recs), MaxEventWorlds)
	for _, rec := range recs[:n] {
		v, err := s.worldView(ctx, rec)
		if err != nil {
			return nil, err
		}
		// A renewal only moves the lease's expiry: not a change worth an
		// event every few seconds per world.
		cmp := v
		if v.Lease != nil {
			l := *v.Lease
			l.ExpiresAt = time.Time{}
			cmp.Lease = &l
		}
		if err := add("world/"+rec.ID, "world", rec.ID, EventWorld, v, cmp); err != nil {
			return nil, err
		}
	}
	sum := Summary{Worlds: len(recs), WorldsStreamed: n, Workers: len(workers)}
	if rb := s.cfg.Runs; rb != nil {
		runs, err := s.runRowsAt(ctx, rb.Workflows.Names(), runFilter{})
		if err != nil {
			return nil, err
		}
		sum.Runs, sum.RunsStreamed = len(runs), min(len(runs), MaxEventRuns)
		for _, r := range runs[:sum.RunsStreamed] {
			if err := add("run/"+r.ID, "run", r.ID, EventRun, r, nil); err != nil {
				return nil, err
			}
		}
	}
	if err := add("summary", "", "", EventSummary, sum, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// serveDoneKey carries Serve's ctx.Done() into its requests, whose own
// contexts outlive it (requests in flight finish after Serve's context
// ends); a stream ends with it instead.
type serveDoneKey struct{}

func serveDoneOf(ctx context.Context) <-chan struct{} {
	done, _ := ctx.Value(serveDoneKey{}).(<-chan struct{})
	return done // nil outside Serve: the request's context alone ends the stream
}

func (s *Server) events(r *http.Request, rc *reqCtx) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	sub, ok := s.hub.subscribe()
	if !ok {
		rc.w.Header().Set("Retry-After", "5")
		return 0, nil, apiErr(http.StatusServiceUnavailable, CodeUnavailable,
			fmt.Sprintf("the server has its maximum of %d event streams open", s.hub.max))
	}
	return http.StatusOK, passthrough{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.hub.unsubscribe(sub)
		s.stream(w, r, sub)
	})}, nil
}

// stream writes sub's events to w until the client goes, the server's
// Serve ends or a write fails.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sub *eventSub) {
	ctl := http.NewResponseController(w)
	// A stream outlives the server's read timeout, which would otherwise
	// end the request; a writer that cannot say so has no timeout to end.
	_ = ctl.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	buf.WriteString("retry: " + strconv.Itoa(eventRetryMs) + "\n\n")
	serveDone := serveDoneOf(r.Context())
	for {
		for _, e := range s.hub.take(sub) {
			buf.WriteString("event: ")
			buf.WriteString(e.name)
			buf.WriteString("\ndata: ")
			buf.Write(e.data) // JSON has no raw newline
			buf.WriteString("\n\n")
		}
		if buf.Len() > 0 {
			_ = ctl.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			if err := ctl.Flush(); err != nil {
				return
			}
			buf.Reset()
		}
		idle := make(chan struct{})
		t := s.hub.ex.AfterFunc(eventKeepAlive, func() { close(idle) })
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-serveDone:
			t.Stop()
			return
		case <-sub.wake:
		case <-idle:
			buf.WriteString(": keep-alive\n\n")
		}
		t.Stop()
	}
}
