package plane_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// forgetfulStore answers its first Cursor reads from before a failover to
// an asynchronous standby that lost the commits behind them: a cursor far
// past the inbox, whose journal records the new primary no longer has.
type forgetfulStore struct {
	store.Store
	lies atomic.Int32
}

func (f *forgetfulStore) Cursor(ctx context.Context, world string) (uint64, error) {
	if f.lies.Add(-1) >= 0 {
		return 1 << 40, nil
	}
	return f.Store.Cursor(ctx, world)
}

// TestACallWhoseRecordTheStoreLostWaitsForItsAnswer: a caller that read a
// cursor past its call, then found no journal record of it (the store
// lost the commit in between: an asynchronous standby promoted), waits for
// the call to be answered again instead of refusing it for good as an
// unavailable reply.
func TestACallWhoseRecordTheStoreLostWaitsForItsAnswer(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "lost-cursor"}, func(env *lab.Env) error {
		st := newStore(env)
		if err := createAssigned(env.Ctx, st, "w", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", st, nil))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		fs := &forgetfulStore{Store: st}
		fs.lies.Store(1)
		c, err := plane.NewClient(plane.ClientConfig{Store: fs, Kernels: kernels(), Executor: env.Lab})
		if err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "w", Add{By: 4, Key: "a"}, "a"); err != nil {
			return err
		}
		n, err := plane.CallAs[int64](env.Ctx, c, "w", Get{})
		if err != nil {
			return err
		}
		if n != 4 {
			t.Errorf("Get = %d, want 4", n)
		}
		if fs.lies.Load() >= 0 {
			t.Errorf("the forgetful cursor was never read")
		}
		return nil
	})
}
