package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
)

func durationText(ms int64, ended bool) string {
	if !ended {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func (e *env) printRuns(runs []api.Run) error {
	if runs == nil {
		runs = []api.Run{}
	}
	return printTable(e, runs, "ID\tWORKFLOW\tVERSION\tSTATUS\tSTEPS\tSTARTED\tDURATION\tLAST ERROR", func(tw io.Writer, r api.Run) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Workflow, r.Version, r.Status, r.Steps,
			ts(r.StartedAt), durationText(r.DurationMs, !r.EndedAt.IsZero()), orDash(oneLine(r.LastError)))
	})
}

// attrFlags reads --attr KEY=VALUE flags (the key ends at the first '=').
func attrFlags(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(flags))
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" || v == "" {
			return nil, usageError{fmt.Errorf("--attr must be KEY=VALUE, not %q", f)}
		}
		if _, dup := out[k]; dup {
			return nil, usageError{fmt.Errorf("--attr names %q twice", k)}
		}
		out[k] = v
	}
	return out, nil
}

// clip is a JSON value on one table cell: at most 60 characters, a
// trailing "…" saying it was cut ("-" when absent; -o json has it whole).
func clip(v json.RawMessage) string {
	if len(v) == 0 {
		return "-"
	}
	s := oneLine(string(v))
	if r := []rune(s); len(r) > 60 {
		s = string(r[:59]) + "…"
	}
	return s
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func (e *env) printRun(v api.RunView) error {
	return e.print(v, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "run\t%s\n", v.ID)
		fmt.Fprintf(tw, "workflow\t%s v%d\n", v.Workflow, v.Version)
		fmt.Fprintf(tw, "status\t%s\n", v.Status)
		if len(v.Attributes) > 0 {
			pairs := make([]string, 0, len(v.Attributes))
			for _, k := range slices.Sorted(maps.Keys(v.Attributes)) {
				pairs = append(pairs, k+"="+v.Attributes[k])
			}
			fmt.Fprintf(tw, "attributes\t%s\n", strings.Join(pairs, " "))
		}
		fmt.Fprintf(tw, "started\t%s\n", ts(v.StartedAt))
		fmt.Fprintf(tw, "ended\t%s\n", ts(v.EndedAt))
		if v.Status == "completed" {
			fmt.Fprintf(tw, "output\t%s\n", v.Output)
		}
		if v.Error != "" {
			fmt.Fprintf(tw, "error\t%s\n", oneLine(v.Error))
		}
		if len(v.Timeline) == 0 {
			return
		}
		fmt.Fprintln(tw, "\nSTEP\tATTEMPT\tSTATUS\tSTARTED\tDURATION\tINPUT\tOUTPUT\tERROR")
		for _, s := range v.Timeline {
			for _, a := range s.Attempts {
				in := a.Input
				if len(in) == 0 {
					in = a.Started
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, a.Attempt, a.Status, ts(a.StartedAt),
					durationText(a.DurationMs, !a.EndedAt.IsZero()), clip(in), clip(a.Output), orDash(oneLine(a.Error)))
			}
		}
		if len(v.Values) > 0 {
			fmt.Fprintln(tw, "\nVALUE\tPUBLISHED")
			keys := make([]string, 0, len(v.Values))
			for k := range v.Values {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\n", k, clip(v.Values[k]))
			}
		}
	})
}

