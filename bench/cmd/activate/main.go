// Command activate measures how fast a world answers its first input and
// how fast a passivated world wakes, on one node (plane/node) over
// memstore, SQLite or PostgreSQL:
//
//   - create+call: CreateWorld of a never-seen world, then a Call to it,
//     timed together until the reply is back (the world is placed,
//     acquired, restored and stepped on the way);
//   - wake: a Call to a world whose process was passivated for idleness
//     (its lease still held), timed until the reply is back;
//   - send (ack): a Send to a world held here, timed until it is durable:
//     one store write, the floor under the other two on this store and
//     machine.
//
// It prints p50, p99 and max of each (see bench/README.md, "Activation").
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/world"
)

var (
	backend   = flag.String("store", "sqlite", "mem, sqlite or pg")
	n         = flag.Int("n", 200, "worlds created and called (each measured once per scenario)")
	idle      = flag.Duration("idle", 100*time.Millisecond, "IdleAfter: how long a world sits idle before it is passivated")
	pgDB      = flag.String("db", "bench_activate", "Postgres database to drop and recreate")
	phaseFlag = flag.Bool("phases", false, "also print when each host event first came, from the create")
	timeout   = flag.Duration("timeout", 30*time.Second, "per-call timeout")
)

const universe = "bench"

// Ping is the bench world's one input: it replies with the count so far.
type Ping struct{}

func def() *world.Def[int64] {
	d := world.New[int64]("bench.activate", 1)
	world.On(d, func(c *world.Ctx, s *int64, _ Ping) error {
		*s++
		c.Reply(*s)
		return nil
	})
	return d
}

func main() {
	flag.Parse()
	ctx := context.Background()
	st, done := openStore(ctx)
	defer done()

	var mu sync.Mutex
	passive := map[string]chan struct{}{}
	phases := map[string]time.Time{}
	var t0 time.Time
	var lastPhases, wakePhases []map[string]time.Duration
	observe := func(ev plane.HostEvent) {
		if *phaseFlag {
			mu.Lock()
			if _, ok := phases[ev.Kind]; !ok {
				phases[ev.Kind] = time.Now()
			}
			mu.Unlock()
		}
		if ev.Kind != plane.EvPassivate {
			return
		}
		mu.Lock()
		if ch, ok := passive[ev.World]; ok {
			close(ch)
			delete(passive, ev.World)
		}
		mu.Unlock()
	}
	nd, err := node.Start(ctx, node.Config{
		Worker: "bench-1", Store: st, Kernels: plane.Kernels{universe: def().Kernel()},
		IdleAfter: *idle, Observe: observe,
	})
	must(err)
	defer func() { _ = nd.Stop(ctx) }()
	// The node's own orchestrator leads before the first measurement: the
	// figures are of a running cluster, not of its start.
	for !nd.Leader() {
		time.Sleep(time.Millisecond)
	}
	c := nd.Client()

	var first, wake, send []time.Duration
	for i := range *n {
		id := fmt.Sprintf("w-%05d", i)
		ch := make(chan struct{})
		mu.Lock()
		passive[id] = ch
		mu.Unlock()
		mu.Lock()
		clear(phases)
		t0 = time.Now()
		mu.Unlock()
		_, err := st.CreateWorld(ctx, universe, id, nil)
		must(err)
		tc := time.Now()
		call(ctx, c, id)
		first = append(first, time.Since(t0))
		if *phaseFlag {
			mu.Lock()
			m := map[string]time.Duration{"created": tc.Sub(t0)}
			for k, at := range phases {
				m[k] = at.Sub(t0)
			}
			lastPhases = append(lastPhases, m)
			mu.Unlock()
		}
		// Passivated once idle: its lease stays, its process goes.
		select {
		case <-ch:
		case <-time.After(*timeout):
			must(fmt.Errorf("world %s was not passivated within %v", id, *timeout))
		}
		mu.Lock()
		clear(phases)
		t0 = time.Now()
		mu.Unlock()
		call(ctx, c, id)
		wake = append(wake, time.Since(t0))
		// The floor of any input on this store and machine: one durable
		// enqueue to a world held here.
		t0 = time.Now()
		_, err = c.Send(ctx, id, Ping{}, "")
		must(err)
		send = append(send, time.Since(t0))
		if *phaseFlag {
			mu.Lock()
			m := map[string]time.Duration{}
			for k, at := range phases {
				m[k] = at.Sub(t0)
			}
			wakePhases = append(wakePhases, m)
			mu.Unlock()
		}
	}
	fmt.Printf("# orrery activation, store=%s, n=%d, idle=%v\n", *backend, *n, *idle)
	fmt.Printf("%-12s %10s %10s %10s\n", "scenario", "p50", "p99", "max")
	report("create+call", first)
	report("wake", wake)
	report("send (ack)", send)
	if *phaseFlag {
		phaseReport("create+call", lastPhases)
		phaseReport("wake", wakePhases)
	}
}

func phaseReport(name string, ms []map[string]time.Duration) {
	fmt.Printf("# %s: when each host event came first\n", name)
	{
		for _, k := range []string{"created", plane.EvAcquired, plane.EvWake, plane.EvRestored, plane.EvCommit} {
			var ds []time.Duration
			for _, m := range ms {
				if d, ok := m[k]; ok {
					ds = append(ds, d)
				}
			}
			if len(ds) > 0 {
				report("  "+k, ds)
			}
		}
	}
}

func call(ctx context.Context, c *plane.Client, id string) {
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	_, err := c.Call(cctx, id, Ping{})
	must(err)
}

func report(name string, ds []time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }
	fmt.Printf("%-12s %10s %10s %10s\n", name, ms(q(0.50)), ms(q(0.99)), ms(s[len(s)-1]))
}

func openStore(ctx context.Context) (store.Store, func()) {
	switch *backend {
	case "mem":
		st := memstore.New()
		return st, func() { _ = st.Close() }
	case "sqlite":
		d, err := os.MkdirTemp("", "orrery-activate-")
		must(err)
		st, err := sqlite.Open(ctx, filepath.Join(d, "bench.db"))
		must(err)
		return st, func() { _ = st.Close(); _ = os.RemoveAll(d) }
	case "pg":
		admin := os.Getenv("PEERS_PG_DSN")
		if admin == "" {
			admin = "postgres://orrery:orrery@127.0.0.1:5432/orrery?sslmode=disable"
		}
		c, err := pgx.Connect(ctx, admin)
		must(err)
		db := pgx.Identifier{*pgDB}.Sanitize()
		_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		must(err)
		_, err = c.Exec(ctx, "CREATE DATABASE "+db)
		must(err)
		_ = c.Close(ctx)
		u, err := url.Parse(admin)
		must(err)
		u.Path = "/" + *pgDB
		st, err := postgres.Open(ctx, u.String())
		must(err)
		return st, func() {
			_ = st.Close()
			if c, err := pgx.Connect(ctx, admin); err == nil {
				_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
				_ = c.Close(ctx)
			}
		}
	}
	must(fmt.Errorf("unknown -store %q (mem, sqlite or pg)", *backend))
	return nil, nil
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "activate:", err)
		os.Exit(1)
	}
}
