// Side-by-side durable-execution benchmarks: go-workflows (github.com/cschleiden/go-workflows).
// v1.2.0 ships SQLite, MySQL and Redis backends (no Postgres); this peer uses the SQLite backend
// with the library's own settings (WAL journal, default synchronous=FULL, one connection).
// Scenario definitions: bench/README.md ("Side by side with the durable-execution peers"). Output format: see ../run.sh.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/sqlite"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"
)

const lib = "gowf"

var (
	nJobs    = flag.Int("n", 20_000, "workflows for enqueue/work")
	conc     = flag.Int("conc", 32, "concurrent submitting goroutines (enqueue, workflow3, timers)")
	nE2E     = flag.Int("e2e", 2_000, "workflows for e2e-latency")
	e2eRate  = flag.Float64("rate", 200, "e2e submit rate per second (open loop)")
	nWf3     = flag.Int("wf3", 2_000, "3-step workflows")
	nTimers  = flag.Int("timers", 500, "workflow timers for timer-lateness")
	seed     = flag.Uint64("seed", 1, "random seed (timer due times)")
	dir      = flag.String("dir", "", "directory for the SQLite file (default: a new temp dir)")
	keep     = flag.Bool("keep", false, "keep the SQLite file after the run")
	pollers  = flag.Int("pollers", 2, "WorkflowPollers and ActivityPollers (library default 2)")
	pollIvl  = flag.Duration("poll", 10*time.Millisecond, "Workflow/ActivityPollingInterval after an empty poll (library default 200ms)")
	watchIvl = flag.Duration("watch", 5*time.Millisecond, "completion watcher poll interval (separate read connection)")
	timeout  = flag.Duration("timeout", 90*time.Second, "per-scenario completion timeout")
)

// ---- workflows and activities ----

func NoopAct(_ context.Context, i int) (int, error) { return i, nil }

// NoopWf is the one-step workflow (one activity) used by enqueue/work and e2e-latency.
func NoopWf(ctx workflow.Context, i int) (int, error) {
	return workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, NoopAct, i).Get(ctx)
}

// Wf3 runs three sequential no-op activities; each result is recorded in the history.
func Wf3(ctx workflow.Context, i int) (int, error) {
	for s := 0; s < 3; s++ {
		if _, err := workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, NoopAct, i).Get(ctx); err != nil {
			return 0, err
		}
	}
	return i, nil
}

var timerRec *recorder

// TimerWf waits on a durable timer until the due time, then records its lateness.
func TimerWf(ctx workflow.Context, i int, dueNs int64) error {
	due := time.Unix(0, dueNs)
	if d := due.Sub(workflow.Now(ctx)); d > 0 {
		if _, err := workflow.ScheduleTimer(ctx, d).Get(ctx); err != nil {
			return err
		}
	}
	if !workflow.Replaying(ctx) {
		timerRec.set(i, time.Since(due))
	}
	return nil
}

// ---- helpers ----

type recorder struct {
	mu   sync.Mutex
	d    []time.Duration
	seen []bool
	left int
	done chan struct{}
}

func newRecorder(n int) *recorder {
	return &recorder{d: make([]time.Duration, n), seen: make([]bool, n), left: n, done: make(chan struct{})}
}

func (r *recorder) set(i int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 0 || i >= len(r.d) || r.seen[i] {
		return
	}
	r.seen[i], r.d[i] = true, d
	r.left--
	if r.left == 0 {
		close(r.done)
	}
}

func (r *recorder) wait(limit time.Duration) bool {
	select {
	case <-r.done:
		return true
	case <-time.After(limit):
		return false
	}
}

func (r *recorder) values() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for i, ok := range r.seen {
		if ok {
			out = append(out, r.d[i])
		}
	}
	return out
}

func report(scen string, n int, d time.Duration, unit string) {
	fmt.Printf("%s %-14s n=%-7d %-10v %10.0f %s\n", lib, scen, n, d.Round(time.Millisecond), float64(n)/d.Seconds(), unit)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }

func reportLat(name string, v []time.Duration, want int) {
	if len(v) == 0 {
		fmt.Printf("%s %s failed (no samples)\n", lib, name)
		return
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	if len(v) < want {
		fmt.Printf("# %s %s: only %d of %d completed before timeout\n", lib, name, len(v), want)
	}
	fmt.Printf("%s %s p50=%s p99=%s max=%s\n", lib, name, ms(v[len(v)/2]), ms(v[len(v)*99/100]), ms(v[len(v)-1]))
}

func parallel(n, k int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for g := 0; g < k; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return e.(error)
	}
	return nil
}

