// Package node runs one Orrery process: everything a machine contributes to
// a cluster, started and stopped as one. A Node holds
//
//   - an orchestrator, which acts only while it holds the orchestrator lease
//     (so any number of nodes may run one; exactly one places worlds);
//   - a host, which runs the worlds placed on this worker;
//   - an effect adapter pool with the built-in http.request and fabric.send
//     adapters plus the application's own;
//   - a durable timer worker, the fallback of the host, which fires its own
//     worlds' timers (see Config.TimerLag);
//   - the reapers of expired claims and of old dedupe records;
//   - when the application registers workflows, a workflow worker that runs
//     their durable runs, a client of them, and the Runs and Timeline read
//     models of their streams, kept current by a projector runner;
//   - a client (Send, Call, State) and the ops API, sharing the host's
//     in-process reply hand-off, whose inputs (and the fabric.send
//     adapter's messages) activate their worlds
//     (plane.Activator): a world not placed yet is placed and, when placed
//     here, taken by the host at once, so its first input is answered
//     without waiting for a reconcile round.
//
// Config.Roles makes a node of one worker class: it starts only the parts of
// its roles (host, effects, timers, api, orchestrator; by default all of
// them), advertises them with what the binary carries, and the
// orchestrator places worlds only on nodes that host and carry their type,
// within their Capacity. A node that does not host still heartbeats.
//
// `orrery serve` is a Node plus the HTTP API; the demo and the multi-process
// tests start Nodes too. Several Nodes on one PostgreSQL form a cluster: the
// store's leases decide who runs what, so nodes never talk to each other.
//
// Stop is the planned way out (the worker is marked draining, steps in flight
// finish, effects in flight finish and their receipts are delivered, so a
// call that completed is never made again elsewhere, and every lease and
// every effect claim it cannot finish in time is released at once, so
// successors do not wait for a TTL; last, the node's incarnation is retired
// in the store, which requeues any claim still held for it); Kill is a
// crash, for tests and demos of recovery: the host's heartbeats promise
// liveness for LeaseTTL, so a killed node's effect and timer claims are
// requeued by any node's orphan reaper once that promise runs out, not at
// ClaimTTL.
//
// A node whose heartbeat the store refuses because its incarnation was
// superseded (another process started under the same Worker) or retired
// stops acting of its own accord: its effects are cut short without
// receipts, its host, orchestrator, timer worker, reapers and workflow
// runs stop, and Done is closed with Err an ErrSuperseded. It never comes
// back as a new incarnation on its own: its successor would be superseded
// in turn, and the two would take the worker id from each other for ever.
// Its process should exit (`orrery serve` does, non-zero).
//
// What it never does: keep package-level state, read the machine's clock or
// start goroutines outside the actor.Executor of its actor.System.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/plane/timer"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
	"go.opentelemetry.io/otel/trace"
)

// DefaultTimerLag is the timer worker's lag on a node without workflows.
// It is above what a live host takes to fire a timer, retries of a failing
// store included (under a second), so the worker does not duplicate the
// hosts' work, and small beside the lease TTL that a dead host's worlds
// wait for before they run again, so it adds nothing to their recovery.
const DefaultTimerLag = 2 * time.Second

// ErrInvalid: a Config that cannot run.
var ErrInvalid = errors.New("node: invalid configuration")

// ErrRoles: Config.Roles, EffectKinds or Capacity cannot run (an unknown
// role, none, a kind the binary lacks, kinds without the effects role). It
// wraps ErrInvalid.
var ErrRoles = fmt.Errorf("%w: roles", ErrInvalid)

// ErrStopped: the node was stopped or killed.
var ErrStopped = errors.New("node: stopped")

// ErrSuperseded: the store refused the node's heartbeat because its
// incarnation was superseded by another process under the same worker id,
// or retired; the node stopped acting (Done, Err).
var ErrSuperseded = errors.New("node: incarnation superseded or retired")

