package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
)

// jsonFailure runs a command with -o json that must fail with code, and
// decodes its error: one JSON line on stderr, nothing on stdout.
func (f *fixture) jsonFailure(code int, args ...string) cli.JSONError {
	f.t.Helper()
	r := f.run(append(args, "-o", "json")...)
	if r.code != code || r.out != "" {
		f.t.Fatalf("orrery %s -o json: want exit %d and no stdout, got %s", strings.Join(args, " "), code, r)
	}
	if strings.Count(r.err, "\n") != 1 {
		f.t.Fatalf("the error is not one line: %q", r.err)
	}
	var v struct{ Error cli.JSONError }
	dec := json.NewDecoder(strings.NewReader(r.err))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		f.t.Fatalf("the error is not JSON: %v\n%s", err, r.err)
	}
	if v.Error.ExitCode != code {
		f.t.Fatalf("exit_code %d, want %d", v.Error.ExitCode, code)
	}
	return v.Error
}

// TestErrorsAsJSON: under -o json an error is JSON on stderr, with the
// API's code, message, details and request id, or, for a usage mistake,
// code "usage" and the help to read.
func TestErrorsAsJSON(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	e := f.jsonFailure(cli.ExitNotFound, "run", "show", "nope")
	if e.Code != api.CodeNotFound || e.Status != 404 || e.RequestID == "" || e.Details["resource"] != "run" {
		t.Fatalf("unknown run: %+v", e)
	}
	e = f.jsonFailure(cli.ExitUsage, "world", "show", "a", "b")
	if e.Code != "usage" || e.Help != "orrery world show --help" || !strings.Contains(e.Message, "arg") {
		t.Fatalf("usage: %+v", e)
	}
	e = f.jsonFailure(cli.ExitUsage, "world", "create", "x", "--universe", "ledger.acount")
	if e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, `unknown universe "ledger.acount"`) {
		t.Fatalf("unknown universe: %+v", e)
	}
	if u, _ := e.Details["universes"].([]any); len(u) != 2 || u[0] != ledger.UniverseAccount || u[1] != ledger.UniverseTransfer {
		t.Fatalf("the known universes: %v", e.Details)
	}
	// Results stay on stdout as before.
	var w api.World
	f.okJSON(&w, "world", "create", "bob", "--universe", ledger.UniverseAccount)
	if w.ID != "bob" {
		t.Fatalf("create -o json: %+v", w)
	}
}

// TestInputErrorsSpeakJSON: a value that does not fit its handler's type
// is refused (400, exit 2) by the field, the JSON type expected and the
// one given, for a send and a call alike, never in CBOR's words.
func TestInputErrorsSpeakJSON(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	for _, tc := range []struct {
		args                 []string
		field, expected, got string
		message              string
	}{
		{[]string{"world", "send", "bob", "ledger/Deposit", `{"Amount":"lots"}`}, "Amount", "integer", "string",
			`field "Amount" must be an integer, not a string ("lots")`},
		{[]string{"world", "send", "bob", "ledger/Deposit", `{"Amount":1.5}`}, "Amount", "integer", "number with a fraction or exponent",
			`field "Amount" must be an integer, not a number with a fraction or exponent (1.5)`},
		{[]string{"world", "call", "bob", "ledger/Open", `{"Owner":5}`}, "Owner", "string", "integer",
			`field "Owner" must be a string, not an integer (5)`},
		{[]string{"world", "send", "bob", "ledger/Deposit", `[1]`}, "", "object", "array",
			`the value must be an object, not an array`},
	} {
		r := f.fail(cli.ExitUsage, tc.args...)
		if !strings.Contains(r.err, tc.message) || strings.Contains(strings.ToLower(r.err), "cbor") {
			t.Errorf("orrery %s: %q, want %q and no word of CBOR", strings.Join(tc.args, " "), r.err, tc.message)
		}
		e := f.jsonFailure(cli.ExitUsage, tc.args...)
		if e.Details["expected"] != tc.expected || e.Details["got"] != tc.got || (tc.field != "" && e.Details["field"] != tc.field) {
			t.Errorf("orrery %s -o json: details %v", strings.Join(tc.args, " "), e.Details)
		}
	}
	// The refused call was not journaled: the world's first input is still
	// to come.
	var v api.WorldView
	f.okJSON(&v, "world", "show", "bob")
	if v.Head != 0 {
		t.Fatalf("refused inputs reached the journal: head %d", v.Head)
	}
}

