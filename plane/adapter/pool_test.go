package adapter_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
)

func TestPoolCompletesTypedReceiptInBand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{}))
		r := run(p)
		h := e.publish(kindTest, map[string]int{"n": 1})
		synctest.Wait()
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if got.Status != vocab.ReceiptOK || got.Kind != kindTest || got.Retry != 0 {
			t.Fatalf("receipt %+v", got)
		}
		var body map[string]string
		if err := got.Decode(&body); err != nil || body["echo"] != h[:8] {
			t.Fatalf("body %v (%v)", body, err)
		}
		st, err := e.st.EffectStatus(e.ctx, h)
		if err != nil || st.State != vocab.EffectDone || st.Receipt.Status != vocab.ReceiptOK {
			t.Fatalf("effect status %+v (%v)", st, err)
		}
		if err := r.stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
		if s := p.Stats(); s.Claimed != 1 || s.Attempts != 1 || s.Completed != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestPoolRetriesWithBackoffBeforeReceipt: two transient failures, then
// success; the attempts are 1s and then 2s apart in virtual time, and the
// world gets one ok receipt, after the third attempt.
func TestPoolRetriesWithBackoffBeforeReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(_ context.Context, _ vocab.EffectItem, n int) (effect.Result, error) {
			if n < 3 {
				return effect.Result{}, errTransient
			}
			return effect.OK("done"), nil
		}}
		pol := adapter.RetryPolicy{Attempts: 5, Base: time.Second, Max: time.Minute}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, pol))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		synctest.Wait()
		if n := len(receipts(t, e.st, e.world)); n != 0 {
			t.Fatalf("%d receipts before the retries ran", n)
		}
		time.Sleep(time.Hour)
		calls := f.snapshot()
		if len(calls) != 3 {
			t.Fatalf("%d attempts, want 3", len(calls))
		}
		if d1, d2 := calls[1].at.Sub(calls[0].at), calls[2].at.Sub(calls[1].at); d1 != time.Second || d2 != 2*time.Second {
			t.Fatalf("backoff delays %v, %v; want 1s, 2s", d1, d2)
		}
		if calls[0].attempt != 1 || calls[1].attempt != 2 || calls[2].attempt != 3 {
			t.Fatalf("claims %d, %d, %d: want each retry a claim of its own, after its backoff in the store", calls[0].attempt, calls[1].attempt, calls[2].attempt)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if got.Status != vocab.ReceiptOK {
			t.Fatalf("status %s", got.Status)
		}
	})
}

// TestPoolBackoffJitterIsBoundedAndSeeded: with jitter, each delay lies in
// [d·(1-Jitter), d], and the same executor seed gives the same delays.
func TestPoolBackoffJitterIsBoundedAndSeeded(t *testing.T) {
	delays := func() []time.Duration {
		var out []time.Duration
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t)
			f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
				return effect.Result{}, errTransient
			}}
			pol := adapter.RetryPolicy{Attempts: 6, Base: time.Second, Max: 8 * time.Second, Jitter: 0.5}
			p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, ClaimTTL: time.Hour}, adapter.Register(f, pol))
			r := run(p)
			defer r.stop()
			h := e.publish(kindTest, "x")
			time.Sleep(time.Hour)
			calls := f.snapshot()
			if len(calls) != 6 {
				t.Fatalf("%d attempts, want 6", len(calls))
			}
			for i := 1; i < len(calls); i++ {
				d := calls[i].at.Sub(calls[i-1].at)
				full := min(time.Second<<(i-1), 8*time.Second)
				if d < full/2 || d > full {
					t.Fatalf("delay %d is %v, outside [%v, %v]", i, d, full/2, full)
				}
				out = append(out, d)
			}
			got := oneReceiptEach(t, e.st, e.world, h)[h]
			if fl := decodeFailure(t, got); got.Status != vocab.ReceiptError || fl.Attempts != 6 || !strings.Contains(fl.Error, errTransient.Error()) {
				t.Fatalf("receipt %s %+v", got.Status, fl)
			}
		})
		return out
	}
	a, b := delays(), delays()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different delays: %v vs %v", a, b)
		}
	}
}

func TestPoolPermanentErrorIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			return effect.Result{}, effect.Permanent(errors.New("card declined"))
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(time.Minute)
		if n := len(f.snapshot()); n != 1 {
			t.Fatalf("%d attempts, want 1", n)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if fl := decodeFailure(t, got); got.Status != vocab.ReceiptError || fl.Error != "card declined" || fl.Attempts != 1 {
			t.Fatalf("receipt %s %+v", got.Status, fl)
		}
	})
}

// TestPoolBudgetExhaustedIsRetriedThenTimeoutReceipt: an adapter that
// never answers is cut off at the claim's budget (ClaimTTL less a tenth),
// before the claim expires; the execution is retried while the policy
// allows, and only the last one that runs out of its budget ends in a
// timeout receipt. (Before, the first execution that ran out of its
// budget was a timeout receipt, whatever the policy.)
func TestPoolBudgetExhaustedIsRetriedThenTimeoutReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var calls atomic.Int64
		f := &fake{do: func(ctx context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			calls.Add(1)
			<-ctx.Done()
			return effect.Result{}, ctx.Err()
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, ClaimTTL: 10 * time.Second},
			adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: time.Second}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(9*time.Second - time.Nanosecond)
		if n := len(receipts(t, e.st, e.world)); n != 0 {
			t.Fatal("receipt before the budget ran out")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := len(receipts(t, e.st, e.world)); n != 0 {
			t.Fatal("the first execution that ran out of its budget ended the effect; the policy allows another")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := calls.Load(); n != 2 {
			t.Fatalf("%d executions, want the policy's 2", n)
		}
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if got.Status != vocab.ReceiptTimeout {
			t.Fatalf("status %s, want timeout once the retries are spent", got.Status)
		}
	})
}

// TestPoolRetryAnswerWaitsAsAskedAndEndsWithTheAnswer: an attempt error
// that carries an answer (effect.RetryAnswer) is retried no sooner than
// the answer asked, and the receipt once retries are spent is that answer.
func TestPoolRetryAnswerWaitsAsAskedAndEndsWithTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var mu sync.Mutex
		var at []time.Time
		f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			return effect.Result{}, effect.RetryAnswer(effect.OK("busy"), 30*time.Second, errors.New("busy"))
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex},
			adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: time.Millisecond}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(time.Hour)
		synctest.Wait()
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		var body string
		if err := got.Decode(&body); err != nil || got.Status != vocab.ReceiptOK || body != "busy" {
			t.Fatalf("receipt %s %q (%v), want the answer: ok \"busy\"", got.Status, body, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 2 || at[1].Sub(at[0]) < 30*time.Second {
			t.Fatalf("executions at %v, want 2, the second 30s or more after the first", at)
		}
	})
}

func TestPoolAdapterPanicIsErrorReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) { panic("boom") }}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		synctest.Wait()
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		if fl := decodeFailure(t, got); got.Status != vocab.ReceiptError || !strings.Contains(fl.Error, "boom") {
			t.Fatalf("receipt %s %+v", got.Status, fl)
		}
		if n := len(f.snapshot()); n != 1 {
			t.Fatalf("a panic was retried: %d attempts", n)
		}
	})
}

func TestPoolBoundsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			time.Sleep(time.Second)
			return effect.OK(nil), nil
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, Concurrency: 3}, adapter.Register(f, adapter.RetryPolicy{}))
		var hs []string
		for i := 0; i < 10; i++ {
			hs = append(hs, e.publish(kindTest, i))
		}
		start := time.Now()
		r := run(p)
		defer r.stop()
		time.Sleep(time.Minute)
		oneReceiptEach(t, e.st, e.world, hs...)
		if f.peak != 3 {
			t.Fatalf("peak concurrency %d, want 3", f.peak)
		}
		st, _ := e.st.EffectStatus(e.ctx, hs[9])
		if d := st.CompletedAt.Sub(start); d != 4*time.Second {
			t.Fatalf("the tenth effect completed after %v, want 4s (batches of 3)", d)
		}
	})
}

