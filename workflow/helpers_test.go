package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/postgres/pgtest"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

const dsnEnv = "ORRERY_TEST_POSTGRES_DSN"

// rig is one test's store and executor. On memstore the test runs under
// the lab, in virtual time; on SQLite and PostgreSQL under the production
// executor, where nothing waits for a clock: a test that needs a lease or
// a timer to come due moves the store's clock (advance), and waits are
// bounded loops on a condition (waitFor), never timing assertions.
type rig struct {
	t       *testing.T
	backend string
	ctx     context.Context
	root    *actor.Scope
	ex      actor.Executor
	st      store.Store
	mem     *memstore.Store // memstore only: Restart gives a worker its own handle
	advance func(d time.Duration) error
	poll    time.Duration
	polls   int
}

func (r *rig) real() bool { return r.backend != "memstore" }

var backends = []string{"memstore", "sqlite", "postgres"}

// forEachBackend runs body on memstore (under the lab), SQLite and
// PostgreSQL (when the DSN is set; never skipped then).
func forEachBackend(t *testing.T, seed uint64, body func(r *rig) error) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { runOn(t, b, seed, body) })
	}
}

// onMemstore runs body under the lab on memstore.
func onMemstore(t *testing.T, seed uint64, body func(r *rig) error) {
	t.Helper()
	runOn(t, "memstore", seed, body)
}

type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time                   { return time.Now().Add(c.offset()) }
func (c *offsetClock) offset() time.Duration            { return time.Duration(c.off.Load()) }
func (c *offsetClock) advance(d time.Duration)          { c.off.Add(int64(d)) }
func (c *offsetClock) advanceErr(d time.Duration) error { c.advance(d); return nil }

