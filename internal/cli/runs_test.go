package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// showRun reads a run with `run show -o json`.
func (f *fixture) showRun(id string) api.RunView {
	f.t.Helper()
	var v api.RunView
	f.okJSON(&v, "run", "show", id)
	return v
}

func payoutOf(t testing.TB, v api.RunView) ledger.PayoutResult {
	t.Helper()
	var out ledger.PayoutResult
	dec := json.NewDecoder(bytes.NewReader(v.Output))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("output %s: %v", v.Output, err)
	}
	return out
}

// A payout goes through the run commands: start (idempotent), list, show
// with its timeline, signal, and the completed result; the audit of its
// stream lists its events in order.
func TestRunCommandsDriveAPayout(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	in := `{"Account":"alice","Amount":50}`
	var v api.RunView
	f.okJSON(&v, "run", "start", ledger.WorkflowPayout, "p-1", in)
	if v.ID != "p-1" || v.Workflow != ledger.WorkflowPayout {
		t.Fatalf("start: %+v", v)
	}
	f.ok("run", "start", ledger.WorkflowPayout, "p-1", in) // the same run again
	f.fail(cli.ExitConflict, "run", "start", ledger.WorkflowPayout, "p-1", `{"Account":"bob","Amount":50}`)

	f.eventually("p-1 awaits its approval", func() bool { return len(f.showRun("p-1").Timeline) == 2 })
	if r := row(t, f.ok("run", "list"), "p-1"); !hasPrefix(r, "p-1", ledger.WorkflowPayout, "1", "running") {
		t.Fatalf("list row %v", r)
	}
	out := f.ok("run", "show", "p-1")
	if r := row(t, out, "validate"); !hasPrefix(r, "validate", "1", "completed") {
		t.Fatalf("show: validate row %v in\n%s", r, out)
	}
	if got := f.ok("run", "signal", "p-1", "approved", "true", "--key", "approve-p-1"); got != "signal approved sent to p-1\n" {
		t.Fatalf("signal: %q", got)
	}
	f.eventually("p-1 completes", func() bool { return f.showRun("p-1").Status == "completed" })
	v = f.showRun("p-1")
	if got := payoutOf(t, v); got != (ledger.PayoutResult{Approved: true, Notice: "paid 50 to alice"}) {
		t.Fatalf("output %s", v.Output)
	}
	var steps []string
	for _, s := range v.Timeline {
		steps = append(steps, s.ID)
	}
	if !slices.Equal(steps, []string{"validate", "sys:await:approved", "notify"}) {
		t.Fatalf("timeline %v", steps)
	}
	var runs []api.Run
	f.okJSON(&runs, "run", "list", "--workflow", ledger.WorkflowPayout, "--status", "completed")
	if len(runs) != 1 || runs[0].ID != "p-1" {
		t.Fatalf("completed runs %+v", runs)
	}
	f.okJSON(&runs, "run", "list", "--status", "running")
	if len(runs) != 0 {
		t.Fatalf("running runs %+v", runs)
	}
	f.fail(cli.ExitConflict, "run", "signal", "p-1", "approved", "true")

	var evs []api.AuditEvent
	f.okJSON(&evs, "journal", "audit", "p-1", "--from", "-1h", "--to", "now")
	if len(evs) < 4 || evs[0].EventType != "RunStarted" || evs[len(evs)-1].EventType != "RunCompleted" {
		t.Fatalf("audit %+v", evs)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].RunSeq <= evs[i-1].RunSeq {
			t.Fatalf("audit out of runSeq order: %+v", evs)
		}
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	f.okJSON(&evs, "journal", "audit", "p-1", "--from", future, "--to", "+2h")
	if len(evs) != 0 {
		t.Fatalf("a window in the future: %+v", evs)
	}
	if out := f.ok("journal", "audit", "p-1"); !strings.Contains(out, "RunCompleted") {
		t.Fatalf("audit table:\n%s", out)
	}
}

func TestRunCancelPauseResumeCommands(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, id := range []string{"p-c", "p-p"} {
		f.ok("run", "start", ledger.WorkflowPayout, id, `{"Account":"a","Amount":1}`)
		f.eventually(id+" awaits", func() bool { return len(f.showRun(id).Timeline) == 2 })
	}
	f.ok("run", "cancel", "p-c", "--reason", "no longer needed")
	f.eventually("p-c is cancelled", func() bool { return f.showRun("p-c").Status == "cancelled" })
	f.fail(cli.ExitConflict, "run", "pause", "p-c")

	var v api.RunView
	f.okJSON(&v, "run", "pause", "p-p", "--reason", "audit")
	if v.Status != "paused" {
		t.Fatalf("pause: %s", v.Status)
	}
	f.ok("run", "signal", "p-p", "approved", "false", "--key", "k")
	f.ok("run", "resume", "p-p")
	f.eventually("p-p completes", func() bool { return f.showRun("p-p").Status == "completed" })
	if v := f.showRun("p-p"); payoutOf(t, v) != (ledger.PayoutResult{Notice: "payout of 1 to a refused"}) {
		t.Fatalf("output %s", v.Output)
	}
}

