package main

// The plane's own figures (-figures), each on worlds of its own, assigned
// to a worker of its own, in the same store:
//
//   - lease renewal: store.RenewLeases of every lease a worker holds, the
//     call the host makes in batches before expiresAt − margin;
//   - inbox→journal: Send has returned (the item is durable in the inbox)
//     → the commit that journaled it returned, open loop over 100 worlds;
//   - effect dispatch→receipt: the commit that journaled the intent
//     returned → the pool's Complete returned (the receipt is durable in
//     the world's inbox); the adapter is an in-process no-op, so the
//     figure is the plane's own (claim, execute, complete) and nothing
//     of an external call;
//   - restore: plane.Restore (active snapshot + journal tail replayed) of
//     a world whose tail after its snapshot is 10,000 events;
//   - events/s through one world and across 100 worlds, 32 senders and the
//     host running at once (ingress included), and the drain alone;
//   - passivation: heap per passive world (lease + Watch registration) and
//     per active world (process + in-memory world), live heap plus
//     goroutine stacks after a GC, and the cost of a wake.

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

var (
	figLeases  = flag.Int("fig-leases", 1000, "figures: leases renewed per RenewLeases")
	figPassive = flag.Int("fig-passive", 10_000, "figures: passive worlds on the passivation host")
	figActive  = flag.Int("fig-active", 1_000, "figures: active worlds on the passivation host")
	figIdle    = flag.Duration("fig-idle", 2*time.Minute, "figures: IdleAfter of the passivation host (must outlast the wakes, for every woken world to be active at once)")
	figSample  = flag.Int("fig-wake-sample", 2000, "figures: the passivation wakes timed: this many worlds, sent to at -fig-wake-rate, passive then active")
	figWake    = flag.Int("fig-wake-rate", 200, "figures: sends per second of the timed passivation wakes (open loop)")
	figEvents  = flag.Int("fig-events", 20_000, "figures: events for the events/s figures")
	figOnly    = flag.String("fig", "lease,ij,fx,restore,eps,passive", "figures: which to run (comma-separated)")
)

func pcts(name string, v []time.Duration, extra string) {
	if len(v) == 0 {
		fmt.Printf("%s figure %s failed (no samples)\n", lib, name)
		return
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	n := len(v)
	fmt.Printf("%s figure %-22s n=%-6d p50=%s p95=%s p99=%s max=%s%s\n", lib, name, n,
		ms(v[n/2]), ms(v[n*95/100]), ms(v[n*99/100]), ms(v[n-1]), extra)
}

// fxStore wraps the adapter pool's store to time Complete.
type fxStore struct {
	store.Store
	fx *fxTimes
}

func (s fxStore) Complete(ctx context.Context, hash string, c vocab.Claim, r vocab.Receipt) (uint64, bool, error) {
	seq, dup, err := s.Store.Complete(ctx, hash, c, r)
	if err == nil && !dup {
		now := time.Now()
		s.fx.mu.Lock()
		s.fx.completed[hash] = now
		s.fx.mu.Unlock()
	}
	return seq, dup, err
}

// heap is the live heap plus goroutine stacks after a full collection.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

func runFigures(ctx context.Context, st store.Store) {
	tr := newTracker()
	def := benchDef(tr)
	must(def.Err())
	kernels := plane.Kernels{universe: def.Kernel()}

	for _, f := range strings.Split(*figOnly, ",") {
		switch f {
		case "lease":
			figLeaseRenewal(ctx, st)
		case "ij":
			figInboxJournal(ctx, st, tr, kernels)
		case "fx":
			figDispatch(ctx, st, tr, kernels)
		case "restore":
			figRestore(ctx, st, tr, kernels)
		case "eps":
			figEventsPerSec(ctx, st, tr, kernels)
		case "passive":
			figPassivation(ctx, st, tr, kernels)
		default:
			must(fmt.Errorf("unknown figure %q", f))
		}
	}
}

func figLeaseRenewal(ctx context.Context, st store.Store) {
	const w = "fig-lease"
	id := func(i int) string { return fmt.Sprintf("lease-%06d", i) }
	createWorlds(ctx, st, w, *figLeases, id)
	refs := make([]store.LeaseRef, *figLeases)
	for i := range refs {
		l, err := st.Acquire(ctx, id(i), w, time.Minute)
		must(err)
		refs[i] = store.LeaseRef{World: id(i), Epoch: l.Epoch}
	}
	var v []time.Duration
	for range 200 {
		t := time.Now()
		res, err := st.RenewLeases(ctx, w, refs, time.Minute)
		v = append(v, time.Since(t))
		must(err)
		for _, r := range res {
			must(r.Err)
		}
	}
	pcts("lease-renewal", v, fmt.Sprintf(" (one RenewLeases of %d leases; the host renews in pages of 1000)", *figLeases))
	_, err := st.ReleaseLeases(ctx, w, refs)
	must(err)
}

func figInboxJournal(ctx context.Context, st store.Store, tr *tracker, kernels plane.Kernels) {
	const w, nw, n, rate = "fig-ij", 100, 5000, 1000.0
	id := func(i int) string { return fmt.Sprintf("ij-%03d", i%nw) }
	createWorlds(ctx, st, w, nw, id)
	r := startPlane(ctx, st, w, kernels, tr.observe, nil, nil)
	defer r.stop(ctx)
	rec := tr.arm(scenE2E, n)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		// The clock starts when Send returns: the item is durable in the
		// inbox. The tracker reads the time at commit, so store it first.
		tr.submitted(scenE2E, i, time.Now().Add(time.Hour))
		_, err := r.client.Send(ctx, id(i), Item{I: int64(i), Scen: scenE2E}, "")
		tr.submitted(scenE2E, i, time.Now())
		must(err)
	}
	rec.wait(*timeout)
	var v []time.Duration
	for _, d := range rec.values() {
		if d > 0 { // a commit that raced the Send's return: under 0, counted as 0
			v = append(v, d)
		} else {
			v = append(v, 0)
		}
	}
	pcts("inbox-to-journal", v, fmt.Sprintf(" (open loop %.0f/s over %d worlds)", rate, nw))
}

