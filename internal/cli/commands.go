package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// apiExitCode maps the API's typed errors (and a server out of reach) to
// the package doc's exit codes.
func apiExitCode(err error) (int, bool) {
	var ae *api.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case api.CodeInvalidArgument, api.CodeTooLarge, api.CodeUnsupportedMedia, api.CodeMethodNotAllowed:
			return ExitUsage, true
		case api.CodeNotFound:
			return ExitNotFound, true
		case api.CodeAlreadyExists, api.CodeConflict, api.CodePaused, api.CodeArchived, api.CodeFenced,
			api.CodeNotRetryable, api.CodeEffectEnded, api.CodeReplyUnavailable, api.CodeFinished, api.CodeCompacted,
			api.CodeVersionNotCarried:
			return ExitConflict, true
		case api.CodeUnavailable, api.CodeNotReady, api.CodeTimeout:
			return ExitUnavailable, true
		case api.CodeUnauthenticated, "forbidden":
			return ExitAuth, true
		case api.CodeOverloaded:
			return ExitOverloaded, true
		}
		return ExitError, true
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return ExitUnavailable, true
	}
	return 0, false
}

// client returns the API client the global flags describe.
func (e *env) client() (*api.Client, error) {
	if e.transport == nil {
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			e.transport = dt.Clone()
		} else {
			e.transport = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		if e.insecure {
			e.transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked for it
		}
	}
	c, err := api.NewClient(e.addr, e.token, api.WithHTTPClient(&http.Client{Transport: e.transport}))
	if err != nil {
		return nil, usageError{err}
	}
	return c, nil
}

// closeIdle closes the run's connections once its command is done.
func (e *env) closeIdle() {
	if e.transport != nil {
		e.transport.CloseIdleConnections()
	}
}

// withClient adapts a command body that needs a client.
func (e *env) withClient(run func(ctx context.Context, c *api.Client, a []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, a []string) error {
		c, err := e.client()
		if err != nil {
			return err
		}
		return run(cmd.Context(), c, a)
	}
}

// jsonArg parses an optional JSON argument (default {}).
func jsonArg(a []string, i int) (json.RawMessage, error) {
	if len(a) <= i {
		return json.RawMessage(`{}`), nil
	}
	if !json.Valid([]byte(a[i])) {
		return nil, usagef("the value %q is not JSON (quote it for the shell: '{\"Amount\":100}')", a[i])
	}
	return json.RawMessage(a[i]), nil
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func (e *env) apiCommands() []*cobra.Command {
	return []*cobra.Command{e.worldCommand(), e.journalCommand(), e.leaseCommand(), e.effectsCommand(),
		e.timersCommand(), e.workersCommand(), e.runCommand(), e.queueCommand(), e.scheduleCommand()}
}

func (e *env) printWorld(w api.World) error {
	return e.print(w, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "ID\tUNIVERSE\tSTATUS\tREASON\tCREATED\tPARENT")
		parent := "-"
		if w.Lineage != nil {
			parent = fmt.Sprintf("%s@%d", w.Lineage.Parent, w.Lineage.ForkedAtHeight)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Universe, w.Status, orDash(w.StatusReason), ts(w.CreatedAt), parent)
	})
}

// listTable is the RunE of a list command: it fetches the rows and prints
// them as JSON with -o json, else as a table under header, one line a row.
func listTable[T any](e *env, fetch func(context.Context, *api.Client) ([]T, error), header string, line func(io.Writer, T)) func(*cobra.Command, []string) error {
	return e.withClient(func(ctx context.Context, c *api.Client, _ []string) error {
		rows, err := fetch(ctx, c)
		if err != nil {
			return err
		}
		return printTable(e, rows, header, line)
	})
}

// pagedTable is listTable for a paged list: under a full page it tells,
// on stderr so that -o json stays the rows alone, which --after reads the
// next.
func pagedTable[T any](e *env, fetch func(context.Context, *api.Client) ([]T, string, error), header string, line func(io.Writer, T)) func(*cobra.Command, []string) error {
	return e.withClient(func(ctx context.Context, c *api.Client, _ []string) error {
		rows, next, err := fetch(ctx, c)
		if err != nil {
			return err
		}
		if err := printTable(e, rows, header, line); err != nil {
			return err
		}
		if next != "" {
			fmt.Fprintf(e.io.Err, "more: the next page is --after %s\n", next)
		}
		return nil
	})
}

