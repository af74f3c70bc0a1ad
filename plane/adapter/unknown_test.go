package adapter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// errLostAnswer is a store call whose write took effect and whose answer
// was lost (PostgreSQL terminated the connection after the commit).
var errLostAnswer = errors.New("connection reset by peer")

// lossySends is a fabric store whose Send writes, then loses the answer
// of its first lose calls; down makes every Send fail before writing.
type lossySends struct {
	adapter.FabricStore
	mu    sync.Mutex
	lose  int
	down  bool
	calls int
}

func (s *lossySends) Send(ctx context.Context, dest, id string, item store.InboxItem) (store.FabricResult, error) {
	s.mu.Lock()
	s.calls++
	down := s.down
	s.mu.Unlock()
	if down {
		return store.FabricResult{}, errors.New("connection refused")
	}
	r, err := s.FabricStore.Send(ctx, dest, id, item)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.lose > 0 {
		s.lose--
		return store.FabricResult{}, errLostAnswer
	}
	return r, err
}

func (s *lossySends) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// TestFabricLostSendAnswerIsNeverAnErrorReceipt: the store delivered the
// message and the answer was lost. Under a policy that never retries (the
// node's registration before), the sender must not be told the send
// failed: its receipt is a timeout (unknown), never an error.
func TestFabricLostSendAnswerIsNeverAnErrorReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.createWorld("w2")
		fs := &lossySends{FabricStore: e.st, lose: 1}
		p := newPool(t, e.st, adapter.Config{Worker: "fabric", Executor: e.ex}, adapter.Register(adapter.NewFabric(fs), adapter.NoRetry()))
		r := run(p)
		defer r.stop()
		h := e.publish(adapter.KindFabric, sendParams(t, "w2"))
		synctest.Wait()
		if n := len(fabricItems(t, e.st, "w2")); n != 1 {
			t.Fatalf("%d deliveries, want 1", n)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if got.Status != vocab.ReceiptTimeout {
			t.Fatalf("receipt %s after a lost answer, want timeout (unknown)", got.Status)
		}
	})
}

// TestFabricSendRetriesUntilKnown: the store loses the answers of two
// sends that took effect. With RetryUntilKnown (the node's registration)
// the adapter sends again until the store answers: one delivery, and one
// ok receipt (already_enqueued, with the first delivery's seq).
func TestFabricSendRetriesUntilKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.createWorld("w2")
		fs := &lossySends{FabricStore: e.st, lose: 2}
		p := newPool(t, e.st, adapter.Config{Worker: "fabric", Executor: e.ex}, adapter.Register(adapter.NewFabric(fs), adapter.RetryUntilKnown()))
		r := run(p)
		defer r.stop()
		h := e.publish(adapter.KindFabric, sendParams(t, "w2"))
		time.Sleep(time.Minute)
		synctest.Wait()
		delivered := fabricItems(t, e.st, "w2")
		if len(delivered) != 1 {
			t.Fatalf("%d deliveries, want 1", len(delivered))
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		b := fabricReceipt(t, got)
		if got.Status != vocab.ReceiptOK || b.Status != world.FabricStatusAlreadyEnqueued || b.MessageID != h {
			t.Fatalf("receipt %s %+v, want ok already_enqueued", got.Status, b)
		}
		if fs.calls != 3 {
			t.Fatalf("%d sends, want 3 (two answers lost)", fs.calls)
		}
	})
}

// TestFabricOutageLongerThanTheClaimIsRetriedUnderANewClaim: the store
// refuses every send for longer than a claim's budget. The pool does not
// guess a receipt: each failed send hands the claim back with its retry
// time (RetryLater), the effect is claimed again then, and the sender's
// one receipt is ok once the store is back.
func TestFabricOutageLongerThanTheClaimIsRetriedUnderANewClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.createWorld("w2")
		fs := &lossySends{FabricStore: e.st, down: true}
		const ttl = 10 * time.Second
		p := newPool(t, e.st, adapter.Config{Worker: "fabric", Executor: e.ex, ClaimTTL: ttl}, adapter.Register(adapter.NewFabric(fs), adapter.RetryUntilKnown()))
		r := run(p)
		defer r.stop()
		h := e.publish(adapter.KindFabric, sendParams(t, "w2"))
		time.Sleep(3 * ttl)
		synctest.Wait()
		if n := len(receipts(t, e.st, e.world)); n != 0 {
			t.Fatalf("%d receipts during the outage, want none", n)
		}
		if s := p.Stats(); s.Retried < 2 || s.Claimed != s.Retried {
			t.Fatalf("stats %+v: want each failed send handed back with a retry time and claimed again", s)
		}
		fs.setDown(false)
		time.Sleep(ttl)
		synctest.Wait()
		if n := len(fabricItems(t, e.st, "w2")); n != 1 {
			t.Fatalf("%d deliveries, want 1", n)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if b := fabricReceipt(t, got); got.Status != vocab.ReceiptOK || b.Status != world.FabricStatusOK {
			t.Fatalf("receipt %s %+v, want ok", got.Status, b)
		}
	})
}

// lossyCompletes is a pool's store whose Complete writes, then loses the
// answer of its first lose calls.
type lossyCompletes struct {
	adapter.Store
	mu   sync.Mutex
	lose int
}

