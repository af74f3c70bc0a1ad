package adapter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// failing is an adapter whose every attempt fails with err.
func failing(err error) *fake {
	return &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) { return effect.Result{}, err }}
}

// gaps are the times between consecutive calls.
func gaps(calls []call) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(calls); i++ {
		out = append(out, calls[i].at.Sub(calls[i-1].at))
	}
	return out
}

// TestDefaultRetryPolicyBacksOffToMaximumAndRetriesWithoutEnd: for a kind
// other than http.request (whose default is bounded), under the
// zero policy (DefaultRetry: 1s, x2, at most 100s, no limit on attempts,
// a fifth jittered) a failing effect is retried on that schedule for as
// long as it fails, with no receipt: after four virtual hours it is still
// pending, attempts 1s, 2s, 4s … 64s, then 100s apart, each delay within
// [0.8d, d].
func TestDefaultRetryPolicyBacksOffToMaximumAndRetriesWithoutEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := failing(errTransient)
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(4 * time.Hour)
		synctest.Wait()
		calls := f.snapshot()
		if len(calls) < 140 {
			t.Fatalf("%d attempts in four hours, want ~150: retries must not end", len(calls))
		}
		for i, d := range gaps(calls) {
			full := 100 * time.Second
			if i < 7 {
				full = time.Second << i
			}
			if d < full*8/10 || d > full {
				t.Fatalf("delay %d is %v, outside [%v, %v]", i+1, d, full*8/10, full)
			}
		}
		if n := len(receipts(t, e.st, e.world)); n != 0 {
			t.Fatalf("%d receipts, want none while retries go on", n)
		}
		st, err := e.st.EffectStatus(e.ctx, h)
		if err != nil || st.State != vocab.EffectPending || st.Failures != len(calls) || st.LastError != errTransient.Error() {
			t.Fatalf("effect status %+v (%v): want pending with every failure counted and the last error", st, err)
		}
	})
}

// TestRetryPolicyScheduleFollowsItsFields: initial interval, coefficient
// and maximum interval give the delays exactly (no jitter), and the
// maximum attempts end the effect with a final error receipt that counts
// them.
func TestRetryPolicyScheduleFollowsItsFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := failing(errTransient)
		pol := adapter.RetryPolicy{Attempts: 6, Base: 2 * time.Second, Coefficient: 3, Max: 60 * time.Second}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, pol))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(time.Hour)
		synctest.Wait()
		want := []time.Duration{2 * time.Second, 6 * time.Second, 18 * time.Second, 54 * time.Second, 60 * time.Second}
		got := gaps(f.snapshot())
		if len(got) != len(want) {
			t.Fatalf("%d retries (%v), want %d", len(got), got, len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("delays %v, want %v", got, want)
			}
		}
		rc := oneReceiptEach(t, e.st, e.world, h)[h]
		if fl := decodeFailure(t, rc); rc.Status != vocab.ReceiptError || fl.Attempts != 6 || fl.Error != errTransient.Error() {
			t.Fatalf("receipt %s %+v, want error after 6 attempts", rc.Status, fl)
		}
	})
}

// TestMaxAttemptsOfAnUnknownFailureIsATimeoutReceipt: the attempts spent
// on a failure whose outcome is unknown end in a timeout receipt, never
// an error one.
func TestMaxAttemptsOfAnUnknownFailureIsATimeoutReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := failing(effect.Unknown(errors.New("connection reset after sending")))
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{Attempts: 3}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(time.Hour)
		rc := oneReceiptEach(t, e.st, e.world, h)[h]
		if fl := decodeFailure(t, rc); rc.Status != vocab.ReceiptTimeout || fl.Attempts != 3 || len(f.snapshot()) != 3 {
			t.Fatalf("receipt %s %+v after %d calls, want timeout after 3", rc.Status, fl, len(f.snapshot()))
		}
	})
}