// Config configures a Node. Worker, Store and Kernels are required; zero
// durations take the plane's defaults.
type Config struct {
	Worker  string        // the worker id: lease holder, inventory name, claimant prefix
	Store   store.Store   // the persistence plane (the node does not close it)
	Kernels plane.Kernels // the worlds this process can run, by universe
	// Incarnation names this node's lifetime under Worker in every lease
	// it takes (its host's, its orchestrator's, its workflow worker's).
	// Empty: Start draws a fresh one (store.NewIncarnation), so a node
	// started again under the same Worker (a restart that keeps its name
	// while the old process may be frozen or partitioned, not dead) takes
	// the old one's leases over at new epochs, and the old one is fenced.
	// Set it only to make a run reproducible (the lab).
	Incarnation string

	// Adapters are the application's effect adapters, served beside the
	// built-in http.request and fabric.send (a registration for one of
	// those kinds replaces the built-in).
	Adapters []adapter.Registration
	HTTP     adapter.HTTPConfig // the built-in http.request adapter
	// Retry replaces, by kind, the retry policy of a built-in or
	// registered adapter (adapter.Config.Policies).
	Retry map[string]adapter.RetryPolicy
	// Projectors are the binary's own read models of its workflow runs:
	// fed every event of every run of cfg.Workflows, after the node's own
	// runs view, by the same runner (so with the same delivery and gap
	// handling). They need Workflows.
	Projectors []projector.Projector

	LeaseTTL time.Duration // world and orchestrator leases (default 10s)
	ClaimTTL time.Duration // effect and timer claims (default 30s)
	// MaxSkew is the largest difference between the clocks of the store's
	// servers that the liveness promise allows for (plane.HostConfig's
	// MaxSkew: default 1s or a tenth of LeaseTTL, whichever is smaller;
	// negative: none; at least half LeaseTTL is invalid). No effect
	// executes here past the promise less MaxSkew, so after a failover to
	// a server whose clock is ahead by less than that, no other node runs
	// it while this one still does.
	MaxSkew time.Duration
	// TimerLag is the timer worker's Lag (timer.Config.Lag): how late a
	// timer must be before the worker fires it itself. The node's host
	// fires the timers of the worlds it holds at their due times, so the
	// worker only fires those of worlds no live host holds (a host that
	// died: at most TimerLag after the due time, and the world runs once
	// its lease TTL has passed and another host took it). Zero takes
	// DefaultTimerLag, or no lag at all when the node runs workflows,
	// whose runs' sleeps only the timer worker fires; negative is no lag.
	TimerLag  time.Duration
	IdleAfter time.Duration // passivation (plane default 30s; negative: never)
	// NoOrchestrator leaves placement to other nodes (a node that only
	// hosts). By default every node runs an orchestrator; one acts. It is
	// Roles without plane.RoleOrchestrator.
	NoOrchestrator bool
	// Roles are the parts this process runs, its worker class (plane.Roles'
	// names; nil: every one):
	//
	//   - host: the host, which runs the worlds placed here, and the
	//     workflow worker, which runs the workflow runs;
	//   - effects: the effect adapter pool, and the reapers;
	//   - timers: the durable timer worker, and the reapers;
	//   - api: nothing here (the process serves its HTTP API, which
	//     `orrery serve` starts); the client, the ops API and the runs
	//     view run on every node, for its own callers;
	//   - orchestrator: an orchestrator (one of those of the cluster acts).
	//
	// A node without host still heartbeats (its inventory record, and the
	// liveness promise its effect and timer claims ride on) and is given
	// no world to run. Every node advertises its roles, the world types
	// and workflow versions of the binary, and the effect kinds its pool
	// executes (plane.Capabilities); placement reads them. An unknown
	// role, or none, is ErrRoles.
	Roles []string
	// EffectKinds, when set, are the only effect kinds the pool executes
	// (with RoleEffects; of those the built-in and registered adapters
	// serve): other kinds are left to the pools of other processes. A kind
	// no adapter serves, or EffectKinds without the effects role, is
	// ErrRoles. Nil: every kind the binary serves.
	EffectKinds []string
	// Capacity is the most worlds the host holds (plane.HostConfig's
	// Capacity; 0: its default, no bound to speak of; negative: ErrRoles).
	Capacity int
	// ObserveSchedule, when set, is told of every schedule tick decided
	// (schedule.Config.Observe).
	ObserveSchedule func(id, what string, t schedule.Tick)
	// EffectConcurrency bounds effects executing at once (default 16).
	EffectConcurrency int
	// Limits bound this node's ingress (plane.Limits: a world's inbox,
	// each effect kind's pending queue); past one, its Client, Ops and
	// Runs refuse new input with ErrOverloaded. The zero value is
	// unbounded.
	Limits plane.Limits

	// System runs the node's processes (nil: a new actor.System on the
	// production executor, closed by Stop and Kill). The lab passes its own.
	System *actor.System
	Logger *slog.Logger // nil: discarded

	// Observe receives the host's events (metrics, tests); it must not block.
	Observe func(plane.HostEvent)
	// ObserveEffect receives the adapter pool's completions; it must not
	// block.
	ObserveEffect func(adapter.EffectEvent)
	// Tracer receives the node's spans (nil: the global provider, a no-op
	// unless the binary installed an SDK). Spans of one flow (ingress,
	// cycle, effect, receipt) are linked across the store within the node.
	Tracer trace.TracerProvider
	// Host, when set, adjusts the host's configuration last.
	Host func(*plane.HostConfig)

	// Workflows are the durable workflows this process runs (nil: none).
	// The node then runs a workflow worker (lease holder Worker+"/runs",
	// with LeaseTTL), serves a workflow client, and keeps the Runs and
	// Timeline projections of the runs of these workflows.
	Workflows *workflow.Workflows
	// WorkflowWorker, when set, adjusts the workflow worker's configuration
	// last (tests shorten its scans).
	WorkflowWorker func(*workflow.WorkerConfig)
}

