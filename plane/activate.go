package plane

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
)

// ActivatorConfig configures an Activator.
type ActivatorConfig struct {
	Store store.Store
	// Kernels are the universes whose worlds it activates: the ones this
	// process's orchestrator places.
	Kernels  Kernels
	Executor actor.Executor // its clock, for what it remembers (required)
	// Host is this process's host, which takes the worlds placed on it at
	// once (nil: the activator only places; the chosen host takes the
	// world on the assignment's hint).
	Host *Host
	// Orchestrator is this process's orchestrator, if any: while it leads,
	// a placement is its own write.
	Orchestrator *Orchestrator
	// LiveFor: a worker is a placement candidate while its last heartbeat
	// (store clock) is younger than this (default 10s, the lease TTL; set
	// it as the orchestrator's LiveFor).
	LiveFor time.Duration
	// Remember: how long a world found placed on another worker, or not to
	// be placed (paused, archived, of a universe not known here), is not
	// looked up again on its next input (default 1s). It bounds the store
	// reads an ingress node makes for worlds others run.
	Remember time.Duration
	// LiveFresh: how long the placement candidates read for one activation
	// serve the next ones (default 1s), so a burst of new worlds reads the
	// inventory once. A candidate that died or began draining meanwhile
	// is corrected by the reconcile the assignment's hint starts, and a
	// draining host never takes a world.
	LiveFresh time.Duration
}

// Activator makes a world's first input as fast as any other: the node
// that takes the input places the world, if it is not placed yet, and its
// host takes the lease at once, instead of the world waiting for the
// orchestrator's next reconcile round and the host's next sync.
//
// A placement is what the orchestrator's reconcile would write (the
// rendezvous winner among the live, non-draining workers), written under
// the acting orchestrator's fence: its own when this process's
// orchestrator leads, else the epoch of the orchestrator lease as the
// store holds it, so a write made while the leadership changes is refused
// by the store (store.ErrFenced) and the world is left to the new
// leader's reconcile. A world that has an assignment (a pin, or one the
// orchestrator wrote) is never placed again: only its assignee takes it.
// The lease is acquired by the host's controller with the host's
// incarnation, as every lease, and the store gives it to one holder only,
// so two nodes that activate one world at once end with one holder (the
// other acquisition is refused, or its host releases the lease when its
// next sync finds the world assigned elsewhere). A draining host takes
// nothing, and a draining worker is never a placement candidate.
//
// Activation is best effort: when it cannot act (no acting orchestrator,
// no live worker, a store error) the world is placed by the next
// reconcile, as before.
type Activator struct {
	cfg ActivatorConfig

	mu        sync.Mutex
	settled   map[string]time.Time // world → until when it is not looked up again (executor clock)
	live      []store.WorkerInfo   // the placement candidates last read
	liveUntil time.Time            // until when they serve (executor clock)
}

// maxSettled bounds what an Activator remembers: past it, it forgets all
// and looks worlds up again.
const maxSettled = 1 << 14

// NewActivator returns an activator.
func NewActivator(cfg ActivatorConfig) (*Activator, error) {
	if cfg.Store == nil || cfg.Executor == nil {
		return nil, errorf("activator", ErrInvalid, "", detail("an activator needs Store and Executor"))
	}
	if cfg.LiveFor <= 0 {
		cfg.LiveFor = 10 * time.Second
	}
	if cfg.Remember <= 0 {
		cfg.Remember = time.Second
	}
	if cfg.LiveFresh <= 0 {
		cfg.LiveFresh = time.Second
	}
	return &Activator{cfg: cfg, settled: map[string]time.Time{}}, nil
}

// Activate is told that world has an input coming: a world this
// process's host holds costs nothing; an unplaced one is placed; one
// placed on this host is acquired by the host's controller, which starts
// its process for the backlog. It returns once the placement is written
// and the acquisition asked for, not when the world runs; its error is a
// store error the caller may ignore (the reconcile is the backstop).
func (a *Activator) Activate(ctx context.Context, id string) error {
	if a == nil {
		return nil
	}
	h := a.cfg.Host
	if h != nil && h.holds(id) {
		return nil
	}
	if a.recall(id) {
		return nil
	}
	asg, ok, err := a.cfg.Store.GetAssignment(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		if asg, ok, err = a.place(ctx, id); err != nil || !ok {
			return err
		}
	}
	if h != nil && asg.DesiredWorker == h.Worker() {
		h.take(id)
		return nil
	}
	a.remember(id)
	return nil
}