// listPaging adds the search and paging flags of a list by id.
func listPaging(cmd *cobra.Command, o *api.ListOptions, what string) {
	cmd.Flags().StringVar(&o.Search, "search", "", "only "+what+" whose id contains this (any case)")
	cmd.Flags().StringVar(&o.Prefix, "prefix", "", "only "+what+" whose id starts with this")
	cmd.Flags().StringVar(&o.After, "after", "", "the page after this cursor (printed under a full page)")
	cmd.Flags().IntVar(&o.Limit, "limit", 0, what+" a page (default and most 1000)")
}

// when is a time as ts shows it and how long ago (or ahead) it is.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return ts(t) + " (" + relative(time.Since(t)) + ")"
}

// relative says d ago, or in -d when d is negative, in its largest unit.
func relative(d time.Duration) string {
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// byID is the RunE of a command on one ID: it fetches the thing with get
// and prints it with show.
func byID[T any](e *env, get func(*api.Client, context.Context, string) (T, error), show func(T) error) func(*cobra.Command, []string) error {
	return e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
		v, err := get(c, ctx, a[0])
		if err != nil {
			return err
		}
		return show(v)
	})
}

// printTable prints rows as JSON with -o json, else as a table under
// header, one line a row.
func printTable[T any](e *env, rows []T, header string, line func(io.Writer, T)) error {
	return e.print(rows, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, header)
		for _, x := range rows {
			line(tw, x)
		}
	})
}

// printAck prints v, the acknowledgement of an inbox item at seq: as JSON
// with -o json, else as a line saying what was done and, for a duplicate,
// dupNote.
func (e *env) printAck(v any, what string, seq uint64, duplicate bool, dupNote string) error {
	return e.print(v, func(tw *tabwriter.Writer) {
		dup := ""
		if duplicate {
			dup = " (" + dupNote + ")"
		}
		fmt.Fprintf(tw, "%s at inbox seq %d%s\n", what, seq, dup)
	})
}

