package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// rig is the shared test rig (internal/testrig) with the workflow tests'
// own helpers.
type rig struct{ *testrig.Rig }

// forEachBackend runs body on memstore (under the lab), SQLite and
// PostgreSQL (when the DSN is set; never skipped then).
func forEachBackend(t *testing.T, seed uint64, body func(r *rig) error) {
	testrig.ForEachBackend(t, lab.Config{Seed: seed}, func(tr *testrig.Rig) error { return body(&rig{tr}) })
}

// onMemstore runs body under the lab on memstore.
func onMemstore(t *testing.T, seed uint64, body func(r *rig) error) {
	t.Helper()
	testrig.RunOn(t, testrig.Memstore, lab.Config{Seed: seed}, func(tr *testrig.Rig) error { return body(&rig{tr}) })
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
	if r.Real() {
		cfg.LeaseTTL, cfg.ScanEvery, cfg.PollEvery = 10*time.Second, 20*time.Millisecond, 20*time.Millisecond
	}
	if ev != nil {
		cfg.Observe = ev.observe
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return workflow.StartWorker(r.Ctx, r.Root, cfg)
}

func (r *rig) client(wfs *workflow.Workflows) (*workflow.Client, error) {
	return workflow.NewClient(r.Store, wfs, r.Ex, workflow.WithPoll(time.Millisecond, 50*time.Millisecond))
}

// clientFor registers defs and opens a client on them.
func (r *rig) clientFor(defs ...workflow.Workflow) (*workflow.Workflows, *workflow.Client, error) {
	wfs, err := workflow.NewWorkflows(defs...)
	if err != nil {
		return nil, nil, err
	}
	cl, err := r.client(wfs)
	return wfs, cl, err
}

// serve registers defs, starts worker id on its own handle and opens a
// client on them; the caller stops the worker.
func (r *rig) serve(id string, defs ...workflow.Workflow) (*workflow.Workflows, *workflow.Worker, *workflow.Client, error) {
	wfs, err := workflow.NewWorkflows(defs...)
	if err != nil {
		return nil, nil, nil, err
	}
	w, cl, err := r.serveWith(id, r.WorkerStore(), wfs, nil)
	return wfs, w, cl, err
}

// work registers defs and starts worker id on its own handle; the caller
// stops the worker.
func (r *rig) work(id string, defs ...workflow.Workflow) (*workflow.Workflows, *workflow.Worker, error) {
	wfs, err := workflow.NewWorkflows(defs...)
	if err != nil {
		return nil, nil, err
	}
	w, err := r.worker(id, r.WorkerStore(), wfs, nil, nil)
	return wfs, w, err
}

// serveWith starts worker id on st for wfs, with tweak, and opens a
// client; the caller stops the worker.
func (r *rig) serveWith(id string, st store.Store, wfs *workflow.Workflows, tweak func(*workflow.WorkerConfig)) (*workflow.Worker, *workflow.Client, error) {
	w, err := r.worker(id, st, wfs, nil, tweak)
	if err != nil {
		return nil, nil, err
	}
	cl, err := r.client(wfs)
	if err != nil {
		w.Stop(r.Ctx)
		return nil, nil, err
	}
	return w, cl, nil
}

// crashOver crashes h, the handle of worker old, kills old, and starts
// worker id in its place on its own handle.
func (r *rig) crashOver(h interface{ Crash() }, old *workflow.Worker, id string, wfs *workflow.Workflows) (*workflow.Worker, error) {
	h.Crash()
	old.Kill(r.Ctx)
	return r.worker(id, r.WorkerStore(), wfs, nil, nil)
}

// killOver kills worker old without releasing anything (on memstore its
// store handle h dies with it; on a real store the store's clock passes
// its lease), and starts worker id in its place on a handle of its own.
func (r *rig) killOver(h store.Store, old *workflow.Worker, id string, wfs *workflow.Workflows) (*workflow.Worker, error) {
	if m, ok := h.(interface{ Crash() }); ok {
		m.Crash()
	}
	old.Kill(r.Ctx)
	if r.Real() {
		if err := r.Advance(11 * time.Second); err != nil {
			return nil, err
		}
	}
	return r.worker(id, r.WorkerStore(), wfs, nil, nil)
}

// waitStreamLen waits until run's stream holds n events.
func (r *rig) waitStreamLen(what, run string, n int) error {
	return r.WaitFor(what, 10*time.Second, func() (bool, error) {
		evs, err := r.stream(run)
		return len(evs) == n, err
	})
}

// startResult starts run of def on in and waits for its result.
func startResult[In, Out any](r *rig, def *workflow.Def[In, Out], cl *workflow.Client, run string, in In) (Out, error) {
	if err := def.Start(r.Ctx, cl, run, in); err != nil {
		var zero Out
		return zero, err
	}
	return def.Result(r.Ctx, cl, run)
}

// waitEntries waits until n steps have entered g.
func (r *rig) waitEntries(what string, g *gate, n int) error {
	return r.WaitFor(what, 10*time.Second, func() (bool, error) { return g.entries() == n, nil })
}

// waitEvent waits until ev has seen an event of kind for run, and
// returns it.
func (r *rig) waitEvent(what string, ev *events, kind, run string) (workflow.Event, error) {
	var got workflow.Event
	err := r.WaitFor(what, 10*time.Second, func() (bool, error) {
		var ok bool
		got, ok = ev.find(kind, run)
		return ok, nil
	})
	return got, err
}

// partitionable is a handle on the memstore whose lease renewals fail as
// calls (a partition) once the returned flag is set, so its worker never
// learns from them that its lease is gone.
func (r *rig) partitionable() (store.Store, *atomic.Bool) {
	var partitioned atomic.Bool
	h := r.Mem.Restart(memstore.WithHook(func(op string) error {
		if op == "renew_leases" && partitioned.Load() {
			return errors.New("partitioned")
		}
		return nil
	}))
	return h, &partitioned
}

// stream reads a run's whole stream.
func (r *rig) stream(id string) ([]event.Envelope, error) {
	var out []event.Envelope
	var after uint64
	for {
		evs, err := r.Store.Read(r.Ctx, id, after, 256)
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

// shapesAre reads run's whole stream and checks it has the shapes of want.
func (r *rig) shapesAre(run string, want []shape) error {
	_, err := r.streamShapes(run, want)
	return err
}

// streamShapes reads run's whole stream, checks it has the shapes of want
// and returns it.
func (r *rig) streamShapes(run string, want []shape) ([]event.Envelope, error) {
	evs, err := r.stream(run)
	if err != nil {
		return nil, err
	}
	return evs, sameShapes(evs, want)
}

// streamIs reads run's whole stream and checks it has the shapes of want
// and the envelopes checkEnvelopes asks of a run of plan at version.
func (r *rig) streamIs(run, plan string, version uint64, want []shape) ([]event.Envelope, error) {
	evs, err := r.stream(run)
	if err != nil {
		return nil, err
	}
	if err := sameShapes(evs, want); err != nil {
		return nil, err
	}
	return evs, checkEnvelopes(evs, run, plan, version)
}

// shape is an event's (type, step, attempt), for comparing streams.
type shape struct {
	Type    string
	Step    string
	Attempt uint64
}

// retriedOnce is the stream of a run whose one step failed once and
// completed on its second attempt.
func retriedOnce(step string) []shape {
	return []shape{
		{event.RunStarted, "", 1},
		{event.StepStarted, step, 1}, {event.StepFailed, step, 1},
		{event.StepStarted, step, 2}, {event.StepCompleted, step, 2},
		{event.RunCompleted, "", 1},
	}
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

// watch opens a parker woken by st's changes to topic. A nil stop with no
// error is a loop stopped before it began, which so claimed nothing.
func watch(ctx context.Context, ex actor.Executor, st store.Store, topic string) (actor.Parker, func(), error) {
	wake := ex.NewParker()
	stop, err := st.Watch(ctx, wake, topic)
	if err != nil && ctx.Err() != nil {
		return nil, nil, nil
	}
	return wake, stop, err
}

// fireTimers is the plane's timer worker in miniature: it claims due
// timers and fires them into their runs' inboxes, until ctx ends.
func fireTimers(ctx context.Context, ex actor.Executor, st store.Store) error {
	wake, stop, err := watch(ctx, ex, st, store.TopicTimers)
	if err != nil || stop == nil {
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
	wake, stop, err := watch(ctx, ex, st, store.TopicEffects)
	if err != nil || stop == nil {
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

// bRanAgainUnrecorded checks the stream of a gated run whose step b ran
// twice, once on a worker that lost the run (who): that worker's
// completion of b is not recorded, the second attempt's is.
func (r *rig) bRanAgainUnrecorded(who string) error {
	evs, err := r.stream("run")
	if err != nil {
		return err
	}
	for _, e := range evs {
		if e.EventType == event.StepCompleted && e.StepID == "b" && e.LogicalAttemptID == 1 {
			return fmt.Errorf("%s's StepCompleted(b, 1) was recorded", who)
		}
	}
	return sameShapes(evs, bRanTwice())
}
