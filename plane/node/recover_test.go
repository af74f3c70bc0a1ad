package node_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
)

// recoverClaimTTL is far above the lease TTL, so that a recovery inside
// the lease TTL can only be the orphan reaper's, never the claim's expiry.
const recoverClaimTTL = 30 * ttl

func startRecovering(t *testing.T, ctx context.Context, st store.Store, worker string, p *payer) *node.Node {
	t.Helper()
	n, err := node.Start(ctx, node.Config{Worker: worker, Store: st, Kernels: kernels(), LeaseTTL: ttl, ClaimTTL: recoverClaimTTL,
		Adapters: []adapter.Registration{adapter.Register(p, adapter.NoRetry())}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	return n
}

// payment is a payment executing on node a, whose payer pa holds it until
// released, with node b standing by, whose payer pb answers at once.
type payment struct {
	ctx    context.Context
	st     *memstore.Store
	a      *node.Node
	pa, pb *payer
	h      string // the payment's intent hash
}

// payingWithAStandby sets a payment up; call it inside a synctest bubble.
func payingWithAStandby(t *testing.T) payment {
	t.Helper()
	ctx := context.Background()
	st := memstore.New()
	create(t, ctx, st, []string{"p"})
	pa := &payer{release: make(chan struct{})}
	a := startRecovering(t, ctx, st, "a", pa)
	holders(t, ctx, st, []string{"p"}, "a")
	h := payAndWait(t, ctx, st, a, pa)
	pb := &payer{release: make(chan struct{})}
	close(pb.release)
	startRecovering(t, ctx, st, "b", pb)
	return payment{ctx: ctx, st: st, a: a, pa: pa, pb: pb, h: h}
}

// waitCalls advances virtual time in small steps until p has seen want
// calls or limit has passed, and returns the time it took.
func waitCalls(t *testing.T, p *payer, want int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) <= limit {
		synctest.Wait()
		if len(p.seen()) >= want {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestKilledNodesEffectRunsAgainWithinTheLeaseTTL: a payment is executing
// on node a when a is killed (no stop, nothing released). Node b runs it
// again once a's heartbeat promise (the lease TTL) has run out, plus at
// most the orphan reaper's period: in virtual time, within lease TTL + 1 s
// and long before the claim's own TTL, where it waited before. The
// payment is then recorded once, by b's claim.
func TestKilledNodesEffectRunsAgainWithinTheLeaseTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := payingWithAStandby(t)
		ctx, st, a, pa, pb, h := f.ctx, f.st, f.a, f.pa, f.pb, f.h

		a.Kill(ctx)
		took := waitCalls(t, pb, 1, recoverClaimTTL)
		if len(pb.seen()) != 1 {
			t.Fatalf("b never ran the killed node's payment within %v", recoverClaimTTL)
		}
		if bound := ttl + reaper.OrphanPeriod(ttl) + 100*time.Millisecond; took > bound || took > ttl+time.Second {
			t.Fatalf("b ran the payment %v after the kill, want within %v (lease TTL + reaper period) and lease TTL + 1s", took, bound)
		}
		t.Logf("the killed node's effect ran again %v after the kill (lease TTL %v, claim TTL %v)", took, ttl, recoverClaimTTL)
		if pb.seen()[0].worker != "b/effects" {
			t.Fatalf("the second run was claimed by %q", pb.seen()[0].worker)
		}
		waitFor(t, func() bool {
			es, err := st.EffectStatus(ctx, h)
			return err == nil && es.State == vocab.EffectDone
		})
		es, _ := st.EffectStatus(ctx, h)
		if es.Attempts != 2 || es.Receipt == nil || es.Receipt.Status != vocab.ReceiptOK {
			t.Fatalf("effect %+v, want done by the second attempt with an ok receipt", es)
		}
		// The dead claim can never record its result now.
		_, _, err := st.Complete(ctx, h, vocab.Claim{Worker: "a/effects", Attempt: 1}, vocab.Receipt{Status: vocab.ReceiptOK})
		if err != nil {
			t.Fatalf("late Complete by the killed claim: %v, want the first completion's dup answer", err)
		}
		if n := len(pa.seen()) + len(pb.seen()); n != 2 {
			t.Fatalf("the payment ran %d times, want twice (once on each node)", n)
		}
	})
}

// TestSlowNodesEffectIsNotRequeued: a payment runs three lease TTLs on a
// node that is alive and heartbeating. No other node runs it: the orphan
// reaper requeues only the claims of a process the store knows dead.
func TestSlowNodesEffectIsNotRequeued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := payingWithAStandby(t)
		ctx, st, pa, pb, h := f.ctx, f.st, f.pa, f.pb, f.h

		if took := waitCalls(t, pb, 1, 3*ttl); len(pb.seen()) != 0 {
			t.Fatalf("b ran the slow node's payment %v in, while a was alive", took)
		}
		close(pa.release)
		waitFor(t, func() bool {
			es, err := st.EffectStatus(ctx, h)
			return err == nil && es.State == vocab.EffectDone
		})
		es, _ := st.EffectStatus(ctx, h)
		if es.Attempts != 1 || len(pa.seen())+len(pb.seen()) != 1 {
			t.Fatalf("effect %+v after %d runs, want done by its only attempt", es, len(pa.seen())+len(pb.seen()))
		}
	})
}

// TestStoppedNodeRetiresItsIncarnation: after a planned stop the store
// knows the node's incarnation dead at once, and refuses its claims.
func TestStoppedNodeRetiresItsIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		create(t, ctx, st, []string{"p"})
		pa := &payer{release: make(chan struct{})}
		close(pa.release)
		a := startRecovering(t, ctx, st, "a", pa)
		holders(t, ctx, st, []string{"p"}, "a")
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		now, _ := st.Now(ctx)
		ws, err := st.ListWorkers(ctx)
		if err != nil || len(ws) != 1 || ws[0].Incarnation != a.Incarnation() || !ws[0].Dead(now) {
			t.Fatalf("workers %+v (%v), want a's incarnation dead", ws, err)
		}
		_, err = st.Claim(ctx, "a/effects", []string{"http.request"}, 1, time.Second, store.ClaimFor("a", a.Incarnation()))
		if err == nil {
			t.Fatal("a claim for the stopped incarnation was accepted")
		}
	})
}

// waitFor advances virtual time until cond holds, failing after a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 6000 {
		synctest.Wait()
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition never held")
}
