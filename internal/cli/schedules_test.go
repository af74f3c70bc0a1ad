package cli_test

import (
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
)

// TestScheduleCommands: create, list (with the next fire times), show,
// pause, resume, trigger and delete; a bad spec is a usage-class failure,
// an unknown schedule not found, a taken id a conflict.
func TestScheduleCommands(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	var v api.ScheduleView
	f.okJSON(&v, "schedule", "create", "nightly", "--cron", "0 3 * * *", "--time-zone", "Europe/Paris",
		"--workflow", ledger.WorkflowPayout, "--input", `{"Account":"alice","Amount":1}`, "--overlap", "buffer_one")
	if v.ID != "nightly" || v.State != "active" || len(v.NextFireTimes) != 5 || v.Spec.Overlap != "buffer_one" {
		t.Fatalf("created %+v", v)
	}
	if out := f.ok("schedule", "list"); !strings.Contains(out, "nightly") || !strings.Contains(out, "0 3 * * * (Europe/Paris)") ||
		!strings.Contains(out, v.NextFireTimes[0].Local().Format("2006-01-02 15:04:05.000")) {
		t.Fatalf("schedule list:\n%s", out)
	}
	f.fail(cli.ExitConflict, "schedule", "create", "nightly", "--every", "1h", "--workflow", ledger.WorkflowPayout)
	f.fail(cli.ExitUsage, "schedule", "create", "bad", "--cron", "99 * * * *", "--workflow", ledger.WorkflowPayout)
	f.fail(cli.ExitNotFound, "schedule", "show", "nobody")
	f.okJSON(&v, "schedule", "pause", "nightly")
	if v.State != "paused" || len(v.NextFireTimes) != 0 {
		t.Fatalf("paused %+v", v)
	}
	f.okJSON(&v, "schedule", "resume", "nightly")
	if v.State != "active" {
		t.Fatalf("resumed %+v", v)
	}
	var tr api.TriggerResult
	f.okJSON(&tr, "schedule", "trigger", "nightly")
	if !strings.HasPrefix(tr.Tick, "manual-") || !strings.HasPrefix(tr.Run, "sched.nightly.manual-") {
		t.Fatalf("triggered %+v", tr)
	}
	f.okJSON(&v, "schedule", "show", "nightly")
	f.ok("schedule", "delete", "nightly")
	f.fail(cli.ExitNotFound, "schedule", "delete", "nightly")
}