func must(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", lib, err)
		fmt.Printf("# %s fatal: %v\n", lib, err)
		os.Exit(1)
	}
}

func printVersions(paths ...string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	for _, d := range bi.Deps {
		for _, p := range paths {
			if d.Path == p {
				fmt.Printf("# %s %s@%s\n", lib, d.Path, d.Version)
			}
		}
	}
}

// watcher observes committed completions through its own read connection to the SQLite file.
type watcher struct {
	db   *sql.DB
	mark time.Time
	seen map[string]bool
}

// count returns the number of completed instances (only the work scenario's exist at that point).
func (w *watcher) count() (int, error) {
	var n int
	err := w.db.QueryRow("SELECT COUNT(*) FROM instances WHERE completed_at IS NOT NULL").Scan(&n)
	return n, err
}

// run polls every `ivl` for instances completed since the watermark and calls f(id, observedAt)
// once per instance, until stop is closed.
func (w *watcher) run(ivl time.Duration, stop <-chan struct{}, f func(id string, at time.Time)) {
	w.seen = map[string]bool{}
	w.mark = time.Now().Add(-time.Second)
	t := time.NewTicker(ivl)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		rows, err := w.db.Query("SELECT id, completed_at FROM instances WHERE completed_at >= ?", w.mark)
		if err != nil {
			continue
		}
		now := time.Now()
		var ids []string
		maxAt := w.mark
		for rows.Next() {
			var id string
			var at time.Time
			if rows.Scan(&id, &at) != nil {
				continue
			}
			if at.After(maxAt) {
				maxAt = at
			}
			if !w.seen[id] {
				w.seen[id] = true
				ids = append(ids, id)
			}
		}
		rows.Close()
		// completed_at is taken inside the backend's single-connection write transaction, so commit
		// order follows it; a 50ms look-back (deduplicated by id) guards against clock granularity.
		w.mark = maxAt.Add(-50 * time.Millisecond)
		for _, id := range ids {
			f(id, now)
		}
	}
}

func idIndex(id, prefix string) (int, bool) {
	if !strings.HasPrefix(id, prefix) {
		return 0, false
	}
	i, err := strconv.Atoi(id[len(prefix):])
	return i, err == nil
}

