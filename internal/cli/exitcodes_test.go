package cli_test

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/store"
)

func TestExitNotFound(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	r := f.fail(cli.ExitNotFound, "world", "show", "nope")
	if !strings.Contains(r.err, "not_found") || !strings.Contains(r.err, "nope") {
		t.Fatalf("the error %q does not say what was not found", r.err)
	}
	f.fail(cli.ExitNotFound, "world", "state", "nope")
	f.fail(cli.ExitNotFound, "world", "send", "nope", "ledger/Deposit", `{"Amount":1}`)
	f.fail(cli.ExitNotFound, "world", "pause", "nope")

	// -v adds the error's detail on lines of its own.
	r = f.run("world", "show", "nope", "-v")
	if r.code != cli.ExitNotFound || r.out != "" {
		t.Fatalf("world show nope -v: %s", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.err, "\n"), "\n")
	if len(lines) < 2 || lines[0] != strings.TrimSuffix(f.run("world", "show", "nope").err, "\n") || !strings.Contains(r.err, "\n  resource: world") {
		t.Fatalf("world show nope -v: the first line and then the detail, got %q", r.err)
	}
}

func TestExitUsage(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"world", "list", "--bogus"}, "unknown flag: --bogus (see 'orrery world list --help')"},
		{[]string{"world", "create", "x"}, "--universe is required"},
		{[]string{"world", "send", "alice", "ledger/Deposit", `{"Amount":`}, "is not JSON"},
		{[]string{"world", "call", "alice", "ledger/Balance", "nope"}, "is not JSON"},
		{[]string{"world", "list", "-o", "yaml"}, `--output must be table or json, not "yaml"`},
		{[]string{"world", "send", "alice"}, "accepts between 2 and 3 arg(s), received 1"},
		{[]string{"world", "show"}, "accepts 1 arg(s), received 0"},
		{[]string{"wrold", "list"}, `unknown command "wrold" for "orrery" (did you mean world?)`},
		{[]string{"world", "lst"}, `unknown command "lst" for "orrery world" (did you mean list?) (see 'orrery world --help')`},
		{[]string{"lab", "trace", "bogus"}, `unknown command "bogus" for "orrery lab trace"`},
		// The server refuses what the world has no handler for.
		{[]string{"world", "send", "alice", "ledger/Nope", "{}"}, "invalid_argument"},
		{[]string{"world", "send", "alice", "Deposit", `{"Amount":1}`}, "invalid_argument"},
		{[]string{"--addr", "ftp://x", "world", "list"}, "http"},
	} {
		r := f.fail(cli.ExitUsage, tc.args...)
		if !strings.Contains(r.err, tc.says) {
			t.Errorf("orrery %s: the error %q does not say %q", strings.Join(tc.args, " "), r.err, tc.says)
		}
	}
	// Nothing refused left anything behind.
	var ws []api.World
	f.okJSON(&ws, "world", "list")
	if len(ws) != 1 || ws[0].ID != "alice" {
		t.Fatalf("worlds after the refusals: %+v", ws)
	}
}

func TestExitConflict(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	r := f.fail(cli.ExitConflict, "world", "create", "alice", "--universe", ledger.UniverseTransfer)
	if !strings.Contains(r.err, "already_exists") {
		t.Fatalf("the error %q does not say the id is taken", r.err)
	}
	f.ok("world", "archive", "alice")
	f.fail(cli.ExitConflict, "world", "pause", "alice")
	f.fail(cli.ExitConflict, "world", "call", "alice", "ledger/Balance")
}

