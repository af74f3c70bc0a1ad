package plane

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/internal/leasing"
	"github.com/orrery-run/orrery/plane/internal/otrace"
	"github.com/orrery-run/orrery/plane/internal/seam"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/supervisor"
	"github.com/orrery-run/orrery/world"
)

// HostConfig configures a Host. Zero durations and sizes take the defaults
// named on each field.
type HostConfig struct {
	Worker string // the worker id: lease holder and inventory name
	// Incarnation names this host's lifetime under Worker in its leases
	// (store.WithIncarnation). Empty: StartHost draws a fresh one
	// (store.NewIncarnation), so a host started again under the same
	// worker id, while its predecessor may still be frozen or partitioned
	// rather than dead, takes the worlds over at new epochs and fences the
	// predecessor, which cannot take them back. Set it only to make a run
	// reproducible (the lab), and never to a value another live process
	// may use.
	Incarnation string
	Store       store.Store // the persistence plane
	Kernels     Kernels     // the definition of each universe's worlds
	Replies     *Replies    // in-process reply hand-off (optional)

	// Capacity is the most worlds the host holds (default 1<<20): it is
	// announced in heartbeats, the orchestrator places no more here, and
	// the host acquires no more even when more are assigned to it (by an
	// orchestrator that read the inventory before, or an activation).
	Capacity int
	// Capabilities, when set, is advertised in every heartbeat
	// (store.Advertise): the worker's roles and what it carries, which
	// placement reads (Eligible). Nil: nothing advertised, the record
	// keeps what it had (an older binary's: nothing, taken as everything).
	Capabilities []string
	// NoWorlds makes a host that runs no world: it only heartbeats, which
	// keeps the worker's inventory record and the liveness promise its
	// process's effect and timer claims ride on, for a process whose
	// roles leave hosting to others. It never scans for assigned worlds
	// and acquires none.
	NoWorlds bool
	LeaseTTL time.Duration // default 10s
	// RenewMargin: a lease is renewed that long before its local deadline
	// (default LeaseTTL/3). The deadline is on the executor's clock, from
	// just before the request that granted or renewed the lease, never
	// the store's expiresAt (see internal/leasing).
	RenewMargin    time.Duration
	HeartbeatEvery time.Duration // default LeaseTTL/3
	// SyncEvery is the backstop rescan of the worker's worlds (default
	// LeaseTTL/2): hints may be lost, and a lease held elsewhere becomes
	// acquirable when it expires, which nothing announces.
	SyncEvery time.Duration
	// HintSyncGap spaces the scans hints start (default RetryAfter): the
	// assignment and lease topics are global, so without it every acquire
	// or assignment anywhere would start a scan of this worker's worlds on
	// every host. Hints during a scan coalesce into one scan after it.
	HintSyncGap time.Duration
	// IdleAfter passivates a world whose process saw no input for that
	// long (default 30s; negative: never).
	IdleAfter time.Duration

	MaxInboxBatch        int           // items read per cycle (default 256)
	MaxTickStepsPerCycle int           // steps per commit (default 256, at most store.MaxBatch)
	MaxEffectsPerCycle   int           // intents per commit (default 1024)
	MaxCycleWall         time.Duration // a cycle's stepping time (default 50ms)
	SnapshotEvery        uint64        // snapshot every N heights (default 1000)
	// ListPage is the page of ListWorkerWorlds, of AcquireLeases and of
	// RenewLeases (default 1000, at most store.MaxBatch): a pass takes
	// over a page of worlds in one AcquireLeases call.
	ListPage   int
	RetryAfter time.Duration // after a failed controller store call (default 100ms)
	// TimerConcurrency is how many of the held worlds' timer firings
	// (store.FireHeld) may be in flight at once (default 16): timers of
	// different worlds due together share the store's group commits.
	TimerConcurrency int
	// TimersThroughInbox makes the host fire every timer of a world it
	// holds with store.FireHeld into the world's inbox, as it fires a
	// passive world's, instead of handing an active world's firing to its
	// process to step at the due time (see hosttimers.go). Off by default.
	TimersThroughInbox bool
	// MaxSkew is how far ahead of the clock of the store server that took
	// a heartbeat the clock of the one that later judges it may be: after
	// a PostgreSQL failover the new primary judges the promises the old
	// one took, and a clock ahead by d makes each of them run out d
	// early there, and the orphan reaper hand their claims to another
	// node. AliveUntil is brought forward by it, so the bound holds while
	// server clocks agree within MaxSkew. Default: 1s or a tenth of the
	// promise's TTL (max(LeaseTTL, 3*HeartbeatEvery)), whichever is
	// smaller. 1s is far above what NTP keeps servers within (a few
	// milliseconds) and still only a tenth of the default TTL; a tenth
	// keeps a short TTL usable, since the skew is taken from every
	// promise's useful span (an effect pool claims nothing with less than
	// a quarter of a TTL left). Negative: none, for a store judged by one
	// clock. It must be below half the promise's TTL (ErrInvalid): a
	// larger one leaves each promise under 0.45 of a TTL of use, not
	// much more than the beat that renews it (a third), so one late
	// heartbeat would cut every execution and pause every claim.
	MaxSkew time.Duration
	// OnLivenessLost, if set, is called once when the store refuses the
	// host's heartbeat (ErrFenced): its incarnation was superseded by a
	// newer process under the same worker id, or retired. The host fails
	// at once; the node cancels the executions that rode on the promise
	// (adapter.Pool.Lapse), whose claims the store has requeued already.
	OnLivenessLost func()

	// Observe, when set, receives the host's events synchronously; it
	// must not block. Tests and metrics read it.
	Observe func(HostEvent)
	// Tracer writes an orrery.cycle span per commit (nil: the global
	// provider, a no-op unless the binary installs an SDK).
	Tracer trace.TracerProvider
	// Links connects each cycle's span to the spans that wrote the inbox
	// items it journaled, and records it for the effects and timers it
	// published (optional; share one per process).
	Links *TraceLinks
	// Logger receives the host's lifecycle: acquisitions, releases and a
	// host failure at Info, fencing (with its reason) and crashes at Warn,
	// a divergent journal at Error, passivations, wakes and restores at
	// Debug; never a line per step or commit. Nil: discarded.
	Logger *slog.Logger
}

// HostEvent is one thing a host did.
type HostEvent struct {
	Kind   string // one of the Ev* constants
	World  string
	Epoch  uint64
	Height uint64 // the head after a commit
	At     time.Time
	Err    error
	// Dur is a latency on the executor's clock: on EvCommit the lag from
	// the enqueue of the oldest inbox item the cycle journaled (a store
	// instant, brought to the executor's clock by the skew the heartbeats
	// measure) to the commit's completion; on EvRenewed the RenewLeases round trip; on
	// EvTimerFired the timer's lateness, from its due time to its firing's
	// commit.
	Dur time.Duration
	// N counts: the steps of an EvCommit, the leases of an EvRenewed, the
	// timers of an EvTimerFired (one).
	N int
	// WorldType is the world's definition (Kernel.Name) on
	// EvHandlerError and EvHandlerPanic.
	WorldType string
}