func (s *lossyCompletes) Complete(ctx context.Context, h string, c vocab.Claim, r vocab.Receipt) (uint64, bool, error) {
	seq, dup, err := s.Store.Complete(ctx, h, c, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.lose > 0 {
		s.lose--
		return 0, false, errLostAnswer
	}
	return seq, dup, err
}

// TestFabricLostCompletionAnswerKeepsOneOkReceipt: the receipt was written
// and the answer of Complete lost, twice. The pool completes again (the
// store answers dup=true) and never replaces the receipt: one delivery,
// one ok receipt.
func TestFabricLostCompletionAnswerKeepsOneOkReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.createWorld("w2")
		ps := &lossyCompletes{Store: e.st, lose: 2}
		p := newPool(t, ps, adapter.Config{Worker: "fabric", Executor: e.ex}, adapter.Register(adapter.NewFabric(e.st), adapter.RetryUntilKnown()))
		r := run(p)
		defer r.stop()
		h := e.publish(adapter.KindFabric, sendParams(t, "w2"))
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(fabricItems(t, e.st, "w2")); n != 1 {
			t.Fatalf("%d deliveries, want 1", n)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if b := fabricReceipt(t, got); got.Status != vocab.ReceiptOK || b.Status != world.FabricStatusOK {
			t.Fatalf("receipt %s %+v, want ok", got.Status, b)
		}
		if s := p.Stats(); s.Attempts != 1 || s.Duplicates != 1 || s.Dropped != 0 {
			t.Fatalf("stats %+v: want one execution, its completion answered dup once the answers came back", s)
		}
	})
}

// TestPoolUnknownErrorGivesUpAsTimeout: an adapter whose attempts end in
// Unknown errors gets a timeout receipt once its retries are spent; a
// plain error is still an error receipt.
func TestPoolUnknownErrorGivesUpAsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(_ context.Context, it vocab.EffectItem, _ int) (effect.Result, error) {
			var p string
			if err := world.Decode(it.Params, &p); err != nil {
				return effect.Result{}, effect.Permanent(err)
			}
			if p == "unknown" {
				return effect.Result{}, effect.Unknown(errLostAnswer)
			}
			return effect.Result{}, errTransient
		}}
		pol := adapter.RetryPolicy{Attempts: 2, Base: time.Second, Max: time.Second}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, pol))
		r := run(p)
		defer r.stop()
		unknown := e.publish(kindTest, "unknown")
		failed := e.publish(kindTest, "failed")
		time.Sleep(time.Minute)
		got := oneReceiptEach(t, e.st, e.world, unknown, failed)
		if got[unknown].Status != vocab.ReceiptTimeout || got[failed].Status != vocab.ReceiptError {
			t.Fatalf("receipts: unknown %s, failed %s; want timeout, error", got[unknown].Status, got[failed].Status)
		}
		if fl := decodeFailure(t, got[unknown]); fl.Attempts != 2 {
			t.Fatalf("unknown's failure %+v, want 2 attempts", fl)
		}
	})
}

// TestOneSizeLimitFromAdapterToKernel: what a pool completes, what the store
// accepts as a receipt and what a world's kernel reads are one limit.
func TestOneSizeLimitFromAdapterToKernel(t *testing.T) {
	if adapter.MaxReceiptBytes != world.MaxInputBytes || store.MaxReceiptBytes != world.MaxInputBytes {
		t.Fatalf("pool %d, store %d, kernel %d: want one limit", adapter.MaxReceiptBytes, store.MaxReceiptBytes, world.MaxInputBytes)
	}
	if adapter.MaxBodyBytes >= adapter.MaxReceiptBytes {
		t.Fatalf("an http.request body of %d bytes leaves no room in a %d-byte receipt", adapter.MaxBodyBytes, adapter.MaxReceiptBytes)
	}
}

// TestPoolResultOverTheReceiptLimitIsDeliveredShort: an adapter's result too
// large for any receipt the world can read. The pool completes a short
// receipt that says so: an ok result (the effect happened) becomes a
// timeout (unknown to the world, never "failed"); an error stays an error.
// The store takes it, and the effect is done.
func TestPoolResultOverTheReceiptLimitIsDeliveredShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(_ context.Context, it vocab.EffectItem, _ int) (effect.Result, error) {
			var p string
			if err := world.Decode(it.Params, &p); err != nil {
				return effect.Result{}, effect.Permanent(err)
			}
			big := make([]byte, adapter.MaxReceiptBytes)
			if p == "ok" {
				return effect.OK(big), nil
			}
			return effect.Result{Status: vocab.ReceiptError, Body: big}, nil
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		ok := e.publish(kindTest, "ok")
		failed := e.publish(kindTest, "error")
		synctest.Wait()
		got := oneReceiptEach(t, e.st, e.world, ok, failed)
		if got[ok].Status != vocab.ReceiptTimeout || got[failed].Status != vocab.ReceiptError {
			t.Fatalf("receipts: ok result %s, error result %s; want timeout, error", got[ok].Status, got[failed].Status)
		}
		for _, h := range []string{ok, failed} {
			if fl := decodeFailure(t, got[h]); !strings.Contains(fl.Error, "over the") {
				t.Fatalf("failure %+v does not say why", fl)
			}
			if st, err := e.st.EffectStatus(e.ctx, h); err != nil || st.State != vocab.EffectDone {
				t.Fatalf("effect %+v (%v), want done", st, err)
			}
		}
	})
}
