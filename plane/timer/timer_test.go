package timer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/plane/timer"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

type Ping struct{ N int }

type env struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	ex    actor.Executor
	epoch uint64
	n     uint64
}

func newEnv(t *testing.T, opts ...memstore.Option) *env {
	t.Helper()
	ctx := context.Background()
	st := memstore.New(append([]memstore.Option{memstore.WithClock(time.Now)}, opts...)...)
	if _, err := st.CreateWorld(ctx, "u1", "w1", nil); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(ctx, "w1", "host-1", store.MaxTTL)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, st: st, ex: actor.NewExecutor(3), epoch: l.Epoch}
}

// schedule sets a durable timer of w1 at at, as a committed timer.set.
func (e *env) schedule(at time.Time) string {
	e.t.Helper()
	e.n++
	h := world.IntentHash("w1", e.n, 0, "timer.set", nil)
	payload, err := world.EncodeTimerFired(h, Ping{N: int(e.n)})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.Schedule(e.ctx, "w1", e.epoch, h, at, payload); err != nil {
		e.t.Fatal(err)
	}
	return h
}

// fired returns w1's timer firings, in inbox order.
func fired(t *testing.T, st store.Store) []store.InboxItem {
	t.Helper()
	items, err := st.ReadInbox(context.Background(), "w1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.InboxItem
	for _, it := range items {
		if it.Kind == vocab.KindTimer {
			out = append(out, it)
		}
	}
	return out
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, st timer.Store, cfg timer.Config) (*timer.Worker, *running) {
	t.Helper()
	w, err := timer.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	return w, r
}

func (r *running) stop() error {
	r.cancel()
	return <-r.done
}

// TestWorkerFiresExactlyAtDueTimeNotBefore: the worker sleeps until the
// timer's due time on the virtual clock and fires it then: not a
// nanosecond before, and with the due time as the firing's enqueue time.
func TestWorkerFiresExactlyAtDueTimeNotBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		due := time.Now().Add(10 * time.Second)
		h := e.schedule(due)
		_, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex})
		defer r.stop()
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		if n := len(fired(t, e.st)); n != 0 {
			t.Fatalf("%d firings a nanosecond before the due time", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		got := fired(t, e.st)
		if len(got) != 1 || got[0].DedupeKey != store.TimerKey(h) || !got[0].EnqueuedAt.Equal(due) {
			t.Fatalf("firings %+v, want one of %s at the due time", got, h[:8])
		}
	})
}

// TestWorkerIdleMakesNoStoreCallsAndWakesOnScheduleHint: with no timers
// the worker calls the store once at start and then not for a virtual
// day; a timer scheduled then (a TopicTimers hint) fires at its due time,
// and an earlier timer scheduled while it waits for a later one re-arms
// its wait.
func TestWorkerIdleMakesNoStoreCallsAndWakesOnScheduleHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := map[string]int{}
		e := newEnv(t, memstore.WithHook(func(op string) error {
			mu.Lock()
			calls[op]++
			mu.Unlock()
			return nil
		}))
		_, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex})
		defer r.stop()
		time.Sleep(24 * time.Hour)
		mu.Lock()
		claims, nexts := calls["claim_due"], calls["next_due"]
		mu.Unlock()
		if claims != 1 || nexts != 1 {
			t.Fatalf("idle for a day: %d claims, %d next_due; want 1 each (at start)", claims, nexts)
		}
		now := time.Now()
		late := e.schedule(now.Add(100 * time.Second))
		synctest.Wait()
		early := e.schedule(now.Add(10 * time.Second))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got := fired(t, e.st)
		if len(got) != 1 || got[0].DedupeKey != store.TimerKey(early) || !got[0].EnqueuedAt.Equal(now.Add(10*time.Second)) {
			t.Fatalf("after 10s: firings %+v, want the early timer at its due time", got)
		}
		time.Sleep(90 * time.Second)
		synctest.Wait()
		got = fired(t, e.st)
		if len(got) != 2 || got[1].DedupeKey != store.TimerKey(late) || !got[1].EnqueuedAt.Equal(now.Add(100*time.Second)) {
			t.Fatalf("after 100s: firings %+v", got)
		}
	})
}