// Host event kinds.
const (
	EvAcquired  = "acquired"
	EvRestored  = "restored"
	EvStep      = "step"   // a handler is about to run (checked first)
	EvCommit    = "commit" // a commit succeeded
	EvFenced    = "fenced" // the world stopped on this host
	EvReleased  = "released"
	EvPassivate = "passivate"
	EvWake      = "wake" // a passive world's process started again
	// EvBacklogWake: a rescan found input waiting for a held world with no
	// process, whose hint was lost; it is woken.
	EvBacklogWake = "backlog-wake"
	EvCrash       = "crash"
	EvSynced      = "synced" // a pass over the worker's worlds completed
	// EvRenewed: one RenewLeases round trip (World is empty; N leases,
	// Dur the call's duration, Err the call's failure if it failed).
	EvRenewed = "renewed"
	// EvDiverged: a restore failed because replay does not reproduce the
	// journal (Err wraps the *world.DivergenceError). The world process
	// then crashes as for any failed restore (EvCrash follows) and its
	// supervisor retries.
	EvDiverged = "diverged"
	// EvHostFailed: the host's world supervisor or controller died; Err
	// is the *Error of kind ErrHostFailed. Nothing runs on the host after
	// it.
	EvHostFailed = "host-failed"
	// EvTimerFired: the host fired a timer of a world it holds: its
	// process stepped it directly and committed that step, or
	// store.FireHeld put it into the world's inbox. Dur is its lateness,
	// from the due time to the firing (the step's start, or FireHeld's
	// return).
	EvTimerFired = "timer-fired"
	// EvRefused: the store refused a cycle's commit as invalid (Err, a
	// store.ErrInvalid), although the kernel bounds every step. Nothing
	// of it was written; N steps were in it. The world goes on: a commit
	// of one step is made again with that step's input consumed as an
	// error outcome (world.ErrRefused); a commit of several is made again
	// one step at a time, to find the step refused.
	EvRefused = "refused"
	// EvHandlerError and EvHandlerPanic: a step whose handler returned an
	// error, or panicked, was committed (once per journaled step, after
	// its commit; Err is the step's error, WorldType the definition).
	EvHandlerError = "handler-error"
	EvHandlerPanic = "handler-panic"
	// EvSnapshot: a snapshot asked for on demand (KindSnapshot) was
	// committed at Height.
	EvSnapshot = "snapshot"
	// EvIncarnationFenced: the store refused the host's heartbeat
	// (store.ErrFenced, in Err): its incarnation was superseded by a newer
	// process under the same worker id, or retired. Emitted once, before
	// EvHostFailed; the host acts no more.
	EvIncarnationFenced = "incarnation-fenced"
	// EvAtCapacity: the host refused to acquire N worlds assigned to it
	// because it holds its Capacity already (World is the first refused);
	// it acquires them once it has room and they are still assigned here.
	EvAtCapacity = "at-capacity"
	// EvNoVersion: a world placed here is on a version of its definition
	// this host does not carry; its lease was given back (Err says which
	// version), and this process never takes it again.
	EvNoVersion = "no-version"
	// EvUpgraded: a world moved to another version of its definition
	// (Height is the upgrade's record); EvUpgradeFailed: an upgrade
	// input failed and the world stays on its version (Err says why).
	EvUpgraded      = "upgraded"
	EvUpgradeFailed = "upgrade-failed"
)

func (c *HostConfig) defaults() error {
	if c.Worker == "" || c.Store == nil || c.Kernels == nil {
		return errorf("host", ErrInvalid, "", detail("a host needs Worker, Store and Kernels"))
	}
	if c.Incarnation == "" {
		c.Incarnation = store.NewIncarnation()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	def(&c.LeaseTTL, 10*time.Second)
	def(&c.RenewMargin, c.LeaseTTL/3)
	def(&c.HeartbeatEvery, c.LeaseTTL/3)
	def(&c.SyncEvery, c.LeaseTTL/2)
	def(&c.IdleAfter, 30*time.Second)
	def(&c.MaxCycleWall, 50*time.Millisecond)
	def(&c.RetryAfter, 100*time.Millisecond)
	def(&c.HintSyncGap, c.RetryAfter)
	defInt(&c.Capacity, 1<<20)
	defInt(&c.MaxInboxBatch, 256)
	defInt(&c.MaxTickStepsPerCycle, 256)
	// A commit's entries are one store call's items.
	c.MaxTickStepsPerCycle = min(c.MaxTickStepsPerCycle, store.MaxBatch)
	defInt(&c.MaxEffectsPerCycle, 1024)
	defInt(&c.ListPage, 1000)
	c.ListPage = min(c.ListPage, store.MaxBatch)
	defInt(&c.TimerConcurrency, 16)
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 1000
	}
	promise := c.promiseTTL()
	switch {
	case c.MaxSkew == 0:
		c.MaxSkew = min(time.Second, promise/10)
	case c.MaxSkew < 0:
		c.MaxSkew = 0
	case c.MaxSkew >= promise/2:
		return errorf("host", ErrInvalid, "", detail("MaxSkew %v must be below half the liveness promise's TTL %v", c.MaxSkew, promise))
	}
	if c.RenewMargin >= c.LeaseTTL {
		return errorf("host", ErrInvalid, "", detail("RenewMargin %v must be below LeaseTTL %v", c.RenewMargin, c.LeaseTTL))
	}
	return nil
}

// promiseTTL is how long each heartbeat promises the host alive: a lease
// TTL, or three beats should beats be rarer.
func (c *HostConfig) promiseTTL() time.Duration { return max(c.LeaseTTL, 3*c.HeartbeatEvery) }

// Host runs the worlds assigned to one worker in this process. See the
// package doc for what it does; StartHost starts it, Stop or Drain ends it.
type Host struct {
	cfg   HostConfig
	st    store.Store
	ex    actor.Executor
	scope *actor.Scope
	sup   *supervisor.DynamicRef
	ctl   actor.PID    // the controller
	park  actor.Parker // the controller's wake-up
	tr    trace.Tracer
	log   *slog.Logger

	syncHint atomic.Bool
	scan     scan // the controller's own
	// aliveUntil is the liveness deadline (AliveUntil) on the executor's
	// clock, its monotonic reading kept (a step of the wall clock moves
	// neither it nor the pool's comparisons); nil until a heartbeat
	// succeeds.
	aliveUntil atomic.Pointer[time.Time]
	// noKernel are the worlds assigned here whose universe has no
	// definition in Kernels, learned when a takeover found their universe
	// (the controller's own). The host gave their leases back at once and
	// does not take them again: each pass would otherwise acquire and
	// release them, and every such release hints every host to sync.
	noKernel map[string]uint64 // world -> the last pass that listed it
	// hold takes, renews and times the leases: every lease call to the
	// store goes through it.
	hold *leasing.Holder

	// timers is the schedule of the held worlds' timers, which the timer
	// task fires (hosttimers.go).
	timers *hostTimers

	mu     sync.Mutex
	leases map[string]*lease // held leases, active or passive
	wakes  []string          // passive worlds with a hint, in arrival order
	waking map[string]bool
	// takes are the worlds an Activator found placed here and not held,
	// in arrival order, for the controller to acquire before its next
	// scan page (taking is their set).
	takes    []string
	taking   map[string]bool
	draining bool
	stopped  bool
	failed   error // set once, when the supervisor or the controller died
}

