package leasing_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/leasing"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store/memstore"
)

// The store answers an acquire of a lease this incarnation holds already
// with the lease unchanged (a retried acquire whose first answer was lost,
// or one after the holder fenced the lease locally): its expiry counts
// from the earlier request. The holder renews such a kept lease before it
// counts a deadline, so the local deadline never outlives the store's
// expiry and nobody else can take the world while it still writes.
func TestAKeptLeaseIsRenewedBeforeItsDeadlineCounts(t *testing.T) {
	for _, many := range []bool{false, true} {
		t.Run(fmt.Sprint("many ", many), func(t *testing.T) {
			setup(t, 0, nil, func(env *lab.Env, st *memstore.Store, _ func() time.Time) error {
				const ttl, safety = time.Second, 10 * time.Millisecond
				h := leasing.New(leasing.Config{Worker: "A", Incarnation: "i1", Store: st, Executor: env.Lab, TTL: ttl, Safety: safety})
				acquire := func() (leasing.Grant, error) {
					if !many {
						return h.Acquire(env.Ctx, "w")
					}
					res, gs, err := h.AcquireMany(env.Ctx, []string{"w"})
					if err != nil {
						return leasing.Grant{}, err
					}
					return gs[0], res[0].Err
				}
				if _, err := acquire(); err != nil { // its answer is "lost"
					return err
				}
				if err := actor.Sleep(env.Ctx, env.Lab, 600*time.Millisecond); err != nil {
					return err
				}
				g, err := acquire() // the retry: the store keeps the lease
				if err != nil {
					return err
				}
				var l leasing.Lease
				h.Track(&l, g)
				if err := actor.Sleep(env.Ctx, env.Lab, 500*time.Millisecond); err != nil {
					return err
				}
				other, err := st.Acquire(env.Ctx, "w", "B", ttl)
				if err == nil && l.Live() {
					return fmt.Errorf("B took the lease at epoch %d while A's (epoch %d) is still live locally until %v",
						other.Epoch, l.Epoch, h.Time(l.Deadline()))
				}
				if err == nil {
					return fmt.Errorf("B took the lease 1.1s after A's retried acquire of a 1s lease: it was not renewed")
				}
				return nil
			})
		})
	}
}