// TestRunShowUnknownSaysRun: an unknown run is "run not found", not a
// world.
func TestRunShowUnknownSaysRun(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	r := f.fail(cli.ExitNotFound, "run", "show", "nope")
	if !strings.Contains(r.err, "run not found (run nope)") || strings.Contains(r.err, "world") {
		t.Fatalf("run show nope: %q", r.err)
	}
}

// TestWorldSnapshotCommand: `world snapshot` prints the snapshot taken
// (as a table or JSON), and an unknown world is not found.
func TestWorldSnapshotCommand(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "bob", "ledger/Open", `{"Owner":"bob"}`)
	out := f.ok("world", "snapshot", "bob")
	if r := row(t, out, "bob"); !hasPrefix(r, "bob", "1") {
		t.Fatalf("snapshot table %q", out)
	}
	var s api.Snapshot
	f.okJSON(&s, "world", "snapshot", "bob")
	st, _ := f.accountOf("bob")
	if s.World != "bob" || s.Height != 1 || s.StateHash != st.Hash {
		t.Fatalf("snapshot -o json %+v, state %+v", s, st)
	}
	f.fail(cli.ExitNotFound, "world", "snapshot", "ghost")
}

// TestServeJSONLogsFromTheFirstLine: with --log-format json, every line
// serve writes, on stdout and stderr, is a JSON object, its first
// included, and so is its error when it cannot start.
func TestServeJSONLogsFromTheFirstLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	out, errOut := newSyncBuffer(), newSyncBuffer()
	done := make(chan int, 1)
	env := map[string]string{"ORRERY_LOG_FORMAT": "json", "ORRERY_STORE": "memory"}
	go func() {
		done <- cli.Run(sctx, []string{"serve", "--listen", "127.0.0.1:0", "--worker-id", "j1", "--log-level", "debug"},
			cli.IO{Out: out, Err: errOut, Getenv: func(k string) string { return env[k] }}, ledger.Kernels())
	}()
	first := out.waitFor(ctx, t, "serve's first line", func(o string) bool { return strings.Contains(o, "\n") })
	var head struct{ Msg, Worker, Store, API string }
	if err := json.Unmarshal([]byte(first), &head); err != nil || head.Worker != "j1" || head.Store != "memory" || !strings.HasPrefix(head.API, "http://127.0.0.1:") {
		t.Fatalf("first line %q: %+v %v", first, head, err)
	}
	// A client's mistake, logged with its request id.
	r := runCLI(ctx, nil, "--addr", head.API, "world", "show", "ghost")
	if r.code != cli.ExitNotFound {
		t.Fatalf("show ghost: %s", r)
	}
	errOut.waitFor(ctx, t, "the refusal's log line", func(o string) bool { return strings.Contains(o, `"api: request refused"`) })
	stop()
	if code := <-done; code != cli.ExitOK {
		t.Fatalf("serve exited %d\n%s", code, errOut.String())
	}
	for name, text := range map[string]string{"stdout": out.String(), "stderr": errOut.String()} {
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("%s line %q is not JSON: %v", name, line, err)
			}
			if m["msg"] == "api: request refused" && (m["level"] != "INFO" || m["request_id"] == "") {
				t.Fatalf("a 404 logged as %v", m)
			}
		}
	}

	// A serve that cannot start says so in JSON too.
	r = runCLI(ctx, env, "serve", "--listen", "not-an-address")
	var rec map[string]any
	if r.code != cli.ExitUsage || json.Unmarshal([]byte(r.err), &rec) != nil || rec["level"] != "ERROR" || rec["exit_code"] != float64(cli.ExitUsage) {
		t.Fatalf("a failed start with JSON logs: %s", r)
	}
}

