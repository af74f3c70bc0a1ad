package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// payer serves http.request in place of the built-in adapter: each call is
// recorded, then waits until release is closed (the call completes) or its
// context ends.
type payer struct {
	release chan struct{}
	mu      sync.Mutex
	calls   []payCall
}

type payCall struct {
	worker string
	at     time.Time
}

func (p *payer) Kinds() []string { return []string{world.KindHTTPRequest} }

func (p *payer) Execute(ctx context.Context, it vocab.EffectItem) (effect.Result, error) {
	p.mu.Lock()
	p.calls = append(p.calls, payCall{worker: it.ClaimedBy, at: time.Now()})
	p.mu.Unlock()
	select {
	case <-p.release:
		return effect.OK("paid"), nil
	case <-ctx.Done():
		return effect.Result{}, ctx.Err()
	}
}

func (p *payer) seen() []payCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]payCall(nil), p.calls...)
}

const stopClaimTTL = 5 * time.Second

func startPaying(t *testing.T, ctx context.Context, st store.Store, worker string, p *payer) *node.Node {
	t.Helper()
	n, err := node.Start(ctx, node.Config{Worker: worker, Store: st, Kernels: kernels(), LeaseTTL: ttl, ClaimTTL: stopClaimTTL,
		Adapters: []adapter.Registration{adapter.Register(p, adapter.NoRetry())}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	return n
}

// payAndWait sends a Pay to world p on n and waits until the payer runs.
func payAndWait(t *testing.T, ctx context.Context, st store.Store, n *node.Node, p *payer) (intent string) {
	t.Helper()
	if _, err := n.Client().Send(ctx, "p", Pay{URL: "https://pay.example/"}, "pay"); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if len(p.seen()) == 1 {
			items, err := st.ListEffects(ctx, "p", 0, 10)
			if err != nil || len(items) != 1 {
				t.Fatalf("effects %+v (%v)", items, err)
			}
			return items[0].IntentHash
		}
	}
	t.Fatal("the payment never started")
	return ""
}

func paid(t *testing.T, ctx context.Context, n *node.Node) []string {
	t.Helper()
	snap, err := n.Client().State(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ State tally }
	if err := world.Decode(snap.State, &s); err != nil {
		t.Fatal(err)
	}
	return s.State.Paid
}

// TestGracefulStopCompletesTheEffectInFlight: a payment is executing when
// the node is asked to stop. Stop waits for it, delivers its receipt, and
// only then returns; a node started afterwards never runs it again, not
// even once the claim's TTL has long passed. (Before, the stop cancelled
// the call, dropped its result, and the reaper handed the effect to the
// next node: a second payment.)
func TestGracefulStopCompletesTheEffectInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		create(t, ctx, st, []string{"p"})
		pa := &payer{release: make(chan struct{})}
		a := startPaying(t, ctx, st, "a", pa)
		holders(t, ctx, st, []string{"p"}, "a")
		h := payAndWait(t, ctx, st, a, pa)

		stopped := make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			stopped <- a.Stop(sctx)
		}()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while the payment was executing", err)
		default:
		}
		close(pa.release)
		if err := <-stopped; err != nil {
			t.Fatalf("Stop: %v", err)
		}
		es, err := st.EffectStatus(ctx, h)
		if err != nil || es.State != vocab.EffectDone || es.Receipt == nil || es.Receipt.Status != vocab.ReceiptOK {
			t.Fatalf("after the stop: effect %+v (%v), want done with an ok receipt", es, err)
		}

		pb := &payer{release: make(chan struct{})}
		close(pb.release)
		b := startPaying(t, ctx, st, "b", pb)
		holders(t, ctx, st, []string{"p"}, "b")
		time.Sleep(3 * stopClaimTTL)
		synctest.Wait()
		if n := len(pa.seen()) + len(pb.seen()); n != 1 {
			t.Fatalf("the payment ran %d times, want once", n)
		}
		if got := paid(t, ctx, b); len(got) != 1 || got[0] != string(vocab.ReceiptOK) {
			t.Fatalf("the world consumed receipts %v, want one ok", got)
		}
	})
}

// TestGracefulStopReleasesWhatItCannotFinish: a payment still executing
// when the stop's time runs out is cancelled and its claim released at
// once: Stop says so (its error), the effect is pending again at once, and
// a node started afterwards runs it well before the claim's TTL would have
// let the reaper requeue it.
func TestGracefulStopReleasesWhatItCannotFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		create(t, ctx, st, []string{"p"})
		pa := &payer{} // never completes: only its context ends it
		a := startPaying(t, ctx, st, "a", pa)
		holders(t, ctx, st, []string{"p"}, "a")
		h := payAndWait(t, ctx, st, a, pa)

		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := a.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want the stop's deadline", err)
		}
		es, err := st.EffectStatus(ctx, h)
		if err != nil || es.State != vocab.EffectPending {
			t.Fatalf("after the stop: effect %+v (%v), want pending again", es, err)
		}
		if s := a.Pool().Stats(); s.Released != 1 || s.Dropped != 0 {
			t.Fatalf("pool stats %+v, want one release", s)
		}

		pb := &payer{release: make(chan struct{})}
		close(pb.release)
		b := startPaying(t, ctx, st, "b", pb)
		holders(t, ctx, st, []string{"p"}, "b")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		first, again := pa.seen(), pb.seen()
		if len(first) != 1 || len(again) != 1 {
			t.Fatalf("executions: %d on a, %d on b; want one each", len(first), len(again))
		}
		if d := again[0].at.Sub(first[0].at); d >= stopClaimTTL {
			t.Fatalf("b ran the payment %v after a, want sooner than the claim TTL %v", d, stopClaimTTL)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := paid(t, ctx, b); len(got) != 1 || got[0] != string(vocab.ReceiptOK) {
			t.Fatalf("the world consumed receipts %v, want one ok", got)
		}
	})
}