func runOn(t *testing.T, backend string, seed uint64, body func(r *rig) error) {
	t.Helper()
	if backend == "memstore" {
		// ORRERY_SEEDS=N explores N lab seeds from the test's own.
		n, _ := strconv.Atoi(os.Getenv("ORRERY_SEEDS"))
		for s := seed; s < seed+uint64(max(n, 1)); s++ {
			res := lab.Run(lab.Config{Seed: s, Name: t.Name()}, func(env *lab.Env) error {
				st := memstore.New(memstore.WithClock(env.Lab.Now))
				return body(&rig{t: t, backend: backend, ctx: env.Ctx, root: env.Root, ex: env.Lab, st: st, mem: st,
					advance: func(d time.Duration) error { return actor.Sleep(env.Ctx, env.Lab, d) },
					poll:    10 * time.Millisecond, polls: 100})
			})
			if res.Failure != nil {
				t.Fatalf("seed %d: %v", s, res.Failure)
			}
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clock := &offsetClock{}
	st := openReal(t, ctx, backend, clock)
	ex := actor.NewExecutor(seed)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	r := &rig{t: t, backend: backend, ctx: ctx, root: sys.Root(), ex: ex, st: st,
		advance: clock.advanceErr, poll: 2 * time.Millisecond, polls: 2500}
	err := body(r)
	if _, cerr := sys.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

func openReal(t *testing.T, ctx context.Context, backend string, clock *offsetClock) store.Store {
	t.Helper()
	switch backend {
	case "postgres":
		dsn := os.Getenv(dsnEnv)
		if dsn == "" {
			t.Skipf("%s is not set: skipping PostgreSQL", dsnEnv)
		}
		schema := pgtest.FreshSchema(t, dsn, "orrery_workflow")
		st, err := postgres.Open(ctx, dsn, postgres.WithSchema(schema), postgres.WithClockOffset(clock.offset), postgres.WithMaxConns(8), postgres.WithWarmConns(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	case "sqlite":
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "workflow.db"), sqlite.WithClock(clock.now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	t.Fatalf("unknown backend %q", backend)
	return nil
}

// waitFor waits until cond holds: at most limit of virtual time under the
// lab, or as many short parks on the production executor.
func (r *rig) waitFor(what string, limit time.Duration, cond func() (bool, error)) error {
	turns := int(limit/time.Second+1) * r.polls
	for i := 0; ; i++ {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if i >= turns {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		if err := actor.Sleep(r.ctx, r.ex, r.poll); err != nil {
			return err
		}
	}
}

// handle is a worker's own store handle: on memstore a fresh handle over
// the same state (so Crash kills that worker's calls only), else the
// shared store.
func (r *rig) handle() store.Store {
	if r.mem != nil {
		return r.mem.Restart()
	}
	return r.st
}

// events records a worker's events.
type events struct {
	mu  sync.Mutex
	evs []workflow.Event
}

func (e *events) observe(ev workflow.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) find(kind, run string) (workflow.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Kind == kind && (run == "" || ev.Run == run) {
			return ev, true
		}
	}
	return workflow.Event{}, false
}

func (e *events) count(kind, run string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.evs {
		if ev.Kind == kind && (run == "" || ev.Run == run) {
			n++
		}
	}
	return n
}

// worker starts a worker on its own handle.
func (r *rig) worker(id string, st store.Store, wfs *workflow.Workflows, ev *events, tweak func(*workflow.WorkerConfig)) (*workflow.Worker, error) {
	cfg := workflow.WorkerConfig{Worker: id, Store: st, Workflows: wfs, LeaseTTL: 2 * time.Second, PollEvery: time.Second}
	if r.real() {
		cfg.LeaseTTL, cfg.ScanEvery, cfg.PollEvery = 10*time.Second, 20*time.Millisecond, 20*time.Millisecond
	}
	if ev != nil {
		cfg.Observe = ev.observe
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return workflow.StartWorker(r.ctx, r.root, cfg)
}

func (r *rig) client(wfs *workflow.Workflows) (*workflow.Client, error) {
	return workflow.NewClient(r.st, wfs, r.ex, workflow.WithPoll(time.Millisecond, 50*time.Millisecond))
}

// stream reads a run's whole stream.
func (r *rig) stream(id string) ([]event.Envelope, error) {
	var out []event.Envelope
	var after uint64
	for {
		evs, err := r.st.Read(r.ctx, id, after, 256)
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
		if len(evs) < 256 {
			return out, nil
		}
		after = evs[len(evs)-1].RunSeq
	}
}

// shape is an event's (type, step, attempt), for comparing streams.
type shape struct {
	Type    string
	Step    string
	Attempt uint64
}

func shapes(evs []event.Envelope) []shape {
	out := make([]shape, len(evs))
	for i, e := range evs {
		out[i] = shape{e.EventType, e.StepID, e.LogicalAttemptID}
	}
	return out
}

func sameShapes(got []event.Envelope, want []shape) error {
	g := shapes(got)
	if len(g) != len(want) {
		return fmt.Errorf("stream is\n  %v\nwant\n  %v", g, want)
	}
	for i := range g {
		if g[i] != want[i] {
			return fmt.Errorf("event %d is %v, want %v; stream\n  %v", i+1, g[i], want[i], g)
		}
	}
	return nil
}

// checkEnvelopes checks what every event of a run's stream must be: a
// persisted, valid envelope of the run's plan, with the idempotency key
// of the contract's formula, engineAttemptId 1, and gapless runSeqs from 1.
func checkEnvelopes(evs []event.Envelope, run, plan string, version uint64) error {
	for i := range evs {
		e := &evs[i]
		if err := e.ValidatePersisted(); err != nil {
			return fmt.Errorf("event %d: %w", i+1, err)
		}
		if e.RunSeq != uint64(i+1) {
			return fmt.Errorf("event %d has runSeq %d: not gapless", i+1, e.RunSeq)
		}
		if e.StreamID != run || e.PlanID != plan || e.PlanVersion != version || e.EngineAttemptID != 1 {
			return fmt.Errorf("event %d: stream %q plan %q v%d engine attempt %d", i+1, e.StreamID, e.PlanID, e.PlanVersion, e.EngineAttemptID)
		}
		if want := event.IdempotencyKey(run, e.StepID, e.LogicalAttemptID, e.EventType, plan, version); e.IdempotencyKey != want {
			return fmt.Errorf("event %d: key %s, the formula gives %s", i+1, e.IdempotencyKey, want)
		}
		if event.IsRunLevel(e.EventType) != (e.StepID == "") {
			return fmt.Errorf("event %d: %s with step %q", i+1, e.EventType, e.StepID)
		}
	}
	return nil
}

// tally counts executions of named things.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func newTally() *tally { return &tally{n: map[string]int{}} }

func (t *tally) inc(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n[name]++
	return t.n[name]
}

func (t *tally) get(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[name]
}

// gate blocks a step until opened; a step blocked on it ends with its
// context. Entered tells the test the step is running.
type gate struct {
	mu      sync.Mutex
	open    bool
	entered int
	waiters []actor.Parker
	ex      actor.Executor
}

func newGate(ex actor.Executor) *gate { return &gate{ex: ex} }

func (g *gate) wait(ctx context.Context) error {
	p := g.ex.NewParker()
	g.mu.Lock()
	g.entered++
	if g.open {
		g.mu.Unlock()
		return nil
	}
	g.waiters = append(g.waiters, p)
	g.mu.Unlock()
	return p.Park(ctx)
}

func (g *gate) release() {
	g.mu.Lock()
	g.open = true
	ws := g.waiters
	g.waiters = nil
	g.mu.Unlock()
	for _, p := range ws {
		p.Unpark()
	}
}

func (g *gate) entries() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entered
}

// fireTimers is the plane's timer worker in miniature: it claims due
// timers and fires them into their runs' inboxes, until ctx ends.
func fireTimers(ctx context.Context, ex actor.Executor, st store.Store) error {
	wake := ex.NewParker()
	stop, err := st.Watch(ctx, wake, store.TopicTimers)
	if err != nil {
		return err
	}
	defer stop()
	for ctx.Err() == nil {
		items, err := st.ClaimDue(ctx, "test-timers", 16, 10*time.Second)
		if err != nil {
			return nil
		}
		for _, it := range items {
			if _, _, err := st.Fire(ctx, it.IntentHash, it.ClaimOf()); err != nil && ctx.Err() == nil {
				return err
			}
		}
		if len(items) > 0 {
			continue
		}
		wait := time.Second
		if at, ok, err := st.NextDue(ctx); err == nil && ok {
			if now, err := st.Now(ctx); err == nil && at.Sub(now) < wait {
				wait = max(at.Sub(now), time.Millisecond)
			}
		}
		t := ex.AfterFunc(wait, wake.Unpark)
		err = wake.Park(ctx)
		t.Stop()
		if err != nil {
			return nil
		}
	}
	return nil
}

// adapter is a fake effect adapter: it claims effects of kind and
// completes them as the plane's pool does (a world.Receipt payload),
// with the answer of respond.
func runAdapter(ctx context.Context, ex actor.Executor, st store.Store, kind string,
	respond func(it vocab.EffectItem) (vocab.ReceiptStatus, any)) error {
	wake := ex.NewParker()
	stop, err := st.Watch(ctx, wake, store.TopicEffects)
	if err != nil {
		return err
	}
	defer stop()
	for ctx.Err() == nil {
		items, err := st.Claim(ctx, "test-adapter", []string{kind}, 8, 10*time.Second)
		if err != nil {
			return nil
		}
		for _, it := range items {
			status, body := respond(it)
			var b []byte
			if body != nil {
				if b, err = event.Marshal(body); err != nil {
					return err
				}
			}
			payload, err := world.EncodeReceipt(world.Receipt{IntentHash: it.IntentHash, Kind: it.Kind, Status: status, Body: b})
			if err != nil {
				return err
			}
			if _, _, err := st.Complete(ctx, it.IntentHash, it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptStatus(status), Payload: payload}); err != nil && ctx.Err() == nil {
				return err
			}
		}
		if len(items) > 0 {
			continue
		}
		t := ex.AfterFunc(time.Second, wake.Unpark)
		err = wake.Park(ctx)
		t.Stop()
		if err != nil {
			return nil
		}
	}
	return nil
}

// background runs f as a process of the rig until the returned stop.
func (r *rig) background(name string, f func(ctx context.Context) error) (func() error, error) {
	sc, err := r.root.Sub(name)
	if err != nil {
		return nil, err
	}
	var ferr error
	var mu sync.Mutex
	if _, err := sc.Go(name, func(ctx context.Context) error {
		err := f(ctx)
		mu.Lock()
		ferr = err
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	return func() error {
		_, err := sc.Close(r.ctx)
		mu.Lock()
		defer mu.Unlock()
		return errors.Join(err, ferr)
	}, nil
}
