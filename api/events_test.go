package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// follower reads one event stream into a channel.
type follower struct {
	t      testing.TB
	events chan api.StreamEvent
	done   chan error
	cancel context.CancelFunc
}

func follow(t testing.TB, ctx context.Context, c *api.Client) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	f := &follower{t: t, events: make(chan api.StreamEvent, 1024), done: make(chan error, 1), cancel: cancel}
	go func() {
		f.done <- c.Events(ctx, func(e api.StreamEvent) error {
			select {
			case f.events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

// next returns the first event from now on that match accepts, failing
// the test if the stream ends first or none comes within a minute (a
// bound on a wait, not a timing claim).
func (f *follower) next(what string, match func(api.StreamEvent) bool) api.StreamEvent {
	f.t.Helper()
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	for {
		select {
		case e := <-f.events:
			if match(e) {
				return e
			}
		case err := <-f.done:
			f.done <- err
			f.t.Fatalf("the stream ended (%v) before %s", err, what)
		case <-limit.C:
			f.t.Fatalf("no event: %s", what)
		}
	}
}

// untilSynced collects the initial state up to the synced event.
func (f *follower) untilSynced() []api.StreamEvent {
	f.t.Helper()
	var out []api.StreamEvent
	f.next("synced", func(e api.StreamEvent) bool {
		out = append(out, e)
		return e.Name == api.EventSynced
	})
	return out
}

func worldEvent(t testing.TB, e api.StreamEvent) (api.WorldView, bool) {
	t.Helper()
	if e.Name != api.EventWorld {
		return api.WorldView{}, false
	}
	var v api.WorldView
	if err := json.Unmarshal(e.Data, &v); err != nil {
		t.Fatalf("a world event does not decode: %v: %s", err, e.Data)
	}
	return v, true
}

func fastEvents(c *api.Config) { c.EventPoll = 10 * time.Millisecond }

// TestEventsStream: a stream starts with the whole state (queues, the
// worker, every world, the summary, then synced); an event sent to a
// world appears as that world's row with the head one higher; a new
// world and a pause appear as rows too; the summary follows the count.
func TestEventsStream(t *testing.T) {
	r := newRig(t, rigOptions{cfg: fastEvents})
	r.Create("e1", universe)
	r.WaitFor("e1 leased", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, "e1")
		return err == nil && v.Lease != nil && v.Lease.Holder == "w1", err
	})
	f := follow(t, r.Ctx, r.Client)
	initial := f.untilSynced()
	var names []string
	var head uint64
	seen := map[string]bool{}
	for _, e := range initial {
		names = append(names, e.Name)
		seen[e.Name] = true
		if v, ok := worldEvent(t, e); ok {
			if v.ID != "e1" || v.Lease == nil || v.Lease.Holder != "w1" {
				t.Fatalf("the initial world row: %+v", v)
			}
			head = v.Head
		}
		if e.Name == api.EventWorker {
			var w api.Worker
			if err := json.Unmarshal(e.Data, &w); err != nil || w.ID != "w1" || !w.Live {
				t.Fatalf("the initial worker row: %s %v", e.Data, err)
			}
		}
		if e.Name == api.EventSummary {
			var s api.Summary
			if err := json.Unmarshal(e.Data, &s); err != nil || s != (api.Summary{Worlds: 1, WorldsStreamed: 1, Workers: 1}) {
				t.Fatalf("the initial summary: %s %v", e.Data, err)
			}
		}
	}
	if names[0] != api.EventQueues || !seen[api.EventWorker] || !seen[api.EventWorld] || !seen[api.EventSummary] {
		t.Fatalf("the initial state: %v", names)
	}

	must(r.Client.Send(r.Ctx, "e1", typeName(t, Add{}), Add{By: 2}, "x"))(t)
	f.next("e1's head one higher", func(e api.StreamEvent) bool {
		v, ok := worldEvent(t, e)
		return ok && v.ID == "e1" && v.Head == head+1
	})
	r.Create("e2", universe)
	f.next("the new world e2", func(e api.StreamEvent) bool {
		v, ok := worldEvent(t, e)
		return ok && v.ID == "e2"
	})
	f.next("a summary of two worlds", func(e api.StreamEvent) bool {
		var s api.Summary
		return e.Name == api.EventSummary && json.Unmarshal(e.Data, &s) == nil && s.Worlds == 2
	})
	must(r.Client.Pause(r.Ctx, "e1", "look"))(t)
	f.next("e1 paused", func(e api.StreamEvent) bool {
		v, ok := worldEvent(t, e)
		return ok && v.ID == "e1" && v.Status == "paused"
	})
}

// TestEventsAuthAndLimit: a stream needs the token like any route; past
// MaxEventStreams one more is 503 unavailable with Retry-After, and the
// slot is free again once a stream ends; query parameters are refused.
func TestEventsAuthAndLimit(t *testing.T) {
	const tok = "s3cret"
	r := newRig(t, rigOptions{token: tok, cfg: func(c *api.Config) { fastEvents(c); c.MaxEventStreams = 1 }})
	anon := must(api.NewClient(r.HTTP.URL, "", api.WithHTTPClient(r.HTTP.Client())))(t)
	err := anon.Events(r.Ctx, func(api.StreamEvent) error { return nil })
	apiError(t, err, http.StatusUnauthorized, api.CodeUnauthenticated)

	first := follow(t, r.Ctx, r.Client)
	first.untilSynced()
	err = r.Client.Events(r.Ctx, func(api.StreamEvent) error { return nil })
	apiError(t, err, http.StatusServiceUnavailable, api.CodeUnavailable)
	req := must(http.NewRequestWithContext(r.Ctx, "GET", r.HTTP.URL+"/v1/events", nil))(t)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp := must(r.HTTP.Client().Do(req))(t)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("one stream too many: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	first.cancel()
	// The slot frees when the server notices the client went.
	errDone := errors.New("done")
	r.WaitFor("a stream opens again", func() (bool, error) {
		err := r.Client.Events(r.Ctx, func(e api.StreamEvent) error {
			if e.Name == api.EventSynced {
				return errDone
			}
			return nil
		})
		if errors.Is(err, errDone) {
			return true, nil
		}
		var e *api.Error
		if errors.As(err, &e) && e.Code == api.CodeUnavailable {
			return false, nil
		}
		return false, err
	})
	if st, _ := r.Do("GET", "/v1/events?since=1", "", "", tok); st != http.StatusBadRequest {
		t.Fatalf("a query parameter: %d", st)
	}
}

// TestEventsEndWhenServeEnds: Serve's context ending ends its open
// streams (the client sees the stream end, not an error), so the
// graceful shutdown does not wait for them and Serve returns nil.
func TestEventsEndWhenServeEnds(t *testing.T) {
	r := newRig(t, rigOptions{cfg: fastEvents})
	ln := must(api.Listen(r.Ctx, "127.0.0.1:0", "", "", ""))(t)
	ctx, stop := context.WithCancel(r.Ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- r.Server.Serve(ctx, ln) }()
	c := must(api.NewClient("http://"+ln.Addr().String(), ""))(t)
	synced := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- c.Events(r.Ctx, func(e api.StreamEvent) error {
			if e.Name == api.EventSynced {
				close(synced)
			}
			return nil
		})
	}()
	select {
	case <-synced:
	case err := <-ended:
		t.Fatalf("the stream ended before synced: %v", err)
	}
	stop()
	// A stream still open would hold the shutdown until ShutdownTimeout,
	// which Serve reports as an error.
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("the stream should end cleanly when Serve ends: %v", err)
	}
}

// flakyStore fails QueueDepths while failing is set.
type flakyStore struct {
	store.Store
	failing atomic.Bool
}

func (s *flakyStore) QueueDepths(ctx context.Context) (store.QueueDepths, error) {
	if s.failing.Load() {
		return store.QueueDepths{}, store.Errorf("queue depths", store.ErrClosed, "", "the test closed it")
	}
	return s.Store.QueueDepths(ctx)
}

// TestEventsPollFailure: a failing poll is one error event with the
// API's typed body (the rows stay as they were); once the store answers
// again the stream goes on with the changes.
func TestEventsPollFailure(t *testing.T) {
	st := &flakyStore{Store: memstore.New()}
	r := newRig(t, rigOptions{store: st, cfg: fastEvents})
	r.Create("p1", universe)
	f := follow(t, r.Ctx, r.Client)
	f.untilSynced()
	st.failing.Store(true)
	e := f.next("an error event", func(e api.StreamEvent) bool { return e.Name == api.EventError })
	var body api.Error
	if err := json.Unmarshal(e.Data, &body); err != nil || body.Code != api.CodeUnavailable || body.Message == "" {
		t.Fatalf("the error event: %s %v", e.Data, err)
	}
	st.failing.Store(false)
	r.Create("p2", universe)
	f.next("p2 after the store recovered", func(e api.StreamEvent) bool {
		v, ok := worldEvent(t, e)
		return ok && v.ID == "p2"
	})
}