func (e *env) worldCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "world",
		Short: "Create, inspect, message and manage worlds",
		Long: `A world is a durable actor: typed state changed only by its handlers, one input
at a time, every step journaled. These commands talk to a running server
(orrery serve) at --addr.`,
	})
	var universe string
	create := &cobra.Command{
		Use:   "create ID --universe U",
		Short: "Create a world (idempotent: the same id and universe again is a no-op)",
		Example: `  orrery world create alice --universe ledger.account
  orrery world create t-1 --universe ledger.transfer -o json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			if universe == "" {
				return usagef("--universe is required")
			}
			w, _, err := c.CreateWorld(ctx, a[0], universe)
			if err != nil {
				return err
			}
			return e.printWorld(w)
		}),
	}
	create.Flags().StringVar(&universe, "universe", "", "the world's definition (see 'orrery world list')")

	var listUniverse, listStatus string
	var worldPage api.ListOptions
	list := &cobra.Command{
		Use:     "list",
		Short:   "List worlds, searched by id and filtered by universe and status, a page at a time",
		Example: "  orrery world list\n  orrery world list --universe ledger.account --status paused\n  orrery world list --search alice --limit 20",
		Args:    args(cobra.NoArgs),
		RunE: pagedTable(e, func(ctx context.Context, c *api.Client) ([]api.World, string, error) {
			return c.SearchWorlds(ctx, api.WorldQuery{Universe: listUniverse, Status: store.WorldStatus(listStatus), ListOptions: worldPage})
		},
			"ID\tUNIVERSE\tSTATUS\tCREATED\tPARENT", func(tw io.Writer, w api.World) {
				parent := "-"
				if w.Lineage != nil {
					parent = fmt.Sprintf("%s@%d", w.Lineage.Parent, w.Lineage.ForkedAtHeight)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", w.ID, w.Universe, w.Status, ts(w.CreatedAt), parent)
			}),
	}
	list.Flags().StringVar(&listUniverse, "universe", "", "only this universe")
	list.Flags().StringVar(&listStatus, "status", "", "only this status: active, paused or archived")
	listPaging(list, &worldPage, "worlds")

	show := &cobra.Command{
		Use:     "show ID",
		Short:   "Show a world: status, lease holder and epoch, placement, journal head, lineage",
		Example: "  orrery world show alice",
		Args:    args(cobra.ExactArgs(1)),
		RunE: byID(e, (*api.Client).GetWorld, func(v api.WorldView) error {
			return e.print(v, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "id\t%s\nuniverse\t%s\nstatus\t%s\n", v.ID, v.Universe, v.Status)
				if v.StatusReason != "" {
					fmt.Fprintf(tw, "reason\t%s (%s)\n", v.StatusReason, ts(v.StatusChangedAt))
				}
				fmt.Fprintf(tw, "head\t%d\n", v.Head)
				fmt.Fprintf(tw, "version\t%s\n", versionText(v.Version))
				if v.PendingUpgrade != 0 {
					fmt.Fprintf(tw, "upgrade pending\tto version %d\n", v.PendingUpgrade)
				}
				if v.InboxCursor != nil {
					fmt.Fprintf(tw, "inbox cursor\t%d\n", *v.InboxCursor)
				}
				if v.Lease != nil {
					fmt.Fprintf(tw, "lease\t%s epoch %d until %s\n", orDash(v.Lease.Holder), v.Lease.Epoch, ts(v.Lease.ExpiresAt))
				} else {
					fmt.Fprintln(tw, "lease\t-")
				}
				if v.Assignment != nil {
					fmt.Fprintf(tw, "placed on\t%s (%s)\n", v.Assignment.Worker, v.Assignment.Reason)
				}
				if v.Lineage != nil {
					fmt.Fprintf(tw, "forked from\t%s at height %d\n", v.Lineage.Parent, v.Lineage.ForkedAtHeight)
				}
				fmt.Fprintf(tw, "created\t%s\n", ts(v.CreatedAt))
			})
		}),
	}

	var key string
	send := &cobra.Command{
		Use:   "send ID TYPE [JSON]",
		Short: "Send an event; acknowledged once it is durable in the world's inbox",
		Long: `send enqueues an event of TYPE (the handler's input type name) carrying the JSON
value into the world's inbox. With --key, a repeat of the same key is
acknowledged with the first event's seq and enqueues nothing.`,
		Example: `  orrery world send alice ledger/Deposit '{"Amount":100,"Ref":"dep-1"}' --key dep-1`,
		Args:    args(cobra.RangeArgs(2, 3)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			v, err := jsonArg(a, 2)
			if err != nil {
				return err
			}
			ack, err := c.Send(ctx, a[0], a[1], v, key)
			if err != nil {
				return err
			}
			return e.printAck(ack, "enqueued", ack.Seq, ack.Duplicate, "duplicate key: the first event's seq")
		}),
	}
	send.Flags().StringVar(&key, "key", "", "idempotency key")

	var callID string
	var timeout time.Duration
	call := &cobra.Command{
		Use:   "call ID TYPE [JSON]",
		Short: "Call a world and print its handler's reply (applied, journaled, returned)",
		Long: `call sends an input and waits for the handler's reply. If the wait times out,
run it again with the printed --call-id: the retry waits for the same call,
which the world runs once.`,
		Example: `  orrery world call alice ledger/Balance
  orrery world call t-1 ledger/Status -o json`,
		Args: args(cobra.RangeArgs(2, 3)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			v, err := jsonArg(a, 2)
			if err != nil {
				return err
			}
			res, err := c.Call(ctx, a[0], a[1], v, api.CallOptions{CallID: callID, Timeout: timeout})
			if err != nil {
				// The call may still run: say how to keep waiting for
				// it, which only the call's id allows.
				var ae *api.Error
				if errors.As(err, &ae) && ae.Code == api.CodeTimeout {
					if id, ok := ae.Details["call_id"].(string); ok && id != "" {
						return fmt.Errorf("%w (wait for it again with --call-id %s)", err, id)
					}
				}
				return err
			}
			if e.output == "json" {
				return e.print(res, nil)
			}
			_, err = fmt.Fprintln(e.io.Out, string(res.Reply))
			return err
		}),
	}
	call.Flags().StringVar(&callID, "call-id", "", "the call's id (reuse it to wait for a call made before)")
	call.Flags().DurationVar(&timeout, "timeout", 0, "how long to wait for the reply (default: the server's)")

	var height uint64
	fork := &cobra.Command{
		Use:   "fork SRC NEW",
		Short: "Fork a world at any height of its journal into a new world",
		Long: `fork creates NEW from SRC's state at --height (default: SRC's latest
snapshot): its snapshot at that height when it has one, else its state
replayed up to it (see world state --at). NEW starts at exactly that state,
with SRC's pending effects and timers left with SRC, and records its
lineage.`,
		Example: "  orrery world fork bob bob-what-if\n  orrery world fork bob bob-before-42 --height 41",
		Args:    args(cobra.ExactArgs(2)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			w, _, err := c.Fork(ctx, a[0], a[1], height)
			if err != nil {
				return err
			}
			return e.printWorld(w)
		}),
	}
	fork.Flags().Uint64Var(&height, "height", 0, "the height to fork at (0: the latest snapshot)")

	var at uint64
	var atGiven func() bool
	state := &cobra.Command{
		Use:   "state ID [--at HEIGHT]",
		Short: "Print a world's state at its journal head or at a past height, as JSON",
		Long: `state prints a world's state as JSON: at its journal head, or with --at the
state right after the step at that height (0: the initial state), replayed
from the nearest snapshot at or below it. A height above the head is an
invalid argument; one whose journal is compacted cannot be derived again
(the error says up to which height records are gone).`,
		Example: "  orrery world state alice\n  orrery world state alice --at 42",
		Args:    args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			var s api.State
			var err error
			if atGiven() {
				s, err = c.StateAt(ctx, a[0], at)
			} else {
				s, err = c.State(ctx, a[0])
			}
			if err != nil {
				return err
			}
			if e.output == "json" {
				return e.print(s, nil)
			}
			fmt.Fprintf(e.io.Out, "# height %d, state hash %s\n", s.Height, s.Hash)
			var pretty any
			if json.Unmarshal(s.State, &pretty) == nil {
				b, _ := json.MarshalIndent(pretty, "", "  ")
				_, err = fmt.Fprintln(e.io.Out, string(b))
				return err
			}
			_, err = fmt.Fprintln(e.io.Out, string(s.State))
			return err
		}),
	}

	state.Flags().Uint64Var(&at, "at", 0, "the height to show the state at, 0 the initial state (default: the journal head)")
	atGiven = func() bool { return state.Flags().Changed("at") }

	cmd.AddCommand(create, list, show, send, call, fork, state, e.worldUpgrade(), e.worldJournal(), e.worldSnapshotCommand())
	for _, action := range []struct {
		name, short string
		do          func(*api.Client) func(context.Context, string, string) (api.World, error)
	}{
		{"pause", "Pause a world: its holder is fenced at once; input still queues", func(c *api.Client) func(context.Context, string, string) (api.World, error) { return c.Pause }},
		{"resume", "Resume a paused world (its next lease has a higher epoch)", func(c *api.Client) func(context.Context, string, string) (api.World, error) { return c.Resume }},
		{"archive", "Archive a world for good: no input, no lease", func(c *api.Client) func(context.Context, string, string) (api.World, error) { return c.Archive }},
	} {
		var reason string
		sub := &cobra.Command{
			Use:     action.name + " ID",
			Short:   action.short,
			Example: fmt.Sprintf("  orrery world %s alice --reason \"incident 42\"", action.name),
			Args:    args(cobra.ExactArgs(1)),
			RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
				w, err := action.do(c)(ctx, a[0], reason)
				if err != nil {
					return err
				}
				return e.printWorld(w)
			}),
		}
		sub.Flags().StringVar(&reason, "reason", "", "recorded with the status change")
		cmd.AddCommand(sub)
	}
	return cmd
}