// TestWorkerClaimsATimerThatCameDueDuringASlowStoreCall: the worker
// learns the next due time, then its store call for the clock is slow
// (the process was paused) and returns after that time: the timer is due
// and nobody claimed it, so the worker claims and fires it at once rather
// than sleeping with no wake-up ahead.
func TestWorkerClaimsATimerThatCameDueDuringASlowStoreCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := true
		e := newEnv(t, memstore.WithHook(func(op string) error {
			if op == "now" && slow {
				slow = false
				time.Sleep(2 * time.Second)
			}
			return nil
		}))
		due := time.Now().Add(time.Second)
		h := e.schedule(due)
		_, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex})
		defer r.stop()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got := fired(t, e.st)
		if len(got) != 1 || got[0].DedupeKey != store.TimerKey(h) {
			t.Fatalf("firings %+v after the slow call, want the timer that came due during it", got)
		}
	})
}

// TestWorkerFiresSameInstantTimersInStableOrder: timers due at one
// instant fire in (deliverAt, intentHash) order, across batches.
func TestWorkerFiresSameInstantTimersInStableOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		due := time.Now().Add(time.Minute)
		var hs []string
		for i := 0; i < 5; i++ {
			hs = append(hs, e.schedule(due))
		}
		w, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex, Batch: 2})
		defer r.stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		got := fired(t, e.st)
		if len(got) != 5 {
			t.Fatalf("%d firings, want 5", len(got))
		}
		slices.Sort(hs)
		for i, it := range got {
			if it.DedupeKey != store.TimerKey(hs[i]) {
				t.Fatalf("firing %d is %s, want the scheduled timers in intent hash order: %v", i, it.DedupeKey, hs)
			}
		}
		if s := w.Stats(); s.Claimed != 5 || s.Fired != 5 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestCrashAfterTimerClaimBeforeFireFiresOnce is the crash matrix's
// boundary 6: the timer worker's process dies after its claim and before
// the fire. After a restart the timer reaper requeues the expired claim,
// a new worker fires the timer, and the world gets exactly one firing.
func TestCrashAfterTimerClaimBeforeFireFiresOnce(t *testing.T) {
	for _, b := range testrig.Backends() {
		t.Run(b, func(t *testing.T) {
			if b == "memstore" {
				synctest.Test(t, func(t *testing.T) {
					e := newEnv(t)
					crashAfterTimerClaim(t, e, nil, func(d time.Duration) { time.Sleep(d); synctest.Wait() })
				})
				return
			}
			// A real store: the production executor, the store's clock
			// moved instead of waiting, conditions awaited in a bounded
			// loop on the executor.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			clock := &testrig.Clock{}
			st := testrig.Open(t, ctx, b, clock)
			if _, err := st.CreateWorld(ctx, "u1", "w1", nil); err != nil {
				t.Fatal(err)
			}
			l, err := st.Acquire(ctx, "w1", "host-1", store.MaxTTL)
			if err != nil {
				t.Fatal(err)
			}
			e := &env{t: t, ctx: ctx, st: st, ex: actor.NewExecutor(3), epoch: l.Epoch}
			crashAfterTimerClaim(t, e, clock, func(time.Duration) {})
		})
	}
}

