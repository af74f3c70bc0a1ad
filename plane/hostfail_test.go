package plane_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/supervisor"
	"github.com/orrery-run/orrery/world"
)

// panicKernel wraps the counter's kernel so that, once armed, the next
// Step panics outside the kernel's own containment: the world process
// itself crashes Panicked, as a bug in the plane or a runtime fault would.
type panicKernel struct {
	world.Kernel
	armed *atomic.Bool
}

func (k panicKernel) wrap(i world.Instance, err error) (world.Instance, error) {
	if err != nil {
		return nil, err
	}
	return panicInstance{i, k.armed}, nil
}

func (k panicKernel) Load(id string, s world.Snapshot) (world.Instance, error) {
	return k.wrap(k.Kernel.Load(id, s))
}

func (k panicKernel) Replay(id string, base world.Snapshot, tail []event.Envelope) (world.Instance, error) {
	return k.wrap(k.Kernel.Replay(id, base, tail))
}

type panicInstance struct {
	world.Instance
	armed *atomic.Bool
}

func (i panicInstance) Step(in world.Input, at time.Time) (world.StepResult, error) {
	if i.armed.CompareAndSwap(true, false) {
		panic("injected: the world process crashes outside the kernel")
	}
	return i.Instance.Step(in, at)
}

// TestHostFailsWhenItsSupervisorDies: a world process that panics ends the
// host's dynamic supervisor Panicked (panics are never contained). The
// host notices: Wait returns ErrHostFailed wrapping the supervisor's
// ErrChildPanicked, EvHostFailed is observed, the controller stops (no
// heartbeat, no sync, no start after it), the leases are released, and a
// host started again on the same worker takes the worlds over and applies
// every acknowledged input exactly once.
func TestHostFailsWhenItsSupervisorDies(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "host-fails"}, func(env *lab.Env) error {
		st := newStore(env)
		for _, w := range []string{"h1", "h2"} {
			if err := createAssigned(env.Ctx, st, w, "A"); err != nil {
				return err
			}
		}
		armed := &atomic.Bool{}
		cfg := hostConfig("A", st, nil)
		cfg.Kernels = plane.Kernels{universe: panicKernel{counterDef().Kernel(), armed}}
		var failedAt time.Time
		var failEv []plane.HostEvent
		var after []plane.HostEvent
		cfg.Observe = func(ev plane.HostEvent) {
			switch {
			case ev.Kind == plane.EvHostFailed:
				failEv = append(failEv, ev)
				failedAt = ev.At
			case !failedAt.IsZero() && ev.Kind != plane.EvFenced:
				after = append(after, ev)
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		for i := range 3 {
			for _, w := range []string{"h1", "h2"} {
				key := fmt.Sprint(w, i)
				if _, err := c.Send(env.Ctx, w, Add{By: 1, Key: key}, key); err != nil {
					return err
				}
			}
		}
		for _, w := range []string{"h1", "h2"} {
			if err := drained(env, st, w); err != nil {
				return err
			}
		}
		if h.Err() != nil {
			return fmt.Errorf("a healthy host reports %v", h.Err())
		}
		armed.Store(true)
		if _, err := c.Send(env.Ctx, "h1", Add{By: 1, Key: "boom"}, "boom"); err != nil {
			return err
		}
		err = h.Wait(env.Ctx)
		if !errors.Is(err, plane.ErrHostFailed) || !errors.Is(err, supervisor.ErrChildPanicked) {
			return fmt.Errorf("Wait after the crash: %v, want ErrHostFailed wrapping ErrChildPanicked", err)
		}
		if len(failEv) != 1 || !errors.Is(failEv[0].Err, plane.ErrHostFailed) {
			return fmt.Errorf("host-failed events %+v, want one", failEv)
		}
		if held, _ := h.Worlds(); len(held) != 0 {
			return fmt.Errorf("a failed host still holds %v", held)
		}
		for _, w := range []string{"h1", "h2"} {
			if l, ok, err := st.GetLease(env.Ctx, w); err != nil || (ok && l.Holder == "A" && l.ExpiresAt.After(env.Lab.Now())) {
				return fmt.Errorf("%s's lease after the failure: %+v %v (want released)", w, l, err)
			}
		}
		beat := heartbeatOf(env, st, "A")
		// More input and time: a failed host does nothing at all.
		if _, err := c.Send(env.Ctx, "h2", Add{By: 1, Key: "late"}, "late"); err != nil {
			return err
		}
		if err := sleep(env, 3*cfg.LeaseTTL); err != nil {
			return err
		}
		if len(after) != 0 {
			return fmt.Errorf("the failed host acted after failing: %+v", after)
		}
		if got := heartbeatOf(env, st, "A"); !got.Equal(beat) {
			return fmt.Errorf("the failed host still heartbeats: %v then %v", beat, got)
		}
		// The outer supervisor (here, the test) starts the host again.
		cfg.Observe = nil
		h2, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h2.Stop(env.Ctx)
		for _, w := range []string{"h1", "h2"} {
			if err := drained(env, st, w); err != nil {
				return err
			}
			snap, err := parity(env.Ctx, st, w)
			if err != nil {
				return err
			}
			v, _ := value(snap, w)
			seen := map[string]int{}
			for _, k := range v.Seen {
				seen[k]++
			}
			want := []string{w + "0", w + "1", w + "2", map[string]string{"h1": "boom", "h2": "late"}[w]}
			for _, k := range want {
				if seen[k] != 1 {
					return fmt.Errorf("%s applied %s %d times: %+v", w, k, seen[k], v)
				}
			}
			if len(v.Seen) != len(want) {
				return fmt.Errorf("%s applied %v, want %v", w, v.Seen, want)
			}
		}
		return h2.Err()
	})
}

