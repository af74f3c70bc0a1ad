package schedule_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// fake is a Starter that remembers what it started, idempotently as the
// real targets are, and keeps every run running until the test ends it.
type fake struct {
	mu      sync.Mutex
	runs    map[string]time.Time // run id -> when it was created
	order   []string
	calls   int // every StartRun/SendEvent call, repeats included
	ended   map[string]bool
	autoEnd bool
	events  map[string]time.Time // dedupe key -> when enqueued
	// before, when set, runs at the start of each call (a crash seam).
	before func(id string) error
}

func newFake() *fake {
	return &fake{runs: map[string]time.Time{}, ended: map[string]bool{}, events: map[string]time.Time{}}
}

func (f *fake) StartRun(ctx context.Context, workflow, runID string, input []byte) error {
	if f.before != nil {
		if err := f.before(runID); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if _, ok := f.runs[runID]; !ok {
		f.runs[runID] = time.Now()
		f.order = append(f.order, runID)
	}
	return nil
}

func (f *fake) RunEnded(ctx context.Context, runID string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.runs[runID]
	return !ok || f.autoEnd || f.ended[runID], nil
}

func (f *fake) SendEvent(ctx context.Context, world, typeName string, value []byte, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if _, ok := f.events[key]; !ok {
		f.events[key] = time.Now()
	}
	return nil
}

func (f *fake) end(runID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended[runID] = true
}

func (f *fake) started() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.order)
}

func (f *fake) startedAt(runID string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[runID]
}

// env is one store under virtual time (run inside synctest.Test) and the
// schedulers started on it.
type env struct {
	t      *testing.T
	st     store.Store
	ctx    context.Context
	stops  []func()
	starts *fake
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, st: memstore.New(memstore.WithClock(time.Now)), ctx: context.Background(), starts: newFake()}
	t.Cleanup(e.stopAll)
	return e
}

// scheduler starts one scheduler with its own starter (the shared fake
// unless given) and returns its stop.
func (e *env) scheduler(s schedule.Starter) func() {
	if s == nil {
		s = e.starts
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		done <- schedule.Run(ctx, schedule.Config{Store: e.st, Starter: s, Executor: actor.NewExecutor(1)})
	}()
	stop := func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			e.t.Errorf("scheduler returned %v", err)
		}
	}
	var once sync.Once
	f := func() { once.Do(stop) }
	e.stops = append(e.stops, f)
	return f
}

func (e *env) stopAll() {
	for _, s := range e.stops {
		s()
	}
}

func (e *env) create(id string, spec schedule.Spec) schedule.Schedule {
	e.t.Helper()
	sc, err := schedule.Create(e.ctx, e.st, id, spec)
	if err != nil {
		e.t.Fatalf("Create %s: %v", id, err)
	}
	return sc
}

func (e *env) get(id string) schedule.Schedule {
	e.t.Helper()
	sc, err := schedule.Get(e.ctx, e.st, id)
	if err != nil {
		e.t.Fatalf("Get %s: %v", id, err)
	}
	return sc
}

func wf(every time.Duration) schedule.Spec {
	return schedule.Spec{Every: schedule.Duration(every), Target: schedule.Target{Workflow: "report"}}
}

// epoch is where every test's virtual clock starts (synctest's).
func at(h, m int) time.Time { return time.Date(2000, 1, 1, h, m, 0, 0, time.UTC) }