func (e *env) printRecords(recs []api.Record, header bool) {
	if e.output == "json" {
		enc := json.NewEncoder(e.io.Out)
		for _, r := range recs {
			_ = enc.Encode(r)
		}
		return
	}
	tw := tabwriter.NewWriter(e.io.Out, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "HEIGHT\tPERSISTED\tINPUT\tTYPE\tOUTCOME\tSTATE")
	}
	for _, r := range recs {
		in, typ := "-", "-"
		if r.Input != nil {
			in = r.Input.Kind + "#" + strconv.FormatUint(r.Input.Seq, 10)
			typ = orDash(r.Input.Type)
		}
		outcome := r.Outcome
		if r.Error != "" {
			outcome += ": " + r.Error
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Height, ts(r.PersistedAt), in, typ, outcome, short(r.StateHash))
	}
	_ = tw.Flush()
}

func (e *env) journalCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "journal",
		Short: "Read a world's journal: one record per step, in height order",
		Long: `Read a world's journal: one record per step, in height order. With -o json
each record is one JSON object on a line of its own (JSON Lines), so that a
--follow can be piped record by record (read, tail). audit lists the events
of a workflow run's or a world's stream written in a time window; with -o json
it prints them as one JSON array.`,
	})
	var after uint64
	var limit int
	var follow bool
	read := &cobra.Command{
		Use:     "read ID",
		Short:   "Read journal records after a height",
		Example: "  orrery journal read alice --after 10 --limit 20\n  orrery journal read alice --follow",
		Args:    args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			return e.readJournal(ctx, c, a[0], after, limit, follow)
		}),
	}
	read.Flags().Uint64Var(&after, "after", 0, "start after this height")
	read.Flags().IntVar(&limit, "limit", 100, "records per page")
	read.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records as they are journaled")

	var n uint64
	var tailFollow bool
	tail := &cobra.Command{
		Use:     "tail ID",
		Short:   "Print the last records of a journal",
		Example: "  orrery journal tail alice -n 5 --follow",
		Args:    args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			v, err := c.GetWorld(ctx, a[0])
			if err != nil {
				return err
			}
			start := uint64(0)
			if v.Head > n {
				start = v.Head - n
			}
			if start < v.JournalFloor {
				// The records below the floor are gone: say so, and tail
				// what is left.
				start = v.JournalFloor
				fmt.Fprintf(e.io.Err, "records up to height %d are compacted\n", v.JournalFloor)
			}
			return e.readJournal(ctx, c, a[0], start, 100, tailFollow)
		}),
	}
	tail.Flags().Uint64VarP(&n, "lines", "n", 10, "how many records")
	tail.Flags().BoolVarP(&tailFollow, "follow", "f", false, "keep printing new records as they are journaled")
	cmd.AddCommand(read, tail, e.journalAudit())
	return cmd
}

