package adapter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// span is one execution of an effect, on the bubble's clock.
type span struct {
	node       string
	start, end time.Time
}

// spans records executions and checks that none of one effect overlap.
type spans struct {
	mu  sync.Mutex
	all []span
}

func (s *spans) add(x span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, x)
}

func (s *spans) noOverlap(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.all {
		for _, b := range s.all[i+1:] {
			if a.start.Before(b.end) && b.start.Before(a.end) {
				t.Fatalf("one effect ran on %s (%v to %v) and on %s (%v to %v) at once",
					a.node, a.start.Format(time.StampMilli), a.end.Format(time.StampMilli),
					b.node, b.start.Format(time.StampMilli), b.end.Format(time.StampMilli))
			}
		}
	}
}

// TestNoExecutionOutlivesItsNodesLivenessPromise: node A claims an effect
// on its liveness promise and then cannot reach the store (its heartbeats
// stop) while the execution runs. The store's orphan reaper requeues the
// claim once the promise lapses by the store's clock, and node B runs the
// effect. A's execution must have ended before that (cancelled at A's own
// liveness deadline), deliver nothing, and the two executions never
// overlap. Before the bound, A's execution ran on for its claim's budget
// (27 s of a 30 s claim), long after B had started the same effect.
func TestNoExecutionOutlivesItsNodesLivenessPromise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		ctx := context.Background()
		const ttl = 10 * time.Second
		var rec spans

		// Node A: one heartbeat, then silence (its store is unreachable).
		sent := time.Now()
		if _, err := e.st.Heartbeat(ctx, "node-a", 1, store.AliveAs("a1", ttl)); err != nil {
			t.Fatal(err)
		}
		var aDeadline atomic.Int64
		aDeadline.Store(sent.Add(ttl - ttl/20).UnixNano())
		fa := &fake{do: func(ctx context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			start := time.Now()
			<-ctx.Done() // a long call: it ends only when cancelled
			rec.add(span{"node-a", start, time.Now()})
			return effect.Result{}, ctx.Err()
		}}
		pa := newPool(t, e.st, adapter.Config{Worker: "node-a/effects", Node: "node-a", Incarnation: "a1", Executor: e.ex,
			ClaimTTL: 30 * time.Second, Liveness: func() time.Time { return time.Unix(0, aDeadline.Load()) }, LivenessMin: ttl / 4},
			adapter.Register(fa, adapter.RetryPolicy{Attempts: 1}))
		ra := run(pa)
		defer ra.stop()
		h := e.publish(kindTest, "charge")
		synctest.Wait()
		if n := len(fa.snapshot()); n != 1 {
			t.Fatalf("node A executed %d times, want 1", n)
		}

		// Node B heartbeats and claims; the store's orphan reaper runs
		// every second, as a node's does.
		fb := &fake{do: func(_ context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			now := time.Now()
			rec.add(span{"node-b", now, now.Add(time.Nanosecond)})
			return effect.OK("charged"), nil
		}}
		pb := newPool(t, e.st, adapter.Config{Worker: "node-b/effects", Node: "node-b", Incarnation: "b1", Executor: e.ex,
			ClaimTTL: 30 * time.Second}, adapter.Register(fb, adapter.RetryPolicy{Attempts: 1}))
		rb := run(pb)
		defer rb.stop()
		for range 40 {
			if _, err := e.st.Heartbeat(ctx, "node-b", 1, store.AliveAs("b1", ttl)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.ReapOrphans(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}

		rec.noOverlap(t)
		if n := len(fb.snapshot()); n != 1 {
			t.Fatalf("node B executed %d times, want 1 (after the reaper requeued A's claim)", n)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		var body string
		if err := got.Decode(&body); err != nil || body != "charged" {
			t.Fatalf("receipt %q (%v), want node B's", body, err)
		}
		if s := pa.Stats(); s.Completed != 0 || s.Retried != 0 || s.Dropped != 1 {
			t.Fatalf("node A's pool: %+v, want its cut execution dropped (no receipt, no retry)", s)
		}
	})
}

// TestAHeartbeatKeepsTheExecutionGoing: while the promise is renewed, an
// execution longer than one promise is not cut.
func TestAHeartbeatKeepsTheExecutionGoing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		const ttl = 10 * time.Second
		var deadline atomic.Int64
		renew := func() { deadline.Store(time.Now().Add(ttl - ttl/20).UnixNano()) }
		renew()
		f := &fake{do: func(ctx context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			select {
			case <-time.After(20 * time.Second):
				return effect.OK("done"), nil
			case <-ctx.Done():
				return effect.Result{}, ctx.Err()
			}
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "node-a/effects", Executor: e.ex, ClaimTTL: 30 * time.Second,
			Liveness: func() time.Time { return time.Unix(0, deadline.Load()) }, LivenessMin: ttl / 4},
			adapter.Register(f, adapter.RetryPolicy{Attempts: 1}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "long")
		for range 25 {
			time.Sleep(time.Second)
			renew()
			synctest.Wait()
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if got.Status != vocab.ReceiptOK {
			t.Fatalf("receipt %s, want ok: a renewed promise must not cut the execution", got.Status)
		}
	})
}

// TestLapseCancelsEveryExecutionAtOnce: a refused heartbeat (Lapse) ends
// the executions at once, with no receipt and no retry, and no claim round
// starts on the void promise.
func TestLapseCancelsEveryExecutionAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var deadline atomic.Int64
		deadline.Store(time.Now().Add(time.Hour).UnixNano())
		var cut atomic.Int64
		f := &fake{do: func(ctx context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			<-ctx.Done()
			cut.Add(1)
			return effect.Result{}, ctx.Err()
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "node-a/effects", Executor: e.ex, ClaimTTL: 30 * time.Second,
			Liveness: func() time.Time { return time.Unix(0, deadline.Load()) }, LivenessMin: time.Second},
			adapter.Register(f, adapter.RetryPolicy{Attempts: 1}))
		r := run(p)
		defer r.stop()
		e.publish(kindTest, "a")
		e.publish(kindTest, "b")
		synctest.Wait()
		deadline.Store(-1) // the host's mark of a refused heartbeat
		p.Lapse()
		synctest.Wait()
		if n := cut.Load(); n != 2 {
			t.Fatalf("%d executions cut, want both", n)
		}
		e.publish(kindTest, "c")
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(f.snapshot()); n != 2 {
			t.Fatalf("%d executions, want 2: no claim on a void promise", n)
		}
		if s := p.Stats(); s.Completed != 0 || s.Retried != 0 || s.Dropped != 2 {
			t.Fatalf("stats %+v, want both dropped", s)
		}
	})
}
