package plane_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// The store's clock and the host's disagree by seconds in these tests: the
// memstore reads the lab's clock plus an offset. A host must judge its own
// deadlines on its own clock and leave due times to the store's.

// skewedStore is a memstore whose clock runs skew ahead of the lab's.
func skewedStore(env *lab.Env, skew time.Duration, opts ...memstore.Option) (*memstore.Store, func() time.Time) {
	clock := func() time.Time { return env.Lab.Now().Add(skew) }
	return memstore.New(append([]memstore.Option{memstore.WithClock(clock)}, opts...)...), clock
}

// startHeld starts a host on cfg and waits until it holds w's lease.
func startHeld(env *lab.Env, cfg plane.HostConfig) (*plane.Host, error) {
	h, err := plane.StartHost(env.Ctx, env.Root, cfg)
	if err != nil {
		return nil, err
	}
	if err := testrig.WaitLab(env, "w held", 5*time.Second, func() (bool, error) {
		_, ok := h.Lease("w")
		return ok, nil
	}); err != nil {
		_ = h.Stop(env.Ctx)
		return nil, err
	}
	return h, nil
}

// awaitCounter waits until h's copy of w is a counter done says is done.
func awaitCounter(env *lab.Env, h *plane.Host, what string, limit time.Duration, done func(counter) bool) error {
	return testrig.WaitLab(env, what, limit, func() (bool, error) {
		s, ok := h.State("w")
		if !ok {
			return false, nil
		}
		v, err := value(s, "w")
		return err == nil && done(v), err
	})
}

// sendAdd sends w the i-th Add of one, under its own key.
func sendAdd(env *lab.Env, c *plane.Client, i int) error {
	_, err := c.Send(env.Ctx, "w", Add{By: 1, Key: fmt.Sprint(i)}, fmt.Sprint("k", i))
	return err
}

// TestHostKeepsItsLeaseWithTheStoreClockSkewed: with the store's clock 3s
// ahead of the host's, or 3s behind, and a 2s lease, the host holds its
// world in steady state without a break: the lease never lapses in the
// store (renewals are planned on the host's own clock, from before each
// request), the host never fences it spuriously (its deadline is its own
// clock's, not the store's expiresAt), and every input sent meanwhile is
// applied under the first epoch.
func TestHostKeepsItsLeaseWithTheStoreClockSkewed(t *testing.T) {
	for _, skew := range []time.Duration{3 * time.Second, -3 * time.Second} {
		t.Run(fmt.Sprint("store", skew), func(t *testing.T) {
			testrig.Lab(t, lab.Config{Seed: 41, Name: t.Name()}, func(env *lab.Env) error {
				st, storeNow := skewedStore(env, skew)
				if err := createAssigned(env.Ctx, st, "w", "A"); err != nil {
					return err
				}
				var mu sync.Mutex
				var fenced []plane.HostEvent
				cfg := hostConfig("A", st, nil)
				cfg.IdleAfter = -1
				cfg.Observe = func(ev plane.HostEvent) {
					if ev.Kind == plane.EvFenced {
						mu.Lock()
						fenced = append(fenced, ev)
						mu.Unlock()
					}
				}
				h, err := startHeld(env, cfg)
				if err != nil {
					return err
				}
				defer h.Stop(env.Ctx)
				c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
				const sends = 200 // every 50ms: 10s, five TTLs
				for i := range sends {
					if err := sendAdd(env, c, i); err != nil {
						return err
					}
					l, ok, err := st.GetLease(env.Ctx, "w")
					if err != nil {
						return err
					}
					if !ok || l.Holder != "A" || l.Epoch != 1 || !l.ExpiresAt.After(storeNow()) {
						return fmt.Errorf("after %d sends the store's lease is %+v at store time %v: want A's epoch 1, unexpired",
							i, l, storeNow())
					}
					if err := sleep(env, 50*time.Millisecond); err != nil {
						return err
					}
				}
				if err := awaitCounter(env, h, "every input applied", 5*time.Second, func(v counter) bool { return v.N == sends }); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if len(fenced) > 0 {
					return fmt.Errorf("the host fenced its own lease in steady state: %+v", fenced)
				}
				if epoch, ok := h.Lease("w"); !ok || epoch != 1 {
					return fmt.Errorf("w held %v at epoch %d, want epoch 1 throughout", ok, epoch)
				}
				return nil
			})
		})
	}
}

