// Side-by-side durable-execution benchmarks: River (github.com/riverqueue/river, Postgres job queue).
// Scenario definitions: bench/README.md ("Side by side with the durable-execution peers"). Output format: see ../run.sh.
package main

import (
	"context"
	"encoding/json"
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

const lib = "river"

var (
	nJobs      = flag.Int("n", 20_000, "jobs for enqueue/work")
	conc       = flag.Int("conc", 32, "concurrent submitting goroutines (enqueue, workflow3, timers)")
	nE2E       = flag.Int("e2e", 2_000, "jobs for e2e-latency")
	e2eRate    = flag.Float64("rate", 200, "e2e submit rate per second (open loop)")
	nWf3       = flag.Int("wf3", 2_000, "3-step workflows")
	nTimers    = flag.Int("timers", 500, "scheduled jobs for timer-lateness")
	seed       = flag.Uint64("seed", 1, "random seed (timer due times)")
	dbName     = flag.String("db", "peers_river", "database to drop and recreate")
	keep       = flag.Bool("keep", false, "keep the database after the run")
	poolSize   = flag.Int("pool", 40, "pgxpool MaxConns")
	maxWorkers = flag.Int("workers", 100, "River QueueConfig.MaxWorkers")
	cooldown   = flag.Duration("fetch-cooldown", 10*time.Millisecond, "River FetchCooldown (library default 100ms)")
	pollIvl    = flag.Duration("fetch-poll", time.Second, "River FetchPollInterval (library default 1s)")
	timeout    = flag.Duration("timeout", 90*time.Second, "per-scenario completion timeout")
)

// ---- job kinds ----

type NoopArgs struct {
	I int `json:"i"`
}

func (NoopArgs) Kind() string { return "noop" }

type E2EArgs struct {
	I int `json:"i"`
}

func (E2EArgs) Kind() string { return "e2e" }

type Wf3Args struct {
	I    int `json:"i"`
	Step int `json:"step"`
}

func (Wf3Args) Kind() string { return "wf3" }

type TimerArgs struct {
	I   int   `json:"i"`
	Due int64 `json:"due"` // unix nanos
}

func (TimerArgs) Kind() string { return "timer" }

type noopWorker struct{ river.WorkerDefaults[NoopArgs] }

func (*noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

type e2eWorker struct{ river.WorkerDefaults[E2EArgs] }

func (*e2eWorker) Work(context.Context, *river.Job[E2EArgs]) error { return nil }

// wf3Worker: steps 1 and 2 insert the next step and complete themselves in one transaction;
// step 3 completes through River's normal completer.
type wf3Worker struct {
	river.WorkerDefaults[Wf3Args]
	pool *pgxpool.Pool
}

func (w *wf3Worker) Work(ctx context.Context, job *river.Job[Wf3Args]) error {
	if job.Args.Step >= 3 {
		return nil
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	client := river.ClientFromContext[pgx.Tx](ctx)
	if _, err := client.InsertTx(ctx, tx, Wf3Args{I: job.Args.I, Step: job.Args.Step + 1}, nil); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

type timerWorker struct {
	river.WorkerDefaults[TimerArgs]
	rec *recorder
}

func (w *timerWorker) Work(_ context.Context, job *river.Job[TimerArgs]) error {
	w.rec.set(job.Args.I, time.Since(time.Unix(0, job.Args.Due)))
	return nil
}

// ---- helpers ----

// recorder collects one duration per index and signals when all are set.
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

// parallel runs f(i) for i in [0,n) from k goroutines; returns the first error.
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

// recreateDB drops and creates the peer's own database through the admin DSN.
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

// waitCount polls a count query every 20ms until it reaches n; returns false on timeout.
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
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	ctx := context.Background()
	fmt.Printf("# go=%s GOMAXPROCS=%d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	printVersions("github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5", "github.com/jackc/pgx/v5")
	fmt.Printf("# %s settings: queue=default MaxWorkers=%d FetchCooldown=%v FetchPollInterval=%v pool.MaxConns=%d (other Config fields default)\n",
		lib, *maxWorkers, *cooldown, *pollIvl, *poolSize)

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

	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	must(err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	must(err)

	timerRec := newRecorder(*nTimers)
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	river.AddWorker(workers, &e2eWorker{})
	river.AddWorker(workers, &wf3Worker{pool: pool})
	river.AddWorker(workers, &timerWorker{rec: timerRec})

	client, err := river.NewClient(driver, &river.Config{
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *maxWorkers}},
		FetchCooldown:     *cooldown,
		FetchPollInterval: *pollIvl,
		Workers:           workers,
	})
	must(err)

	// Completion events (emitted by River only after the completion is committed).
	e2eSub := make([]time.Time, *nE2E)
	e2eRec := newRecorder(*nE2E)
	wf3Sub := make([]time.Time, *nWf3)
	wf3Rec := newRecorder(*nWf3)
	var subMu sync.Mutex // guards e2eSub/wf3Sub reads vs writes
	events, cancelSub := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 1 << 18, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancelSub()
	go func() {
		for ev := range events {
			now := time.Now()
			switch ev.Job.Kind {
			case "e2e":
				var a E2EArgs
				if json.Unmarshal(ev.Job.EncodedArgs, &a) == nil {
					subMu.Lock()
					t := e2eSub[a.I]
					subMu.Unlock()
					e2eRec.set(a.I, now.Sub(t))
				}
			case "wf3":
				var a Wf3Args
				if json.Unmarshal(ev.Job.EncodedArgs, &a) == nil && a.Step == 3 {
					subMu.Lock()
					t := wf3Sub[a.I]
					subMu.Unlock()
					wf3Rec.set(a.I, now.Sub(t))
				}
			}
		}
	}()

	// 1. enqueue: N separate durable inserts from `conc` goroutines, workers not started.
	{
		start := time.Now()
		must(parallel(*nJobs, *conc, func(i int) error {
			_, err := client.Insert(ctx, NoopArgs{I: i}, nil)
			return err
		}))
		report("enqueue", *nJobs, time.Since(start), "jobs/s")
	}

	// 2. work: start workers, wait until all N are completed in the database.
	{
		start := time.Now()
		must(client.Start(ctx))
		ok := waitCount(ctx, pool, "select count(*) from river_job where state='completed'", *nJobs, *timeout)
		d := time.Since(start)
		if ok {
			report("work", *nJobs, d, "jobs/s")
		} else {
			fmt.Printf("%s work failed (timeout after %v)\n", lib, d.Round(time.Millisecond))
		}
	}

	// 3. e2e-latency: open-loop submits at `rate`/s, latency = submit call start -> completion event.
	{
		interval := time.Duration(float64(time.Second) / *e2eRate)
		start := time.Now()
		for i := 0; i < *nE2E; i++ {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			subMu.Lock()
			e2eSub[i] = time.Now()
			subMu.Unlock()
			_, err := client.Insert(ctx, E2EArgs{I: i}, nil)
			must(err)
		}
		fmt.Printf("# %s e2e submitted %d in %v (target %.0f/s)\n", lib, *nE2E, time.Since(start).Round(time.Millisecond), *e2eRate)
		e2eRec.wait(*timeout)
		reportLat("e2e-latency", e2eRec.values(), *nE2E)
	}

	// 4. workflow3: N 3-step chains submitted from `conc` goroutines.
	{
		start := time.Now()
		must(parallel(*nWf3, *conc, func(i int) error {
			subMu.Lock()
			wf3Sub[i] = time.Now()
			subMu.Unlock()
			_, err := client.Insert(ctx, Wf3Args{I: i, Step: 1}, nil)
			return err
		}))
		ok := wf3Rec.wait(*timeout)
		d := time.Since(start)
		if ok {
			report("workflow3", *nWf3, d, "workflows/s")
		} else {
			fmt.Printf("%s workflow3 failed (timeout after %v)\n", lib, d.Round(time.Millisecond))
		}
		reportLat("workflow3-latency", wf3Rec.values(), *nWf3)
	}

	// 5. timer-lateness: jobs scheduled at t0+1s..t0+3s; lateness = work start - due.
	{
		rng := rand.New(rand.NewPCG(*seed, 0))
		offs := make([]time.Duration, *nTimers)
		for i := range offs {
			offs[i] = time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		}
		t0 := time.Now()
		must(parallel(*nTimers, *conc, func(i int) error {
			due := t0.Add(offs[i])
			_, err := client.Insert(ctx, TimerArgs{I: i, Due: due.UnixNano()}, &river.InsertOpts{ScheduledAt: due})
			return err
		}))
		fmt.Printf("# %s timers submitted %d in %v\n", lib, *nTimers, time.Since(t0).Round(time.Millisecond))
		timerRec.wait(*timeout)
		reportLat("timer-lateness", timerRec.values(), *nTimers)
	}

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = client.Stop(stopCtx)
}
