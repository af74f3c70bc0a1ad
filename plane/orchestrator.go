package plane

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/leasing"
	"github.com/orrery-run/orrery/plane/internal/seam"
	"github.com/orrery-run/orrery/store"
)

// The orchestrator's own lease is the lease of this world, so that only
// one orchestrator acts at a time, fenced like any world.
const (
	OrchestratorWorld    = "sys.orchestrator"
	OrchestratorUniverse = "sys"
)

// Assignment reasons the orchestrator writes. A pin is an operator's
// explicit placement: the orchestrator never moves it.
const (
	ReasonPin        = "pin"
	ReasonRendezvous = "rendezvous"
)

// OrchestratorConfig configures an Orchestrator.
type OrchestratorConfig struct {
	ID string // this orchestrator's id (its lease holder name)
	// Incarnation names this orchestrator's lifetime under ID in the
	// orchestrator lease, as HostConfig.Incarnation does a host's (empty:
	// a fresh one from store.NewIncarnation). A process started again
	// under the same ID takes the lease over at a new epoch, so the
	// assignments its frozen predecessor still writes are fenced.
	Incarnation string
	Store       store.Store //
	Universes   []string    // whose worlds it places
	LeaseTTL    time.Duration
	// LiveFor: a worker is live while its last heartbeat (store clock) is
	// younger than this (default LeaseTTL).
	LiveFor    time.Duration
	Every      time.Duration // reconcile backstop (default LeaseTTL/2)
	RetryAfter time.Duration // after a failed store call (default 100ms)
	// ListPage is the page of the ListWorkerWorlds reads through which a
	// reconcile learns the assignments (default 1000).
	ListPage int
	// WriteConcurrency is how many assignment writes a reconcile makes at
	// once (default 16): each is its own fenced transaction, and concurrent
	// ones share the store's group commits, so moving a drained worker's
	// worlds is not one round trip after another.
	WriteConcurrency int
	// Logger receives the worlds a pass could place nowhere (nil:
	// discarded).
	Logger *slog.Logger
}

// Orchestrator keeps the worker inventory, places worlds by rendezvous
// hashing over the live, non-draining workers that carry the world's type
// and have room for it (pins override), and writes assignments and
// revocations. It never runs world logic.
type Orchestrator struct {
	cfg   OrchestratorConfig
	st    store.Store
	ex    actor.Executor
	scope *actor.Scope
	park  actor.Parker
	hint  atomic.Bool
	log   *slog.Logger
	// unplaced: the active worlds the last pass placed nowhere.
	unplaced atomic.Int64
	// scans: how far each world's inbox was read for an upgrade input.
	scans upgradeScans

	// hold takes and renews the orchestrator lease, on a local deadline
	// (internal/leasing): the store's expiresAt is never compared with
	// the executor's clock.
	hold *leasing.Holder

	mu    sync.Mutex
	epoch uint64
	lease *leasing.Lease // nil: not the leader
}

// StartOrchestrator starts an orchestrator in a scope of its own under
// scope. It acts only while it holds the orchestrator lease.
func StartOrchestrator(ctx context.Context, scope *actor.Scope, cfg OrchestratorConfig) (*Orchestrator, error) {
	if cfg.ID == "" || cfg.Store == nil {
		return nil, errorf("orchestrator", ErrInvalid, "", detail("an orchestrator needs ID and Store"))
	}
	if cfg.Incarnation == "" {
		cfg.Incarnation = store.NewIncarnation()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.LiveFor <= 0 {
		cfg.LiveFor = cfg.LeaseTTL
	}
	if cfg.Every <= 0 {
		cfg.Every = cfg.LeaseTTL / 2
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 100 * time.Millisecond
	}
	if cfg.ListPage <= 0 {
		cfg.ListPage = 1000
	}
	if cfg.WriteConcurrency <= 0 {
		cfg.WriteConcurrency = 16
	}
	sub, err := scope.Sub("orchestrator:" + cfg.ID)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	o := &Orchestrator{cfg: cfg, st: cfg.Store, ex: scope.Executor(), scope: sub, log: cfg.Logger}
	o.park = o.ex.NewParker()
	o.hold = leasing.New(leasing.Config{Worker: cfg.ID, Incarnation: cfg.Incarnation, Store: cfg.Store, Executor: o.ex,
		TTL: cfg.LeaseTTL, RenewMargin: cfg.LeaseTTL / 3, RetryAfter: cfg.RetryAfter})
	if _, err := sub.Go("orchestrator:"+cfg.ID, o.loop); err != nil {
		_, _ = sub.CloseKilled(ctx)
		return nil, err
	}
	return o, nil
}

// Stop stops the orchestrator; its lease expires by itself.
func (o *Orchestrator) Stop(ctx context.Context) error {
	_, err := o.scope.Close(ctx)
	return err
}

// Resign is the planned way out: it stops the orchestrator and releases the
// orchestrator lease it holds, so another orchestrator acts at once instead
// of after the lease's TTL. Its epoch is kept by the store: the successor's
// is higher, so a write of this one still in flight is fenced.
func (o *Orchestrator) Resign(ctx context.Context) error {
	if err := o.Stop(ctx); err != nil {
		return err
	}
	o.mu.Lock()
	epoch, held := o.epoch, o.lease != nil
	if held {
		o.lease.Fence()
		o.hold.Forget(o.lease)
	}
	o.lease = nil
	o.mu.Unlock()
	if !held {
		return nil
	}
	err := o.hold.Release(ctx, OrchestratorWorld, epoch)
	if errors.Is(err, store.ErrNotHolder) || errors.Is(err, store.ErrStaleEpoch) {
		return nil // it had lost the lease already
	}
	return err
}

// Leader reports whether it holds an unexpired orchestrator lease.
func (o *Orchestrator) Leader() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leaderLocked()
}

