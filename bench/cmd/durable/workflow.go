package main

// The workflow API variant (-api workflow): e2e-latency and workflow3 run
// as workflow runs (package workflow) instead of worlds, under the lib
// names orrery-wf-sqlite and orrery-wf-pg, on the same store as the world
// variants (a SQLite file, or a PostgreSQL database of its own).
//
// The mapping is DBOS's, step for step: a one-step item is a workflow with
// one no-op workflow.Step, workflow3 is a workflow with three sequential
// no-op Steps (each Step's result is journaled as StepCompleted before the
// next starts), a submission is Client.Start (it returns once the run is
// durable), and "completion visible" is Client.Result returning (the run's
// RunCompleted is committed). One workflow.Worker in this process hosts
// the runs and the client is given it (WithWorkers), as DBOS's RunWorkflow
// runs a workflow in the process that starts it: Start hands the run to
// the worker, whose first write creates it, and a waiting Result learns
// the end from the worker, as DBOS's handle learns it from its executor.
//
// enqueue, work and timer-lateness are left to the world rows: these rows
// leave them empty.

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

var (
	api = flag.String("api", "plane", "plane (worlds: orrery-<store>) or workflow (package workflow: orrery-wf-<store>; e2e-latency and workflow3 only)")
	// Runs beyond MaxActiveRuns wait in RunQueued; DBOS runs every
	// workflow3 workflow at once, so the default admits all of them.
	wfMaxActive = flag.Int("wf-max-active", 4096, "workflow: the worker's MaxActiveRuns")
	wfHintGap   = flag.Duration("wf-hint-gap", 0, "workflow: the worker's HintGap (the least time between two hint-started scans; 0: the library default, 100ms)")
	wfCalls     = flag.Bool("wf-calls", false, "workflow: print the count and mean time of each kind of store call at exit")
	wfPollMax   = flag.Duration("wf-poll-max", time.Second, "workflow: the longest backoff between Client.Result's re-reads (WithPoll; library default 1s)")
	wfFanOut    = flag.Int("wf-fanout", 50, "workflow: children of the fan-out rows (0: skip them)")
	wfChildWork = flag.Duration("wf-child-work", 200*time.Millisecond, "workflow: how long each fan-out child's one step works")
)