func (e *env) runCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "run",
		Short: "Start, inspect, signal and control durable workflow runs",
		Long: `A workflow run is a durable execution of a Go function registered with the
binary (orrery.MainWith): each of its steps is journaled, so a run survives
crashes and resumes where it stopped. These commands talk to a running server
(orrery serve) at --addr.`,
	})
	var startOn api.StartOptions
	var sigValue string
	var startAttrs []string
	start := &cobra.Command{
		Use:   "start WORKFLOW ID [JSON]",
		Short: "Start a run (idempotent: the same workflow, id and input again is the same run)",
		Long: `start starts run ID of WORKFLOW with JSON as its input (default {}), decoded
strictly into the workflow's input type: an unknown field or a wrong type is a
usage error. Starting the same id again with the same input changes nothing;
another input under that id is a conflict (exit 4).

The run is pinned to the newest version of WORKFLOW the server carries, or to
--version N, and finishes on it. A version that no live node carries (none
advertises workflow:WORKFLOW@N) is refused with code version_not_carried
(exit 4), and nothing is started: deploy a node carrying it first.`,
		Example: `  orrery run start ledger.payout p-1 '{"Account":"alice","Amount":50}'
  orrery run start ledger.payout p-1 '{"Account":"alice","Amount":50}' --version 1
  orrery run start ledger.payout p-1 '{"Account":"alice","Amount":50}' -o json
  orrery run start ledger.payout p-2 '{"Account":"bob","Amount":5}' --queue payouts --priority 1 --partition bob
  orrery run start orders.fulfil o-7 '{"ID":"o-7"}' --signal shipped --signal-value '{"Carrier":"ups"}' --signal-key ship-o-7
  orrery run start orders.fulfil o-8 '{"ID":"o-8"}' --attr customer=c-42 --attr region=eu`,
		Args: args(cobra.RangeArgs(2, 3)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			in, err := jsonArg(a, 2)
			if err != nil {
				return err
			}
			if startOn.Attributes, err = attrFlags(startAttrs); err != nil {
				return err
			}
			if startOn.Queue == "" && (startOn.Priority != 0 || startOn.Partition != "") {
				return usageError{fmt.Errorf("--priority and --partition need --queue")}
			}
			if startOn.Signal.Name == "" && (sigValue != "" || startOn.Signal.IdempotencyKey != "") {
				return usageError{fmt.Errorf("--signal-value and --signal-key need --signal")}
			}
			if startOn.Signal.Name != "" {
				v := json.RawMessage("null")
				if sigValue != "" {
					if !json.Valid([]byte(sigValue)) {
						return usageError{fmt.Errorf("--signal-value is not JSON: %q", sigValue)}
					}
					v = json.RawMessage(sigValue)
				}
				startOn.Signal.Value = v
			}
			v, _, err := c.StartRunOn(ctx, a[0], a[1], in, startOn)
			if err != nil {
				return err
			}
			return e.printRun(v)
		}),
	}
	start.Flags().Uint64Var(&startOn.Version, "version", 0, "the workflow version to run (default: the newest the server carries)")
	start.Flags().StringVar(&startOn.Queue, "queue", "", "start the run on this named queue: it waits, queued, until admitted within the queue's limits")
	start.Flags().IntVar(&startOn.Priority, "priority", 0, "the run's priority in its queue: lower first (needs --queue)")
	start.Flags().StringVar(&startOn.Partition, "partition", "", "the run's partition key in a partitioned queue (needs --queue)")
	start.Flags().StringVar(&startOn.Signal.Name, "signal", "", "signal-with-start: also send the run this signal (a running run of WORKFLOW is only signalled)")
	start.Flags().StringVar(&sigValue, "signal-value", "", "the signal's value as JSON (needs --signal; default null)")
	start.Flags().StringArrayVar(&startAttrs, "attr", nil, "a search attribute KEY=VALUE for the run (repeat for several); run list --attr finds runs by them")
	start.Flags().StringVar(&startOn.Signal.IdempotencyKey, "signal-key", "", "the signal's idempotency key: repeated with it, the signal is sent once (needs --signal)")
	var wf, status string
	var version uint64
	var page api.ListOptions
	var listAttrs []string
	list := &cobra.Command{
		Use:   "list",
		Short: "List runs, optionally of one workflow, in one status or of one version",
		Long: `list lists runs with the version each is pinned to. --version N keeps the
runs of version N: when none of a retired version remain unfinished, nodes
may stop carrying it (see "Changing workflow code" in the docs).`,
		Example: `  orrery run list
  orrery run list --workflow ledger.payout --status running -o json
  orrery run list --workflow ledger.payout --version 1 --status running
  orrery run list --attr customer=c-42 --attr region=eu`,
		Args: args(cobra.NoArgs),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, _ []string) error {
			attrs, err := attrFlags(listAttrs)
			if err != nil {
				return err
			}
			runs, next, err := c.SearchRuns(ctx, api.RunQuery{Workflow: wf, Status: status, Version: version, Attrs: attrs, ListOptions: page})
			if err != nil {
				return err
			}
			if err := e.printRuns(runs); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(e.io.Err, "more: the next page is --after %s\n", next)
			}
			return nil
		}),
	}
	list.Flags().StringVar(&wf, "workflow", "", "only the runs of this workflow")
	list.Flags().StringVar(&status, "status", "", "only runs in this status: pending, queued, running, paused, blocked, unrunnable, completed, failed or cancelled")
	list.Flags().Uint64Var(&version, "version", 0, "only the runs pinned to this workflow version")
	list.Flags().StringArrayVar(&listAttrs, "attr", nil, "only runs carrying this search attribute KEY=VALUE (repeat: all of them)")
	listPaging(list, &page, "runs")
	show := &cobra.Command{
		Use:     "show ID",
		Short:   "Show a run: status, output or error, and each step's attempts",
		Example: "  orrery run show p-1\n  orrery run show p-1 -o json",
		Args:    args(cobra.ExactArgs(1)),
		RunE:    byID(e, (*api.Client).GetRun, e.printRun),
	}
	cmd.AddCommand(start, list, show,
		e.runControl("cancel", "Cancel a run: the step in flight stops and the run ends cancelled",
			func(c *api.Client) func(context.Context, string, string) (api.RunView, error) { return c.CancelRun }),
		e.runControl("pause", "Pause a run: it stops where it is until resumed",
			func(c *api.Client) func(context.Context, string, string) (api.RunView, error) { return c.PauseRun }),
		e.runControl("resume", "Resume a paused run from its journaled steps",
			func(c *api.Client) func(context.Context, string, string) (api.RunView, error) { return c.ResumeRun }),
		e.runTerminate(), e.runReset(), e.runSignal(), e.runQuery())
	return cmd
}