// TestPoolIdleMakesNoStoreCalls: an idle pool parks on the TopicEffects
// hint; over a virtual day it calls the store not once, and a publish
// wakes it at once (no virtual time passes before the receipt).
func TestPoolIdleMakesNoStoreCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var claims atomic.Int64
		e := newEnv(t, memstore.WithHook(func(op string) error {
			if op == "claim" {
				claims.Add(1)
			}
			return nil
		}))
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(&fake{}, adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		synctest.Wait()
		time.Sleep(24 * time.Hour)
		if n := claims.Load(); n != 1 {
			t.Fatalf("%d claims while idle, want the 1 at start", n)
		}
		at := time.Now()
		h := e.publish(kindTest, "x")
		synctest.Wait()
		oneReceiptEach(t, e.st, e.world, h)
		if st, _ := e.st.EffectStatus(e.ctx, h); !st.CompletedAt.Equal(at) {
			t.Fatalf("receipt %v after the publish, want at once", st.CompletedAt.Sub(at))
		}
	})
}

// TestPoolWakesAtHeldClaimExpiry: while the pool holds a claim, it arms a
// wake at that claim's expiry (the moment the queue can change through a
// reap whose hint it might miss) and claims again then.
func TestPoolWakesAtHeldClaimExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var claimsAt []time.Duration
		start := time.Now()
		e := newEnv(t, memstore.WithHook(func(op string) error {
			if op == "claim" {
				mu.Lock()
				claimsAt = append(claimsAt, time.Since(start))
				mu.Unlock()
			}
			return nil
		}))
		release := make(chan struct{})
		f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			<-release // overruns the claim, ignoring its context
			return effect.OK(nil), nil
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, ClaimTTL: 10 * time.Second}, adapter.Register(f, adapter.RetryPolicy{}))
		h := e.publish(kindTest, "x")
		r := run(p)
		defer r.stop()
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		time.Sleep(15 * time.Second)
		mu.Lock()
		got := append([]time.Duration(nil), claimsAt...)
		mu.Unlock()
		// One claim at start (it took the item, fewer than a batch, so
		// the queue is empty), then one at the held claim's expiry.
		want := []time.Duration{0, 10 * time.Second}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("claims at %v, want %v", got, want)
		}
		// The overrunning call's result comes after the claim's expiry:
		// dropped, not completed (TestPoolDropsAResultMadeAfterItsClaimExpired).
		close(release)
		released = true
		synctest.Wait()
		if s := p.Stats(); s.Dropped != 1 || s.Completed != 0 {
			t.Fatalf("stats %+v: the result of the expired claim on %.8s was not dropped", s, h)
		}
	})
}

func TestPoolDrainDeliversInflightReceipts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			time.Sleep(5 * time.Second)
			return effect.OK(nil), nil
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, Concurrency: 2}, adapter.Register(f, adapter.RetryPolicy{}))
		h1, h2, h3 := e.publish(kindTest, 1), e.publish(kindTest, 2), e.publish(kindTest, 3)
		r := run(p)
		time.Sleep(time.Second)
		p.Drain()
		if err := <-r.done; err != nil {
			t.Fatalf("Run after Drain returned %v", err)
		}
		oneReceiptEach(t, e.st, e.world, h1, h2)
		if st, _ := e.st.EffectStatus(e.ctx, h3); st.State != vocab.EffectPending {
			t.Fatalf("the unclaimed effect is %s, want pending", st.State)
		}
		r.cancel()
	})
}