func TestRunCommandRefusals(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "b", `{"Account":5}`)
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "b", `{"Acount":"a"}`)
	f.fail(cli.ExitUsage, "run", "start", "no.such.workflow", "b")
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "b", `not json`)
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout)
	f.fail(cli.ExitUsage, "run", "list", "--status", "sleeping")
	f.fail(cli.ExitNotFound, "run", "show", "ghost")
	f.fail(cli.ExitNotFound, "run", "cancel", "ghost")
	f.fail(cli.ExitNotFound, "run", "signal", "ghost", "approved", "true")
	f.fail(cli.ExitNotFound, "journal", "audit", "ghost")
	f.fail(cli.ExitUsage, "journal", "audit", "x", "--from", "yesterday")
}

// run start --version pins a run; run list --version filters by it.
func TestRunVersionFlags(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	in := `{"Account":"alice","Amount":50}`
	var v api.RunView
	f.okJSON(&v, "run", "start", ledger.WorkflowPayout, "p-1", in, "--version", "1")
	if v.Version != 1 {
		t.Fatalf("start --version 1: version %d", v.Version)
	}
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "p-2", in, "--version", "2")
	var runs []api.Run
	f.okJSON(&runs, "run", "list", "--version", "1")
	if len(runs) != 1 || runs[0].ID != "p-1" || runs[0].Version != 1 {
		t.Fatalf("list --version 1: %+v", runs)
	}
	f.okJSON(&runs, "run", "list", "--version", "2")
	if len(runs) != 0 {
		t.Fatalf("list --version 2: %+v", runs)
	}
}

// A signal-with-start starts the payout and approves it in one command:
// the approval waits in the run's inbox for the run's Await. Repeated with
// the same key it starts nothing and signals nothing more.
func TestRunStartWithSignal(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	in := `{"Account":"carol","Amount":7}`
	f.ok("run", "start", ledger.WorkflowPayout, "p-s", in, "--signal", "approved", "--signal-value", "true", "--signal-key", "ok-p-s")
	f.eventually("p-s completes", func() bool { return f.showRun("p-s").Status == "completed" })
	if got := payoutOf(t, f.showRun("p-s")); got != (ledger.PayoutResult{Approved: true, Notice: "paid 7 to carol"}) {
		t.Fatalf("output %+v", got)
	}
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "p-t", in, "--signal-value", "true")
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "p-t", in, "--signal", "approved", "--signal-value", "{nope")
}

// run query answers from the run's journal; run show lists each step's
// input and output.
func TestRunQueryAndStepValues(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("run", "start", ledger.WorkflowPayout, "p-q", `{"Account":"dan","Amount":3}`)
	f.eventually("p-q awaits its approval", func() bool { return len(f.showRun("p-q").Timeline) == 2 })
	if got := f.ok("run", "query", "p-q", "stage"); got != "\"awaiting approval\"\n" {
		t.Fatalf("query: %q", got)
	}
	f.fail(cli.ExitNotFound, "run", "query", "p-q", "nope")
	out := f.ok("run", "show", "p-q")
	if !strings.Contains(out, "INPUT") || !strings.Contains(out, "OUTPUT") {
		t.Fatalf("show has no input and output columns:\n%s", out)
	}
	if r := row(t, out, "validate"); len(r) < 3 || r[len(r)-2] != "true" {
		t.Fatalf("validate row %v: want its output true in\n%s", r, out)
	}
	if r := row(t, out, "sys:await:approved"); !strings.Contains(strings.Join(r, " "), `"signal":"approved"`) {
		t.Fatalf("the await's row %v: want its input naming the signal in\n%s", r, out)
	}
}

// run start --attr labels a run; run list --attr finds exactly the runs
// carrying every pair; run show prints them; a malformed --attr is a usage
// error.
func TestRunAttributesThroughTheCLI(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	in := `{"Account":"erin","Amount":2}`
	f.ok("run", "start", ledger.WorkflowPayout, "p-a", in, "--attr", "customer=c-1", "--attr", "region=eu")
	f.ok("run", "start", ledger.WorkflowPayout, "p-b", in, "--attr", "customer=c-2", "--attr", "region=eu")
	f.ok("run", "start", ledger.WorkflowPayout, "p-c", in)
	ids := func(args ...string) string {
		var runs []api.Run
		f.okJSON(&runs, append([]string{"run", "list"}, args...)...)
		out := []string{}
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return strings.Join(out, ",")
	}
	if got := ids("--attr", "region=eu"); got != "p-a,p-b" {
		t.Fatalf("runs in eu: %s", got)
	}
	if got := ids("--attr", "region=eu", "--attr", "customer=c-2"); got != "p-b" {
		t.Fatalf("runs of c-2 in eu: %s", got)
	}
	if got := ids("--attr", "customer=c-9"); got != "" {
		t.Fatalf("runs of c-9: %s", got)
	}
	if r := row(t, f.ok("run", "show", "p-a"), "attributes"); strings.Join(r, " ") != "attributes customer=c-1 region=eu" {
		t.Fatalf("show's attributes row %v", r)
	}
	f.fail(cli.ExitUsage, "run", "list", "--attr", "region")
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "p-d", in, "--attr", "=x")
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "p-d", in, "--attr", "bad key=x")
}