// crashAfterTimerClaim is TestCrashAfterTimerClaimBeforeFireFiresOnce on
// e's store. pass lets virtual time pass in a bubble (nothing on a real
// store, whose clock moves instead).
func crashAfterTimerClaim(t *testing.T, e *env, clock *testrig.Clock, pass func(time.Duration)) {
	var st *testrig.Handle
	var mu sync.Mutex
	crashed := false
	hook := func(op string) error {
		mu.Lock()
		defer mu.Unlock()
		if op == "fire" && !crashed {
			crashed = true
			st.Crash()
			return errors.New("process died")
		}
		return nil
	}
	st = testrig.NewHandle(e.st, hook)
	advance := func(d time.Duration) {
		if clock != nil {
			clock.Advance(d)
		}
		pass(d)
	}
	waitFor := func(what string, cond func() bool) {
		for i := 0; !cond(); i++ {
			if i == 5000 {
				t.Fatalf("timed out waiting for %s", what)
			}
			if clock == nil {
				time.Sleep(100 * time.Millisecond)
			} else if err := actor.Sleep(e.ctx, e.ex, 2*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
	}
	start0, _ := e.st.Now(e.ctx)
	due := start0.Add(time.Second)
	h := e.schedule(due)
	const ttl = 10 * time.Second
	w1, r1 := start(t, st, timer.Config{Worker: "timers-1", Executor: e.ex, ClaimTTL: ttl})
	advance(time.Second)
	waitFor("the worker to reach its fire", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return crashed
	})
	if err := r1.stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the crashed worker's Run returned %v", err)
	}
	if s := w1.Stats(); s.Claimed != 1 || s.Fired != 0 {
		t.Fatalf("crashed worker stats %+v", s)
	}
	st2 := testrig.NewHandle(e.st, nil)
	if n := len(fired(t, st2)); n != 0 {
		t.Fatal("the crash fired the timer")
	}
	w2, r2 := start(t, st2, timer.Config{Worker: "timers-2", Executor: e.ex, ClaimTTL: ttl})
	defer r2.stop()
	job := reaper.Timers(st2, ttl)
	if clock != nil {
		job.Every = 5 * time.Millisecond // the store's clock jumps; look often
	}
	rctx, rcancel := context.WithCancel(context.Background())
	rdone := make(chan error, 1)
	go func() { rdone <- reaper.Run(rctx, reaper.Config{Executor: e.ex}, job) }()
	defer func() { rcancel(); <-rdone }()
	advance(2 * ttl)
	// The firing is visible in the inbox as soon as the store commits it,
	// a moment before the worker counts it: wait for both.
	waitFor("the firing", func() bool { return len(fired(t, st2)) > 0 && w2.Stats().Fired > 0 })
	got := fired(t, st2)
	if len(got) != 1 || got[0].DedupeKey != store.TimerKey(h) {
		t.Fatalf("firings %+v, want exactly one", got)
	}
	// In the bubble: claimed at 1s with a 10s TTL, expired at 11s,
	// reaped at the reaper's first run at or after it (every 5s from the
	// restart at 1s: 11s), fired at once on the reap's hint.
	if want := due.Add(ttl); clock == nil && !got[0].EnqueuedAt.Equal(want) {
		t.Fatalf("fired %v after due, want %v", got[0].EnqueuedAt.Sub(due), ttl)
	}
	if s := w2.Stats(); s.Fired != 1 || s.Claimed != 1 {
		t.Fatalf("new worker stats %+v", s)
	}
	if left, _ := st2.ListTimers(e.ctx, "w1", 0); len(left) != 0 {
		t.Fatalf("%d timers left", len(left))
	}
}

// TestLateFireOfReclaimedTimerIsClaimLost: a worker paused between its
// claim and its fire, past the claim's TTL, while the reaper requeues the
// timer and another worker claims it, loses its fire (ErrClaimLost,
// counted); the other claim fires it, once.
func TestLateFireOfReclaimedTimerIsClaimLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var st *memstore.Store
		var other []store.TimerItem
		paused := false
		hook := func(op string) error {
			if op == "fire" && !paused {
				paused = true
				time.Sleep(2 * time.Second) // the worker is frozen past its 1s claim
				if n, err := st.ReapTimers(context.Background()); n != 1 || err != nil {
					return errors.New("reap failed")
				}
				other, _ = st.ClaimDue(context.Background(), "other", 1, time.Minute)
			}
			return nil
		}
		e := newEnv(t, memstore.WithHook(hook))
		st = e.st.(*memstore.Store)
		h := e.schedule(time.Now())
		w, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex, ClaimTTL: time.Second})
		defer r.stop()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if s := w.Stats(); s.ClaimLost != 1 || s.Fired != 0 {
			t.Fatalf("paused worker stats %+v, want one lost claim", s)
		}
		if len(other) != 1 || other[0].IntentHash != h {
			t.Fatalf("the other worker claimed %v", other)
		}
		if n := len(fired(t, e.st)); n != 0 {
			t.Fatal("the lost claim fired")
		}
		if _, dup, err := e.st.Fire(e.ctx, h, other[0].ClaimOf()); err != nil || dup {
			t.Fatalf("the new claim's fire: dup=%v %v", dup, err)
		}
		if n := len(fired(t, e.st)); n != 1 {
			t.Fatalf("%d firings, want 1", n)
		}
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	st := memstore.New()
	for name, cfg := range map[string]timer.Config{
		"no worker":    {Executor: actor.NewExecutor(1)},
		"no executor":  {Worker: "w"},
		"negative ttl": {Worker: "w", Executor: actor.NewExecutor(1), ClaimTTL: -1},
		"huge batch":   {Worker: "w", Executor: actor.NewExecutor(1), Batch: store.MaxBatch + 1},
		"negative lag": {Worker: "w", Executor: actor.NewExecutor(1), Lag: -time.Second},
		"huge lag":     {Worker: "w", Executor: actor.NewExecutor(1), Lag: store.MaxTTL + 1},
	} {
		var ce *timer.ConfigError
		if _, err := timer.New(st, cfg); !errors.As(err, &ce) {
			t.Errorf("%s: %v, want *ConfigError", name, err)
		}
	}
}