// TestStaleHostStopsBeforeItsLeaseLapsesInTheStore: with the store's clock
// 3s ahead of the host's, the host's renewals start failing (its store
// handle refuses them) while inputs keep coming. The host must stop
// stepping under that lease before the lease lapses by the store's clock:
// no step or commit at that epoch happens at or after the expiry the store
// recorded at the last renewal, so no handler runs while another worker
// could hold the world. Once renewals work again the host takes the world
// back at a higher epoch and every input is applied exactly once.
func TestStaleHostStopsBeforeItsLeaseLapsesInTheStore(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 43, Name: t.Name()}, func(env *lab.Env) error {
		st, storeNow := skewedStore(env, 3*time.Second)
		var failRenew atomic.Bool
		stA := st.Restart(memstore.WithHook(func(op string) error {
			if failRenew.Load() && op == "renew_leases" {
				return errors.New("injected: renewal lost on the way")
			}
			return nil
		}))
		if err := createAssigned(env.Ctx, st, "w", "A"); err != nil {
			return err
		}
		type step struct {
			at    time.Time // the store's clock
			epoch uint64
		}
		var mu sync.Mutex
		var steps []step
		cfg := hostConfig("A", stA, nil)
		cfg.IdleAfter = -1
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.World == "w" && (ev.Kind == plane.EvStep || ev.Kind == plane.EvCommit) {
				mu.Lock()
				steps = append(steps, step{storeNow(), ev.Epoch})
				mu.Unlock()
			}
		}
		h, err := startHeld(env, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		const sends = 140 // every 50ms: 7s
		var last store.Lease
		for i := range sends {
			switch i {
			case 20:
				failRenew.Store(true)
			case 22:
				// Whatever renewal was in flight has landed: the store's
				// expiry of this epoch no longer moves.
				if last, _, err = st.GetLease(env.Ctx, "w"); err != nil {
					return err
				}
			case 100:
				failRenew.Store(false)
			}
			if err := sendAdd(env, c, i); err != nil {
				return err
			}
			if err := sleep(env, 50*time.Millisecond); err != nil {
				return err
			}
		}
		if err := awaitCounter(env, h, "every input applied", 10*time.Second, func(v counter) bool { return v.N == sends }); err != nil {
			return err
		}
		if epoch, ok := h.Lease("w"); !ok || epoch <= last.Epoch {
			return fmt.Errorf("w held %v at epoch %d, want above the lapsed %d", ok, epoch, last.Epoch)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, s := range steps {
			if s.epoch == last.Epoch && !s.at.Before(last.ExpiresAt) {
				return fmt.Errorf("a step or commit at epoch %d at store time %v, at or after the lease lapsed in the store at %v",
					s.epoch, s.at, last.ExpiresAt)
			}
		}
		return nil
	})
}

// TestHeldTimerNeverFiresBeforeItsDueTimeByTheStoresClock: a world's timer
// is due at an instant of the store's clock (its world's time is the
// store's). With the host's clock 3s ahead of the store's, the host must
// not step the firing when its own clock passes the due time; with the
// host 3s behind, it must not wait for its own clock either. Each firing
// commits no earlier than its due time by the store's clock, and soon
// after it.
func TestHeldTimerNeverFiresBeforeItsDueTimeByTheStoresClock(t *testing.T) {
	for _, skew := range []time.Duration{-3 * time.Second, 3 * time.Second} {
		for _, inbox := range []bool{false, true} {
			t.Run(fmt.Sprintf("store%v/inbox=%v", skew, inbox), func(t *testing.T) {
				testrig.Lab(t, lab.Config{Seed: 47, Name: t.Name()}, func(env *lab.Env) error {
					st, storeNow := skewedStore(env, skew)
					if err := createAssigned(env.Ctx, st, "w", "A"); err != nil {
						return err
					}
					var mu sync.Mutex
					var fired []time.Time // the store's time at each firing
					cfg := hostConfig("A", st, nil)
					cfg.IdleAfter, cfg.TimersThroughInbox = -1, inbox
					// A lease long enough to outlast the skew even on a
					// host that compared the store's expiry with its own
					// clock: this test is about the timer alone.
					cfg.LeaseTTL = 10 * time.Second
					cfg.Observe = func(ev plane.HostEvent) {
						if ev.Kind == plane.EvTimerFired {
							mu.Lock()
							fired = append(fired, storeNow())
							mu.Unlock()
						}
					}
					h, err := plane.StartHost(env.Ctx, env.Root, cfg)
					if err != nil {
						return err
					}
					defer h.Stop(env.Ctx)
					c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
					const after = 1500 * time.Millisecond
					// The alarm's time is its inbox item's, which the store
					// stamps after this reading: its due time is later.
					dueAtLeast := storeNow().Add(after)
					if _, err := c.Send(env.Ctx, "w", Alarm{AfterMs: after.Milliseconds(), Key: "x"}, "alarm"); err != nil {
						return err
					}
					if err := awaitCounter(env, h, "the alarm fired", 10*time.Second, func(v counter) bool { return len(v.Fired) == 1 }); err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					if len(fired) != 1 {
						return fmt.Errorf("%d timer firings, want 1", len(fired))
					}
					if fired[0].Before(dueAtLeast) {
						return fmt.Errorf("the timer fired at store time %v, %v before its due time %v",
							fired[0], dueAtLeast.Sub(fired[0]), dueAtLeast)
					}
					if late := fired[0].Sub(dueAtLeast); late > 100*time.Millisecond {
						return fmt.Errorf("the timer fired %v after its due time by the store's clock", late)
					}
					return nil
				})
			})
		}
	}
}