// fence returns the fence of the orchestrator lease it holds, and whether
// it holds one.
func (o *Orchestrator) fence() (store.Fence, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return store.Fence{World: OrchestratorWorld, Epoch: o.epoch}, o.leaderLocked()
}

func (o *Orchestrator) leaderLocked() bool {
	return o.lease != nil && o.lease.Live()
}

// Pin places world on worker explicitly; the orchestrator never moves a
// pinned world, and a pin is not held to the worker's Capacity (the
// operator's decision). It does not override what the worker carries: a
// worker the inventory knows that cannot run the world (Eligible) is
// ErrIneligible, nothing written. A worker not in the inventory yet may be
// pinned to (a pin ahead of its worker). Unpin gives it back to
// rendezvous placement.
func (o *Orchestrator) Pin(ctx context.Context, world, worker string) error {
	w, err := o.st.GetWorld(ctx, world)
	if err != nil {
		return err
	}
	workers, err := o.st.ListWorkers(ctx)
	if err != nil {
		return err
	}
	vers, err := versionsNeeded(ctx, o.st, nil, world, w.Universe, workers)
	if err != nil {
		return err
	}
	for _, info := range workers {
		if info.ID == worker && !eligibleFor(info, w.Universe, vers) {
			return errorf("pin", ErrIneligible, world, detail("worker %s does not host worlds of %s at versions %v (it advertises %v)", worker, w.Universe, vers, info.Capabilities))
		}
	}
	return o.st.Assign(ctx, world, store.Assignment{DesiredWorker: worker, Priority: 1, Reason: ReasonPin}, nil)
}

// Unpin removes a pin; the next reconcile places the world.
func (o *Orchestrator) Unpin(ctx context.Context, world string) error {
	a, ok, err := o.st.GetAssignment(ctx, world)
	if err != nil || !ok || a.Reason != ReasonPin {
		return err
	}
	if err := o.st.Unassign(ctx, world, nil); err != nil {
		return err
	}
	o.hint.Store(true)
	o.park.Unpark()
	return nil
}

type orchWaker struct{ o *Orchestrator }

func (w orchWaker) Unpark() { w.o.hint.Store(true); w.o.park.Unpark() }

func (o *Orchestrator) loop(ctx context.Context) error {
	if _, err := o.st.CreateWorld(ctx, OrchestratorUniverse, OrchestratorWorld, nil); err != nil && !errors.Is(err, store.ErrWorldExists) {
		// Retried below: Acquire needs the world.
		o.hint.Store(true)
	}
	stop, err := watchRetry(ctx, o.st, o.ex, o.cfg.RetryAfter, orchWaker{o}, store.TopicWorkers, store.TopicAssignments, store.TopicLeases)
	if err != nil {
		return nil // stopped
	}
	defer stop()
	var nextReconcile time.Time
	for ctx.Err() == nil {
		next := o.lead(ctx)
		now := o.ex.Now()
		if o.Leader() && (o.hint.Swap(false) || !now.Before(nextReconcile)) {
			if err := o.Reconcile(ctx); err != nil {
				nextReconcile = now.Add(o.cfg.RetryAfter)
			} else {
				nextReconcile = now.Add(o.cfg.Every)
			}
		}
		if o.Leader() && nextReconcile.Before(next) {
			next = nextReconcile
		}
		if err := actor.ParkFor(ctx, o.ex, o.park, next.Sub(o.ex.Now())); err != nil {
			return nil
		}
	}
	return nil
}

