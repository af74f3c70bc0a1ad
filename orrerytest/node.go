package orrerytest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// Test runs body in virtual time: a testing/synctest bubble, in which the
// clock starts at midnight UTC on 2000-01-01 and moves only when every
// goroutine of the test waits on it. Every Node and World of the kit is
// made inside it.
func Test(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, body)
}

// Definition is a world definition: a *world.Def[S] of any state type.
type Definition interface{ Kernel() world.Kernel }

// Option shapes a Node (and the World NewWorld makes).
type Option func(*config)

type config struct {
	worlds    []world.Kernel
	workflows []workflow.Workflow
	fakes     []*Fake
	adapters  []adapter.Registration
	id        string
	callLimit time.Duration
	node      func(*node.Config)
}

// Worlds adds world definitions the node runs beside NewWorld's.
func Worlds(defs ...Definition) Option {
	return func(c *config) {
		for _, d := range defs {
			c.worlds = append(c.worlds, d.Kernel())
		}
	}
}

// Workflows adds durable workflows the node runs (Node.Runs starts and
// reads them).
func Workflows(wfs ...workflow.Workflow) Option {
	return func(c *config) { c.workflows = append(c.workflows, wfs...) }
}

// Fakes serves effects with fake adapters (see Fake). A fake for
// http.request or fabric.send replaces the built-in adapter.
func Fakes(fakes ...*Fake) Option {
	return func(c *config) { c.fakes = append(c.fakes, fakes...) }
}

// Adapters serves effects with real adapters, each with its retry
// policy, as a production node would.
func Adapters(regs ...adapter.Registration) Option {
	return func(c *config) { c.adapters = append(c.adapters, regs...) }
}

// ID names the world NewWorld creates (default: the definition's name).
func ID(id string) Option { return func(c *config) { c.id = id } }

// CallLimit bounds, in virtual time, how long Call waits for a reply
// before it fails the test (default one hour): a world that never
// answers fails the test instead of hanging it.
func CallLimit(d time.Duration) Option { return func(c *config) { c.callLimit = d } }

// NodeConfig adjusts the node's configuration last: lease and claim
// TTLs, the timer lag, passivation. The kit's defaults are production's.
func NodeConfig(f func(*node.Config)) Option { return func(c *config) { c.node = f } }

// Node is one Orrery node on an in-memory store, in virtual time: the
// hosts, orchestrator, effect pool, timer worker and (with Workflows) the
// workflow worker of a production node. Crash and Restart kill it and
// start it again on the same store, as a process crash and its restart
// would. Everything it starts stops when the test ends.
type Node struct {
	t       testing.TB
	ctx     context.Context
	cfg     config
	st      *memstore.Store
	kernels plane.Kernels
	wfs     *workflow.Workflows
	n       *node.Node // nil while crashed
	sends   int        // Send's keys: one count per node, so two handles on a world never share a key
}

// NewNode starts a node in the current virtual-time test (see Test).
func NewNode(t testing.TB, opts ...Option) *Node {
	t.Helper()
	if !inBubble() {
		t.Fatalf("orrerytest: the kit runs in virtual time: call it inside orrerytest.Test(t, func(t *testing.T) { ... })")
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.callLimit <= 0 {
		cfg.callLimit = time.Hour
	}
	if len(cfg.worlds) == 0 && len(cfg.workflows) == 0 {
		t.Fatalf("orrerytest: a node needs a world definition (Worlds) or a workflow (Workflows)")
	}
	n := &Node{t: t, ctx: context.Background(), cfg: cfg, st: memstore.New()}
	var err error
	if len(cfg.worlds) > 0 {
		if n.kernels, err = kernelsOf(cfg.worlds); err != nil {
			t.Fatalf("orrerytest: %v", err)
		}
	} else {
		n.kernels = plane.Kernels{}
	}
	if len(cfg.workflows) > 0 {
		if n.wfs, err = workflow.NewWorkflows(cfg.workflows...); err != nil {
			t.Fatalf("orrerytest: %v", err)
		}
	}
	n.start()
	t.Cleanup(func() {
		if n.n != nil {
			if err := n.n.Stop(context.Background()); err != nil && !errors.Is(err, node.ErrStopped) {
				t.Errorf("orrerytest: stopping the node: %v", err)
			}
		}
	})
	return n
}

// inBubble reports whether the caller runs in a synctest bubble, where
// synctest.Wait does not panic.
func inBubble() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	synctest.Wait()
	return true
}

