package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Queues (store.Queues): admission is one transaction that counts the
// queue's limits, and a slot is freed by the transaction that archives its
// run, whichever path archives it.
func queueTests() []testCase {
	return []testCase{
		{"QueueAdmitsUpToTheGlobalLimitAndTheArchiveFreesASlot", testQueueGlobalLimit},
		{"QueueCommitThatArchivesFreesTheSlot", testQueueCommitFrees},
		{"QueueWorkerConcurrencyBoundsEachWorker", testQueueWorkerLimit},
		{"QueueRateWindowCountsByTheStoreClock", testQueueRate},
		{"QueueAdmitsByPriorityThenFIFO", testQueuePriority},
		{"QueuePartitionsHaveLimitsOfTheirOwn", testQueuePartitions},
		{"QueueSkipsPausedAndDropsArchivedWaitingRuns", testQueuePausedArchived},
		{"QueueEnqueueIsIdempotentAndChecksQueueAndWorld", testQueueEnqueue},
		{"QueueConcurrentAdmittersNeverExceedTheLimit", testQueueConcurrentAdmitters},
		{"QueueSpecReplaceAndList", testQueueSpecs},
		{"QueueAdmissionSkipsRunsTheWorkerDoesNotCarry", testQueueNeedsSkipped},
		{"QueueNeedsLimitsCountOnlyAdmittedRuns", testQueueNeedsLimits},
		{"QueueNeedsEmptyFilterAndEmptyEntryAdmitAll", testQueueNeedsEmpty},
	}
}

func (f *fx) putQueue(q store.QueueSpec) {
	f.t.Helper()
	must(f.t, f.s.PutQueue(bg, q), "PutQueue "+q.Name)
}

// queued creates world run and puts it in queue.
func (f *fx) queued(queue, run, partition string, priority int) store.QueuedRun {
	f.t.Helper()
	f.world(run)
	r, dup, err := f.s.EnqueueRun(bg, store.QueuedRun{Queue: queue, Run: run, Partition: partition, Priority: priority})
	must(f.t, err, "EnqueueRun "+run)
	if dup {
		f.t.Fatalf("EnqueueRun %s: dup on the first enqueue", run)
	}
	return r
}

// queuedNeeding is queued with the entry's Needs set.
func (f *fx) queuedNeeding(queue, run string, priority int, needs string) store.QueuedRun {
	f.t.Helper()
	f.world(run)
	r, dup, err := f.s.EnqueueRun(bg, store.QueuedRun{Queue: queue, Run: run, Priority: priority, Needs: needs})
	must(f.t, err, "EnqueueRun "+run)
	if dup || r.Needs != needs {
		f.t.Fatalf("EnqueueRun %s = %+v dup=%v: want a first entry needing %q", run, r, dup, needs)
	}
	return r
}

func (f *fx) admit(queue, worker string, max int, carries ...string) []string {
	f.t.Helper()
	rs, err := f.s.AdmitRuns(bg, queue, worker, max, carries...)
	must(f.t, err, "AdmitRuns "+queue)
	var out []string
	for _, r := range rs {
		if r.Worker != worker || r.AdmittedAt.IsZero() {
			f.t.Fatalf("admitted %+v: want worker %s and an admission time", r, worker)
		}
		out = append(out, r.Run)
	}
	return out
}

func wantRuns(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func testQueueGlobalLimit(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 2})
	for i := range 4 {
		f.queued("q", fmt.Sprintf("r%d", i), "", 0)
	}
	wantRuns(t, "first admission", f.admit("q", "A", 10), "r0", "r1")
	wantRuns(t, "admission at the limit", f.admit("q", "B", 10))
	// The admitted run's slot stays while it runs, whoever holds its lease.
	e, _, _ := f.s.QueueRunOf(bg, "r0")
	if !e.Admitted() || e.Worker != "A" {
		t.Fatalf("r0's entry = %+v, want admitted by A", e)
	}
	f.setStatus("r0", store.WorldArchived, "done")
	if _, ok, err := f.s.QueueRunOf(bg, "r0"); err != nil || ok {
		t.Fatalf("r0 archived: still in its queue (ok=%v err=%v)", ok, err)
	}
	wantRuns(t, "admission after an archive", f.admit("q", "B", 10), "r2")
	rs, err := f.s.ListQueuedRuns(bg, "q")
	must(t, err, "ListQueuedRuns")
	var running, waiting int
	for _, r := range rs {
		if r.Admitted() {
			running++
		} else {
			waiting++
		}
	}
	if running != 2 || waiting != 1 {
		t.Fatalf("entries %+v: want 2 running and 1 waiting", rs)
	}
}

