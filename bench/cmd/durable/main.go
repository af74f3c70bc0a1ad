// Command durable runs the five durable-execution scenarios (enqueue, work,
// e2e-latency, workflow3, timer-lateness) on Orrery worlds, with the
// parameters and output lines of the durable peers' programs in
// bench/peers/durable, so that one script prints every row in one table
// (see bench/README.md for the scenario definitions and the mapping).
//
// It runs the real plane in this process: a plane.Host with the production
// actor executor, an adapter pool (plane/adapter) with an in-process no-op
// adapter, the durable timer worker (plane/timer, lagging behind the host,
// which fires its worlds' timers itself, as in a node) and the reapers
// (plane/reaper), over store/sqlite (orrery-sqlite) or store/postgres
// (orrery-pg). With -figures it measures the plane's own figures instead
// (figures.go). With -api workflow it runs e2e-latency and workflow3
// through package workflow instead of worlds, as orrery-wf-sqlite and
// orrery-wf-pg (workflow.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/plane/reaper"
	"github.com/orrery-run/orrery/plane/timer"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

var (
	backend = flag.String("store", "sqlite", "sqlite or pg (the row's lib is orrery-<store>)")
	nJobs   = flag.Int("n", 20_000, "one-step items for enqueue/work")
	conc    = flag.Int("conc", 32, "concurrent submitting goroutines (enqueue, workflow3, timers)")
	nE2E    = flag.Int("e2e", 2_000, "items for e2e-latency")
	e2eRate = flag.Float64("rate", 200, "e2e submit rate per second (open loop)")
	nWf3    = flag.Int("wf3", 2_000, "3-step workflows")
	nTimers = flag.Int("timers", 500, "durable timers for timer-lateness")
	seed    = flag.Uint64("seed", 1, "random seed (timer due times)")
	nWorlds = flag.Int("worlds", 100, "worlds the items are spread over (item i goes to world i mod worlds)")
	// The no-op adapter is in-process and costs nothing to run: the pool's
	// bound is there for adapters that call out. At 100 it held workflow3's
	// chained effects back while new workflows were admitted at full
	// speed, so that all 2,000 advanced together and finished near the end
	// (p50 1.5 s); DBOS runs its 2,000 workflows with no bound at all.
	effConc  = flag.Int("effects", 1000, "adapter pool concurrency")
	dir      = flag.String("dir", "", "directory for the SQLite file (default: a fresh temp dir, removed at exit)")
	pgDB     = flag.String("db", "peers_orrery", "Postgres database to drop and recreate (orrery-pg; orrery-wf-pg adds _wf unless -db is given)")
	timeout  = flag.Duration("timeout", 90*time.Second, "per-scenario completion timeout")
	cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of the scenarios to this file")
	figures  = flag.Bool("figures", false, "measure the plane figures instead of the peer scenarios")
	universe = "bench"
)

// ---- the bench world ----

// Item is a one-step item: its handler applies it. Scen says which
// scenario's recorder, if any, learns of its commit.
type Item struct {
	I    int64
	Scen uint8
}

// Start starts workflow I: three effects chained through their receipts.
type Start struct{ I int64 }

// Step is the params of a bench.noop effect and the body of its receipt.
type Step struct {
	I int64
	K int64
}

// Arm sets a durable timer due at Due (unix nanos) that delivers Fire.
type Arm struct {
	I   int64
	Due int64
}

// Fire is the timer's input.
type Fire struct {
	I   int64
	Due int64
}

// Counters is the bench world's state.
type Counters struct {
	Applied int64
	Flows   int64
	Fired   int64
}

const (
	scenWork uint8 = iota
	scenE2E
	scenWf3
	kindNoop = "bench.noop"
)

