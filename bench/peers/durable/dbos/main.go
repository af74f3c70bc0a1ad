// Side-by-side durable-execution benchmarks: DBOS Transact for Go
// (github.com/dbos-inc/dbos-transact-golang, Postgres system database).
// Scenario definitions: bench/README.md ("Side by side with the durable-execution peers"). Output format: see ../run.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const lib = "dbos"

var (
	nJobs     = flag.Int("n", 20_000, "workflows for enqueue/work")
	conc      = flag.Int("conc", 32, "concurrent submitting goroutines (enqueue, workflow3, timers)")
	nE2E      = flag.Int("e2e", 2_000, "workflows for e2e-latency")
	e2eRate   = flag.Float64("rate", 200, "e2e submit rate per second (open loop)")
	nWf3      = flag.Int("wf3", 2_000, "3-step workflows")
	nTimers   = flag.Int("timers", 500, "durable sleeps for timer-lateness")
	seed      = flag.Uint64("seed", 1, "random seed (timer due times)")
	dbName    = flag.String("db", "peers_dbos", "database to drop and recreate")
	keep      = flag.Bool("keep", false, "keep the database after the run")
	poolSize  = flag.Int("pool", 40, "pgxpool MaxConns (DBOS default 20)")
	workerCon = flag.Int("workers", 100, "queue WorkerConcurrency")
	qPoll     = flag.Duration("queue-poll", 10*time.Millisecond, "queue base polling interval (library default 1s)")
	timeout   = flag.Duration("timeout", 90*time.Second, "per-scenario completion timeout")
)

// ---- workflows ----

func noopStep(context.Context) (int, error) { return 0, nil }

// noopWf is the one-step workflow used by enqueue/work and e2e-latency.
func noopWf(ctx dbos.Context, i int) (int, error) {
	return dbos.RunAsStep(ctx, noopStep, dbos.WithStepName("noop"))
}

// wf3 runs three sequential no-op steps, each checkpointed by DBOS.
func wf3(ctx dbos.Context, i int) (int, error) {
	for s := 1; s <= 3; s++ {
		if _, err := dbos.RunAsStep(ctx, noopStep, dbos.WithStepName(fmt.Sprintf("step%d", s))); err != nil {
			return 0, err
		}
	}
	return i, nil
}

type TimerIn struct {
	I   int   `json:"i"`
	Due int64 `json:"due"` // unix nanos
}

var timerRec *recorder

// timerWf durably sleeps until the due time, then records its lateness.
func timerWf(ctx dbos.Context, in TimerIn) (int, error) {
	due := time.Unix(0, in.Due)
	if _, err := dbos.Sleep(ctx, max(time.Until(due), 0)); err != nil {
		return 0, err
	}
	timerRec.set(in.I, time.Since(due))
	return in.I, nil
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

func dsn() string {
	if s := os.Getenv("PEERS_PG_DSN"); s != "" {
		return s
	}
	return "postgres://orrery:orrery@127.0.0.1:5432/orrery?sslmode=disable"
}

func recreateDB(ctx context.Context, drop bool) {
	c, err := pgx.Connect(ctx, dsn())
	must(err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{*dbName}.Sanitize()+" WITH (FORCE)")
	must(err)
	if !drop {
		_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{*dbName}.Sanitize())
		must(err)
		var sc, fs, ver string
		must(c.QueryRow(ctx, "select current_setting('synchronous_commit'), current_setting('fsync'), current_setting('server_version')").Scan(&sc, &fs, &ver))
		fmt.Printf("# %s postgres %s synchronous_commit=%s fsync=%s\n", lib, ver, sc, fs)
	}
}

