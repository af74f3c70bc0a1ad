//go:build unix

package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// TestWorkerClassesCluster runs the cluster split into worker classes, one
// process each: two that host and serve the API (and may orchestrate),
// one effects pool, one timer worker. Under the same load as the
// all-in-one cluster, with the effects process killed -9 mid-load and a
// new one started, the same checks hold: every acknowledged event
// journaled once, every effect fired once with one receipt, every timer
// fired, calls answered, every journal replaying, every workflow run
// finished; worlds ran only on the hosts; and the killed pool's effects,
// executed again by its successor, carried one idempotency key each, so a
// target that honours it applies each payment once.
func TestWorkerClassesCluster(t *testing.T) {
	db := newClusterDB(t)
	host := []string{"--roles", "host,api,orchestrator", "--capacity", "40"}
	c := newClusterWith(t, db, []string{db.dsn, db.dsn, db.dsn, db.dsn}, leaseTTL, [][]string{
		host, host, {"--roles", "effects", "--effect-kinds", "http.request,fabric.send"}, {"--roles", "timers"},
	})
	hosts := c.procs[:2]
	fx, timers := c.procs[2], c.procs[3]
	if hosts[0].probes || hosts[1].probes || !fx.probes || !timers.probes {
		t.Fatalf("which processes serve the API: %v %v %v %v", hosts[0].probes, hosts[1].probes, fx.probes, timers.probes)
	}
	checkAdvertised(t, c, map[string][]string{
		"w1": {"role:api", "role:host", "role:orchestrator"},
		"w2": {"role:api", "role:host", "role:orchestrator"},
		"w3": {"effect:fabric.send", "effect:http.request", "role:effects"},
		"w4": {"role:timers"},
	})
	ids := worldIDs(nWorlds)
	c.createWorlds(ids)
	c.awaitPlaced(ids, hosts, clusterBound)
	ld := c.startLoad(ids, nLoad)

	time.Sleep(3 * time.Second)
	paidBefore := c.target.total()
	c.kill(fx)
	t.Logf("killed the effects process %s after the target saw %d POSTs", fx.worker, paidBefore)
	time.Sleep(time.Second) // the load goes on with no pool at all
	fx2 := c.add("w5", db.dsn, "--roles", "effects")
	c.awaitLive([]*child{hosts[0], hosts[1], timers, fx2}, clusterBound)

	c.stopLoadAndVerify(ld, ids, 3*time.Second)
	// Worlds ran on the hosts alone.
	c.awaitPlaced(ids, hosts, clusterBound)
	// Every payment the target saw came with one idempotency key, even
	// those the killed pool had started and its successor made again.
	again := 0
	for _, a := range ld.led.events {
		if a.Kind != opPay {
			continue
		}
		if ks := c.target.idemKeys(a.Key); len(ks) != 1 || ks[0] == "" {
			t.Errorf("pay %q reached the target with idempotency keys %q, want one", a.Key, ks)
		}
		if c.target.seen(a.Key) > 1 {
			again++
		}
	}
	c.figure("worker classes: the effects process killed -9 mid-load; %d payments posted again by its successor under their one idempotency key", again)
}

// checkAdvertised waits until every worker's record carries (at least) the
// capabilities want names, and no more roles than it names.
func checkAdvertised(t *testing.T, c *cluster, want map[string][]string) {
	t.Helper()
	var last []store.WorkerInfo
	if !poll(clusterBound, 50*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ws, err := c.db.st.ListWorkers(ctx)
		if err != nil {
			return false
		}
		last = ws
		ok := 0
		for _, w := range ws {
			caps, found := want[w.ID]
			if !found {
				continue
			}
			has := true
			for _, cp := range caps {
				has = has && slices.Contains(w.Capabilities, cp)
			}
			for _, cp := range w.Capabilities {
				if strings.HasPrefix(cp, "role:") && !slices.Contains(caps, cp) {
					has = false
				}
			}
			if has {
				ok++
			}
		}
		return ok == len(want)
	}) {
		t.Fatalf("workers do not advertise %v; the inventory: %+v", want, last)
	}
}
