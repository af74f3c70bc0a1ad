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
)

// lateCommit is a store whose commits of one world return to the host a
// while after they landed (armed once): what a busy machine does to the
// host's goroutine between the store's commit and its next line.
type lateCommit struct {
	store.Store
	env   *lab.Env
	world string
	armed atomic.Bool
	late  time.Duration
}

func (s *lateCommit) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	res, err := s.Store.Commit(ctx, world, epoch, b)
	if err == nil && world == s.world && s.armed.CompareAndSwap(true, false) {
		if err := actor.Sleep(ctx, s.env.Lab, s.late); err != nil {
			return res, err
		}
	}
	return res, err
}

// TestStateAfterCallReadsItsWrite: a caller that got a call's reply and
// then reads State through the same node sees at least the height the
// reply was committed at, even when the reply could be re-derived from the
// journal before the node's host recorded its own commit (the commit lands
// in the store before it returns to the host). Before, the client answered
// from the journal at once and State, which asks the host first, gave the
// height before the call.
func TestStateAfterCallReadsItsWrite(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 23, Name: "read-your-writes"}, func(env *lab.Env) error {
		st := newStore(env)
		late := &lateCommit{Store: st, env: env, world: "p0", late: time.Second}
		if err := createAssigned(env.Ctx, st, "p0", "A"); err != nil {
			return err
		}
		replies := plane.NewReplies()
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", late, replies))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab,
			Replies: replies, Hosts: []*plane.Host{h}})
		if err != nil {
			return err
		}
		if _, err := c.Send(env.Ctx, "p0", Add{By: 5, Key: "a"}, "a"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p0 at height 1 on A", 5*time.Second, func() (bool, error) {
			s, ok := h.State("p0")
			return ok && s.Height == 1, nil
		}); err != nil {
			return err
		}
		late.armed.Store(true)
		n, err := plane.CallAs[int64](env.Ctx, c, "p0", Get{})
		if err != nil || n != 5 {
			return fmt.Errorf("Get = %d, %v; want 5", n, err)
		}
		if late.armed.Load() {
			return fmt.Errorf("the call's commit was not held back: the test shows nothing")
		}
		s, ok := h.State("p0")
		if !ok || s.Height < 2 {
			return fmt.Errorf("host State after the reply: height %d (ok %v), want at least 2", s.Height, ok)
		}
		cs, err := c.State(env.Ctx, "p0")
		if err != nil || cs.Height < 2 {
			return fmt.Errorf("client State after the reply: height %d (%v), want at least 2", cs.Height, err)
		}
		return nil
	})
}
