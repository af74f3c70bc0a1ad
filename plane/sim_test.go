package plane_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/plane/timer"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

var errStoreFault = errors.New("injected store fault")

// simStats counts what the seeds of the simulation did, so the test can
// tell that they hurt the plane (checks over a plane that never failed
// prove nothing).
type simStats struct {
	hostCrashes, hostFailures, poolCrashes, timerCrashes, pauses, storeFaults int
	// orphans: claims of a crashed or frozen pool the orphan reaper
	// requeued before their TTL
	orphans                                   int
	commits, receipts, fired, messages, calls int
	// firings that ran, stepped directly by their holder or from the inbox
	directFirings, inboxFirings int

	// skewedNodes: nodes whose clock was off the lab's (and the store's)
	// by a seeded offset; unavailable: store faults of the kind of a lost
	// connection; lostReplies: adapter store calls (fabric included) that
	// took effect and then failed as a lost connection would; lostCommits:
	// host commits that did.
	skewedNodes, unavailable, lostReplies, lostCommits int
	// lostHints: hints of a world's inbox a host never received
	lostHints int
	// pausesMidEffect: pools whose store stopped answering, past their
	// promise, while they executed
	pausesMidEffect int
	// poolFaults counts the injected faults of the adapter pools' handles
	// by store operation, fabric's send among them.
	poolFaults map[string]int
	// steps over a kernel limit: an oversized error, too many intents, a
	// state over the bound, a timer past the last storable instant
	shouts, spews, swells, farTimers int
	// archives: worlds archived with effects published; withdrawn and
	// inflightAtArchive: their effects the archive withdrew, or found
	// claimed (those may finish)
	archives, withdrawn, inflightAtArchive int
	// seeds whose calls came from more than one client; replies checked
	// against the journal
	callClients, replies int
	// freshRaces: worlds created mid-run whose first calls two nodes took
	// at once, each activating the world
	freshRaces int
}

// simNode is one process of the simulation with a store handle of its own:
// a host, an adapter pool, the timer worker or the reapers. Its handle
// fails at seeded points, can be paused (every store call blocks until
// resumed) and is crashed with the process.
type simNode struct {
	name    string
	gen     int
	ex      skewExecutor   // the node's clock: the lab's, off by a seeded offset
	sys     *actor.System  // a host's system, on ex
	replies *plane.Replies // a host's in-process replies, shared with its process's client
	st      *memstore.Store
	paused  bool
	blocked []actor.Parker
	down    bool
	exited  bool // its Run returned on its own (it could not watch the store)

	host  *plane.Host // hosts
	act   *plane.Activator
	scope *actor.Scope // pools, the timer worker, the reapers
}

// simActivation activates through the current generation of a host node:
// its activator, on the node's faulty handle, places under the acting
// orchestrator's fence and has the node's host take the world.
type simActivation struct{ n *simNode }

func (a simActivation) Activate(ctx context.Context, world string) error {
	if a.n.down || a.n.act == nil {
		return nil
	}
	return a.n.act.Activate(ctx, world)
}

// echoAdapter is the simulation's deterministic in-process adapter: it
// answers test.echo after a seeded delay on the lab's clock, failing the
// attempt at seeded points, and records every call per claim.
type echoAdapter struct {
	ex    *lab.Executor
	heal  *atomic.Bool
	mu    sync.Mutex
	calls map[string]int // "hash/attempt" → calls
	// spans are the executions of each intent on the lab's clock: two of
	// one intent must never overlap. active counts the executions running
	// by claimant (a pool's incarnation).
	spans  map[string][]*echoSpan
	active map[string]int
	ran    func(hash string)
}

type echoSpan struct {
	claim      string // "hash/attempt"
	start, end time.Time
}

// executing reports whether the pool incarnation worker runs an execution.
func (a *echoAdapter) executing(worker string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.active[worker] > 0
}

func (*echoAdapter) Kinds() []string { return []string{kindEcho} }

func (a *echoAdapter) Execute(ctx context.Context, it vocab.EffectItem) (effect.Result, error) {
	sp := &echoSpan{claim: fmt.Sprint(it.IntentHash, "/", it.Attempt), start: a.ex.Now()}
	a.mu.Lock()
	a.calls[sp.claim]++
	a.spans[it.IntentHash] = append(a.spans[it.IntentHash], sp)
	a.active[it.ClaimedBy]++
	a.mu.Unlock()
	a.ran(it.IntentHash)
	// Now and then longer than the liveness promise the claim rides on
	// (within the claim's budget), so that a pool frozen meanwhile must
	// cut it short before another pool runs the effect.
	d := time.Duration(a.ex.Uint64()%300) * time.Millisecond
	if a.ex.Uint64()%4 == 0 {
		d = simTTL + time.Duration(a.ex.Uint64()%600)*time.Millisecond
	}
	err := actor.Sleep(ctx, a.ex, d)
	a.mu.Lock()
	sp.end = a.ex.Now()
	a.active[it.ClaimedBy]--
	a.mu.Unlock()
	if err != nil {
		return effect.Result{}, err
	}
	if !a.heal.Load() && a.ex.Buggify("adapter.echo") {
		return effect.Result{}, errors.New("injected transient adapter failure")
	}
	var p EchoParams
	if err := world.Decode(it.Params, &p); err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	return effect.OK(p.Key), nil
}

// fabricSpy is the fabric.send adapter, noting which message (key) each
// intent carries so the checks can match deliveries to receipts.
type fabricSpy struct {
	*adapter.Fabric
	mu   *sync.Mutex
	keys map[string]string // intent hash → Msg key
	ran  func(hash string)
}

func (f fabricSpy) Execute(ctx context.Context, it vocab.EffectItem) (effect.Result, error) {
	var p world.FabricSendParams
	var m Msg
	if world.Decode(it.Params, &p) == nil && world.Decode(p.ValueCBOR, &m) == nil {
		f.mu.Lock()
		f.keys[it.IntentHash] = m.Key
		f.mu.Unlock()
	}
	f.ran(it.IntentHash)
	return f.Fabric.Execute(ctx, it)
}

// The sim's worlds also take steps that go over a kernel limit: each must
// become an error outcome (input consumed, state unchanged, nothing asked
// for), never a commit the store refuses or a wedged world.
type (
	SimShout struct{ Key string } // fails with an error longer than world.MaxErrorBytes
	SimSpew  struct{ Key string } // asks for more intents than one step may
	SimSwell struct{ Key string } // grows the state past world.MaxStateBytes
	SimFar   struct{ Key string } // sets a timer past the last storable instant
)