// scan is a reconciliation pass over the worker's worlds in progress. It
// reads one ListWorkerWorlds page per controller turn, so renewals,
// heartbeats and wakes run between pages however many worlds the worker
// has.
type scan struct {
	active  bool
	after   string
	pass    uint64    // counts the passes: the leases a pass lists are marked with it
	again   bool      // a hint came during the pass: another one follows
	started time.Time // of the last pass
}

// lease is what the host keeps per world it holds: for a passive world it
// is all there is (no process, no goroutine).
type lease struct {
	world string
	kern  world.Kernel
	epoch uint64
	// hold is the lease's local deadline and fence: once fenced (by the
	// host, or by its deadline passing) the world does nothing more here.
	hold leasing.Lease
	// head is the last committed state, for State. It only moves forward
	// (advanceHead): a caller that got a reply from this host then reads
	// at least that height here, whatever a slower restore stores after.
	head atomic.Pointer[world.Snapshot]
	// parked is what a process that passivated left: its state and
	// cursor, which are the store's as long as this holding lasts (no one
	// else commits at its epoch, and it committed all it stepped), so its
	// wake starts from them instead of restoring from the store. It is
	// written before the process lets go of the world (lease.ref), under
	// Host.mu, so a successor never starts before it lands; taken (and so
	// cleared) by the process that starts next, and refused if it is below
	// head; a crashed process leaves none, and its successor restores from
	// the store.
	parked atomic.Pointer[parkedWorld]
	// hinted: the world's inbox was hinted since its process last read
	// it, so a due timer handed over is stepped after what is there.
	hinted atomic.Bool
	// timersKnown: the host has recorded every timer this holding's world
	// has armed (hosttimers.go), so a restore need not list them again.
	timersKnown atomic.Bool
	// listed is the last sync pass whose pages listed the world (the
	// controller's own): a lease a whole pass did not list is lost. A mark
	// per lease, instead of a set of the worlds a pass saw, keeps the end
	// of a pass over a million worlds from building and probing one.
	listed uint64

	// Under Host.mu.
	ref *actor.Ref[wmsg] // the running process, nil while passive
	// restarting: a process is on its way and has not registered yet (the
	// controller started it, or the supervisor restarts a crashed one), so
	// neither a hint nor the controller starts a second one: one process
	// per world per holding.
	restarting bool
	stopWatch  func()
	fired      []store.InboxItem // timer firings the host wrote, for the process to take
	due        []*hostTimer      // due timers handed to the process, to step without an inbox item
}

// parkedWorld is a passivated world's state in memory (lease.parked).
type parkedWorld struct {
	snap   world.Snapshot
	cursor uint64
}

// advanceHead records s as the world's committed state unless the head
// already is higher: a restore that read the store before another commit
// of this holding landed must not take State back below a height whose
// reply was delivered.
func (l *lease) advanceHead(s world.Snapshot) {
	for {
		cur := l.head.Load()
		if cur != nil && cur.Height > s.Height {
			return
		}
		if l.head.CompareAndSwap(cur, &s) {
			return
		}
	}
}

// behindHead reports whether height is below the head this holding
// committed.
func (l *lease) behindHead(height uint64) bool {
	cur := l.head.Load()
	return cur != nil && height < cur.Height
}

// alive is the check before every step and every commit: not fenced and
// not past the lease's local deadline (leasing.Lease.Live).
func (h *Host) alive(l *lease) bool { return l.hold.Live() }

// StartHost starts a host in a scope of its own under scope: a dynamic
// supervisor for the world processes, the controller that holds the
// leases, and the task that fires the held worlds' timers. It returns once
// they run; the first sync happens right after.
func StartHost(ctx context.Context, scope *actor.Scope, cfg HostConfig) (*Host, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	sub, err := scope.Sub("host:" + cfg.Worker)
	if err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, st: cfg.Store, ex: scope.Executor(), scope: sub,
		leases: map[string]*lease{}, waking: map[string]bool{}, taking: map[string]bool{}, noKernel: map[string]uint64{},
		tr: otrace.Tracer(cfg.Tracer), log: cfg.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.park = h.ex.NewParker()
	h.hold = leasing.New(leasing.Config{Worker: cfg.Worker, Incarnation: cfg.Incarnation, Store: cfg.Store, Executor: h.ex,
		TTL: cfg.LeaseTTL, RenewMargin: cfg.RenewMargin, RetryAfter: cfg.RetryAfter, Page: cfg.ListPage,
		OnLost: h.lost,
		Observe: func(n int, took time.Duration, err error) {
			h.emit(HostEvent{Kind: EvRenewed, Dur: took, N: n, Err: err})
		}})
	h.timers = newHostTimers(h.ex)
	h.sup, err = supervisor.StartDynamic(ctx, sub, supervisor.DynamicSpec{
		MaxRestarts: 5, Window: time.Second, Escalation: supervisor.PolicyResetCounter,
		Backoff: supervisor.Exponential(10*time.Millisecond, time.Second, 2),
	}, actor.WithName("worlds:"+cfg.Worker))
	if err != nil {
		_, _ = sub.CloseKilled(ctx)
		return nil, err
	}
	h.syncHint.Store(true)
	h.ctl, err = sub.Go("host-controller:"+cfg.Worker, h.control)
	if err != nil {
		_, _ = sub.CloseKilled(ctx)
		return nil, err
	}
	// A supervisor never restarts a Panicked child and exits Panicked
	// itself: after that no world could start here again, so the host
	// must fail as a whole rather than retry StartChild forever. The same
	// holds when the controller dies: nothing renews the leases any more.
	watch := func(pid actor.PID, what string) {
		if _, ok := pid.OnExit(func(o actor.Outcome) { h.died(what, o) }); !ok {
			o, _ := pid.Outcome()
			h.died(what, o)
		}
	}
	timers, err := sub.Go("host-timers:"+cfg.Worker, h.fireTimers)
	if err != nil {
		_, _ = sub.CloseKilled(ctx)
		return nil, err
	}
	watch(h.sup.PID(), "world supervisor")
	watch(h.ctl, "controller")
	watch(timers, "timer task")
	return h, nil
}

