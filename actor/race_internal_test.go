package actor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

// A branch whose spawn fails is not dropped: the race drains the branches
// already started and returns a *BranchError naming the one that failed.
// The sub-scope is closed before the race so the first spawn fails.
func TestRaceBranchSpawnFailureIsBranchError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := NewSystem(WithExecutor(NewExecutor(1)))
		sub, err := sys.Root().Sub("race")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		ran := false
		w, _, err := raceIn(context.Background(), sub, CancelReason{Kind: CancelRaceLost},
			[]func(context.Context) (int, error){func(context.Context) (int, error) { ran = true; return 1, nil }})
		var be *BranchError
		if w != -1 || !errors.As(err, &be) || be.Index != 0 || !errors.Is(err, ErrScopeClosed) {
			t.Errorf("raceIn on a closed scope: winner %d, err %v; want -1 and a *BranchError{0, ErrScopeClosed}", w, err)
		}
		if ran {
			t.Error("the branch ran although its spawn failed")
		}
		if _, err := sys.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