// TestServeTakesItsSettingsFromEnvAndFile: serve reads its store from
// ORRERY_STORE and its worker id from a --config file, and its flags
// still win.
func TestServeTakesItsSettingsFromEnvAndFile(t *testing.T) {
	cfg := t.TempDir() + "/orrery.toml"
	writeFile(t, cfg, "worker-id = \"from-file\"\nstore = \"ignored.db\"\n")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	out := newSyncBuffer()
	done := make(chan int, 1)
	env := map[string]string{"ORRERY_STORE": "memory", "ORRERY_CONFIG": cfg}
	go func() {
		done <- cli.Run(sctx, []string{"serve", "--listen", "127.0.0.1:0"}, cli.IO{Out: out, Getenv: func(k string) string { return env[k] }}, ledger.Kernels())
	}()
	line := out.waitFor(ctx, t, "serve's first line", func(o string) bool { return strings.Contains(o, "\n") })
	m := servingLine.FindStringSubmatch(line)
	if m == nil || m[1] != "from-file" || m[2] != "memory" {
		t.Fatalf("serve's first line %q: want worker from-file (the file) and store memory (the environment over the file)", line)
	}
	stop()
	if code := <-done; code != cli.ExitOK {
		t.Fatalf("serve exited %d", code)
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServeMetricsMove: the /metrics of a real serve count its HTTP
// requests by route and code, its workflow runs by status and steps by
// outcome, and its worlds' handler errors by world type, each moving with
// what was done.
func TestServeMetricsMove(t *testing.T) {
	wfs, err := ledger.Workflows()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	out := newSyncBuffer()
	done := make(chan int, 1)
	go func() {
		done <- cli.RunApp(sctx, []string{"serve", "--listen", "127.0.0.1:0", "--store", "memory", "--worker-id", "m1"},
			cli.IO{Out: out, Getenv: func(string) string { return "" }}, cli.App{Kernels: ledger.Kernels(), Workflows: wfs})
	}()
	defer func() {
		stop()
		<-done
	}()
	m := servingLine.FindStringSubmatch(out.waitFor(ctx, t, "serve's first line", func(o string) bool { return strings.Contains(o, "\n") }))
	if m == nil {
		t.Fatalf("serve's first line %q", out.String())
	}
	url := m[3]
	ok := func(args ...string) string {
		t.Helper()
		r := runCLI(ctx, nil, append([]string{"--addr", url}, args...)...)
		if r.code != cli.ExitOK {
			t.Fatalf("orrery %s: %s", strings.Join(args, " "), r)
		}
		return r.out
	}
	scrape := func() string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	value := func(text, series string) float64 {
		for _, line := range strings.Split(text, "\n") {
			if rest, ok := strings.CutPrefix(line, series+" "); ok {
				v, _ := strconv.ParseFloat(rest, 64)
				return v
			}
		}
		return 0
	}
	before := scrape()

	ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	ok("world", "call", "bob", "ledger/Open", `{"Owner":"bob"}`)
	if r := runCLI(ctx, nil, "--addr", url, "world", "call", "bob", "ledger/Withdraw", `{"Amount":5}`); r.code != cli.ExitError {
		t.Fatalf("an overdraft: %s", r) // the handler refuses it: a handler error
	}
	ok("run", "start", ledger.WorkflowPayout, "p-ok", `{"Account":"bob","Amount":5}`)
	ok("run", "start", ledger.WorkflowPayout, "p-bad", `{"Account":"bob","Amount":0}`)
	waitFor := func(what string, cond func(string) bool) string {
		t.Helper()
		for {
			text := scrape()
			if cond(text) {
				return text
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: never\n%s", what, text)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	waitFor("p-ok waits for its approval", func(text string) bool {
		return value(text, `orrery_workflow_runs{status="running"}`) == 1 && value(text, `orrery_workflow_runs{status="failed"}`) == 1
	})
	ok("run", "signal", "p-ok", "approved", "true", "--key", "a-1")
	// The host counts a handler error just after its commit, which the
	// call's reply may overtake: waited for, not assumed.
	after := waitFor("p-ok completes and the overdraft is counted", func(text string) bool {
		return value(text, `orrery_workflow_runs{status="completed"}`) == 1 &&
			value(text, `orrery_handler_errors_total{world_type="ledger.account"}`) > value(before, `orrery_handler_errors_total{world_type="ledger.account"}`)
	})

	for series, delta := range map[string]float64{
		`orrery_http_requests_total{code="201",route="POST /v1/worlds"}`:                            1,
		`orrery_http_requests_total{code="422",route="POST /v1/worlds/{id}/calls"}`:                 1,
		`orrery_http_request_duration_seconds_count{code="200",route="POST /v1/worlds/{id}/calls"}`: 1,
		`orrery_handler_errors_total{world_type="ledger.account"}`:                                  1,
		`orrery_workflow_steps_total{outcome="completed"}`:                                          3, // p-ok's validate, its approval's await and notify
		`orrery_workflow_steps_total{outcome="failed"}`:                                             1, // p-bad's validate
	} {
		if got := value(after, series) - value(before, series); got != delta {
			t.Errorf("%s moved by %v, want %v", series, got, delta)
		}
	}
}
