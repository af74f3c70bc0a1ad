package plane_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

func TestCapabilitiesAndEligible(t *testing.T) {
	caps := plane.Capabilities(plane.CapabilitySet{
		Roles: []string{plane.RoleHost, plane.RoleEffects, plane.RoleHost}, Kernels: kernels(),
		Workflows: map[string]uint64{"checkout": 2}, EffectKinds: []string{"pay", "http.request"},
	})
	want := []string{"effect:http.request", "effect:pay", "role:effects", "role:host", "workflow:checkout@2", "world:u@1"}
	if !slices.Equal(caps, want) {
		t.Fatalf("Capabilities = %q, want %q", caps, want)
	}
	host := store.WorkerInfo{Capabilities: []string{"role:host", "world:u2@1", "world:u@3"}}
	effects := store.WorkerInfo{Capabilities: []string{"role:effects", "world:u@3"}}
	older := store.WorkerInfo{}
	for _, c := range []struct {
		name     string
		info     store.WorkerInfo
		universe string
		version  uint64
		want     bool
	}{
		{"host, any version", host, "u", 0, true},
		{"host, its version", host, "u", 3, true},
		{"host, another version", host, "u", 2, false},
		{"host, a universe whose name extends another's", host, "u2", 0, true},
		{"host, a universe it lacks", host, "v", 0, false},
		{"host, a prefix of a universe it has", host, "", 0, false},
		{"no host role", effects, "u", 0, false},
		{"no host role, its version", effects, "u", 3, false},
		{"an older binary (nothing advertised)", older, "anything", 7, true},
	} {
		if got := plane.Eligible(c.info, c.universe, c.version); got != c.want {
			t.Errorf("%s: Eligible(%q, %d) = %v, want %v", c.name, c.universe, c.version, got, c.want)
		}
	}
	if !plane.Runs(older, plane.RoleTimers) || plane.Runs(effects, plane.RoleHost) || !plane.Runs(effects, plane.RoleEffects) {
		t.Error("Runs reads the role capabilities (an older binary runs every role)")
	}
}

// advertise heartbeats worker with capacity and capabilities.
func advertise(ctx context.Context, st store.Store, worker string, capacity int, caps ...string) error {
	_, err := st.Heartbeat(ctx, worker, capacity, store.Advertise(caps))
	return err
}

// leading starts an orchestrator of universe on st and waits until it
// leads.
func leading(env *lab.Env, st store.Store, log *slog.Logger) (*plane.Orchestrator, error) {
	o, err := plane.StartOrchestrator(env.Ctx, env.Root, plane.OrchestratorConfig{ID: "o", Store: st,
		Universes: []string{universe}, LeaseTTL: 2 * time.Second, Every: time.Hour, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := testrig.WaitLab(env, "leader", 10*time.Second, func() (bool, error) { return o.Leader(), nil }); err != nil {
		return nil, err
	}
	return o, nil
}

// placement counts the worlds assigned to each worker.
func placement(ctx context.Context, st store.Store, ids []string) (map[string]int, error) {
	out := map[string]int{}
	for _, id := range ids {
		a, ok, err := st.GetAssignment(ctx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out[a.DesiredWorker]++
		} else {
			out[""]++
		}
	}
	return out, nil
}

// records keeps the messages a logger wrote.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// TestReconcilePlacesByCapabilityAndCapacity: worlds go only to live
// hosts that carry their type, never beyond a host's capacity; what fits
// nowhere stays unassigned, counted by Unplaced and logged once, and is
// placed as soon as a host with room heartbeats.
func TestReconcilePlacesByCapabilityAndCapacity(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 5, Name: "reconcile-capability"}, func(env *lab.Env) error {
		st := newStore(env)
		var ids []string
		for i := range 8 {
			id := fmt.Sprint("c", i)
			ids = append(ids, id)
			if _, err := st.CreateWorld(env.Ctx, universe, id, nil); err != nil {
				return err
			}
		}
		for _, w := range []struct {
			id   string
			cap  int
			caps []string
		}{
			{"H1", 3, []string{"role:host", "world:u@1"}},
			{"H2", 2, []string{"role:host", "world:u@1", "role:effects"}},
			{"E", 100, []string{"role:effects", "role:timers", "world:u@1"}},
			{"X", 100, []string{"role:host", "world:other@1"}},
		} {
			if err := advertise(env.Ctx, st, w.id, w.cap, w.caps...); err != nil {
				return err
			}
		}
		rec := &records{}
		o, err := leading(env, st, slog.New(rec))
		if err != nil {
			return err
		}
		defer o.Stop(env.Ctx)
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		got, err := placement(env.Ctx, st, ids)
		if err != nil {
			return err
		}
		if got["H1"] != 3 || got["H2"] != 2 || got[""] != 3 || len(got) != 3 {
			return fmt.Errorf("placement %v, want H1 3 and H2 2 (their capacities), 3 unplaced, none on E (no host role) or X (another type)", got)
		}
		if n := o.Unplaced(); n != 3 {
			return fmt.Errorf("Unplaced = %d, want 3", n)
		}
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		warned := 0
		for _, m := range rec.all() {
			if m == "WARN orchestrator: worlds placed nowhere: no live host that carries their type has room" {
				warned++
			}
		}
		if warned != 1 {
			return fmt.Errorf("the unplaced worlds were logged %d times over two passes, want once: %q", warned, rec.all())
		}
		if err := advertise(env.Ctx, st, "H3", 10, "role:host", "world:u@1"); err != nil {
			return err
		}
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		if got, err = placement(env.Ctx, st, ids); err != nil {
			return err
		}
		if got[""] != 0 || got["H1"] > 3 || got["H2"] > 2 || got["E"]+got["X"] != 0 {
			return fmt.Errorf("placement %v once H3 has room, want every world placed within capacities", got)
		}
		if n := o.Unplaced(); n != 0 {
			return fmt.Errorf("Unplaced = %d once every world is placed", n)
		}
		return nil
	})
}