func simDef() *world.Def[counter] {
	d := counterDef()
	world.On(d, func(c *world.Ctx, s *counter, m SimShout) error {
		s.Seen = append(s.Seen, m.Key)
		return errors.New(strings.Repeat("!", 2*world.MaxErrorBytes))
	})
	world.On(d, func(c *world.Ctx, s *counter, m SimSpew) error {
		s.Seen = append(s.Seen, m.Key)
		for i := range world.MaxStepIntents + 1 {
			c.Effect(kindEcho, EchoParams{Key: fmt.Sprint(m.Key, "/", i)})
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counter, m SimSwell) error {
		s.Seen = append(s.Seen, m.Key, strings.Repeat("x", world.MaxStateBytes))
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counter, m SimFar) error {
		s.Seen = append(s.Seen, m.Key)
		c.SetTimer(event.MaxTime.Add(time.Hour), Beep(m))
		return nil
	})
	return d
}

func simKernel() plane.Kernels { return plane.Kernels{universe: simDef().Kernel()} }

// lossyStore is an adapter pool's handle (fabric included), or a host's,
// whose calls sometimes take effect and then fail as a lost connection
// does: the caller cannot tell whether they happened.
type lossyStore struct {
	*memstore.Store
	lose func(op string) bool
}

// Watch drops some of the hints of a world's inbox (lose("hint")), as a
// notification lost with the listener's connection is: the host must
// still drain that world.
func (s lossyStore) Watch(ctx context.Context, w store.Waker, topics ...string) (func(), error) {
	for _, t := range topics {
		if _, inbox := store.InboxTopicWorld(t); inbox {
			return s.Store.Watch(ctx, deafWaker{w, s.lose}, topics...)
		}
	}
	return s.Store.Watch(ctx, w, topics...)
}

type deafWaker struct {
	store.Waker
	lose func(op string) bool
}

func (d deafWaker) Unpark() {
	if !d.lose("hint") {
		d.Waker.Unpark()
	}
}

func lost(op string) error {
	return &store.Error{Op: op, Kind: store.Unavailable(io.ErrUnexpectedEOF)}
}

func (s lossyStore) Claim(ctx context.Context, worker string, kinds []string, n int, ttl time.Duration, opts ...store.ClaimOption) ([]vocab.EffectItem, error) {
	items, err := s.Store.Claim(ctx, worker, kinds, n, ttl, opts...)
	if err == nil && len(items) > 0 && s.lose("claim") {
		return nil, lost("claim")
	}
	return items, err
}

func (s lossyStore) Complete(ctx context.Context, h string, c vocab.Claim, rc vocab.Receipt) (uint64, bool, error) {
	seq, dup, err := s.Store.Complete(ctx, h, c, rc)
	if err == nil && s.lose("complete") {
		return 0, false, lost("complete")
	}
	return seq, dup, err
}

func (s lossyStore) ReleaseEffect(ctx context.Context, h string, c vocab.Claim) error {
	err := s.Store.ReleaseEffect(ctx, h, c)
	if err == nil && s.lose("release_effect") {
		return lost("release_effect")
	}
	return err
}

func (s lossyStore) Commit(ctx context.Context, w string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	res, err := s.Store.Commit(ctx, w, epoch, b)
	if err == nil && s.lose("commit") {
		return store.CommitResult{}, lost("commit")
	}
	return res, err
}

func (s lossyStore) Send(ctx context.Context, dest, id string, it store.InboxItem) (store.FabricResult, error) {
	res, err := s.Store.Send(ctx, dest, id, it)
	if err == nil && s.lose("send") {
		return store.FabricResult{}, lost("send")
	}
	return res, err
}

const (
	simTTL      = time.Second // leases, claims
	simEchoTry  = 3           // the echo adapter's attempts per claim
	simOps      = 14
	simRelayTTL = 2 * time.Second
)

var simWorlds = []string{"s0", "s1", "s2", "s3"}

// simDoomed is the world the driver archives mid-run, with effects of its
// own published, claimed and in flight.
const simDoomed = "s4"

var simAll = append(slices.Clone(simWorlds), simDoomed)

func planeSim(stats *simStats) lab.Scenario {
	return func(env *lab.Env) error { return (&planeSimRun{env: env, stats: stats}).run() }
}

// planeSimRun is one seed of the whole-plane simulation: the orchestrator,
// three hosts, two adapter pools (the echo adapter and fabric.send), the
// timer worker and the reapers, all on one memstore under the lab's clock,
// each node's clock and the store's off it by seeded offsets of their own.
// A seeded workload sends events, calls (from the client of each host's
// process), effects, timers, fabric sends and steps over every kernel
// limit, archives a world while its effects are published, and creates a
// world whose first calls two nodes take at once (each client activates
// the worlds of its inputs through its node's host), while
// seeded faults strike: store errors on every handle (some look like a lost
// connection; on the pools' handles and the hosts' commits some come after
// the call took effect),
// host crashes, pool and timer worker crashes, world processes that panic
// outside the kernel (the host fails and its outer supervisor, here the
// driver, starts it again), paused workers and delayed wake-ups. Then it
// heals and checks.
type planeSimRun struct {
	env   *lab.Env
	stats *simStats
	// sharedSeed starts every client's randomness from the same seed, as
	// processes that drew their ids from a configured seed would: the
	// oracles must catch it (TestPlaneSimulationCatchesSharedCallIDs).
	sharedSeed bool
	base       *memstore.Store
	healed     atomic.Bool
	panics     atomic.Bool // arms the next world step to panic

	hosts  []*simNode
	pools  []*simNode
	timerW *simNode
	reap   *simNode
	echo   *echoAdapter
	fabMu  sync.Mutex
	fabKey map[string]string // fabric.send intent hash → Msg key

	commits  map[string][]plane.HostEvent
	acquired map[string][]uint64

	execMu  sync.Mutex
	execLog []string // intent hashes in the order adapters executed them
	// archived: simDoomed was archived; afterArchive is len(execLog) then,
	// and inflight its effects claimed before the archive committed.
	archived     bool
	afterArchive int
	inflight     map[string]bool

	clients []*plane.Client     // one per host node, on its clock
	callIDs map[string]bool     // every call id drawn, by any client
	replies map[string]simReply // call id → the reply its caller got
	limited map[string]string   // key of a step over a limit → its kind
}

type simReply struct {
	world string
	value []byte
}

func (r *planeSimRun) ran(hash string) {
	r.execMu.Lock()
	r.execLog = append(r.execLog, hash)
	r.execMu.Unlock()
}

func (r *planeSimRun) hook(n *simNode) func(op string) error {
	return func(op string) error {
		if n.paused {
			p := r.env.Lab.NewParker()
			n.blocked = append(n.blocked, p)
			_ = p.Park(r.env.Ctx)
		}
		if !r.healed.Load() && r.env.Lab.Buggify("store."+op) {
			r.stats.storeFaults++
			if slices.Contains(r.pools, n) {
				r.stats.poolFaults[op]++
			}
			// Half of them look like a lost connection, as the SQL
			// backends report one.
			if r.env.Lab.Uint64()%2 == 0 {
				r.stats.unavailable++
				return lost(op)
			}
			return errStoreFault
		}
		return nil
	}
}

// simKernels is the counter's kernel whose steps panic, outside the
// kernel's containment, whenever the driver arms it.
func (r *planeSimRun) simKernels() plane.Kernels {
	return plane.Kernels{universe: panicKernel{simDef().Kernel(), &r.panics}}
}

// newNode is a node whose clock is off by a seeded offset, up to 3s
// either way (three times the TTL).
func (r *planeSimRun) newNode(name string) *simNode {
	off := time.Duration(int64(r.env.Lab.Uint64()%7)-3) * time.Second
	if off != 0 {
		r.stats.skewedNodes++
	}
	return &simNode{name: name, ex: skewExecutor{r.env.Lab, off}}
}

func (r *planeSimRun) startHost(n *simNode) error {
	n.gen++
	n.st = r.base.Restart(memstore.WithHook(r.hook(n)))
	cfg := hostConfig(n.name, lossyStore{n.st, func(op string) bool {
		if r.healed.Load() || r.env.Lab.Uint64()%16 != 0 {
			return false
		}
		if op == "hint" {
			r.stats.lostHints++
		} else {
			r.stats.lostCommits++
		}
		return true
	}}, n.replies)
	cfg.Kernels = r.simKernels()
	cfg.LeaseTTL, cfg.IdleAfter, cfg.SyncEvery = simTTL, 300*time.Millisecond, 200*time.Millisecond
	cfg.MaxInboxBatch, cfg.MaxTickStepsPerCycle = 3, 2
	cfg.Observe = func(ev plane.HostEvent) {
		switch ev.Kind {
		case plane.EvCommit:
			r.stats.commits++
			ev.Kind = n.name
			r.commits[ev.World] = append(r.commits[ev.World], ev)
		case plane.EvAcquired:
			r.acquired[ev.World] = append(r.acquired[ev.World], ev.Epoch)
		case plane.EvHostFailed:
			r.stats.hostFailures++
		}
	}
	h, err := plane.StartHost(r.env.Ctx, n.sys.Root(), cfg)
	n.host, n.down = h, err != nil
	if err != nil {
		return err
	}
	n.act, err = plane.NewActivator(plane.ActivatorConfig{Store: n.st, Kernels: r.simKernels(), Executor: n.ex,
		Host: h, LiveFor: simTTL})
	return err
}

// startTask runs a pool, the timer worker or the reapers in a scope of its
// own on a fresh handle; a crash kills the scope and the handle.
func (r *planeSimRun) startTask(n *simNode, run func(n *simNode, id string) (func(context.Context) error, error)) error {
	n.gen++
	n.st = r.base.Restart(memstore.WithHook(r.hook(n)))
	id := fmt.Sprint(n.name, "-", n.gen)
	f, err := run(n, id)
	if err != nil {
		return err
	}
	if n.scope, err = r.env.Root.Sub(id); err != nil {
		return err
	}
	if _, err := n.scope.Go(id, func(ctx context.Context) error {
		err := f(ctx)
		if ctx.Err() == nil {
			n.exited = true
		}
		return err
	}); err != nil {
		return err
	}
	n.down, n.exited = false, false
	return nil
}

func (r *planeSimRun) runPool(n *simNode, id string) (func(context.Context) error, error) {
	st := lossyStore{n.st, func(op string) bool {
		if r.healed.Load() || r.env.Lab.Uint64()%16 != 0 {
			return false
		}
		r.stats.lostReplies++
		r.stats.poolFaults["lost "+op]++
		return true
	}}
	// The pool's claims ride on the liveness its own heartbeats promise
	// (the node's name, this start's incarnation): a crash or a freeze
	// past the promise gets them requeued by the orphan reaper, and the
	// next start under the name supersedes this incarnation.
	// And no execution outlives that promise, as a node wires it: the
	// deadline from before the last heartbeat the store took.
	var alive atomic.Int64
	liveness := func() time.Time {
		if ns := alive.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
		return time.Time{}
	}
	p, err := adapter.NewPool(st, adapter.Config{Worker: id, Node: n.name, Incarnation: id, Executor: n.ex, ClaimTTL: 2 * simTTL, Concurrency: 2,
		Liveness: liveness, LivenessMin: simTTL / 4},
		adapter.Register(r.echo, adapter.RetryPolicy{Attempts: simEchoTry, Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}),
		adapter.Register(fabricSpy{adapter.NewFabric(st), &r.fabMu, r.fabKey, r.ran}, adapter.RetryPolicy{Attempts: 2, Base: 50 * time.Millisecond, Max: 100 * time.Millisecond}))
	if err != nil {
		return nil, err
	}
	// A pool hosts no world: its record is draining before it beats, so
	// the orchestrator never places one on it (on the fault-free handle:
	// the setup is the test's, not a fault point).
	if _, err := r.base.Heartbeat(r.env.Ctx, n.name, 1); err != nil {
		return nil, err
	}
	if _, err := r.base.SetDraining(r.env.Ctx, n.name, true); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		beat := func() {
			sent := n.ex.Now()
			if _, err := n.st.Heartbeat(ctx, n.name, 1, store.AliveAs(id, simTTL)); err == nil {
				alive.Store(sent.Add(simTTL - simTTL/20).UnixNano())
			} else if errors.Is(err, store.ErrFenced) {
				alive.Store(-1)
				p.Lapse()
			}
		}
		beat() // known before its first claim
		// The beats run beside the pool and end with its context: no
		// goroutine waits on another here, so nothing can spin once the
		// scope is killed.
		bctx, stop := context.WithCancel(ctx)
		defer stop()
		n.ex.Go(func() {
			park := n.ex.NewParker()
			for actor.ParkFor(bctx, n.ex, park, simTTL/3) == nil {
				beat()
			}
		})
		return p.Run(ctx)
	}, nil
}

