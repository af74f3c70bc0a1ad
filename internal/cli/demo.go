package cli

import (
	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/internal/demo"
)

func (e *env) demoCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "A narrated tour of durable worlds on the embedded store (under a minute)",
		Long: `demo runs a real scenario on an embedded SQLite file and narrates it: accounts
and a transfer saga between them, a call with a reply, a durable timer, an
http.request effect against a local server, a fabric.send between worlds, a
worker crash and the takeover by another worker, and a fork. Every claim it
prints is checked; it exits 1 if one does not hold.`,
		Example: `  orrery demo
  orrery demo --dir ./demo-data   # keep the SQLite file to inspect it afterwards`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), e.io.Out, demo.Options{Dir: dir})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "keep the demo's SQLite file in this directory (default: a temporary one, removed)")
	return cmd
}
