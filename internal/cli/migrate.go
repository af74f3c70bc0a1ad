package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/plane/migrate"
	"github.com/orrery-run/orrery/store"
)

type migrateFlags struct {
	from, to     string
	intoNonEmpty bool
	resume       bool
	force        bool
	quiet        bool
	verifyOnly   bool
	batch        int
}

func (e *env) migrateCommand() *cobra.Command {
	var f migrateFlags
	cmd := &cobra.Command{
		Use:   "migrate --from SRC --to DST",
		Short: "Copy a whole store into another (SQLite and PostgreSQL, either way) and verify the copy",
		Long: `migrate copies every world of one store into another, with its journal,
snapshots, inbox and cursor, leases (released, their epochs kept), effects and
timers with their state (a claim in flight is returned to its queue, to run
again as after a crash), dedupe records, fabric dedupe, workflow runs,
projector watermarks and the effect queue's counter. SRC and DST are each a
SQLite file path or a postgres:// DSN (add ?schema=NAME to use another schema
than "orrery"): SQLite to PostgreSQL, back, or between two of either.

It refuses, before writing anything:
  - a target that is not empty (exit 4), unless --into-nonempty, which merges
    only when no world or stream of the source exists in the target, or
    --resume, which completes a copy an earlier run left part-way (stopped,
    or a batch whose answer was lost): every record the target holds as the
    copy writes it is left as it is, the rest is copied, and a record the
    target holds as anything else is a conflict (exit 4; nothing is
    overwritten);
  - a source whose nodes promised liveness that has not run out by the
    store's clock (exit 4): a copy of a store being written misses every
    write after its snapshot. Stop the nodes first, or pass --force.

It then verifies and prints the verification: record counts per kind; each
world's universe, status, journal head and floor, snapshots, inbox and
cursor, lease epoch, effects and timers; each world's state hash, replayed
on both stores with this binary's world definitions (a world whose universe
this binary lacks is listed "not replayed (no definition)"); each workflow
run's status. A failed check exits 1 and names the worlds that differ.
--verify-only runs the verification alone between two stores.

Progress goes to stderr every second (records, worlds, rate, ETA); --quiet
silences it. -o json prints the verification as one JSON document.`,
		Example: `  orrery migrate --from orrery.db --to postgres://orrery@db:5432/orrery
  orrery migrate --from postgres://orrery@db:5432/orrery --to ./copy.db -o json
  orrery migrate --from orrery.db --to postgres://orrery@db:5432/orrery --resume
  orrery migrate --from orrery.db --to postgres://orrery@db:5432/orrery --verify-only`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return e.migrate(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "the source store: a SQLite path or a postgres:// DSN")
	fl.StringVar(&f.to, "to", "", "the target store: a SQLite path or a postgres:// DSN")
	fl.BoolVar(&f.intoNonEmpty, "into-nonempty", false, "merge into a target that holds records, when no world or stream collides")
	fl.BoolVar(&f.resume, "resume", false, "complete a copy an earlier run left part-way in the target (never overwrites a record)")
	fl.BoolVar(&f.force, "force", false, "copy even though the source's nodes may still be alive (their later writes are not copied)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress on stderr")
	fl.BoolVar(&f.verifyOnly, "verify-only", false, "only verify that the target equals the source")
	fl.IntVar(&f.batch, "batch", migrate.DefaultBatch, "records per import transaction")
	return cmd
}

// migrateExit maps the library's errors to the package's exit codes.
func migrateExit(err error) error {
	switch {
	case errors.Is(err, migrate.ErrBadSpec), errors.Is(err, migrate.ErrSameStore):
		return usageError{err}
	case errors.Is(err, migrate.ErrTargetNotEmpty), errors.Is(err, migrate.ErrCollision),
		errors.Is(err, migrate.ErrSourceLive), errors.Is(err, store.ErrConflict):
		return exitError{ExitConflict, err}
	}
	return err
}

func (e *env) migrate(ctx context.Context, f migrateFlags) error {
	if f.from == "" || f.to == "" {
		return usagef("migrate needs --from and --to")
	}
	if f.batch <= 0 {
		return usagef("--batch must be positive, not %d", f.batch)
	}
	from, to, err := migrate.ParsePair(f.from, f.to)
	if err != nil {
		return migrateExit(err)
	}
	src, _, err := openStore(ctx, f.from, 10*time.Second)
	if err != nil {
		return fmt.Errorf("opening the source (%s): %w", from, err)
	}
	defer src.Close()
	dst, _, err := openStore(ctx, f.to, 10*time.Second)
	if err != nil {
		return fmt.Errorf("opening the target (%s): %w", to, err)
	}
	defer dst.Close()
	progress := func(msg string) {
		if !f.quiet {
			fmt.Fprintln(e.io.Err, msg)
		}
	}
	var copied *migrate.Result
	if !f.verifyOnly {
		progress(fmt.Sprintf("migrate: %s -> %s", from, to))
		res, err := migrate.Copy(ctx, src, dst, migrate.CopyOptions{
			Batch: f.batch, IntoNonEmpty: f.intoNonEmpty, Resume: f.resume, Force: f.force, Survey: !f.quiet,
			Progress: func(p migrate.Progress) { progress(progressLine(p)) },
		})
		if err != nil {
			return migrateExit(err)
		}
		copied = &res
	}
	progress("migrate: verifying (counts, heads, snapshots, replayed state hashes, run statuses)")
	rep, err := migrate.Verify(ctx, src, dst, migrate.VerifyOptions{Kernels: e.kernels, Subset: f.intoNonEmpty})
	if err != nil {
		return err
	}
	if e.output == "json" {
		out := struct {
			Source string          `json:"source"`
			Target string          `json:"target"`
			Copy   *migrate.Result `json:"copy,omitempty"`
			*migrate.Report
		}{from.String(), to.String(), copied, rep}
		enc := json.NewEncoder(e.io.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		printReport(e.io.Out, from.String(), to.String(), copied, rep)
	}
	if err := rep.Err(); err != nil {
		return exitError{ExitError, err}
	}
	return nil
}

func progressLine(p migrate.Progress) string {
	s := fmt.Sprintf("migrate: %d records, %d worlds, %.1f MB, %.0f records/s", p.Records, p.Worlds, float64(p.Bytes)/1e6, p.Rate())
	if p.TotalRecords > 0 {
		s += fmt.Sprintf(" (%.0f%% of %d records, %d worlds)", 100*float64(p.Records)/float64(p.TotalRecords), p.TotalRecords, p.TotalWorlds)
	}
	if eta, ok := p.ETA(); ok && !p.Done {
		s += fmt.Sprintf(", ETA %s", eta.Round(time.Second))
	}
	if p.Done {
		s += fmt.Sprintf(", done in %s", time.Duration(p.Elapsed*float64(time.Second)).Round(time.Millisecond))
	}
	return s
}

func printReport(w io.Writer, from, to string, copied *migrate.Result, r *migrate.Report) {
	fmt.Fprintf(w, "source: %s\ntarget: %s\n", from, to)
	if copied != nil {
		secs := copied.Elapsed.Seconds()
		if secs <= 0 {
			secs = 1e-9
		}
		fmt.Fprintf(w, "copied: %d records, %d worlds, %.1f MB in %s (%.0f worlds/s, %.0f records/s, %.1f MB/s)\n",
			copied.Total(), copied.Worlds, float64(copied.Bytes)/1e6, copied.Elapsed.Round(time.Millisecond),
			float64(copied.Worlds)/secs, float64(copied.Total())/secs, float64(copied.Bytes)/1e6/secs)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECORDS\tSOURCE\tTARGET\tCHECK")
	for _, c := range r.Counts {
		ok := "ok"
		if !c.OK {
			ok = "DIFFERS"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", c.Kind, c.Source, c.Target, ok)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "worlds: %d checked; %d replayed on both stores, %d workflow runs compared, %d not replayed (no definition)\n",
		r.Worlds, r.Replayed, r.Runs, len(r.NotReplayed))
	for i, n := range r.NotReplayed {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.NotReplayed)-i)
			break
		}
		fmt.Fprintf(w, "  %s (universe %s): not replayed (no definition)\n", n.World, n.Universe)
	}
	if len(r.Differences) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WORLD\tCHECK\tSOURCE\tTARGET")
		for _, d := range r.Differences {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.World, d.Check, d.Source, d.Target)
		}
		_ = tw.Flush()
	}
	if r.OK {
		fmt.Fprintln(w, "verification passed")
	} else {
		fmt.Fprintf(w, "verification FAILED: %d worlds differ\n", len(r.DifferingWorlds()))
	}
}
