package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
)

func (e *env) queueCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "queue",
		Aliases: []string{"queues"},
		Short:   "Inspect the named queues of workflow runs",
		Long: `A named queue admits workflow runs started on it (orrery run start --queue Q)
within its limits, across the cluster: a global concurrency, a per-worker one,
a rate (admissions per period) and, for a partitioned queue, each partition
key's own. A limit of 0 is none.`,
	})
	list := &cobra.Command{
		Use:     "list",
		Short:   "List the queues: limits, running and waiting runs",
		Example: "  orrery queue list\n  orrery queue list -o json",
		Args:    args(cobra.NoArgs),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, _ []string) error {
			qs, err := c.WorkflowQueues(ctx)
			if err != nil {
				return err
			}
			if qs == nil {
				qs = []api.WorkflowQueue{}
			}
			return printTable(e, qs, "NAME\tCONCURRENCY\tPER WORKER\tRATE\tPARTITIONED\tRUNNING\tWAITING\tADMITTED RECENTLY",
				func(w io.Writer, q api.WorkflowQueue) {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%d\t%d\t%d\n", q.Name, limit(q.Concurrency), limit(q.WorkerConcurrency),
						rate(q), q.Partitioned, q.Running, q.Waiting, q.AdmittedRecent)
				})
		}),
	}
	show := &cobra.Command{
		Use:     "show NAME",
		Short:   "Show a queue: limits, depth by priority and partition, running by worker, admitted rate",
		Example: "  orrery queue show payouts\n  orrery queue show payouts -o json",
		Args:    args(cobra.ExactArgs(1)),
		RunE: byID(e, (*api.Client).WorkflowQueue, func(q api.WorkflowQueue) error {
			return e.print(q, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "name\t%s\n", q.Name)
				fmt.Fprintf(w, "concurrency\t%s\n", limit(q.Concurrency))
				fmt.Fprintf(w, "worker concurrency\t%s\n", limit(q.WorkerConcurrency))
				fmt.Fprintf(w, "rate\t%s\n", rate(q))
				fmt.Fprintf(w, "partitioned\t%v\n", q.Partitioned)
				fmt.Fprintf(w, "running\t%d\t%s\n", q.Running, counts(q.RunningByWorker, "worker"))
				fmt.Fprintf(w, "waiting\t%d\n", q.Waiting)
				fmt.Fprintf(w, "  by priority\t%s\n", counts(q.WaitingByPriority, "priority"))
				fmt.Fprintf(w, "  by partition\t%s\n", counts(q.WaitingByPartition, "partition"))
				fmt.Fprintf(w, "admitted recently\t%d\n", q.AdmittedRecent)
			})
		}),
	}
	cmd.AddCommand(list, show)
	return cmd
}

func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func rate(q api.WorkflowQueue) string {
	if q.RateLimit == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%v", q.RateLimit, time.Duration(q.RatePeriodMs)*time.Millisecond)
}

// counts prints a count map as "key=n, ..." sorted by key.
func counts(m map[string]int, what string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s %s=%d", what, name, m[k]))
	}
	return strings.Join(parts, ", ")
}