func waitCount(ctx context.Context, pool *pgxpool.Pool, q string, n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var c int
		if err := pool.QueryRow(ctx, q).Scan(&c); err == nil && c >= n {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func main() {
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	slog.SetDefault(logger)
	ctx := context.Background()
	fmt.Printf("# go=%s GOMAXPROCS=%d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	printVersions("github.com/dbos-inc/dbos-transact-golang", "github.com/jackc/pgx/v5")
	fmt.Printf("# %s settings: queue=bench WorkerConcurrency=%d BasePollingInterval=%v pool.MaxConns=%d; e2e/workflow3/timers use RunWorkflow without a queue (other Config fields default)\n",
		lib, *workerCon, *qPoll, *poolSize)

	recreateDB(ctx, false)
	if !*keep {
		defer recreateDB(ctx, true)
	}
	pcfg, err := pgxpool.ParseConfig(dsn())
	must(err)
	pcfg.ConnConfig.Database = *dbName
	pcfg.MaxConns = int32(*poolSize)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	must(err)
	defer pool.Close()

	timerRec = newRecorder(*nTimers)
	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "peers", SystemDBPool: pool, Logger: logger})
	must(err)
	dbos.RegisterWorkflow(dctx, noopWf, dbos.WithWorkflowName("noop"))
	dbos.RegisterWorkflow(dctx, wf3, dbos.WithWorkflowName("wf3"))
	dbos.RegisterWorkflow(dctx, timerWf, dbos.WithWorkflowName("timer"))
	_, err = dbos.RegisterQueue(dctx, "bench", dbos.WithWorkerConcurrency(*workerCon), dbos.WithQueueBasePollingInterval(*qPoll))
	must(err)

	// 1. enqueue: N separate durable enqueues from `conc` goroutines, before the runtime (queue runner) is launched.
	{
		start := time.Now()
		must(parallel(*nJobs, *conc, func(i int) error {
			_, err := dbos.Enqueue[int](dctx, "bench", "noop", i)
			return err
		}))
		report("enqueue", *nJobs, time.Since(start), "workflows/s")
	}

	// 2. work: launch the runtime, wait until all N are SUCCESS in the database.
	{
		start := time.Now()
		must(dbos.Launch(dctx))
		ok := waitCount(ctx, pool, "select count(*) from dbos.workflow_status where status='SUCCESS'", *nJobs, *timeout)
		d := time.Since(start)
		if ok {
			report("work", *nJobs, d, "workflows/s")
		} else {
			fmt.Printf("%s work failed (timeout after %v)\n", lib, d.Round(time.Millisecond))
		}
	}

	// 3. e2e-latency: open-loop RunWorkflow at `rate`/s; latency = submit call start -> GetResult returns
	// (DBOS delivers the result after the SUCCESS status is committed).
	{
		rec := newRecorder(*nE2E)
		interval := time.Duration(float64(time.Second) / *e2eRate)
		start := time.Now()
		for i := 0; i < *nE2E; i++ {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			t := time.Now()
			h, err := dbos.RunWorkflow(dctx, noopWf, i)
			must(err)
			go func(i int) {
				if _, err := h.GetResult(); err == nil {
					rec.set(i, time.Since(t))
				}
			}(i)
		}
		fmt.Printf("# %s e2e submitted %d in %v (target %.0f/s)\n", lib, *nE2E, time.Since(start).Round(time.Millisecond), *e2eRate)
		rec.wait(*timeout)
		reportLat("e2e-latency", rec.values(), *nE2E)
	}

	// 4. workflow3: N 3-step workflows started from `conc` goroutines.
	{
		rec := newRecorder(*nWf3)
		start := time.Now()
		must(parallel(*nWf3, *conc, func(i int) error {
			t := time.Now()
			h, err := dbos.RunWorkflow(dctx, wf3, i)
			if err != nil {
				return err
			}
			go func() {
				if _, err := h.GetResult(); err == nil {
					rec.set(i, time.Since(t))
				}
			}()
			return nil
		}))
		ok := rec.wait(*timeout)
		d := time.Since(start)
		if ok {
			report("workflow3", *nWf3, d, "workflows/s")
		} else {
			fmt.Printf("%s workflow3 failed (timeout after %v)\n", lib, d.Round(time.Millisecond))
		}
		reportLat("workflow3-latency", rec.values(), *nWf3)
	}

	// 5. timer-lateness: workflows that durably sleep until t0+1s..t0+3s.
	{
		rng := rand.New(rand.NewPCG(*seed, 0))
		offs := make([]time.Duration, *nTimers)
		for i := range offs {
			offs[i] = time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		}
		t0 := time.Now()
		must(parallel(*nTimers, *conc, func(i int) error {
			_, err := dbos.RunWorkflow(dctx, timerWf, TimerIn{I: i, Due: t0.Add(offs[i]).UnixNano()})
			return err
		}))
		fmt.Printf("# %s timers submitted %d in %v\n", lib, *nTimers, time.Since(t0).Round(time.Millisecond))
		timerRec.wait(*timeout)
		reportLat("timer-lateness", timerRec.values(), *nTimers)
	}

	_ = dbos.Shutdown(dctx, 10*time.Second)
}
