package api_test

import (
	"testing"

	"github.com/orrery-run/orrery/store"
)

// The named queues of workflow runs are listed by GET /v1/queues, shown
// by GET /v1/queues/{name}, and counted by orrery_queue_depth (waiting)
// and orrery_queue_running (admitted) under the queue's name.
func TestWorkflowQueuesViewAndMetrics(t *testing.T) {
	r := newRig(t, rigOptions{metrics: true, token: "m"})
	if err := r.Store.PutQueue(r.Ctx, store.QueueSpec{Name: "jobs", Concurrency: 1, Partitioned: true}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"j1", "j2", "j3"} {
		r.Create(id, universe)
		if _, _, err := r.Store.EnqueueRun(r.Ctx, store.QueuedRun{Queue: "jobs", Run: id, Partition: "p-" + id, Priority: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := r.Store.AdmitRuns(r.Ctx, "jobs", "w1", 1); err != nil || len(got) != 1 {
		t.Fatalf("admit: %+v %v", got, err)
	}
	qs := must(r.Client.WorkflowQueues(r.Ctx))(t)
	if len(qs) != 1 || qs[0].Name != "jobs" || qs[0].Running != 1 || qs[0].Waiting != 2 || qs[0].RunningByWorker["w1"] != 1 ||
		qs[0].WaitingByPriority["1"] != 2 || qs[0].Concurrency != 1 || !qs[0].Partitioned {
		t.Fatalf("queues: %+v", qs)
	}
	q := must(r.Client.WorkflowQueue(r.Ctx, "jobs"))(t)
	if q.Running != 1 || q.Waiting != 2 {
		t.Fatalf("queue: %+v", q)
	}
	text := scrape(t, r, "m")
	if v, ok := metricValue(t, text, `orrery_queue_depth{queue="jobs"}`); !ok || v != 2 {
		t.Fatalf(`orrery_queue_depth{queue="jobs"} = %v (present %v), want 2`, v, ok)
	}
	if v, ok := metricValue(t, text, `orrery_queue_running{queue="jobs"}`); !ok || v != 1 {
		t.Fatalf(`orrery_queue_running{queue="jobs"} = %v (present %v), want 1`, v, ok)
	}
}