// TestWorkerFiresABurstAcrossWorldsConcurrentlyInWorldOrder: a burst of
// timers due at one instant in several worlds is fired in overlapping
// lanes (firings of different worlds are in flight together, so they can
// share the store's commits), while each world still gets its firings in
// claim order; with Concurrency 1 the firings are strictly one at a time.
func TestWorkerFiresABurstAcrossWorldsConcurrentlyInWorldOrder(t *testing.T) {
	for _, c := range []struct {
		concurrency int
		overlap     bool
	}{{1, false}, {8, true}} {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			inFlight, maxInFlight := 0, 0
			e := newEnv(t, memstore.WithHook(func(op string) error {
				if op != "fire" {
					return nil
				}
				mu.Lock()
				inFlight++
				maxInFlight = max(maxInFlight, inFlight)
				mu.Unlock()
				time.Sleep(time.Second) // a store call that takes a while
				mu.Lock()
				inFlight--
				mu.Unlock()
				return nil
			}))
			worlds := []string{"w1", "w2", "w3", "w4", "w5", "w6"}
			due := time.Now().Add(time.Minute)
			want := map[string][]string{} // per world, the claim order
			for i, w := range worlds {
				epoch := e.epoch
				if w != "w1" {
					if _, err := e.st.CreateWorld(e.ctx, "u1", w, nil); err != nil {
						t.Fatal(err)
					}
					l, err := e.st.Acquire(e.ctx, w, "host-1", store.MaxTTL)
					if err != nil {
						t.Fatal(err)
					}
					epoch = l.Epoch
				}
				for j := 0; j < 3; j++ {
					h := world.IntentHash(w, uint64(10*i+j+1), 0, "timer.set", nil)
					if err := e.st.Schedule(e.ctx, w, epoch, h, due, nil); err != nil {
						t.Fatal(err)
					}
					want[w] = append(want[w], store.TimerKey(h))
				}
				slices.Sort(want[w]) // same instant: intent hash order
			}
			w, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex, Concurrency: c.concurrency})
			time.Sleep(time.Minute + time.Hour)
			synctest.Wait()
			if err := r.stop(); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v", err)
			}
			if s := w.Stats(); s.Fired != 18 {
				t.Fatalf("concurrency %d: stats %+v, want 18 fired", c.concurrency, s)
			}
			for _, wid := range worlds {
				items, err := e.st.ReadInbox(e.ctx, wid, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, it := range items {
					got = append(got, it.DedupeKey)
				}
				if !slices.Equal(got, want[wid]) {
					t.Fatalf("concurrency %d: %s fired %v, want %v (claim order)", c.concurrency, wid, got, want[wid])
				}
			}
			if (maxInFlight > 1) != c.overlap {
				t.Fatalf("concurrency %d: at most %d firings in flight together", c.concurrency, maxInFlight)
			}
		})
	}
}

