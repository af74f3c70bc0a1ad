package actor_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// TestParkForWakesOnUnparkOnTheDeadlineOrOnCancel: ParkFor returns when
// the parker is unparked (before d), when d has passed, or with ctx's
// error; with d <= 0 it returns at once and leaves a pending permit.
func TestParkForWakesOnUnparkOnTheDeadlineOrOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ex := actor.NewExecutor(1)
		ctx := context.Background()
		p := ex.NewParker()

		start := time.Now()
		go func() { time.Sleep(time.Second); p.Unpark() }()
		if err := actor.ParkFor(ctx, ex, p, time.Hour); err != nil || time.Since(start) != time.Second {
			t.Fatalf("unparked after 1s: %v after %v", err, time.Since(start))
		}

		start = time.Now()
		if err := actor.ParkFor(ctx, ex, p, 5*time.Second); err != nil || time.Since(start) != 5*time.Second {
			t.Fatalf("deadline of 5s: %v after %v", err, time.Since(start))
		}

		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(time.Second); cancel() }()
		if err := actor.ParkFor(cctx, ex, p, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v, want context.Canceled", err)
		}

		p.Unpark()
		if err := actor.ParkFor(ctx, ex, p, 0); err != nil {
			t.Fatalf("d = 0: %v", err)
		}
		start = time.Now()
		if err := actor.ParkFor(ctx, ex, p, time.Hour); err != nil || time.Since(start) != 0 {
			t.Fatalf("the permit left by d = 0 was not there: %v after %v", err, time.Since(start))
		}
	})
}
