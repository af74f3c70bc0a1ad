package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
)

// worldSnapshotCommand is `orrery world snapshot ID`.
func (e *env) worldSnapshotCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a world's state now, so that it can be forked at its head",
		Long: `snapshot asks the world's lease holder for a snapshot of its state at its
next step boundary (rather than at the next --snapshot-every heights) and
waits for it. A fork without --height then starts from it. The request goes
through the world's inbox, so a world not running anywhere is started to
take it; a paused or archived world is refused.`,
		Example: `  orrery world snapshot alice
  orrery world snapshot alice && orrery world fork alice alice-what-if`,
		Args: args(cobra.ExactArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			s, err := c.Snapshot(ctx, a[0])
			if err != nil {
				return err
			}
			return e.print(s, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "WORLD\tHEIGHT\tSTATE HASH\tCREATED")
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.World, s.Height, s.StateHash, ts(s.CreatedAt))
			})
		}),
	}
}
