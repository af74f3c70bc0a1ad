//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
)

// clusterMaxInbox is the overload cluster's --max-inbox: small, so that a
// burst of concurrent senders fills inboxes past it.
const clusterMaxInbox = 4

// TestOverloadCluster sheds ingress on three `orrery serve` processes on
// PostgreSQL, each with --max-inbox, and checks what shedding promises
// end to end:
//   - a paused world's inbox fills to exactly the bound; every input past
//     it is refused with 429 `overloaded` and a Retry-After, through any
//     process, and a retry of an input already accepted is answered as
//     the duplicate it is, never refused;
//   - under a burst of concurrent senders, every acknowledged input is
//     applied exactly once and every refused one left no trace: no inbox
//     item under its key, nothing in the state;
//   - after the burst, with the backlog drained, every world accepts input
//     again.
func TestOverloadCluster(t *testing.T) {
	db := newClusterDB(t)
	bound := []string{"--max-inbox", fmt.Sprint(clusterMaxInbox)}
	c := newClusterWith(t, db, []string{db.dsn, db.dsn, db.dsn}, leaseTTL, [][]string{bound, bound, bound})
	ids := worldIDs(12)
	c.createWorlds(ids)
	c.awaitPlaced(ids, c.procs, clusterBound)
	led := &ackLog{}
	ctx := context.Background()

	// A paused world takes input into its inbox and drains none: the
	// bound is reached by count, whatever the machine's speed.
	held := ids[0]
	if _, err := c.procs[0].api.Pause(ctx, held, "overload test"); err != nil {
		t.Fatal(err)
	}
	var accepted []acked
	for i := range clusterMaxInbox + 6 {
		key := fmt.Sprintf("held-%d", i)
		p := c.procs[i%len(c.procs)]
		a, err := p.api.Send(ctx, held, Add{}.WorldType(), Add{Key: key}, key)
		switch {
		case i < clusterMaxInbox && err != nil:
			t.Fatalf("input %d of %d to the paused world through %s: %v", i+1, clusterMaxInbox, p.worker, err)
		case i < clusterMaxInbox:
			accepted = append(accepted, acked{World: held, Kind: opAdd, Key: key, Seq: a.Seq, At: time.Now()})
		case !errors.Is(err, api.ErrOverloaded):
			t.Fatalf("input %d past the bound through %s: %v, want overloaded", i+1-clusterMaxInbox, p.worker, err)
		case api.RetryAfter(err) <= 0:
			t.Fatalf("refusal through %s carries no Retry-After: %v", p.worker, err)
		}
	}
	// A sender that lost the answer to an accepted input retries it under
	// its key: the inbox being full is no reason to refuse it.
	again, err := c.procs[1].api.Send(ctx, held, Add{}.WorldType(), Add{Key: accepted[0].Key}, accepted[0].Key)
	if err != nil || again.Seq != accepted[0].Seq {
		t.Fatalf("retry of accepted input %q (seq %d) at the bound: seq %d, %v; want its seq, no error", accepted[0].Key, accepted[0].Seq, again.Seq, err)
	}
	for _, a := range accepted {
		led.ack(a)
	}

	// The burst: many senders, each input sent once (a transport failure
	// makes its outcome unknown, so it is neither acknowledged nor refused).
	const senders, perSender = 48, 25
	var (
		mu      sync.Mutex
		refused = map[string]string{} // key → world
		unknown int
		n       atomic.Int64
		wg      sync.WaitGroup
	)
	busy := ids[1:]
	for g := range senders {
		wg.Go(func() {
			p := c.procs[g%len(c.procs)]
			for i := range perSender {
				w := busy[(g+i)%len(busy)]
				key := fmt.Sprintf("burst-%d-%d", g, n.Add(1))
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				a, err := p.api.Send(sctx, w, Add{}.WorldType(), Add{Key: key}, key)
				cancel()
				if err == nil {
					led.ack(acked{World: w, Kind: opAdd, Key: key, Seq: a.Seq, G: g, At: time.Now()})
					continue
				}
				mu.Lock()
				switch {
				case errors.Is(err, api.ErrOverloaded):
					refused[key] = w
				default:
					unknown++
					t.Logf("send %s to %s through %s: %v (outcome unknown)", key, w, p.worker, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if _, err := c.procs[2].api.Resume(ctx, held, "overload test done"); err != nil {
		t.Fatal(err)
	}
	reports := c.verify(led, ids, clusterBound)
	for key, w := range refused {
		rep := reports[w]
		for _, it := range rep.inbox {
			if it.DedupeKey == key {
				t.Errorf("%s: refused input %q is in the inbox at seq %d", w, key, it.Seq)
			}
		}
		if rep.state.Adds[key] != 0 {
			t.Errorf("%s: refused input %q is counted in the state", w, key)
		}
	}
	// Drained, every world takes input again.
	for i, w := range ids {
		key := "after-" + w
		if _, err := c.procs[i%len(c.procs)].api.Send(ctx, w, Add{}.WorldType(), Add{Key: key}, key); err != nil {
			t.Errorf("%s after the burst: %v", w, err)
		}
	}
	c.figure("overload: --max-inbox %d on 3 processes; paused world: %d accepted, 6 refused; burst of %d senders: %d acknowledged, %d refused (no trace of any), %d unknown",
		clusterMaxInbox, clusterMaxInbox, senders, len(led.events)-len(accepted), len(refused), unknown)
}