// fanOutWorkflows are the fan-out rows' definitions: bench.kid, a child
// whose one step works for -wf-child-work, and two parents of -wf-fanout
// children: bench.seq waits for each child before it starts the next
// (Child), bench.fan starts them all and then collects them (ChildAsync).
func fanOutWorkflows() (kid, seq, fan *workflow.Def[int64, int64]) {
	kid = workflow.New("bench.kid", 1, func(c *workflow.Ctx, i int64) (int64, error) {
		return workflow.Step(c, "work", func(ctx context.Context) (int64, error) {
			t := time.NewTimer(*wfChildWork)
			defer t.Stop()
			select {
			case <-t.C:
				return i, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	})
	seq = workflow.New("bench.seq", 1, func(c *workflow.Ctx, i int64) (int64, error) {
		var sum int64
		for k := 0; k < *wfFanOut; k++ {
			v, err := workflow.Child(c, kid, fmt.Sprintf("seq-%d-kid-%d", i, k), int64(k))
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
	fan = workflow.New("bench.fan", 1, func(c *workflow.Ctx, i int64) (int64, error) {
		fs := make([]*workflow.Future[int64], *wfFanOut)
		for k := range fs {
			fs[k] = workflow.ChildAsync(c, kid, fmt.Sprintf("fan-%d-kid-%d", i, k), int64(k))
		}
		var sum int64
		for _, f := range fs {
			v, err := f.Get(c)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
	return kid, seq, fan
}

func init() {
	// -backend is another name of -store: both set the same value.
	flag.StringVar(backend, "backend", "sqlite", "same as -store")
}

func noopStep(context.Context) (int64, error) { return 0, nil }

// benchWorkflows are the two definitions: bench.one, the one-step item of
// e2e-latency, and bench.wf3, workflow3's three sequential no-op steps.
func benchWorkflows() (one, three *workflow.Def[int64, int64]) {
	one = workflow.New("bench.one", 1, func(c *workflow.Ctx, i int64) (int64, error) {
		return workflow.Step(c, "noop", noopStep)
	})
	three = workflow.New("bench.wf3", 1, func(c *workflow.Ctx, i int64) (int64, error) {
		for s := 1; s <= 3; s++ {
			if _, err := workflow.Step(c, fmt.Sprintf("step%d", s), noopStep); err != nil {
				return 0, err
			}
		}
		return i, nil
	})
	return one, three
}

// runWorkflowAPI runs e2e-latency and workflow3 through package workflow.
func runWorkflowAPI(ctx context.Context, st store.Store) {
	if *wfCalls {
		sc := newStoreCalls(st)
		defer sc.dump()
		st = sc
	}
	oneStep, threeSteps := benchWorkflows()
	kid, seqParent, fanParent := fanOutWorkflows()
	wfs, err := workflow.NewWorkflows(oneStep, threeSteps, kid, seqParent, fanParent)
	must(err)
	sys := actor.NewSystem()
	cfg := workflow.WorkerConfig{Worker: "bench-wf-worker", Store: st, Workflows: wfs,
		MaxActiveRuns: *wfMaxActive, HintGap: *wfHintGap}
	w, err := workflow.StartWorker(ctx, sys.Root(), cfg)
	must(err)
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_, _ = sys.Close(sctx)
	}()
	// Without WithWorkers every waiting Result re-reads its stream on each
	// run's start and end (the store's status hints are global): with
	// 2,000 workflow3 Results waiting, that was 1.76M reads and a timeout.
	client, err := workflow.NewClient(st, wfs, sys.Executor(), workflow.WithPoll(time.Millisecond, *wfPollMax), workflow.WithWorkers(w))
	must(err)
	gap := "default"
	if *wfHintGap > 0 {
		gap = wfHintGap.String()
	}
	fmt.Printf("# %s settings: one workflow.Worker (MaxActiveRuns=%d, HintGap=%s, other WorkerConfig fields default), Client WithWorkers(the worker) and WithPoll(1ms, %v); Start = Client.Start, completion = Client.Result returns\n",
		lib, *wfMaxActive, gap, *wfPollMax)

	// result waits for run id's output in a goroutine of its own, as
	// DBOS's GetResult does, and records its latency from submitted.
	result := func(rec *recorder, i int, id string, submitted time.Time) {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			if _, err := client.Result(rctx, id); err == nil {
				rec.set(i, time.Since(submitted))
			} else if rctx.Err() == nil {
				fmt.Printf("# %s %s: %v\n", lib, id, err)
			}
		}()
	}

	// 3. e2e-latency: open-loop starts at `rate`/s from one goroutine;
	// latency = Start's call → Result's return.
	{
		rec := newRecorder(*nE2E)
		interval := time.Duration(float64(time.Second) / *e2eRate)
		start := time.Now()
		for i := 0; i < *nE2E; i++ {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			id := fmt.Sprintf("e2e-%d", i)
			t := time.Now()
			must(oneStep.Start(ctx, client, id, int64(i)))
			result(rec, i, id, t)
		}
		fmt.Printf("# %s e2e submitted %d in %v (target %.0f/s)\n", lib, *nE2E, time.Since(start).Round(time.Millisecond), *e2eRate)
		rec.wait(*timeout)
		reportLat("e2e-latency", rec.values(), *nE2E)
	}

	// 4. workflow3: N 3-step workflows started from `conc` goroutines;
	// rate = N / (first Start's call → last Result's return).
	{
		rec := newRecorder(*nWf3)
		start := time.Now()
		must(parallel(*nWf3, *conc, func(i int) error {
			id := fmt.Sprintf("wf3-%d", i)
			t := time.Now()
			if err := threeSteps.Start(ctx, client, id, int64(i)); err != nil {
				return err
			}
			result(rec, i, id, t)
			return nil
		}))
		ok := rec.wait(*timeout)
		d := time.Since(start)
		if ok {
			rec.mu.Lock()
			d = rec.last.Sub(start)
			rec.mu.Unlock()
			report("workflow3", *nWf3, d, "workflows/s")
		} else {
			fmt.Printf("%s workflow3 failed (timeout after %v)\n", lib, d.Round(time.Millisecond))
		}
		reportLat("workflow3-latency", rec.values(), *nWf3)
	}

	// 5. fan-out: one parent of -wf-fanout children, each child one step
	// that works -wf-child-work; time = Start's call → Result's return,
	// children one after another (Child) and side by side (ChildAsync).
	if *wfFanOut > 0 {
		for _, p := range []struct {
			name string
			def  *workflow.Def[int64, int64]
		}{{"fanout-sequential", seqParent}, {"fanout-async", fanParent}} {
			t := time.Now()
			must(p.def.Start(ctx, client, p.name, 0))
			rctx, cancel := context.WithTimeout(ctx, *timeout)
			_, err := client.Result(rctx, p.name)
			cancel()
			if err != nil {
				fmt.Printf("%s %s failed: %v\n", lib, p.name, err)
				continue
			}
			fmt.Printf("%s %s %d children of %v: %v\n", lib, p.name, *wfFanOut, *wfChildWork, time.Since(t).Round(time.Millisecond))
		}
	}
}
