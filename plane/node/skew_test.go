package node_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// cutStore is a node's view of a store it cannot reach for heartbeats
// and reaps once cut is set; every other call goes through.
type cutStore struct {
	store.Store
	cut atomic.Bool
}

func (s *cutStore) Heartbeat(ctx context.Context, worker string, capacity int, opts ...store.HeartbeatOption) (store.WorkerInfo, error) {
	if s.cut.Load() {
		return store.WorkerInfo{}, store.ErrUnavailable
	}
	return s.Store.Heartbeat(ctx, worker, capacity, opts...)
}

func (s *cutStore) ReapOrphans(ctx context.Context) (int, error) {
	if s.cut.Load() {
		return 0, store.ErrUnavailable
	}
	return s.Store.ReapOrphans(ctx)
}

// hanger serves http.request with a call that ends only when its context
// does, and records when it ran.
type hanger struct {
	mu         sync.Mutex
	runs       int
	start, end time.Time
}

func (h *hanger) Kinds() []string { return []string{world.KindHTTPRequest} }

func (h *hanger) Execute(ctx context.Context, _ vocab.EffectItem) (effect.Result, error) {
	h.mu.Lock()
	h.runs++
	h.start = time.Now()
	h.mu.Unlock()
	<-ctx.Done()
	h.mu.Lock()
	h.end = time.Now()
	h.mu.Unlock()
	return effect.Result{}, ctx.Err()
}

func (h *hanger) seen() (runs int, start, end time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs, h.start, h.end
}

// TestAFailoverClockAheadByLessThanMaxSkewCausesNoOverlap: a node executes
// an effect under its liveness promise, then loses the store (its
// heartbeats fail), and the store fails over to a server whose clock is
// ahead of the old one's by just under MaxSkew. That server judges the
// promise run out that much earlier, and its orphan reaper requeues the
// claim for another node. The node's own execution must have ended by
// then: no moment when the effect may run on two nodes. Before MaxSkew,
// the node's deadline (a twentieth of the TTL before the store's) ran on
// past the requeue by the clock jump less that twentieth.
func TestAFailoverClockAheadByLessThanMaxSkewCausesNoOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		// The default for a 2 s TTL: a tenth of it.
		const maxSkew = ttl / 10
		const jump = maxSkew - 10*time.Millisecond
		var ahead atomic.Int64
		st := memstore.New(memstore.WithClock(func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }))
		defer st.Close()
		create(t, ctx, st, []string{"p"})
		cs := &cutStore{Store: st}
		h := &hanger{}
		n, err := node.Start(ctx, node.Config{Worker: "a", Store: cs, Kernels: kernels(), LeaseTTL: ttl, ClaimTTL: 30 * time.Second,
			Adapters: []adapter.Registration{adapter.Register(h, adapter.NoRetry())}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = n.Stop(ctx) }()
		holders(t, ctx, st, []string{"p"}, "a")
		if _, err := n.Client().Send(ctx, "p", Pay{URL: "https://pay.example/"}, "pay"); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			if runs, _, _ := h.seen(); runs == 1 {
				break
			}
			if i == 1000 {
				t.Fatal("the payment never started")
			}
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}

		// The node loses the store; the store comes back on a server
		// whose clock is ahead.
		cs.cut.Store(true)
		ahead.Store(int64(jump))
		var reapAt time.Time
		for range 1000 {
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
			k, err := st.ReapOrphans(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 {
				reapAt = time.Now()
				break
			}
		}
		if reapAt.IsZero() {
			t.Fatal("the store never requeued the silent node's claim")
		}
		runs, start, end := h.seen()
		if runs != 1 {
			t.Fatalf("the node executed the effect %d times, want 1", runs)
		}
		if end.IsZero() {
			t.Fatalf("the node's execution (from %v) still ran when the store requeued its claim at %v: two nodes may run it at once",
				start.Format(time.StampMilli), reapAt.Format(time.StampMilli))
		}
		if end.After(reapAt) {
			t.Fatalf("the node's execution (from %v) ended at %v, after the store requeued its claim at %v: two nodes may run it at once",
				start.Format(time.StampMilli), end.Format(time.StampMilli), reapAt.Format(time.StampMilli))
		}
	})
}

// TestMaxSkewOfHalfTheTTLIsRefused: a skew allowance of half the promise
// or more would leave a promise that runs out before the beat that renews
// it; Start refuses it as invalid.
func TestMaxSkewOfHalfTheTTLIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		defer st.Close()
		_, err := node.Start(ctx, node.Config{Worker: "a", Store: st, Kernels: kernels(), LeaseTTL: ttl, MaxSkew: ttl / 2})
		if !errors.Is(err, plane.ErrInvalid) {
			t.Fatalf("Start with MaxSkew of half the TTL: %v, want plane.ErrInvalid", err)
		}
		n, err := node.Start(ctx, node.Config{Worker: "a", Store: st, Kernels: kernels(), LeaseTTL: ttl, MaxSkew: ttl/2 - time.Millisecond})
		if err != nil {
			t.Fatalf("Start with MaxSkew just below half the TTL: %v", err)
		}
		_ = n.Stop(ctx)
	})
}
