// Package cli is the orrery command: `serve`, `demo`, `migrate` (a store
// copied into another and verified, plane/migrate), `backup` and `restore`
// (plane/backup: an online backup, a restore that holds the effects the
// backup left open), the commands that talk
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
//	4  conflict or refused state (exists, archived, paused, not retryable, journal compacted)
//	5  unavailable: the server cannot be reached, is not ready, or timed out
//	6  unauthenticated or forbidden
//	7  serve: superseded (another process took over its worker id) or retired;
//	   a supervisor should not restart it (systemd: RestartPreventExitStatus=7)
//	8  overloaded: the server refused the input past a bound (429) and wrote
//	   nothing; retry the same command (same key or call id) after a wait
//
// An error is one line on stderr; -v adds its detail. Under -o json it is
// one JSON line on stderr instead ({"error":{...}}, see JSONError).
//
// Settings: every global flag, and every flag of serve, has an ORRERY_*
// environment variable and a key in the --config TOML file; a flag wins
// over the variable, the variable over the file (see config.go).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
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
	ExitSuperseded  = 7
	ExitOverloaded  = 8
)

// IO is where a command reads and writes; a nil Out or Err discards, a
// nil Getenv sees an empty environment.
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
	io      IO
	kernels plane.Kernels
	// workflows are the binary's durable workflows (nil: none).
	workflows *workflow.Workflows
	addr      string
	token     string
	output    string
	verbose   bool
	insecure  bool // skip TLS verification (self-signed test servers)
	config    string
	// serveCmd is `serve`: its flags are settings a --config file may
	// hold even when another command runs.
	serveCmd *cobra.Command
	// transport is this run's own, so that a Run embedded in a longer
	// process leaves no idle connection (and its goroutines) behind.
	transport *http.Transport

	// The binary's effect adapters, http.request settings and retry
	// policies by kind, which serve runs (App).
	adapters   []adapter.Registration
	httpConfig adapter.HTTPConfig
	retry      map[string]adapter.RetryPolicy
	projectors []projector.Projector
}

// App is what a binary serves: its worlds by universe and, optionally, its
// durable workflows (nil: none), which `serve` runs beside the worlds.
type App struct {
	Kernels   plane.Kernels
	Workflows *workflow.Workflows
	// Adapters, HTTP and Retry are the binary's effect adapters, the
	// built-in http.request adapter's settings and retry policies by kind:
	// serve's node runs them (node.Config's fields of the same names).
	Adapters []adapter.Registration
	HTTP     adapter.HTTPConfig
	Retry    map[string]adapter.RetryPolicy
	// Projectors read the workflow runs serve's node runs
	// (node.Config.Projectors).
	Projectors []projector.Projector
}

// Run runs the orrery command line with args (without the program name)
// and returns the process exit code.
func Run(ctx context.Context, args []string, stdio IO, kernels plane.Kernels) int {
	return RunApp(ctx, args, stdio, App{Kernels: kernels})
}

// RunApp is Run for a binary that serves workflows too.
func RunApp(ctx context.Context, args []string, stdio IO, app App) int {
	if stdio.Getenv == nil {
		stdio.Getenv = func(string) string { return "" }
	}
	// A zero IO runs silently rather than panicking on its first line.
	if stdio.Out == nil {
		stdio.Out = io.Discard
	}
	if stdio.Err == nil {
		stdio.Err = io.Discard
	}
	e := &env{io: stdio, kernels: app.Kernels, workflows: app.Workflows,
		adapters: app.Adapters, httpConfig: app.HTTP, retry: app.Retry, projectors: app.Projectors}
	defer e.closeIdle()
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
	if e.jsonErrors(cmd) {
		e.printJSONError(cmd, err, code)
		return code
	}
	msg := err.Error()
	// cobra lists its suggestions on lines of their own; they belong on
	// the error's one line.
	if first, sugg, ok := strings.Cut(msg, "\n\nDid you mean this?\n"); ok {
		msg = first + " (did you mean " + strings.Join(strings.Fields(sugg), " or ") + "?)"
	}
	if e.verbose {
		msg += details(err)
	} else {
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
  orrery world send alice ledger/Deposit '{"Amount":100}' --key dep-1
  orrery world call alice ledger/Balance`,
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
	pf.StringVar(&e.config, "config", "", "a TOML file of settings, keyed by flag name (env ORRERY_CONFIG; see docs/orrery.example.toml)")
	e.serveCmd = e.serveCommand()
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := e.layer(root, cmd); err != nil {
			return err
		}
		if e.output != "table" && e.output != "json" {
			return usagef("--output must be table or json, not %q", e.output)
		}
		if e.addr == "" {
			e.addr = "http://127.0.0.1:7070"
		}
		return nil
	}
	root.AddCommand(e.serveCmd, e.demoCommand(), e.labCommand(), e.migrateCommand(), e.backupCommand(), e.restoreCommand())
	root.AddCommand(e.apiCommands()...)
	// cobra adds these two when the command runs; adding them now lets
	// them carry examples like every other command.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  orrery help world send"
		case "completion":
			c.Example = "  source <(orrery completion bash)"
			for _, sh := range c.Commands() {
				sh.Example = completionExample(sh.Name())
			}
		}
	}
	return root
}

// completionExample shows how shell loads the completion script.
func completionExample(shell string) string {
	switch shell {
	case "bash":
		return "  source <(orrery completion bash)\n  orrery completion bash > /etc/bash_completion.d/orrery"
	case "zsh":
		return "  orrery completion zsh > \"${fpath[1]}/_orrery\""
	case "fish":
		return "  orrery completion fish | source\n  orrery completion fish > ~/.config/fish/completions/orrery.fish"
	case "powershell":
		return "  orrery completion powershell | Out-String | Invoke-Expression"
	}
	return "  orrery completion " + shell
}

// group makes cmd a command that only holds subcommands. Alone it prints
// its help; an argument that names none of its subcommands is a usage
// error, where cobra would print the help and succeed, hiding a typo from
// a script.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it sets on the root only
	cmd.RunE = func(c *cobra.Command, a []string) error {
		if len(a) == 0 {
			return c.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", a[0], c.CommandPath())
		if s := c.SuggestionsFor(a[0]); len(s) > 0 {
			msg += " (did you mean " + strings.Join(s, " or ") + "?)"
		}
		return usageError{errors.New(msg)}
	}
	return cmd
}

// details renders what an API error carries beyond its message (which
// world, which call), for -v.
func details(err error) string {
	var ae *api.Error
	if !errors.As(err, &ae) || len(ae.Details) == 0 {
		return ""
	}
	keys := make([]string, 0, len(ae.Details))
	for k := range ae.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s: %v", k, ae.Details[k])
	}
	return b.String()
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
	if errors.As(err, &ue) || errors.Is(err, ErrConfig) {
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