func figDispatch(ctx context.Context, st store.Store, tr *tracker, kernels plane.Kernels) {
	const w, nw, n, rate = "fig-fx", 100, 1000, 200.0
	id := func(i int) string { return fmt.Sprintf("fx-%03d", i%nw) }
	createWorlds(ctx, st, w, nw, id)
	fx := newFxTimes()
	tr.mu.Lock()
	tr.fx = fx
	tr.mu.Unlock()
	r := startPlane(ctx, st, w, kernels, tr.observe, nil, fxStore{st, fx})
	defer r.stop(ctx)
	rec := tr.arm(scenWf3, n)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		tr.submitted(scenWf3, i, time.Now())
		_, err := r.client.Send(ctx, id(i), Start{I: int64(i)}, "")
		must(err)
	}
	rec.wait(*timeout)
	tr.mu.Lock()
	tr.fx = nil
	tr.mu.Unlock()
	fx.mu.Lock()
	var v []time.Duration
	for h, p := range fx.published {
		if c, ok := fx.completed[h]; ok {
			v = append(v, max(c.Sub(p), 0))
		}
	}
	fx.mu.Unlock()
	pcts("dispatch-to-receipt", v, fmt.Sprintf(" (%d workflows x 3 no-op effects, open loop %.0f workflows/s over %d worlds; the adapter is a no-op)", n, rate, nw))
}

