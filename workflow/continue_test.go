package workflow_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

func TestContinueAsNewStartsAfreshUnderTheSameRunID(t *testing.T) {
	forEachBackend(t, 101, func(r *rig) error {
		const generations = 100
		tl := newTally()
		def := workflow.New("counter", 1, func(c *workflow.Ctx, in int) (int, error) {
			v, err := workflow.Step(c, "work", func(context.Context) (int, error) { tl.inc("work"); return in + 1, nil })
			if err != nil {
				return 0, err
			}
			if v < generations {
				return 0, workflow.ContinueAsNew(c, v)
			}
			// The last generation waits for a signal sent during the
			// switches: it is not lost.
			extra, err := workflow.Await[int](c, "bonus")
			return v + extra, err
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "c", 0); err != nil {
			return err
		}
		if err := cl.Signal(r.Ctx, "c", "bonus", 5, "k"); err != nil {
			return err
		}
		got, err := def.Result(r.Ctx, cl, "c")
		if err != nil || got != generations+5 {
			return fmt.Errorf("result %d, %v; want %d", got, err, generations+5)
		}
		// Each generation ran its step once: none replayed an older one.
		if n := tl.get("work"); n != generations {
			return fmt.Errorf("the step ran %d times over %d generations", n, generations)
		}
		evs, err := r.stream("c")
		if err != nil {
			return err
		}
		markers := 0
		for _, e := range evs {
			if e.EventType == event.RunResumed && e.StepID == "sys:continue" {
				markers++
			}
		}
		if markers != generations-1 {
			return fmt.Errorf("%d generation markers, want %d", markers, generations-1)
		}
		// The journal replays to the last generation's result, which
		// replays its own steps only.
		return replays(r, def, "c", generations+5)
	})
}

func TestATakeoverRunsOnlyTheLastGeneration(t *testing.T) {
	forEachBackend(t, 102, func(r *rig) error {
		tl := newTally()
		def := workflow.New("gens", 1, func(c *workflow.Ctx, in int) (int, error) {
			if _, err := workflow.Step(c, "work", func(context.Context) (int, error) { tl.inc(fmt.Sprint(in)); return in, nil }); err != nil {
				return 0, err
			}
			if in < 3 {
				return 0, workflow.ContinueAsNew(c, in+1)
			}
			return workflow.Await[int](c, "go")
		})
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		hA := r.WorkerStore()
		wA, err := r.worker("A", hA, wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "g", 0); err != nil {
			return err
		}
		if err := r.WaitFor("the last generation to await", 10*time.Second, func() (bool, error) {
			evs, err := r.stream("g")
			return len(evs) > 0 && evs[len(evs)-1].StepID == "sys:await:go", err
		}); err != nil {
			return err
		}
		wB, err := r.killOver(hA, wA, "B", wfs)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if err := cl.Signal(r.Ctx, "g", "go", 7, "k"); err != nil {
			return err
		}
		if got, err := def.Result(r.Ctx, cl, "g"); err != nil || got != 7 {
			return fmt.Errorf("result %d, %v", got, err)
		}
		for gen := range 4 {
			if n := tl.get(fmt.Sprint(gen)); n != 1 {
				return fmt.Errorf("generation %d's step ran %d times (the takeover replayed old generations)", gen, n)
			}
		}
		return nil
	})
}

// countReads counts the journal events a handle reads of one run.
type countReads struct {
	store.Store
	run string
	n   *atomic.Int64
}

func (c countReads) Read(ctx context.Context, stream string, after uint64, limit int) ([]store.Record, error) {
	evs, err := c.Store.Read(ctx, stream, after, limit)
	if stream == c.run {
		c.n.Add(int64(len(evs)))
	}
	return evs, err
}

// TestATakeoverReadsOnlyTheLastGeneration: a run that continued as new
// 120 times holds about 600 events; the worker that takes it over after a
// crash reads the first page of its journal and then only the last
// generation's events (from the snapshot stored at the last marker), and
// so does a client's Get; the run goes on as if it had read them all.
func TestATakeoverReadsOnlyTheLastGeneration(t *testing.T) {
	forEachBackend(t, 103, func(r *rig) error {
		const generations = 120
		def := workflow.New("long", 1, func(c *workflow.Ctx, in int) (int, error) {
			v, err := workflow.Step(c, "work", func(context.Context) (int, error) { return in + 1, nil })
			if err != nil {
				return 0, err
			}
			if err := workflow.SetAttributes(c, map[string]string{"gen": fmt.Sprint(v)}); err != nil {
				return 0, err
			}
			if v < generations {
				return 0, workflow.ContinueAsNew(c, v)
			}
			extra, err := workflow.Await[int](c, "go")
			return v + extra, err
		})
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		hA := r.WorkerStore()
		wA, err := r.worker("A", hA, wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "g", 0); err != nil {
			return err
		}
		if err := r.WaitFor("the last generation to await", 20*time.Second, func() (bool, error) {
			evs, err := r.stream("g")
			return len(evs) > 0 && evs[len(evs)-1].StepID == "sys:await:go", err
		}); err != nil {
			return err
		}
		all, err := r.stream("g")
		if err != nil {
			return err
		}
		if len(all) < 5*generations {
			return fmt.Errorf("the journal holds %d events, want at least %d", len(all), 5*generations)
		}
		if m, ok := hA.(interface{ Crash() }); ok {
			m.Crash()
		}
		wA.Kill(r.Ctx)
		if r.Real() {
			if err := r.Advance(11 * time.Second); err != nil {
				return err
			}
		}
		var read atomic.Int64
		wB, err := r.worker("B", countReads{Store: r.WorkerStore(), run: "g", n: &read}, wfs, nil, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if err := cl.Signal(r.Ctx, "g", "go", 7, "k"); err != nil {
			return err
		}
		if got, err := def.Result(r.Ctx, cl, "g"); err != nil || got != generations+7 {
			return fmt.Errorf("result %d, %v", got, err)
		}
		if n := read.Load(); n == 0 || n > 64+10 {
			return fmt.Errorf("the takeover read %d of the run's %d events, want a first page and the last generation's (at most 74)", n, len(all))
		}
		var getRead atomic.Int64
		gcl, err := workflow.NewClient(countReads{Store: r.Store, run: "g", n: &getRead}, wfs, r.Ex)
		if err != nil {
			return err
		}
		sum, err := gcl.Get(r.Ctx, "g")
		if err != nil {
			return err
		}
		if sum.Status != workflow.StatusCompleted || sum.Version != 1 || sum.Attributes["gen"] != fmt.Sprint(generations) {
			return fmt.Errorf("summary %+v", sum)
		}
		if n := getRead.Load(); n > 64+10 {
			return fmt.Errorf("Get read %d events", n)
		}
		t.Logf("journal %d events; the takeover read %d, Get %d", len(all), read.Load(), getRead.Load())
		return nil
	})
}