// died is told when the supervisor or the controller exits. Unless the
// host is being stopped, it fails the host: every lease is fenced at once
// (no step or commit passes alive after this), and the controller is woken
// to clean up and exit; if the controller itself died, the supervisor is
// shut down instead and the leases are left to their TTL.
func (h *Host) died(what string, o actor.Outcome) {
	h.mu.Lock()
	if h.stopped || h.failed != nil {
		h.mu.Unlock()
		return
	}
	cause := o.AsError()
	if cause == nil {
		cause = detail("exited")
	}
	h.failed = errorf("host", ErrHostFailed, "", detail("%s of %s: %w", what, h.cfg.Worker, cause))
	for _, l := range h.leases {
		l.hold.Fence()
	}
	h.mu.Unlock()
	if what == "controller" {
		h.sup.PID().Shutdown(h.failed)
		h.emit(HostEvent{Kind: EvHostFailed, Err: h.failed})
		return
	}
	h.park.Unpark()
}

// Err returns the host's failure (an *Error of kind ErrHostFailed), or nil
// while it runs or after a Stop, Kill or Drain.
func (h *Host) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed
}

// Wait blocks until the host's controller has exited (after a failure, or
// a Stop or Kill) and returns Err. An outer supervisor waits here to
// restart a failed host.
func (h *Host) Wait(ctx context.Context) error {
	if _, err := h.ctl.Wait(ctx); err != nil {
		return err
	}
	return h.Err()
}

// failOut is the controller's last act on a failed host: it forgets every
// lease, and releases them once the supervisor has exited (its children,
// the world processes, with it), so that successors need not wait for the
// TTL. A write from a process that was killed mid-call is still fenced by
// the store, by epoch.
func (h *Host) failOut(ctx context.Context, failed error) error {
	h.mu.Lock()
	held := h.heldLocked()
	h.mu.Unlock()
	for _, l := range held {
		h.dropLease(l, EvFenced, failed)
	}
	if _, err := h.sup.PID().Wait(ctx); err == nil && len(held) > 0 {
		refs := make([]store.LeaseRef, len(held))
		for i, l := range held {
			refs[i] = store.LeaseRef{World: l.world, Epoch: l.epoch}
		}
		// A failed release only means the successors wait for the TTL.
		_ = h.hold.ReleaseAll(ctx, refs)
	}
	h.emit(HostEvent{Kind: EvHostFailed, Err: failed})
	return failed
}

// Worker is the host's worker id.
func (h *Host) Worker() string { return h.cfg.Worker }

// Incarnation is the incarnation the host holds its leases as.
func (h *Host) Incarnation() string { return h.cfg.Incarnation }

func (h *Host) emit(ev HostEvent) {
	h.logEvent(ev)
	if h.cfg.Observe != nil {
		ev.At = h.ex.Now()
		h.cfg.Observe(ev)
	}
}

// logEvent logs the events an operator follows a host by. Steps, commits
// and scans are never logged: their rate is the workload's, and metrics
// (Observe) count them.
func (h *Host) logEvent(ev HostEvent) {
	var lvl slog.Level
	var msg string
	switch ev.Kind {
	case EvAcquired:
		lvl, msg = slog.LevelInfo, "host: lease acquired"
	case EvReleased:
		lvl, msg = slog.LevelInfo, "host: lease released"
	case EvHostFailed:
		lvl, msg = slog.LevelInfo, "host: failed; every world on it stopped"
	case EvFenced:
		lvl, msg = slog.LevelWarn, "host: world fenced"
	case EvCrash:
		lvl, msg = slog.LevelWarn, "host: world process crashed; its supervisor restores it"
	case EvDiverged:
		lvl, msg = slog.LevelError, "host: replay diverged from the journal"
	case EvRenewed:
		if ev.Err == nil {
			return
		}
		lvl, msg = slog.LevelWarn, "host: lease renewal failed"
	case EvBacklogWake:
		lvl, msg = slog.LevelWarn, "host: woke a world whose input waited without a hint"
	case EvPassivate:
		lvl, msg = slog.LevelDebug, "host: world passivated"
	case EvWake:
		lvl, msg = slog.LevelDebug, "host: world woken"
		if ev.Err != nil {
			lvl, msg = slog.LevelWarn, "host: world process could not start"
		}
	case EvRestored:
		lvl, msg = slog.LevelDebug, "host: world restored"
	case EvAtCapacity:
		lvl, msg = slog.LevelDebug, "host: at capacity; assigned worlds left for the orchestrator to place elsewhere"
	default:
		return
	}
	ctx := context.Background()
	if !h.log.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs, slog.String("worker", h.cfg.Worker))
	if ev.World != "" {
		attrs = append(attrs, slog.String("world", ev.World), slog.Uint64("epoch", ev.Epoch))
	}
	switch {
	case ev.Kind == EvFenced && ev.Err == nil:
		attrs = append(attrs, slog.String("reason", "stopped by the host"))
	case ev.Kind == EvFenced:
		attrs = append(attrs, slog.String("reason", ev.Err.Error()))
	case ev.Err != nil:
		attrs = append(attrs, slog.String("err", ev.Err.Error()))
	}
	if ev.Kind == EvRestored {
		attrs = append(attrs, slog.Uint64("height", ev.Height))
	}
	h.log.LogAttrs(ctx, lvl, msg, attrs...)
}

// Stop stops the host as a process exit would: every world process stops
// and nothing more is committed. Leases are not released (their TTL frees
// them); Drain is the planned way out.
func (h *Host) Stop(ctx context.Context) error {
	return h.end(func() error { _, err := h.scope.Close(ctx); return err })
}

// heldLocked is the leases the host holds, by world id (h.mu held):
// the order in which they are dropped never depends on map iteration.
func (h *Host) heldLocked() []*lease {
	held := make([]*lease, 0, len(h.leases))
	for _, w := range sortedKeys(h.leases) {
		held = append(held, h.leases[w])
	}
	return held
}

// Kill ends the host at once, as a crash: processes are aborted, nothing
// is released. The store handle should be considered dead too.
func (h *Host) Kill(ctx context.Context) {
	_ = h.end(func() error { _, _ = h.scope.CloseKilled(ctx); return nil })
}

// end is Stop's and Kill's shared path: the leases are fenced before the
// processes are closed, so nothing a closing process does is committed,
// and the watches end once no process is left to be woken by them.
func (h *Host) end(closeScope func() error) error {
	h.mu.Lock()
	h.stopped = true
	for _, l := range h.leases {
		l.hold.Fence()
	}
	h.mu.Unlock()
	err := closeScope()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range sortedKeys(h.leases) {
		if l := h.leases[w]; l.stopWatch != nil {
			l.stopWatch()
		}
	}
	clear(h.leases)
	return err
}