func figRestore(ctx context.Context, st store.Store, tr *tracker, kernels plane.Kernels) {
	const w, wid, tail = "fig-restore", "restore-0", 10_000
	createWorlds(ctx, st, w, 1, func(int) string { return wid })
	// First a host that snapshots at every commit, then one that never
	// does: the world's active snapshot is then exactly tail events behind.
	send := func(n int, every uint64) {
		r := startPlane(ctx, st, w, kernels, tr.observe, func(c *plane.HostConfig) { c.SnapshotEvery = every }, nil)
		before, err := st.Head(ctx, wid)
		must(err)
		must(parallel(n, *conc, func(i int) error {
			_, err := r.client.Send(ctx, wid, Item{I: int64(i)}, "")
			return err
		}))
		for {
			h, err := st.Head(ctx, wid)
			must(err)
			if h >= before+uint64(n) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		r.stop(ctx)
	}
	send(100, 1)
	send(tail, 1<<62)
	snap, ok, err := st.ActiveSnapshot(ctx, wid)
	must(err)
	head, err := st.Head(ctx, wid)
	must(err)
	if !ok {
		must(fmt.Errorf("restore figure: no snapshot"))
	}
	var v []time.Duration
	for range 30 {
		t := time.Now()
		inst, _, err := plane.Restore(ctx, st, kernels, wid)
		v = append(v, time.Since(t))
		must(err)
		if inst.Height() != head {
			must(fmt.Errorf("restore figure: restored height %d, head %d", inst.Height(), head))
		}
	}
	pcts("restore", v, fmt.Sprintf(" (snapshot at height %d, %d-event tail, state %d bytes)", snap.Height, head-snap.Height, len(snap.State)))
}

func figEventsPerSec(ctx context.Context, st store.Store, tr *tracker, kernels plane.Kernels) {
	for _, nw := range []int{1, 100} {
		w := fmt.Sprintf("fig-eps%d", nw)
		id := func(i int) string { return fmt.Sprintf("eps%d-%03d", nw, i%nw) }
		createWorlds(ctx, st, w, nw, id)
		headSum := func() int {
			t := 0
			for i := 0; i < nw; i++ {
				h, err := st.Head(ctx, id(i))
				must(err)
				t += int(h)
			}
			return t
		}
		wait := func(n int) {
			for headSum() < n {
				time.Sleep(5 * time.Millisecond)
			}
		}
		// Live: 32 senders while the host runs.
		r := startPlane(ctx, st, w, kernels, tr.observe, nil, nil)
		start := time.Now()
		must(parallel(*figEvents, *conc, func(i int) error {
			_, err := r.client.Send(ctx, id(i), Item{I: int64(i)}, "")
			return err
		}))
		wait(*figEvents)
		d := time.Since(start)
		fmt.Printf("%s figure events/s-live %3d worlds n=%d %v %.0f events/s (32 senders and the host at once: Send + step + commit)\n",
			lib, nw, *figEvents, d.Round(time.Millisecond), float64(*figEvents)/d.Seconds())
		r.stop(ctx)
		// Drain: the inbox filled first, then the host.
		must(parallel(*figEvents, *conc, func(i int) error {
			_, err := r.client.Send(ctx, id(i), Item{I: int64(i)}, "")
			return err
		}))
		start = time.Now()
		r = startPlane(ctx, st, w, kernels, tr.observe, nil, nil)
		wait(2 * *figEvents)
		d = time.Since(start)
		fmt.Printf("%s figure events/s-drain %3d worlds n=%d %v %.0f events/s (inbox filled first; host start, restore, step, commit)\n",
			lib, nw, *figEvents, d.Round(time.Millisecond), float64(*figEvents)/d.Seconds())
		r.stop(ctx)
	}
}

func figPassivation(ctx context.Context, st store.Store, tr *tracker, kernels plane.Kernels) {
	const w = "fig-passive"
	nAll := *figPassive + *figActive
	id := func(i int) string { return fmt.Sprintf("pas-%07d", i) }
	t := time.Now()
	createWorlds(ctx, st, w, nAll, id)
	fmt.Printf("# %s passivation: %d worlds created and assigned in %v\n", lib, nAll, time.Since(t).Round(time.Millisecond))

	var mu sync.Mutex
	acquired, passivated, synced := 0, 0, 0
	allHeld, settled := make(chan struct{}), make(chan struct{})
	observe := func(ev plane.HostEvent) {
		switch ev.Kind {
		case plane.EvAcquired:
			mu.Lock()
			acquired++
			if acquired == nAll {
				close(allHeld)
			}
			mu.Unlock()
		case plane.EvSynced:
			// The pass that took the worlds over ends, then the one its
			// own lease hints asked for: the host is settled.
			mu.Lock()
			if acquired == nAll {
				if synced++; synced == 2 {
					close(settled)
				}
			}
			mu.Unlock()
		case plane.EvPassivate:
			mu.Lock()
			passivated++
			mu.Unlock()
		}
		tr.observe(ev)
	}
	g0 := runtime.NumGoroutine()
	h0 := heap()
	t = time.Now()
	sys := actor.NewSystem()
	h, err := plane.StartHost(ctx, sys.Root(), plane.HostConfig{Worker: w, Store: st, Kernels: kernels, Observe: observe,
		// A host renews every lease it holds once per TTL − margin: at a
		// million worlds, 1,000 RenewLeases calls of 1,000 leases. A long
		// TTL keeps that a background load instead of the store's whole
		// work (a dead host's worlds then wait as long to move).
		LeaseTTL: 15 * time.Minute, IdleAfter: *figIdle})
	must(err)
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = h.Stop(sctx)
		_, _ = sys.Close(sctx)
	}()
	select {
	case <-allHeld:
	case <-time.After(14 * time.Minute):
		must(fmt.Errorf("passivation: leases not acquired"))
	}
	took := time.Since(t)
	fmt.Printf("# %s passivation: %d leases acquired by one host in %v (%.0f/s; one AcquireLeases per page of 1000, and a Watch per world)\n",
		lib, nAll, took.Round(time.Millisecond), float64(nAll)/took.Seconds())
	select {
	case <-settled:
		fmt.Printf("# %s passivation: the host's next pass over its worlds ended %v later\n", lib, (time.Since(t) - took).Round(time.Millisecond))
	case <-time.After(time.Minute):
		fmt.Printf("# %s passivation: no second pass over the worlds within a minute\n", lib)
	}
	h1 := heap()
	g1 := runtime.NumGoroutine()
	client, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels, Executor: sys.Executor()})
	must(err)
	// Wake the first figActive worlds: each is passive (never started), so
	// each send is a wake. The first -fig-wake-sample of them are timed:
	// sent to in an open loop at -fig-wake-rate, a pace the store keeps up
	// with, so that a latency is the wake's own cost and not a queue's;
	// then sent to again, now active, at the same pace: against that
	// latency, the passive one is what a wake costs. Then the rest are
	// woken as fast as 256 sends in flight go, to have figActive worlds
	// active at once (timing the active sends right after that burst
	// would time the store settling from it: in a trace, the commits just
	// after it spent most of a second in SQLite's WAL write and fsync).
	wake := func(from, n, rate int) ([]time.Duration, time.Duration) {
		rec := tr.arm(scenE2E, n)
		t0 := time.Now()
		inFlight := make(chan struct{}, 256)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			if rate > 0 {
				if d := time.Until(t0.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
					time.Sleep(d)
				}
			}
			inFlight <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-inFlight; wg.Done() }()
				tr.submitted(scenE2E, i, time.Now())
				_, err := client.Send(ctx, id(from+i), Item{I: int64(i), Scen: scenE2E}, "")
				must(err)
			}()
		}
		wg.Wait()
		rec.wait(*timeout)
		return rec.values(), time.Since(t0)
	}
	sample := min(*figSample, *figActive)
	t = time.Now()
	wakes, _ := wake(0, sample, *figWake)
	// The same worlds again, now active.
	hot, _ := wake(0, sample, *figWake)
	if rest := *figActive - sample; rest > 0 {
		v, d := wake(sample, rest, 0)
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		fmt.Printf("# %s passivation: %d more worlds woken, 256 sends in flight, in %v (%.0f wakes/s; send->commit p50 %s)\n",
			lib, rest, d.Round(time.Millisecond), float64(len(v))/d.Seconds(), ms(v[len(v)/2]))
	}
	if d := time.Since(t); d >= *figIdle {
		fmt.Printf("# %s passivation: the wakes took %v, longer than -fig-idle: some worlds passivated already\n", lib, d.Round(time.Millisecond))
	}
	_, active := h.Worlds()
	h2 := heap()
	g2 := runtime.NumGoroutine()
	// Then let them passivate: the difference is what being active costs.
	for deadline := time.Now().Add(*figIdle + time.Minute); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		p := passivated
		mu.Unlock()
		if _, a := h.Worlds(); a == 0 || p >= *figActive || time.Now().After(deadline) {
			break
		}
	}
	_, left := h.Worlds()
	h3 := heap()
	fmt.Printf("%s figure passive-world-mem %.0f B/world (%d worlds held, none active: lease + inbox Watch registration; %d goroutines before, %d after)\n",
		lib, float64(h1-h0)/float64(nAll), nAll, g0, g1)
	fmt.Printf("%s figure active-world-mem %.0f B/world (heap + stacks with %d of them active, minus the same after they passivated (%d still active); %d goroutines)\n",
		lib, float64(h2-h3)/float64(max(active-left, 1)), active, left, g2)
	pcts("wake(send->commit)", wakes, fmt.Sprintf(" (a passive world: process start + restore + step + commit; %d/s)", *figWake))
	pcts("active(send->commit)", hot, fmt.Sprintf(" (the same worlds, active; %d/s)", *figWake))
}