func heartbeatOf(env *lab.Env, st store.Store, id string) time.Time {
	ws, _ := st.ListWorkers(env.Ctx)
	for _, w := range ws {
		if w.ID == id {
			return w.HeartbeatAt
		}
	}
	return time.Time{}
}

// TestHostFailsWhenItsControllerDies: the controller (leases, renewals,
// heartbeats) dies of a panic; the host fails as a whole: Wait returns
// ErrHostFailed, its world supervisor is shut down so no world commits
// without renewals, and nothing more happens on it.
func TestHostFailsWhenItsControllerDies(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 6, Name: "controller-dies"}, func(env *lab.Env) error {
		st := newStore(env)
		if err := createAssigned(env.Ctx, st, "x", "A"); err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab})
		if _, err := c.Send(env.Ctx, "x", Add{By: 1, Key: "a"}, "a"); err != nil {
			return err
		}
		boom := true
		var failed bool
		var after []plane.HostEvent
		cfg := hostConfig("A", st, nil)
		cfg.Observe = func(ev plane.HostEvent) {
			switch {
			case ev.Kind == plane.EvHostFailed:
				failed = true
			case failed && ev.Kind != plane.EvFenced:
				after = append(after, ev)
			case ev.Kind == plane.EvAcquired && boom:
				boom = false
				panic("injected: the controller dies")
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		if err := h.Wait(env.Ctx); !errors.Is(err, plane.ErrHostFailed) {
			return fmt.Errorf("Wait after the controller died: %v, want ErrHostFailed", err)
		}
		if !failed {
			return fmt.Errorf("no host-failed event")
		}
		if _, err := c.Send(env.Ctx, "x", Add{By: 1, Key: "b"}, "b"); err != nil {
			return err
		}
		if err := sleep(env, 3*cfg.LeaseTTL); err != nil {
			return err
		}
		if len(after) != 0 {
			return fmt.Errorf("the failed host acted: %+v", after)
		}
		if cur, _ := st.Cursor(env.Ctx, "x"); cur != 0 {
			return fmt.Errorf("the failed host drained the inbox to %d", cur)
		}
		return nil
	})
}