func (e *env) readJournal(ctx context.Context, c *api.Client, id string, after uint64, limit int, follow bool) error {
	header := true
	for {
		wait := time.Duration(0)
		if follow {
			wait = 25 * time.Second
		}
		page, err := c.Journal(ctx, id, after, limit, wait)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil
			}
			return err
		}
		e.printRecords(page.Records, header && len(page.Records) > 0)
		if len(page.Records) > 0 {
			header = false
		}
		if page.Next > after {
			after = page.Next
		}
		if len(page.Records) == 0 && !follow {
			return nil
		}
		if len(page.Records) < limit && !follow {
			return nil
		}
	}
}

func (e *env) leaseCommand() *cobra.Command {
	cmd := group(&cobra.Command{Use: "lease", Short: "Inspect world leases"})
	var worker string
	list := &cobra.Command{
		Use:     "list",
		Short:   "List the leases and placements of a worker's worlds (default: every worker's)",
		Example: "  orrery lease list\n  orrery lease list --worker node-a",
		Args:    args(cobra.NoArgs),
		RunE: listTable(e, func(ctx context.Context, c *api.Client) ([]api.LeaseRow, error) { return c.Leases(ctx, worker) },
			"WORLD\tHOLDER\tEPOCH\tEXPIRES\tPLACED ON", func(tw io.Writer, r api.LeaseRow) {
				holder, epoch, exp := "-", "-", "-"
				if r.Lease != nil {
					holder, epoch, exp = orDash(r.Lease.Holder), strconv.FormatUint(r.Lease.Epoch, 10), ts(r.Lease.ExpiresAt)
				}
				placed := "-"
				if r.Assignment != nil {
					placed = r.Assignment.Worker
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.World, holder, epoch, exp, placed)
			}),
	}
	list.Flags().StringVar(&worker, "worker", "", "only this worker's worlds")
	cmd.AddCommand(list)
	return cmd
}

