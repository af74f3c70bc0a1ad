package reaper_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

type obs struct {
	mu   sync.Mutex
	runs []string
	at   []time.Duration
	n    []int
}

// TestRunRequeuesExpiredEffectClaimOnTTLSchedule: the effect reaper runs
// every half claim TTL; an effect claimed and abandoned at 0 with a 10s
// TTL is requeued by the run at 10s, exactly when its claim expires, and
// the dedupe sweeper runs every eighth of the retention.
func TestRunRequeuesExpiredEffectClaimOnTTLSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New(memstore.WithClock(time.Now), memstore.WithDedupeRetention(80*time.Minute))
		if _, err := st.CreateWorld(ctx, "u", "w1", nil); err != nil {
			t.Fatal(err)
		}
		l, err := st.Acquire(ctx, "w1", "h", store.MaxTTL)
		if err != nil {
			t.Fatal(err)
		}
		h := world.IntentHash("w1", 1, 0, "k", []byte{0xa0})
		if _, err := st.Publish(ctx, "w1", l.Epoch, []vocab.Intent{{IntentHash: h, Kind: "k", Params: []byte{0xa0}, Origin: "w1@1"}}); err != nil {
			t.Fatal(err)
		}
		const ttl = 10 * time.Second
		if got, err := st.Claim(ctx, "dead-pool", []string{"k"}, 1, ttl); err != nil || len(got) != 1 {
			t.Fatalf("claim %v %v", got, err)
		}
		start := time.Now()
		o := &obs{}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- reaper.Run(rctx, reaper.Config{Executor: actor.NewExecutor(1), Observe: func(job string, n int, err error) {
				o.mu.Lock()
				defer o.mu.Unlock()
				o.runs = append(o.runs, job)
				o.at = append(o.at, time.Since(start))
				o.n = append(o.n, n)
			}}, reaper.Effects(st, ttl), reaper.Dedupe(st))
		}()
		time.Sleep(10*time.Minute + time.Second)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		var effects, sweeps []time.Duration
		for i, j := range o.runs {
			switch j {
			case "reap_effects":
				effects = append(effects, o.at[i])
				want := 0
				if o.at[i] == 10*time.Second {
					want = 1
				}
				if o.n[i] != want {
					t.Fatalf("reap at %v requeued %d, want %d", o.at[i], o.n[i], want)
				}
			case "sweep_dedupe":
				sweeps = append(sweeps, o.at[i])
			}
		}
		if len(effects) != 120 || effects[0] != 5*time.Second || effects[1] != 10*time.Second {
			t.Fatalf("effect reaps at %v…, %d in all; want every 5s", effects[:2], len(effects))
		}
		if len(sweeps) != 1 || sweeps[0] != 10*time.Minute {
			t.Fatalf("sweeps at %v, want one at 10m (80m/8)", sweeps)
		}
		if s, _ := st.EffectStatus(ctx, h); s.State != vocab.EffectPending {
			t.Fatalf("effect %s after the reap, want pending", s.State)
		}
	})
}

// TestRunKeepsGoingAfterJobErrors: a failing job is retried at its next
// period, not in a loop.
func TestRunKeepsGoingAfterJobErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Duration
		start := time.Now()
		job := reaper.Job{Name: "flaky", Every: time.Second, Do: func(context.Context) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Since(start))
			return 0, errors.New("store down")
		}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- reaper.Run(ctx, reaper.Config{Executor: actor.NewExecutor(1)}, job) }()
		time.Sleep(3*time.Second + time.Millisecond)
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 3 || at[0] != time.Second || at[2] != 3*time.Second {
			t.Fatalf("runs at %v, want 1s, 2s, 3s", at)
		}
	})
}

func TestRunRejectsBadJobs(t *testing.T) {
	ex := actor.NewExecutor(1)
	if err := reaper.Run(context.Background(), reaper.Config{Executor: ex}); !errors.Is(err, reaper.ErrNoJobs) {
		t.Fatalf("no jobs: %v", err)
	}
	if err := reaper.Run(context.Background(), reaper.Config{Executor: ex}, reaper.Job{Name: "x"}); err == nil {
		t.Fatal("a job without period or function was accepted")
	}
	if err := reaper.Run(context.Background(), reaper.Config{}, reaper.Job{Name: "x", Every: 1, Do: func(context.Context) (int, error) { return 0, nil }}); err == nil {
		t.Fatal("no executor was accepted")
	}
}