// TestPoolStopDropsResultAndReaperRequeues: cancelling Run abandons an
// executing effect (no receipt, Dropped counted); after its claim expires
// the reaper requeues it and another pool completes it, once.
func TestPoolStopDropsResultAndReaperRequeues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(ctx context.Context, _ vocab.EffectItem, _ int) (effect.Result, error) {
			if err := sleepCtx(ctx, time.Minute); err != nil {
				return effect.Result{}, err
			}
			return effect.OK(nil), nil
		}}
		cfg := adapter.Config{Worker: "pool-1", Executor: e.ex, ClaimTTL: 2 * time.Minute}
		p1 := newPool(t, e.st, cfg, adapter.Register(f, adapter.RetryPolicy{}))
		h := e.publish(kindTest, "x")
		r1 := run(p1)
		time.Sleep(time.Second)
		if err := r1.stop(); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if s := p1.Stats(); s.Dropped != 1 || s.Completed != 0 {
			t.Fatalf("stats %+v", s)
		}
		if n := len(receipts(t, e.st, e.world)); n != 0 {
			t.Fatal("a stopped pool delivered a receipt")
		}
		time.Sleep(2 * time.Minute)
		if n, err := e.st.ReapEffects(e.ctx); err != nil || n != 1 {
			t.Fatalf("reaped %d (%v)", n, err)
		}
		cfg.Worker = "pool-2"
		p2 := newPool(t, e.st, cfg, adapter.Register(f, adapter.RetryPolicy{}))
		r2 := run(p2)
		defer r2.stop()
		time.Sleep(2 * time.Minute)
		oneReceiptEach(t, e.st, e.world, h)
		atMostOncePerClaim(t, f.snapshot())
	})
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestNewPoolRejectsBadConfig(t *testing.T) {
	st := memstore.New()
	ok := adapter.Config{Worker: "w", Executor: newEnvExecutor()}
	cases := map[string]struct {
		cfg  adapter.Config
		regs []adapter.Registration
	}{
		"no worker":         {adapter.Config{Executor: ok.Executor}, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{})}},
		"no executor":       {adapter.Config{Worker: "w"}, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{})}},
		"no adapter":        {ok, nil},
		"kind twice":        {ok, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{}), adapter.Register(&fake{}, adapter.RetryPolicy{})}},
		"negative attempts": {ok, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{Attempts: -2})}}, // -1 is AttemptsUnlimited
		"base above max":    {ok, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{Base: time.Minute, Max: time.Second})}},
		"coefficient < 1":   {ok, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{Coefficient: 0.5})}},
		"empty class":       {ok, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{NonRetryable: []string{""}})}},
		"bad jitter":        {ok, []adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{Attempts: 1, Jitter: 2})}},
		"no kinds":          {ok, []adapter.Registration{adapter.Register(&fake{kinds: []string{}}, adapter.RetryPolicy{})}},
		"claims a kind no adapter serves": {adapter.Config{Worker: "w", Executor: ok.Executor, Kinds: []string{"other"}},
			[]adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{})}},
		"claims no kind": {adapter.Config{Worker: "w", Executor: ok.Executor, Kinds: []string{}},
			[]adapter.Registration{adapter.Register(&fake{}, adapter.RetryPolicy{})}},
	}
	for name, c := range cases {
		_, err := adapter.NewPool(st, c.cfg, c.regs...)
		var ce *adapter.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want a *ConfigError", name, err)
		}
	}
}

func TestPoolRunTwiceIsErrRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(&fake{}, adapter.RetryPolicy{}))
		r := run(p)
		synctest.Wait()
		if err := p.Run(context.Background()); !errors.Is(err, adapter.ErrRunning) {
			t.Fatalf("second Run: %v", err)
		}
		r.stop()
	})
}

func TestRetryPolicyDelayDoublesToMax(t *testing.T) {
	p := adapter.RetryPolicy{Attempts: 10, Base: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if d := p.Delay(i+1, 12345); d != w*time.Millisecond {
			t.Fatalf("Delay(%d) = %v, want %v", i+1, d, w*time.Millisecond)
		}
	}
	j := adapter.RetryPolicy{Attempts: 2, Base: time.Second, Max: time.Second, Jitter: 1}
	if d := j.Delay(1, 0); d != time.Second {
		t.Fatalf("zero draw: %v", d)
	}
	if d := j.Delay(1, ^uint64(0)); d <= 0 || d > time.Nanosecond*2 {
		t.Fatalf("full jitter, maximal draw: %v, want about 0", d)
	}
}

// TestOperatorRetryOfATerminalErrorDeliversASecondReceipt: an effect ends
// in a terminal error (receipt Retry 0); an operator retries it
// (store.RetryEffect); the pool runs it again and delivers its result as a
// second receipt with Retry 1, which the world's kernel hands to its
// handler (world.Receipt).
func TestOperatorRetryOfATerminalErrorDeliversASecondReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(_ context.Context, _ vocab.EffectItem, n int) (effect.Result, error) {
			if n == 1 {
				return effect.Result{}, effect.Permanent(errors.New("upstream refused"))
			}
			return effect.OK("fixed"), nil
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.NoRetry()))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		synctest.Wait()
		if got := receipts(t, e.st, e.world); len(got) != 1 || got[0].Status != vocab.ReceiptError || got[0].Retry != 0 {
			t.Fatalf("receipts %+v, want one terminal error", got)
		}
		st, err := e.st.RetryEffect(e.ctx, h, "operator: upstream fixed")
		if err != nil {
			t.Fatal(err)
		}
		if st.Retries != 1 {
			t.Fatalf("status after RetryEffect %+v", st)
		}
		synctest.Wait()
		got := receipts(t, e.st, e.world)
		if len(got) != 2 || got[1].IntentHash != h || got[1].Status != vocab.ReceiptOK || got[1].Retry != 1 {
			t.Fatalf("receipts %+v, want the error then the retry's ok (Retry 1)", got)
		}
		if calls := f.snapshot(); len(calls) != 2 {
			t.Fatalf("%d executions, want 2 (the first and the operator's retry)", len(calls))
		}
	})
}