// TestReconcileKeepsHeldWorldsOnAFullHost: a host at its capacity with a
// world assigned beyond it (an activation's, or a stale orchestrator's)
// keeps the worlds it holds; the one it does not hold moves to a host with
// room, even where it sorts first.
func TestReconcileKeepsHeldWorldsOnAFullHost(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 6, Name: "reconcile-full-host"}, func(env *lab.Env) error {
		st := newStore(env)
		// Three worlds whose rendezvous winner between H1 and H2 is H1.
		var ids []string
		for i := 0; len(ids) < 3; i++ {
			if id := fmt.Sprint("f", i); plane.Place(id, []string{"H1", "H2"}) == "H1" {
				ids = append(ids, id)
			}
		}
		if err := advertise(env.Ctx, st, "H1", 2, "role:host", "world:u@1"); err != nil {
			return err
		}
		if err := advertise(env.Ctx, st, "H2", 5, "role:host", "world:u@1"); err != nil {
			return err
		}
		for _, id := range ids {
			if err := createAssigned(env.Ctx, st, id, "H1"); err != nil {
				return err
			}
		}
		// H1 holds the last two; the first, which sorts first, it does not.
		for _, id := range ids[1:] {
			if _, err := st.Acquire(env.Ctx, id, "H1", time.Minute); err != nil {
				return err
			}
		}
		o, err := leading(env, st, nil)
		if err != nil {
			return err
		}
		defer o.Stop(env.Ctx)
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		want := map[string]string{ids[0]: "H2", ids[1]: "H1", ids[2]: "H1"}
		for id, w := range want {
			if got := assignedTo(env, st, id); got != w {
				return fmt.Errorf("%s assigned to %q, want %s (H1 keeps the worlds it holds)", id, got, w)
			}
		}
		return nil
	})
}

