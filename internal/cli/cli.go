// Package cli is the orrery command: `serve`, `demo`, the commands that talk
// to a server's HTTP API, and the lab's triage commands. cmd/orrery runs it
// with the example worlds; a user's binary runs it with its own worlds
// through orrery.Main, the way a Temporal worker binary embeds its
// workflows.
//
// Exit codes (stable, for scripts):
//
//	0  success
//	1  an error not named below (the server failed, a check failed)
//	2  usage: unknown command or flag, bad argument
//	3  not found (world, effect, worker)
//	4  conflict or refused state (exists, archived, paused, not retryable)
//	5  unavailable: the server cannot be reached, is not ready, or timed out
//	6  unauthenticated or forbidden
//
// An error is one line on stderr; -v adds its detail.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/plane"
)

// Exit codes; see the package doc.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitUsage       = 2
	ExitNotFound    = 3
	ExitConflict    = 4
	ExitUnavailable = 5
	ExitAuth        = 6
)

// IO is where a command reads and writes.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
	Getenv   func(string) string
}

// StdIO is the process's standard streams and environment.
func StdIO() IO { return IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv} }

// usageError marks an error as the caller's misuse (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitError carries an explicit exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// env holds the global flags every command shares.
type env struct {
	io       IO
	kernels  plane.Kernels
	addr     string
	token    string
	output   string
	verbose  bool
	insecure bool // skip TLS verification (self-signed test servers)
}

// Run runs the orrery command line with args (without the program name)
// and returns the process exit code.
func Run(ctx context.Context, args []string, stdio IO, kernels plane.Kernels) int {
	if stdio.Getenv == nil {
		stdio.Getenv = func(string) string { return "" }
	}
	e := &env{io: stdio, kernels: kernels}
	root := e.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	msg := err.Error()
	if !e.verbose {
		msg, _, _ = strings.Cut(msg, "\n")
	}
	// Scripts read one line per error, so the pointer to the usage stays
	// on it.
	if code == ExitUsage && !strings.Contains(msg, "--help") {
		path := "orrery"
		if cmd != nil {
			path = cmd.CommandPath()
		}
		if first, rest, multi := strings.Cut(msg, "\n"); multi {
			msg = first + " (see '" + path + " --help')\n" + rest
		} else {
			msg += " (see '" + path + " --help')"
		}
	}
	fmt.Fprintf(stdio.Err, "orrery: %s\n", msg)
	return code
}

func (e *env) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "orrery",
		Short: "Durable worlds: fault-tolerant, journaled actors on SQLite or PostgreSQL",
		Long: `Orrery runs durable worlds: deterministic actors whose every step is journaled,
whose side effects leave as intents and return as receipts, and which move
between machines under fenced leases when a machine dies.

Start with 'orrery demo', then 'orrery serve' and the world commands.`,
		Example: `  orrery demo                          # a narrated tour, on an embedded SQLite file
  orrery serve                         # the server on 127.0.0.1:7070 with ./orrery.db
  orrery world create alice --universe ledger.account
  orrery world send alice Deposit '{"Amount":100}' --key dep-1
  orrery world call alice Balance`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&e.addr, "addr", "", "the server's base URL (env ORRERY_ADDR; default http://127.0.0.1:7070)")
	pf.StringVar(&e.token, "token", "", "the bearer token (env ORRERY_TOKEN)")
	pf.StringVarP(&e.output, "output", "o", "table", "output format: table or json")
	pf.BoolVarP(&e.verbose, "verbose", "v", false, "print the detail of errors")
	pf.BoolVar(&e.insecure, "insecure", false, "skip TLS certificate verification (for self-signed servers)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if e.output != "table" && e.output != "json" {
			return usagef("--output must be table or json, not %q", e.output)
		}
		if e.addr == "" {
			e.addr = e.io.Getenv("ORRERY_ADDR")
		}
		if e.addr == "" {
			e.addr = "http://127.0.0.1:7070"
		}
		if e.token == "" {
			e.token = e.io.Getenv("ORRERY_TOKEN")
		}
		return nil
	}
	root.AddCommand(e.serveCommand(), e.demoCommand(), e.labCommand())
	root.AddCommand(e.apiCommands()...)
	return root
}

// args wraps cobra's positional-argument checks as usage errors.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// print writes v as indented JSON under -o json, else calls table.
func (e *env) print(v any, table func(w *tabwriter.Writer)) error {
	if e.output == "json" {
		enc := json.NewEncoder(e.io.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := tabwriter.NewWriter(e.io.Out, 0, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}

// exitCode maps an error to the exit codes of the package doc.
func exitCode(err error) int {
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	if code, ok := apiExitCode(err); ok {
		return code
	}
	if strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") ||
		strings.Contains(err.Error(), "arg(s)") {
		return ExitUsage
	}
	return ExitError
}