// RunsView is the node's read side of workflow runs: the in-memory Runs and
// Timeline projections of every run of the node's workflows, which its
// projector runner follows. CatchUp makes them current as of the call.
type RunsView struct {
	Runs     *projector.Runs
	Timeline *projector.Timeline
	runner   *projector.Runner
}

// CatchUp feeds the projections every event appended so far, so a reader
// that calls it first sees at least what was recorded before the call.
func (v *RunsView) CatchUp(ctx context.Context) error { return v.runner.CatchUp(ctx) }

// Node is one running Orrery process. See the package doc.
type Node struct {
	cfg    Config
	roles  map[string]bool
	sys    *actor.System
	ownSys bool
	host   *plane.Host
	orch   *plane.Orchestrator
	pool   *adapter.Pool
	// lapse is the pool once it exists: the host's OnLivenessLost, which
	// may come before, reads it.
	lapse   atomic.Pointer[adapter.Pool]
	client  *plane.Client
	ops     *plane.Ops
	replies *plane.Replies
	links   *plane.TraceLinks

	wfWorker *workflow.Worker // nil without workflows
	wfClient *workflow.Client
	adm      *plane.Admission
	runsView *RunsView

	cancel context.CancelFunc // the workers' context
	wg     sync.WaitGroup     // the pool, the timer worker and the reapers

	// lost: the host's heartbeat was refused (OnLivenessLost), which may
	// come while Start still runs; started: Start has finished, so
	// fencedOut may stop the parts it made. Whichever of the two comes
	// last starts fencedOut.
	lost, started atomic.Bool

	mu      sync.Mutex
	stopped bool
	// superseded is why the node stopped acting of its own accord (an
	// ErrSuperseded); done is closed once it is set and the parts stopped.
	superseded error
	done       chan struct{}
}