func (e *env) effectsCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "effects",
		Aliases: []string{"effect"},
		Short:   "Inspect and operate the effect queue",
		Long: `Effects are the side effects worlds ask for (http.request, fabric.send, your
own kinds). Adapters run them at least once; each gets exactly one terminal
receipt, which returns to its world's inbox.`,
	})
	var ef api.EffectQuery
	list := &cobra.Command{
		Use:   "list",
		Short: "List effects across worlds, filtered by world, kind and status, a page at a time",
		Long: `list shows effects in queue order: by default the open ones (pending, in
flight and held) of every world. --status done, withdrawn or all shows the records
the store keeps until swept. A page holds --limit effects (default 100, at
most 1000); when more follow, the command says which --after reads the next.`,
		Example: "  orrery effects list\n  orrery effects list --world carol\n  orrery effects list --kind http.request --status inflight --limit 50",
		Args:    args(cobra.NoArgs),
		RunE: pagedTable(e, func(ctx context.Context, c *api.Client) ([]api.Effect, string, error) { return c.QueryEffects(ctx, ef) },
			"INTENT\tKIND\tSTATE\tATTEMPT\tCLAIMED BY\tENQUEUED\tWORLD\tAGE", func(tw io.Writer, x api.Effect) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", x.IntentHash, x.Kind, x.State, x.Attempt, orDash(x.ClaimedBy), ts(x.EnqueuedAt), x.World, relative(time.Since(x.EnqueuedAt)))
			}),
	}
	list.Flags().StringVar(&ef.World, "world", "", "only this world's effects")
	list.Flags().StringVar(&ef.Kind, "kind", "", "only effects of this kind")
	list.Flags().StringVar(&ef.Status, "status", "", "open (default: pending, inflight or held), pending, inflight, held, done, withdrawn or all")
	list.Flags().StringVar(&ef.After, "after", "", "the page after this cursor (printed under a full page)")
	list.Flags().IntVar(&ef.Limit, "limit", 0, "effects a page (default 100, at most 1000)")
	var reason string
	retry := &cobra.Command{
		Use:     "retry INTENT",
		Short:   "Run an effect whose receipt was an error or timeout again; the world gets a second receipt",
		Example: `  orrery effects retry 3f2a9c... --reason "the partner API is back"`,
		Args:    args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			st, err := c.RetryEffect(ctx, a[0], reason)
			if err != nil {
				return err
			}
			return e.print(st, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "%s\t%s\tretries %d\n", st.IntentHash, st.State, st.Retries)
			})
		}),
	}
	retry.Flags().StringVar(&reason, "reason", "", "recorded with the retry")
	var status, resolveReason string
	resolve := &cobra.Command{
		Use:   "resolve INTENT [JSON]",
		Short: "Hand a world the receipt of an effect no adapter will complete (operator's receipt)",
		Long: `resolve completes a pending or in-flight effect as an operator: the world
receives a receipt with --status and the JSON body, exactly once; an adapter
still running it finds its result already decided.`,
		Example: `  orrery effects resolve 3f2a9c... '{"approved":true}' --status ok --reason "approved by phone"`,
		Args:    args(cobra.RangeArgs(1, 2)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			body, err := jsonArg(a, 1)
			if err != nil {
				return err
			}
			ack, err := c.InjectReceipt(ctx, a[0], status, body, resolveReason)
			if err != nil {
				return err
			}
			return e.printAck(ack, "receipt", ack.Seq, ack.Duplicate, "already done: the first receipt stands")
		}),
	}
	resolve.Flags().StringVar(&status, "status", "ok", "ok, error or timeout")
	resolve.Flags().StringVar(&resolveReason, "reason", "", "recorded with the receipt")
	var holdReason string
	hold := &cobra.Command{
		Use:   "hold INTENT",
		Short: "Keep an effect from every adapter until you release or resolve it",
		Long: `hold stops a pending or in-flight effect from running (again): no adapter
claims it, and an execution already under way has its claim revoked, so
whatever it reports is refused. Hold an effect you suspect already ran (a
restore brings back effects in flight when the backup was taken), then ask
the external system: if it ran, resolve it with its receipt; if not,
release it.`,
		Example: `  orrery effects hold 3f2a9c... --reason "checking with the payment provider"`,
		Args:    args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			st, err := c.HoldEffect(ctx, a[0], holdReason)
			if err != nil {
				return err
			}
			return e.print(st, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", st.IntentHash, st.State, st.HoldReason)
			})
		}),
	}
	hold.Flags().StringVar(&holdReason, "reason", "", "recorded with the hold")
	var releaseReason string
	var allHeld bool
	release := &cobra.Command{
		Use:   "release [INTENT | --all-held]",
		Short: "Let a held effect (or every one) run again, at least once",
		Long: `release puts a held effect back in the queue: an adapter runs it at once,
sending its unchanged idempotency key, so an external system that honours
the key does not act twice. Release only what you know did not run, or what
is safe to run again; for one that ran, resolve it with its receipt
instead. --all-held releases every held effect in one step.`,
		Example: "  orrery effects release 3f2a9c... --reason \"the provider has no such charge\"\n  orrery effects release --all-held --reason \"all checked after the restore\"",
		Args: args(func(cmd *cobra.Command, a []string) error {
			if allHeld {
				return cobra.NoArgs(cmd, a)
			}
			return cobra.ExactArgs(1)(cmd, a)
		}),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			if allHeld {
				n, err := c.ReleaseAllHeld(ctx, releaseReason)
				if err != nil {
					return err
				}
				return e.print(api.HeldCount{Released: n}, func(tw *tabwriter.Writer) {
					fmt.Fprintf(tw, "released %d held effects\n", n)
				})
			}
			st, err := c.ReleaseHeld(ctx, a[0], releaseReason)
			if err != nil {
				return err
			}
			return e.print(st, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "%s\t%s\n", st.IntentHash, st.State)
			})
		}),
	}
	release.Flags().StringVar(&releaseReason, "reason", "", "recorded with the release")
	release.Flags().BoolVar(&allHeld, "all-held", false, "release every held effect")
	cmd.AddCommand(list, retry, resolve, hold, release)
	return cmd
}