// TestNonRetryableErrorClassStopsAtOnce: an error of a class the policy
// names is not retried, even under an unlimited policy: one attempt, an
// error receipt (a timeout one when the failure left the outcome
// unknown). A class the policy does not name is retried.
func TestNonRetryableErrorClassStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		declined := effect.Classified("card_declined", errors.New("card declined"))
		lost := effect.Classified("card_declined", effect.Unknown(errors.New("declined, maybe after charging")))
		other := effect.Classified("rate_limited", errors.New("slow down"))
		errs := map[int]error{1: declined, 2: lost, 3: other}
		f := &fake{do: func(_ context.Context, it vocab.EffectItem, _ int) (effect.Result, error) {
			var which int
			if err := world.Decode(it.Params, &which); err != nil {
				return effect.Result{}, effect.Permanent(err)
			}
			return effect.Result{}, errs[which]
		}}
		pol := adapter.RetryPolicy{Base: time.Second, NonRetryable: []string{"card_declined"}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, pol))
		r := run(p)
		defer r.stop()
		h1, h2, h3 := e.publish(kindTest, 1), e.publish(kindTest, 2), e.publish(kindTest, 3)
		time.Sleep(time.Minute)
		synctest.Wait()
		counts := map[string]int{}
		for _, c := range f.snapshot() {
			counts[c.hash]++
		}
		if counts[h1] != 1 || counts[h2] != 1 || counts[h3] < 5 {
			t.Fatalf("calls %d, %d, %d: want the non-retryable classes once, the other retried", counts[h1], counts[h2], counts[h3])
		}
		got := oneReceiptEach(t, e.st, e.world, h1, h2)
		if fl := decodeFailure(t, got[h1]); got[h1].Status != vocab.ReceiptError || fl.Error != "card declined" || fl.Attempts != 1 {
			t.Fatalf("receipt %s %+v, want error after 1 attempt", got[h1].Status, fl)
		}
		if got[h2].Status != vocab.ReceiptTimeout {
			t.Fatalf("receipt %s for an unknown outcome, want timeout", got[h2].Status)
		}
	})
}

// TestIntentRetryPolicyReplacesItsKinds: an intent published with its own
// policy (what world.WithRetry records) follows it, not its kind's; an
// intent of the same kind without one follows the kind's.
func TestIntentRetryPolicyReplacesItsKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := failing(errTransient)
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex},
			adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: time.Second}))
		r := run(p)
		defer r.stop()
		own, err := world.EncodeRetryPolicy(world.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 1, MaximumAttempts: 4})
		if err != nil {
			t.Fatal(err)
		}
		kinds := e.publish(kindTest, "kind's")
		mine := e.publishWith(kindTest, "own", own)
		time.Sleep(time.Hour)
		synctest.Wait()
		var atKind, atOwn []call
		for _, c := range f.snapshot() {
			switch c.hash {
			case kinds:
				atKind = append(atKind, c)
			case mine:
				atOwn = append(atOwn, c)
			}
		}
		if g := gaps(atKind); len(g) != 1 || g[0] != time.Second {
			t.Fatalf("the kind's policy: delays %v, want one of 1s", g)
		}
		if g := gaps(atOwn); len(g) != 3 || g[0] != 10*time.Second || g[1] != 10*time.Second || g[2] != 10*time.Second {
			t.Fatalf("the intent's policy: delays %v, want three of 10s", g)
		}
		got := oneReceiptEach(t, e.st, e.world, kinds, mine)
		if fl := decodeFailure(t, got[mine]); fl.Attempts != 4 {
			t.Fatalf("the intent's receipt counts %d attempts, want 4", fl.Attempts)
		}
	})
}

// TestRetryScheduleSurvivesThePoolsCrash: a pool fails an attempt and
// schedules the retry 30s on, then dies (its Run cancelled, as a crash).
// Another pool, on a store that kept the schedule, runs the retry at its
// time, neither sooner nor later, as the second of the policy's attempts.
func TestRetryScheduleSurvivesThePoolsCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := failing(errTransient)
		pol := adapter.RetryPolicy{Attempts: 2, Base: 30 * time.Second}
		p1 := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, pol))
		r1 := run(p1)
		h := e.publish(kindTest, "x")
		synctest.Wait()
		start := time.Now()
		_ = r1.stop()
		time.Sleep(5 * time.Second)
		p2 := newPool(t, e.st, adapter.Config{Worker: "pool-2", Executor: newEnvExecutor()}, adapter.Register(f, pol))
		r2 := run(p2)
		defer r2.stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		calls := f.snapshot()
		if len(calls) != 2 || calls[0].worker != "pool-1" || calls[1].worker != "pool-2" || calls[1].at.Sub(start) != 30*time.Second {
			t.Fatalf("calls %+v: want pool-1's attempt, then pool-2's 30s later", calls)
		}
		rc := oneReceiptEach(t, e.st, e.world, h)[h]
		if fl := decodeFailure(t, rc); rc.Status != vocab.ReceiptError || fl.Attempts != 2 {
			t.Fatalf("receipt %s %+v, want error after the policy's 2 attempts", rc.Status, fl)
		}
	})
}