func testQueueCommitFrees(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 1})
	f.queued("q", "r0", "", 0)
	f.queued("q", "r1", "", 0)
	wantRuns(t, "admission", f.admit("q", "A", 5), "r0")
	e := f.acquire("r0", "A").Epoch
	// A run's end: the commit that records it archives its world.
	_, err := f.s.Commit(bg, "r0", e, store.CommitBatch{Entries: []store.Record{rec("end")},
		Status: &store.StatusChange{Status: store.WorldArchived, Reason: "completed"}})
	must(t, err, "Commit that archives")
	wantRuns(t, "admission after the end commit", f.admit("q", "A", 5), "r1")
}

func testQueueWorkerLimit(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 3, WorkerConcurrency: 1})
	for i := range 4 {
		f.queued("q", fmt.Sprintf("r%d", i), "", 0)
	}
	wantRuns(t, "A's admission", f.admit("q", "A", 10), "r0")
	wantRuns(t, "A again", f.admit("q", "A", 10))
	wantRuns(t, "B's admission", f.admit("q", "B", 10), "r1")
	wantRuns(t, "C's admission", f.admit("q", "C", 10), "r2")
	wantRuns(t, "D at the global limit", f.admit("q", "D", 10))
	f.setStatus("r0", store.WorldArchived, "done")
	wantRuns(t, "A after its run ended", f.admit("q", "A", 10), "r3")
}

func testQueueRate(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", RateLimit: 2, RatePeriod: time.Minute})
	for i := range 5 {
		f.queued("q", fmt.Sprintf("r%d", i), "", 0)
	}
	wantRuns(t, "first window", f.admit("q", "A", 10), "r0", "r1")
	// Ending the runs frees no rate: the window counts admissions.
	f.setStatus("r0", store.WorldArchived, "done")
	f.setStatus("r1", store.WorldArchived, "done")
	wantRuns(t, "same window", f.admit("q", "A", 10))
	if n, err := f.s.RecentAdmissions(bg, "q"); err != nil || n != 2 {
		t.Fatalf("RecentAdmissions = %d, %v; want 2", n, err)
	}
	f.advance(time.Minute + margin)
	wantRuns(t, "next window", f.admit("q", "B", 10), "r2", "r3")
	f.advance(time.Minute / 2)
	wantRuns(t, "half a window later", f.admit("q", "B", 10))
	f.advance(time.Minute/2 + margin)
	wantRuns(t, "third window", f.admit("q", "B", 10), "r4")
}

func testQueuePriority(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 1})
	f.queued("q", "low1", "", 5)
	f.queued("q", "high1", "", -1)
	f.queued("q", "mid", "", 0)
	f.queued("q", "high2", "", -1)
	f.queued("q", "low2", "", 5)
	var order []string
	for range 5 {
		got := f.admit("q", "A", 10)
		if len(got) != 1 {
			t.Fatalf("admission = %v, want one run", got)
		}
		order = append(order, got[0])
		f.setStatus(got[0], store.WorldArchived, "done")
	}
	wantRuns(t, "admission order", order, "high1", "high2", "mid", "low1", "low2")
}

func testQueuePartitions(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 1, RateLimit: 2, RatePeriod: time.Minute, Partitioned: true})
	f.queued("q", "a1", "alice", 0)
	f.queued("q", "a2", "alice", 0)
	f.queued("q", "b1", "bob", 0)
	f.queued("q", "b2", "bob", 0)
	// One at a time per key, the blocked key not holding the other back.
	wantRuns(t, "first admission", f.admit("q", "A", 10), "a1", "b1")
	wantRuns(t, "at each key's limit", f.admit("q", "A", 10))
	f.setStatus("a1", store.WorldArchived, "done")
	wantRuns(t, "alice's slot freed", f.admit("q", "A", 10), "a2")
	f.setStatus("a2", store.WorldArchived, "done")
	f.queued("q", "a3", "alice", 0)
	// alice has had her two admissions of the window; bob only one.
	wantRuns(t, "alice at her rate", f.admit("q", "A", 10))
	f.setStatus("b1", store.WorldArchived, "done")
	wantRuns(t, "bob's second", f.admit("q", "A", 10), "b2")
	f.advance(time.Minute + margin)
	wantRuns(t, "alice's next window", f.admit("q", "A", 10), "a3")
}

func testQueuePausedArchived(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 5})
	f.queued("q", "r0", "", 0)
	f.queued("q", "r1", "", 0)
	f.queued("q", "r2", "", 0)
	f.setStatus("r0", store.WorldPaused, "hold")
	f.setStatus("r1", store.WorldArchived, "cancelled")
	if _, ok, _ := f.s.QueueRunOf(bg, "r1"); ok {
		t.Fatal("an archived waiting run is still in its queue")
	}
	wantRuns(t, "admission", f.admit("q", "A", 10), "r2")
	f.setStatus("r0", store.WorldActive, "go")
	wantRuns(t, "after the resume", f.admit("q", "A", 10), "r0")
}

