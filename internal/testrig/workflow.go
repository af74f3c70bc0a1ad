package testrig

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// RecordRuns journals runs on st with the code of wfs, as a deploy that
// is then replaced would: a workflow worker of its own ("recorder") runs
// them, start starts them through a client of wfs, and once each of ids
// has started steps steps the worker stops, releasing them. Code that asks
// for other steps then finds them diverged (blocked), which is how the
// tests of the operator's Reset and Terminate make a blocked run.
func RecordRuns(t testing.TB, ctx context.Context, st store.Store, wfs *workflow.Workflows, steps int,
	start func(context.Context, *workflow.Client) error, ids ...string) {
	t.Helper()
	ex := actor.NewExecutor(3)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	defer func() {
		if _, err := sys.Close(ctx); err != nil {
			t.Errorf("closing the recorder's actor system: %v", err)
		}
	}()
	cl, err := workflow.NewClient(st, wfs, ex, workflow.WithPoll(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	w, err := workflow.StartWorker(ctx, sys.Root(), workflow.WorkerConfig{
		Worker: "recorder", Store: st, Workflows: wfs, LeaseTTL: 10 * time.Second,
		ScanEvery: 20 * time.Millisecond, PollEvery: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := start(ctx, cl); err != nil {
		_ = w.Stop(ctx)
		t.Fatal(err)
	}
	for _, id := range ids {
		WaitFor(t, id+" records its steps", 2*time.Minute, 5*time.Millisecond, func() (bool, error) {
			s, err := cl.Get(ctx, id)
			return err == nil && s.Steps >= steps, err
		})
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
