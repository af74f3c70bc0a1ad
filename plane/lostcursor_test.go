package plane_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// forgetfulStore answers its first Cursor reads from before a failover to
// an asynchronous standby that lost the commits behind them: a cursor far
// past the inbox, whose journal records the new primary no longer has.
type forgetfulStore struct {
	store.Store
	lies atomic.Int32
	// loseCall: the first call's enqueue is acknowledged at the next
	// seq and then lost with the commits.
	loseCall atomic.Bool
	// reuse: the lost call is acknowledged at the cursor's seq (an input
	// enqueued before took it) rather than the next free one.
	reuse atomic.Bool
}

func (f *forgetfulStore) Enqueue(ctx context.Context, world string, it store.InboxItem) (uint64, bool, error) {
	if it.Kind == vocab.KindCall && f.loseCall.CompareAndSwap(true, false) {
		cur, err := f.Store.Cursor(ctx, world)
		if f.reuse.Load() {
			return cur + 1, false, err // the seq the earlier input holds
		}
		items, err := f.Store.ReadInbox(ctx, world, cur, 100)
		return cur + uint64(len(items)) + 1, false, err
	}
	return f.Store.Enqueue(ctx, world, it)
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

// TestACallWhoseItemTheStoreLostIsEnqueuedAgain: a call acknowledged at a
// seq whose item the store then lost (with its drain) is enqueued again
// under its key and answered, rather than waited for until the caller's
// deadline: whether the seq stayed empty, or another input took it.
func TestACallWhoseItemTheStoreLostIsEnqueuedAgain(t *testing.T) {
	for _, reused := range []bool{false, true} {
		t.Run(fmt.Sprintf("seq-taken-by-another-%v", reused), func(t *testing.T) {
			testrig.Lab(t, lab.Config{Seed: 6, Name: "lost-call"}, func(env *lab.Env) error {
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
				fs.loseCall.Store(true)
				c, err := plane.NewClient(plane.ClientConfig{Store: fs, Kernels: kernels(), Executor: env.Lab})
				if err != nil {
					return err
				}
				want := int64(0)
				if reused {
					// Sent first, with no cursor moved yet: the lost call
					// is acknowledged at the seq this input holds.
					fs.reuse.Store(true)
					payload, err := world.EncodeEvent(Add{By: 2, Key: "a"})
					if err != nil {
						return err
					}
					if _, _, err := st.Enqueue(env.Ctx, "w", store.InboxItem{Kind: vocab.KindEvent, Payload: payload, DedupeKey: "a"}); err != nil {
						return err
					}
					want = 2
				}
				ctx, cancel := actor.WithTimeout(env.Ctx, env.Lab, time.Minute)
				defer cancel()
				n, err := plane.CallAs[int64](ctx, c, "w", Get{})
				if err != nil {
					return fmt.Errorf("the call whose item was lost: %w", err)
				}
				if n != want {
					t.Errorf("Get = %d, want %d", n, want)
				}
				return nil
			})
		})
	}
}
