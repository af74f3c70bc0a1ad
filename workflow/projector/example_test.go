package projector_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow/projector"
)

// completions is a user-defined projector: completed runs per workflow.
// It reacts to one event type; every other one, including types a later
// contract adds, is a no-op, and so the watermark still passes it.
type completions struct {
	mu    sync.Mutex
	byWF  map[string]int
	known map[string]bool // the runs counted, so a repeat changes nothing
}

func (*completions) Name() string { return "completions" }

// InMemory: the counts live in this process, so each process counts from
// the start of every stream.
func (*completions) InMemory() bool { return true }

func (c *completions) Apply(_ context.Context, stream string, e event.Envelope) error {
	if e.EventType != event.RunCompleted {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known[stream] {
		c.known[stream] = true
		c.byWF[e.PlanID]++
	}
	return nil
}

func Example_customProjector() {
	ctx := context.Background()
	st := memstore.New()
	emit := func(run, workflow string, types ...string) {
		var evs []event.Envelope
		for _, typ := range types {
			e := event.Envelope{StreamID: run, EventType: typ, LogicalAttemptID: 1, PlanID: workflow, PlanVersion: 1,
				EmittedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Payload: event.EmptyPayload()}
			e.Normalize()
			e.EventID = e.IdempotencyKey
			evs = append(evs, e)
		}
		if _, err := st.Append(ctx, run, evs, store.AppendOptions{Kind: store.FreeStream}); err != nil {
			panic(err)
		}
	}
	emit("run-1", "checkout", event.RunStarted, event.RunCompleted)
	emit("run-2", "checkout", event.RunStarted, "RunArchived", event.RunCompleted) // an unknown type in between
	emit("run-3", "refund", event.RunStarted)

	counts := &completions{byWF: map[string]int{}, known: map[string]bool{}}
	runs := projector.NewRuns()
	r, err := projector.NewRunner(projector.RunnerConfig{
		Store:      st,
		Executor:   actor.NewExecutor(1),
		Streams:    projector.Fixed("run-1", "run-2", "run-3"),
		Projectors: []projector.Projector{counts, runs},
	})
	if err != nil {
		panic(err)
	}
	if err := r.CatchUp(ctx); err != nil {
		panic(err)
	}
	for _, wf := range slices.Sorted(maps.Keys(counts.byWF)) {
		fmt.Println(wf, "completed:", counts.byWF[wf])
	}
	for _, run := range runs.List() {
		fmt.Println(run.ID, run.Workflow, run.Status)
	}
	// Output:
	// checkout completed: 2
	// run-1 checkout completed
	// run-2 checkout completed
	// run-3 refund running
}