func benchDef(tr *tracker) *world.Def[Counters] {
	d := world.New[Counters]("bench.durable", 1)
	world.EffectKind[Step](d, kindNoop)
	world.On(d, func(c *world.Ctx, s *Counters, it Item) error {
		s.Applied++
		if it.Scen != scenWork {
			tr.stepped(c.World(), c.Height(), it.Scen, it.I)
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counters, st Start) error {
		tr.effect(c.World(), c.Height(), c.Effect(kindNoop, Step{I: st.I, K: 1}))
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counters, r world.Receipt) error {
		var st Step
		if r.Status != vocab.ReceiptOK {
			return fmt.Errorf("receipt %s", r.Status)
		}
		if err := r.Decode(&st); err != nil {
			return err
		}
		if st.K < 3 {
			tr.effect(c.World(), c.Height(), c.Effect(kindNoop, Step{I: st.I, K: st.K + 1}))
			return nil
		}
		s.Flows++
		tr.stepped(c.World(), c.Height(), scenWf3, st.I)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counters, a Arm) error {
		c.SetTimer(time.Unix(0, a.Due), Fire(a))
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Counters, f Fire) error {
		s.Fired++
		// Lateness is taken when the handler of the firing runs (the first
		// time: a replay after a restore runs it again and is ignored).
		tr.fired(f.I, time.Since(time.Unix(0, f.Due)))
		return nil
	})
	return d
}

// noop is the in-process adapter of bench.noop: it answers at once with
// its params as the receipt body.
type noop struct{}

func (noop) Kinds() []string { return []string{kindNoop} }

func (noop) Execute(_ context.Context, it vocab.EffectItem) (effect.Result, error) {
	var st Step
	if err := world.Decode(it.Params, &st); err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	return effect.OK(st), nil
}

// ---- completion tracking ----

// tracker learns when an item's completion is visible: its handler notes
// (world, height) when it runs, and the host's Observe hook reports each
// Commit right after it returns, with the world's new journal head. An
// item is visible once a commit of its world reaches its height.
type tracker struct {
	mu      sync.Mutex
	pending map[string][]pend
	recs    [3]*recorder
	submit  [3][]atomic.Int64 // unix nanos just before the submit call
	timers  *recorder
	// fx, when set (figures), learns when each effect's intent was
	// committed: pendingFx holds (world, height, hash) until then.
	fx        *fxTimes
	pendingFx map[string][]pendFx
}

type pendFx struct {
	height uint64
	hash   string
}

// fxTimes are the figures' effect timestamps by intent hash.
type fxTimes struct {
	mu        sync.Mutex
	published map[string]time.Time // the commit that journaled the intent returned
	completed map[string]time.Time // the adapter pool's Complete returned: the receipt is durable
}

func newFxTimes() *fxTimes {
	return &fxTimes{published: map[string]time.Time{}, completed: map[string]time.Time{}}
}

func (t *tracker) effect(w string, h uint64, hash string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fx != nil {
		t.pendingFx[w] = append(t.pendingFx[w], pendFx{height: h, hash: hash})
	}
}

type pend struct {
	height uint64
	scen   uint8
	i      int64
}

func newTracker() *tracker {
	return &tracker{pending: map[string][]pend{}, pendingFx: map[string][]pendFx{}}
}

func (t *tracker) arm(scen uint8, n int) *recorder {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recs[scen] = newRecorder(n)
	t.submit[scen] = make([]atomic.Int64, n)
	return t.recs[scen]
}

func (t *tracker) submitted(scen uint8, i int, at time.Time) { t.submit[scen][i].Store(at.UnixNano()) }

func (t *tracker) stepped(w string, h uint64, scen uint8, i int64) {
	t.mu.Lock()
	t.pending[w] = append(t.pending[w], pend{height: h, scen: scen, i: i})
	t.mu.Unlock()
}

func (t *tracker) fired(i int64, late time.Duration) {
	t.mu.Lock()
	r := t.timers
	t.mu.Unlock()
	if r != nil {
		r.set(int(i), late)
	}
}

func (t *tracker) observe(ev plane.HostEvent) {
	if ev.Kind != plane.EvCommit {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if fx := t.pendingFx[ev.World]; t.fx != nil && len(fx) > 0 {
		keep := fx[:0]
		t.fx.mu.Lock()
		for _, p := range fx {
			if p.height > ev.Height {
				keep = append(keep, p)
			} else if _, ok := t.fx.published[p.hash]; !ok {
				t.fx.published[p.hash] = now
			}
		}
		t.fx.mu.Unlock()
		t.pendingFx[ev.World] = keep
	}
	ps := t.pending[ev.World]
	if len(ps) == 0 {
		return
	}
	keep := ps[:0]
	for _, p := range ps {
		if p.height > ev.Height {
			keep = append(keep, p)
			continue
		}
		if r := t.recs[p.scen]; r != nil && int(p.i) < len(t.submit[p.scen]) {
			// A step of an earlier round of the same scenario (a replay
			// after a restore) finds no submit time: not a sample.
			if at := t.submit[p.scen][p.i].Load(); at != 0 {
				r.set(int(p.i), now.Sub(time.Unix(0, at)))
			}
		}
	}
	t.pending[ev.World] = keep
}

// ---- helpers (the peers' output format) ----

type recorder struct {
	mu   sync.Mutex
	d    []time.Duration
	seen []bool
	left int
	done chan struct{}
	last time.Time
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
		r.last = time.Now()
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

var lib = "orrery-sqlite"

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
	if name == "timer-lateness" {
		// Below the table's 0.1 ms: how close to its due time a firing
		// starts, and whether any starts before it.
		fmt.Printf("# %s %s min=%v p25=%v p50=%v p75=%v\n", lib, name, v[0], v[len(v)/4], v[len(v)/2], v[len(v)*3/4])
	}
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

// orreryVersion is the main module's version as this binary was built
// (a replace of ../ reads "(devel)"; the VCS revision when Go stamped it).
func orreryVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := "(devel)"
	for _, d := range bi.Deps {
		if d.Path == "github.com/orrery-run/orrery" {
			v = d.Version
		}
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

func worldID(i int) string { return fmt.Sprintf("w%04d", i%*nWorlds) }

// ---- the plane in this process ----

// rig is one running plane: host, adapter pool, timer worker, reapers.
type rig struct {
	st      store.Store
	sys     *actor.System
	host    *plane.Host
	client  *plane.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	kernels plane.Kernels
}

const (
	benchWorker = "bench-worker"
	claimTTL    = 30 * time.Second
)

// setup creates and assigns the worlds (before any clock starts: it is
// deployment, as the peers' queue and workflow registration are).
func setup(ctx context.Context, st store.Store, n int) {
	createWorlds(ctx, st, benchWorker, n, worldID)
}

// createWorlds creates n worlds named by id and assigns them to worker,
// from 32 goroutines (the store groups their commits).
func createWorlds(ctx context.Context, st store.Store, worker string, n int, id func(int) string) {
	must(parallel(n, 32, func(i int) error {
		if _, err := st.CreateWorld(ctx, universe, id(i), nil); err != nil {
			return err
		}
		return st.Assign(ctx, id(i), store.Assignment{DesiredWorker: worker, Reason: "bench"}, nil)
	}))
}

// startPlane starts the host and the workers beside it.
func startPlane(ctx context.Context, st store.Store, worker string, kernels plane.Kernels, observe func(plane.HostEvent), hc func(*plane.HostConfig), poolStore adapter.Store) *rig {
	r := &rig{st: st, sys: actor.NewSystem(), kernels: kernels}
	ex := r.sys.Executor()
	cfg := plane.HostConfig{Worker: worker, Store: st, Kernels: kernels, Observe: observe}
	if hc != nil {
		hc(&cfg)
	}
	h, err := plane.StartHost(ctx, r.sys.Root(), cfg)
	must(err)
	r.host = h
	r.client, err = plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels, Executor: ex, Hosts: []*plane.Host{h}})
	must(err)
	if poolStore == nil {
		poolStore = st
	}
	pool, err := adapter.NewPool(poolStore, adapter.Config{Worker: worker + "-effects", Executor: ex, Concurrency: *effConc, ClaimTTL: claimTTL},
		adapter.Register(noop{}, adapter.NoRetry()))
	must(err)
	// As a node configures it: the host fires the timers of the worlds it
	// holds, and the worker fires only what is node.DefaultTimerLag late.
	tw, err := timer.New(st, timer.Config{Worker: worker + "-timers", Executor: ex, ClaimTTL: claimTTL, Lag: node.DefaultTimerLag})
	must(err)
	rctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	jobs := []reaper.Job{reaper.Effects(st, claimTTL), reaper.Timers(st, claimTTL)}
	if ds, ok := st.(interface {
		SweepDedupe(ctx context.Context) (int, error)
		DedupeRetention() time.Duration
	}); ok {
		jobs = append(jobs, reaper.Dedupe(ds))
	}
	for _, run := range []func(context.Context) error{
		pool.Run, tw.Run,
		func(ctx context.Context) error { return reaper.Run(ctx, reaper.Config{Executor: ex}, jobs...) },
	} {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); _ = run(rctx) }()
	}
	return r
}