// Drain is a planned departure: the worker is marked draining (the
// orchestrator places nothing here and moves its worlds), every world
// stops, and the leases are released at once with ReleaseLeases, so the
// successors do not wait for the TTL. The host keeps running, holding
// nothing, until Stop.
func (h *Host) Drain(ctx context.Context) error {
	// A superseded incarnation's worker id is its successor's: marking it
	// draining would drain the successor.
	if !h.AliveUntil().Equal(lapsed) {
		if _, err := h.st.SetDraining(ctx, h.cfg.Worker, true); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	h.mu.Lock()
	h.draining = true
	held := h.heldLocked()
	h.mu.Unlock()
	for _, l := range held {
		h.dropLease(l, EvReleased, nil)
	}
	// The processes have been told; wait until none of them can still
	// commit before the leases go, so a successor never overlaps them.
	for _, l := range held {
		h.mu.Lock()
		ref := l.ref
		h.mu.Unlock()
		if ref != nil {
			if _, err := ref.PID().Wait(ctx); err != nil {
				return err
			}
		}
	}
	var refs []store.LeaseRef
	for _, l := range held {
		refs = append(refs, store.LeaseRef{World: l.world, Epoch: l.epoch})
	}
	return h.hold.ReleaseAll(ctx, refs)
}

// SetDraining marks the worker draining or not, without releasing
// anything: the orchestrator then moves its worlds, and each lease is
// released as its world's assignment moves away.
func (h *Host) SetDraining(ctx context.Context, draining bool) error {
	if _, err := h.st.SetDraining(ctx, h.cfg.Worker, draining); err != nil {
		return err
	}
	h.mu.Lock()
	h.draining = draining
	h.mu.Unlock()
	h.syncHint.Store(true)
	h.park.Unpark()
	return nil
}

// Worlds lists the worlds whose leases the host holds, sorted, and how
// many of them have a running process.
func (h *Host) Worlds() (held []string, active int) {
	h.mu.Lock()
	held = make([]string, 0, len(h.leases))
	for w, l := range h.leases {
		held = append(held, w)
		if l.ref != nil {
			active++
		}
	}
	h.mu.Unlock()
	slices.Sort(held) // outside the lock, which every hint takes
	return held, active
}

// Lease returns the epoch the host holds world at (ok=false if none).
func (h *Host) Lease(world string) (epoch uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.leases[world]
	if !ok {
		return 0, false
	}
	return l.epoch, true
}

// State returns the state a world hosted here last committed (ok=false if
// the host does not hold it, has not restored it yet, or its process
// crashed and its successor has not restored it: a commit that failed may
// have landed, so the head is not known until then).
func (h *Host) State(world string) (world.Snapshot, bool) {
	h.mu.Lock()
	l, ok := h.leases[world]
	h.mu.Unlock()
	if !ok {
		return worldSnapshot{}, false
	}
	s := l.head.Load()
	if s == nil || !h.alive(l) {
		return worldSnapshot{}, false
	}
	return *s, true
}

type worldSnapshot = world.Snapshot

// runs reports whether h holds a live process of world.
func (h *Host) runs(world string) bool {
	h.mu.Lock()
	l, ok := h.leases[world]
	running := ok && l.ref != nil
	h.mu.Unlock()
	return running && h.alive(l)
}

// behind reports whether a process of world runs here and has not yet
// recorded height as its head: a commit at height landed in the store and
// is on its way back to it. A world without a process here (passive,
// crashed, not held, fenced) holds nothing back, so a caller never waits
// on a world that cannot move: its State, when it answers, is the
// restore's, which reads the store.
func (h *Host) behind(world string, height uint64) bool {
	h.mu.Lock()
	l, ok := h.leases[world]
	running := ok && l.ref != nil
	h.mu.Unlock()
	if !running || !h.alive(l) {
		return false
	}
	s := l.head.Load()
	return s != nil && s.Height < height
}

// ---- the controller ----

// control is the host's one control loop: heartbeats, lease acquisition
// and revocation (sync), batched renewal, and starting processes for
// passive worlds with a hint. It blocks on one Parker, woken by store
// Watch hints and by a timer on the executor's clock for its next
// deadline; it never polls.
func (h *Host) control(ctx context.Context) error {
	stop, err := h.hold.WatchHints(ctx, hintWaker{h})
	if err != nil {
		return nil // stopped
	}
	defer stop()
	var nextBeat, nextSync, nextRenew time.Time
	for ctx.Err() == nil {
		if err := h.Err(); err != nil {
			return h.failOut(ctx, err)
		}
		now := h.ex.Now()
		if !now.Before(nextBeat) {
			// The beat promises liveness for promiseTTL: once it runs
			// out, the store requeues the claims made for this
			// incarnation (store.ReapOrphans).
			ttl := h.cfg.promiseTTL()
			opts := []store.HeartbeatOption{store.AliveAs(h.cfg.Incarnation, ttl)}
			if h.cfg.Capabilities != nil {
				// Every beat, not only the first: a record another
				// process under this id overwrote is put right.
				opts = append(opts, store.Advertise(h.cfg.Capabilities))
			}
			sent := h.ex.Now()
			if wi, err := h.st.Heartbeat(ctx, h.cfg.Worker, h.cfg.Capacity, opts...); err != nil {
				if errors.Is(err, store.ErrFenced) {
					h.livenessLost(err)
					continue // fails out at the loop's top
				}
				nextBeat = now.Add(h.cfg.RetryAfter)
			} else {
				h.promised(sent, ttl)
				nextBeat = now.Add(h.cfg.HeartbeatEvery)
				// The store's time of the heartbeat less the local time
				// after its answer: never above the true skew, so the
				// timer schedule never wakes before a due time.
				h.timers.setSkew(wi.HeartbeatAt.Sub(h.ex.Now()))
			}
		}
		h.takeAsked(ctx)
		hinted := h.syncHint.Swap(false)
		if h.cfg.NoWorlds {
			// Nothing to scan for: only the beat and renewals (none).
			hinted, nextSync = false, now.Add(h.cfg.SyncEvery)
		}
		sc := &h.scan
		switch {
		case sc.active:
			sc.again = sc.again || hinted
		case !now.Before(nextSync) || hinted && !now.Before(sc.started.Add(h.cfg.HintSyncGap)):
			*sc = scan{active: true, pass: sc.pass + 1, started: now}
		case hinted:
			// Too soon after the last pass: keep the hint for when the
			// gap is over.
			h.syncHint.Store(true)
			if at := sc.started.Add(h.cfg.HintSyncGap); at.Before(nextSync) {
				nextSync = at
			}
		}
		if sc.active {
			switch done, err := h.syncPage(ctx); {
			case err != nil:
				// Abandoned: the next pass starts over.
				sc.active = false
				nextSync = now.Add(h.cfg.RetryAfter)
			case done:
				sc.active = false
				nextSync = now.Add(h.cfg.SyncEvery)
				if sc.again {
					h.syncHint.Store(true)
				}
				h.emit(HostEvent{Kind: EvSynced})
			}
		}
		nextRenew = h.hold.Renew(ctx, false)
		retry := h.startWakes(ctx)

		at := slices.MinFunc([]time.Time{nextBeat, nextSync, nextRenew}, time.Time.Compare)
		if retry || h.scan.active {
			at = now.Add(time.Millisecond)
		}
		if err := actor.ParkFor(ctx, h.ex, h.park, at.Sub(h.ex.Now())); err != nil {
			return nil
		}
	}
	return nil
}

// AliveUntil is the host's liveness deadline on its executor's clock:
// the time before the last heartbeat the store took, plus the promise's
// TTL less a twentieth (for clocks that run at slightly different rates)
// and less MaxSkew (for a store server that judges the promise with a
// clock ahead of the one that took it: a failover's new primary). The
// store's own deadline for the promise counts from its clock's reading
// during that call, which came after, so while server clocks agree within
// MaxSkew the store judges this incarnation dead no sooner than
// AliveUntil. Zero: no heartbeat taken yet. After the
// store refused a heartbeat (livenessLost) it is in the past for good.
func (h *Host) AliveUntil() time.Time {
	if at := h.aliveUntil.Load(); at != nil {
		return *at
	}
	return time.Time{}
}

// lapsed is the deadline of a promise the store refused: long past.
var lapsed = time.Unix(0, 1)

// promised moves the liveness deadline forward after a heartbeat sent at
// sent (executor clock) that promised ttl; it never moves back.
func (h *Host) promised(sent time.Time, ttl time.Duration) {
	at := sent.Add(ttl - ttl/20 - h.cfg.MaxSkew)
	for {
		cur := h.aliveUntil.Load()
		if cur != nil && (cur.Equal(lapsed) || !cur.Before(at)) || h.aliveUntil.CompareAndSwap(cur, &at) {
			return
		}
	}
}

// livenessLost handles a heartbeat the store refused (ErrFenced): another
// process under this worker id superseded this incarnation, or it was
// retired. Its promise is void and its claims were requeued, so it must not
// act any more: the deadline goes to the past for good, OnLivenessLost is
// told, and the host fails (every lease fenced), unless it is stopping,
// when a retirement is expected.
func (h *Host) livenessLost(err error) {
	h.aliveUntil.Store(&lapsed)
	h.mu.Lock()
	if h.stopped || h.failed != nil {
		h.mu.Unlock()
		return
	}
	h.failed = errorf("host", ErrHostFailed, "", detail("incarnation %s of %s superseded or retired: %w", h.cfg.Incarnation, h.cfg.Worker, err))
	for _, l := range h.leases {
		l.hold.Fence()
	}
	h.mu.Unlock()
	h.log.Error("host: the store refused this incarnation's heartbeat (another process took this worker id, or it was retired); stopping all work",
		"worker", h.cfg.Worker, "incarnation", h.cfg.Incarnation, "err", err)
	h.emit(HostEvent{Kind: EvIncarnationFenced, Err: err})
	if h.cfg.OnLivenessLost != nil {
		h.cfg.OnLivenessLost()
	}
}

// holds reports whether the host holds world's lease (active or passive).
func (h *Host) holds(world string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.leases[world]
	return ok
}

// isDraining reports whether the host was told to drain.
func (h *Host) isDraining() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.draining
}

