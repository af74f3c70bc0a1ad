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
	// EffectsRerun lets them run again at once (at least once), for
	// effects known to be idempotent.
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
	Reason   string
	Kernels  plane.Kernels // replayed by the verification
	Batch    int
	Progress func(migrate.Progress)
	// TempDir holds the working copy of the backup (empty: os.TempDir).
	TempDir string
	Clock   func() time.Time
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	Backup Info            `json:"backup"`
	Copy   migrate.Result  `json:"copy"`
	Held   int             `json:"held"`
	Rule   Effects         `json:"effects"`
	Report *migrate.Report `json:"verification"`
}

// Restore copies the backup at path into target (which must be empty),
// applies the rule for effects and verifies target against the backup.
// A backup Check refuses writes nothing to target. The verification's
// differences are in the result's Report (Report.Err); the error is for
// what kept the restore from finishing.
func Restore(ctx context.Context, path string, target store.Store, o RestoreOptions) (RestoreResult, error) {
	rule, err := ParseEffects(string(o.Effects))
	if err != nil {
		return RestoreResult{}, err
	}
	res := RestoreResult{Rule: rule}
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
	// A backup of a serving store records its nodes as alive: the copy
	// is of the backup, which nothing writes.
	res.Copy, err = migrate.Copy(ctx, src, target, migrate.CopyOptions{Force: true, Batch: o.Batch,
		Survey: o.Progress != nil, Progress: o.Progress, Clock: o.Clock})
	if err != nil {
		return res, err
	}
	var transform func(*store.PortRecord) (bool, error)
	if rule == EffectsHold {
		reason := o.Reason
		if reason == "" {
			reason = fmt.Sprintf("restored from backup %s: may have run after the backup was taken", path)
		}
		if res.Held, err = target.HoldOpenEffects(ctx, reason); err != nil {
			return res, fmt.Errorf("holding the restored open effects: %w", err)
		}
		transform = HeldView()
	}
	res.Report, err = migrate.Verify(ctx, src, target, migrate.VerifyOptions{Kernels: o.Kernels, Transform: transform, Clock: o.Clock})
	return res, err
}

// HeldView is the verification's view of a source whose open effects a
// restore held: every pending effect, and every inflight one of a world
// not archived (an archived world's is withdrawn by the import), is held.
// The export lists a world before its effects.
func HeldView() func(*store.PortRecord) (bool, error) {
	archived := map[string]bool{}
	return func(r *store.PortRecord) (bool, error) {
		switch r.Kind {
		case store.PortKindWorld:
			archived[r.World.ID] = r.World.Status == store.WorldArchived
		case store.PortKindEffect:
			e := *r.Effect
			if e.State == "pending" || (e.State == "inflight" && !archived[e.World]) {
				e.State = "held"
				e.ClaimedBy, e.ClaimExpires, e.ClaimNode, e.ClaimIncarnation = "", nil, "", ""
				r.Effect = &e
			}
		}
		return true, nil
	}
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
