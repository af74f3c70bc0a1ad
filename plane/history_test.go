package plane_test

import (
	"errors"
	"fmt"

	"testing"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// TestStateAtDeriveAndForkAtAnyHeight (every backend): the state at each
// height is the journal's (its hash is the record's), Derive re-derives
// each step with the intents and timers it made, and a fork at a height
// with no snapshot boots at that state with nothing awaited, its lineage
// naming the height and the state's hash.
func TestStateAtDeriveAndForkAtAnyHeight(t *testing.T) {
	forEachBackend(t, 11, "history", func(r *rig) error {
		st, ctx := r.Store, r.Ctx
		if err := createAssigned(ctx, st, "src", "A"); err != nil {
			return err
		}
		h, err := plane.StartHost(ctx, r.Root, r.hostConfig("A", st, nil))
		if err != nil {
			return err
		}
		defer h.Stop(ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: r.Ex})
		for i, v := range []any{Add{By: 3, Key: "a"}, Pay{}, Arm{AfterMs: 60000}, Add{By: 4, Key: "b"}} {
			if _, err := c.Send(ctx, "src", v, fmt.Sprint(i)); err != nil {
				return err
			}
		}
		if err := r.drained("src"); err != nil {
			return err
		}
		ops, err := plane.NewOps(st, kernels())
		if err != nil {
			return err
		}
		journal, err := journalOf(ctx, st, "src")
		if err != nil || len(journal) != 4 {
			return fmt.Errorf("journal of %d records: %v", len(journal), err)
		}
		for hgt := uint64(1); hgt <= 4; hgt++ {
			s, err := ops.StateAt(ctx, "src", hgt)
			if err != nil {
				return fmt.Errorf("state at %d: %w", hgt, err)
			}
			in, err := world.RecordInput(journal[hgt-1])
			if err != nil || s.Height != hgt || in.Seq == 0 {
				return fmt.Errorf("state at %d: height %d, %v", hgt, s.Height, err)
			}
		}
		if _, err := ops.StateAt(ctx, "src", 5); !errors.Is(err, plane.ErrInvalid) {
			return fmt.Errorf("state above the head: %v", err)
		}
		steps, err := ops.Derive(ctx, "src", journal[1:])
		if err != nil || len(steps) != 3 {
			return fmt.Errorf("derive: %d steps, %v", len(steps), err)
		}
		if in := steps[0].Result.Intents; len(in) != 1 || in[0].Kind != world.KindHTTPRequest || steps[0].Height != 2 {
			return fmt.Errorf("the Pay step's intents %+v", in)
		}
		if ts := steps[1].Result.TimerSets; len(ts) != 1 || ts[0].DeliverAt.IsZero() {
			return fmt.Errorf("the Arm step's timers %+v", ts)
		}

		// Height 3 awaits the effect and the timer; no snapshot is there.
		if s, ok, err := st.SnapshotBelow(ctx, "src", 4); err != nil || (ok && s.Height == 3) {
			return fmt.Errorf("a snapshot at 3 (%v): the fork would not be derived", err)
		}
		at3, err := ops.StateAt(ctx, "src", 3)
		if err != nil {
			return err
		}
		src3, err := world.Load(counterDef(), "src", at3)
		if err != nil || len(src3.Awaiting()) != 1 || len(src3.Timers()) != 1 {
			return fmt.Errorf("the source at 3 should await one effect and one timer: %v", err)
		}
		rec, err := ops.WorldFork(ctx, "src", 3, "fork")
		if err != nil {
			return err
		}
		if rec.ParentWorld != "src" || rec.ForkedAtHeight != 3 || rec.ParentSnapshotHash != world.Hash(at3.State) {
			return fmt.Errorf("lineage %+v", rec)
		}
		booted, _, err := plane.Restore(ctx, st, kernels(), "fork")
		if err != nil {
			return err
		}
		fv, _ := value(booted.Snapshot(), "fork")
		sv, _ := src3.Value()
		if fmt.Sprint(fv) != fmt.Sprint(sv) || booted.Height() != 3 || len(booted.Awaiting()) != 0 || len(booted.Timers()) != 0 {
			return fmt.Errorf("fork boots at %d %+v awaiting %v timers %v; the source at 3 %+v", booted.Height(), fv, booted.Awaiting(), booted.Timers(), sv)
		}
		if again, err := ops.WorldFork(ctx, "src", 3, "fork"); err != nil || again.ID != "fork" {
			return fmt.Errorf("a repeated fork: %v", err)
		}
		if _, err := ops.WorldFork(ctx, "src", 1, "fork"); !errors.Is(err, plane.ErrConflict) {
			return fmt.Errorf("another fork under the same id: %v", err)
		}
		if _, err := ops.WorldFork(ctx, "src", 9, "fork-9"); !errors.Is(err, plane.ErrInvalid) {
			return fmt.Errorf("a fork above the head: %v", err)
		}
		// Below its fork point a fork has no history of its own.
		if _, err := ops.StateAt(ctx, "fork", 2); !errors.Is(err, plane.ErrInvalid) {
			return fmt.Errorf("the fork's state below its fork point: %v", err)
		}
		return nil
	})
}