// take asks the controller to acquire world, which an Activator found
// placed here, now rather than at its next sync. A draining, stopped or
// failed host takes nothing.
func (h *Host) take(world string) {
	h.mu.Lock()
	if h.draining || h.stopped || h.failed != nil || h.taking[world] || h.leases[world] != nil {
		h.mu.Unlock()
		return
	}
	h.taking[world] = true
	h.takes = append(h.takes, world)
	h.mu.Unlock()
	h.park.Unpark()
}

// takeAsked acquires the worlds take asked for that are still not held,
// on the controller (which owns acquisition), with the sync pass's own
// acquisition: the store refuses a world assigned to another worker or
// held by another holder, and a drain that began meanwhile gives the
// leases back. A lease taken while a pass is in progress counts as listed
// by it: the pass's pages before the world's were read before the world
// was placed here. A failed call is not retried: the next input, or the
// next sync, asks again.
func (h *Host) takeAsked(ctx context.Context) {
	h.mu.Lock()
	asked := h.takes
	h.takes = nil
	clear(h.taking)
	var ids []string
	for _, w := range asked {
		if _, held := h.leases[w]; !held && !h.draining {
			ids = append(ids, w)
		}
	}
	h.mu.Unlock()
	var take []string
	for _, w := range ids {
		if _, unrunnable := h.noKernel[w]; !unrunnable {
			take = append(take, w)
		}
	}
	_ = h.acquireAll(ctx, take)
}

// watchRetry registers a controller's Watch, retrying a refused
// registration every retry until ctx ends (seam.Watch).
func watchRetry(ctx context.Context, st store.Store, ex actor.Executor, retry time.Duration, w store.Waker, topics ...string) (func(), error) {
	return seam.Watch(ctx, st, ex, func(int) time.Duration { return retry }, nil, w, topics...)
}

// hintWaker turns an assignment or lease hint into a sync.
type hintWaker struct{ h *Host }

func (w hintWaker) Unpark() {
	w.h.syncHint.Store(true)
	w.h.park.Unpark()
}

// worldWaker is a world's inbox hint.
type worldWaker struct {
	h *Host
	l *lease
}

func (w worldWaker) Unpark() { w.h.hint(w.l) }

// hint wakes a world: its process if it runs, else the controller, which
// starts one.
func (h *Host) hint(l *lease) {
	if l.hold.Fenced() {
		return
	}
	l.hinted.Store(true)
	h.mu.Lock()
	ref, restarting := l.ref, l.restarting
	if ref == nil && !restarting {
		h.queueWakeLocked(l.world)
	}
	h.mu.Unlock()
	if ref == nil {
		// A restarting world reads its inbox when its fresh instance
		// starts: nothing to do.
		if !restarting {
			h.park.Unpark()
		}
		return
	}
	if err := ref.TrySend(wmsg{}); err != nil && !errors.Is(err, actor.ErrMailboxFull) {
		// The process is gone (it exits on passivation or a crash): the
		// controller decides what runs next.
		h.mu.Lock()
		h.queueWakeLocked(l.world)
		h.mu.Unlock()
		h.park.Unpark()
	}
}

func (h *Host) queueWakeLocked(w string) {
	if !h.waking[w] {
		h.waking[w] = true
		h.wakes = append(h.wakes, w)
	}
}

