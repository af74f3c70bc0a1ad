package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
)

// worldJournal is `orrery world journal ID`: the journal as a person
// debugs it, each record with what its step consumed and did (the API's
// journal?detail=true), where `orrery journal read` prints one summary
// line a record for tailing.
func (e *env) worldJournal() *cobra.Command {
	var after uint64
	var limit int
	var height uint64
	cmd := &cobra.Command{
		Use:   "journal ID",
		Short: "Print a world's journal records with their inputs, replies, intents, timers and sends",
		Long: `journal prints a page of a world's journal, each record with its detail: the
input's value as JSON, a call's reply, the effects, timers and fabric sends
the step made, the timers it cancelled, and for a receipt the effect it
answers (kind, intent hash, attempt, status). The server derives the detail
again by replaying the world from the nearest snapshot, so a record whose
history is compacted shows its input and says why the rest is missing.
With -o json each record is one JSON object on a line (JSON Lines).`,
		Example: `  orrery world journal alice
  orrery world journal alice --after 40 --limit 5
  orrery world journal alice --height 42 -o json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			from, n := after, limit
			if height > 0 {
				from, n = height-1, 1
			}
			page, err := c.JournalDetail(ctx, a[0], from, n)
			if err != nil {
				return err
			}
			if e.output == "json" {
				enc := json.NewEncoder(e.io.Out)
				for _, r := range page.Records {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
				return nil
			}
			for _, r := range page.Records {
				printDetail(e.io.Out, r)
			}
			if len(page.Records) == n && height == 0 {
				fmt.Fprintf(e.io.Err, "more with --after %d\n", page.Next)
			}
			return nil
		}),
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this height")
	cmd.Flags().IntVar(&limit, "limit", 20, "records per page")
	cmd.Flags().Uint64Var(&height, "height", 0, "print only the record at this height")
	return cmd
}

// printDetail prints one record as a block: a summary line, then a line
// for each thing the step consumed or did.
func printDetail(w io.Writer, r api.Record) {
	in, typ := "-", "-"
	if r.Input != nil {
		in = r.Input.Kind + "#" + strconv.FormatUint(r.Input.Seq, 10)
		typ = orDash(r.Input.Type)
	}
	outcome := r.Outcome
	if r.Error != "" {
		outcome += ": " + r.Error
	}
	fmt.Fprintf(w, "#%d  %s  %s  %s  %s  state %s\n", r.Height, ts(r.PersistedAt), in, typ, outcome, short(r.StateHash))
	line := func(label, format string, a ...any) {
		fmt.Fprintf(w, "    %-8s %s\n", label, fmt.Sprintf(format, a...))
	}
	if r.Input != nil && r.Input.Value != nil {
		line("input", "%s", compact(r.Input.Value))
	}
	if r.Input != nil && r.Input.Timer != "" {
		line("fired", "timer %s", short(r.Input.Timer))
	}
	if c := r.Input; c != nil && c.Cause != nil {
		var parts []string
		if c.Cause.FromWorld != "" {
			parts = append(parts, fmt.Sprintf("from %s@%d", c.Cause.FromWorld, c.Cause.FromHeight))
		}
		if c.Cause.CorrelationID != "" {
			parts = append(parts, "correlation "+c.Cause.CorrelationID)
		}
		line("cause", "%s", strings.Join(parts, ", "))
	}
	if rc := r.Receipt; rc != nil {
		att := ""
		if rc.Attempt > 0 {
			att = fmt.Sprintf(" after %d attempt(s)", rc.Attempt)
		}
		line("receipt", "%s %s %s%s, retry %d, body %s", rc.Kind, short(rc.IntentHash), rc.Status, att, rc.Retry, compact(rc.Body))
	}
	if rp := r.Reply; rp != nil {
		if rp.Error != "" {
			line("reply", "error: %s", rp.Error)
		} else {
			line("reply", "%s", compact(rp.Value))
		}
	}
	for _, it := range r.Intents {
		line("effect", "%s %s %s", it.Kind, short(it.IntentHash), compact(it.Params))
	}
	for _, t := range r.Timers {
		line("timer", "%s at %s: %s %s", short(t.IntentHash), ts(t.DeliverAt), orDash(t.Type), compact(t.Value))
	}
	for _, h := range r.Cancels {
		line("cancel", "timer %s", short(h))
	}
	for _, s := range r.Sends {
		line("send", "%s → %s: %s %s", short(s.IntentHash), s.DestWorld, s.Type, compact(s.Value))
	}
	if r.DeriveError != "" {
		line("note", "%s", r.DeriveError)
	}
}

// compact is a JSON value on one line ("-" when absent).
func compact(v json.RawMessage) string {
	if len(v) == 0 {
		return "-"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return string(v)
	}
	return b.String()
}
