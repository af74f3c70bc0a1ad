package adapter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// runReaper runs the effect reaper until the returned stop is called.
func runReaper(e *env, st store.Store, ttl time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reaper.Run(ctx, reaper.Config{Executor: e.ex}, reaper.Effects(st, ttl)) }()
	return func() { cancel(); <-done }
}

// TestDuplicateDispatchTwoPoolsOneReceiptPerIntent: two pools race on the
// same queue; every intent gets exactly one terminal receipt, each claim
// is executed at most once, and no effect is executed by both pools.
func TestDuplicateDispatchTwoPoolsOneReceiptPerIntent(t *testing.T) {
	onBackends(t, func(t *testing.T, k *kit) {
		f := &fake{do: func(ctx context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			if err := actor.Sleep(ctx, k.ex, 20*time.Millisecond); err != nil {
				return effect.Result{}, err
			}
			return effect.OK(nil), nil
		}}
		var hs []string
		for i := 0; i < 40; i++ {
			hs = append(hs, k.publish(kindTest, i))
		}
		a := newPool(t, k.st, adapter.Config{Worker: "pool-a", Executor: k.ex, Concurrency: 4}, adapter.Register(f, adapter.RetryPolicy{}))
		b := newPool(t, k.st, adapter.Config{Worker: "pool-b", Executor: k.ex, Concurrency: 4}, adapter.Register(f, adapter.RetryPolicy{}))
		ra, rb := run(a), run(b)
		k.waitFor("40 receipts", time.Minute, func() bool {
			// and every Complete returned to its pool, so that stopping
			// the pools cancels none of them
			return len(receipts(t, k.st, k.world)) >= 40 && a.Stats().Completed+b.Stats().Completed >= 40
		})
		ra.stop()
		rb.stop()
		oneReceiptEach(t, k.st, k.world, hs...)
		calls := f.snapshot()
		atMostOncePerClaim(t, calls)
		if len(calls) != 40 {
			t.Fatalf("%d executions for 40 intents and no expiry", len(calls))
		}
		sa, sb := a.Stats(), b.Stats()
		if sa.Completed+sb.Completed != 40 || sa.Claimed+sb.Claimed != 40 {
			t.Fatalf("stats a=%+v b=%+v", sa, sb)
		}
		if k.backend == "memstore" && (sa.Claimed == 0 || sb.Claimed == 0) {
			// In the bubble both pools are certain to race; on a real
			// store one may win every claim, which proves nothing less.
			t.Fatalf("one pool claimed nothing: a=%+v b=%+v", sa, sb)
		}
	})
}

// slowCompletes is a pool's store whose Complete reaches the store late
// (a slow network path): it waits delay on the clock before forwarding.
type slowCompletes struct {
	adapter.Store
	delay time.Duration
}

func (s slowCompletes) Complete(ctx context.Context, h string, c vocab.Claim, r vocab.Receipt) (uint64, bool, error) {
	time.Sleep(s.delay)
	return s.Store.Complete(ctx, h, c, r)
}

// TestClaimExpiryReapReclaimLoserGetsClaimLost: pool A finishes in time
// and sends its completion before its claim expires, but the write reaches
// the store late, after the reaper requeued the effect and pool B claimed
// it: the store refuses it with ErrClaimLost, A drops its result, B
// completes, and the world gets one receipt, B's. (A result that is ready
// only after its claim expired never reaches the store:
// TestPoolDropsAResultMadeAfterItsClaimExpired.)
func TestClaimExpiryReapReclaimLoserGetsClaimLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		const ttl = 10 * time.Second
		slow := func(d time.Duration, who string) *fake {
			return &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
				time.Sleep(d)
				return effect.OK(who), nil
			}}
		}
		// A (one slot, so it cannot reclaim while stuck) claims at 0,
		// answers at 8s and its completion reaches the store at 16s; its
		// claim expires at 10s, when the reaper requeues the effect and B
		// claims it; B answers at 18s.
		fa, fb := slow(8*time.Second, "a"), slow(8*time.Second, "b")
		h := e.publish(kindTest, "x")
		a := newPool(t, slowCompletes{e.st, 8 * time.Second}, adapter.Config{Worker: "pool-a", Executor: e.ex, ClaimTTL: ttl, Concurrency: 1}, adapter.Register(fa, adapter.RetryPolicy{}))
		ra := run(a)
		synctest.Wait()
		b := newPool(t, e.st, adapter.Config{Worker: "pool-b", Executor: e.ex, ClaimTTL: ttl}, adapter.Register(fb, adapter.RetryPolicy{}))
		rb := run(b)
		stopReaper := runReaper(e, e.st, ttl)
		time.Sleep(10 * ttl)
		stopReaper()
		ra.stop()
		rb.stop()
		if s := a.Stats(); s.ClaimLost != 1 || s.Completed != 0 {
			t.Fatalf("loser stats %+v, want one ErrClaimLost", s)
		}
		if s := b.Stats(); s.Completed != 1 {
			t.Fatalf("winner stats %+v", s)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		var who string
		if err := got.Decode(&who); err != nil || who != "b" {
			t.Fatalf("receipt from %q (%v), want b's", who, err)
		}
		atMostOncePerClaim(t, append(fa.snapshot(), fb.snapshot()...))
		if st, _ := e.st.EffectStatus(e.ctx, h); st.Attempts != 2 {
			t.Fatalf("%d claims, want 2", st.Attempts)
		}
	})
}

