package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/workflow/projector"
)

// served is a `serve` running in a goroutine.
type served struct {
	t        *testing.T
	ctx      context.Context // the test's bound, not serve's
	cancel   context.CancelFunc
	done     chan int
	out, err *syncBuffer
	url      string // the API's base URL, from serve's first line
	store    string // the store serve describes
	token    string
}

var servingLine = regexp.MustCompile(`^orrery serve: worker (\S+), store (.+), (?:API|probes) (http://\S+)\n$`)

// startServe runs `orrery serve args...` until stop, with env as its
// environment, and waits for the line that says where it listens.
func startServe(t *testing.T, env map[string]string, worker string, args ...string) *served {
	t.Helper()
	return startServeApp(t, cli.App{Kernels: ledger.Kernels()}, env, worker, args...)
}

// startServeApp is startServe for a binary that serves app.
func startServeApp(t *testing.T, app cli.App, env map[string]string, worker string, args ...string) *served {
	t.Helper()
	tctx, tcancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(tcancel)
	ctx, cancel := context.WithCancel(tctx)
	s := &served{t: t, ctx: tctx, cancel: cancel, done: make(chan int, 1), out: newSyncBuffer(), err: newSyncBuffer(), token: env["ORRERY_TOKEN"]}
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--worker-id", worker}, args...)
	go func() {
		s.done <- cli.RunApp(ctx, args, cli.IO{Out: s.out, Err: s.err, Getenv: func(k string) string { return env[k] }}, app)
	}()
	t.Cleanup(func() { s.stop() })
	var line string
	for line == "" {
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("serve ended with %d before serving\nstdout: %s\nstderr: %s", code, s.out.String(), s.err.String())
		default:
		}
		line = s.out.waitFor(tctx, t, "serve's first line", func(o string) bool { return strings.Contains(o, "\n") })
	}
	m := servingLine.FindStringSubmatch(line)
	if m == nil || m[1] != worker {
		t.Fatalf("serve's first line %q, want %s", line, servingLine)
	}
	s.store, s.url = m[2], m[3]
	return s
}

// stop ends serve's context, as SIGTERM would, and returns its exit code.
func (s *served) stop() int {
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code // stop may be called again
		return code
	case <-s.ctx.Done():
		s.t.Fatalf("serve did not end with its context\nstderr: %s", s.err.String())
		return -1
	}
}

// cli runs a command against the served API.
func (s *served) cli(args ...string) result {
	full := append([]string{"--addr", s.url}, args...)
	if s.token != "" {
		full = append(full, "--token", s.token)
	}
	return runCLI(s.ctx, nil, full...)
}

func (s *served) ok(args ...string) string {
	s.t.Helper()
	r := s.cli(args...)
	if r.code != cli.ExitOK {
		s.t.Fatalf("orrery %s: %s", strings.Join(args, " "), r)
	}
	return r.out
}