func (n *Node) start() {
	n.t.Helper()
	regs := slices.Clone(n.cfg.adapters)
	for _, f := range n.cfg.fakes {
		regs = append(regs, adapter.Register(f, f.policy))
	}
	kernels := n.kernels
	if len(kernels) == 0 {
		// A node runs at least one universe; a workflow-only node gets
		// the kit's empty one, which no world is created in.
		idle := world.New[struct{}]("orrerytest.idle", 1)
		kernels = plane.Kernels{idle.Name(): idle.Kernel()}
	}
	c := node.Config{Worker: "orrerytest", Store: n.st, Kernels: kernels, Adapters: regs, Workflows: n.wfs}
	if n.cfg.node != nil {
		n.cfg.node(&c)
	}
	nn, err := node.Start(n.ctx, c)
	if err != nil {
		n.t.Fatalf("orrerytest: starting the node: %v", err)
	}
	n.n = nn
}

// live returns the running node, failing the test while it is crashed.
func (n *Node) live() *node.Node {
	n.t.Helper()
	if n.n == nil {
		n.t.Fatalf("orrerytest: the node is crashed: Restart it first")
	}
	return n.n
}

// Context is the context the kit calls the node with.
func (n *Node) Context() context.Context { return n.ctx }

// Client is the node's plane client, for what the kit does not wrap.
func (n *Node) Client() *plane.Client { return n.live().Client() }

// Store is the node's in-memory store.
func (n *Node) Store() *memstore.Store { return n.st }

// Runs is the node's workflow client (Start, Signal, Get, Result through
// a workflow.Def); nil without Workflows.
func (n *Node) Runs() *workflow.Client { return n.live().Runs() }

// Node is the running node.Node, for what the kit does not wrap.
func (n *Node) Node() *node.Node { return n.live() }

// Now is the virtual time.
func (n *Node) Now() time.Time { return time.Now() }

// Create creates world id in universe (a definition's name) and returns
// its handle.
func (n *Node) Create(universe, id string) *World {
	n.t.Helper()
	if _, ok := n.kernels[universe]; !ok {
		n.t.Fatalf("orrerytest: no world definition named %q: pass it to the node with Worlds", universe)
	}
	if _, err := n.st.CreateWorld(n.ctx, universe, id, nil); err != nil {
		n.t.Fatalf("orrerytest: create %s: %v", id, err)
	}
	return &World{n: n, id: id, universe: universe}
}

// World is the handle of world id, created before (by Create, or by a
// world's own effects).
func (n *Node) World(id string) *World {
	n.t.Helper()
	rec, err := n.st.GetWorld(n.ctx, id)
	if err != nil {
		n.t.Fatalf("orrerytest: world %s: %v", id, err)
	}
	return &World{n: n, id: id, universe: rec.Universe}
}

// Advance lets d of virtual time pass: timers due in it fire, effects
// delayed by it complete, leases and claims that expire in it expire,
// each at its own instant; then it waits until the node is idle. A two
// minutes' timer takes milliseconds of the machine's time.
func (n *Node) Advance(d time.Duration) {
	n.t.Helper()
	time.Sleep(d)
	synctest.Wait()
}

// Settle waits until the node has done what it can do now: every input
// enqueued is journaled and every effect ready to run was handed to its
// adapter (a paused world's inbox counts too: resume it first). Placement and retries may take some virtual time; Settle lets
// it pass, up to one minute of it, and fails the test beyond that.
func (n *Node) Settle() {
	n.t.Helper()
	n.live() // a crashed node settles nothing
	step := time.Millisecond
	for waited := time.Duration(0); ; waited += step {
		synctest.Wait()
		q, err := n.st.QueueDepths(n.ctx)
		if err != nil {
			n.t.Fatalf("orrerytest: settle: %v", err)
		}
		if q.InboxBacklog == 0 && q.EffectsPending == 0 {
			return
		}
		if waited > time.Minute {
			n.t.Fatalf("orrerytest: the node did not settle within a minute of virtual time: %d inputs not journaled, %d effects pending", q.InboxBacklog, q.EffectsPending)
		}
		step = min(2*step, 100*time.Millisecond)
		time.Sleep(step)
	}
}