func (r *rig) stop(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = r.host.Stop(sctx)
	r.cancel()
	r.wg.Wait()
	_, _ = r.sys.Close(sctx)
}

// journaled counts the journal records of the bench worlds: every item
// is journaled exactly once, so this is the completed count.
func journaled(ctx context.Context, st store.Store) (int, error) {
	total := 0
	for i := 0; i < *nWorlds; i++ {
		h, err := st.Head(ctx, worldID(i))
		if err != nil {
			return 0, err
		}
		total += int(h)
	}
	return total, nil
}

func waitJournaled(ctx context.Context, st store.Store, n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c, err := journaled(ctx, st); err == nil && c >= n {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func main() {
	flag.Parse()
	lib = "orrery-" + *backend
	if *api == "workflow" {
		lib = "orrery-wf-" + *backend
		dbSet := false
		flag.Visit(func(f *flag.Flag) { dbSet = dbSet || f.Name == "db" })
		if !dbSet {
			*pgDB += "_wf"
		}
	} else if *api != "plane" {
		must(fmt.Errorf("unknown -api %q (plane or workflow)", *api))
	}
	ctx := context.Background()
	fmt.Printf("# go=%s GOMAXPROCS=%d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Printf("# %s github.com/orrery-run/orrery@%s\n", lib, orreryVersion())
	st, closeStore := openStore(ctx)
	defer closeStore()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	if *figures {
		if *api == "workflow" {
			must(fmt.Errorf("-figures measures the plane: not with -api workflow"))
		}
		runFigures(ctx, st)
		return
	}
	if *api == "workflow" {
		runWorkflowAPI(ctx, st)
		return
	}
	fmt.Printf("# %s settings: %d worlds on one host (item i to world i mod %d), adapter pool concurrency %d, HostConfig defaults (MaxInboxBatch=256, group commit of the store)\n",
		lib, *nWorlds, *nWorlds, *effConc)

	tr := newTracker()
	def := benchDef(tr)
	must(def.Err())
	kernels := plane.Kernels{universe: def.Kernel()}
	setup(ctx, st, *nWorlds)
	client, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels, Executor: actor.NewExecutor(1)})
	must(err)

	// 1. enqueue: N durable sends from `conc` goroutines, no host running.
	{
		start := time.Now()
		must(parallel(*nJobs, *conc, func(i int) error {
			_, err := client.Send(ctx, worldID(i), Item{I: int64(i), Scen: scenWork}, "")
			return err
		}))
		report("enqueue", *nJobs, time.Since(start), "items/s")
	}

	// 2. work: start the plane, wait until all N are journaled.
	var r *rig
	{
		start := time.Now()
		r = startPlane(ctx, st, benchWorker, kernels, tr.observe, nil, nil)
		ok := waitJournaled(ctx, st, *nJobs, *timeout)
		d := time.Since(start)
		if ok {
			report("work", *nJobs, d, "items/s")
		} else {
			fmt.Printf("%s work failed (timeout after %v)\n", lib, d.Round(time.Millisecond))
		}
	}
	defer r.stop(ctx)

	// 3. e2e-latency: open-loop sends at `rate`/s from one goroutine;
	// latency = submit start → the commit that journaled the item returned.
	{
		rec := tr.arm(scenE2E, *nE2E)
		interval := time.Duration(float64(time.Second) / *e2eRate)
		start := time.Now()
		for i := 0; i < *nE2E; i++ {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			tr.submitted(scenE2E, i, time.Now())
			_, err := r.client.Send(ctx, worldID(i), Item{I: int64(i), Scen: scenE2E}, fmt.Sprintf("e2e-%d", i))
			must(err)
		}
		fmt.Printf("# %s e2e submitted %d in %v (target %.0f/s)\n", lib, *nE2E, time.Since(start).Round(time.Millisecond), *e2eRate)
		rec.wait(*timeout)
		reportLat("e2e-latency", rec.values(), *nE2E)
	}

	// 4. workflow3: N 3-step workflows started from `conc` goroutines.
	{
		rec := tr.arm(scenWf3, *nWf3)
		start := time.Now()
		must(parallel(*nWf3, *conc, func(i int) error {
			tr.submitted(scenWf3, i, time.Now())
			_, err := r.client.Send(ctx, worldID(i), Start{I: int64(i)}, fmt.Sprintf("wf3-%d", i))
			return err
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

	// 5. timer-lateness: durable timers due at t0+1s..t0+3s.
	{
		rng := rand.New(rand.NewPCG(*seed, 0))
		offs := make([]time.Duration, *nTimers)
		for i := range offs {
			offs[i] = time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		}
		rec := newRecorder(*nTimers)
		tr.mu.Lock()
		tr.timers = rec
		tr.mu.Unlock()
		t0 := time.Now()
		must(parallel(*nTimers, *conc, func(i int) error {
			_, err := r.client.Send(ctx, worldID(i), Arm{I: int64(i), Due: t0.Add(offs[i]).UnixNano()}, fmt.Sprintf("timer-%d", i))
			return err
		}))
		fmt.Printf("# %s timers submitted %d in %v; ours is a durable timer (stored by the world's commit, stepped at its due time by the host that holds the world, its firing journaled by the next commit; measured when the firing's handler runs), DBOS's is an in-process sleep\n",
			lib, *nTimers, time.Since(t0).Round(time.Millisecond))
		rec.wait(*timeout)
		reportLat("timer-lateness", rec.values(), *nTimers)
	}
}