func (e *env) timersCommand() *cobra.Command {
	cmd := group(&cobra.Command{Use: "timers", Aliases: []string{"timer"}, Short: "Inspect durable timers"})
	var tf api.TimerQuery
	list := &cobra.Command{
		Use:   "list",
		Short: "List timers across worlds by due time, filtered by world and status, a page at a time",
		Long: `list shows timers by due time: by default those that have not fired
(scheduled or claimed) of every world; --status delivered or all shows the
fired ones the store keeps until swept. A page holds --limit timers
(default 100, at most 1000); when more follow, the command says which
--after reads the next.`,
		Example: "  orrery timers list\n  orrery timers list --world t-1 --status all",
		Args:    args(cobra.NoArgs),
		RunE: pagedTable(e, func(ctx context.Context, c *api.Client) ([]api.Timer, string, error) { return c.QueryTimers(ctx, tf) },
			"INTENT\tDUE\tSTATE\tCLAIMED BY\tWORLD\tDUE IN", func(tw io.Writer, x api.Timer) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.IntentHash, ts(x.DeliverAt), x.State, orDash(x.ClaimedBy), x.World, relative(time.Since(x.DeliverAt)))
			}),
	}
	list.Flags().StringVar(&tf.World, "world", "", "only this world's timers")
	list.Flags().StringVar(&tf.Status, "status", "", "open (default: scheduled or claimed), scheduled, claimed, delivered or all")
	list.Flags().StringVar(&tf.After, "after", "", "the page after this cursor (printed under a full page)")
	list.Flags().IntVar(&tf.Limit, "limit", 0, "timers a page (default 100, at most 1000)")
	cmd.AddCommand(list)
	return cmd
}