func testQueueEnqueue(t *testing.T, open Factory) {
	f := setup(t, open)
	f.world("r")
	_, _, err := f.s.EnqueueRun(bg, store.QueuedRun{Queue: "nope", Run: "r"})
	wantErr(t, err, store.ErrNotFound, "EnqueueRun on an undeclared queue")
	f.putQueue(store.QueueSpec{Name: "q"})
	_, _, err = f.s.EnqueueRun(bg, store.QueuedRun{Queue: "q", Run: "ghost"})
	wantErr(t, err, store.ErrWorldNotFound, "EnqueueRun of an unknown world")
	first, dup, err := f.s.EnqueueRun(bg, store.QueuedRun{Queue: "q", Run: "r", Partition: "p", Priority: 3})
	must(t, err, "EnqueueRun")
	if dup || first.Seq == 0 || first.EnqueuedAt.IsZero() || first.Admitted() {
		t.Fatalf("first enqueue = %+v dup=%v", first, dup)
	}
	again, dup, err := f.s.EnqueueRun(bg, store.QueuedRun{Queue: "q", Run: "r", Priority: 9})
	must(t, err, "EnqueueRun again")
	if !dup || again.Seq != first.Seq || again.Priority != 3 || again.Partition != "p" {
		t.Fatalf("second enqueue = %+v dup=%v, want the first entry %+v", again, dup, first)
	}
	f.world("gone")
	f.setStatus("gone", store.WorldArchived, "x")
	_, _, err = f.s.EnqueueRun(bg, store.QueuedRun{Queue: "q", Run: "gone"})
	wantErr(t, err, store.ErrWorldArchived, "EnqueueRun of an archived world")
	_, err = f.s.AdmitRuns(bg, "nope", "A", 1)
	wantErr(t, err, store.ErrNotFound, "AdmitRuns on an undeclared queue")
	_, _, err = f.s.EnqueueRun(bg, store.QueuedRun{Queue: "q", Run: "r", Priority: store.MaxPriority + 1})
	wantErr(t, err, store.ErrInvalid, "EnqueueRun with a priority out of range")
}

func testQueueConcurrentAdmitters(t *testing.T, open Factory) {
	f := setup(t, open)
	const limit, runs, admitters = 10, 60, 6
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: limit})
	for i := range runs {
		f.queued("q", fmt.Sprintf("r%02d", i), "", 0)
	}
	var mu sync.Mutex
	admitted := map[string]string{}
	var wg sync.WaitGroup
	// All start at once, so their first admissions overlap.
	startLine := make(chan struct{})
	for a := range admitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("W%d", a)
			<-startLine
			for range 5 {
				rs, err := f.s.AdmitRuns(bg, "q", worker, 3)
				if err != nil {
					t.Errorf("AdmitRuns by %s: %v", worker, err)
					return
				}
				mu.Lock()
				for _, r := range rs {
					if prev, ok := admitted[r.Run]; ok {
						t.Errorf("%s admitted by %s and %s", r.Run, prev, worker)
					}
					admitted[r.Run] = worker
				}
				mu.Unlock()
			}
		}()
	}
	close(startLine)
	wg.Wait()
	if len(admitted) != limit {
		t.Fatalf("%d runs admitted by concurrent admitters, want exactly the limit %d", len(admitted), limit)
	}
}

func testQueueSpecs(t *testing.T, open Factory) {
	f := setup(t, open)
	a := store.QueueSpec{Name: "b", Concurrency: 1, WorkerConcurrency: 2, RateLimit: 3, RatePeriod: time.Second, Partitioned: true}
	f.putQueue(a)
	f.putQueue(store.QueueSpec{Name: "a"})
	a.Concurrency = 7
	f.putQueue(a)
	got, err := f.s.GetQueue(bg, "b")
	must(t, err, "GetQueue")
	if got != a {
		t.Fatalf("GetQueue = %+v, want %+v", got, a)
	}
	qs, err := f.s.ListQueues(bg)
	must(t, err, "ListQueues")
	if len(qs) != 2 || qs[0].Name != "a" || qs[1] != a {
		t.Fatalf("ListQueues = %+v", qs)
	}
	_, err = f.s.GetQueue(bg, "zz")
	wantErr(t, err, store.ErrNotFound, "GetQueue of an undeclared queue")
	err = f.s.PutQueue(bg, store.QueueSpec{Name: "r", RateLimit: 1})
	wantErr(t, err, store.ErrInvalid, "PutQueue with a rate and no period")
}

