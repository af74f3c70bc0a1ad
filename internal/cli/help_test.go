package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/internal/cli"
)

// subcommands reads the names under "Available Commands:" in a help text.
func subcommands(help string) []string {
	_, rest, ok := strings.Cut(help, "\nAvailable Commands:\n")
	if !ok {
		return nil
	}
	var names []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		names = append(names, strings.Fields(line)[0])
	}
	return names
}

// Every command's --help, reached by walking the tree the way a user
// would, shows examples; a leaf is a command without subcommands.
func TestHelpShowsExamplesOnEveryCommand(t *testing.T) {
	ctx := context.Background()
	leaves := 0
	var walk func(path []string)
	walk = func(path []string) {
		args := append(append([]string{}, path...), "--help")
		r := runCLI(ctx, nil, args...)
		if r.code != cli.ExitOK || r.err != "" || !strings.Contains(r.out, "Usage:") {
			t.Fatalf("orrery %s: %s", strings.Join(args, " "), r)
		}
		subs := subcommands(r.out)
		if len(subs) == 0 {
			leaves++
			if !strings.Contains(r.out, "\nExamples:\n  orrery ") && !strings.Contains(r.out, "\nExamples:\n  source <(orrery") {
				t.Errorf("orrery %s has no examples:\n%s", strings.Join(path, " "), r.out)
			}
		}
		for _, s := range subs {
			walk(append(append([]string{}, path...), s))
		}
	}
	walk(nil)
	// serve, demo, help, the completion shells, the world, journal, lease,
	// effects, timers, workers and lab commands: dozens, not a handful.
	if leaves < 30 {
		t.Fatalf("the walk found %d leaf commands", leaves)
	}
}

// The root's examples run as written against a server: they name real
// universes and input types.
func TestRootExamplesRun(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	help := runCLI(f.ctx, nil, "--help").out
	_, ex, _ := strings.Cut(help, "\nExamples:\n")
	ex, _, _ = strings.Cut(ex, "\n\n")
	ran := 0
	for _, line := range strings.Split(ex, "\n") {
		words := shellWords(t, line)
		if len(words) < 2 || words[0] != "orrery" || words[1] != "world" {
			continue
		}
		f.ok(words[1:]...)
		ran++
	}
	if ran < 3 {
		t.Fatalf("ran %d world examples of:\n%s", ran, ex)
	}
	if got := f.ok("world", "call", "alice", "ledger/Balance"); got != "100\n" {
		t.Fatalf("after the examples alice has %q, want 100", got)
	}
}

// shellWords splits a command line the way sh would for the forms the
// examples use: words, single-quoted words, and a trailing # comment.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted:
			if c == '\'' {
				quoted = false
			} else {
				cur.WriteByte(c)
			}
		case c == '\'':
			quoted, in = true, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '#' && !in:
			return words
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
