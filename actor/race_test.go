package actor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// TestRaceWinnerIsFirstToReturnEvenWithError: the first completion wins,
// success or not, as in Go's select.
func TestRaceWinnerIsFirstToReturnEvenWithError(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		boom := errors.New("boom")
		w, _, err := actor.Race(context.Background(), sys.Root(),
			func(ctx context.Context) (int, error) { return 0, boom },
			func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
		if w != 0 || !errors.Is(err, boom) {
			t.Fatalf("Race = (%d, %v), want (0, boom)", w, err)
		}
		closeSys(t, sys)
	})
}

// TestRaceContextCancelDrainsAllBranches: if the caller gives up, every
// branch is cancelled and drained before Race returns the context error.
func TestRaceContextCancelDrainsAllBranches(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var drained atomic.Int32
		br := func(bctx context.Context) (int, error) {
			defer drained.Add(1)
			<-bctx.Done()
			return 0, bctx.Err()
		}
		w, _, err := actor.Race(ctx, sys.Root(), br, br)
		if w != -1 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Race = (%d, %v), want (-1, deadline exceeded)", w, err)
		}
		if drained.Load() != 2 {
			t.Fatalf("%d branches drained before Race returned, want 2", drained.Load())
		}
		closeSys(t, sys)
	})
}

// TestRacePanickingBranchWinsWithPanicOutcome: a panic is a completion and
// is reported, never swallowed.
func TestRacePanickingBranchWinsWithPanicOutcome(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		w, _, err := actor.Race(context.Background(), sys.Root(),
			func(ctx context.Context) (int, error) { panic("bad branch") },
			func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
		var oe *actor.OutcomeError
		if w != 0 || !errors.As(err, &oe) || oe.Outcome.Severity != actor.Panicked {
			t.Fatalf("Race = (%d, %v), want branch 0 with a Panicked outcome", w, err)
		}
		if o, _ := sys.Close(context.Background()); o.Severity != actor.Panicked {
			t.Fatalf("system outcome %v, want panicked (the panic stays visible)", o)
		}
	})
}

// TestScopeGoTaskOutcomes maps task completions onto the lattice (INV-6A
// "Task Completion -> Outcome").
func TestScopeGoTaskOutcomes(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		boom := errors.New("boom")
		cases := []struct {
			name string
			f    func(ctx context.Context) error
			want actor.Severity
			stop bool
		}{
			{"returns", func(context.Context) error { return nil }, actor.Ok, false},
			{"error", func(context.Context) error { return boom }, actor.Err, false},
			{"panics", func(context.Context) error { panic("x") }, actor.Panicked, false},
			{"cancelled", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, actor.Cancelled, true},
		}
		for _, c := range cases {
			pid, err := sys.Root().Go(c.name, c.f)
			if err != nil {
				t.Fatal(err)
			}
			if c.stop {
				pid.Cancel(actor.CancelReason{Kind: actor.CancelRequested})
			}
			o, err := pid.Wait(context.Background())
			if err != nil || o.Severity != c.want {
				t.Errorf("%s: outcome %v (%v), want %v", c.name, o, err, c.want)
			}
		}
		_, _ = sys.Close(context.Background())
	})
}

// Race and Select with no branches return ErrNoBranches at once instead of
// waiting for a winner that cannot exist.
func TestRaceAndSelectWithNoBranchesReturnErrNoBranches(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		start := time.Now()
		for name, f := range map[string]func(context.Context, *actor.Scope, ...func(context.Context) (int, error)) (int, int, error){
			"Race": actor.Race[int], "Select": actor.Select[int],
		} {
			w, _, err := f(context.Background(), sys.Root())
			if w != -1 || !errors.Is(err, actor.ErrNoBranches) {
				t.Errorf("%s(): winner %d, err %v; want -1, ErrNoBranches", name, w, err)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("returned after %v, want at once", d)
		}
		closeSys(t, sys)
	})
}
