package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/api"
)

// versionText is a world's version as world show prints it.
func versionText(v uint64) string {
	if v == 0 {
		return "- (never stepped: it starts on the newest version its host carries)"
	}
	return strconv.FormatUint(v, 10)
}

// universeUpgrade is what world upgrade --universe prints: the sums of
// every page.
type universeUpgrade struct {
	Universe string               `json:"universe"`
	To       uint64               `json:"to"`
	Asked    int                  `json:"asked"`
	Already  int                  `json:"already"`
	Failed   int                  `json:"failed"`
	Failures []api.UpgradeFailure `json:"failures"`
}

func (e *env) worldUpgrade() *cobra.Command {
	var to uint64
	var universe string
	var page int
	cmd := &cobra.Command{
		Use:   "upgrade (ID | --universe U) --to N",
		Short: "Move a world, or every world of a universe, to another version of its definition",
		Long: `upgrade asks a world to move to version N of its universe's definition. The
request is an input of the world's inbox, ordered with its other inputs: the
host that holds the world's lease runs the upgrade function of the binary
that carries both versions, journals one WorldUpgraded record with the
migrated state's hash, and snapshots the world there. A world on N already
is left as it is; a version older than the world's is refused. Whether the
upgrade succeeded is its journal record's (world journal ID, world show ID):
a failed one leaves the world serving on its version and says why.

With --universe, every active and paused world of the universe is asked, a
page at a time, and the totals are printed: asked, already there, failed
(with why). It exits non-zero when any request failed.`,
		Example: "  orrery world upgrade acct-42 --to 2\n  orrery world upgrade --universe ledger.account --to 2",
		Args:    args(cobra.MaximumNArgs(1)),
		RunE: e.withClient(func(ctx context.Context, c *api.Client, a []string) error {
			if to == 0 {
				return usagef("--to N is required (versions start at 1)")
			}
			if (len(a) == 1) == (universe != "") {
				return usagef("give a world ID or --universe, not both")
			}
			if universe == "" {
				u, err := c.UpgradeWorld(ctx, a[0], to)
				if err != nil {
					return err
				}
				return e.print(u, func(tw *tabwriter.Writer) {
					switch u.Status {
					case "already":
						fmt.Fprintf(tw, "%s\tis on version %d already\n", u.World, u.To)
					case "pending":
						fmt.Fprintf(tw, "%s\tupgrade from %s to %d waits in the inbox (seq %d)\n", u.World, versionText(u.From), u.To, u.Seq)
					default:
						fmt.Fprintf(tw, "%s\tupgrade from %s to %d requested (seq %d)\n", u.World, versionText(u.From), u.To, u.Seq)
					}
				})
			}
			sum := universeUpgrade{Universe: universe, To: to, Failures: []api.UpgradeFailure{}}
			for after := ""; ; {
				r, err := c.UpgradeUniverse(ctx, universe, to, after, page)
				if err != nil {
					return err
				}
				sum.Asked, sum.Already, sum.Failed = sum.Asked+r.Asked, sum.Already+r.Already, sum.Failed+r.Failed
				sum.Failures = append(sum.Failures, r.Failures...)
				if r.Next == "" {
					break
				}
				after = r.Next
			}
			if err := e.print(sum, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "universe\t%s\nto\t%d\nasked\t%d\nalready there\t%d\nfailed\t%d\n", universe, to, sum.Asked, sum.Already, sum.Failed)
				for _, f := range sum.Failures {
					fmt.Fprintf(tw, "  %s\t%s: %s\n", f.World, f.Code, f.Error)
				}
			}); err != nil {
				return err
			}
			if sum.Failed > 0 {
				return errors.New("some upgrade requests failed (listed above)")
			}
			return nil
		}),
	}
	cmd.Flags().Uint64Var(&to, "to", 0, "the version to move to")
	cmd.Flags().StringVar(&universe, "universe", "", "every world of this universe")
	cmd.Flags().IntVar(&page, "page", 100, "worlds per request with --universe (at most 1000)")
	return cmd
}
