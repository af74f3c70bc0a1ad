package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/workflow"
)

// TestScheduleStartsRunsOnARealNode: on SQLite and PostgreSQL, a node
// with the orchestrator role runs the scheduler: an every-1s schedule
// starts one run per tick, each run id naming its tick, each run created
// no earlier than its tick by the store's clock, and the runs complete.
func TestScheduleStartsRunsOnARealNode(t *testing.T) {
	for _, backend := range []string{testrig.SQLite, testrig.Postgres} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			st := testrig.Open(t, ctx, backend, &testrig.Clock{})
			def := twoSteps()
			n := startWithWorkflows(t, ctx, st, "a", def)
			in, err := event.Marshal(4)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := schedule.Create(ctx, st, "every-second", schedule.Spec{
				Every: schedule.Duration(time.Second), Overlap: schedule.OverlapAllow,
				Target: schedule.Target{Workflow: "two", Input: in},
			}); err != nil {
				t.Fatal(err)
			}
			var runs []workflow.RunSummary
			for {
				all, err := n.Runs().List(ctx, "two")
				if err != nil {
					t.Fatal(err)
				}
				runs = runs[:0]
				for _, r := range all {
					if r.Status == workflow.StatusCompleted {
						runs = append(runs, r)
					}
				}
				if len(runs) >= 3 {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("3 runs did not complete: %+v", all)
				case <-time.After(50 * time.Millisecond):
				}
			}
			for _, r := range runs {
				key, ok := strings.CutPrefix(r.ID, "sched.every-second.")
				if !ok {
					t.Fatalf("run %s is not a tick's", r.ID)
				}
				tick, err := time.Parse("20060102T150405.000000000Z", key)
				if err != nil {
					t.Fatalf("run %s: %v", r.ID, err)
				}
				if r.CreatedAt.Before(tick) {
					t.Fatalf("run %s created at %v, before its tick", r.ID, r.CreatedAt)
				}
				if out, err := def.Result(ctx, n.Runs(), r.ID); err != nil || out != 10 {
					t.Fatalf("run %s: %d, %v", r.ID, out, err)
				}
			}
			sc, err := schedule.Get(ctx, st, "every-second")
			if err != nil {
				t.Fatal(err)
			}
			if sc.State.Fired < 3 {
				t.Fatalf("fired counter %d with 3 runs done", sc.State.Fired)
			}
		})
	}
}