const (
	needX1 = "workflow:x@1"
	needY1 = "workflow:y@1"
	needX2 = "workflow:x@2"
)

// A run the admitter cannot run is skipped, not stopped at: it takes no
// slot and the runs behind it are admitted in (Priority, Seq) order.
func testQueueNeedsSkipped(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 1})
	f.queuedNeeding("q", "y", 0, needY1)
	f.queuedNeeding("q", "x", 0, needX1)
	wantRuns(t, "admission by a worker carrying x@1 alone", f.admit("q", "A", 10, needX1), "x")
	e, ok, err := f.s.QueueRunOf(bg, "y")
	if err != nil || !ok || e.Admitted() || e.Needs != needY1 {
		t.Fatalf("y's entry = %+v ok=%v err=%v: want waiting, needing %s", e, ok, err, needY1)
	}
	f.setStatus("x", store.WorldArchived, "done")
	wantRuns(t, "A again: only y waits, which it cannot run", f.admit("q", "A", 10, needX1))
	wantRuns(t, "admission by a worker carrying y@1", f.admit("q", "B", 10, needY1, needX1), "y")

	// A version is a capability of its own: a run pinned to x@2 ahead of
	// one of x@1 waits for a worker carrying x@2.
	f.putQueue(store.QueueSpec{Name: "v", Concurrency: 1})
	f.queuedNeeding("v", "v2", 0, needX2)
	f.queuedNeeding("v", "v1", 0, needX1)
	wantRuns(t, "admission by a worker carrying x@1 alone", f.admit("v", "A", 10, needX1), "v1")
	f.setStatus("v1", store.WorldArchived, "done")
	wantRuns(t, "admission by a worker carrying x@1 and x@2", f.admit("v", "B", 10, needX1, needX2), "v2")

	// Order among runnable entries holds: priority, then FIFO.
	f.putQueue(store.QueueSpec{Name: "p"})
	f.queuedNeeding("p", "p-low", 5, needX1)
	f.queuedNeeding("p", "p-skip", -5, needY1)
	f.queuedNeeding("p", "p-high1", -1, needX1)
	f.queuedNeeding("p", "p-high2", -1, needX1)
	wantRuns(t, "admission of two", f.admit("p", "A", 2, needX1), "p-high1", "p-high2")
	wantRuns(t, "admission of the rest", f.admit("p", "A", 2, needX1), "p-low")
}

// The queue's limits count admitted runs only: a skipped run holds no
// global, partition or worker slot, and an admitted run holds its slot
// against every worker, whatever they carry.
func testQueueNeedsLimits(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q", Concurrency: 2, WorkerConcurrency: 1})
	f.queuedNeeding("q", "y1", 0, needY1)
	f.queuedNeeding("q", "y2", 0, needY1)
	f.queuedNeeding("q", "x", 0, needX1)
	wantRuns(t, "A (x@1) admits past the y runs", f.admit("q", "A", 10, needX1), "x")
	wantRuns(t, "A at its worker limit", f.admit("q", "A", 10, needX1, needY1))
	wantRuns(t, "B (y@1) within its own worker limit", f.admit("q", "B", 10, needY1), "y1")
	wantRuns(t, "C (y@1) at the global limit", f.admit("q", "C", 10, needY1))
	f.setStatus("x", store.WorldArchived, "done")
	wantRuns(t, "C after x's slot is freed", f.admit("q", "C", 10, needY1), "y2")
	rs, err := f.s.ListQueuedRuns(bg, "q")
	must(t, err, "ListQueuedRuns")
	for _, r := range rs {
		if !r.Admitted() || r.Needs != needY1 {
			t.Fatalf("entry %+v: want admitted, needing %s", r, needY1)
		}
	}
}

// No carries (a worker that carries everything, or an older admitter)
// admits every entry; an entry with no Needs (an older binary's, or one
// migrated from before Needs was recorded) is admitted by any worker.
func testQueueNeedsEmpty(t *testing.T, open Factory) {
	f := setup(t, open)
	f.putQueue(store.QueueSpec{Name: "q"})
	f.queuedNeeding("q", "y", 0, needY1)
	f.queuedNeeding("q", "x", 1, needX2)
	wantRuns(t, "admission with no carries", f.admit("q", "A", 10), "y", "x")
	f.putQueue(store.QueueSpec{Name: "old"})
	f.queued("old", "any", "", 0)
	if e, _, _ := f.s.QueueRunOf(bg, "any"); e.Needs != "" {
		t.Fatalf("entry enqueued without Needs = %+v, want none", e)
	}
	wantRuns(t, "an entry needing nothing, by a worker carrying y@1 alone", f.admit("old", "B", 10, needY1), "any")
}
