//go:build unix

package main

// The chaos load's workflow runs and their judgement. The runs are the
// cluster tests' errand (a step, a durable sleep, an HTTP effect to the
// test's target), started through the API under the same faults as the
// rest of the load; the judgement is the cluster checker's (runChecker,
// checkRun, runsListed), filed under one row of the chaos verdict.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/orrery-run/orrery/api"
)

// startRun starts errand run id through the API until a node acknowledges
// it, and a third of the acknowledged ones a second time under the same
// id, starting at another node, as a client unsure of the first answer
// would: the second start must answer the run the first made, not create
// one.
func (ch *chaos) startRun(ctx context.Context, rng *rand.Rand, id string) {
	// Sleeps of up to 6s, longer than the cluster tests' (a run there
	// lives about a second): with runs that short a kill seldom finds one
	// in flight (a 30s run's three node faults found none), and a durable
	// sleep whose timer fires while its holder is dead is a case to test.
	in := errand{Key: id, URL: ch.c.target.srv.URL + "/run", SleepMs: 500 + rng.Int64N(5501)}
	var created bool
	start := func(cl *api.Client, ctx context.Context, e *histEntry) error {
		v, c, err := cl.StartRun(ctx, clusterErrand, id, in)
		if err == nil && v.ID != id {
			ch.hmu.Lock()
			ch.five00 = append(ch.five00, fmt.Sprintf("%.1fs %s: starting run %s answered run %q", e.T, e.Node, id, v.ID))
			ch.hmu.Unlock()
		}
		created, e.Dup = c, err == nil && !c
		return err
	}
	ch.runs.tryRun(id)
	n := len(ch.c.current())
	first, ok := ch.attemptsFrom(ctx, rng, rng.IntN(n), "start", "run", id, id, start)
	if !ok {
		return
	}
	r := ackedRun{ID: id, At: time.Now()}
	if rng.IntN(3) == 0 {
		if second, ok := ch.attemptsFrom(ctx, rng, (first+1+rng.IntN(n-1))%n, "start", "run", id, id, start); ok {
			r.Again, r.AgainCreated = true, created
			if second != first {
				ch.runsElsewhere.Add(1)
			}
		}
	}
	ch.runs.ackRun(r)
}

// judgeRuns holds every acknowledged run to the cluster checker's run
// checks and files what they find under chkRuns. Runs still going are
// read again until none is or limit passes (the cluster is quiescent by
// now, so a run still going after that never ends); then, with nothing
// pending and nothing broken, a final round reads every run once more and
// adds the checks outside it (its effect done in the store, the target
// reached, no run the load never started).
func judgeRuns(ctx context.Context, rc *runChecker, limit time.Duration, v *verdict) {
	v.check(chkRuns)
	deadline := time.Now().Add(limit)
	var f findings
	for {
		f = findings{}
		rc.check(ctx, &f, false)
		if len(f.broken) > 0 || len(f.pending) == 0 || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(f.broken) == 0 && len(f.pending) == 0 {
		rc.check(ctx, &f, true)
	}
	for _, s := range f.broken {
		v.failf(chkRuns, "%s", s)
	}
	for _, s := range f.pending {
		v.failf(chkRuns, "not done when judged: %s", s)
	}
}