// startWakes starts a process for every passive world with a hint, and
// nudges running ones. It reports whether some must be retried.
func (h *Host) startWakes(ctx context.Context) (retry bool) {
	h.mu.Lock()
	wakes := h.wakes
	h.wakes = nil
	clear(h.waking)
	h.mu.Unlock()
	for _, w := range wakes {
		h.mu.Lock()
		l, ok := h.leases[w]
		var ref *actor.Ref[wmsg]
		restarting := false
		if ok {
			ref, restarting = l.ref, l.restarting
		}
		h.mu.Unlock()
		if !ok || restarting || !h.alive(l) {
			continue
		}
		if ref != nil {
			if err := ref.TrySend(wmsg{}); err == nil || errors.Is(err, actor.ErrMailboxFull) {
				continue
			}
		}
		// The process is gone (or never ran): claim the start under the
		// lock, so that no other start, and no hint, races this one; a
		// process that registered meanwhile is only nudged.
		h.mu.Lock()
		if l.ref != nil || l.restarting {
			ref = l.ref
			h.mu.Unlock()
			if ref != nil {
				if err := ref.TrySend(wmsg{}); err != nil && !errors.Is(err, actor.ErrMailboxFull) {
					h.mu.Lock()
					h.queueWakeLocked(w)
					h.mu.Unlock()
					retry = true
				}
			}
			continue
		}
		l.restarting = true
		h.mu.Unlock()
		if err := h.startProc(ctx, l); err != nil {
			h.mu.Lock()
			l.restarting = false
			h.queueWakeLocked(w)
			h.mu.Unlock()
			retry = true
		}
	}
	return retry
}

func (h *Host) startProc(ctx context.Context, l *lease) error {
	spec := supervisor.ChildSpec{
		ID: l.world,
		Start: func(ctx context.Context, scope *actor.Scope) (actor.PID, error) {
			ref, err := actor.Spawn[wmsg](ctx, scope, &worldProc{h: h, l: l}, actor.WithName("world:"+l.world), actor.WithMailbox(4))
			if err != nil {
				return actor.PID{}, err
			}
			return ref.PID(), nil
		},
		Restart:     supervisor.Transient,
		Containment: supervisor.Contain,
	}
	_, err := h.sup.StartChild(ctx, spec)
	h.emit(HostEvent{Kind: EvWake, World: l.world, Epoch: l.epoch, Err: err})
	return err
}

// syncPage reconciles the leases held with one page of the worker's
// worlds in the store: acquire what is assigned here and not held, drop
// what was lost, revoked or moved elsewhere. On the pass's last page it
// also drops the leases the pass never saw (expired or revoked), and
// reports done.
func (h *Host) syncPage(ctx context.Context) (done bool, err error) {
	sc := &h.scan
	h.mu.Lock()
	draining := h.draining
	h.mu.Unlock()
	rows, err := h.st.ListWorkerWorlds(ctx, h.cfg.Worker, sc.after, h.cfg.ListPage)
	if err != nil {
		return false, err
	}
	var take []string
	var idle []*lease // held, input waiting
	for _, row := range rows {
		_, unrunnable := h.noKernel[row.World]
		if unrunnable {
			h.noKernel[row.World] = sc.pass
		}
		mine := row.Assignment != nil && row.Assignment.DesiredWorker == h.cfg.Worker
		h.mu.Lock()
		l := h.leases[row.World]
		h.mu.Unlock()
		if l != nil {
			switch {
			case l.hold.Fenced():
				// Fenced locally (expired before a renewal landed):
				// never revived; acquired again at a new epoch.
				h.dropLease(l, EvFenced, errorf("sync", ErrFenced, l.world, detail("expired locally")))
				l = nil
			case row.Lease == nil || row.Lease.Holder != h.cfg.Worker || row.Lease.Epoch != l.epoch:
				h.dropLease(l, EvFenced, errorf("sync", ErrFenced, l.world, detail("lease lost")))
				l = nil
			case !mine || draining:
				// Revoked: unassigned or moved. Stop, then release so
				// the successor need not wait for the TTL.
				h.dropLease(l, EvReleased, nil)
				h.releaseAfterStop(ctx, l)
				continue
			default:
				l.listed = sc.pass
				if row.Backlog {
					idle = append(idle, l)
				}
			}
		}
		if l == nil && mine && !draining && !unrunnable {
			take = append(take, row.World)
		}
	}
	// A held world with input waiting may have missed its hint (a
	// notification lost with the listener's connection, a wake that raced
	// a passivation, ingress through another process on one SQLite file):
	// it is hinted now, so that a lost hint costs one rescan, never a
	// world that waits for ever or until it passivates. A world with no
	// process wakes and is reported; a live process is only nudged to
	// read its inbox (a busy world has a backlog at most rescans, so that
	// is no news).
	for _, l := range idle {
		h.mu.Lock()
		live, pending := l.ref != nil, l.restarting || h.waking[l.world]
		h.mu.Unlock()
		switch {
		case pending:
		case live:
			h.hint(l)
		default:
			h.emit(HostEvent{Kind: EvBacklogWake, World: l.world, Epoch: l.epoch})
			h.hint(l)
		}
	}
	if err := h.acquireAll(ctx, take); err != nil {
		return false, err
	}
	if len(rows) == h.cfg.ListPage {
		sc.after = rows[len(rows)-1].World
		return false, nil
	}
	// Every lease held now was held when the pass began or acquired by
	// it; one its pages did not list is expired or revoked.
	h.mu.Lock()
	var lost []*lease
	for _, l := range h.leases {
		if l.listed != sc.pass {
			lost = append(lost, l)
		}
	}
	h.mu.Unlock()
	slices.SortFunc(lost, byWorld)
	for _, l := range lost {
		h.dropLease(l, EvFenced, errorf("sync", ErrFenced, l.world, detail("lease expired or revoked")))
	}
	for w, pass := range h.noKernel {
		if pass != sc.pass {
			delete(h.noKernel, w) // no longer assigned here
		}
	}
	return true, nil
}

// acquireAll takes over worlds (the ones a page found assigned here and
// not held) with one AcquireLeases call per store.MaxBatch of them (a page
// is never more), so a takeover costs O(1) store round trips per page
// however many worlds it holds. Each world is watched before the call:
// the call reads its inbox, and an item enqueued after that read raises a
// hint this registration receives (Watch is local to the store handle on
// every backend, one registration in memory, not a round trip); such a
// hint queues a wake, which the controller handles after this page, once
// the lease is registered. Only a world whose inbox holds a backlog starts
// a process now; the others stay passive until their next input. A
// refused world (another holder until its lease expires, an assignment
// that moved, a paused or archived world, one that no longer exists) is
// only "not now". It returns the call's error, after which the pass is
// abandoned.
func (h *Host) acquireAll(ctx context.Context, worlds []string) error {
	worlds = h.admit(worlds)
	for len(worlds) > 0 {
		n := min(len(worlds), store.MaxBatch)
		if err := h.acquirePage(ctx, worlds[:n]); err != nil {
			return err
		}
		worlds = worlds[n:]
	}
	return nil
}

// admit is the part of worlds the host has room for (Capacity less the
// worlds it holds; none with NoWorlds), in their order. The rest are
// refused (EvAtCapacity): the orchestrator, which counts what it gives each
// worker, places them elsewhere; an assignment beyond the capacity comes
// from one that read the inventory before this host's record, or from an
// activation, which does not count.
func (h *Host) admit(worlds []string) []string {
	if len(worlds) == 0 {
		return worlds
	}
	room := 0
	if !h.cfg.NoWorlds {
		h.mu.Lock()
		room = max(h.cfg.Capacity-len(h.leases), 0)
		h.mu.Unlock()
	}
	if len(worlds) <= room {
		return worlds
	}
	h.emit(HostEvent{Kind: EvAtCapacity, World: worlds[room], N: len(worlds) - room})
	return worlds[:room]
}