// payoutScreened is the ledger's payout as an earlier deploy had it: a
// "screen" step between validate and the approval, which the ledger's code
// no longer asks for.
func payoutScreened() *workflow.Def[ledger.Payout, ledger.PayoutResult] {
	return workflow.New(ledger.WorkflowPayout, 1, func(c *workflow.Ctx, in ledger.Payout) (ledger.PayoutResult, error) {
		for _, step := range []string{"validate", "screen"} {
			if _, err := workflow.Step(c, step, func(context.Context) (bool, error) { return true, nil }); err != nil {
				return ledger.PayoutResult{}, err
			}
		}
		ok, err := workflow.Await[bool](c, "approved")
		return ledger.PayoutResult{Approved: ok, Notice: "screened"}, err
	})
}

// TestRunTerminateAndReset: runs journaled by code that asked for a step
// the fixture's node no longer asks for are blocked there; run reset to
// the diverging step lets one go on under the node's code to its result,
// and run terminate ends the other failed "terminated: REASON". Terminating
// it again, a run a worker holds, or an unknown run fail with the run
// commands' exit codes, and so do a missing or negative --step.
func TestRunTerminateAndReset(t *testing.T) {
	f := newFixture(t, fixtureOptions{prepare: func(ctx context.Context, st store.Store) {
		wfs, err := workflow.NewWorkflows(payoutScreened())
		if err != nil {
			t.Fatal(err)
		}
		testrig.RecordRuns(t, ctx, st, wfs, 3, func(ctx context.Context, cl *workflow.Client) error {
			for _, id := range []string{"p-r", "p-t"} {
				if err := payoutScreened().Start(ctx, cl, id, ledger.Payout{Account: "erin", Amount: 9}); err != nil {
					return err
				}
			}
			return nil
		}, "p-r", "p-t")
	}})
	for _, id := range []string{"p-r", "p-t"} {
		f.eventually(id+" is blocked and free", func() bool {
			l, held, err := f.st.GetLease(f.ctx, id)
			return f.showRun(id).Status == "blocked" && err == nil && (!held || l.Holder == "")
		})
	}
	if r := row(t, f.ok("run", "show", "p-r"), "error"); !strings.Contains(strings.Join(r, " "), `divergent at step 1: recorded "screen"`) {
		t.Fatalf("the blocked run's error row %v", r)
	}

	f.fail(cli.ExitUsage, "run", "reset", "p-r")
	f.fail(cli.ExitUsage, "run", "reset", "p-r", "--step", "-1")
	f.fail(cli.ExitUsage, "run", "reset", "p-r", "--step", "9")
	f.fail(cli.ExitNotFound, "run", "reset", "ghost", "--step", "0")
	var v api.RunView
	f.okJSON(&v, "run", "reset", "p-r", "--step", "1", "--reason", "screen removed")
	if v.ID != "p-r" {
		t.Fatalf("reset: %+v", v.Run)
	}
	f.ok("run", "signal", "p-r", "approved", "true", "--key", "approve-p-r")
	f.eventually("p-r completes under the node's code", func() bool { return f.showRun("p-r").Status == "completed" })
	if got := payoutOf(t, f.showRun("p-r")); got != (ledger.PayoutResult{Approved: true, Notice: "paid 9 to erin"}) {
		t.Fatalf("the reset run's output %+v, want the node's code's", got)
	}

	out := f.ok("run", "terminate", "p-t", "--reason", "bad deploy")
	if r := row(t, out, "status"); !hasPrefix(r, "status", "failed") {
		t.Fatalf("terminate: status row %v in\n%s", r, out)
	}
	if v := f.showRun("p-t"); v.Status != "failed" || v.Error != "terminated: bad deploy" {
		t.Fatalf("the terminated run: %s %q", v.Status, v.Error)
	}
	f.fail(cli.ExitConflict, "run", "terminate", "p-t")
	f.fail(cli.ExitConflict, "run", "reset", "p-t", "--step", "0")
	f.fail(cli.ExitNotFound, "run", "terminate", "ghost")

	// A run the node holds (waiting for its approval) is refused, with
	// what to do instead.
	f.ok("run", "start", ledger.WorkflowPayout, "p-live", `{"Account":"a","Amount":1}`)
	f.eventually("p-live awaits", func() bool { return len(f.showRun("p-live").Timeline) == 2 })
	if r := f.fail(cli.ExitConflict, "run", "terminate", "p-live"); !strings.Contains(r.err, "cancel or pause it first") {
		t.Fatalf("terminating a held run: %q, want it to say to cancel or pause first", r.err)
	}
}
