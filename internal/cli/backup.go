package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/orrery-run/orrery/plane/backup"
	"github.com/orrery-run/orrery/plane/migrate"
)

func (e *env) backupCommand() *cobra.Command {
	var from, to string
	var force bool
	cmd := &cobra.Command{
		Use:   "backup --from STORE --to FILE",
		Short: "Take a consistent online backup of a store into a SQLite file",
		Long: `backup writes a consistent copy of a store into a new SQLite file while
nodes keep serving it.

From a SQLite store it runs SQLite's VACUUM INTO on a connection of its own:
one read transaction, so the file is the store as of the last commit before
the backup began, and writers are not blocked (a WAL reader never blocks a
writer; only the WAL's checkpoint waits for the backup to finish). From a
postgres:// store it takes a logical backup: the store's export, one
consistent snapshot, written into a SQLite file. For PostgreSQL's own
backups (pg_dump, base backups with WAL archiving for point-in-time
recovery) see docs/operations.md, "Backup and restore".

The file is written beside FILE and renamed into place only after it has
been checked (it opens, SQLite's integrity_check passes, its schema is
this binary's); its counts are printed. An existing FILE is refused
(exit 4) unless --force replaces it. Bring a backup back with
"orrery restore".`,
		Example: `  orrery backup --from orrery.db --to backups/orrery-$(date +%F-%H%M).db
  orrery backup --from postgres://orrery@db:5432/orrery --to pg-logical.db --force`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return e.backup(cmd.Context(), from, to, force) },
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", "orrery.db", "the store to back up: a SQLite path or a postgres:// DSN")
	fl.StringVar(&to, "to", "", "the backup file to write (a SQLite file)")
	fl.BoolVar(&force, "force", false, "replace an existing backup file")
	return cmd
}

// backupExit maps the library's errors to the package's exit codes.
func backupExit(err error) error {
	switch {
	case errors.Is(err, backup.ErrExists), errors.Is(err, migrate.ErrTargetNotEmpty), errors.Is(err, migrate.ErrCollision):
		return exitError{ExitConflict, err}
	case errors.Is(err, backup.ErrBadEffects), errors.Is(err, migrate.ErrBadSpec), errors.Is(err, migrate.ErrSameStore):
		return usageError{err}
	case errors.Is(err, backup.ErrTargetLive):
		return exitError{ExitConflict, err}
	}
	return err
}

func (e *env) backup(ctx context.Context, from, to string, force bool) error {
	if from == "" || to == "" {
		return usagef("backup needs --from and --to")
	}
	if migrate.IsPostgres(to) {
		return usagef("backup writes a SQLite file, not %s: use orrery migrate to copy into PostgreSQL", "a postgres:// store")
	}
	var res backup.Result
	var err error
	if migrate.IsPostgres(from) {
		src, _, oerr := openStore(ctx, from, 10*time.Second)
		if oerr != nil {
			return fmt.Errorf("opening the source: %w", oerr)
		}
		defer src.Close()
		res, err = backup.BackupStore(ctx, src, to, backup.Options{Force: force})
	} else {
		res, err = backup.Backup(ctx, from, to, backup.Options{Force: force})
	}
	if err != nil {
		return backupExit(err)
	}
	if e.output == "json" {
		return writeJSON(e.io.Out, res)
	}
	fmt.Fprintf(e.io.Out, "backup: %s -> %s in %s\n", from, to, res.Elapsed.Round(time.Millisecond))
	printInfo(e.io.Out, res.Info)
	return nil
}