// TestPoolWaitsOutAFailingWatch: the store refuses the first Watches; the
// pool retries with backoff instead of returning, and executes the effect
// once a Watch succeeds.
func TestPoolWaitsOutAFailingWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		failures := 3
		e := newEnv(t, memstore.WithHook(func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == "watch" && failures > 0 {
				failures--
				return errors.New("database restarting")
			}
			return nil
		}))
		h := e.publish(kindTest, "x")
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(&fake{}, adapter.NoRetry()))
		r := run(p)
		time.Sleep(time.Minute)
		synctest.Wait()
		oneReceiptEach(t, e.st, e.world, h)
		if err := r.stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	})
}

// TestPoolDropsAResultMadeAfterItsClaimExpired: an adapter call that
// outlives the claim (it ignores its context, as a process paused past
// the claim's TTL does) returns ok, but the claim has expired by then: the
// pool completes nothing, the reaper requeues the effect, the next claim
// executes it again, and the world gets one receipt, that claim's.
func TestPoolDropsAResultMadeAfterItsClaimExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		const ttl = 10 * time.Second
		f := &fake{do: func(_ context.Context, _ vocab.EffectItem, n int) (effect.Result, error) {
			if n == 1 {
				time.Sleep(ttl + time.Second)
			}
			return effect.OK(n), nil
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, ClaimTTL: ttl}, adapter.Register(f, adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(ttl + 2*time.Second)
		synctest.Wait()
		if s := p.Stats(); s.Dropped != 1 || s.Completed != 0 {
			t.Fatalf("after the overrun: stats %+v, want one dropped result and no completion", s)
		}
		if n := len(receipts(t, e.st, e.world)); n != 0 {
			t.Fatalf("%d receipts from a claim that had expired", n)
		}
		if n, err := e.st.ReapEffects(e.ctx); err != nil || n != 1 {
			t.Fatalf("reaped %d (%v), want the expired claim", n, err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		var n int
		if err := got.Decode(&n); err != nil || got.Status != vocab.ReceiptOK || n != 2 {
			t.Fatalf("receipt %+v (body %d, %v): want ok from the second execution", got, n, err)
		}
		if s := p.Stats(); s.Claimed != 2 || s.Completed != 1 || s.Dropped != 1 {
			t.Fatalf("stats %+v", s)
		}
		atMostOncePerClaim(t, f.snapshot())
	})
}

// TestPoolClaimsOnlyItsKinds: a pool told its Kinds claims those alone,
// though its adapter serves more; the other kinds wait for another pool.
func TestPoolClaimsOnlyItsKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{kinds: []string{"k.a", "k.b"}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, Kinds: []string{"k.a"}}, adapter.Register(f, adapter.RetryPolicy{}))
		if got := p.Kinds(); !slices.Equal(got, []string{"k.a"}) {
			t.Fatalf("Kinds = %v", got)
		}
		r := run(p)
		a := e.publish("k.a", map[string]int{"n": 1})
		b := e.publish("k.b", map[string]int{"n": 2})
		synctest.Wait()
		if st, err := e.st.EffectStatus(e.ctx, a); err != nil || st.State != vocab.EffectDone {
			t.Fatalf("k.a: %+v (%v), want done", st, err)
		}
		if st, err := e.st.EffectStatus(e.ctx, b); err != nil || st.State != vocab.EffectPending {
			t.Fatalf("k.b: %+v (%v), want pending for another pool", st, err)
		}
		if err := r.stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}
