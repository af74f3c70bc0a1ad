package plane_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// errNoReconcile fails every ListWorlds of the orchestrator's handle: a
// reconcile reads the worlds first, so no reconcile round ever completes.
var errNoReconcile = errors.New("test: reconcile disabled")

// activationRig is a cluster in the lab whose orchestrator never completes
// a reconcile (its ListWorlds always fails, and its Every is a day), so a
// world is placed only if an input's activation places it.
type activationRig struct {
	env        *lab.Env
	base       *memstore.Store
	orch       *plane.Orchestrator
	reconciles *atomic.Int64 // reconcile rounds the orchestrator began
}

func newActivationRig(env *lab.Env) (*activationRig, error) {
	// The store's clock is 5s ahead of every node's: liveness and the
	// orchestrator's fence are judged on the store's clock alone.
	skewed := memstore.WithClock(func() time.Time { return env.Lab.Now().Add(5 * time.Second) })
	r := &activationRig{env: env, base: memstore.New(skewed), reconciles: &atomic.Int64{}}
	ost := r.base.Restart(memstore.WithHook(func(op string) error {
		if op == "list_worlds" {
			r.reconciles.Add(1)
			return errNoReconcile
		}
		return nil
	}))
	var err error
	r.orch, err = plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{
		ID: "orch", Store: ost, Universes: []string{universe}, LeaseTTL: 2 * time.Second, Every: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	return r, testrig.WaitLab(env, "the orchestrator leads", 10*time.Second, func() (bool, error) { return r.orch.Leader(), nil })
}

// activationNode is a host with its client and activator, as a node wires
// them: orch is the process's own orchestrator (nil: another process's
// leads).
type activationNode struct {
	host   *plane.Host
	client *plane.Client
}

func (r *activationRig) node(worker string, orch *plane.Orchestrator, observe func(plane.HostEvent), opts ...memstore.Option) (*activationNode, error) {
	env := r.env
	st := r.base.Restart(opts...)
	replies := plane.NewReplies()
	hc := hostConfig(worker, st, replies)
	hc.Observe = observe
	h, err := plane.StartHost(env.Ctx, env.Root, hc)
	if err != nil {
		return nil, err
	}
	act, err := plane.NewActivator(plane.ActivatorConfig{Store: st, Kernels: kernels(), Executor: env.Lab,
		Host: h, Orchestrator: orch, LiveFor: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Replies: replies,
		Hosts: []*plane.Host{h}, Activator: act})
	if err != nil {
		return nil, err
	}
	// Live in the inventory: a placement candidate.
	err = testrig.WaitLab(env, worker+"'s heartbeat", 10*time.Second, func() (bool, error) {
		ws, err := r.base.ListWorkers(env.Ctx)
		for _, w := range ws {
			if w.ID == worker {
				return true, err
			}
		}
		return false, err
	})
	return &activationNode{h, c}, err
}

// callWithin calls world with Get under a deadline of limit on the lab's
// clock and returns the reply.
func callWithin(env *lab.Env, c *plane.Client, id string, limit time.Duration) (int64, error) {
	ctx, cancel := actor.WithDeadline(env.Ctx, env.Lab, env.Lab.Now().Add(limit))
	defer cancel()
	b, err := c.Call(ctx, id, Get{})
	if err != nil {
		return 0, err
	}
	var n int64
	return n, world.Decode(b, &n)
}

// TestActivationAnswersFirstCallWithoutReconcile: a call to a world never
// placed is answered although no reconcile round ever completes (each
// fails, and the next is a day away): the node that takes the call places
// the world under the acting orchestrator's fence and its host acquires
// it. A snapshot request (Client.Snapshot) activates its world the same
// way (before, it waited for a reconcile round: here, forever). Both ways of placing are shown: this process's orchestrator leads,
// and another process's leads (the write is fenced by its epoch).
func TestActivationAnswersFirstCallWithoutReconcile(t *testing.T) {
	for _, ownLeader := range []bool{true, false} {
		t.Run(fmt.Sprint("own orchestrator leads=", ownLeader), func(t *testing.T) {
			testrig.Lab(t, lab.Config{Seed: 23, Name: "activation"}, func(env *lab.Env) error {
				r, err := newActivationRig(env)
				if err != nil {
					return err
				}
				defer r.orch.Stop(env.Ctx)
				var own *plane.Orchestrator
				if ownLeader {
					own = r.orch
				}
				n, err := r.node("A", own, nil)
				if err != nil {
					return err
				}
				defer n.host.Stop(env.Ctx)
				before := r.reconciles.Load()
				if _, err := r.base.CreateWorld(env.Ctx, universe, "fresh", nil); err != nil {
					return err
				}
				// A warm world answers within milliseconds of virtual time;
				// the limit is far below the backstops (a reconcile a day
				// away, the host's sync every second) and what a reconcile
				// would take.
				start := env.Lab.Now()
				got, err := callWithin(env, n.client, "fresh", 200*time.Millisecond)
				if err != nil {
					return fmt.Errorf("first call to a never-placed world: %w", err)
				}
				if got != 0 {
					return fmt.Errorf("reply %d, want 0", got)
				}
				a, ok, err := r.base.GetAssignment(env.Ctx, "fresh")
				if err != nil || !ok || a.DesiredWorker != "A" || a.Reason != plane.ReasonRendezvous {
					return fmt.Errorf("assignment %+v ok=%v err=%v, want A by rendezvous", a, ok, err)
				}
				if _, ok := n.host.Lease("fresh"); !ok {
					return errors.New("host A does not hold the world it answered for")
				}
				// A snapshot asked of a never-placed world activates it as
				// a call does.
				if _, err := r.base.CreateWorld(env.Ctx, universe, "fresh-snapshot", nil); err != nil {
					return err
				}
				if snap, err := snapshotWithin(env, n.client, "fresh-snapshot", 200*time.Millisecond); err != nil || snap.Height != 0 {
					return fmt.Errorf("snapshot of a never-placed world: height %d, err %v", snap.Height, err)
				}
				// Reconciles were tried (a hint starts one) but none read a
				// world list, so none placed anything.
				t.Logf("answered after %v of virtual time; %d reconciles tried meanwhile, none completed", env.Lab.Now().Sub(start), r.reconciles.Load()-before)
				return nil
			})
		})
	}
}

// TestActivationRaceOneHolderOneAnswerPerCall: two nodes take the first
// calls of the same never-placed worlds at once, each activating them: each
// world ends with exactly one holder, no lease is ever held by both hosts
// at one epoch, every call is answered once, and each world's journal holds
// each call once.
func TestActivationRaceOneHolderOneAnswerPerCall(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 7, Name: "activation-race"}, func(env *lab.Env) error {
		r, err := newActivationRig(env)
		if err != nil {
			return err
		}
		defer r.orch.Stop(env.Ctx)
		var mu sync.Mutex
		holders := map[string]map[uint64]string{} // world → epoch → the host that acquired it
		var clash error
		observe := func(worker string) func(plane.HostEvent) {
			return func(ev plane.HostEvent) {
				if ev.Kind != plane.EvAcquired {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if holders[ev.World] == nil {
					holders[ev.World] = map[uint64]string{}
				}
				if prev, ok := holders[ev.World][ev.Epoch]; ok && prev != worker {
					clash = fmt.Errorf("%s acquired by %s and %s at epoch %d", ev.World, prev, worker, ev.Epoch)
				}
				holders[ev.World][ev.Epoch] = worker
			}
		}
		// A leads from this process, B places under A's orchestrator's
		// fence: both ways of placing race.
		a, err := r.node("A", r.orch, observe("A"))
		if err != nil {
			return err
		}
		defer a.host.Stop(env.Ctx)
		b, err := r.node("B", nil, observe("B"))
		if err != nil {
			return err
		}
		defer b.host.Stop(env.Ctx)
		const worlds = 8
		type answer struct {
			world, from string
			n           int64
			err         error
		}
		var answers []answer
		var pids []actor.PID
		for i := range worlds {
			id := fmt.Sprint("race", i)
			if _, err := r.base.CreateWorld(env.Ctx, universe, id, nil); err != nil {
				return err
			}
			for _, n := range []struct {
				name string
				c    *plane.Client
			}{{"A", a.client}, {"B", b.client}} {
				pid, err := env.Root.Go("call:"+id+":"+n.name, func(context.Context) error {
					got, err := callWithin(env, n.c, id, 5*time.Second)
					mu.Lock()
					answers = append(answers, answer{id, n.name, got, err})
					mu.Unlock()
					return nil
				})
				if err != nil {
					return err
				}
				pids = append(pids, pid)
			}
		}
		for _, p := range pids {
			if _, err := p.Wait(env.Ctx); err != nil {
				return err
			}
		}
		if clash != nil {
			return clash
		}
		if len(answers) != 2*worlds {
			return fmt.Errorf("%d answers, want %d", len(answers), 2*worlds)
		}
		replies := map[string][]int64{}
		for _, an := range answers {
			if an.err != nil {
				return fmt.Errorf("call to %s from %s: %w", an.world, an.from, an.err)
			}
			replies[an.world] = append(replies[an.world], an.n)
		}
		for i := range worlds {
			id := fmt.Sprint("race", i)
			_, inA := a.host.Lease(id)
			_, inB := b.host.Lease(id)
			if inA == inB {
				return fmt.Errorf("%s held by A=%v B=%v, want exactly one", id, inA, inB)
			}
			// Get replies with N, which Gets never change: one answer of
			// 0 per call.
			if rs := replies[id]; len(rs) != 2 || rs[0] != 0 || rs[1] != 0 {
				return fmt.Errorf("%s answers %v, want [0 0]", id, rs)
			}
			j, err := journalOf(env.Ctx, r.base, id)
			if err != nil {
				return err
			}
			if len(j) != 2 {
				return fmt.Errorf("%s journal holds %d records, want one per call (2)", id, len(j))
			}
		}
		return nil
	})
}