// heldRunHelp is what terminate and reset say of the runs they are for.
const heldRunHelp = `A run is held "blocked" when the code a worker carries no longer asks for
the steps the run recorded (a divergence: "orrery run show ID" says at which
step), and "unrunnable" when no live worker carries its version. Either waits
for code that fits, or for the operator. The run must be free of workers (a
blocked run is): one a worker holds right now is refused (exit 4): cancel or
pause it first. A run that has ended is refused too (exit 4).`

func (e *env) runTerminate() *cobra.Command {
	cmd := e.runControl("terminate", "End a blocked or unrunnable run for good: it fails \"terminated: REASON\"",
		func(c *api.Client) func(context.Context, string, string) (api.RunView, error) { return c.TerminateRun })
	cmd.Long = `terminate ends run ID for good: it fails with the error "terminated: REASON"
("terminated" without --reason), recorded by the server under its own lease,
so no worker carrying the run's code is needed. It is the way out for a run
nothing will take on.

` + heldRunHelp
	cmd.Example = `  orrery run terminate p-1 --reason 'v2 withdrawn'
  orrery run list --status blocked
  orrery run terminate p-1 -o json`
	return cmd
}

func (e *env) runReset() *cobra.Command {
	var reason string
	var step int
	cmd := &cobra.Command{
		Use:   "reset ID --step N",
		Short: "Reset a blocked run to step N: the next worker re-runs it from there with its code",
		Long: `reset discards run ID's steps at and after step N (0 the first) for replay,
so the next worker re-runs the run's function from there with the code it
carries: the way on for a blocked run when neither rolling the code back nor a
Patched fix is possible. Reset to the step the divergence names, a run goes on
under the new code; the steps it already took before N are not run again. The
discarded steps stay in the journal for the record, and a step re-run after
the reset continues its attempt numbers. --step is required; a negative step or
one past the steps the run recorded is a usage error (exit 2).

` + heldRunHelp,
		Example: `  orrery run show p-1          # error: blocked: divergent at step 1: recorded "screen", got ...
  orrery run reset p-1 --step 1 --reason 'screen step removed in v1.4'
  orrery run reset p-1 --step 0 -o json`,
		Args: args(cobra.ExactArgs(1)),
	}
	cmd.RunE = e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
		if !cmd.Flags().Changed("step") {
			return usageError{fmt.Errorf("--step is required: the index of the first step to re-run (0 the first)")}
		}
		v, err := c.ResetRun(ctx, a[0], step, reason)
		if err != nil {
			return err
		}
		return e.printRun(v)
	})
	cmd.Flags().IntVar(&step, "step", 0, "the index of the first step to re-run (0 the first; required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the run's record")
	return cmd
}

