package cli_test

import (
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/store"
)

// Runs started on a queue through `run start --queue` wait there within
// its limit of one, and `queue list` and `queue show` report the limits,
// the running run and the waiting ones by priority and partition.
func TestQueueCommandsShowAQueuedPayout(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	if err := f.st.PutQueue(f.ctx, store.QueueSpec{Name: "payouts", Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	in := `{"Account":"alice","Amount":5}`
	f.ok("run", "start", ledger.WorkflowPayout, "q-1", in, "--queue", "payouts")
	f.ok("run", "start", ledger.WorkflowPayout, "q-2", in, "--queue", "payouts", "--priority", "2", "--partition", "alice")
	f.ok("run", "start", ledger.WorkflowPayout, "q-3", in, "--queue", "payouts", "--priority", "2")
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "q-4", in, "--priority", "2")
	// The payout waits for an approval signal: the first admitted holds
	// the one slot, the others wait.
	var q api.WorkflowQueue
	f.eventually("one payout admitted", func() bool {
		f.okJSON(&q, "queue", "show", "payouts")
		return q.Running == 1
	})
	if q.Concurrency != 1 || q.Waiting != 2 || q.WaitingByPriority["2"] != 2 || q.WaitingByPartition["alice"] != 1 {
		t.Fatalf("queue show: %+v", q)
	}
	if s := f.showRun("q-2").Status; s != "queued" {
		t.Fatalf("q-2 is %s, want queued", s)
	}
	if r := row(t, f.ok("queue", "list"), "payouts"); !hasPrefix(r, "payouts", "1", "-", "-", "false", "1", "2") {
		t.Fatalf("list row %v", r)
	}
	if out := f.ok("queue", "show", "payouts"); !strings.Contains(out, "priority 2=2") || !strings.Contains(out, "partition alice=1") {
		t.Fatalf("show:\n%s", out)
	}
	f.fail(cli.ExitNotFound, "queue", "show", "nope")
}