// TestRetryIsJudgedByTheStoresClock: the store's clock runs 10 minutes
// ahead of the pool's. A retry scheduled 5s on happens 5s after the
// failure on the pool's clock: the store sets the time and tells the pool
// how long to wait, so the two clocks are never compared.
func TestRetryIsJudgedByTheStoresClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		skewed := newEnv(t, memstore.WithClock(func() time.Time { return time.Now().Add(10 * time.Minute) }))
		f := failing(errTransient)
		p := newPool(t, skewed.st, adapter.Config{Worker: "pool-1", Executor: skewed.ex}, adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: 5 * time.Second}))
		r := run(p)
		defer r.stop()
		skewed.publish(kindTest, "x")
		time.Sleep(time.Minute)
		synctest.Wait()
		if g := gaps(f.snapshot()); len(g) != 1 || g[0] != 5*time.Second {
			t.Fatalf("delays %v, want one of 5s", g)
		}
	})
}

// TestRetryPolicyDelayDefaults: zero fields take the documented defaults.
func TestRetryPolicyDelayDefaults(t *testing.T) {
	p := adapter.RetryPolicy{Attempts: 20}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 100, 100}
	for i, w := range want {
		if d := p.Delay(i+1, 0); d != w*time.Second {
			t.Fatalf("Delay(%d) = %v, want %v", i+1, d, w*time.Second)
		}
	}
	if d := adapter.DefaultRetry(); d.Attempts != 0 || d.Base != time.Second || d.Coefficient != 2 || d.Max != 100*time.Second {
		t.Fatalf("DefaultRetry = %+v", d)
	}
	// A constant interval.
	c := adapter.RetryPolicy{Base: 3 * time.Second, Coefficient: 1}
	if d := c.Delay(7, 0); d != 3*time.Second {
		t.Fatalf("constant Delay(7) = %v", d)
	}
}

// TestStoreAndKernelBoundAnIntentsPolicyAlike: a policy the kernel lets a
// handler give is one every store accepts.
func TestStoreAndKernelBoundAnIntentsPolicyAlike(t *testing.T) {
	if world.MaxRetryPolicyBytes != store.MaxRetryPolicyBytes {
		t.Fatalf("world.MaxRetryPolicyBytes %d, store.MaxRetryPolicyBytes %d", world.MaxRetryPolicyBytes, store.MaxRetryPolicyBytes)
	}
}

// publishWith is publish with the intent's own retry policy.
func (e *env) publishWith(kind string, params any, retry []byte) string {
	e.t.Helper()
	b, err := event.Marshal(params)
	if err != nil {
		e.t.Fatal(err)
	}
	e.height++
	h := world.IntentHash(e.world, e.height, 0, kind, b)
	origin := vocab.Origin{World: e.world, Height: e.height}.String()
	if _, err := e.st.Publish(e.ctx, e.world, e.epoch, []vocab.Intent{{IntentHash: h, Kind: kind, Params: b, Origin: origin, Retry: retry}}); err != nil {
		e.t.Fatal(err)
	}
	return h
}

// TestRetryRunsWhenTheStoreCannotSayWhen: NextRetry fails every time (a
// store in trouble). The pool does not park without a wake-up: it claims
// again after a store backoff, so the retry runs at most one backoff
// (50ms) after its time.
func TestRetryRunsWhenTheStoreCannotSayWhen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, memstore.WithHook(func(op string) error {
			if op == "next_retry" {
				return errors.New("store down for this query")
			}
			return nil
		}))
		f := failing(errTransient)
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: 10 * time.Second}))
		r := run(p)
		defer r.stop()
		e.publish(kindTest, "x")
		time.Sleep(time.Minute)
		synctest.Wait()
		if g := gaps(f.snapshot()); len(g) != 1 || g[0] < 10*time.Second || g[0] > 10*time.Second+50*time.Millisecond {
			t.Fatalf("delays %v, want one of 10s, at most a store backoff late", g)
		}
	})
}

// TestRetryLaterThatFailsIsTriedAgain: the store fails the first
// RetryLater; the pool tries again after a store backoff, and the retry
// runs at its time (the delay counted from the second try).
func TestRetryLaterThatFailsIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failed atomic.Bool
		e := newEnv(t, memstore.WithHook(func(op string) error {
			if op == "retry_later" && failed.CompareAndSwap(false, true) {
				return errors.New("store down")
			}
			return nil
		}))
		f := failing(errTransient)
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: 10 * time.Second}))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(time.Minute)
		synctest.Wait()
		if g := gaps(f.snapshot()); len(g) != 1 || g[0] < 10*time.Second || g[0] > 10*time.Second+50*time.Millisecond {
			t.Fatalf("delays %v, want one of 10s after a store backoff", g)
		}
		if rc := oneReceiptEach(t, e.st, e.world, h)[h]; rc.Status != vocab.ReceiptError {
			t.Fatalf("receipt %s, want error after the 2 attempts", rc.Status)
		}
		if s := p.Stats(); s.Retried != 1 || s.Dropped != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}