// Start starts every part of the node and returns once they run.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Worker == "" || cfg.Store == nil || len(cfg.Kernels) == 0 && cfg.Workflows == nil {
		return nil, fmt.Errorf("%w: Worker, Store and Kernels (or Workflows) are required", ErrInvalid)
	}
	if cfg.Incarnation == "" {
		cfg.Incarnation = store.NewIncarnation()
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.ClaimTTL == 0 {
		cfg.ClaimTTL = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	roles, kinds, err := checkRoles(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, roles: roles, sys: cfg.System, replies: plane.NewReplies(), links: plane.NewTraceLinks(0), done: make(chan struct{})}
	if n.sys == nil {
		n.sys, n.ownSys = actor.NewSystem(), true
	}
	ex := n.sys.Executor()

	hc := plane.HostConfig{
		Worker: cfg.Worker, Incarnation: cfg.Incarnation, Store: cfg.Store, Kernels: cfg.Kernels, Replies: n.replies,
		Capacity: cfg.Capacity, NoWorlds: !roles[plane.RoleHost], Capabilities: n.capabilities(kinds),
		LeaseTTL: cfg.LeaseTTL, IdleAfter: cfg.IdleAfter, MaxSkew: cfg.MaxSkew, Observe: cfg.Observe,
		Tracer: cfg.Tracer, Links: n.links, Logger: cfg.Logger.With("part", "host"),
		// A refused heartbeat voids the promise the effect claims ride
		// on: their executions stop at once (the store requeued them).
		// The rest of the node stops on a goroutine of its own: this is
		// the host's controller, which fencedOut waits for.
		OnLivenessLost: func() {
			if p := n.lapse.Load(); p != nil {
				p.Lapse()
			}
			n.lost.Store(true)
			if n.started.Load() {
				ex.Go(n.fencedOutUnlessStopped)
			}
		},
	}
	if cfg.Host != nil {
		cfg.Host(&hc)
	}
	if n.host, err = plane.StartHost(ctx, n.sys.Root(), hc); err != nil {
		return nil, n.abort(ctx, err)
	}
	if roles[plane.RoleOrchestrator] {
		universes := make([]string, 0, len(cfg.Kernels))
		for u := range cfg.Kernels {
			universes = append(universes, u)
		}
		sort.Strings(universes)
		n.orch, err = plane.StartOrchestrator(ctx, n.sys.Root(), plane.OrchestratorConfig{
			ID: cfg.Worker, Incarnation: cfg.Incarnation, Store: cfg.Store, Universes: universes, LeaseTTL: cfg.LeaseTTL,
			Logger: cfg.Logger.With("part", "orchestrator"),
		})
		if err != nil {
			return nil, n.abort(ctx, err)
		}
	}
	// Every input this node takes activates its world: an unplaced world
	// is placed (under the acting orchestrator's fence) and, when placed
	// here, taken by this host at once.
	var actHost *plane.Host
	if roles[plane.RoleHost] {
		actHost = n.host
	}
	act, err := plane.NewActivator(plane.ActivatorConfig{
		Store: cfg.Store, Kernels: cfg.Kernels, Executor: ex, Host: actHost, Orchestrator: n.orch, LiveFor: cfg.LeaseTTL,
	})
	if err != nil {
		return nil, n.abort(ctx, err)
	}
	if n.adm, err = plane.NewAdmission(cfg.Store, ex, cfg.Limits); err != nil {
		return nil, n.abort(ctx, err)
	}
	if n.ops, err = plane.NewOps(cfg.Store, cfg.Kernels, plane.OpsTracing(cfg.Tracer, n.links, ex), plane.OpsActivation(act), plane.OpsAdmission(n.adm)); err != nil {
		return nil, n.abort(ctx, err)
	}
	n.client, err = plane.NewClient(plane.ClientConfig{
		Store: cfg.Store, Kernels: cfg.Kernels, Executor: ex, Replies: n.replies, Hosts: []*plane.Host{n.host},
		Tracer: cfg.Tracer, Links: n.links, Activator: act, Admission: n.adm,
	})
	if err != nil {
		return nil, n.abort(ctx, err)
	}

	type part struct {
		name string
		run  func(context.Context) error
	}
	var parts []part
	if roles[plane.RoleEffects] {
		n.pool, err = adapter.NewPool(cfg.Store, adapter.Config{
			Worker: cfg.Worker + "/effects", Node: cfg.Worker, Incarnation: cfg.Incarnation, Executor: ex, Kinds: cfg.EffectKinds,
			Concurrency: cfg.EffectConcurrency, ClaimTTL: cfg.ClaimTTL, Policies: cfg.Retry, Logger: cfg.Logger.With("part", "effects"),
			Observe: cfg.ObserveEffect, Tracer: cfg.Tracer, Links: n.links,
			// No execution outlives this node's liveness promise: past it the
			// store's orphan reaper may hand the effect to another node.
			Liveness: n.host.AliveUntil, LivenessMin: cfg.LeaseTTL / 4,
		}, withBuiltins([]adapter.Registration{
			adapter.Register(adapter.NewHTTP(ex, cfg.HTTP), adapter.DefaultRetry()),
			// A send whose outcome is unknown is sent again until the
			// store answers: Send is deduplicated by message id. A message
			// to a world not placed yet activates it, as a client's input
			// does.
			adapter.Register(adapter.NewFabric(cfg.Store, adapter.FabricActivation(act)), adapter.RetryUntilKnown()),
		}, cfg.Adapters)...)
		if err != nil {
			return nil, n.abort(ctx, err)
		}
		n.lapse.Store(n.pool)
		parts = append(parts, part{"effects", n.pool.Run})
	}
	if roles[plane.RoleTimers] {
		tw, err := timer.New(cfg.Store, timer.Config{
			Worker: cfg.Worker + "/timers", Node: cfg.Worker, Incarnation: cfg.Incarnation, Executor: ex,
			ClaimTTL: cfg.ClaimTTL, Lag: timerLag(cfg),
			Logger: cfg.Logger.With("part", "timers"), Tracer: cfg.Tracer, Links: n.links,
		})
		if err != nil {
			return nil, n.abort(ctx, err)
		}
		parts = append(parts, part{"timers", tw.Run})
	}
	if roles[plane.RoleEffects] || roles[plane.RoleTimers] {
		// The reapers put back what dead claimants held: a process that
		// claims effects or timers runs them, one that only hosts or
		// serves the API need not.
		jobs := []reaper.Job{
			reaper.Orphans(cfg.Store, cfg.LeaseTTL), reaper.Effects(cfg.Store, cfg.ClaimTTL), reaper.Timers(cfg.Store, cfg.ClaimTTL),
		}
		if ds, ok := cfg.Store.(interface {
			SweepDedupe(ctx context.Context) (int, error)
			DedupeRetention() time.Duration
		}); ok {
			jobs = append(jobs, reaper.Dedupe(ds))
		}
		parts = append(parts, part{"reapers", func(ctx context.Context) error { return reaper.Run(ctx, reaper.Config{Executor: ex}, jobs...) }})
	}
	if cfg.Workflows != nil && (roles[plane.RoleHost] || roles[plane.RoleAPI]) {
		if err := n.startWorkflows(ctx); err != nil {
			return nil, n.abort(ctx, err)
		}
		parts = append(parts, part{"runs view", n.runsView.runner.Run})
		log := cfg.Logger.With("part", "runs")
		parts = append(parts, part{"unrunnable runs", func(ctx context.Context) error {
			return n.wfClient.ReportUnrunnable(ctx, UnrunnableEvery, log)
		}})
	}
	if !cfg.NoOrchestrator && roles[plane.RoleOrchestrator] {
		// Every orchestrating node runs a scheduler: each tick is
		// recorded by one compare-and-swap and started idempotently, so
		// they need no leader among them. A tick whose target this node
		// cannot start stays pending for one that can (NodeStarter).
		sc := schedule.Config{
			Store: cfg.Store, Starter: schedule.NodeStarter{Runs: n.wfClient, Workflows: cfg.Workflows, Ops: n.ops}, Executor: ex,
			Logger: cfg.Logger.With("part", "schedules"), Observe: cfg.ObserveSchedule,
		}
		parts = append(parts, part{"schedules", func(ctx context.Context) error { return schedule.Run(ctx, sc) }})
	}

	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	for _, w := range parts {
		n.wg.Add(1)
		ex.Go(func() {
			defer n.wg.Done()
			if err := w.run(wctx); err != nil && wctx.Err() == nil {
				cfg.Logger.Warn("node: worker exited", "part", w.name, "err", err)
			}
		})
	}
	cfg.Logger.Info("node started", "worker", cfg.Worker, "roles", n.Roles(), "orchestrator", n.orch != nil)
	n.started.Store(true)
	if n.lost.Load() {
		ex.Go(n.fencedOutUnlessStopped)
	}
	return n, nil
}

// fencedOut stops every part of the node that acts under its incarnation,
// once the store refused that incarnation's heartbeat (ErrFenced): it was
// superseded by another process under the same worker id, or retired. The
// host has failed already and the pool cut its executions short (Lapse);
// here the workflow runs are killed, the orchestrator resigns (its release
// names its epoch, so it frees only a lease it still holds), and the
// workers' context ends, which stops the pool, the timer worker, the
// reapers and the runs view. Nothing is drained or released by worker id:
// the worker id is the successor's now. Done is closed last; Stop still
// ends the rest.
func (n *Node) fencedOut() {
	n.mu.Lock()
	if n.superseded != nil {
		n.mu.Unlock()
		return // done, or being done by another caller
	}
	cause := n.host.Err()
	n.superseded = fmt.Errorf("%w: incarnation %s of worker %s: %w", ErrSuperseded, n.cfg.Incarnation, n.cfg.Worker, cause)
	n.mu.Unlock()
	n.cfg.Logger.Error("node: this incarnation was superseded by another process under the same worker id, or retired; it stopped acting and must exit",
		"worker", n.cfg.Worker, "incarnation", n.cfg.Incarnation, "err", cause)
	ctx := context.Background()
	if n.wfWorker != nil {
		n.wfWorker.Kill(ctx)
	}
	n.cancel()
	if n.orch != nil {
		// Bounded: the store answered the refused heartbeat but may not
		// answer this; an orchestrator lease not released expires.
		rctx, cancel := actor.WithTimeout(ctx, n.sys.Executor(), retireTimeout)
		_ = n.orch.Resign(rctx)
		cancel()
		_ = n.orch.Stop(ctx)
	}
	n.wg.Wait()
	close(n.done)
}

// fencedOutUnlessStopped is fencedOut for the host's report: a node that
// Kill or Stop ended first is theirs to finish (Stop runs fencedOut itself
// when the refusal came first).
func (n *Node) fencedOutUnlessStopped() {
	n.mu.Lock()
	stopped := n.stopped
	n.mu.Unlock()
	if !stopped {
		n.fencedOut()
	}
}

// Done is closed once the node stopped acting of its own accord because
// the store refused its incarnation (Err says why). Its process should
// then Stop it and exit, and must not start again under the same worker
// id while the process that superseded it runs. A node stopped by Stop or
// Kill never closes it.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is why Done was closed (errors.Is ErrSuperseded, and store.ErrFenced
// through it), or nil while the node acts.
func (n *Node) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.superseded
}