func (h *Host) acquirePage(ctx context.Context, ids []string) error {
	ls := make([]*lease, 0, len(ids))
	unwatch := func(ls []*lease) {
		for _, l := range ls {
			l.stopWatch()
		}
	}
	for _, id := range ids {
		l := &lease{world: id}
		stop, err := h.st.Watch(ctx, worldWaker{h, l}, store.TopicInbox(id))
		if err != nil {
			unwatch(ls)
			return err
		}
		l.stopWatch = stop
		ls = append(ls, l)
	}
	res, grants, err := h.hold.AcquireMany(ctx, ids)
	if err != nil {
		unwatch(ls)
		return err
	}
	var got []*lease
	var granted []leasing.Grant
	var backlog []bool
	var nextTimer []time.Time
	var giveBack []store.LeaseRef
	for i, r := range res {
		l := ls[i]
		if r.Err != nil {
			l.stopWatch()
			continue
		}
		kern, err := h.cfg.Kernels.of("acquire", store.World{ID: r.World, Universe: r.Universe})
		if err != nil {
			// Taken before its universe was known: given back at once,
			// and never taken again by this host.
			l.stopWatch()
			h.noKernel[r.World] = h.scan.pass
			giveBack = append(giveBack, store.LeaseRef{World: r.World, Epoch: r.Lease.Epoch})
			continue
		}
		if v, verr := WorldVersion(ctx, h.st, r.World); verr == nil && v != 0 && !world.Carries(kern, v) {
			// The world is on a version of its definition this binary
			// does not carry (placed here before an upgrade, or by an
			// orchestrator that could not tell): running it would diverge
			// at once. Given back and never taken again by this process.
			l.stopWatch()
			h.noKernel[r.World] = h.scan.pass
			giveBack = append(giveBack, store.LeaseRef{World: r.World, Epoch: r.Lease.Epoch})
			h.emit(HostEvent{Kind: EvNoVersion, World: r.World, Epoch: r.Lease.Epoch, Err: &Error{Op: "acquire", Kind: ErrIneligible, World: r.World,
				Err: detail("the world is on version %d of %q; this host carries %v", v, r.Universe, world.KernelVersions(kern))}})
			continue
		}
		l.kern, l.epoch, l.listed = kern, r.Lease.Epoch, h.scan.pass
		got = append(got, l)
		granted = append(granted, grants[i])
		backlog = append(backlog, r.Backlog)
		nextTimer = append(nextTimer, r.NextTimer)
	}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		// Stopped while this acquisition was in flight: its leases are
		// nobody's, so they go back now rather than at the TTL (a
		// graceful stop leaves no lease held).
		unwatch(got)
		for _, l := range got {
			giveBack = append(giveBack, store.LeaseRef{World: l.world, Epoch: l.epoch})
		}
		h.giveBack(ctx, giveBack)
		return ErrStopped
	}
	if h.draining {
		h.mu.Unlock()
		// A drain began while this acquisition was in flight (its pass
		// read the flag before the drain set it). The drain released
		// only the leases it saw, so these go back at once too:
		// otherwise they would stay held, and their successors wait,
		// until the TTL (which is all a failed release costs).
		unwatch(got)
		for _, l := range got {
			giveBack = append(giveBack, store.LeaseRef{World: l.world, Epoch: l.epoch})
		}
		h.giveBack(ctx, giveBack)
		return nil
	}
	for i, l := range got {
		h.leases[l.world] = l
		// Live from here; its local deadline counts from before the
		// AcquireLeases call.
		h.hold.Hold(&l.hold, granted[i])
	}
	h.mu.Unlock()
	h.giveBack(ctx, giveBack)
	for i, l := range got {
		h.emit(HostEvent{Kind: EvAcquired, World: l.world, Epoch: l.epoch})
		switch {
		case backlog[i]:
			h.hint(l)
		case !nextTimer[i].IsZero():
			// Passive with a timer armed: it wakes when the timer is
			// due, restores, learns its timers and fires them.
			h.timers.add(l, wakeKey(l.world), nextTimer[i], nil)
		}
	}
	return nil
}

// giveBack releases leases the host took but will not run. A failed
// release only means a successor waits for the TTL.
func (h *Host) giveBack(ctx context.Context, refs []store.LeaseRef) {
	if len(refs) > 0 {
		// Not cut short by the end of the caller's context: a stop or a
		// drain is when these releases matter most. Bounded on the
		// executor's clock all the same.
		rctx, cancel := actor.WithTimeout(context.WithoutCancel(ctx), h.ex, giveBackTimeout)
		defer cancel()
		_ = h.hold.ReleaseAll(rctx, refs)
	}
}

// giveBackTimeout bounds the release of leases a host took but cannot
// keep.
const giveBackTimeout = 5 * time.Second

// dropLease forgets l and stops its world at once: the fenced flag makes
// its process do nothing more (it is checked before every step and
// commit), and the process is told to exit.
func (h *Host) dropLease(l *lease, kind string, cause error) {
	l.hold.Fence()
	h.hold.Forget(&l.hold)
	h.timers.drop(l)
	h.mu.Lock()
	if h.leases[l.world] == l {
		delete(h.leases, l.world)
	}
	ref, stop := l.ref, l.stopWatch
	l.stopWatch = nil
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
	if ref != nil {
		_ = ref.TrySend(wmsg{}) // it wakes, sees the flag and exits
	}
	h.emit(HostEvent{Kind: kind, World: l.world, Epoch: l.epoch, Err: cause})
}

// releaseAfterStop releases a revoked lease once its process can no longer
// commit.
func (h *Host) releaseAfterStop(ctx context.Context, l *lease) {
	h.mu.Lock()
	ref := l.ref
	h.mu.Unlock()
	if ref != nil {
		if _, err := ref.PID().Wait(ctx); err != nil {
			return
		}
	}
	// A failed release only means the successor waits for the TTL.
	_ = h.hold.Release(ctx, l.world, l.epoch)
}

// lost is the holder's report of a lease its renewal found lost: fenced
// meanwhile (cause nil), refused by the store, or past its local deadline
// while the renewal call failed. The world stops, and sync acquires it
// again at a new epoch if it is still assigned here.
func (h *Host) lost(hl *leasing.Lease, cause error) {
	h.mu.Lock()
	l := h.leases[hl.World]
	h.mu.Unlock()
	if l == nil || &l.hold != hl {
		return // dropped already
	}
	if cause == nil {
		cause = detail("fenced locally")
	}
	h.dropLease(l, EvFenced, errorf("renew", ErrFenced, l.world, cause))
	h.syncHint.Store(true)
}

func byWorld(a, b *lease) int { return strings.Compare(a.world, b.world) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