func (e *env) workersCommand() *cobra.Command {
	cmd := group(&cobra.Command{Use: "workers", Aliases: []string{"worker"}, Short: "Inspect workers and drain them"})
	var wq api.WorkerQuery
	list := &cobra.Command{
		Use:   "list",
		Short: "List workers: status (live, draining or dead), worlds held, last heartbeat, roles",
		Long: `list shows each worker's status: live (a heartbeat within the server's
live-for window), draining (live and marked draining) or dead (no heartbeat
within the window; a dead worker's draining mark is shown as "-", since it
drains nothing), its capacity and its roles (--roles of its serve; "all"
for a worker that advertised none, a binary older than worker classes).
-o json adds every capability it advertised.`,
		Example: "  orrery workers list\n  orrery workers list --status dead",
		Args:    args(cobra.NoArgs),
		RunE: pagedTable(e, func(ctx context.Context, c *api.Client) ([]api.Worker, string, error) {
			return c.SearchWorkers(ctx, wq)
		},
			"WORKER\tLIVE\tDRAINING\tHELD\tASSIGNED\tHEARTBEAT\tCAPACITY\tROLES\tSTATUS", func(tw io.Writer, w api.Worker) {
				draining := strconv.FormatBool(w.Draining)
				if !w.Live {
					draining = "-"
				}
				roles := strings.Join(w.Roles, ",")
				if len(w.Capabilities) == 0 {
					roles = "all"
				}
				fmt.Fprintf(tw, "%s\t%t\t%s\t%d\t%d\t%s\t%d\t%s\t%s\n", w.ID, w.Live, draining, w.WorldsHeld, w.WorldsAssigned, when(w.HeartbeatAt),
					w.Capacity, roles, w.Status)
			}),
	}
	list.Flags().StringVar(&wq.Status, "status", "", "only workers in this status: live, draining or dead")
	listPaging(list, &wq.ListOptions, "workers")
	var undo, wait bool
	drain := &cobra.Command{
		Use:   "drain WORKER",
		Short: "Move every world off a worker without waiting for lease expiry",
		Long: `drain marks the worker draining: the orchestrator places nothing more on it and
moves its worlds, and the worker releases each lease as its world moves, so
the new holder starts at once with a higher epoch. With --wait it waits until
the worker holds nothing and prints the per-world handoff times. --undo
clears the mark.`,
		Example: "  orrery workers drain node-a --wait\n  orrery workers drain node-a --undo",
		Args:    args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			return e.drain(ctx, c, a[0], !undo, wait)
		}),
	}
	drain.Flags().BoolVar(&undo, "undo", false, "clear the draining mark")
	drain.Flags().BoolVar(&wait, "wait", false, "wait until the worker holds nothing and print handoff times")
	cmd.AddCommand(list, drain)
	return cmd
}

// drain marks worker draining and, with wait, polls the worker's leases
// until it holds none, recording when each world left it.
func (e *env) drain(ctx context.Context, c *api.Client, worker string, draining, wait bool) error {
	before, err := c.Leases(ctx, worker)
	if err != nil {
		return err
	}
	start := time.Now()
	w, err := c.Drain(ctx, worker, draining)
	if err != nil {
		return err
	}
	if !wait || !draining {
		return e.print(w, func(tw *tabwriter.Writer) {
			fmt.Fprintf(tw, "%s\tdraining=%t\tholds %d worlds\n", w.ID, w.Draining, w.WorldsHeld)
		})
	}
	held := map[string]bool{}
	for _, r := range before {
		// The orchestrator's lease stays with a draining worker (only its
		// worlds move), so waiting for it to move would never end.
		if r.World == plane.OrchestratorWorld {
			continue
		}
		if r.Lease != nil && r.Lease.Holder == worker {
			held[r.World] = true
		}
	}
	moved := map[string]time.Duration{}
	for len(moved) < len(held) {
		rows, err := c.Leases(ctx, "")
		if err != nil {
			return err
		}
		for _, r := range rows {
			if _, done := moved[r.World]; done || !held[r.World] {
				continue
			}
			if r.Lease != nil && r.Lease.Holder != "" && r.Lease.Holder != worker {
				moved[r.World] = time.Since(start)
			}
		}
		if len(moved) < len(held) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	ds := make([]time.Duration, 0, len(moved))
	for _, d := range moved {
		ds = append(ds, d)
	}
	sum := handoffSummary(ds)
	return e.print(struct {
		Worker string          `json:"worker"`
		Worlds int             `json:"worlds"`
		Ms     handoffQuantile `json:"handoff_ms"`
	}{worker, len(ds), sum}, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "%s drained: %d worlds handed off\n", worker, len(ds))
		fmt.Fprintf(tw, "handoff ms\tp50 %.1f\tp95 %.1f\tp99 %.1f\tmax %.1f\n", sum.P50, sum.P95, sum.P99, sum.Max)
	})
}

type handoffQuantile struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func handoffSummary(ds []time.Duration) handoffQuantile {
	if len(ds) == 0 {
		return handoffQuantile{}
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	q := func(p float64) float64 {
		i := int(p*float64(len(sorted))+0.5) - 1
		i = max(0, min(i, len(sorted)-1))
		return float64(sorted[i].Microseconds()) / 1000
	}
	return handoffQuantile{P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: float64(sorted[len(sorted)-1].Microseconds()) / 1000}
}