// lead acquires or renews the orchestrator lease and returns when to look
// at it again.
func (o *Orchestrator) lead(ctx context.Context) time.Time {
	o.mu.Lock()
	l := o.lease
	o.mu.Unlock()
	if l != nil {
		// Renewed when due; a refusal, or the local deadline passing while
		// the store is unreachable, fences it.
		next := o.hold.Renew(ctx, false)
		if l.Live() {
			return next
		}
		o.hold.Forget(l)
		o.mu.Lock()
		if o.lease == l {
			o.lease = nil
		}
		o.mu.Unlock()
	}
	now := o.ex.Now()
	if _, cerr := o.st.CreateWorld(ctx, OrchestratorUniverse, OrchestratorWorld, nil); cerr != nil && !errors.Is(cerr, store.ErrWorldExists) {
		return now.Add(o.cfg.RetryAfter)
	}
	g, err := o.hold.Acquire(ctx, OrchestratorWorld)
	switch {
	case err == nil:
		nl := &leasing.Lease{}
		o.hold.Hold(nl, g)
		o.mu.Lock()
		o.epoch, o.lease = g.Lease.Epoch, nl
		o.mu.Unlock()
		return o.hold.Renew(ctx, false)
	case errors.Is(err, store.ErrLeaseHeld):
		// Another leader: look again when its lease would lapse, what is
		// left of it measured on the store's clock and waited out on the
		// local one, from after the store's answer.
		if cur, ok, gerr := o.st.GetLease(ctx, OrchestratorWorld); gerr == nil && ok {
			if sn, nerr := o.st.Now(ctx); nerr == nil {
				if left := cur.ExpiresAt.Sub(sn); left > 0 {
					return o.ex.Now().Add(left)
				}
			}
		}
		return now.Add(o.cfg.RetryAfter)
	default:
		return now.Add(o.cfg.RetryAfter)
	}
}

