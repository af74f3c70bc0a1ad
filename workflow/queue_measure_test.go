package workflow_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/workflow"
)

// The queue measurement of issue 24: a queue with a global limit of 10,
// its runs (ORRERY_QUEUE_RUNS, default 500; the benchmark figure uses
// 5000) enqueued and run by three workers, each on a store handle of its
// own (its own connection pool and listener) over one PostgreSQL schema,
// in this one process. Afterwards the journal alone must show that never
// more than 10 ran at once: each run's RunStarted (its admission) and
// RunCompleted (its end, the commit that freed its slot) are swept as
// intervals. The same runs with no queue give the comparison: the mean
// time from RunStarted to RunCompleted once admitted, which the
// benchmark (ORRERY_QUEUE_BENCH=1) requires within 20% of the unlimited
// one; the CI size only logs it, since a duration depends on the box.
func TestQueueLimitHoldsFromTheJournal(t *testing.T) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("ORRERY_QUEUE_RUNS")); err == nil && v > 0 {
		n = v
	}
	// Its own context and system, not the shared rig's two-minute one:
	// the benchmark size runs for minutes.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*200*time.Millisecond+time.Minute)
	defer cancel()
	st := testrig.Open(t, ctx, testrig.Postgres, &testrig.Clock{})
	ex := actor.NewExecutor(46)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	defer sys.Close(context.Background())
	m := &measure{ctx: ctx, st: st, ex: ex, root: sys.Root()}
	limited, err := m.run(t, "limited", n, 10)
	if err != nil {
		t.Fatal(err)
	}
	unlimited, err := m.run(t, "unlimited", n, 0)
	if err != nil {
		t.Fatal(err)
	}
	if limited.most > 10 {
		t.Fatalf("the journal shows %d runs of the queue at once, over its limit of 10", limited.most)
	}
	if limited.most < 2 {
		t.Fatalf("the journal shows at most %d run at once: the check would not see an excess", limited.most)
	}
	ratio := float64(limited.meanRun) / float64(unlimited.meanRun)
	t.Logf("queue measurement, %d runs, 3 workers on one PostgreSQL: limit 10: at most %d at once, %.0f runs/s, mean admitted run %v; no limit: at most %d at once, %.0f runs/s, mean run %v; admitted/unlimited run time %.2f",
		n, limited.most, limited.rate, limited.meanRun, unlimited.most, unlimited.rate, unlimited.meanRun, ratio)
	if os.Getenv("ORRERY_QUEUE_BENCH") != "" && ratio > 1.2 {
		t.Fatalf("an admitted run took %.2f times the unlimited run's time, want at most 1.2", ratio)
	}
}

type measure struct {
	ctx  context.Context
	st   store.Store
	ex   actor.Executor
	root *actor.Scope
}

type queueFigures struct {
	most    int           // runs at once, swept from the journal
	rate    float64       // runs per second, first start to last end
	meanRun time.Duration // mean RunStarted → RunCompleted
}

func (m *measure) run(t *testing.T, name string, n, limit int) (queueFigures, error) {
	def := workflow.New(name, 1, func(c *workflow.Ctx, in int) (int, error) {
		a, err := workflow.Step(c, "one", func(context.Context) (int, error) { return in, nil })
		if err != nil {
			return 0, err
		}
		return workflow.Step(c, "two", func(context.Context) (int, error) { return a + 1, nil })
	})
	wfs, err := workflow.NewWorkflows(def)
	if err != nil {
		return queueFigures{}, err
	}
	var opts []workflow.StartOption
	if limit > 0 {
		if err := wfs.AddQueues(workflow.Queue{Name: name, Concurrency: limit}); err != nil {
			return queueFigures{}, err
		}
		opts = append(opts, workflow.OnQueue(name))
	}
	cl, err := workflow.NewClient(m.st, wfs, m.ex, workflow.WithPoll(time.Millisecond, 50*time.Millisecond))
	if err != nil {
		return queueFigures{}, err
	}
	// Eight starters at once: the starts are not what is measured.
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := g; i < n; i += 8 {
				if err := def.Start(m.ctx, cl, fmt.Sprintf("%s-%05d", name, i), i, opts...); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			return queueFigures{}, err
		}
	}
	schema := m.st.(*postgres.Store).Schema()
	for i := range 3 {
		st, err := postgres.Open(m.ctx, os.Getenv(testrig.DSNEnv), postgres.WithSchema(schema), postgres.WithMaxConns(8))
		if err != nil {
			return queueFigures{}, err
		}
		defer st.Close()
		w, err := workflow.StartWorker(m.ctx, m.root, workflow.WorkerConfig{Worker: fmt.Sprintf("%s-w%d", name, i), Store: st,
			Workflows: wfs, LeaseTTL: 10 * time.Second, ScanEvery: time.Second, HintGap: 10 * time.Millisecond})
		if err != nil {
			return queueFigures{}, err
		}
		defer w.Stop(context.Background())
	}
	// Polled on a ticker: a real store and real workers, and the only
	// bound is the test's context.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ended, err := m.st.ListWorlds(m.ctx, workflow.Universe(name), store.WorldArchived)
		if err != nil {
			return queueFigures{}, fmt.Errorf("waiting for %s's runs to end: %w", name, err)
		}
		if len(ended) == n {
			break
		}
		select {
		case <-m.ctx.Done():
			return queueFigures{}, fmt.Errorf("%s: %d of %d runs ended: %w", name, len(ended), n, m.ctx.Err())
		case <-tick.C:
		}
	}
	type mark struct {
		at    time.Time
		delta int
	}
	var marks []mark
	var total time.Duration
	for i := range n {
		id := fmt.Sprintf("%s-%05d", name, i)
		evs, err := m.st.Read(m.ctx, id, 0, 64)
		if err != nil {
			return queueFigures{}, err
		}
		var start, end time.Time
		for _, e := range evs {
			switch e.EventType {
			case event.RunStarted:
				start = e.PersistedAt
			case event.RunCompleted:
				end = e.PersistedAt
			}
		}
		if start.IsZero() || end.IsZero() {
			return queueFigures{}, fmt.Errorf("%s: no RunStarted or RunCompleted in its journal", id)
		}
		marks = append(marks, mark{start, 1}, mark{end, -1})
		total += end.Sub(start)
	}
	// Ends before starts at one instant: an end's commit precedes the
	// admission it made room for.
	slices.SortFunc(marks, func(a, b mark) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	var f queueFigures
	cur := 0
	for _, m := range marks {
		cur += m.delta
		f.most = max(f.most, cur)
	}
	f.rate = float64(n) / marks[len(marks)-1].at.Sub(marks[0].at).Seconds()
	f.meanRun = total / time.Duration(n)
	return f, nil
}