// get fetches path from the API with token ("" for none).
func (s *served) get(path, token string) (int, string) {
	s.t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.url+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestServeEndToEnd(t *testing.T) {
	db := filepath.Join(t.TempDir(), "o.db")
	s := startServe(t, map[string]string{"ORRERY_TOKEN": "s3cret"}, "sv-1", "--store", db, "--lease-ttl", "2s")
	if s.store != "sqlite "+db {
		t.Fatalf("serve describes its store as %q, want sqlite %s", s.store, db)
	}

	s.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	s.ok("world", "create", "bob", "--universe", ledger.UniverseAccount)
	if out := s.ok("world", "send", "alice", "ledger/Deposit", `{"Amount":40}`, "--key", "dep-1"); !strings.HasPrefix(out, "enqueued at inbox seq ") {
		t.Fatalf("send printed %q", out)
	}
	if out := s.ok("world", "call", "alice", "ledger/Balance"); out != "40\n" {
		t.Fatalf("Balance replied %q, want 40", out)
	}
	if out := s.ok("world", "call", "bob", "ledger/Deposit", `{"Amount":2}`); out != "2\n" {
		t.Fatalf("bob's Deposit replied %q", out)
	}
	if r := runCLI(s.ctx, nil, "--addr", s.url, "world", "list"); r.code != cli.ExitAuth {
		t.Fatalf("serve with ORRERY_TOKEN answered a request without it: %s", r)
	}

	// /metrics needs the token too, and counts the commits.
	if code, _ := s.get("/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d", code)
	}
	code, body := s.get("/metrics", "s3cret")
	if code != http.StatusOK || !regexp.MustCompile(`(?m)^orrery_commits_total(\{[^}]*\})? [1-9]`).MatchString(body) {
		t.Fatalf("/metrics: %d, without a count of commits:\n%s", code, body)
	}

	// The end of serve's context is a SIGTERM: a drain and exit 0.
	if code := s.stop(); code != cli.ExitOK {
		t.Fatalf("serve exited %d\nstderr: %s", code, s.err.String())
	}
	if strings.Count(s.out.String(), "\n") != 1 {
		t.Fatalf("serve's stdout is more than its first line:\n%s", s.out.String())
	}
	// Its log goes to the command's stderr.
	if logs := s.err.String(); !strings.Contains(logs, "msg=serving") || !strings.Contains(logs, "msg=stopped") {
		t.Fatalf("serve's log on stderr lacks its start and stop:\n%s", logs)
	}

	// What it left in the store: every lease released, the worker draining.
	st, err := sqlite.Open(s.ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"alice", "bob"} {
		l, ok, err := st.GetLease(s.ctx, id)
		if err != nil || !ok || l.Holder != "" || l.Epoch == 0 {
			t.Fatalf("%s's lease after serve stopped: %+v (%v, %v), want released", id, l, ok, err)
		}
	}
	ws, err := st.ListWorkers(s.ctx)
	if err != nil || len(ws) != 1 || ws[0].ID != "sv-1" || !ws[0].Draining {
		t.Fatalf("workers after serve stopped: %+v (%v), want sv-1 draining", ws, err)
	}
}

func TestServeMemory(t *testing.T) {
	s := startServe(t, nil, "sv-m", "--store", "memory", "--lease-ttl", "2s")
	if s.store != "memory" {
		t.Fatalf("serve describes its store as %q", s.store)
	}
	s.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	if out := s.ok("world", "call", "alice", "ledger/Deposit", `{"Amount":3}`); out != "3\n" {
		t.Fatalf("Deposit replied %q", out)
	}
	if code, _ := s.get("/metrics", ""); code != http.StatusOK {
		t.Fatalf("/metrics of a server without a token: %d", code)
	}
	if code := s.stop(); code != cli.ExitOK {
		t.Fatalf("serve exited %d\nstderr: %s", code, s.err.String())
	}
}

