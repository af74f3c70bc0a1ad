package leasing_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/leasing"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// setup runs body under the lab with a memstore whose clock is skew ahead
// of the lab's, holding world "w", and the hook's faults.
func setup(t *testing.T, skew time.Duration, hook func(env *lab.Env, op string) error,
	body func(env *lab.Env, st *memstore.Store, storeNow func() time.Time) error) {
	t.Helper()
	res := lab.Run(lab.Config{Seed: 7, Name: t.Name()}, func(env *lab.Env) error {
		storeNow := func() time.Time { return env.Lab.Now().Add(skew) }
		opts := []memstore.Option{memstore.WithClock(storeNow)}
		if hook != nil {
			opts = append(opts, memstore.WithHook(func(op string) error { return hook(env, op) }))
		}
		st := memstore.New(opts...)
		if _, err := st.CreateWorld(env.Ctx, "u", "w", nil); err != nil {
			return err
		}
		return body(env, st, storeNow)
	})
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
}

// TestDeadlineCountsFromBeforeTheRequest: a lease's local deadline is the
// executor's time just before the Acquire was sent plus the TTL (less the
// safety margin), however long the answer took and wherever the store's
// clock stands (an hour ahead or behind): the store's expiresAt is never
// read.
func TestDeadlineCountsFromBeforeTheRequest(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			slow := func(env *lab.Env, op string) error {
				if op == "acquire_leases" {
					return actor.Sleep(env.Ctx, env.Lab, 400*time.Millisecond)
				}
				return nil
			}
			setup(t, skew, slow, func(env *lab.Env, st *memstore.Store, _ func() time.Time) error {
				const ttl, safety = time.Second, 10 * time.Millisecond
				h := leasing.New(leasing.Config{Worker: "A", Store: st, Executor: env.Lab, TTL: ttl, Safety: safety})
				sent := env.Lab.Now()
				g, err := h.Acquire(env.Ctx, "w")
				if err != nil {
					return err
				}
				if took := env.Lab.Now().Sub(sent); took < 400*time.Millisecond {
					return fmt.Errorf("the acquire took %v: the slow answer this test is about never happened", took)
				}
				var l leasing.Lease
				h.Hold(&l, g)
				if got, want := h.Time(l.Deadline()), sent.Add(ttl-safety); !got.Equal(want) {
					return fmt.Errorf("deadline %v, want %v (before the request + TTL − safety)", got, want)
				}
				if !l.Live() {
					return errors.New("the lease is not live right after its grant")
				}
				if err := actor.Sleep(env.Ctx, env.Lab, sent.Add(ttl-safety).Sub(env.Lab.Now())-time.Millisecond); err != nil {
					return err
				}
				if !l.Live() {
					return errors.New("the lease is not live a millisecond before its deadline")
				}
				if err := actor.Sleep(env.Ctx, env.Lab, time.Millisecond); err != nil {
					return err
				}
				if l.Live() || !l.Fenced() {
					return errors.New("the lease is still live at its deadline")
				}
				return nil
			})
		})
	}
}

// TestRenewKeepsTheLeaseUnexpiredInTheStore: with the store's clock 3s
// ahead or behind and a 1s TTL, a holder that calls Renew when it says
// keeps its lease unexpired in the store, at one epoch, and never loses it.
func TestRenewKeepsTheLeaseUnexpiredInTheStore(t *testing.T) {
	for _, skew := range []time.Duration{3 * time.Second, -3 * time.Second} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			setup(t, skew, nil, func(env *lab.Env, st *memstore.Store, storeNow func() time.Time) error {
				var lost atomic.Int32
				h := leasing.New(leasing.Config{Worker: "A", Store: st, Executor: env.Lab, TTL: time.Second,
					OnLost: func(*leasing.Lease, error) { lost.Add(1) }})
				g, err := h.Acquire(env.Ctx, "w")
				if err != nil {
					return err
				}
				var l leasing.Lease
				h.Hold(&l, g)
				next := h.Renew(env.Ctx, false)
				for end := env.Lab.Now().Add(10 * time.Second); env.Lab.Now().Before(end); {
					if err := actor.Sleep(env.Ctx, env.Lab, 10*time.Millisecond); err != nil {
						return err
					}
					if !env.Lab.Now().Before(next) {
						next = h.Renew(env.Ctx, false)
					}
					cur, _, err := st.GetLease(env.Ctx, "w")
					if err != nil {
						return err
					}
					if cur.Holder != "A" || cur.Epoch != g.Lease.Epoch || !cur.ExpiresAt.After(storeNow()) {
						return fmt.Errorf("the store's lease is %+v at store time %v", cur, storeNow())
					}
					if !l.Live() {
						return errors.New("the lease is not live in steady state")
					}
				}
				if n := lost.Load(); n != 0 {
					return fmt.Errorf("%d leases reported lost", n)
				}
				return nil
			})
		})
	}
}

