package cli

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
)

func scheduleCadence(s api.ScheduleSpec) string {
	c := s.Cron
	if c == "" {
		c = "every " + s.Every
		if s.Offset != "" {
			c += " +" + s.Offset
		}
	}
	if s.TimeZone != "" {
		c += " (" + s.TimeZone + ")"
	}
	if s.Jitter != "" {
		c += " ~" + s.Jitter
	}
	return c
}

func scheduleTarget(s api.ScheduleSpec) string {
	if s.Target.Workflow != "" {
		return "run " + s.Target.Workflow
	}
	return "event " + s.Target.Type + " → " + s.Target.World
}

func (e *env) printSchedules(vs ...api.ScheduleView) error {
	var v any = vs
	if len(vs) == 1 {
		v = vs[0]
	}
	return e.print(v, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "SCHEDULE\tSTATE\tSPEC\tTARGET\tNEXT FIRE TIMES\tFIRED\tMISSED\tSKIPPED\tLAST RESULT")
		for _, s := range vs {
			next := make([]string, 0, 3)
			for i, t := range s.NextFireTimes {
				if i == 3 {
					break
				}
				next = append(next, ts(t))
			}
			nexts := strings.Join(next, ", ")
			if nexts == "" {
				nexts = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.ID, s.State, scheduleCadence(s.Spec), scheduleTarget(s.Spec),
				nexts, s.Fired, s.Missed, s.Skipped, orDash(s.LastResult))
		}
	})
}

func (e *env) scheduleCommand() *cobra.Command {
	cmd := group(&cobra.Command{Use: "schedule", Aliases: []string{"schedules"}, Short: "Durable schedules that start runs or send events"})
	var req api.CreateScheduleRequest
	var input, value string
	create := &cobra.Command{
		Use:   "create ID",
		Short: "Create a schedule: --cron or --every, and --workflow or --world/--type",
		Long: `create records a schedule; every node with the orchestrator role fires it.
Give --cron (five fields, an optional leading seconds field, or @hourly,
@daily …, read in --time-zone) or --every (with an optional --offset).
Each tick starts a run of --workflow with --input (JSON), run id
sched.ID.<tick>, or sends --world an event of --type with --value (JSON),
keyed by the schedule and the tick: a tick starts once however many
schedulers race. --overlap (skip, buffer_one, allow) says what a tick does
while the previous run still runs; --catch-up (skip, once, all with
--catch-up-limit) what the ticks missed while no scheduler ran do.`,
		Example: `  orrery schedule create nightly --cron "0 3 * * *" --time-zone Europe/Paris --workflow report --input '{"day":"yesterday"}'
  orrery schedule create heartbeat --every 5m --world acct-1 --type Tick --value '{}'`,
		Args: args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			req.ID = a[0]
			if input != "" {
				req.Target.Input = json.RawMessage(input)
			}
			if value != "" {
				req.Target.Value = json.RawMessage(value)
			}
			v, err := c.CreateSchedule(ctx, req)
			if err != nil {
				return err
			}
			return e.printSchedules(v)
		}),
	}
	fl := create.Flags()
	fl.StringVar(&req.Cron, "cron", "", "a cron expression")
	fl.StringVar(&req.Every, "every", "", "a fixed interval, e.g. 15m")
	fl.StringVar(&req.Offset, "offset", "", "the interval's offset from the Unix epoch, below --every")
	fl.StringVar(&req.TimeZone, "time-zone", "", "the IANA zone --cron is read in (default UTC)")
	fl.StringVar(&req.Jitter, "jitter", "", "delay each tick by a fixed per-tick amount below this")
	fl.StringVar(&req.Overlap, "overlap", "", "skip (default), buffer_one or allow")
	fl.StringVar(&req.CatchUp, "catch-up", "", "skip, once (default) or all")
	fl.IntVar(&req.CatchUpLimit, "catch-up-limit", 0, "with --catch-up all: how many of the latest missed ticks to fire")
	fl.StringVar(&req.Target.Workflow, "workflow", "", "the workflow each tick starts")
	fl.StringVar(&input, "input", "", "the run's input, as JSON")
	fl.StringVar(&req.Target.World, "world", "", "the world each tick sends an event")
	fl.StringVar(&req.Target.Type, "type", "", "the event's type")
	fl.StringVar(&value, "value", "", "the event's value, as JSON")

	list := &cobra.Command{
		Use:     "list",
		Short:   "List schedules with their state and next fire times",
		Example: "  orrery schedule list",
		Args:    args(cobra.NoArgs),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, _ []string) error {
			vs, err := c.ListSchedules(ctx)
			if err != nil {
				return err
			}
			return e.printSchedules(vs...)
		}),
	}
	one := func(use, short string, do func(*api.Client, context.Context, string) (api.ScheduleView, error)) *cobra.Command {
		return &cobra.Command{
			Use: use + " ID", Short: short, Example: "  orrery schedule " + use + " nightly", Args: args(cobra.ExactArgs(1)),
			RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
				v, err := do(c, ctx, a[0])
				if err != nil {
					return err
				}
				return e.printSchedules(v)
			}),
		}
	}
	show := one("show", "Show a schedule: spec, state, next fire times, counters, last result", (*api.Client).GetSchedule)
	pause := one("pause", "Pause a schedule (ticks already recorded still start)", (*api.Client).PauseSchedule)
	resume := one("resume", "Resume a schedule at its next tick (the pause is not caught up)", (*api.Client).ResumeSchedule)
	var triggerKey string
	trigger := &cobra.Command{
		Use: "trigger ID", Short: "Fire a schedule now, with a tick of its own; its cadence is unchanged", Args: args(cobra.ExactArgs(1)),
		Long: `trigger records a tick of the schedule's own, to start at once. It is
idempotent by --key: a trigger repeated with the same key (a retry after
the answer was lost) starts nothing more and prints the first trigger's
tick as a duplicate. Without --key each invocation makes a key of its own;
if the answer is lost, run it again with the printed --key.`,
		Example: `  orrery schedule trigger nightly
  orrery schedule trigger nightly --key backfill-2026-11-28`,
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			key := triggerKey
			if key == "" {
				key = rand.Text()
			}
			tr, err := c.TriggerSchedule(ctx, a[0], key)
			if err != nil {
				var ae *api.Error
				if !errors.As(err, &ae) || ae.Status >= 500 {
					// The trigger may have been recorded: only its key
					// makes a retry safe.
					return fmt.Errorf("%w (retry safely with --key %s)", err, key)
				}
				return err
			}
			return e.print(tr, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "SCHEDULE\tTICK\tRUN\tKEY\tDUPLICATE")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", tr.Schedule.ID, tr.Tick, orDash(tr.Run), tr.IdempotencyKey, tr.Duplicate)
			})
		}),
	}
	trigger.Flags().StringVar(&triggerKey, "key", "", "the trigger's idempotency key (default: one of its own, printed)")
	del := &cobra.Command{
		Use: "delete ID", Short: "Delete a schedule: nothing fires after it", Args: args(cobra.ExactArgs(1)),
		Example: "  orrery schedule delete nightly",
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			if err := c.DeleteSchedule(ctx, a[0]); err != nil {
				return err
			}
			return e.print(map[string]string{"id": a[0], "status": "deleted"}, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "%s\tdeleted\n", a[0])
			})
		}),
	}
	cmd.AddCommand(create, list, show, pause, resume, trigger, del)
	return cmd
}
