package plane_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/internal/backendtest"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
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

// TestHintStormCoalescesScans: forty worlds are assigned to a worker one
// every 10ms; each assignment raises a hint on a global topic. The host
// scans its worlds at most once per HintSyncGap (and once more for the
// hints that came during a pass), not once per hint, and still acquires
// every world.
func TestHintStormCoalescesScans(t *testing.T) {
	res := lab.Run(lab.Config{Seed: 12, Name: "hint-storm"}, func(env *lab.Env) error {
		st := newStore(env)
		const n = 40
		for i := range n {
			if _, err := st.CreateWorld(env.Ctx, universe, fmt.Sprint("h", i), nil); err != nil {
				return err
			}
		}
		scans := 0
		cfg := hostConfig("A", st, nil)
		cfg.HintSyncGap = 100 * time.Millisecond
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvSynced {
				scans++
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := sleep(env, 10*time.Millisecond); err != nil {
			return err
		}
		scans = 0
		for i := range n {
			if err := st.Assign(env.Ctx, fmt.Sprint("h", i), store.Assignment{DesiredWorker: "A"}, nil); err != nil {
				return err
			}
			if err := sleep(env, 10*time.Millisecond); err != nil {
				return err
			}
		}
		if err := waitFor(env, "every world held", 2*time.Second, func() (bool, error) {
			held, _ := h.Worlds()
			return len(held) == n, nil
		}); err != nil {
			return err
		}
		// 400ms of hints at one per 100ms, plus one pass for the last
		// hints and the backstop: far fewer than forty.
		if scans > 8 {
			return fmt.Errorf("%d scans for %d hints", scans, n)
		}
		return nil
	})
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
}

// TestSlowScanDoesNotStarveRenewals: a worker holds thirty worlds and its
// store answers each ListWorkerWorlds page slowly, so one pass over its
// worlds lasts twice the lease TTL. The controller renews between pages,
// so no lease is lost.
func TestSlowScanDoesNotStarveRenewals(t *testing.T) {
	res := lab.Run(lab.Config{Seed: 13, Name: "slow-scan"}, func(env *lab.Env) error {
		base := newStore(env)
		const n = 30
		for i := range n {
			if err := createAssigned(env.Ctx, base, fmt.Sprint("s", i), "A"); err != nil {
				return err
			}
		}
		st := backendtest.NewHandle(base, func(op string) error {
			if op == "list_worker_worlds" {
				return sleep(env, 300*time.Millisecond)
			}
			return nil
		})
		var lost []plane.HostEvent
		cfg := hostConfig("A", st, nil)
		cfg.LeaseTTL, cfg.ListPage = time.Second, 5 // a pass: 7 pages, 2.1s
		cfg.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvFenced {
				lost = append(lost, ev)
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := sleep(env, 6*time.Second); err != nil {
			return err
		}
		if len(lost) != 0 {
			return fmt.Errorf("%d leases lost during slow scans, the first %+v", len(lost), lost[0])
		}
		held, _ := h.Worlds()
		if len(held) != n {
			return fmt.Errorf("%d worlds held, want %d", len(held), n)
		}
		for _, w := range held {
			if epoch, _ := h.Lease(w); epoch != 1 {
				return fmt.Errorf("%s at epoch %d: it was lost and taken again", w, epoch)
			}
		}
		return nil
	})
	if res.Failure != nil {
		t.Fatal(res.Failure)
	}
}

// TestHostAcquiresAPageConcurrently: a host taking over many worlds runs
// their acquisitions in overlapping lanes (AcquireConcurrency), not one
// store round trip after another; with AcquireConcurrency 1 they are
// strictly one at a time. Either way every world ends up held.
func TestHostAcquiresAPageConcurrently(t *testing.T) {
	for _, c := range []struct {
		lanes   int
		overlap bool
	}{{1, false}, {8, true}} {
		res := lab.Run(lab.Config{Seed: 3, Name: fmt.Sprint("host-acquire-", c.lanes)}, func(env *lab.Env) error {
			var mu sync.Mutex
			inFlight, most := 0, 0
			st := newStore(env, memstore.WithHook(func(op string) error {
				if op != "acquire" {
					return nil
				}
				mu.Lock()
				inFlight++
				most = max(most, inFlight)
				mu.Unlock()
				err := sleep(env, 50*time.Millisecond) // a store round trip
				mu.Lock()
				inFlight--
				mu.Unlock()
				return err
			}))
			var ids []string
			for i := range 24 {
				id := fmt.Sprint("a", i)
				ids = append(ids, id)
				if err := createAssigned(env.Ctx, st, id, "A"); err != nil {
					return err
				}
			}
			cfg := hostConfig("A", st, nil)
			cfg.AcquireConcurrency = c.lanes
			h, err := plane.StartHost(env.Ctx, env.Root, cfg)
			if err != nil {
				return err
			}
			if err := waitFor(env, "every world held", 10*time.Second, func() (bool, error) {
				for _, id := range ids {
					if _, ok := h.Lease(id); !ok {
						return false, nil
					}
				}
				return true, nil
			}); err != nil {
				return err
			}
			mu.Lock()
			peak := most
			mu.Unlock()
			if (peak > 1) != c.overlap {
				return fmt.Errorf("AcquireConcurrency %d: at most %d acquisitions in flight together", c.lanes, peak)
			}
			return h.Stop(env.Ctx)
		})
		if res.Failure != nil {
			t.Fatal(res.Failure)
		}
	}
}
