//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
)

// TestQueueLimitAcrossProcesses: three `orrery serve` processes on one
// PostgreSQL database, a queue of errand runs with a global limit of 10,
// and runs (ORRERY_QUEUE_RUNS, default 120; bench/README.md's figure uses
// 5000) started through all three processes' APIs. Every run completes
// exactly once, and the journal alone shows that never more than 10 ran
// at once: each run's RunStarted (its admission) and its end (the commit
// that freed its slot) are swept as intervals on the store's clock, the
// one clock every process's commits share. With ORRERY_QUEUE_BENCH set,
// the same number of runs goes through the processes with no limit too,
// and the test compares the time an admitted run takes, start to end,
// against the unlimited runs' (issue 24 asks for within 20%).
func TestQueueLimitAcrossProcesses(t *testing.T) {
	n := 120
	if v, err := strconv.Atoi(os.Getenv("ORRERY_QUEUE_RUNS")); err == nil && v > 0 {
		n = v
	}
	db := newClusterDB(t)
	c := newCluster(t, db, db.dsn, 3)
	ctx := context.Background()
	if _, err := c.procs[0].api.PutWorkflowQueue(ctx, "errands", api.QueueLimits{Concurrency: 10}); err != nil {
		t.Fatal(err)
	}
	limited := c.queueRuns("q", n, "errands")
	if limited.Most > 10 {
		t.Fatalf("the journal shows %d runs of the queue at once, over its limit of 10", limited.Most)
	}
	if limited.Most < 2 {
		t.Fatalf("the journal shows at most %d run at once: the check could not see an excess", limited.Most)
	}
	c.figure("queue across 3 processes: %d runs, limit 10: at most %d at once (from the journal), %.1f runs/s, mean admitted run %v",
		n, limited.Most, limited.Rate, limited.MeanRun.Round(time.Millisecond))
	if os.Getenv("ORRERY_QUEUE_BENCH") == "" {
		return
	}
	unlimited := c.queueRuns("u", n, "")
	ratio := float64(limited.MeanRun) / float64(unlimited.MeanRun)
	c.figure("queue across 3 processes: %d runs, no limit: at most %d at once, %.1f runs/s, mean run %v; admitted/unlimited run time %.2f",
		n, unlimited.Most, unlimited.Rate, unlimited.MeanRun.Round(time.Millisecond), ratio)
	if ratio > 1.2 {
		t.Errorf("an admitted run took %.2f times the unlimited run's time, want at most 1.2", ratio)
	}
}

// queueRuns starts n errand runs named prefix-i through every process
// (on queue, when not empty), waits until each has completed exactly
// once, and sweeps their journals.
func (c *cluster) queueRuns(prefix string, n int, queue string) testrig.RunSweep {
	c.t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	const starters = 8
	var wg sync.WaitGroup
	errs := make(chan error, starters)
	for g := range starters {
		wg.Go(func() {
			for i := g; i < n; i += starters {
				p := c.procs[i%len(c.procs)]
				in := errand{Key: ids[i], URL: c.target.srv.URL + "/run", SleepMs: 50}
				if _, _, err := p.api.StartRunOn(ctx, clusterErrand, ids[i], in, api.StartOptions{Queue: queue}); err != nil {
					errs <- fmt.Errorf("start %s through %s: %w", ids[i], p.worker, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatal(err)
	}
	var last findings
	if !poll(clusterBound+time.Duration(n)*100*time.Millisecond, 200*time.Millisecond, func() bool {
		last = findings{}
		for _, id := range ids {
			rep, err := readRun(ctx, c.db.st, id)
			if err != nil {
				last.pendingf("%s: %v", id, err)
				continue
			}
			c.checkRun(ctx, rep, &last, false)
			if len(last.broken) > 0 {
				c.t.Fatalf("%s", first(last.broken, 10))
			}
			if len(last.pending) > 0 {
				return false // the rest wait as well
			}
		}
		return true
	}) {
		c.t.Fatalf("%s runs not all completed: %s", prefix, first(last.pending, 5))
	}
	f, err := testrig.SweepRuns(ctx, c.db.st, ids)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}
