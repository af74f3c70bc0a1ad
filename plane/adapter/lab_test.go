package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

var errInjected = errors.New("injected store failure")

// labAdapter sleeps a seeded time on the lab's clock, sometimes past its
// claim (deaf to its context), and records each call.
type labAdapter struct {
	ex    *lab.Executor
	mu    sync.Mutex
	calls []call
}

func (*labAdapter) Kinds() []string { return []string{kindTest} }

func (a *labAdapter) Execute(ctx context.Context, item vocab.EffectItem) (effect.Result, error) {
	a.mu.Lock()
	a.calls = append(a.calls, call{hash: item.IntentHash, attempt: item.Attempt, worker: item.ClaimedBy})
	a.mu.Unlock()
	d := time.Duration(a.ex.Uint64()%4000) * time.Millisecond // up to 4s, against a 3s claim
	_ = actor.Sleep(context.WithoutCancel(ctx), a.ex, d)
	if a.ex.Buggify("adapter.transient") {
		return effect.Result{}, errTransient
	}
	return effect.OK(item.IntentHash[:8]), nil
}

// dispatchUnderLab: two pools and the effect reaper race on 12 effects in
// the deterministic lab, with store calls failing at seeded points and
// adapters overrunning their claims; every intent ends with exactly one
// receipt and no claim is executed twice.
func dispatchUnderLab(lost *adapter.Stats) lab.Scenario {
	return func(env *lab.Env) error { return dispatchRun(env, lost) }
}

func dispatchRun(env *lab.Env, total *adapter.Stats) error {
	hook := func(op string) error {
		if (op == "claim" || op == "complete_many" || op == "reap_effects") && env.Lab.Buggify("store."+op) {
			return errInjected
		}
		return nil
	}
	st := memstore.New(memstore.WithClock(env.Lab.Now), memstore.WithHook(hook))
	ctx := env.Ctx
	if _, err := st.CreateWorld(ctx, "u", "w1", nil); err != nil {
		return err
	}
	var l store.Lease
	for {
		var err error
		if l, err = st.Acquire(ctx, "w1", "host", store.MaxTTL); err == nil {
			break
		}
	}
	var hashes []string
	for i := 0; i < 12; i++ {
		params, _ := event.Marshal(i)
		h := world.IntentHash("w1", uint64(i+1), 0, kindTest, params)
		hashes = append(hashes, h)
		for {
			if _, err := st.Publish(ctx, "w1", l.Epoch, []vocab.Intent{{IntentHash: h, Kind: kindTest, Params: params, Origin: fmt.Sprintf("w1@%d", i+1)}}); err == nil {
				break
			}
		}
	}
	const ttl = 3 * time.Second
	a := &labAdapter{ex: env.Lab}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	running := 0
	exited := env.Lab.NewParker()
	spawn := func(f func(context.Context) error) {
		mu.Lock()
		running++
		mu.Unlock()
		env.Lab.Go(func() {
			_ = f(runCtx)
			mu.Lock()
			running--
			mu.Unlock()
			exited.Unpark()
		})
	}
	var pools []*adapter.Pool
	for _, w := range []string{"pool-a", "pool-b"} {
		p, err := adapter.NewPool(st, adapter.Config{Worker: w, Executor: env.Lab, ClaimTTL: ttl, Concurrency: 3},
			adapter.Register(a, adapter.RetryPolicy{Attempts: 2, Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}))
		if err != nil {
			return err
		}
		pools = append(pools, p)
		spawn(p.Run)
	}
	spawn(func(ctx context.Context) error {
		return reaper.Run(ctx, reaper.Config{Executor: env.Lab}, reaper.Effects(st, ttl))
	})

	inbox := env.Lab.NewParker()
	stop, err := st.Watch(ctx, inbox, store.TopicInbox("w1"))
	if err != nil {
		return err
	}
	defer stop()
	for {
		items, err := st.ReadInbox(ctx, "w1", 0, 0)
		if err != nil {
			return err
		}
		if len(items) >= len(hashes) {
			break
		}
		if err := inbox.Park(ctx); err != nil {
			return err
		}
	}
	// Let late executions finish: each ends within its 4s sleep plus a
	// completion retry; then stop everything and wait for it.
	wait := env.Lab.NewParker()
	env.Lab.AfterFunc(time.Minute, wait.Unpark)
	_ = wait.Park(ctx)
	cancel()
	for {
		mu.Lock()
		n := running
		mu.Unlock()
		if n == 0 {
			break
		}
		_ = exited.Park(context.Background())
	}

	for _, p := range pools {
		s := p.Stats()
		total.ClaimLost += s.ClaimLost
		total.Duplicates += s.Duplicates
		total.Dropped += s.Dropped
		total.Claimed += s.Claimed
	}
	items, err := st.ReadInbox(ctx, "w1", 0, 0)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, it := range items {
		var r world.Receipt
		if err := world.Decode(it.Payload, &r); err != nil {
			return err
		}
		if seen[r.IntentHash] {
			return fmt.Errorf("intent %s has two receipts", r.IntentHash[:8])
		}
		seen[r.IntentHash] = true
	}
	for _, h := range hashes {
		if !seen[h] {
			return fmt.Errorf("intent %s has no receipt", h[:8])
		}
	}
	if len(seen) != len(hashes) {
		return fmt.Errorf("%d receipts for %d intents", len(seen), len(hashes))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Retries within a claim are allowed by the policy; what may not
	// happen is one claim executed by two goroutines or after its receipt:
	// at most Attempts calls per claim.
	for k, n := range perClaim(a.calls) {
		if n > 2 {
			return fmt.Errorf("claim %s executed %d times (policy allows 2 attempts)", k, n)
		}
	}
	return nil
}

// TestDuplicateDispatchUnderLab runs dispatchUnderLab over seeds with
// seeded store faults; a seed replays to the same trace.
func TestDuplicateDispatchUnderLab(t *testing.T) {
	var total adapter.Stats
	faults := 0
	for seed := uint64(1); seed <= 25; seed++ {
		cfg := lab.Config{Seed: seed, Faults: lab.Faults{Buggify: 0.15}, Name: "adapter-dispatch"}
		res := lab.Run(cfg, dispatchUnderLab(&total))
		for _, ev := range res.Events {
			if ev.Detail == "buggify store.complete" || ev.Detail == "buggify store.claim" {
				faults++
			}
		}
		if res.Failure != nil {
			t.Fatalf("seed %d: %v (replay: go test ./plane/adapter -run '^TestDuplicateDispatchUnderLab$')", seed, res.Failure)
		}
		if seed == 1 {
			again := lab.Run(cfg, dispatchUnderLab(&adapter.Stats{}))
			if again.Fingerprint != res.Fingerprint {
				t.Fatal("the same seed ran differently: something escaped the executor seam")
			}
		}
	}
	// The seeds must have exercised what the test is about: overruns
	// past the claim (results dropped, or a completion that lost the
	// race: lost claims, late duplicates), reclaims and store failures.
	if total.ClaimLost+total.Duplicates+total.Dropped == 0 || faults == 0 || total.Claimed <= 25*12 {
		t.Fatalf("the seeds exercised nothing: %+v, %d injected store faults", total, faults)
	}
	t.Logf("over 25 seeds: %+v, %d injected store faults", total, faults)
}
