package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// testTimeout bounds every wait of a test: nothing here sleeps for a fixed
// time, so this is only the limit past which a test is declared stuck.
const testTimeout = 2 * time.Minute

// URLs the audit adapter recognises in an account's AuditURL.
const (
	auditHang = "https://audit.test/hang" // never answers: the effect stays in flight
	auditFail = "https://audit.test/fail" // a permanent failure: an error receipt
	auditOK   = "https://audit.test/ok"   // 204
)

// auditAdapter serves http.request in place of the network, by URL.
type auditAdapter struct{}

func (auditAdapter) Kinds() []string { return []string{world.KindHTTPRequest} }

func (auditAdapter) Execute(ctx context.Context, item vocab.EffectItem) (effect.Result, error) {
	req, err := adapter.DecodeHTTPRequest(item.Params)
	if err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	switch req.URL {
	case auditHang:
		// Until the pool stops: an operator's receipt is what completes it.
		<-ctx.Done()
		return effect.Result{}, ctx.Err()
	case auditFail:
		return effect.Result{}, effect.Permanent(errAuditDown)
	}
	return effect.OK(world.HTTPResponse{Status: 204}), nil
}

type auditError string

func (e auditError) Error() string { return string(e) }

const errAuditDown = auditError("the audit service is down")

// fixtureOptions shape a fixture.
type fixtureOptions struct {
	token       string
	workers     []string // nil: one, "w1"
	callTimeout time.Duration
	// prepare runs on the store before any node starts.
	prepare func(ctx context.Context, st store.Store)
}

// fixture is a live in-process server: a memstore, one node per worker
// (the API is served by the first), and the API on httptest.
type fixture struct {
	t     testing.TB
	ctx   context.Context
	st    *memstore.Store
	nodes []*node.Node
	url   string
	token string
}

func newFixture(t testing.TB, o fixtureOptions) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, st: memstore.New(), token: o.token}
	if o.prepare != nil {
		o.prepare(ctx, f.st)
	}
	workers := o.workers
	if workers == nil {
		workers = []string{"w1"}
	}
	wfs, err := ledger.Workflows()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		n, err := node.Start(ctx, node.Config{
			Workflows: wfs,
			// The orchestrator places a new world at its next pass, which a
			// heartbeat (every third of the TTL) starts: a short TTL keeps a
			// world's first call quick.
			Worker: w, Store: f.st, Kernels: ledger.Kernels(), LeaseTTL: 2 * time.Second, IdleAfter: -1,
			Adapters: []adapter.Registration{adapter.Register(auditAdapter{}, adapter.NoRetry())},
			// A snapshot at every height, so that any world can be forked.
			Host: func(hc *plane.HostConfig) { hc.SnapshotEvery = 1 },
		})
		if err != nil {
			t.Fatal(err)
		}
		f.nodes = append(f.nodes, n)
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			if err := n.Stop(sctx); err != nil {
				t.Errorf("stopping node %s: %v", w, err)
			}
		})
	}
	// A node's first heartbeat comes from its own loop, after Start: wait
	// for every worker to be listed, so that a test reading the workers
	// does not race a loaded machine's scheduler.
	for {
		ws, err := f.st.ListWorkers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed := 0
		for _, w := range ws {
			if slices.Contains(workers, w.ID) {
				listed++
			}
		}
		if listed == len(workers) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the workers %v were never listed: %v", workers, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	n := f.nodes[0]
	srv, err := api.NewServer(api.Config{
		Store: f.st, Ops: n.Ops(), Client: n.Client(), Kernels: ledger.Kernels(),
		Token: o.token, CallTimeout: o.callTimeout, Ready: n.Ready,
		Runs: &api.RunsBackend{Client: n.Runs(), Workflows: wfs, Runs: n.RunsView().Runs,
			Timeline: n.RunsView().Timeline, CatchUp: n.RunsView().CatchUp},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	f.url = hs.URL
	return f
}

// result is what one cli.Run produced.
type result struct {
	code     int
	out, err string
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err
}

// runCLI runs the command line with env as its environment.
func runCLI(ctx context.Context, env map[string]string, args ...string) result {
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, args, cli.IO{Out: &out, Err: &errOut, Getenv: func(k string) string { return env[k] }}, ledger.Kernels())
	return result{code: code, out: out.String(), err: errOut.String()}
}

// run runs a command against the fixture's server, presenting its token.
func (f *fixture) run(args ...string) result {
	full := append([]string{"--addr", f.url}, args...)
	if f.token != "" {
		full = append(full, "--token", f.token)
	}
	return runCLI(f.ctx, nil, full...)
}

// ok runs a command that must succeed and returns its output.
func (f *fixture) ok(args ...string) string {
	f.t.Helper()
	r := f.run(args...)
	if r.code != cli.ExitOK || r.err != "" {
		f.t.Fatalf("orrery %s: %s", strings.Join(args, " "), r)
	}
	return r.out
}

// fail runs a command that must exit with code and checks that its error
// is one line on stderr and nothing on stdout.
func (f *fixture) fail(code int, args ...string) result {
	f.t.Helper()
	r := f.run(args...)
	checkFailure(f.t, r, code, args)
	return r
}

func checkFailure(t testing.TB, r result, code int, args []string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("orrery %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	if r.out != "" {
		t.Errorf("orrery %s: a failure printed on stdout: %q", strings.Join(args, " "), r.out)
	}
	if !strings.HasPrefix(r.err, "orrery: ") || strings.Count(r.err, "\n") != 1 || !strings.HasSuffix(r.err, "\n") {
		t.Errorf("orrery %s: the error is not one line on stderr: %q", strings.Join(args, " "), r.err)
	}
}

// okJSON runs a command with -o json and decodes its output into v.
func (f *fixture) okJSON(v any, args ...string) {
	f.t.Helper()
	out := f.ok(append(args, "-o", "json")...)
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		f.t.Fatalf("orrery %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
	if dec.More() {
		f.t.Fatalf("orrery %s -o json: more than one JSON value\n%s", strings.Join(args, " "), out)
	}
}

// eventually polls cond until it holds, bounded by the fixture's context.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-f.ctx.Done():
			f.t.Fatalf("%s: %v", what, f.ctx.Err())
		case <-tick.C:
		}
	}
}

// rows splits table output into lines of whitespace-separated cells.
func rows(out string) [][]string {
	var rs [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rs = append(rs, strings.Fields(line))
	}
	return rs
}

// row returns the first row of table output whose first cell is key.
func row(t testing.TB, out, key string) []string {
	t.Helper()
	for _, r := range rows(out) {
		if len(r) > 0 && r[0] == key {
			return r
		}
	}
	t.Fatalf("no row %q in\n%s", key, out)
	return nil
}

// hasPrefix reports whether cells begins with want.
func hasPrefix(cells []string, want ...string) bool {
	if len(cells) < len(want) {
		return false
	}
	for i, w := range want {
		if cells[i] != w {
			return false
		}
	}
	return true
}

// syncBuffer is an io.Writer safe for a command running in another
// goroutine; waitFor blocks until its content satisfies a condition.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{})} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor returns the content once cond holds for it, or fails t when ctx
// ends first.
func (b *syncBuffer) waitFor(ctx context.Context, t testing.TB, what string, cond func(string) bool) string {
	t.Helper()
	for {
		b.mu.Lock()
		s, changed := b.buf.String(), b.changed
		b.mu.Unlock()
		if cond(s) {
			return s
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; so far:\n%s", what, ctx.Err(), s)
		}
	}
}
