package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/store"
)

// fuzzRunTimeout bounds one input's run: a --follow or a drain --wait
// waits until its context ends, which is an answer too (0 or 5).
const fuzzRunTimeout = 5 * time.Second

// fuzzExcluded reports whether an argument would make a run leave the
// sandbox: serve and demo start servers and write files (serve's default
// store and port are the working directory's and 7070), --addr would
// point the run elsewhere than the test's server, lab replay --run runs
// a shell command, and a device path may block a read forever.
func fuzzExcluded(a string) bool {
	switch {
	case a == "serve" || a == "demo":
		return true
	case strings.HasPrefix(a, "--addr") || strings.HasPrefix(a, "--run"):
		return true
	case strings.Contains(a, "/dev") || strings.Contains(a, "/proc") || strings.Contains(a, "/sys"):
		return true
	}
	return false
}

// FuzzCLIArgs: whatever the arguments (one per line of the input), a run
// against a live server returns, never panics, and exits with a code of
// the package doc.
func FuzzCLIArgs(f *testing.F) {
	fx := newFixture(f, fixtureOptions{callTimeout: 2 * time.Second, prepare: func(ctx context.Context, st store.Store) {
		if _, err := st.CreateWorld(ctx, ledger.UniverseAccount, "a", nil); err != nil {
			f.Fatal(err)
		}
	}})
	for _, seed := range []string{
		"",
		"--help",
		"help\nworld",
		"completion\nbash",
		"world\nlist",
		"world\nlist\n-o\njson",
		"world\nshow\na",
		"-v\nworld\nshow\nnope",
		"world\ncreate\nx\n--universe\nledger.account",
		"world\ncreate\na\n--universe\nledger.transfer",
		"world\nsend\na\nledger/Deposit\n{\"Amount\":1}\n--key\nk",
		"world\nsend\na\nledger/Deposit\n{\"Amount\":",
		"world\ncall\na\nledger/Balance",
		"world\ncall\na\nledger/Balance\n--timeout\n-1s",
		"world\ncall\na\nledger/Withdraw\n{\"Amount\":1e309}",
		"world\nstate\na\n-o\njson",
		"world\nfork\na\nb\n--height\n99",
		"world\npause\na\n--reason\n\x00",
		"world\nbogus",
		"-o\nyaml\nworld\nlist",
		"--token\nx\nworld\nlist",
		"journal\nread\na\n--limit\n-1",
		"journal\ntail\na\n-n\n0",
		"lease\nlist\n--worker\n",
		"effects\nlist\n--world\na",
		"effects\nretry\nzz",
		"effects\nresolve\nzz\n{}\n--status\nmaybe",
		"timers\nlist\n--world\na",
		"workers\nlist",
		"workers\ndrain\nw9",
		"lab\ntrace\ninfo\nnope.json",
		"lab\ntrace\ndiff\na\nb\nc",
		"lab\nreplay\n.",
		"\x00\n\xff",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		args := strings.Split(input, "\n")
		for _, a := range args {
			if fuzzExcluded(a) {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), fuzzRunTimeout)
		defer cancel()
		r := runCLI(ctx, nil, append([]string{"--addr", fx.url}, args...)...)
		if r.code < cli.ExitOK || r.code > cli.ExitAuth {
			t.Fatalf("orrery %q: exit %d, outside 0–6\n%s", args, r.code, r)
		}
		if r.code != cli.ExitOK && !strings.HasPrefix(r.err, "orrery: ") {
			t.Fatalf("orrery %q: exit %d without an error on stderr\n%s", args, r.code, r)
		}
	})
}