// TestPinHonoursCapabilityNotCapacity: a pin overrides placement and
// capacity, but not what the worker carries.
func TestPinHonoursCapabilityNotCapacity(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 7, Name: "pin-capability"}, func(env *lab.Env) error {
		st := newStore(env)
		for _, id := range []string{"p1", "p2", "p3", "p4"} {
			if _, err := st.CreateWorld(env.Ctx, universe, id, nil); err != nil {
				return err
			}
		}
		if err := advertise(env.Ctx, st, "E", 10, "role:effects", "world:u@1"); err != nil {
			return err
		}
		if err := advertise(env.Ctx, st, "X", 10, "role:host", "world:other@1"); err != nil {
			return err
		}
		if err := advertise(env.Ctx, st, "H", 0, "role:host", "world:u@1"); err != nil {
			return err
		}
		o, err := leading(env, st, nil)
		if err != nil {
			return err
		}
		defer o.Stop(env.Ctx)
		for _, w := range []string{"E", "X"} {
			if err := o.Pin(env.Ctx, "p1", w); !errors.Is(err, plane.ErrIneligible) {
				return fmt.Errorf("pin to %s: %v, want ErrIneligible", w, err)
			}
		}
		if _, ok, _ := st.GetAssignment(env.Ctx, "p1"); ok {
			return errors.New("a refused pin wrote an assignment")
		}
		if err := o.Pin(env.Ctx, "p2", "H"); err != nil {
			return fmt.Errorf("pin beyond capacity: %v", err)
		}
		if err := o.Pin(env.Ctx, "p3", "not-yet-started"); err != nil {
			return fmt.Errorf("pin to a worker the inventory does not know yet: %v", err)
		}
		if err := o.Reconcile(env.Ctx); err != nil {
			return err
		}
		if got := assignedTo(env, st, "p2"); got != "H" {
			return fmt.Errorf("pinned p2 assigned to %q after a reconcile", got)
		}
		// H's capacity is 0 and the pin does not give it room for more.
		if got := assignedTo(env, st, "p4"); got != "" {
			return fmt.Errorf("p4 assigned to %q, want nowhere (H is full, E and X cannot run it)", got)
		}
		return nil
	})
}

// TestHostTakesNoMoreThanItsCapacity: a host acquires at most Capacity
// worlds, whatever is assigned to it, and takes the next one assigned when
// one of its worlds goes; a NoWorlds host acquires none and still
// heartbeats its capabilities.
func TestHostTakesNoMoreThanItsCapacity(t *testing.T) {
	testrig.Lab(t, lab.Config{Seed: 8, Name: "host-capacity"}, func(env *lab.Env) error {
		st := newStore(env)
		ids := []string{"a0", "a1", "a2", "a3"}
		for _, id := range ids {
			if err := createAssigned(env.Ctx, st, id, "H"); err != nil {
				return err
			}
			if err := createAssigned(env.Ctx, st, "n"+id, "N"); err != nil {
				return err
			}
		}
		var mu sync.Mutex
		refused := 0
		hc := hostConfig("H", st, nil)
		hc.Capacity = 2
		hc.Observe = func(ev plane.HostEvent) {
			if ev.Kind == plane.EvAtCapacity {
				mu.Lock()
				refused += ev.N
				mu.Unlock()
			}
		}
		h, err := plane.StartHost(env.Ctx, env.Root, hc)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		nc := hostConfig("N", st, nil)
		nc.NoWorlds, nc.Capabilities = true, []string{"role:effects"}
		n, err := plane.StartHost(env.Ctx, env.Root, nc)
		if err != nil {
			return err
		}
		defer n.Stop(env.Ctx)
		if err := testrig.WaitLab(env, "H refuses what exceeds its capacity", 10*time.Second, func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return refused > 0, nil
		}); err != nil {
			return err
		}
		if err := sleep(env, 5*time.Second); err != nil { // several sync passes
			return err
		}
		held, _ := h.Worlds()
		if len(held) != 2 {
			return fmt.Errorf("H holds %v, want 2 worlds (its capacity) of the 4 assigned", held)
		}
		if held, _ := n.Worlds(); len(held) != 0 {
			return fmt.Errorf("the NoWorlds host holds %v", held)
		}
		ws, err := st.ListWorkers(env.Ctx)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if w.ID == "N" && (!slices.Equal(w.Capabilities, []string{"role:effects"}) || w.AliveUntil.IsZero()) {
				return fmt.Errorf("N's record %+v, want its capabilities and a liveness promise", w)
			}
		}
		if err := st.Unassign(env.Ctx, held[0], nil); err != nil {
			return err
		}
		return testrig.WaitLab(env, "H takes another world when one goes", 10*time.Second, func() (bool, error) {
			now, _ := h.Worlds()
			return len(now) == 2 && !slices.Contains(now, held[0]), nil
		})
	})
}