func main() {
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	slog.SetDefault(logger)
	ctx := context.Background()
	fmt.Printf("# go=%s GOMAXPROCS=%d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	printVersions("github.com/cschleiden/go-workflows", "modernc.org/sqlite")
	fmt.Printf("# %s settings: backend=sqlite (library defaults: WAL, 1 connection) WorkflowPollers=ActivityPollers=%d PollingInterval=%v MaxParallel*Tasks=0(unlimited); completion watcher every %v\n",
		lib, *pollers, *pollIvl, *watchIvl)

	d := *dir
	if d == "" {
		tmp, err := os.MkdirTemp("", "peers_gowf")
		must(err)
		if !*keep {
			defer os.Remove(tmp)
		}
		d = tmp
	}
	path := filepath.Join(d, "peers_gowf.sqlite")
	removeDB := func() {
		for _, suf := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suf)
		}
	}
	removeDB()
	if !*keep {
		defer removeDB()
	}
	b := sqlite.NewSqliteBackend(path, sqlite.WithBackendOptions(backend.WithLogger(logger)))
	defer b.Close()
	rdb, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	must(err)
	defer rdb.Close()
	var jm, syn string
	must(rdb.QueryRow("PRAGMA journal_mode").Scan(&jm))
	must(rdb.QueryRow("PRAGMA synchronous").Scan(&syn))
	fmt.Printf("# %s sqlite journal_mode=%s synchronous=%s (the backend sets no synchronous pragma; 2=FULL is the default)\n", lib, jm, syn)
	w := &watcher{db: rdb}

	c := client.New(b)
	opts := worker.DefaultOptions
	opts.WorkflowPollers, opts.ActivityPollers = *pollers, *pollers
	opts.WorkflowPollingInterval, opts.ActivityPollingInterval = *pollIvl, *pollIvl
	wk := worker.New(b, &opts)
	must(wk.RegisterWorkflow(NoopWf))
	must(wk.RegisterWorkflow(Wf3))
	must(wk.RegisterWorkflow(TimerWf))
	must(wk.RegisterActivity(NoopAct))
	timerRec = newRecorder(*nTimers)

	// 1. enqueue: N separate durable CreateWorkflowInstance calls from `conc` goroutines, worker not started.
	{
		start := time.Now()
		must(parallel(*nJobs, *conc, func(i int) error {
			_, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "noop-" + strconv.Itoa(i)}, NoopWf, i)
			return err
		}))
		report("enqueue", *nJobs, time.Since(start), "workflows/s")
	}

	wctx, stopWorker := context.WithCancel(ctx)
	// 2. work: start the worker, wait until all N instances are completed in the store.
	{
		start := time.Now()
		must(wk.Start(wctx))
		ok := false
		for deadline := start.Add(*timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if n, err := w.count(); err == nil && n >= *nJobs {
				ok = true
				break
			}
		}
		dd := time.Since(start)
		if ok {
			report("work", *nJobs, dd, "workflows/s")
		} else {
			fmt.Printf("%s work failed (timeout after %v)\n", lib, dd.Round(time.Millisecond))
		}
	}

	// 3. e2e-latency: open-loop submits at `rate`/s; latency = submit call start -> watcher sees completed_at.
	{
		rec := newRecorder(*nE2E)
		sub := make([]time.Time, *nE2E)
		var mu sync.Mutex
		stop := make(chan struct{})
		go w.run(*watchIvl, stop, func(id string, at time.Time) {
			if i, ok := idIndex(id, "e2e-"); ok {
				mu.Lock()
				t := sub[i]
				mu.Unlock()
				rec.set(i, at.Sub(t))
			}
		})
		interval := time.Duration(float64(time.Second) / *e2eRate)
		start := time.Now()
		for i := 0; i < *nE2E; i++ {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			mu.Lock()
			sub[i] = time.Now()
			mu.Unlock()
			_, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "e2e-" + strconv.Itoa(i)}, NoopWf, i)
			must(err)
		}
		fmt.Printf("# %s e2e submitted %d in %v (target %.0f/s)\n", lib, *nE2E, time.Since(start).Round(time.Millisecond), *e2eRate)
		rec.wait(*timeout)
		close(stop)
		reportLat("e2e-latency", rec.values(), *nE2E)
	}

	// 4. workflow3: N 3-activity workflows created from `conc` goroutines.
	{
		rec := newRecorder(*nWf3)
		sub := make([]time.Time, *nWf3)
		var mu sync.Mutex
		stop := make(chan struct{})
		go w.run(*watchIvl, stop, func(id string, at time.Time) {
			if i, ok := idIndex(id, "wf3-"); ok {
				mu.Lock()
				t := sub[i]
				mu.Unlock()
				rec.set(i, at.Sub(t))
			}
		})
		start := time.Now()
		must(parallel(*nWf3, *conc, func(i int) error {
			mu.Lock()
			sub[i] = time.Now()
			mu.Unlock()
			_, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "wf3-" + strconv.Itoa(i)}, Wf3, i)
			return err
		}))
		ok := rec.wait(*timeout)
		dd := time.Since(start)
		close(stop)
		if ok {
			report("workflow3", *nWf3, dd, "workflows/s")
		} else {
			fmt.Printf("%s workflow3 failed (timeout after %v)\n", lib, dd.Round(time.Millisecond))
		}
		reportLat("workflow3-latency", rec.values(), *nWf3)
	}

	// 5. timer-lateness: workflows with a durable timer due at t0+1s..t0+3s.
	{
		rng := rand.New(rand.NewPCG(*seed, 0))
		offs := make([]time.Duration, *nTimers)
		for i := range offs {
			offs[i] = time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		}
		t0 := time.Now()
		must(parallel(*nTimers, *conc, func(i int) error {
			_, err := c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: "timer-" + strconv.Itoa(i)}, TimerWf, i, t0.Add(offs[i]).UnixNano())
			return err
		}))
		fmt.Printf("# %s timers submitted %d in %v\n", lib, *nTimers, time.Since(t0).Round(time.Millisecond))
		timerRec.wait(*timeout)
		reportLat("timer-lateness", timerRec.values(), *nTimers)
	}

	stopWorker()
	done := make(chan struct{})
	go func() { _ = wk.WaitForCompletion(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}