func (r *planeSimRun) runTimer(n *simNode, id string) (func(context.Context) error, error) {
	w, err := timer.New(n.st, timer.Config{Worker: id, Executor: n.ex, ClaimTTL: simTTL})
	if err != nil {
		return nil, err
	}
	return w.Run, nil
}

func (r *planeSimRun) runReapers(n *simNode, _ string) (func(context.Context) error, error) {
	return func(ctx context.Context) error {
		observe := func(job string, k int, err error) {
			if job == "reap_orphans" && err == nil {
				r.stats.orphans += k
			}
		}
		return reaper.Run(ctx, reaper.Config{Executor: n.ex, Observe: observe}, reaper.Orphans(n.st, simTTL), reaper.Effects(n.st, 2*simTTL), reaper.Timers(n.st, simTTL))
	}, nil
}

func (r *planeSimRun) restartTask(n *simNode) error {
	switch {
	case slices.Contains(r.pools, n):
		return r.startTask(n, r.runPool)
	case n == r.timerW:
		return r.startTask(n, r.runTimer)
	default:
		return r.startTask(n, r.runReapers)
	}
}

func (r *planeSimRun) crash(n *simNode) {
	n.st.Crash()
	if n.host != nil {
		n.host.Kill(r.env.Ctx)
	} else {
		_, _ = n.scope.CloseKilled(r.env.Ctx)
	}
	n.down = true
}

func (r *planeSimRun) resume(n *simNode) {
	n.paused = false
	for _, p := range n.blocked {
		p.Unpark()
	}
	n.blocked = nil
}