// Reconcile places every world of the configured universes once: pins
// stay, everything else goes to the rendezvous winner among the live,
// non-draining workers that can run it (Eligible) and have room for it
// (below their declared Capacity, counting the worlds assigned to them); a
// world that is no longer active loses its assignment, and one that fits
// nowhere is left unassigned and counted (Unplaced). It is ErrNotLeader
// unless this orchestrator holds the lease, which is checked again before
// every write.
func (o *Orchestrator) Reconcile(ctx context.Context) error {
	if !o.Leader() {
		return errorf("reconcile", ErrNotLeader, "", nil)
	}
	workers, live, err := liveWorkers(ctx, o.st, o.cfg.LiveFor)
	if err != nil {
		return err
	}
	assigned, held, err := o.assignments(ctx, workers)
	if err != nil {
		return err
	}
	o.scans.begin()
	defer o.scans.sweep()
	// A move carries the assignment it was decided on (nil: none), and is
	// written only over it: a pin or another write that lands between
	// this pass's read and its write stays, and the next pass, which the
	// change's hint starts, decides on it.
	type move struct {
		world, want string
		was         *store.Assignment
	}
	type item struct {
		w    store.World
		a    store.Assignment
		ok   bool
		vers []uint64 // the versions its host must carry (none: any)
	}
	var items []item
	ours := map[string]bool{}
	for _, u := range o.cfg.Universes {
		worlds, err := o.st.ListWorlds(ctx, u, "")
		if err != nil {
			return err
		}
		for _, w := range worlds {
			a, ok := assigned[w.ID]
			if !ok {
				// Unassigned, or desired by a worker the inventory does
				// not know (a pin ahead of its worker): read it.
				if a, ok, err = o.st.GetAssignment(ctx, w.ID); err != nil {
					return err
				}
			}
			var vers []uint64
			if w.Status == store.WorldActive && !uniform(live, u) {
				// Hosts carry different versions of the universe (a
				// rolling upgrade): the world goes only where the
				// version it is on, and the one it is upgrading to, run.
				if vers, err = versionsNeeded(ctx, o.st, &o.scans, w.ID, u, live); err != nil {
					return err
				}
			}
			items = append(items, item{w, a, ok, vers})
			ours[w.ID] = true
		}
	}
	// What each worker is given to run starts with what this pass does
	// not decide: the assignments of other universes' worlds, and pins.
	pl := newPlacer(live)
	for id, a := range assigned {
		if !ours[id] {
			pl.counts[a.DesiredWorker]++
		}
	}
	var placing []int // the active, unpinned worlds, by index
	for i, it := range items {
		switch {
		case it.ok && it.a.Reason == ReasonPin:
			pl.counts[it.a.DesiredWorker]++
		case it.w.Status == store.WorldActive:
			placing = append(placing, i)
		}
	}
	// First every world already where rendezvous puts it keeps its place
	// while its worker has room, those its worker holds before those it
	// does not (yet): under a capacity that is full, a world that runs is
	// not displaced by one just placed there (an activation does not
	// count). Then the rest go to the winner among the workers with room.
	kept := map[string]bool{}
	for _, heldFirst := range []bool{true, false} {
		for _, i := range placing {
			it := items[i]
			if it.ok && held[it.w.ID] == heldFirst && pl.keep(it.w.ID, it.w.Universe, it.vers, it.a.DesiredWorker) {
				kept[it.w.ID] = true
			}
		}
	}
	var moves []move
	var unplaced []string
	for _, it := range items {
		w, a, ok := it.w, it.a, it.ok
		var want string
		switch {
		case ok && a.Reason == ReasonPin:
			continue
		case w.Status == store.WorldActive && len(live) == 0:
			// No live worker at all is more likely the orchestrator's
			// view lagging (heartbeats stuck behind a slow store) than
			// every worker gone: keep the placements rather than churn
			// every world.
			continue
		case w.Status == store.WorldActive && kept[w.ID]:
			continue
		case w.Status == store.WorldActive:
			if want = pl.place(w.ID, w.Universe, it.vers); want == "" {
				unplaced = append(unplaced, w.ID)
			}
		}
		if ok && a.DesiredWorker == want || !ok && want == "" {
			continue
		}
		var was *store.Assignment
		if ok {
			was = &a
		}
		moves = append(moves, move{w.ID, want, was})
	}
	o.reportUnplaced(unplaced)
	// The writes of different worlds are independent, so they go out in
	// lanes; each lane writes its share in world order.
	lanes := min(o.cfg.WriteConcurrency, len(moves))
	return seam.Lanes(o.ex, lanes, func(lane int) error {
		for i := lane; i < len(moves); i += lanes {
			m := moves[i]
			if err := o.place(ctx, m.world, m.was, m.want); err != nil && !errors.Is(err, store.ErrAssignmentChanged) {
				return err
			}
		}
		return nil
	})
}

// reportUnplaced records the active worlds the pass could place nowhere
// (Unplaced), and logs them when their number changes: a cluster whose
// hosts lack a world's type or are full is an operator's to fix, and a
// line every pass would bury everything else.
func (o *Orchestrator) reportUnplaced(worlds []string) {
	n := int64(len(worlds))
	if prev := o.unplaced.Swap(n); prev == n {
		return
	}
	if n == 0 {
		o.log.Info("orchestrator: every world is placed")
		return
	}
	o.log.Warn("orchestrator: worlds placed nowhere: no live host that carries their type has room",
		"unplaced", n, "first", worlds[:min(len(worlds), 5)])
}

// Unplaced is how many active worlds the acting orchestrator's last pass
// could place on no worker (none live carries their type, or every one
// that does is at its Capacity); 0 while it does not act. Those worlds
// wait unassigned until a host with room that carries them heartbeats.
func (o *Orchestrator) Unplaced() int {
	if !o.Leader() {
		return 0
	}
	return int(o.unplaced.Load())
}

// placer decides a pass's placements: the rendezvous winner among the
// live workers that carry the world's type and have room, counting as it
// goes what it gives each one.
type placer struct {
	live   []store.WorkerInfo
	counts map[string]int // worlds given to each worker so far
}

func newPlacer(live []store.WorkerInfo) *placer {
	return &placer{live: live, counts: map[string]int{}}
}

// room reports whether w may be given one more world.
func (p *placer) room(w store.WorkerInfo) bool { return !limited(w) || p.counts[w.ID] < w.Capacity }