func printInfo(w io.Writer, i backup.Info) {
	fmt.Fprintf(w, "checked: integrity ok, schema version %d, %.1f MB\n", i.SchemaVersion, float64(i.Bytes)/1e6)
	fmt.Fprintf(w, "worlds: %d, events: %d, effects:", i.Worlds, i.Events)
	states := make([]string, 0, len(i.Effects))
	for s := range i.Effects {
		states = append(states, s)
	}
	sort.Strings(states)
	if len(states) == 0 {
		fmt.Fprint(w, " none")
	}
	for _, s := range states {
		fmt.Fprintf(w, " %d %s", i.Effects[s], s)
	}
	fmt.Fprintln(w)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type restoreFlags struct {
	from, to, effects, reason string
	inPlace, quiet, force     bool
}

func (e *env) restoreCommand() *cobra.Command {
	var f restoreFlags
	cmd := &cobra.Command{
		Use:   "restore --from BACKUP --to STORE",
		Short: "Restore a backup into an empty store and hold the effects it left open",
		Long: `restore checks a backup file (written by orrery backup), copies it into an
empty store (a SQLite path or a postgres:// DSN) as orrery migrate does,
applies the restore's rule for effects, and verifies the store against the
backup (counts, heads, snapshots, each world's state hash replayed on both,
run statuses). A file that is not an Orrery store, is damaged or truncated,
or was written by a newer binary is refused before anything is written.
Run it before any node serves the target: a target where a node's
heartbeat is still alive (by the store's clock) is refused (exit 4, naming
the nodes) unless --force.

Effects. Every effect pending or in flight in the backup may have run after
the backup was taken: its receipt was consumed in the history a restore
throws away. So restore HOLDS each of them (--effects=hold, the default): no
adapter runs it until you decide. Ask the external system, then either
  orrery effects resolve ID --status ok ...   it ran: deliver its receipt
  orrery effects release ID                   it did not: run it again
  orrery effects release --all-held           run every held one again
A released effect runs at least once more under its unchanged idempotency
key. Each is written held as it is copied, never pending, so a restore cut
short (killed, a lost connection) leaves none that an adapter could claim.
--effects=rerun releases them all instead, for effects known to be
idempotent, once the whole copy is written and verified. Done effects keep their receipts and never run again. The
number held is printed.

An old backup also lacks every input acknowledged after it. A client that
sends one again makes its world take the step again and publish the same
intent, which the restored store has never seen: that effect runs again
unless its idempotency key reaches a service that honours it.

--in-place applies the rule alone to a store restored by other tools (a
pg_restore of a pg_dump, a recovered base backup, a copied file): it holds
every pending and in-flight effect of --to, which must not be served yet.`,
		Example: `  orrery restore --from backups/orrery-2026-11-28.db --to orrery.db
  orrery restore --from orrery-backup.db --to postgres://orrery@db:5432/orrery --effects=rerun
  orrery restore --in-place --to postgres://orrery@db:5432/orrery`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return e.restore(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "the backup file")
	fl.StringVar(&f.to, "to", "", "the store to restore into (empty): a SQLite path or a postgres:// DSN")
	fl.StringVar(&f.effects, "effects", "hold", "the rule for effects open in the backup: hold or rerun")
	fl.StringVar(&f.reason, "reason", "", "recorded with every hold (default: names the backup)")
	fl.BoolVar(&f.inPlace, "in-place", false, "only hold the open effects of --to, restored by other tools")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress on stderr")
	fl.BoolVar(&f.force, "force", false, "restore into a store whose nodes may still be alive")
	return cmd
}

func (e *env) restore(ctx context.Context, f restoreFlags) error {
	rule, err := backup.ParseEffects(f.effects)
	if err != nil {
		return usageError{err}
	}
	if f.to == "" {
		return usagef("restore needs --to")
	}
	if f.inPlace {
		if f.from != "" {
			return usagef("--in-place takes no --from: it holds the effects of --to")
		}
		if rule != backup.EffectsHold {
			return usagef("--in-place holds effects; with --effects=rerun there is nothing to do")
		}
		dst, _, err := openStore(ctx, f.to, 10*time.Second)
		if err != nil {
			return fmt.Errorf("opening the target: %w", err)
		}
		defer dst.Close()
		reason := f.reason
		if reason == "" {
			reason = "restored by other tools: may have run after the backup was taken"
		}
		n, err := dst.HoldOpenEffects(ctx, reason)
		if err != nil {
			return err
		}
		if e.output == "json" {
			return writeJSON(e.io.Out, struct {
				Held int `json:"held"`
			}{n})
		}
		fmt.Fprintf(e.io.Out, "held %d open effects: release or resolve each (orrery effects release / resolve)\n", n)
		return nil
	}
	if f.from == "" {
		return usagef("restore needs --from")
	}
	if !migrate.IsPostgres(f.to) {
		a, aerr := filepath.Abs(f.from)
		b, berr := filepath.Abs(f.to)
		if aerr == nil && berr == nil && a == b {
			return usagef("restore --from and --to name the same file")
		}
	}
	dst, _, err := openStore(ctx, f.to, 10*time.Second)
	if err != nil {
		return fmt.Errorf("opening the target: %w", err)
	}
	defer dst.Close()
	progress := func(msg string) {
		if !f.quiet {
			fmt.Fprintln(e.io.Err, msg)
		}
	}
	progress(fmt.Sprintf("restore: %s -> %s", f.from, f.to))
	o := backup.RestoreOptions{Effects: rule, Reason: f.reason, Kernels: e.kernels, Force: f.force}
	if !f.quiet {
		o.Progress = func(p migrate.Progress) { progress(progressLine(p)) }
	}
	res, err := backup.Restore(ctx, f.from, dst, o)
	if err != nil {
		return backupExit(err)
	}
	if e.output == "json" {
		if err := writeJSON(e.io.Out, res); err != nil {
			return err
		}
	} else {
		printInfo(e.io.Out, res.Backup)
		printReport(e.io.Out, f.from, f.to, &res.Copy, res.Report)
		switch rule {
		case backup.EffectsHold:
			fmt.Fprintf(e.io.Out, "held %d effects open in the backup: release or resolve each (orrery effects release / resolve)\n", res.Held)
		case backup.EffectsRerun:
			if res.Held > 0 {
				fmt.Fprintf(e.io.Out, "held %d effects open in the backup: the verification failed, so none was released\n", res.Held)
			} else {
				fmt.Fprintf(e.io.Out, "effects open in the backup run again: %d\n", res.Released)
			}
		}
	}
	if err := res.Report.Err(); err != nil {
		return exitError{ExitError, err}
	}
	return nil
}