// Activation is what the ingress paths (Client, Ops) tell of each input
// they take, just before they enqueue it, so that the host's acquisition
// runs beside the enqueue rather than after it (a lease taken before the
// item lands is woken by the item's inbox hint, which the host watches
// from before it acquires). *Activator is the one a node uses.
type Activation interface {
	Activate(ctx context.Context, world string) error
}

// activate is the ingress paths' call: no activation does nothing, and a
// failure is left to the reconcile (the input goes in regardless).
func activate(ctx context.Context, a Activation, id string) {
	if a != nil {
		_ = a.Activate(ctx, id)
	}
}

// place writes the placement of an unplaced world, as the reconcile would,
// and reports whether it did.
func (a *Activator) place(ctx context.Context, id string) (store.Assignment, bool, error) {
	st := a.cfg.Store
	w0, err := st.GetWorld(ctx, id)
	if errors.Is(err, store.ErrWorldNotFound) {
		return store.Assignment{}, false, nil
	}
	if err != nil {
		return store.Assignment{}, false, err
	}
	if _, known := a.cfg.Kernels[w0.Universe]; !known || w0.Status != store.WorldActive {
		// The reconcile places only active worlds of its universes.
		a.remember(id)
		return store.Assignment{}, false, nil
	}
	live, err := a.candidates(ctx)
	if err != nil {
		return store.Assignment{}, false, err
	}
	var vers []uint64
	if !uniform(live, w0.Universe) {
		if vers, err = versionsNeeded(ctx, st, nil, id, w0.Universe, live); err != nil {
			return store.Assignment{}, false, err
		}
	}
	h := a.cfg.Host
	var room []string
	for _, w := range live {
		// A drain of this host may be younger than the candidates read.
		if eligibleFor(w, w0.Universe, vers) && (h == nil || w.ID != h.Worker() || !h.isDraining()) {
			room = append(room, w.ID)
		}
	}
	if len(room) == 0 {
		// Nowhere to run it: the reconcile reports it.
		return store.Assignment{}, false, nil
	}
	asg := store.Assignment{DesiredWorker: Place(id, room), Reason: ReasonRendezvous}
	if o := a.cfg.Orchestrator; o != nil {
		err := o.place(ctx, id, nil, asg.DesiredWorker)
		switch {
		case err == nil:
			return asg, true, nil
		case errors.Is(err, store.ErrAssignmentChanged):
			return a.placedMeanwhile(ctx, id)
		case !errors.Is(err, ErrNotLeader):
			return store.Assignment{}, false, err
		}
	}
	// Another process's orchestrator leads: the write is made under its
	// fence, which the store checks in the same transaction.
	l, ok, err := st.GetLease(ctx, OrchestratorWorld)
	if err != nil || !ok {
		return store.Assignment{}, false, err
	}
	err = st.CompareAndAssign(ctx, id, nil, &asg, &store.Fence{World: OrchestratorWorld, Epoch: l.Epoch})
	switch {
	case err == nil:
		return asg, true, nil
	case errors.Is(err, store.ErrAssignmentChanged):
		return a.placedMeanwhile(ctx, id)
	case errors.Is(err, store.ErrFenced), errors.Is(err, store.ErrWorldNotFound):
		// No orchestrator acts now (its lease expired or changed hands
		// since it was read): the next leader's reconcile places it.
		return store.Assignment{}, false, nil
	}
	return store.Assignment{}, false, err
}

// placedMeanwhile is the assignment written since the activation read
// none (a pin, or another node's placement), which the activation follows
// instead of overwriting.
func (a *Activator) placedMeanwhile(ctx context.Context, id string) (store.Assignment, bool, error) {
	return a.cfg.Store.GetAssignment(ctx, id)
}

// candidates returns the live, non-draining workers, read again once they
// are older than LiveFresh (none found is never kept).
func (a *Activator) candidates(ctx context.Context) ([]store.WorkerInfo, error) {
	a.mu.Lock()
	live, until := a.live, a.liveUntil
	a.mu.Unlock()
	if len(live) > 0 && a.cfg.Executor.Now().Before(until) {
		return live, nil
	}
	start := a.cfg.Executor.Now()
	_, live, err := liveWorkers(ctx, a.cfg.Store, a.cfg.LiveFor)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.live, a.liveUntil = live, start.Add(a.cfg.LiveFresh)
	a.mu.Unlock()
	return live, nil
}

func (a *Activator) recall(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.settled[id]
	if !ok {
		return false
	}
	if a.cfg.Executor.Now().Before(until) {
		return true
	}
	delete(a.settled, id)
	return false
}

func (a *Activator) remember(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.settled) >= maxSettled {
		clear(a.settled)
	}
	a.settled[id] = a.cfg.Executor.Now().Add(a.cfg.Remember)
}