// supervise is the outer supervisor: it starts again every node that is
// down, crashed by the driver or failed on its own.
func (r *planeSimRun) supervise() error {
	for _, n := range r.hosts {
		if !n.down && n.host.Err() != nil {
			if err := n.host.Wait(r.env.Ctx); !errors.Is(err, plane.ErrHostFailed) {
				return fmt.Errorf("%s failed with %v, want ErrHostFailed", n.name, err)
			}
			n.host.Kill(r.env.Ctx)
			n.down = true
		}
		if n.down && !n.paused {
			if err := r.startHost(n); err != nil {
				return err
			}
		}
	}
	for _, n := range append(slices.Clone(r.pools), r.timerW, r.reap) {
		if n.exited && !n.down {
			_, _ = n.scope.CloseKilled(r.env.Ctx)
			n.down = true
		}
		if n.down && !n.paused {
			if err := r.restartTask(n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *planeSimRun) sleep(d time.Duration) error { return actor.Sleep(r.env.Ctx, r.env.Lab, d) }

// ack is one acknowledged ingress.
type ack struct {
	world string
	seq   uint64
}

func (r *planeSimRun) run() (err error) {
	env, lb := r.env, r.env.Lab
	defer func() {
		// A failed check leaves the nodes running; kill them, or the
		// lab would report their timers as a livelock instead of the
		// failure.
		if err != nil {
			for _, n := range r.hosts {
				if n.host != nil {
					n.host.Kill(env.Ctx)
				}
			}
			for _, n := range append(slices.Clone(r.pools), r.timerW, r.reap) {
				if n != nil && n.scope != nil {
					_, _ = n.scope.CloseKilled(env.Ctx)
				}
			}
		}
	}()
	// The store's clock is off the lab's by a seeded offset (up to 3s
	// either way, three times the TTL), and so is every node's, each by
	// its own: nothing may compare an instant of one clock with another's.
	skew := time.Duration(int64(lb.Uint64()%7)-3) * time.Second
	r.base = memstore.New(memstore.WithClock(func() time.Time { return lb.Now().Add(skew) }))
	r.commits, r.acquired = map[string][]plane.HostEvent{}, map[string][]uint64{}
	r.fabKey = map[string]string{}
	r.callIDs, r.replies, r.limited = map[string]bool{}, map[string]simReply{}, map[string]string{}
	r.echo = &echoAdapter{ex: lb, heal: &r.healed, calls: map[string]int{}, spans: map[string][]*echoSpan{}, active: map[string]int{}, ran: r.ran}
	for _, w := range simAll {
		if _, err := r.base.CreateWorld(env.Ctx, universe, w, nil); err != nil {
			return err
		}
	}
	for _, id := range []string{"A", "B", "C"} {
		n := r.newNode(id)
		n.sys, n.replies = actor.NewSystem(actor.WithExecutor(n.ex)), plane.NewReplies()
		r.hosts = append(r.hosts, n)
		if err := r.startHost(n); err != nil {
			return err
		}
		// Each host's process has a client of its own, on its clock, with
		// its own draw of call ids; a reply comes to it in process when its
		// host steps the call, or else from the journal.
		var cex actor.Executor = n.ex
		if r.sharedSeed {
			cex = &seededExecutor{skewExecutor: n.ex}
		}
		c, err := plane.NewClient(plane.ClientConfig{Store: r.base, Kernels: simKernel(), Executor: cex, Replies: n.replies,
			Activator: simActivation{n}})
		if err != nil {
			return err
		}
		r.clients = append(r.clients, c)
	}
	for _, id := range []string{"pool1", "pool2"} {
		n := r.newNode(id)
		r.pools = append(r.pools, n)
		if err := r.startTask(n, r.runPool); err != nil {
			return err
		}
	}
	r.timerW, r.reap = r.newNode("timers"), r.newNode("reapers")
	if err := r.startTask(r.timerW, r.runTimer); err != nil {
		return err
	}
	if err := r.startTask(r.reap, r.runReapers); err != nil {
		return err
	}
	orchNode := r.newNode("orch")
	orchNode.sys = actor.NewSystem(actor.WithExecutor(orchNode.ex))
	orchNode.st = r.base.Restart(memstore.WithHook(r.hook(orchNode)))
	orch, err := plane.StartOrchestrator(env.Ctx, orchNode.sys.Root(), plane.OrchestratorConfig{
		ID: "orch", Store: orchNode.st, Universes: []string{universe}, LeaseTTL: simTTL})
	if err != nil {
		return err
	}
	defer orch.Stop(env.Ctx)
	c := r.clients[0]

	acked := map[string]ack{} // idempotency key → where it went
	relays := map[string]string{}
	alarms := map[string]string{}
	// The doomed world is archived right after an effect of its own is
	// sent, at a seeded point, so the archive races its published effects.
	archiveAt := 2 + int(lb.Uint64()%uint64(simOps-4))
	swell := lb.Uint64()%40 == 0 // a state over the bound is costly (seconds): a few seeds
	callers := map[*plane.Client]bool{}
	// A world created mid-run, never placed, whose first calls two nodes
	// take at once: both activate it while the faults strike.
	freshAt := int(lb.Uint64() % uint64(simOps))
	var fresh *freshRace
	for i := range simOps {
		if i == freshAt {
			if fresh, err = r.raceFresh(); err != nil {
				return err
			}
		}
		w := simWorlds[lb.Uint64()%uint64(len(simWorlds))]
		key := fmt.Sprint("k", i)
		var v any
		switch x := lb.Uint64() % 8; {
		case i == archiveAt || (x == 7 && !r.archived):
			w, v = simDoomed, Echo{Key: key}
		case x == 0 || x == 7:
			v = Add{By: int64(i), Key: key}
		case x == 1:
			v = Echo{Key: key}
		case x == 2:
			to := simAll[lb.Uint64()%uint64(len(simAll))]
			v, relays[key] = Relay{To: to, Key: key}, to
		case x == 3:
			v, alarms[key] = Alarm{AfterMs: int64(lb.Uint64() % 1500), Key: key}, w
		case x == 4:
			cl := r.clients[lb.Uint64()%uint64(len(r.clients))]
			callers[cl] = true
			if err := r.call(cl, w, key); err != nil {
				return err
			}
			v = Add{By: 1, Key: key}
		default: // a step over a kernel limit
			switch y := lb.Uint64() % 3; {
			case swell:
				swell = false
				v, r.limited[key] = SimSwell{Key: key}, "swell"
				r.stats.swells++
			case y == 0:
				v, r.limited[key] = SimShout{Key: key}, "shout"
				r.stats.shouts++
			case y == 1:
				v, r.limited[key] = SimSpew{Key: key}, "spew"
				r.stats.spews++
			default:
				v, r.limited[key] = SimFar{Key: key}, "far"
				r.stats.farTimers++
			}
		}
		a, err := c.Send(env.Ctx, w, v, key)
		if err != nil {
			return err
		}
		acked[key] = ack{w, a.Seq}
		if i == archiveAt {
			if err := r.sleep(time.Duration(lb.Uint64()%400) * time.Millisecond); err != nil {
				return err
			}
			if err := r.archive(); err != nil {
				return err
			}
		}
		if err := r.fault(); err != nil {
			return err
		}
		if err := r.supervise(); err != nil {
			return err
		}
		if err := r.sleep(time.Duration(lb.Uint64()%200) * time.Millisecond); err != nil {
			return err
		}
	}
	if len(callers) > 1 {
		r.stats.callClients++
	}
	// Heal: no more faults, nobody paused, everything that is down
	// started again; then wait until every queue is empty and every world
	// drained.
	r.healed.Store(true)
	r.panics.Store(false)
	for _, n := range append(append(slices.Clone(r.hosts), r.pools...), r.timerW, r.reap) {
		r.resume(n)
	}
	if err := r.quiesce(); err != nil {
		return err
	}
	if err := r.check(acked, relays, alarms); err != nil {
		return err
	}
	if err := fresh.check(r); err != nil {
		return err
	}
	for _, n := range r.hosts {
		if err := n.host.Stop(env.Ctx); err != nil {
			return err
		}
	}
	for _, n := range append(slices.Clone(r.pools), r.timerW, r.reap) {
		if _, err := n.scope.Close(env.Ctx); err != nil {
			return err
		}
	}
	return nil
}

// simFresh is the world created mid-run and activated by its first calls.
const simFresh = "s5"

// freshRace is the two first calls to simFresh, each from another node's
// client, running beside the driver (which goes on injecting faults and
// restarting what fails).
type freshRace struct {
	pids    []actor.PID
	mu      sync.Mutex
	answers map[string][]byte // call id → reply
	errs    []error
}

func (r *planeSimRun) raceFresh() (*freshRace, error) {
	env := r.env
	if _, err := r.base.CreateWorld(env.Ctx, universe, simFresh, nil); err != nil {
		return nil, err
	}
	r.stats.freshRaces++
	f := &freshRace{answers: map[string][]byte{}}
	first := int(env.Lab.Uint64() % uint64(len(r.clients)))
	for _, ci := range []int{first, (first + 1) % len(r.clients)} {
		c := r.clients[ci]
		ex := r.clientEx(c)
		id := c.NewCallID()
		if r.callIDs[id] {
			return nil, fmt.Errorf("first call to %s: call id %s was drawn before, by this or another client", simFresh, id)
		}
		r.callIDs[id] = true
		pid, err := env.Root.Go("fresh-call:"+id, func(context.Context) error {
			for try := 0; try < 60; try++ {
				ctx, cancel := actor.WithDeadline(env.Ctx, ex, ex.Now().Add(3*time.Second))
				rep, err := c.CallWithID(ctx, simFresh, id, Get{})
				cancel()
				if err == nil {
					f.mu.Lock()
					f.answers[id] = rep
					f.mu.Unlock()
					return nil
				}
				if env.Ctx.Err() != nil {
					return nil
				}
			}
			f.mu.Lock()
			f.errs = append(f.errs, fmt.Errorf("call %s to %s unanswered for three minutes: %s", id, simFresh, r.diag(simFresh)))
			f.mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
		f.pids = append(f.pids, pid)
	}
	return f, nil
}

// check waits for both calls and checks that each was answered once, from
// a journal that holds each once, replayed to the same state.
func (f *freshRace) check(r *planeSimRun) error {
	if f == nil {
		return nil
	}
	ctx := r.env.Ctx
	for _, p := range f.pids {
		if _, err := p.Wait(ctx); err != nil {
			return err
		}
	}
	if len(f.errs) > 0 {
		return f.errs[0]
	}
	if len(f.answers) != 2 {
		return fmt.Errorf("%s: %d calls answered, want 2", simFresh, len(f.answers))
	}
	for id, rep := range f.answers {
		var n int64
		if err := world.Decode(rep, &n); err != nil || n != 0 {
			return fmt.Errorf("%s: call %s answered %v (%v), want 0", simFresh, id, n, err)
		}
	}
	journal, err := journalOf(ctx, r.base, simFresh)
	if err != nil {
		return err
	}
	seen := map[string]int{}
	for _, e := range journal {
		var rec stepRecord
		if err := event.Unmarshal(e.Payload, &rec); err != nil {
			return err
		}
		seen[rec.Input.CallID]++
	}
	for id := range f.answers {
		if seen[id] != 1 {
			return fmt.Errorf("%s: call %s journaled %d times, want once (journal %v)", simFresh, id, seen[id], seen)
		}
	}
	if len(journal) != 2 {
		return fmt.Errorf("%s: %d journal records, want the 2 calls", simFresh, len(journal))
	}
	if _, err := parityOf(ctx, r.base, simFresh, simDef()); err != nil {
		return fmt.Errorf("%s: %w", simFresh, err)
	}
	return nil
}

// archive ends the doomed world while its effects are published: the
// archive withdraws the unclaimed ones in its own transaction; the ones
// already claimed may finish, and are noted as allowed to.
func (r *planeSimRun) archive() error {
	ctx := r.env.Ctx
	r.execMu.Lock()
	if _, err := r.base.SetWorldStatus(ctx, simDoomed, store.WorldArchived, "sim"); err != nil {
		r.execMu.Unlock()
		return err
	}
	r.archived, r.afterArchive = true, len(r.execLog)
	r.execMu.Unlock()
	items, err := r.base.ListEffects(ctx, simDoomed, 0, 1000)
	if err != nil {
		return err
	}
	r.inflight = map[string]bool{}
	for _, it := range items {
		if it.State == vocab.EffectInflight {
			r.inflight[it.IntentHash] = true
		}
	}
	r.stats.archives++
	r.stats.inflightAtArchive += len(r.inflight)
	return nil
}

// call makes a call to w with a deadline on its client's clock, retried
// under the same call id (so the inbox holds it once) while the plane is
// hurt. Every id any client draws must be new: a call id two processes
// share answers one call with the other's reply.
func (r *planeSimRun) call(c *plane.Client, w, key string) error {
	id := c.NewCallID()
	if r.callIDs[id] {
		return fmt.Errorf("call %s: call id %s was drawn before, by this or another client", key, id)
	}
	r.callIDs[id] = true
	ex := r.clientEx(c)
	for try := 0; ; {
		ctx, cancel := actor.WithDeadline(r.env.Ctx, ex, ex.Now().Add(3*time.Second))
		rep, err := c.CallWithID(ctx, w, id, Get{})
		cancel()
		if err == nil {
			r.stats.calls++
			r.replies[id] = simReply{w, rep}
			return nil
		}
		if r.env.Ctx.Err() != nil {
			return err
		}
		if try++; try == 20 {
			return fmt.Errorf("call %s to %s unanswered for a minute: %v: %s", key, w, err, r.diag(w))
		}
		if err := r.supervise(); err != nil {
			return err
		}
	}
}

func (r *planeSimRun) clientEx(c *plane.Client) actor.Executor {
	return r.hosts[slices.Index(r.clients, c)].ex
}

// diag describes where a world stands, for a failure's message.
func (r *planeSimRun) diag(w string) string {
	ctx := r.env.Ctx
	l, _, _ := r.base.GetLease(ctx, w)
	a, _, _ := r.base.GetAssignment(ctx, w)
	cur, _ := r.base.Cursor(ctx, w)
	items, _ := r.base.ReadInbox(ctx, w, 0, 0)
	ws, _ := r.base.ListWorkers(ctx)
	out := fmt.Sprintf("now %v lease %+v assignment %+v cursor %d of %d items workers %+v", r.env.Lab.Now(), l, a, cur, len(items), ws)
	for _, n := range r.hosts {
		held, active := n.host.Worlds()
		out += fmt.Sprintf("; %s gen %d down %v paused %v err %v holds %v (%d active)", n.name, n.gen, n.down, n.paused, n.host.Err(), held, active)
	}
	return out
}

// fault injects at most one seeded fault after an operation.
func (r *planeSimRun) fault() error {
	lb := r.env.Lab
	pick := func(ns []*simNode) *simNode { return ns[lb.Uint64()%uint64(len(ns))] }
	switch x := lb.Uint64() % 24; {
	case x == 0: // a host dies and comes back later
		n := pick(r.hosts)
		if n.down || n.paused {
			return nil
		}
		r.stats.hostCrashes++
		r.crash(n)
		return r.sleep(time.Duration(lb.Uint64()%1500) * time.Millisecond)
	case x == 1: // a pool, or the timer worker, dies
		n := pick(append(slices.Clone(r.pools), r.timerW))
		if n.down || n.paused {
			return nil
		}
		if n == r.timerW {
			r.stats.timerCrashes++
		} else {
			r.stats.poolCrashes++
		}
		r.crash(n)
		return r.sleep(time.Duration(lb.Uint64()%1500) * time.Millisecond)
	case x == 2 || x == 3: // a worker freezes past its TTL, then thaws
		n := pick(append(append(slices.Clone(r.hosts), r.pools...), r.timerW))
		if n.down || n.paused {
			return nil
		}
		r.stats.pauses++
		n.paused = true
		lb.AfterFunc(time.Duration(500+lb.Uint64()%1500)*time.Millisecond, func() { r.resume(n) })
	case x == 4: // the next world step panics: its host fails
		r.panics.Store(true)
	case x == 5: // a pool's store stops answering while it executes, past its promise
		for _, n := range r.pools {
			if n.down || n.paused || !r.echo.executing(fmt.Sprint(n.name, "-", n.gen)) {
				continue
			}
			r.stats.pausesMidEffect++
			n.paused = true
			lb.AfterFunc(2*simTTL+time.Duration(lb.Uint64()%1000)*time.Millisecond, func() { r.resume(n) })
			break
		}
	}
	return nil
}

// quiesce waits, restarting what fails, until no effect or timer is
// queued and every active world's inbox is drained: no world is stuck
// behind an input. An archived world's inbox is never drained again (the
// receipts of its in-flight effects still land there).
func (r *planeSimRun) quiesce() error {
	ctx := r.env.Ctx
	for deadline := r.env.Lab.Now().Add(2 * time.Minute); ; {
		if err := r.supervise(); err != nil {
			return err
		}
		d, err := r.base.QueueDepths(ctx)
		if err != nil {
			return err
		}
		done := d.EffectsPending+d.EffectsInflight+d.TimersScheduled+d.TimersClaimed == 0
		for _, w := range simWorlds {
			items, err := r.base.ReadInbox(ctx, w, 0, 0)
			if err != nil {
				return err
			}
			cur, err := r.base.Cursor(ctx, w)
			if err != nil {
				return err
			}
			done = done && (len(items) == 0 || cur == items[len(items)-1].Seq)
		}
		if done {
			return nil
		}
		if !r.env.Lab.Now().Before(deadline) {
			diag := fmt.Sprintf("now %v;", r.env.Lab.Now())
			for _, w := range simWorlds {
				ts, _ := r.base.ListTimers(ctx, w, 100)
				for _, t := range ts {
					diag += fmt.Sprintf(" %s timer %.8s %s due %v attempt %d by %s;", w, t.IntentHash, t.State, t.DeliverAt, t.Attempt, t.ClaimedBy)
				}
			}
			for _, n := range append(append(slices.Clone(r.hosts), r.pools...), r.timerW, r.reap) {
				diag += fmt.Sprintf(" %s gen %d down %v paused %v;", n.name, n.gen, n.down, n.paused)
			}
			for _, w := range simWorlds {
				diag += " " + w + ": " + r.diag(w) + ";"
			}
			return fmt.Errorf("the plane did not quiesce after healing: %+v: %s", d, diag)
		}
		if err := r.sleep(50 * time.Millisecond); err != nil {
			return err
		}
	}
}

// stepRecord is what the checks read of a journal record (world/doc.go).
type stepRecord struct {
	Intents []string `cbor:"intents"`
	Timers  []string `cbor:"timers"`
	Input   struct {
		Seq     uint64 `cbor:"seq"`
		Kind    string `cbor:"kind"`
		Payload []byte `cbor:"payload"`
		CallID  string `cbor:"call_id"`
	} `cbor:"input"`
	Outcome   string   `cbor:"outcome"`
	Error     string   `cbor:"error"`
	Cancels   []string `cbor:"cancels"`
	ReplyHash string   `cbor:"reply_hash"`
}

// firedTimer returns the intent hash of the timer whose firing rec
// journaled (through the inbox or stepped directly by its holder), and
// whether it ran (a firing of a timer already fired is dropped as stale).
func (rec stepRecord) firedTimer() (hash string, ran bool, err error) {
	if rec.Input.Kind != vocab.KindTimer {
		return "", false, nil
	}
	var m struct {
		IntentHash string `cbor:"intent_hash"`
	}
	if err := event.Unmarshal(rec.Input.Payload, &m); err != nil {
		return "", false, err
	}
	return m.IntentHash, rec.Outcome != string(world.OutcomeStale), nil
}

func (r *planeSimRun) check(acked map[string]ack, relays, alarms map[string]string) error {
	ctx := r.env.Ctx
	applied, got, fired := map[string]int{}, map[string]int{}, map[string]int{}
	delivered := map[string]bool{} // Msg keys whose send was answered ok
	callRecs := map[string][]simCallRec{}
	doomedIntents := map[string]bool{}
	for _, w := range simAll {
		doomed := w == simDoomed
		// Replay parity: the journal replayed from genesis is the state
		// restored from the store and the state its host holds, byte for
		// byte.
		snap, err := parityOf(ctx, r.base, w, simDef())
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		journal, err := journalOf(ctx, r.base, w)
		if err != nil {
			return err
		}
		full, err := world.Replay(simDef(), w, world.Snapshot{}, journal)
		if err != nil {
			return fmt.Errorf("%s: replay: %w", w, err)
		}
		if string(full.State()) != string(snap.State) {
			return fmt.Errorf("%s: replay and restore differ", w)
		}
		if l, ok, _ := r.base.GetLease(ctx, w); ok {
			for _, n := range r.hosts {
				if n.name != l.Holder {
					continue
				}
				if hs, ok := n.host.State(w); ok && (string(hs.State) != string(full.State()) || hs.Height != full.Height()) {
					return fmt.Errorf("%s: host %s holds height %d, the journal replays to %d (or other bytes)", w, n.name, hs.Height, full.Height())
				}
			}
		}
		v, err := value(snap, w)
		if err != nil {
			return err
		}
		for _, k := range v.Seen {
			if r.limited[k] != "" {
				return fmt.Errorf("%s applied %s, a step over the %s limit", w, k, r.limited[k])
			}
			if acked[k].world != w {
				return fmt.Errorf("%s applied %s, sent to %s", w, k, acked[k].world)
			}
			applied[k]++
		}
		for _, k := range v.Got {
			if relays[k] != w {
				return fmt.Errorf("%s got message %s, relayed to %q", w, k, relays[k])
			}
			got[k]++
			r.stats.messages++
		}
		for _, k := range v.Fired {
			if alarms[k] != w {
				return fmt.Errorf("%s fired %s, armed on %q", w, k, alarms[k])
			}
			fired[k]++
			r.stats.fired++
		}
		// Every intent the journal holds has exactly one terminal receipt:
		// done in the store, one receipt item in the inbox, consumed once.
		items, err := r.base.ReadInbox(ctx, w, 0, 0)
		if err != nil {
			return err
		}
		receipts, timerItems := map[string]int{}, map[string]int{}
		okSends := map[string]bool{} // fabric.send intents with an ok receipt
		for _, it := range items {
			switch it.Kind {
			case vocab.KindReceipt:
				var rc world.Receipt
				if err := world.Decode(it.Payload, &rc); err != nil {
					return fmt.Errorf("%s: receipt %d: %w", w, it.Seq, err)
				}
				receipts[rc.IntentHash]++
				if rc.Kind == world.KindFabricSend && rc.Status == vocab.ReceiptOK {
					okSends[rc.IntentHash] = true
				}
			case vocab.KindTimer:
				timerItems[it.DedupeKey]++
			}
		}
		consumed := map[string]int{}
		for _, h := range v.Receipts {
			consumed[h]++
		}
		// Every timer the journal sets fired once: one firing ran, whether
		// its holder stepped it or it came through the inbox (at most once
		// there); any other was dropped as stale.
		ran := map[string]int{}
		for _, e := range journal {
			var rec stepRecord
			if err := event.Unmarshal(e.Payload, &rec); err != nil {
				return err
			}
			if id := rec.Input.CallID; id != "" && rec.Input.Kind == vocab.KindCall {
				callRecs[id] = append(callRecs[id], simCallRec{w, rec.ReplyHash})
			}
			if err := r.checkLimited(w, rec, acked); err != nil {
				return err
			}
			h, ok, err := rec.firedTimer()
			if err != nil {
				return fmt.Errorf("%s: timer firing at %d: %w", w, e.RunSeq, err)
			}
			if ok {
				ran[h]++
				if rec.Input.Seq == 0 {
					r.stats.directFirings++
				} else {
					r.stats.inboxFirings++
				}
			}
		}
		for _, e := range journal {
			var rec stepRecord
			if err := event.Unmarshal(e.Payload, &rec); err != nil {
				return err
			}
			for _, h := range rec.Intents {
				st, err := r.base.EffectStatus(ctx, h)
				if err != nil {
					return fmt.Errorf("%s: intent %.8s: %w", w, h, err)
				}
				if doomed {
					// The archive withdrew what no adapter had claimed;
					// the rest finished, and their receipts may wait in
					// an inbox that is no longer drained.
					doomedIntents[h] = true
					switch {
					case st.State == vocab.EffectWithdrawn:
						r.stats.withdrawn++
					case st.State != vocab.EffectDone:
						return fmt.Errorf("%s: intent %.8s is %s after the archive and healing", w, h, st.State)
					case receipts[h] > 1 || consumed[h] > receipts[h]:
						return fmt.Errorf("%s: intent %.8s has %d receipts in the inbox, %d consumed", w, h, receipts[h], consumed[h])
					}
					continue
				}
				if st.State != vocab.EffectDone || st.Receipt == nil {
					return fmt.Errorf("%s: intent %.8s is %s after healing", w, h, st.State)
				}
				if receipts[h] != 1 || consumed[h] != 1 {
					return fmt.Errorf("%s: intent %.8s has %d receipts in the inbox, %d consumed", w, h, receipts[h], consumed[h])
				}
				r.stats.receipts++
				if okSends[h] {
					r.fabMu.Lock()
					key, ok := r.fabKey[h]
					r.fabMu.Unlock()
					if !ok {
						return fmt.Errorf("%s: fabric.send %.8s has an ok receipt and was never executed", w, h)
					}
					delivered[key] = true
				}
			}
			for _, h := range rec.Timers {
				if ran[h] != 1 || timerItems[store.TimerKey(h)] > 1 {
					return fmt.Errorf("%s: timer %.8s fired %d times (%d in the inbox)", w, h, ran[h], timerItems[store.TimerKey(h)])
				}
			}
		}
		if len(consumed) != len(receipts) && !doomed {
			return fmt.Errorf("%s: %d receipts in the inbox for %d consumed", w, len(receipts), len(consumed))
		}
		// Epochs only rise; no stale write was accepted: the commits
		// every host saw land are in epoch and height order, none above
		// the lease's epoch, and a commit at an older epoch is fenced.
		if !slices.IsSorted(r.acquired[w]) {
			return fmt.Errorf("%s: epochs acquired out of order %v", w, r.acquired[w])
		}
		cs := r.commits[w]
		for i := 1; i < len(cs); i++ {
			if cs[i].Epoch < cs[i-1].Epoch || cs[i].Height <= cs[i-1].Height {
				return fmt.Errorf("%s: commits out of order (a stale write?) %+v", w, cs)
			}
		}
		if l, ok, _ := r.base.GetLease(ctx, w); ok {
			if len(cs) > 0 && cs[len(cs)-1].Epoch > l.Epoch {
				return fmt.Errorf("%s: a commit at epoch %d above the lease's %d", w, cs[len(cs)-1].Epoch, l.Epoch)
			}
			if l.Epoch > 1 && !doomed {
				cur, _ := r.base.Cursor(ctx, w)
				head, _ := r.base.Head(ctx, w)
				if _, err := r.base.Commit(ctx, w, l.Epoch-1, store.CommitBatch{ExpectedCursor: cur, NewCursor: cur, ExpectedHead: head}); !errors.Is(err, store.ErrFenced) {
					return fmt.Errorf("%s: a commit at the stale epoch %d: %v", w, l.Epoch-1, err)
				}
			}
		}
		// Every acknowledged ingress of w was drained.
		cur, _ := r.base.Cursor(ctx, w)
		for _, k := range sortedKeys(acked) {
			if a := acked[k]; a.world == w && a.seq > cur && !doomed {
				return fmt.Errorf("%s: acknowledged %s (seq %d) past the cursor %d", w, k, a.seq, cur)
			}
		}
	}
	for _, k := range sortedKeys(acked) {
		want := 1
		if r.limited[k] != "" || (acked[k].world == simDoomed && applied[k] == 0) {
			want = 0 // over a limit, or left in the archived world's inbox
		}
		if applied[k] != want {
			return fmt.Errorf("acknowledged %s journaled %d times", k, applied[k])
		}
	}
	// One reply per call id, from its own step: the reply a caller got is
	// the one journaled by the step that consumed its call, and no call id
	// was consumed twice.
	for _, id := range sortedKeys(callRecs) {
		if len(callRecs[id]) != 1 {
			return fmt.Errorf("call id %s consumed by %d steps: %+v", id, len(callRecs[id]), callRecs[id])
		}
	}
	for _, id := range sortedKeys(r.replies) {
		rep, recs := r.replies[id], callRecs[id]
		if len(recs) != 1 || recs[0].world != rep.world || recs[0].replyHash != world.Hash(rep.value) {
			return fmt.Errorf("call %s to %s got a reply (hash %s) its step did not journal: %+v", id, rep.world, world.Hash(rep.value), recs)
		}
		r.stats.replies++
	}
	// No effect of the archived world ran after the archive committed,
	// unless an adapter had claimed it before.
	r.execMu.Lock()
	late := slices.Clone(r.execLog[r.afterArchive:])
	r.execMu.Unlock()
	for _, h := range late {
		if doomedIntents[h] && !r.inflight[h] {
			return fmt.Errorf("%s: effect %.8s executed after the archive, unclaimed when it committed", simDoomed, h)
		}
	}
	// A message is delivered at most once (message_id = intent hash),
	// and exactly once when its sender's receipt says ok; a send that
	// ran out of attempts (an error or timeout receipt) may not have
	// landed.
	for _, k := range sortedKeys(relays) {
		if got[k] > 1 || (delivered[k] && got[k] != 1 && relays[k] != simDoomed) {
			return fmt.Errorf("message %s delivered %d times (receipt ok: %v)", k, got[k], delivered[k])
		}
	}
	for _, k := range sortedKeys(alarms) {
		if fired[k] != 1 {
			return fmt.Errorf("timer %s fired %d times", k, fired[k])
		}
	}
	r.echo.mu.Lock()
	defer r.echo.mu.Unlock()
	for _, claim := range sortedKeys(r.echo.calls) {
		if n := r.echo.calls[claim]; n > simEchoTry {
			return fmt.Errorf("claim %s executed %d times (%d attempts allowed)", claim, n, simEchoTry)
		}
	}
	// No execution outlives the liveness promise its claim rides on, so
	// two executions of one effect, under two claims, never run at once.
	for _, h := range sortedKeys(r.echo.spans) {
		es := slices.Clone(r.echo.spans[h])
		slices.SortStableFunc(es, func(x, y *echoSpan) int { return x.start.Compare(y.start) })
		for i := 1; i < len(es); i++ {
			if prev := es[i-1]; prev.end.IsZero() || prev.end.After(es[i].start) {
				return fmt.Errorf("effect %.8s: execution of claim %s (from %v to %v) overlaps that of claim %s (from %v)",
					h, prev.claim, prev.start, prev.end, es[i].claim, es[i].start)
			}
		}
	}
	return nil
}

type simCallRec struct{ world, replyHash string }

// seededExecutor is a node's executor whose randomness restarts from the
// same seed in every process: the fault that independent entropy rules out.
type seededExecutor struct {
	skewExecutor
	n uint64
}

func (e *seededExecutor) Uint64() uint64 { e.n++; return e.n * 0x9e3779b97f4a7c15 }

// TestPlaneSimulationCatchesSharedCallIDs: clients whose call ids come
// from one shared seed are caught by the simulation's oracles (an id drawn
// twice, or a reply that is not its call's), so its passing seeds say the
// ids of independent clients never collide.
func TestPlaneSimulationCatchesSharedCallIDs(t *testing.T) {
	for seed := range uint64(200) {
		var stats simStats
		stats.poolFaults = map[string]int{}
		res := lab.Run(lab.Config{Seed: seed, Name: "plane-sim-shared-ids"}, func(env *lab.Env) error {
			return (&planeSimRun{env: env, stats: &stats, sharedSeed: true}).run()
		})
		if res.Failure == nil {
			continue
		}
		if !strings.Contains(res.Failure.Message, "was drawn before") {
			t.Fatalf("seed %d failed, but not on a shared call id: %s", seed, res.Failure.Message)
		}
		return
	}
	t.Fatal("no seed caught two clients drawing the same call ids")
}

// checkLimited checks the journal record of a step over a kernel limit: an
// error outcome that asked for nothing and kept a bounded error text.
func (r *planeSimRun) checkLimited(w string, rec stepRecord, acked map[string]ack) error {
	if rec.Input.Kind != vocab.KindEvent {
		return nil
	}
	for k, kind := range r.limited {
		if a := acked[k]; a.world != w || a.seq != rec.Input.Seq {
			continue
		}
		if rec.Outcome != string(world.OutcomeError) || len(rec.Intents)+len(rec.Timers)+len(rec.Cancels) > 0 || len(rec.Error) > world.MaxErrorBytes || rec.Error == "" {
			return fmt.Errorf("%s: the step over the %s limit (%s) journaled outcome %q with %d intents, %d timers, %d bytes of error",
				w, kind, k, rec.Outcome, len(rec.Intents), len(rec.Timers), len(rec.Error))
		}
	}
	return nil
}

// TestPlaneSimulation runs the whole plane under the lab over 200 seeds
// (ORRERY_SEEDS=N for more, ORRERY_SEED=s for one); a failure leaves a
// crash pack that replays it.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func TestPlaneSimulation(t *testing.T) {
	stats := simStats{poolFaults: map[string]int{}}
	lab.Check(t, "plane-sim", planeSim(&stats), lab.WithSeeds(200),
		lab.WithFaults(lab.Faults{Buggify: 0.01, DelayWakeups: 0.02}))
	// The seeds must actually have hurt the plane, and exercised every
	// path, or the checks prove nothing (a single ORRERY_SEED may not).
	if _, one := os.LookupEnv(lab.EnvSeed); !one {
		counts := []struct {
			what string
			n    int
		}{{"host crashes", stats.hostCrashes}, {"host failures", stats.hostFailures},
			{"pool crashes", stats.poolCrashes}, {"timer worker crashes", stats.timerCrashes}, {"pauses", stats.pauses},
			{"store faults", stats.storeFaults}, {"commits", stats.commits}, {"receipts", stats.receipts},
			{"timers fired", stats.fired}, {"fabric messages", stats.messages}, {"calls", stats.calls},
			{"timers stepped directly", stats.directFirings}, {"timers fired through the inbox", stats.inboxFirings},
			{"nodes with a skewed clock", stats.skewedNodes}, {"unavailable store errors", stats.unavailable},
			{"adapter calls that took effect and failed", stats.lostReplies},
			{"host commits that took effect and failed", stats.lostCommits},
			{"inbox hints lost on their way to a host", stats.lostHints},
			{"pools frozen past their promise mid-execution", stats.pausesMidEffect},
			{"oversized errors", stats.shouts}, {"steps with too many intents", stats.spews},
			{"states over the bound", stats.swells}, {"far-future timers", stats.farTimers},
			{"archives", stats.archives}, {"effects withdrawn by an archive", stats.withdrawn},
			{"effects in flight at an archive", stats.inflightAtArchive},
			{"claims of dead pools requeued before their TTL", stats.orphans},
			{"replies checked against their step", stats.replies}, {"seeds with calls from several clients", stats.callClients},
			{"worlds activated by two nodes at once", stats.freshRaces}}
		// Every adapter path met a store fault, both before and after
		// taking effect (fabric's send included). ReleaseEffect is not
		// among them: a pool releases its claims when stopped, which
		// happens here only after healing.
		for _, op := range []string{"claim", "complete_many", "send", "watch"} {
			counts = append(counts, struct {
				what string
				n    int
			}{"store faults on the pools' " + op, stats.poolFaults[op]})
		}
		for _, op := range []string{"claim", "complete", "send"} {
			counts = append(counts, struct {
				what string
				n    int
			}{"lost replies of the pools' " + op, stats.poolFaults["lost "+op]})
		}
		for _, c := range counts {
			if c.n == 0 {
				t.Errorf("the simulation injected or exercised no %s: %+v", c.what, stats)
			}
		}
	}
	t.Logf("over the seeds: %+v", stats)
}
