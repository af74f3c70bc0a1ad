package plane_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store/memstore"
)

// TestASupersededHostStopsActing: a host keeps a liveness deadline that
// moves forward with each heartbeat the store takes (AliveUntil). When a
// newer process starts under the same worker id, its heartbeat retires
// the old incarnation, whose next heartbeat the store refuses (ErrFenced).
// The old host must then stop acting at once: it fails (ErrHostFailed),
// its deadline is in the past for good, and OnLivenessLost is told, which
// a node uses to cancel the effect executions that rode on the promise.
// Before, the refusal counted as a passing store error: the zombie retried
// its heartbeat for ever and went on hosting.
func TestASupersededHostStopsActing(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "superseded"}, func(env *lab.Env) error {
		st := memstore.New(memstore.WithClock(env.Lab.Now))
		var lost, evs atomic.Int64
		hc := hostConfig("w1", st, plane.NewReplies())
		hc.Incarnation = "old"
		hc.OnLivenessLost = func() { lost.Add(1) }
		hc.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvIncarnationFenced {
				evs.Add(1)
			}
		}
		old, err := plane.StartHost(env.Ctx, env.Root, hc)
		if err != nil {
			return err
		}
		defer old.Kill(env.Ctx)
		if err := testrig.WaitLab(env, "the first promise", 10*time.Second, func() (bool, error) {
			return !old.AliveUntil().IsZero(), nil
		}); err != nil {
			return err
		}
		first := old.AliveUntil()
		if d := first.Sub(env.Lab.Now()); d <= 0 || d > 2*time.Second {
			return fmt.Errorf("deadline %v ahead, want within the 2 s TTL", d)
		}
		if err := testrig.WaitLab(env, "a later promise", 10*time.Second, func() (bool, error) {
			return old.AliveUntil().After(first), nil
		}); err != nil {
			return err
		}

		hc2 := hostConfig("w1", st, plane.NewReplies())
		hc2.Incarnation = "new"
		successor, err := plane.StartHost(env.Ctx, env.Root, hc2)
		if err != nil {
			return err
		}
		defer successor.Kill(env.Ctx)
		if err := testrig.WaitLab(env, "the old host fails", 10*time.Second, func() (bool, error) {
			return old.Err() != nil, nil
		}); err != nil {
			return err
		}
		if !errors.Is(old.Err(), plane.ErrHostFailed) {
			return fmt.Errorf("old host's error %v, want ErrHostFailed", old.Err())
		}
		if !old.AliveUntil().Before(env.Lab.Now()) {
			return fmt.Errorf("old host's deadline %v is not past", old.AliveUntil())
		}
		if n := lost.Load(); n != 1 {
			return fmt.Errorf("OnLivenessLost told %d times, want 1", n)
		}
		if n := evs.Load(); n != 1 {
			return fmt.Errorf("%d EvIncarnationFenced events, want 1 (orrery_incarnation_fenced_total counts them)", n)
		}
		if successor.Err() != nil {
			return fmt.Errorf("the successor failed: %v", successor.Err())
		}
		return nil
	})
}
