package cli_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
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

// TestScheduleTriggerRetriesSafely: `schedule trigger` is idempotent by
// --key. An invocation without one makes a key of its own; when its answer
// is lost (the server recorded the tick, the connection dropped before the
// answer came back) it says to retry with that key, and the retry prints
// the first trigger's tick as a duplicate: one tick recorded, not two.
// Keyless invocations that succeed are a tick each.
func TestScheduleTriggerRetriesSafely(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("schedule", "create", "nightly", "--cron", "0 3 * * *", "--workflow", ledger.WorkflowPayout, "--input", `{"Account":"alice","Amount":1}`)

	// A front that lets the first trigger through to the server and then
	// drops the connection instead of answering.
	target, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var dropped atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/trigger") && dropped.CompareAndSwap(false, true) {
			proxy.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close()
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	lost := runCLI(f.ctx, nil, "--addr", front.URL, "schedule", "trigger", "nightly")
	_, key, ok := strings.Cut(strings.TrimSpace(lost.err), "retry safely with --key ")
	key = strings.TrimSuffix(key, ")")
	if lost.code == cli.ExitOK || !dropped.Load() || !ok || key == "" {
		t.Fatalf("the lost trigger: %s; want a failure naming its key", lost)
	}
	var first api.ScheduleView
	f.okJSON(&first, "schedule", "show", "nightly")
	if first.Pending+int(first.Fired) != 1 {
		t.Fatalf("after the lost trigger: %+v, want its tick recorded", first)
	}
	var tr api.TriggerResult
	f.okJSON(&tr, "schedule", "trigger", "nightly", "--key", key)
	if !tr.Duplicate || tr.IdempotencyKey != key || tr.Schedule.Pending+int(tr.Schedule.Fired) != 1 {
		t.Fatalf("the retry with --key %s: %+v; want the first tick, duplicate", key, tr)
	}
	again := f.ok("schedule", "trigger", "nightly", "--key", key)
	if !strings.Contains(again, tr.Tick) || !strings.Contains(again, "true") {
		t.Fatalf("the table of a repeat:\n%s", again)
	}
	var a, b api.TriggerResult
	f.okJSON(&a, "schedule", "trigger", "nightly")
	f.okJSON(&b, "schedule", "trigger", "nightly")
	if a.Duplicate || b.Duplicate || a.Tick == b.Tick || a.IdempotencyKey == "" || a.IdempotencyKey == b.IdempotencyKey || b.Schedule.Pending+int(b.Schedule.Fired) != 3 {
		t.Fatalf("two keyless triggers: %+v / %+v; want two ticks with keys of their own", a, b)
	}
	// A run id in the schedules' namespace is not the user's to take.
	f.fail(cli.ExitUsage, "run", "start", ledger.WorkflowPayout, "sched.nightly.manual-x", `{"Account":"bob","Amount":5}`)
}
