//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store"
)

// haEnv names the script that sets up a PostgreSQL primary and a streaming
// standby on this machine, kills the primary and promotes the standby
// (.ci/pg-ha; it runs as root). It starts servers of its own on other
// ports than the main cluster's, so the failover tests could run beside
// the others; .ci/run runs them in a step of their own anyway, as they
// are heavy.
const haEnv = "ORRERY_TEST_PG_HA"

// TestPostgresFailover runs three nodes on a primary with a synchronous
// standby, through the multi-host DSN, under load; kills the primary
// (kill -9 of its postmaster), promotes the standby, and checks from the
// new primary that nothing acknowledged was lost or done twice, that every
// world replays, and that no lease went backwards.
func TestPostgresFailover(t *testing.T) { postgresFailover(t, "sync") }

// TestPostgresFailoverAsync is the same run without a synchronous standby:
// a failover may lose acknowledged writes, which it measures; it must not
// corrupt what the new primary holds.
func TestPostgresFailoverAsync(t *testing.T) { postgresFailover(t, "async") }

// asyncLag is how far behind the asynchronous standby is made to be when
// the primary dies.
const asyncLag = time.Second

func postgresFailover(t *testing.T, mode string) {
	script := os.Getenv(haEnv)
	if script == "" {
		t.Skipf("%s is not set: the failover test needs a primary and a standby of its own (.ci/run's failover step sets it)", haEnv)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(script, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("up", mode)
	t.Cleanup(func() { run("down") })
	// Every connection, the nodes' and the checker's, goes through the DSN
	// that names both servers and asks for the writable one.
	t.Setenv(dsnEnv, run("dsn", "postgres"))
	db := newClusterDB(t)
	c, ids, ld := loadedCluster(t, db, db.dsn)
	time.Sleep(3 * time.Second)
	before, err := c.holders(ids)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover (%s): the acting orchestrator is %s's", mode, c.orchestrator())
	if mode == "async" {
		// On one machine an asynchronous standby is microseconds behind,
		// and a kill loses next to nothing. A real one lags (a network, a
		// busy standby): the primary's WAL sender stops for asyncLag
		// before the kill (which takes it too), so the writes of that
		// last stretch are what the standby lacks.
		run("stall-sender")
		time.Sleep(asyncLag)
	}
	// The script prints the time of the kill (Unix nanoseconds) on its last
	// line, so that the window counts neither its start nor its output.
	// A write sent right after the kill, again until acknowledged: when it
	// is, the cluster serves again.
	killed := make(chan struct{})
	probed := make(chan time.Duration, 1)
	go func() {
		<-killed
		start := time.Now()
		for time.Since(start) < clusterBound {
			_, err := c.anyAPI(func(cl *api.Client, ctx context.Context) (any, error) {
				return cl.Send(ctx, ids[1], Add{}.WorldType(), Add{Key: "probe-at-kill"}, "probe-at-kill")
			})
			if err == nil {
				probed <- time.Since(start)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		probed <- -1
	}()
	out := run("kill-primary")
	close(killed)
	t.Logf("failover (%s): %s", mode, out)
	kill := time.Now()
	if ns, err := strconv.ParseInt(out[strings.LastIndexByte(out, '\n')+1:], 10, 64); err == nil {
		kill = time.Unix(0, ns)
	}
	t.Logf("failover (%s): %s after %v", mode, run("promote"), time.Since(kill).Round(time.Millisecond))
	promoted := time.Since(kill)
	// The cluster serves again: a new event is acknowledged and journaled,
	// and a call answers.
	probe := ids[0]
	seq := c.sendUntilAcked(probe, "probe-after-failover", clusterBound)
	c.awaitJournaled(probe, seq, clusterBound)
	if _, err := c.callUntilAnswered(probe, clusterBound); err != nil {
		t.Fatalf("no call answered within %v of the promotion: %v", clusterBound, err)
	}
	serving := time.Since(kill)
	mid := c.awaitPlaced(ids, c.procs, clusterBound)
	time.Sleep(3 * time.Second)
	ld.stop()

	led := ld.led
	if mode == "async" {
		var lost []acked
		led, lost = c.splitLost(ld.led, ids)
		if len(lost) > 0 {
			c.figure("PostgreSQL failover (async, the standby %v behind): %d of %d acknowledged events lost, acknowledged from %v to %v relative to the kill",
				asyncLag, len(lost), len(ld.led.events), ms(lost[0].At.Sub(kill)), ms(lost[len(lost)-1].At.Sub(kill)))
		} else {
			c.figure("PostgreSQL failover (async, the standby %v behind): none of %d acknowledged events lost", asyncLag, len(ld.led.events))
		}
	}
	// The gaps count only the acknowledgements the new primary kept.
	window := <-probed
	if window < 0 {
		t.Fatalf("a write sent after the kill was not acknowledged within %v", clusterBound)
	}
	gap, gapClient := longestGap(led)
	c.figure("PostgreSQL failover (%s standby, kill -9 of the primary's postmaster): promoted %v after the kill; a write sent at the kill acknowledged %v after it; a probe journaled and a call answered %v after it; longest gap between two acknowledgements of one load client %v (client %d)",
		mode, ms(promoted), ms(window), ms(serving), ms(gap), gapClient)

	// Journaled once, fired once, one receipt, every world replays (on
	// the new primary, through the checker's store), every call answers.
	c.verify(led, ids, clusterBound)

	after := c.awaitPlaced(ids, c.procs, clusterBound)
	back := 0
	for _, id := range ids {
		if after[id].Epoch < mid[id].Epoch {
			t.Errorf("%s: lease epoch went backwards after the failover: %d, then %d", id, mid[id].Epoch, after[id].Epoch)
		}
		if after[id].Epoch < before[id].Epoch {
			back++
		}
	}
	switch {
	case mode == "sync" && back > 0:
		t.Errorf("%d worlds hold a lease epoch on the new primary below one the nodes saw before the failover: a synchronous standby lost an epoch", back)
	case mode == "async":
		c.figure("PostgreSQL failover (async): %d of %d worlds hold a lease epoch on the new primary below one the nodes saw before the kill", back, len(ids))
	}
}

// longestGap is the longest time between two acknowledgements of one load
// client, and the client's number.
func longestGap(led *ackLog) (gap time.Duration, client int) {
	led.mu.Lock()
	evs := slices.Clone(led.events)
	led.mu.Unlock()
	last := map[int]time.Time{}
	slices.SortFunc(evs, func(a, b acked) int { return a.At.Compare(b.At) })
	for _, e := range evs {
		if prev, ok := last[e.G]; ok && e.At.Sub(prev) > gap {
			gap, client = e.At.Sub(prev), e.G
		}
		last[e.G] = e.At
	}
	return gap, client
}

// splitLost sorts the acknowledged events into those the new primary
// holds (its inbox has the item at the acknowledged seq, under its key)
// and those it lost, the lost in the order of their acknowledgement; and
// the acknowledged workflow runs likewise: a run the new primary lacks,
// or one a second start after the kill created again (its first start
// lost), is lost, and counted in the figure.
func (c *cluster) splitLost(led *ackLog, ids []string) (*ackLog, []acked) {
	c.t.Helper()
	runs, tried := led.ackedRuns()
	kept := &ackLog{calls: led.calls, retries: led.retries, abandoned: led.abandoned, permanent: led.permanent, tried: tried}
	lostRuns := 0
	for _, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.db.st.GetWorld(ctx, r.ID)
		cancel()
		switch {
		case errors.Is(err, store.ErrWorldNotFound) || err == nil && r.AgainCreated:
			lostRuns++
		case err != nil:
			c.t.Fatalf("run %s: read it on the new primary: %v", r.ID, err)
		default:
			kept.runs = append(kept.runs, r)
		}
	}
	c.figure("PostgreSQL failover (async): %d of %d acknowledged workflow run starts lost", lostRuns, len(runs))
	var lost []acked
	acks := led.byWorld()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		items, err := c.db.st.ReadInbox(ctx, id, 0, 0)
		cancel()
		if err != nil {
			c.t.Fatalf("%s: read the inbox on the new primary: %v", id, err)
		}
		have := map[uint64]string{}
		for _, it := range items {
			have[it.Seq] = it.DedupeKey
		}
		for _, a := range acks[id] {
			if have[a.Seq] == a.Key {
				kept.events = append(kept.events, a)
			} else {
				lost = append(lost, a)
			}
		}
	}
	slices.SortFunc(lost, func(a, b acked) int { return a.At.Compare(b.At) })
	return kept, lost
}