func TestExitAuth(t *testing.T) {
	f := newFixture(t, fixtureOptions{token: "s3cret"})
	f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	base := []string{"--addr", f.url, "world", "list"}

	r := runCLI(f.ctx, nil, base...)
	checkFailure(t, r, cli.ExitAuth, base)
	if !strings.Contains(r.err, "unauthenticated") {
		t.Fatalf("the error %q does not say the token is missing", r.err)
	}
	wrong := append(base, "--token", "guess")
	checkFailure(t, runCLI(f.ctx, nil, wrong...), cli.ExitAuth, wrong)
	checkFailure(t, runCLI(f.ctx, map[string]string{"ORRERY_TOKEN": "guess"}, base...), cli.ExitAuth, base)

	for name, r := range map[string]result{
		"--token":      runCLI(f.ctx, nil, append(base, "--token", "s3cret")...),
		"ORRERY_TOKEN": runCLI(f.ctx, map[string]string{"ORRERY_TOKEN": "s3cret"}, base...),
		// The flag wins over the environment.
		"--token over ORRERY_TOKEN": runCLI(f.ctx, map[string]string{"ORRERY_TOKEN": "guess"}, append(base, "--token", "s3cret")...),
	} {
		if r.code != cli.ExitOK || !strings.Contains(r.out, "alice") {
			t.Errorf("with %s: %s", name, r)
		}
	}
}

// closedAddr is the URL of a port nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

func TestExitUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	addr := closedAddr(t)
	args := []string{"--addr", addr, "world", "list"}
	r := runCLI(ctx, nil, args...)
	checkFailure(t, r, cli.ExitUnavailable, args)
	if !strings.Contains(r.err, "refused") {
		t.Fatalf("the error %q does not say the server is out of reach", r.err)
	}
	// ORRERY_ADDR names the server when --addr does not.
	r = runCLI(ctx, map[string]string{"ORRERY_ADDR": addr}, "workers", "list")
	checkFailure(t, r, cli.ExitUnavailable, []string{"workers", "list"})
	if !strings.Contains(r.err, strings.TrimPrefix(addr, "http://")) {
		t.Fatalf("ORRERY_ADDR was not used: %q", r.err)
	}

	f := newFixture(t, fixtureOptions{})
	if r := runCLI(ctx, map[string]string{"ORRERY_ADDR": f.url}, "workers", "list"); r.code != cli.ExitOK || !strings.Contains(r.out, "w1") {
		t.Fatalf("with ORRERY_ADDR set to the server: %s", r)
	}
}

// A call that times out is unavailable (5), and the error names the
// call's id so that it can be waited for again.
func TestCallTimeoutNamesTheCall(t *testing.T) {
	f := newFixture(t, fixtureOptions{prepare: func(ctx context.Context, st store.Store) {
		// Before any node runs: a worker that is not there holds the
		// world's lease for an hour, so no host can run it.
		if _, err := st.CreateWorld(ctx, ledger.UniverseAccount, "stuck", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Acquire(ctx, "stuck", "ghost", time.Hour); err != nil {
			t.Fatal(err)
		}
	}})
	args := []string{"world", "call", "stuck", "ledger/Balance", "--timeout", "100ms"}
	r := f.fail(cli.ExitUnavailable, args...)
	m := regexp.MustCompile(`\(wait for it again with --call-id (\S+)\)\n$`).FindStringSubmatch(r.err)
	if m == nil || !strings.Contains(r.err, "timeout") {
		t.Fatalf("the error %q does not name the call", r.err)
	}
	r = f.fail(cli.ExitUnavailable, append(args, "--call-id", m[1])...)
	if !strings.HasSuffix(r.err, "--call-id "+m[1]+")\n") {
		t.Fatalf("waiting again for %s: %q", m[1], r.err)
	}
}

// A zero IO is usable: nothing is written, and the exit code still tells.
func TestRunWithZeroIO(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, tc := range []struct {
		code int
		args []string
	}{
		{cli.ExitOK, []string{"--addr", f.url, "world", "list"}},
		{cli.ExitOK, []string{"--help"}},
		{cli.ExitNotFound, []string{"--addr", f.url, "world", "show", "nope"}},
		{cli.ExitUsage, []string{"world", "bogus"}},
	} {
		if code := cli.Run(f.ctx, tc.args, cli.IO{}, ledger.Kernels()); code != tc.code {
			t.Errorf("orrery %s with a zero IO: exit %d, want %d", strings.Join(tc.args, " "), code, tc.code)
		}
	}
}
