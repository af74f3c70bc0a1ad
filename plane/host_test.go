package plane_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// TestHostRunsWorldsAndAnswersCalls: a host acquires the leases of the
// worlds assigned to it, drains their inboxes through the kernel in
// committed cycles, answers calls in-process, and the journal replays to
// the same state byte for byte.
func TestHostRunsWorldsAndAnswersCalls(t *testing.T) {
	res := lab.Run(lab.Config{Seed: 1, Name: "host-basic"}, func(env *lab.Env) error {
		st := newStore(env)
		replies := plane.NewReplies()
		for _, w := range []string{"w1", "w2"} {
			if err := createAssigned(env.Ctx, st, w, "A"); err != nil {
				return err
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", st, replies))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Replies: replies, Hosts: []*plane.Host{h}})
		if err != nil {
			return err
		}
		for i := range 10 {
			for _, w := range []string{"w1", "w2"} {
				if _, err := c.Send(env.Ctx, w, Add{By: int64(i), Key: fmt.Sprint(i)}, fmt.Sprint("k", i)); err != nil {
					return err
				}
			}
		}
		ack, err := c.Send(env.Ctx, "w1", Add{By: 100, Key: "dup"}, "k3")
		if err != nil || !ack.Duplicate {
			return fmt.Errorf("a repeated key was not deduplicated: %+v %v", ack, err)
		}
		n, err := plane.CallAs[int64](env.Ctx, c, "w1", Get{})
		if err != nil {
			return err
		}
		if n != 45 {
			return fmt.Errorf("Get = %d, want 45", n)
		}
		if _, err := c.Call(env.Ctx, "w2", Add{By: 1}); !errors.Is(err, plane.ErrCallFailed) || !errors.Is(err, world.ErrNoReply) {
			return fmt.Errorf("a call without a reply: %v", err)
		}
		for _, w := range []string{"w1", "w2"} {
			s, err := parity(env.Ctx, st, w)
			if err != nil {
				return err
			}
			got, err := c.State(env.Ctx, w)
			if err != nil {
				return err
			}
			if string(got.State) != string(s.State) || got.Height != s.Height {
				return fmt.Errorf("%s: State %d differs from the replay at %d", w, got.Height, s.Height)
			}
		}
		return nil
	})
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
}

// TestCycleBudgetsBoundEachCommit: with MaxTickStepsPerCycle 2, a backlog
// of seven items is committed in cycles of at most two steps each, one
// commit per cycle, and nothing is lost between them.
func TestCycleBudgetsBoundEachCommit(t *testing.T) {
	res := lab.Run(lab.Config{Seed: 4, Name: "budgets"}, func(env *lab.Env) error {
		st := newStore(env)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		if err := createAssigned(env.Ctx, st, "b", "A"); err != nil {
			return err
		}
		for i := range 7 {
			if _, err := c.Send(env.Ctx, "b", Add{By: 1, Key: fmt.Sprint(i)}, fmt.Sprint(i)); err != nil {
				return err
			}
		}
		var heights []uint64
		cfg := hostConfig("A", st, nil)
		cfg.MaxTickStepsPerCycle = 2
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvCommit {
				heights = append(heights, ev.Height)
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := drained(env, st, "b"); err != nil {
			return err
		}
		if fmt.Sprint(heights) != "[2 4 6 7]" {
			return fmt.Errorf("commit heads %v, want [2 4 6 7]", heights)
		}
		_, err = parity(env.Ctx, st, "b")
		return err
	})
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
}