func (e *env) runControl(name, short string, op func(*api.Client) func(context.Context, string, string) (api.RunView, error)) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:     name + " ID",
		Short:   short,
		Example: fmt.Sprintf("  orrery run %s p-1 --reason 'operator request'", name),
		Args:    args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			v, err := op(c)(ctx, a[0], reason)
			if err != nil {
				return err
			}
			return e.printRun(v)
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the run's record")
	return cmd
}

func (e *env) runQuery() *cobra.Command {
	return &cobra.Command{
		Use:   "query ID NAME",
		Short: "Ask a run's query (workflow.OnQuery): answered from a replay of its journal, nothing written",
		Long: `query asks run ID the query NAME its workflow registered with workflow.OnQuery.
The server replays the run's function against its journal, up to where the
journal ends, and the handler answers from that state: the run is neither
written to nor disturbed, whichever node holds it, and an ended run answers
too. A NAME the run has not registered is not found (exit 3).`,
		Example: "  orrery run query p-1 stage\n  orrery run query p-1 stage -o json",
		Args:    args(cobra.ExactArgs(2)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			v, err := c.QueryRun(ctx, a[0], a[1])
			if err != nil {
				return err
			}
			if e.output == "json" {
				return e.print(map[string]json.RawMessage{"value": v}, nil)
			}
			fmt.Fprintf(e.io.Out, "%s\n", v)
			return nil
		}),
	}
}

func (e *env) runSignal() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "signal ID NAME [JSON]",
		Short: "Send a signal (a JSON value, default null) to a run, for its Await of NAME",
		Example: `  orrery run signal p-1 approved true --key approve-p-1
  orrery run signal p-1 note '{"By":"alice"}'`,
		Args: args(cobra.RangeArgs(2, 3)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			v := json.RawMessage("null")
			if len(a) > 2 {
				var err error
				if v, err = jsonArg(a, 2); err != nil {
					return err
				}
			}
			if err := c.SignalRun(ctx, a[0], a[1], v, key); err != nil {
				return err
			}
			if e.output == "json" {
				return e.print(map[string]string{"status": "accepted"}, nil)
			}
			fmt.Fprintf(e.io.Out, "signal %s sent to %s\n", a[1], a[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&key, "key", "", "idempotency key: a retry with the same key is delivered once")
	return cmd
}

// auditTime reads --from and --to: an RFC 3339 time, "now", or a duration
// relative to now on this machine's clock ("-1h", "-30m"). The window is
// compared with the store's clock, so the two should agree.
func auditTime(flag, v string, now time.Time) (time.Time, error) {
	if v == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(d), nil
	}
	return time.Time{}, usagef("--%s %q is neither an RFC 3339 time, now, nor a duration like -1h", flag, v)
}

func (e *env) journalAudit() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "audit ID --from T --to T",
		Short: "List the events of a stream (a run or a world) written in a time window",
		Long: `audit lists the events of stream ID (a workflow run or a world's journal) whose
persistedAt, the store's clock at the write, is in [--from, --to), in runSeq
order. A time is RFC 3339, "now", or a duration relative to now such as -1h.`,
		Example: `  orrery journal audit p-1 --from -1h
  orrery journal audit p-1 --from 2026-01-02T15:00:00Z --to 2026-01-02T16:00:00Z -o json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			now := time.Now()
			f, err := auditTime("from", from, now)
			if err != nil {
				return err
			}
			t, err := auditTime("to", to, now)
			if err != nil {
				return err
			}
			evs, err := c.Audit(ctx, a[0], f, t)
			if err != nil {
				return err
			}
			if evs == nil {
				evs = []api.AuditEvent{}
			}
			return printTable(e, evs, "SEQ\tPERSISTED\tTYPE\tSTEP\tATTEMPT\tPAYLOAD", func(tw io.Writer, ev api.AuditEvent) {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", ev.RunSeq, ts(ev.PersistedAt), ev.EventType,
					orDash(ev.StepID), ev.LogicalAttemptID, truncateText(string(ev.Payload), 80))
			})
		}),
	}
	cmd.Flags().StringVar(&from, "from", "-1h", "start of the window (inclusive)")
	cmd.Flags().StringVar(&to, "to", "now", "end of the window (exclusive)")
	return cmd
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