// Crash kills the node as kill -9 would: nothing is released, steps and
// effects in flight are cut off. The store keeps what was committed.
func (n *Node) Crash() {
	n.t.Helper()
	n.live().Kill(n.ctx)
	n.n = nil
	synctest.Wait()
}

// Restart starts the node again on the same store under the same worker
// name, as a crashed process restarted by its supervisor: it takes its
// worlds' leases over at once and restores their state from the journal.
// An effect claimed by the crashed node runs again once its claim
// expires (Advance past the claim TTL, 30s by default), as in production.
func (n *Node) Restart() {
	n.t.Helper()
	if n.n != nil {
		n.Crash()
	}
	n.start()
	synctest.Wait()
}

// Stop stops the node the planned way (steps and effects in flight
// finish, leases and claims are released); Restart starts it again.
func (n *Node) Stop() {
	n.t.Helper()
	if err := n.live().Stop(n.ctx); err != nil {
		n.t.Fatalf("orrerytest: stop: %v", err)
	}
	n.n = nil
}

// World is one world on a Node: send it inputs, call it, read its state,
// journal and effects.
type World struct {
	n        *Node
	id       string
	universe string
}

// NewWorld starts a Node running def (and what opts add) and creates one
// world of def on it, named by ID or else def's name.
func NewWorld(t testing.TB, def Definition, opts ...Option) *World {
	t.Helper()
	k := def.Kernel()
	n := NewNode(t, append([]Option{func(c *config) { c.worlds = append(c.worlds, k) }}, opts...)...)
	id := n.cfg.id
	if id == "" {
		id = k.Name()
	}
	return n.Create(k.Name(), id)
}

// ID is the world's id.
func (w *World) ID() string { return w.id }

// Node is the node the world runs on: Advance, Crash, Restart, Settle.
func (w *World) Node() *Node { return w.n }

// Advance is w.Node().Advance.
func (w *World) Advance(d time.Duration) { w.n.t.Helper(); w.n.Advance(d) }

// Settle is w.Node().Settle.
func (w *World) Settle() { w.n.t.Helper(); w.n.Settle() }

// Crash is w.Node().Crash.
func (w *World) Crash() { w.n.t.Helper(); w.n.Crash() }

// Restart is w.Node().Restart.
func (w *World) Restart() { w.n.t.Helper(); w.n.Restart() }

// Send enqueues v as an event with a key of its own (so each Send is a
// new input), and returns once the store holds it; Settle or a Call
// waits for it to be applied.
func (w *World) Send(v any) {
	w.n.t.Helper()
	w.n.sends++
	w.SendKey(v, "orrerytest-"+strconv.Itoa(w.n.sends))
}

// SendKey enqueues v with idempotency key key: a second send with the
// same key enqueues nothing, as for any client.
func (w *World) SendKey(v any, key string) {
	w.n.t.Helper()
	if _, err := w.n.Client().Send(w.n.ctx, w.id, v, key); err != nil {
		w.n.t.Fatalf("orrerytest: send %T to %s: %v", v, w.id, err)
	}
}

// Call sends v to w as a call and returns its handler's reply decoded
// into R. A handler error, or no reply within the CallLimit of virtual
// time, fails the test; TryCall returns them instead.
func Call[R any](w *World, v any) R {
	w.n.t.Helper()
	r, err := TryCall[R](w, v)
	if err != nil {
		w.n.t.Fatalf("orrerytest: call %T on %s: %v", v, w.id, err)
	}
	return r
}