// timerLag is the timer worker's Lag for cfg (see Config.TimerLag).
func timerLag(cfg Config) time.Duration {
	switch {
	case cfg.TimerLag < 0:
		return 0
	case cfg.TimerLag > 0:
		return cfg.TimerLag
	case cfg.Workflows != nil:
		// A workflow run's sleep is a timer of a world no plane.Host
		// holds: only the timer worker fires it, and a lag would be
		// its lateness.
		return 0
	}
	return DefaultTimerLag
}

// UnrunnableEvery is how often a node serving workflows looks for runs
// whose version no live worker carries, to log them
// (workflow.Client.ReportUnrunnable).
const UnrunnableEvery = 30 * time.Second

// startWorkflows starts the workflow worker and builds the client and the
// runs view; the view's runner is started with the node's other parts.
func (n *Node) startWorkflows(ctx context.Context) error {
	cfg, ex := n.cfg, n.sys.Executor()
	log := cfg.Logger.With("part", "runs")
	wc := workflow.WorkerConfig{
		Worker: cfg.Worker + "/runs", Incarnation: cfg.Incarnation, Store: cfg.Store, Workflows: cfg.Workflows, LeaseTTL: cfg.LeaseTTL,
		Observe: func(e workflow.Event) {
			if e.Kind == workflow.EvError || e.Kind == workflow.EvRenewFail {
				log.Warn("node: workflow run", "event", e.Kind, "run", e.Run, "err", e.Err)
			}
		},
	}
	if cfg.WorkflowWorker != nil {
		cfg.WorkflowWorker(&wc)
	}
	names := cfg.Workflows.Names()
	universes := make([]string, len(names))
	for i, name := range names {
		universes[i] = workflow.Universe(name)
	}
	v := &RunsView{Runs: projector.NewRuns(), Timeline: projector.NewTimeline()}
	var err error
	if v.runner, err = projector.NewRunner(projector.RunnerConfig{
		Store: cfg.Store, Executor: ex, Streams: projector.UniverseStreams(cfg.Store, universes...),
		Projectors: append([]projector.Projector{v.Runs, v.Timeline}, cfg.Projectors...), Logger: log,
	}); err != nil {
		return err
	}
	n.runsView = v
	opts := []workflow.ClientOption{workflow.WithOperator(cfg.Worker+"/operator", cfg.LeaseTTL)}
	if n.roles[plane.RoleHost] {
		// Runs run with the worlds: a process that hosts runs them.
		if n.wfWorker, err = workflow.StartWorker(ctx, n.sys.Root(), wc); err != nil {
			return err
		}
		// The node's own worker tells its client of the runs that end
		// here; a run that ends on another node is noticed by the
		// client's backoff.
		opts = append(opts, workflow.WithWorkers(n.wfWorker))
	}
	opts = append(opts, workflow.WithMaxInbox(cfg.Limits.MaxInbox))
	n.wfClient, err = workflow.NewClient(cfg.Store, cfg.Workflows, ex, opts...)
	return err
}

