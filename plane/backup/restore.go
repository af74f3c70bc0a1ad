package backup

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/migrate"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/sqlite"
)

// Effects is the restore's rule for the effects a backup left open.
type Effects string

const (
	// EffectsHold holds every pending and inflight effect until an
	// operator releases or resolves it.
	EffectsHold Effects = "hold"
	// EffectsRerun lets them run again (at least once), for effects known
	// to be idempotent, once the whole copy is written and verified.
	EffectsRerun Effects = "rerun"
)

// ParseEffects reads a rule's name ("" is EffectsHold).
func ParseEffects(s string) (Effects, error) {
	switch Effects(s) {
	case "", EffectsHold:
		return EffectsHold, nil
	case EffectsRerun:
		return EffectsRerun, nil
	}
	return "", fmt.Errorf("%w: %q (hold or rerun)", ErrBadEffects, s)
}

// RestoreOptions configure Restore.
type RestoreOptions struct {
	Effects Effects // "": EffectsHold
	// Reason is recorded on every effect held (empty: one naming the
	// backup).
	Reason string
	// Force restores into a target whose nodes may be alive (a worker's
	// liveness promise still runs by the target's clock); without it such
	// a target is refused (*TargetLiveError) and nothing is written.
	Force    bool
	Kernels  plane.Kernels // replayed by the verification
	Batch    int
	Progress func(migrate.Progress)
	// TempDir holds the working copy of the backup (empty: os.TempDir).
	TempDir string
	Clock   func() time.Time
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	Backup Info           `json:"backup"`
	Copy   migrate.Result `json:"copy"`
	// Held is how many of the backup's open effects the target holds when
	// Restore returns (after an error: at most this many, each held);
	// Released how many the rerun rule let run again.
	Held     int             `json:"held"`
	Released int             `json:"released"`
	Rule     Effects         `json:"effects"`
	Report   *migrate.Report `json:"verification"`
}

// Restore copies the backup at path into target (which must be empty and
// served by no node unless Force), applies the rule for effects and
// verifies target against the backup. A backup Check refuses, or a live
// target, writes nothing to target. The verification's differences are in
// the result's Report (Report.Err); the error is for what kept the restore
// from finishing.
//
// Every effect pending or inflight in the backup is written held, record
// by record inside the import, never pending: a node that claims from the
// target while the copy runs, or a restore cut short anywhere (a killed
// process, a lost connection), leaves no effect of the backup that an
// adapter could run again. The rerun rule releases them only after the
// whole copy is written and verified; a restore that fails before leaves
// them held.
func Restore(ctx context.Context, path string, target store.Store, o RestoreOptions) (RestoreResult, error) {
	rule, err := ParseEffects(string(o.Effects))
	if err != nil {
		return RestoreResult{}, err
	}
	res := RestoreResult{Rule: rule}
	if !o.Force {
		if err := checkTarget(ctx, target); err != nil {
			return res, err
		}
	}
	if res.Backup, err = Check(ctx, path); err != nil {
		return res, err
	}
	// The backup itself is never opened for writing: opening a store
	// upgrades an older schema in place.
	work, err := copyFile(path, o.TempDir)
	if err != nil {
		return res, err
	}
	defer os.Remove(work)
	src, err := sqlite.Open(ctx, work)
	if err != nil {
		return res, fmt.Errorf("opening the backup: %w", err)
	}
	defer src.Close()
	now, err := target.Now(ctx)
	if err != nil {
		return res, fmt.Errorf("reading the target's clock: %w", err)
	}
	reason := o.Reason
	if reason == "" {
		reason = fmt.Sprintf("restored from backup %s: may have run after the backup was taken", path)
	}
	// Only the rerun rule needs the held effects' names, to release them.
	var held []string
	transform := holdOpen(reason, now, func(e *store.PortEffect) {
		res.Held++
		if rule == EffectsRerun {
			held = append(held, e.IntentHash)
		}
	})
	// A backup of a serving store records its nodes as alive: the copy
	// is of the backup, which nothing writes.
	res.Copy, err = migrate.Copy(ctx, src, target, migrate.CopyOptions{Force: true, Batch: o.Batch,
		Survey: o.Progress != nil, Progress: o.Progress, Clock: o.Clock, Transform: transform})
	if err != nil {
		return res, err
	}
	res.Report, err = migrate.Verify(ctx, src, target, migrate.VerifyOptions{Kernels: o.Kernels, Transform: HeldView(), Clock: o.Clock})
	if err != nil || rule != EffectsRerun || !res.Report.OK {
		return res, err
	}
	release := fmt.Sprintf("restored from backup %s with --effects=rerun", path)
	for _, h := range held {
		if _, err := target.ReleaseHeld(ctx, h, release); err != nil {
			return res, fmt.Errorf("releasing effect %s (%d of %d released; the rest stay held): %w", h, res.Released, len(held), err)
		}
		res.Released++
		res.Held--
	}
	return res, nil
}

// checkTarget refuses a target that live nodes may be serving
// (*TargetLiveError).
func checkTarget(ctx context.Context, target store.Store) error {
	live, err := migrate.LiveWorkers(ctx, target)
	if err != nil {
		return fmt.Errorf("reading the target's workers: %w", err)
	}
	if len(live.Workers) == 0 {
		return nil
	}
	return &TargetLiveError{live}
}

// holdOpen is the restore's rule on the records it imports: every pending
// and inflight effect is held with reason at the target's time at, its
// claim dropped, as HoldEffect holds one. held, when set, sees each effect
// that stays held in the target: one of an archived world is withdrawn by
// the import instead (none of an archived world's effects is claimed
// again). The export lists a world before its effects.
func holdOpen(reason string, at time.Time, held func(*store.PortEffect)) func(*store.PortRecord) (bool, error) {
	archived := map[string]bool{}
	return func(r *store.PortRecord) (bool, error) {
		switch r.Kind {
		case store.PortKindWorld:
			archived[r.World.ID] = r.World.Status == store.WorldArchived
		case store.PortKindEffect:
			e := *r.Effect
			if e.State == "pending" || e.State == "inflight" {
				e.State = "held"
				e.ClaimedBy, e.ClaimExpires, e.ClaimNode, e.ClaimIncarnation = "", nil, "", ""
				e.HoldReason, e.ReleaseReason = reason, ""
				if !at.IsZero() {
					t := at.UTC()
					e.HeldAt = &t
				}
				r.Effect = &e
				if held != nil && !archived[e.World] {
					held(&e)
				}
			}
		}
		return true, nil
	}
}

// HeldView is the verification's view of a source whose open effects a
// restore held: every pending and inflight effect is held (and, of an
// archived world, then withdrawn by the import).
func HeldView() func(*store.PortRecord) (bool, error) {
	return holdOpen("", time.Time{}, nil)
}

func copyFile(path, dir string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.CreateTemp(dir, "orrery-restore-*.db")
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(out.Name())
		return "", err
	}
	if err := out.Close(); err != nil {
		os.Remove(out.Name())
		return "", err
	}
	return out.Name(), nil
}
