package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/lab"
)

func (e *env) labCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "lab",
		Short: "Triage deterministic lab runs: crash packs and traces",
		Long: `A failing lab run writes a crash pack: the seed, the configuration, the whole
canonical trace with its fingerprint, the failure and the command that re-runs
it. These commands read packs and traces without re-running anything, except
'replay --run', which runs the pack's command.`,
	})
	cmd.AddCommand(e.labReplayCommand(), e.labTraceCommand())
	return cmd
}

// labErr maps the lab's malformed-input error to a usage exit, and a
// well-formed file whose trace no longer hashes to its fingerprint to a
// failed check (1), as verify answers for a trace file: the lab reports
// the latter as malformed when the file is a crash pack.
func labErr(err error) error {
	var mismatch *lab.FingerprintMismatchError
	if errors.As(err, &mismatch) {
		return exitError{ExitError, err}
	}
	if errors.Is(err, lab.ErrMalformed) || errors.Is(err, os.ErrNotExist) {
		return usageError{err}
	}
	return err
}

func (e *env) labReplayCommand() *cobra.Command {
	var run bool
	cmd := &cobra.Command{
		Use:   "replay PACK",
		Short: "Check a crash pack and show how to reproduce its failure",
		Long: `replay validates a crash pack (its config hash, its trace against its
fingerprint), prints the failure, the minimised prefix and the command that
re-runs the seed. With --run it runs that command (it needs the Go toolchain
and the source tree the pack came from); the re-run is the same run when it
reports the same fingerprint.`,
		Example: `  orrery lab replay artifacts/TestBank/crashpack-7-3f2a9c.json
  orrery lab replay --run artifacts/TestBank/crashpack-7-3f2a9c.json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			// Reading a pack verifies its trace against its fingerprint.
			pack, err := lab.ReadCrashPack(a[0])
			if err != nil {
				return labErr(err)
			}
			if err := e.print(pack, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "scenario\t%s\n", pack.Scenario)
				fmt.Fprintf(w, "seed\t%d\n", pack.Seed)
				fmt.Fprintf(w, "fingerprint\t%s (verified)\n", pack.Fingerprint)
				fmt.Fprintf(w, "failure\t%s: %s (event %d)\n", pack.Failure.Oracle, pack.Failure.Message, pack.Failure.Event)
				fmt.Fprintf(w, "trace\t%d events, minimised prefix %d\n", pack.TraceLen, pack.MinimizedPrefixLen)
				fmt.Fprintf(w, "replay\t%s\n", pack.Replay.Command)
			}); err != nil {
				return err
			}
			if !run {
				return nil
			}
			sh := exec.CommandContext(cmd.Context(), "sh", "-c", pack.Replay.Command)
			sh.Stdout, sh.Stderr = e.io.Out, e.io.Err
			sh.Env = os.Environ()
			keys := make([]string, 0, len(pack.Replay.Env))
			for k := range pack.Replay.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				sh.Env = append(sh.Env, k+"="+pack.Replay.Env[k])
			}
			return sh.Run()
		},
	}
	cmd.Flags().BoolVar(&run, "run", false, "run the pack's replay command")
	return cmd
}

func (e *env) labTraceCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "trace",
		Short: "Summarise, verify and compare recorded traces",
	})
	info := &cobra.Command{
		Use:     "info FILE",
		Short:   "Summarise a trace file or crash pack",
		Example: `  orrery lab trace info run.trace.json`,
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, a []string) error {
			events, _, err := lab.LoadTrace(a[0])
			if err != nil {
				return labErr(err)
			}
			in := lab.Info(events)
			return e.print(in, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "events\t%d\n", in.Events)
				fmt.Fprintf(w, "processes\t%d\n", in.Processes)
				fmt.Fprintf(w, "virtual time\t%s\n", in.VirtualTime)
				fmt.Fprintf(w, "fingerprint\t%s\n", in.Fingerprint)
				for _, k := range in.Kinds {
					fmt.Fprintf(w, "  %s\t%d\n", k.Kind, k.Count)
				}
			})
		},
	}
	verify := &cobra.Command{
		Use:     "verify FILE",
		Short:   "Check that a trace matches its recorded fingerprint",
		Example: `  orrery lab trace verify crashpack-7-3f2a9c.json`,
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, a []string) error {
			events, fp, err := lab.LoadTrace(a[0])
			if err != nil {
				return labErr(err)
			}
			if err := lab.Verify(events, fp); err != nil {
				return exitError{ExitError, err}
			}
			fmt.Fprintf(e.io.Out, "ok: %d events, fingerprint %s\n", len(events), fp)
			return nil
		},
	}
	diff := &cobra.Command{
		Use:   "diff WANT GOT",
		Short: "Name the first event at which two traces differ",
		Long: `diff compares two traces event by event and prints the first divergence with
the events just before it. It exits 0 when they are equal and 1 when they
differ.`,
		Example: `  orrery lab trace diff recorded.json rerun.json`,
		Args:    args(cobra.ExactArgs(2)),
		RunE: func(_ *cobra.Command, a []string) error {
			want, _, err := lab.LoadTrace(a[0])
			if err != nil {
				return labErr(err)
			}
			got, _, err := lab.LoadTrace(a[1])
			if err != nil {
				return labErr(err)
			}
			d := lab.Diff(want, got)
			if d == nil {
				fmt.Fprintf(e.io.Out, "equal: %d events\n", len(want))
				return nil
			}
			fmt.Fprintln(e.io.Out, d.String())
			return exitError{ExitError, fmt.Errorf("traces differ at event %d", d.Index)}
		},
	}
	cmd.AddCommand(info, verify, diff)
	return cmd
}