// TestFailedRenewalsFenceAtTheLocalDeadline: while every RenewLeases call
// fails, the lease stays live until its local deadline and no later; the
// Renew after that reports it lost (once) and stops
// renewing it.
func TestFailedRenewalsFenceAtTheLocalDeadline(t *testing.T) {
	var fail atomic.Bool
	injected := errors.New("injected: the store is unreachable")
	hook := func(_ *lab.Env, op string) error {
		if fail.Load() && op == "renew_leases" {
			return injected
		}
		return nil
	}
	setup(t, 3*time.Second, hook, func(env *lab.Env, st *memstore.Store, _ func() time.Time) error {
		var lostErr []error
		h := leasing.New(leasing.Config{Worker: "A", Store: st, Executor: env.Lab, TTL: time.Second,
			RetryAfter: 50 * time.Millisecond,
			OnLost:     func(_ *leasing.Lease, err error) { lostErr = append(lostErr, err) }})
		g, err := h.Acquire(env.Ctx, "w")
		if err != nil {
			return err
		}
		var l leasing.Lease
		h.Hold(&l, g)
		fail.Store(true)
		deadline := h.Time(l.Deadline())
		for env.Lab.Now().Before(deadline) {
			if !l.Live() {
				return fmt.Errorf("the lease died at %v, before its deadline %v", env.Lab.Now(), deadline)
			}
			next := h.Renew(env.Ctx, false)
			if err := actor.Sleep(env.Ctx, env.Lab, max(next.Sub(env.Lab.Now()), time.Millisecond)); err != nil {
				return err
			}
		}
		if l.Live() {
			return errors.New("the lease is live past its deadline")
		}
		h.Renew(env.Ctx, false)
		if len(lostErr) != 1 || (lostErr[0] != nil && !errors.Is(lostErr[0], injected)) || h.Held() != 0 {
			return fmt.Errorf("lost reports %v and %d leases still renewed; want one report and none", lostErr, h.Held())
		}
		return nil
	})
}

// TestRefusedRenewalIsReportedLost: a lease the store no longer grants (it
// was released behind the holder's back) is reported lost with the
// store's refusal at the next renewal, fenced, and renewed no more.
func TestRefusedRenewalIsReportedLost(t *testing.T) {
	setup(t, 0, nil, func(env *lab.Env, st *memstore.Store, _ func() time.Time) error {
		var lostErr []error
		h := leasing.New(leasing.Config{Worker: "A", Store: st, Executor: env.Lab, TTL: time.Second,
			OnLost: func(_ *leasing.Lease, err error) { lostErr = append(lostErr, err) }})
		g, err := h.Acquire(env.Ctx, "w")
		if err != nil {
			return err
		}
		var l leasing.Lease
		h.Hold(&l, g)
		if err := st.Release(env.Ctx, "w", "A", g.Lease.Epoch); err != nil {
			return err
		}
		h.Renew(env.Ctx, true)
		if len(lostErr) != 1 || !errors.Is(lostErr[0], store.ErrNotHolder) && !errors.Is(lostErr[0], store.ErrStaleEpoch) {
			return fmt.Errorf("lost reports %v, want one refusal", lostErr)
		}
		if l.Live() || h.Held() != 0 {
			return errors.New("a refused lease is still live or renewed")
		}
		return nil
	})
}