// ResolveRoles checks a list of roles (Config.Roles) and returns the set;
// nil is every role. An unknown role, or an empty list, is ErrRoles.
func ResolveRoles(roles []string) (map[string]bool, error) {
	known := plane.Roles()
	if roles == nil {
		roles = known
	}
	out := map[string]bool{}
	for _, r := range roles {
		if !slices.Contains(known, r) {
			return nil, fmt.Errorf("%w: unknown role %q (the roles are %s)", ErrRoles, r, strings.Join(known, ", "))
		}
		out[r] = true
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no role (the roles are %s)", ErrRoles, strings.Join(known, ", "))
	}
	return out, nil
}

// CheckRoles reports, as Start would and without starting anything,
// whether cfg's Roles, EffectKinds and Capacity can run (nil) or not
// (ErrRoles). It reads only those and Adapters.
func CheckRoles(cfg Config) error {
	_, _, err := checkRoles(cfg)
	return err
}

// checkRoles resolves cfg's roles (less the orchestrator with
// NoOrchestrator) and the kinds its pool executes.
func checkRoles(cfg Config) (map[string]bool, []string, error) {
	roles, err := ResolveRoles(cfg.Roles)
	if err != nil {
		return nil, nil, err
	}
	if cfg.NoOrchestrator {
		delete(roles, plane.RoleOrchestrator)
	}
	if cfg.Capacity < 0 {
		return nil, nil, fmt.Errorf("%w: capacity %d is negative", ErrRoles, cfg.Capacity)
	}
	kinds, err := effectKinds(cfg, roles)
	if err != nil {
		return nil, nil, err
	}
	return roles, kinds, nil
}