// TestWorkerWaitsOutAFailingWatch: the store refuses the first Watches (a
// database restarting); the worker retries with backoff instead of
// returning, and fires its timer once a Watch succeeds.
func TestWorkerWaitsOutAFailingWatch(t *testing.T) {
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
		h := e.schedule(time.Now().Add(time.Minute))
		_, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex})
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		got := fired(t, e.st)
		if len(got) != 1 || got[0].DedupeKey != store.TimerKey(h) {
			t.Fatalf("firings %+v, want the timer after the watch recovered", got)
		}
		if err := r.stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	})
}

// TestWorkerWithLagFiresOnlyLagAfterTheDueTime: with a Lag the worker
// treats a timer as due Lag after its due time. Until then it claims
// nothing (the timer stays scheduled for its holder), also when a hint
// wakes it (another timer scheduled meanwhile); then it claims and fires
// it, not a nanosecond before.
func TestWorkerWithLagFiresOnlyLagAfterTheDueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		claims := 0
		e := newEnv(t, memstore.WithHook(func(op string) error {
			if op == "claim_due" {
				mu.Lock()
				claims++
				mu.Unlock()
			}
			return nil
		}))
		const lag = 2 * time.Second
		due := time.Now().Add(10 * time.Second)
		h := e.schedule(due)
		_, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex, Lag: lag})
		defer r.stop()
		time.Sleep(11 * time.Second)
		later := e.schedule(time.Now().Add(time.Hour)) // a hint, a second past h's due time
		time.Sleep(lag - time.Second - time.Nanosecond)
		synctest.Wait()
		mu.Lock()
		n := claims
		mu.Unlock()
		if got := fired(t, e.st); len(got) != 0 || n != 0 {
			t.Fatalf("a nanosecond before due+Lag: %d firings, %d claims; want none", len(got), n)
		}
		ts, err := e.st.ListTimers(e.ctx, "w1", 10)
		if err != nil || len(ts) != 2 || ts[0].State != store.TimerScheduled {
			t.Fatalf("timers before due+Lag = %+v, %v; want both scheduled", ts, err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		got := fired(t, e.st)
		if len(got) != 1 || got[0].DedupeKey != store.TimerKey(h) || !got[0].EnqueuedAt.Equal(due.Add(lag)) {
			t.Fatalf("firings %+v, want %s at its due time plus Lag", got, h[:8])
		}
		if ts, err := e.st.ListTimers(e.ctx, "w1", 10); err != nil || len(ts) != 1 || ts[0].IntentHash != later {
			t.Fatalf("timers after the firing = %+v, %v; want the later one alone", ts, err)
		}
	})
}

// TestWorkerWithLagLeavesWhatTheHolderFired: the world's holder fires its
// timer at the due time (FireHeld); the lagging worker, woken by the
// schedule's hint, never claims it nor anything else, and the world has
// one firing.
func TestWorkerWithLagLeavesWhatTheHolderFired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := map[string]int{}
		e := newEnv(t, memstore.WithHook(func(op string) error {
			mu.Lock()
			calls[op]++
			mu.Unlock()
			return nil
		}))
		_, r := start(t, e.st, timer.Config{Worker: "timers-1", Executor: e.ex, Lag: 2 * time.Second})
		defer r.stop()
		due := time.Now().Add(10 * time.Second)
		h := e.schedule(due)
		time.Sleep(10 * time.Second)
		res, err := e.st.FireHeld(e.ctx, "w1", e.epoch, h)
		if err != nil || res.Dup {
			t.Fatalf("the holder's FireHeld = %+v, %v", res, err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		mu.Lock()
		claims, fires := calls["claim_due"], calls["fire"]
		mu.Unlock()
		if claims != 0 || fires != 0 {
			t.Fatalf("the lagging worker made %d claims and %d firings; want none", claims, fires)
		}
		if got := fired(t, e.st); len(got) != 1 || got[0].Seq != res.Item.Seq || !got[0].EnqueuedAt.Equal(due) {
			t.Fatalf("firings %+v, want the holder's alone, at the due time", got)
		}
	})
}