// TestLateCompletionAfterWinnerIsDuplicate: as above, but A's completion
// reaches the store after B's has: the store answers dup=true, A drops its
// result, and the world still has one receipt, B's.
func TestLateCompletionAfterWinnerIsDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		const ttl = 10 * time.Second
		fa := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			time.Sleep(8 * time.Second)
			return effect.OK("a"), nil
		}}
		fb := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			return effect.OK("b"), nil
		}}
		h := e.publish(kindTest, "x")
		a := newPool(t, slowCompletes{e.st, 4 * ttl}, adapter.Config{Worker: "pool-a", Executor: e.ex, ClaimTTL: ttl, Concurrency: 1}, adapter.Register(fa, adapter.RetryPolicy{}))
		ra := run(a)
		synctest.Wait()
		b := newPool(t, e.st, adapter.Config{Worker: "pool-b", Executor: e.ex, ClaimTTL: ttl}, adapter.Register(fb, adapter.RetryPolicy{}))
		rb := run(b)
		stopReaper := runReaper(e, e.st, ttl)
		time.Sleep(10 * ttl)
		stopReaper()
		ra.stop()
		rb.stop()
		if s := a.Stats(); s.Duplicates != 1 || s.Completed != 0 {
			t.Fatalf("late pool stats %+v, want one duplicate completion", s)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		var who string
		if err := got.Decode(&who); err != nil || who != "b" {
			t.Fatalf("receipt from %q (%v), want b's", who, err)
		}
	})
}

// crashRun is one run of the crash matrix at an adapter boundary: the
// first pool's process dies at the boundary (its store handle crashes);
// it is stopped, the store restarted, and a second pool with the effect
// reaper runs on the new handle. ext counts external calls, per claim.
func crashRun(t *testing.T, boundary string) {
	onBackends(t, func(t *testing.T, k *kit) {
		var st *testrig.Handle
		var mu sync.Mutex
		crashed := false
		crash := func() {
			mu.Lock()
			defer mu.Unlock()
			if !crashed {
				crashed = true
				st.Crash()
			}
		}
		var ext []call // external calls made
		hook := func(op string) error {
			if boundary == "after external call before receipt" && op == "complete_many" {
				crash()
				return errors.New("process died")
			}
			return nil
		}
		st = k.handle(hook)
		f := &fake{do: func(_ context.Context, item vocab.EffectItem, _ int) (effect.Result, error) {
			if boundary == "after effect claim before external call" {
				mu.Lock()
				first := !crashed
				mu.Unlock()
				if first {
					crash()
					return effect.Result{}, errors.New("process died")
				}
			}
			mu.Lock()
			ext = append(ext, call{hash: item.IntentHash, attempt: item.Attempt, worker: item.ClaimedBy})
			mu.Unlock()
			return effect.OK("done"), nil
		}}
		const ttl = 10 * time.Second
		h := k.publish(kindTest, "x")
		p1 := newPool(t, st, adapter.Config{Worker: "pool-1", Executor: k.ex, ClaimTTL: ttl}, adapter.Register(f, adapter.NoRetry()))
		r1 := run(p1)
		k.waitFor("the pool to reach the boundary", time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return crashed
		})
		r1.stop()
		st2 := k.handle(nil)
		if n := len(receipts(t, st2, k.world)); n != 0 {
			t.Fatalf("%d receipts after the crash", n)
		}
		p2 := newPool(t, st2, adapter.Config{Worker: "pool-2", Executor: k.ex, ClaimTTL: ttl}, adapter.Register(f, adapter.NoRetry()))
		r2 := run(p2)
		stopReaper := k.reaper(st2, ttl)
		k.advance(ttl) // the dead pool's claim expires; the reaper requeues it
		// The receipt is visible before Complete has returned to the pool:
		// wait for both, or stopping the pool could cancel that return.
		k.waitFor("the receipt", 3*ttl, func() bool {
			return len(receipts(t, st2, k.world)) > 0 && p2.Stats().Completed > 0
		})
		stopReaper()
		r2.stop()
		got := oneReceiptEach(t, st2, k.world, h)[h]
		if got.Status != vocab.ReceiptOK {
			t.Fatalf("receipt %s", got.Status)
		}
		atMostOncePerClaim(t, f.snapshot())
		mu.Lock()
		defer mu.Unlock()
		atMostOncePerClaim(t, ext)
		wantExt := 1 // the crash came before the external call
		if boundary == "after external call before receipt" {
			wantExt = 2 // at least once: the second claim calls again
		}
		if len(ext) != wantExt {
			t.Fatalf("%d external calls, want %d", len(ext), wantExt)
		}
		if s := p2.Stats(); s.Completed != 1 {
			t.Fatalf("restarted pool stats %+v", s)
		}
		if st, _ := st2.EffectStatus(k.ctx, h); st.Attempts != 2 || st.State != vocab.EffectDone {
			t.Fatalf("effect %+v, want done after 2 claims", st)
		}
	})
}

// TestCrashAfterEffectClaimBeforeExternalCall is crash-matrix boundary 4.
func TestCrashAfterEffectClaimBeforeExternalCall(t *testing.T) {
	crashRun(t, "after effect claim before external call")
}

// TestCrashAfterExternalCallBeforeReceiptEnqueue is crash-matrix boundary 5.
func TestCrashAfterExternalCallBeforeReceiptEnqueue(t *testing.T) {
	crashRun(t, "after external call before receipt")
}
