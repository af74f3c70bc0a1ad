package actor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// CloseKilled does not wait for the goroutine of a process killed while in
// user code, and lists it in Running; an idle process that was killed
// returns at once and is waited for, not reported. The parent scope's Close
// still waits for the killed goroutine.
func TestCloseKilledReportsKilledGoroutinesStillRunning(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		ex := sys.Executor()
		sub, err := sys.Root().Sub("children")
		if err != nil {
			t.Errorf("Sub: %v", err)
			return
		}
		busy, err := sub.Go("busy", func(context.Context) error {
			// Deaf to cancellation for an hour.
			return actor.Sleep(context.Background(), ex, time.Hour)
		})
		if err != nil {
			t.Errorf("Go: %v", err)
			return
		}
		idle := spawn(t, sub, &fnActor{})
		busy.Abort()
		idle.Abort()

		t0 := ex.Now()
		_, err = sub.CloseKilled(context.Background())
		var nq *actor.NotQuiescentError
		if !errors.As(err, &nq) || len(nq.Running) != 1 || nq.Running[0] != busy {
			t.Errorf("CloseKilled: %v, want a NotQuiescentError listing only %v", err, busy)
		}
		if d := ex.Now().Sub(t0); d != 0 {
			t.Errorf("CloseKilled waited %v", d)
		}
		if _, err := sys.Close(context.Background()); err != nil {
			t.Errorf("system close: %v", err)
		}
		if d := ex.Now().Sub(t0); d != time.Hour {
			t.Errorf("system close returned after %v, want once the killed goroutine returned (1h)", d)
		}
	})
}