// effectKinds are the kinds the node's pool executes (nil without the
// effects role), checked against the kinds the binary serves: the
// built-in adapters' and the registered ones'.
func effectKinds(cfg Config, roles map[string]bool) ([]string, error) {
	if !roles[plane.RoleEffects] {
		if cfg.EffectKinds != nil {
			return nil, fmt.Errorf("%w: effect kinds %v without the %s role", ErrRoles, cfg.EffectKinds, plane.RoleEffects)
		}
		return nil, nil
	}
	served := []string{adapter.KindHTTP, adapter.KindFabric}
	for _, r := range cfg.Adapters {
		if r.Adapter != nil {
			served = append(served, r.Adapter.Kinds()...)
		}
	}
	slices.Sort(served)
	served = slices.Compact(served)
	if cfg.EffectKinds == nil {
		return served, nil
	}
	if len(cfg.EffectKinds) == 0 {
		return nil, fmt.Errorf("%w: an empty list of effect kinds (the binary serves %s)", ErrRoles, strings.Join(served, ", "))
	}
	for _, k := range cfg.EffectKinds {
		if !slices.Contains(served, k) {
			return nil, fmt.Errorf("%w: effect kind %q is not one this binary serves (%s)", ErrRoles, k, strings.Join(served, ", "))
		}
	}
	out := slices.Clone(cfg.EffectKinds)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// capabilities is what the node advertises: its roles, the binary's world
// types and workflow versions, and the kinds its pool executes.
func (n *Node) capabilities(kinds []string) []string {
	set := plane.CapabilitySet{Roles: n.Roles(), Kernels: n.cfg.Kernels, EffectKinds: kinds}
	// Every version the binary carries, not only the newest: a node runs
	// the runs of each, and starts judge by them (ErrVersionNotCarried).
	out := append(plane.Capabilities(set), n.cfg.Workflows.Capabilities()...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Roles are the roles the node runs, in plane.Roles' order.
func (n *Node) Roles() []string {
	var out []string
	for _, r := range plane.Roles() {
		if n.roles[r] {
			out = append(out, r)
		}
	}
	return out
}

// RunsRole reports whether the node runs role.
func (n *Node) RunsRole(role string) bool { return n.roles[role] }

// withBuiltins puts the built-in adapters before the application's, minus
// each built-in whose kind the application serves itself.
func withBuiltins(builtins, app []adapter.Registration) []adapter.Registration {
	served := map[string]bool{}
	for _, r := range app {
		for _, k := range r.Adapter.Kinds() {
			served[k] = true
		}
	}
	var out []adapter.Registration
	for _, r := range builtins {
		replaced := false
		for _, k := range r.Adapter.Kinds() {
			replaced = replaced || served[k]
		}
		if !replaced {
			out = append(out, r)
		}
	}
	return append(out, app...)
}

// abort undoes a partial Start.
func (n *Node) abort(ctx context.Context, err error) error {
	if n.wfWorker != nil {
		n.wfWorker.Kill(ctx)
	}
	if n.orch != nil {
		_ = n.orch.Stop(ctx)
	}
	if n.host != nil {
		_ = n.host.Stop(ctx)
	}
	if n.ownSys {
		_, _ = n.sys.Close(ctx)
	}
	return err
}

// Worker is the node's worker id.
func (n *Node) Worker() string { return n.cfg.Worker }

// Incarnation is the incarnation the node's leases are held as.
func (n *Node) Incarnation() string { return n.cfg.Incarnation }

// Client is the node's client: Send, Call and State, with replies handed
// over in process by the node's host.
func (n *Node) Client() *plane.Client { return n.client }

// Admission returns the node's ingress admission (its Limits and refusal
// counts).
func (n *Node) Admission() *plane.Admission { return n.adm }

// Ops is the internal ops API over the node's store.
func (n *Node) Ops() *plane.Ops { return n.ops }

// Host is the node's host.
func (n *Node) Host() *plane.Host { return n.host }

// Pool is the node's effect adapter pool (nil without the effects role).
func (n *Node) Pool() *adapter.Pool { return n.pool }

// Runs is the client of the node's workflow runs (nil without
// Config.Workflows): Start, Result, Get, Signal, Cancel, Pause, Resume.
func (n *Node) Runs() *workflow.Client { return n.wfClient }

// RunsView is the read side of the node's workflow runs (nil without
// Config.Workflows).
func (n *Node) RunsView() *RunsView { return n.runsView }

// Executor is the clock and goroutine source every part of the node uses.
func (n *Node) Executor() actor.Executor { return n.sys.Executor() }

// Unplaced is how many active worlds this node's orchestrator, when it
// acts, could place nowhere (plane.Orchestrator.Unplaced); 0 otherwise.
func (n *Node) Unplaced() int {
	if n.orch == nil {
		return 0
	}
	return n.orch.Unplaced()
}

// Leader reports whether this node's orchestrator is the acting one.
func (n *Node) Leader() bool { return n.orch != nil && n.orch.Leader() }

// Ready reports whether the node can take work: not stopped, its host
// running, and the store answering. A superseded node answers its
// ErrSuperseded: the API it backs stays up only to answer /readyz with
// 503 (and requests with whatever its failed host says) until its process
// stops it, which `orrery serve` does at once; it needs no API of its own
// to be told apart, since Done and the log say why it stopped.
func (n *Node) Ready(ctx context.Context) error {
	n.mu.Lock()
	stopped, superseded := n.stopped, n.superseded
	n.mu.Unlock()
	if stopped {
		return ErrStopped
	}
	if superseded != nil {
		return superseded
	}
	if err := n.host.Err(); err != nil {
		return err
	}
	_, err := n.cfg.Store.Now(ctx)
	return err
}

// Drain hands every world on this node to the others without waiting for
// lease expiry: the worker is marked draining (the orchestrator places
// nothing here and moves its worlds), the world processes finish the step
// in flight and stop, and the leases are released at once. The node keeps
// running its adapter pool and timer worker, which are stateless claimants,
// until Stop.
func (n *Node) Drain(ctx context.Context) error { return n.host.Drain(ctx) }

// Stop is the planned shutdown (SIGTERM), bounded by ctx: the adapter pool
// stops claiming at once; the worlds drain (Drain); the orchestrator hands
// over; the effects executing finish and their receipts are delivered
// (adapter.Pool.Stop), and those still running when ctx ends are cancelled
// and their claims released at once for another node, with a log line
// each; then the timer worker, reapers and processes stop. It returns the
// first error of those steps (ctx's, when it ran out); calling it again is
// a no-op.
func (n *Node) Stop(ctx context.Context) error {
	if !n.markStopped() {
		return nil
	}
	if n.lost.Load() {
		n.fencedOut()
		return n.stopSuperseded(ctx)
	}
	// No new effect from here on; those executing go on meanwhile.
	if n.pool != nil {
		n.pool.Drain()
	}
	var err error
	if n.wfWorker != nil {
		// Released at once, so another node's worker takes the runs up
		// without waiting for the TTL.
		err = n.wfWorker.Stop(ctx)
	}
	if derr := n.host.Drain(ctx); err == nil {
		err = derr
	}
	if n.orch != nil {
		// The acting orchestrator moves the drained worlds before it
		// goes, then hands its own lease over without waiting for the TTL.
		if n.orch.Leader() {
			if rerr := n.orch.Reconcile(ctx); err == nil && rerr != nil && !errors.Is(rerr, plane.ErrNotLeader) {
				err = rerr
			}
		}
		if rerr := n.orch.Resign(ctx); err == nil && rerr != nil {
			err = rerr
		}
	}
	// The pool finishes before the host stops: the host's heartbeats are
	// the liveness the pool's claims ride on, so while an effect still
	// executes here the store must not think this node dead and hand the
	// effect to another.
	if n.pool != nil {
		if perr := n.pool.Stop(ctx); err == nil && perr != nil {
			err = perr
		}
	}
	if serr := n.host.Stop(ctx); err == nil && serr != nil && !errors.Is(serr, plane.ErrStopped) {
		err = serr
	}
	// Whatever claim is still held for this incarnation (one a stop that
	// ran out of time could not release, one a claim racing the stop
	// took) is requeued after finish, and the incarnation takes no more.
	// Its own bounded context, made while the executor runs: a stop whose
	// context ran out is the very case it is for.
	rctx, cancel := actor.WithTimeout(context.WithoutCancel(ctx), n.sys.Executor(), retireTimeout)
	n.finish(ctx)
	_, rerr := n.cfg.Store.RetireWorker(rctx, n.cfg.Worker, n.cfg.Incarnation)
	cancel()
	if rerr != nil {
		n.cfg.Logger.Warn("node: retire failed; the claims left wait for the heartbeat to expire", "worker", n.cfg.Worker, "err", rerr)
	}
	n.cfg.Logger.Info("node stopped", "worker", n.cfg.Worker)
	return err
}

// stopSuperseded is Stop for a node whose incarnation the store refused.
// Nothing is handed over: the worker id is the successor's, so marking it
// draining (as Drain does) would drain the successor, the store requeued
// every claim of this incarnation already, and its leases are fenced.
// What is left is to wait for the parts fencedOut stopped and end the
// processes.
func (n *Node) stopSuperseded(ctx context.Context) error {
	select {
	case <-n.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := n.host.Stop(ctx); err != nil && !errors.Is(err, plane.ErrStopped) && !errors.Is(err, plane.ErrHostFailed) {
		n.cfg.Logger.Warn("node: host stop after supersession", "worker", n.cfg.Worker, "err", err)
	}
	n.finish(ctx)
	n.cfg.Logger.Info("node stopped", "worker", n.cfg.Worker, "superseded", true)
	return nil
}

// retireTimeout bounds the store call that retires a stopping node's
// incarnation.
const retireTimeout = 5 * time.Second

// Kill ends the node as a crash would: processes are aborted and nothing is
// released, so its worlds move only when their leases expire. The store
// handle should be treated as dead too.
func (n *Node) Kill(ctx context.Context) {
	if !n.markStopped() {
		return
	}
	if n.wfWorker != nil {
		n.wfWorker.Kill(ctx)
	}
	n.host.Kill(ctx)
	n.finish(ctx)
}

func (n *Node) markStopped() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return false
	}
	n.stopped = true
	return true
}

func (n *Node) finish(ctx context.Context) {
	if n.orch != nil {
		_ = n.orch.Stop(ctx)
	}
	n.cancel()
	n.wg.Wait()
	if n.ownSys {
		_, _ = n.sys.Close(ctx)
	}
}