// keep gives world its place on cur, and reports so, when cur is the
// rendezvous winner among every live worker that carries the world's type
// (room aside) and still has room.
func (p *placer) keep(world, universe string, vers []uint64, cur string) bool {
	var all []string
	var on *store.WorkerInfo
	for i, w := range p.live {
		if eligibleFor(w, universe, vers) {
			all = append(all, w.ID)
			if w.ID == cur {
				on = &p.live[i]
			}
		}
	}
	if on == nil || Place(world, all) != cur || !p.room(*on) {
		return false
	}
	p.counts[cur]++
	return true
}

// place gives world (of universe, needing the kernel versions vers; none:
// any) to the
// rendezvous winner among the live workers that carry its type and have
// room, "" for none.
func (p *placer) place(world, universe string, vers []uint64) string {
	var room []string
	for _, w := range p.live {
		if eligibleFor(w, universe, vers) && p.room(w) {
			room = append(room, w.ID)
		}
	}
	want := Place(world, room)
	if want != "" {
		p.counts[want]++
	}
	return want
}

// liveWorkers reads the inventory and the workers a world may be placed
// on: those not draining whose last heartbeat is younger than liveFor, both
// instants on the store's clock (the local one is never compared with it).
func liveWorkers(ctx context.Context, st store.Store, liveFor time.Duration) ([]store.WorkerInfo, []store.WorkerInfo, error) {
	workers, err := st.ListWorkers(ctx)
	if err != nil {
		return nil, nil, err
	}
	now, err := st.Now(ctx)
	if err != nil {
		return nil, nil, err
	}
	var live []store.WorkerInfo
	for _, w := range workers {
		if !w.Draining && now.Sub(w.HeartbeatAt) < liveFor {
			live = append(live, w)
		}
	}
	return workers, live, nil
}

// place writes world's assignment (want == "": none) over was, the
// assignment it was decided on (nil: none), fenced by the orchestrator's
// own lease: a deposed orchestrator (paused past its TTL) writes nothing,
// and learns it is no longer the leader. An assignment that is no longer
// was (a pin written since the read) is kept: store.ErrAssignmentChanged.
func (o *Orchestrator) place(ctx context.Context, world string, was *store.Assignment, want string) error {
	fence, leader := o.fence()
	if !leader {
		return errorf("reconcile", ErrNotLeader, "", nil)
	}
	var next *store.Assignment
	if want != "" {
		next = &store.Assignment{DesiredWorker: want, Reason: ReasonRendezvous}
	}
	err := o.st.CompareAndAssign(ctx, world, was, next, &fence)
	if errors.Is(err, store.ErrFenced) {
		o.mu.Lock()
		if o.epoch == fence.Epoch && o.lease != nil {
			o.lease.Fence() // the next lead forgets it and acquires again
		}
		o.mu.Unlock()
		return errorf("reconcile", ErrNotLeader, "", err)
	}
	return err
}

// assignments reads the assignment of every world desired by (or leased
// to) a worker of the inventory, a page of ListWorkerWorlds at a time: a
// pass costs a call per page, not one per world. held names the worlds
// whose assignee holds their lease.
func (o *Orchestrator) assignments(ctx context.Context, workers []store.WorkerInfo) (out map[string]store.Assignment, held map[string]bool, err error) {
	out, held = map[string]store.Assignment{}, map[string]bool{}
	for _, w := range workers {
		for after := ""; ; {
			rows, err := o.st.ListWorkerWorlds(ctx, w.ID, after, o.cfg.ListPage)
			if err != nil {
				return nil, nil, err
			}
			for _, r := range rows {
				if r.Assignment != nil {
					out[r.World] = *r.Assignment
					if r.Lease != nil && r.Lease.Holder == w.ID && r.Assignment.DesiredWorker == w.ID {
						held[r.World] = true
					}
				}
			}
			if len(rows) < o.cfg.ListPage {
				break
			}
			after = rows[len(rows)-1].World
		}
	}
	return out, held, nil
}

// Place returns the rendezvous (highest random weight) winner for world
// among workers, "" if there is none: each world moves only when its
// winner joins or leaves, and the load spreads evenly.
func Place(world string, workers []string) string {
	best, bestScore := "", uint64(0)
	for _, w := range workers {
		sum := sha256.Sum256([]byte(world + "\x00" + w))
		score := binary.BigEndian.Uint64(sum[:8])
		if best == "" || score > bestScore || score == bestScore && w < best {
			best, bestScore = w, score
		}
	}
	return best
}