// serve refuses before it touches anything: no listener, no store file.
func TestServeRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		says string
	}{
		{"beyond loopback without a token", []string{"--listen", "0.0.0.0:0"}, nil, "token"},
		{"a bad listen address", []string{"--listen", "nowhere"}, nil, "addr"},
		{"a TLS certificate without its key", []string{"--tls-cert", "cert.pem"}, nil, "TLS"},
		{"a bad log level", []string{"--log-level", "loud"}, nil, "--log-level"},
		{"a bad log format", []string{"--log-format", "xml"}, nil, "--log-format"},
		{"a clock skew of half the lease TTL", []string{"--lease-ttl", "2s", "--max-clock-skew", "1s"}, nil, "--max-clock-skew"},
		{"an argument", []string{"extra"}, nil, "unknown command"},
		{"an unknown role", []string{"--roles", "host,gpu"}, nil, `unknown role "gpu"`},
		{"no role", []string{"--roles", ","}, nil, "--roles"},
		{"an effect kind the binary lacks", []string{"--effect-kinds", "teleport"}, nil, `"teleport"`},
		{"effect kinds without the effects role", []string{"--roles", "host", "--effect-kinds", "http.request"}, nil, "without the effects role"},
		{"a negative capacity", []string{"--capacity", "-1"}, nil, "--capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"serve", "--store", filepath.Join(dir, "o.db")}, tc.args...)
			r := runCLI(ctx, tc.env, args...)
			checkFailure(t, r, cli.ExitUsage, args)
			if !strings.Contains(r.err, tc.says) {
				t.Errorf("the error %q does not say %q", r.err, tc.says)
			}
			if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
				t.Fatalf("serve left %v behind (%v)", ents, err)
			}
		})
	}
	// A binary with neither worlds nor workflows has nothing to serve.
	var out, errOut strings.Builder
	code := cli.Run(ctx, []string{"serve", "--store", "memory"}, cli.IO{Out: &out, Err: &errOut}, nil)
	if code != cli.ExitUsage || out.String() != "" || !strings.Contains(errOut.String(), "no worlds and no workflows") {
		t.Fatalf("serve without worlds: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// A binary with workflows and no worlds serves them: a run started
// through the API completes on its node (SQLite, the default store).
func TestServeWorkflowsOnly(t *testing.T) {
	wfs, err := ledger.Workflows()
	if err != nil {
		t.Fatal(err)
	}
	s := startServeApp(t, cli.App{Workflows: wfs}, nil, "sv-wf", "--store", filepath.Join(t.TempDir(), "o.db"), "--lease-ttl", "2s")
	s.ok("run", "start", ledger.WorkflowPayout, "p-w", `{"Account":"erin","Amount":4}`, "--signal", "approved", "--signal-value", "true")
	deadline := time.Now().Add(testTimeout)
	for {
		if out := s.ok("run", "show", "p-w"); strings.Contains(out, "completed") && strings.Contains(out, "paid 4 to erin") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("p-w did not complete on a workflows-only server:\n%s", s.ok("run", "show", "p-w"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := s.stop(); code != cli.ExitOK {
		t.Fatalf("serve exited %d\nstderr: %s", code, s.err.String())
	}
}

// A process without the api role serves its probes and metrics alone, and
// says so on its first line.
func TestServeWithoutTheAPIRoleServesProbesOnly(t *testing.T) {
	s := startServe(t, nil, "sv-fx", "--store", "memory", "--lease-ttl", "2s", "--roles", "effects,timers", "--effect-kinds", "http.request")
	if !strings.Contains(s.out.String(), ", probes http://") {
		t.Fatalf("first line %q does not say it serves probes", s.out.String())
	}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusOK, "/metrics": http.StatusOK, "/v1/worlds": http.StatusNotFound} {
		if code, body := s.get(path, ""); code != want {
			t.Errorf("%s: %d, want %d: %s", path, code, want, body)
		}
	}
	if _, body := s.get("/metrics", ""); !strings.Contains(body, "orrery_worlds_unplaced 0") {
		t.Errorf("/metrics lacks orrery_worlds_unplaced:\n%s", body)
	}
	if code := s.stop(); code != cli.ExitOK {
		t.Fatalf("serve exited %d\nstderr: %s", code, s.err.String())
	}
}

// recorder is a binary's own projector: it keeps the types of the events
// it is fed, by stream.
type recorder struct {
	mu  sync.Mutex
	got map[string][]string
}

func (r *recorder) Name() string { return "app-recorder" }

func (r *recorder) Apply(_ context.Context, stream string, e event.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string][]string{}
	}
	r.got[stream] = append(r.got[stream], e.EventType)
	return nil
}

func (r *recorder) seen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.got)
}

// An App's projector is fed the events of the runs serve's node runs: a
// workflows-only binary's run that completes reaches it, up to its
// RunCompleted.
func TestServeFeedsTheAppsProjectors(t *testing.T) {
	wfs, err := ledger.Workflows()
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s := startServeApp(t, cli.App{Workflows: wfs, Projectors: []projector.Projector{rec}}, nil, "sv-pj", "--store", filepath.Join(t.TempDir(), "o.db"), "--lease-ttl", "2s")
	s.ok("run", "start", ledger.WorkflowPayout, "p-p", `{"Account":"erin","Amount":4}`, "--signal", "approved", "--signal-value", "true")
	deadline := time.Now().Add(testTimeout)
	for !strings.Contains(rec.seen(), "RunCompleted") {
		if time.Now().After(deadline) {
			t.Fatalf("the App's projector never saw p-p complete: %s\n%s", rec.seen(), s.ok("run", "show", "p-p"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := rec.seen(); !strings.Contains(got, "RunStarted") || !strings.Contains(got, "StepCompleted") {
		t.Fatalf("the App's projector saw %s: want the run's start and steps too", got)
	}
	if code := s.stop(); code != cli.ExitOK {
		t.Fatalf("serve exited %d\nstderr: %s", code, s.err.String())
	}
}
