package plane_test

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// lostCommitAnswer is a store whose next commit (once armed) lands and then
// fails as a lost connection would: the host cannot tell it happened.
type lostCommitAnswer struct {
	store.Store
	armed atomic.Bool
}

func (s *lostCommitAnswer) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	res, err := s.Store.Commit(ctx, world, epoch, b)
	if err == nil && s.armed.CompareAndSwap(true, false) {
		return store.CommitResult{}, &store.Error{Op: "commit", Kind: store.Unavailable(io.ErrUnexpectedEOF)}
	}
	return res, err
}

// TestStateAfterALostCommitAnswerIsNotBehind: a commit that lands but
// whose answer is lost crashes the world's process while the host keeps
// the lease; until the restarted process restores, the host does not know
// its head, so State must not answer the height before the commit (it did:
// the seeded plane simulation caught a holder at height 6 with the journal
// at 7, in the supervisor's restart backoff). Once restored, State answers
// the store's head.
func TestStateAfterALostCommitAnswerIsNotBehind(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 39, Name: "lost-commit-answer"}, func(env *lab.Env) error {
		st := newStore(env)
		lossy := &lostCommitAnswer{Store: st}
		if err := createAssigned(env.Ctx, st, "p0", "A"); err != nil {
			return err
		}
		var host atomic.Pointer[plane.Host]
		type seen struct {
			state  uint64
			ok     bool
			stored uint64
		}
		var atCrash atomic.Pointer[seen]
		cfg := hostConfig("A", lossy, plane.NewReplies())
		cfg.Observe = func(ev plane.HostEvent) {
			h := host.Load()
			if ev.Kind != plane.EvCrash || ev.World != "p0" || h == nil {
				return
			}
			s, ok := h.State("p0")
			head, err := st.Head(env.Ctx, "p0")
			if err != nil {
				head = 0
			}
			atCrash.CompareAndSwap(nil, &seen{state: s.Height, ok: ok, stored: head})
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		host.Store(h)
		defer h.Stop(env.Ctx)
		c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Hosts: []*plane.Host{h}})
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
		lossy.armed.Store(true)
		if _, err := c.Send(env.Ctx, "p0", Add{By: 2, Key: "b"}, "b"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "p0's process crashed on the lost answer", 5*time.Second, func() (bool, error) {
			return atCrash.Load() != nil, nil
		}); err != nil {
			return err
		}
		got := atCrash.Load()
		if got.stored != 2 || lossy.armed.Load() {
			return fmt.Errorf("the lost commit did not land (store head %d): the test shows nothing", got.stored)
		}
		if got.ok && got.state != got.stored {
			return fmt.Errorf("host State after a lost commit answer: height %d, the store's head is %d", got.state, got.stored)
		}
		if err := testrig.WaitLab(env, "p0 restored at height 2 on A", 5*time.Second, func() (bool, error) {
			s, ok := h.State("p0")
			return ok && s.Height == 2, nil
		}); err != nil {
			return err
		}
		if s, err := c.State(env.Ctx, "p0"); err != nil || s.Height != 2 {
			return fmt.Errorf("client State: height %d (%v), want 2", s.Height, err)
		}
		return nil
	})
}