// acquiredBy records the worlds each host acquired (EvAcquired).
type acquiredBy struct {
	mu  sync.Mutex
	got map[string][]string // worker → worlds
}

func (a *acquiredBy) observe(worker string) func(plane.HostEvent) {
	return func(ev plane.HostEvent) {
		if ev.Kind == plane.EvAcquired {
			a.mu.Lock()
			if a.got == nil {
				a.got = map[string][]string{}
			}
			a.got[worker] = append(a.got[worker], ev.World)
			a.mu.Unlock()
		}
	}
}

func (a *acquiredBy) of(worker string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got[worker])
}

// TestActivationNeverStealsNorActsWithoutAuthority: activation places only
// what the reconcile would and only under the acting orchestrator's fence.
//   - pinned elsewhere: a world pinned to another worker is not placed
//     again nor taken by the node that takes its input;
//   - pinned meanwhile: a pin written between the activation's read of
//     the assignment and its write is kept (the write compares), and the
//     node does not take the world, whichever orchestrator leads;
//   - draining: a draining node takes nothing, nor places on itself
//     (even with candidates read before its drain); the world goes to a
//     live worker, which answers;
//   - leader change: when the orchestrator whose epoch the placement was
//     read under resigns before the write, the store refuses it, nothing is
//     placed, and once a new leader acts the next input is answered;
//   - archived meanwhile: a world archived between its placement and its
//     acquisition is never acquired.
func TestActivationNeverStealsNorActsWithoutAuthority(t *testing.T) {
	run := func(t *testing.T, name string, body func(env *lab.Env, r *activationRig, acq *acquiredBy) error) {
		t.Run(name, func(t *testing.T) {
			testrig.Lab(t, lab.Config{Seed: 11, Name: "activation-" + name}, func(env *lab.Env) error {
				r, err := newActivationRig(env)
				if err != nil {
					return err
				}
				defer r.orch.Stop(env.Ctx)
				if _, err := r.base.CreateWorld(env.Ctx, universe, "fresh", nil); err != nil {
					return err
				}
				return body(env, r, &acquiredBy{})
			})
		})
	}
	pinnedToZ := func(env *lab.Env, r *activationRig, acq *acquiredBy) error {
		if asg, ok, err := r.base.GetAssignment(env.Ctx, "fresh"); err != nil || !ok || asg.DesiredWorker != "Z" || asg.Reason != plane.ReasonPin {
			return fmt.Errorf("assignment %+v ok=%v err=%v, want the pin to Z", asg, ok, err)
		}
		if got := acq.of("A"); len(got) != 0 {
			return fmt.Errorf("A acquired %v, pinned to Z", got)
		}
		return nil
	}
	unanswered := func(env *lab.Env, c *plane.Client) error {
		if _, err := callWithin(env, c, "fresh", 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("call answered (err %v); want no answer", err)
		}
		return nil
	}
	// unansweredWith starts node A (orch: its own orchestrator) with hook
	// on its store handle, and checks that a call to "fresh" goes
	// unanswered and that the hook's fault happened (fired; else notFired).
	// The caller stops the node it returns.
	unansweredWith := func(env *lab.Env, r *activationRig, orch *plane.Orchestrator, acq *acquiredBy, fired *atomic.Bool,
		notFired string, hook func(op string) error) (*activationNode, error) {
		a, err := r.node("A", orch, acq.observe("A"), memstore.WithHook(hook))
		if err != nil {
			return nil, err
		}
		if err := unanswered(env, a.client); err != nil {
			return a, err
		}
		if !fired.Load() {
			return a, errors.New(notFired)
		}
		return a, nil
	}
	run(t, "pinned elsewhere", func(env *lab.Env, r *activationRig, acq *acquiredBy) error {
		if err := r.orch.Pin(env.Ctx, "fresh", "Z"); err != nil {
			return err
		}
		a, err := r.node("A", r.orch, acq.observe("A"))
		if err != nil {
			return err
		}
		defer a.host.Stop(env.Ctx)
		if err := unanswered(env, a.client); err != nil {
			return err
		}
		return pinnedToZ(env, r, acq)
	})
	for _, own := range []bool{true, false} {
		run(t, fmt.Sprint("pinned meanwhile, own orchestrator leads=", own), func(env *lab.Env, r *activationRig, acq *acquiredBy) error {
			var orch *plane.Orchestrator
			if own {
				orch = r.orch
			}
			// The activation reads no assignment, then reads the world
			// to place it: the operator's pin lands in between.
			var read, pinned atomic.Bool
			a, err := unansweredWith(env, r, orch, acq, &pinned, "the pin never landed between the activation's read and its write", func(op string) error {
				switch {
				case op == "get_assignment":
					read.Store(true)
				case op == "get_world" && read.Load() && !pinned.Swap(true):
					return r.base.Assign(env.Ctx, "fresh", store.Assignment{DesiredWorker: "Z", Priority: 1, Reason: plane.ReasonPin}, nil)
				}
				return nil
			})
			if a != nil {
				defer a.host.Stop(env.Ctx)
			}
			if err != nil {
				return err
			}
			return pinnedToZ(env, r, acq)
		})
	}
	run(t, "draining", func(env *lab.Env, r *activationRig, acq *acquiredBy) error {
		a, err := r.node("A", r.orch, acq.observe("A"))
		if err != nil {
			return err
		}
		defer a.host.Stop(env.Ctx)
		b, err := r.node("B", nil, acq.observe("B"))
		if err != nil {
			return err
		}
		defer b.host.Stop(env.Ctx)
		// A first activation reads the candidates (A and B) while A is
		// live; the next comes after A began draining, for a world whose
		// rendezvous winner among the two is A.
		if _, err := r.base.CreateWorld(env.Ctx, universe, "warm", nil); err != nil {
			return err
		}
		if _, err := callWithin(env, a.client, "warm", time.Second); err != nil {
			return err
		}
		id := ""
		for i := 0; id == ""; i++ {
			if c := fmt.Sprint("fresh", i); plane.Place(c, []string{"A", "B"}) == "A" {
				id = c
			}
		}
		if _, err := r.base.CreateWorld(env.Ctx, universe, id, nil); err != nil {
			return err
		}
		if err := a.host.SetDraining(env.Ctx, true); err != nil {
			return err
		}
		if _, err := callWithin(env, a.client, id, time.Second); err != nil {
			return fmt.Errorf("call through the draining node: %w", err)
		}
		if asg, _, _ := r.base.GetAssignment(env.Ctx, id); asg.DesiredWorker != "B" {
			return fmt.Errorf("placed on %q, want the live B", asg.DesiredWorker)
		}
		if got := acq.of("A"); slices.Contains(got, id) {
			return fmt.Errorf("the draining A acquired %v", got)
		}
		return nil
	})
	run(t, "leader change", func(env *lab.Env, r *activationRig, acq *acquiredBy) error {
		var resigned atomic.Bool
		a, err := unansweredWith(env, r, nil, acq, &resigned, "the activation never tried to place the world", func(op string) error {
			if op == "compare_and_assign" && !resigned.Swap(true) {
				// The placement was decided under the leader's epoch; it
				// hands over before the write lands.
				return r.orch.Resign(env.Ctx)
			}
			return nil
		})
		if a != nil {
			defer a.host.Stop(env.Ctx)
		}
		if err != nil {
			return err
		}
		if asg, ok, err := r.base.GetAssignment(env.Ctx, "fresh"); err != nil || ok {
			return fmt.Errorf("assignment %+v ok=%v err=%v written under a deposed leader's epoch", asg, ok, err)
		}
		o2, err := plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{
			ID: "orch2", Store: r.base.Restart(), Universes: []string{universe}, LeaseTTL: 2 * time.Second, Every: 24 * time.Hour})
		if err != nil {
			return err
		}
		defer o2.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "orch2 leads", 10*time.Second, func() (bool, error) { return o2.Leader(), nil }); err != nil {
			return err
		}
		if _, err := callWithin(env, a.client, "fresh", time.Second); err != nil {
			return fmt.Errorf("call under the new leader: %w", err)
		}
		return nil
	})
	run(t, "archived meanwhile", func(env *lab.Env, r *activationRig, acq *acquiredBy) error {
		var archived atomic.Bool
		a, err := r.node("A", r.orch, acq.observe("A"), memstore.WithHook(func(op string) error {
			if op == "get_lease" || op == "acquire_leases" {
				if !archived.Swap(true) {
					_, err := r.base.SetWorldStatus(env.Ctx, "fresh", store.WorldArchived, "test")
					return err
				}
			}
			return nil
		}))
		if err != nil {
			return err
		}
		defer a.host.Stop(env.Ctx)
		if err := unanswered(env, a.client); err != nil {
			return err
		}
		if !archived.Load() {
			return errors.New("the world was never archived")
		}
		if got := acq.of("A"); len(got) != 0 {
			return fmt.Errorf("A acquired %v, archived", got)
		}
		return nil
	})
}