// TryCall is Call that returns the call's error (errors.Is
// plane.ErrCallFailed for a handler's error) instead of failing.
func TryCall[R any](w *World, v any) (R, error) {
	w.n.t.Helper()
	ctx, cancel := context.WithTimeout(w.n.ctx, w.n.cfg.callLimit)
	defer cancel()
	r, err := plane.CallAs[R](ctx, w.n.Client(), w.id, v)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no reply within %s of virtual time (CallLimit): %w", w.n.cfg.callLimit, err)
	}
	return r, err
}

// State returns w's state at its head decoded into S, the state type of
// its definition.
func State[S any](w *World) S {
	w.n.t.Helper()
	// A snapshot's state is the kernel's image: the handlers' state under
	// "state", beside what the kernel awaits.
	var img struct {
		State S `cbor:"state"`
	}
	snap := w.snapshot()
	if err := decodeLarge(snap.State, &img); err != nil {
		w.n.t.Fatalf("orrerytest: the state of %s does not decode into %T: %v", w.id, img.State, err)
	}
	return img.State
}

// decodeLarge decodes canonical CBOR the kernel wrote (a state, a journal
// record): within the kernel's own limits for them, far above an input's.
func decodeLarge(b []byte, v any) error {
	dec, err := event.NewDecoder(event.DecoderOptions{MaxSize: math.MaxInt32, MaxDepth: 1024, MaxElements: event.MaxMaxElements})
	if err != nil {
		return err
	}
	return dec.Unmarshal(b, v)
}

// Height is w's journal head: how many steps it took.
func (w *World) Height() uint64 {
	w.n.t.Helper()
	return w.snapshot().Height
}

func (w *World) snapshot() world.Snapshot {
	w.n.t.Helper()
	var snap world.Snapshot
	var err error
	if w.n.n != nil {
		snap, err = w.n.n.Client().State(w.n.ctx, w.id)
	} else {
		var inst world.Instance
		inst, _, err = plane.Restore(w.n.ctx, w.n.st, w.n.kernels, w.id)
		if err == nil {
			snap = inst.Snapshot()
		}
	}
	if err != nil {
		w.n.t.Fatalf("orrerytest: the state of %s: %v", w.id, err)
	}
	return snap
}

func errUniverse(u string) error {
	return fmt.Errorf("no world definition named %q on the node", u)
}

// Eventually lets virtual time pass until cond holds, and fails the test
// when within has passed first: the wait for an outcome that takes
// several steps across worlds (a saga's end). It checks cond after 10ms,
// then at doubling intervals up to every second, so it may overshoot the
// instant cond came to hold by up to a second.
func (n *Node) Eventually(what string, within time.Duration, cond func() bool) {
	n.t.Helper()
	step := 10 * time.Millisecond
	for deadline := time.Now().Add(within); ; step = min(2*step, time.Second) {
		synctest.Wait()
		if cond() {
			return
		}
		if !time.Now().Before(deadline) {
			n.t.Fatalf("orrerytest: %s did not happen within %s of virtual time", what, within)
		}
		time.Sleep(step)
	}
}

// Idle reports whether nothing is left to do anywhere on the node: every
// inbox drained, no effect pending or in flight, no timer being fired.
// Timers not yet due do not count.
func (n *Node) Idle() bool {
	n.t.Helper()
	q, err := n.st.QueueDepths(n.ctx)
	if err != nil {
		n.t.Fatalf("orrerytest: %v", err)
	}
	return q.InboxBacklog == 0 && q.EffectsPending == 0 && q.EffectsInflight == 0 && q.TimersClaimed == 0
}

// kernelsOf maps each definition to its universe, as a binary's
// orrery.Main does (the kit does not import it: it would bring the whole
// command line into every test binary).
func kernelsOf(defs []world.Kernel) (plane.Kernels, error) {
	ks := plane.Kernels{}
	for _, k := range defs {
		if err := k.Err(); err != nil {
			return nil, err
		}
		if _, dup := ks[k.Name()]; dup {
			return nil, fmt.Errorf("two world definitions named %q", k.Name())
		}
		ks[k.Name()] = k
	}
	return ks, nil
}
