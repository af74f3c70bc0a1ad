package actor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// A Watcher monitors processes from outside any process and receives their
// Downs in the order the processes completed, with their outcomes; a dead
// target yields an immediate NoProc Down, a demonitored one none, and a
// closed watcher ends Receive.
func TestWatcherReceivesDownsInOrderFromOutside(t *testing.T) {
	errB := errors.New("b failed")
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		w := actor.NewWatcher(sys)
		a := spawn(t, sys.Root(), &fnActor{})
		b := spawn(t, sys.Root(), &fnActor{})
		c := spawn(t, sys.Root(), &fnActor{})
		d := spawn(t, sys.Root(), &fnActor{})
		ra, rb, rc, rd := w.Monitor(a.PID()), w.Monitor(b.PID()), w.Monitor(c.PID()), w.Monitor(d.PID())
		if !w.Demonitor(rd) {
			t.Error("Demonitor of an active monitor reported false")
		}

		// Complete them in the order b, d, c, a.
		if err := b.Send(context.Background(), func(*actor.Proc) error { return errB }); err != nil {
			t.Errorf("send: %v", err)
		}
		if _, err := b.PID().Wait(context.Background()); err != nil {
			t.Errorf("wait: %v", err)
		}
		for _, r := range []*actor.Ref[fn]{d, c, a} {
			if _, err := r.Stop(context.Background()); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
		want := []struct {
			ref actor.MonitorRef
			sev actor.Severity
		}{{rb, actor.Err}, {rc, actor.Cancelled}, {ra, actor.Cancelled}}
		for i, wd := range want {
			got, err := w.Receive(context.Background())
			if err != nil {
				t.Errorf("Receive %d: %v", i, err)
				return
			}
			if got.Ref != wd.ref || got.PID != wd.ref.Target() || got.Outcome.Severity != wd.sev {
				t.Errorf("Down %d: %v of %v (%v), want ref %v with severity %v", i, got.Ref.ID(), got.PID, got.Outcome, wd.ref.ID(), wd.sev)
			}
			if i == 0 && !errors.Is(got.Outcome.Err, errB) {
				t.Errorf("b's Down carries %v, want its error", got.Outcome)
			}
		}
		if got, ok := w.TryReceive(); ok {
			t.Errorf("unexpected Down %v (the demonitored d?)", got)
		}

		// Monitoring a dead process yields NoProc at once.
		rdead := w.Monitor(a.PID())
		if got, ok := w.TryReceive(); !ok || got.Ref != rdead || !got.NoProc() {
			t.Errorf("monitor of a dead process: %v, %v; want an immediate NoProc Down", got, ok)
		}

		// Receive honours its context, and Close ends it.
		ctx, cancel := actor.WithTimeout(context.Background(), sys.Executor(), time.Second)
		defer cancel()
		if _, err := w.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Receive with nothing to receive: %v, want DeadlineExceeded", err)
		}
		w.Close()
		if _, err := w.Receive(context.Background()); !errors.Is(err, actor.ErrWatcherClosed) {
			t.Errorf("Receive after Close: %v, want ErrWatcherClosed", err)
		}
	})
}

// Close removes the watcher's monitors: a process completing afterwards
// delivers nothing to it.
func TestWatcherCloseRemovesMonitors(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		w := actor.NewWatcher(sys)
		a := spawn(t, sys.Root(), &fnActor{})
		w.Monitor(a.PID())
		w.Close()
		if _, err := a.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		if got, ok := w.TryReceive(); ok {
			t.Errorf("closed watcher received %v", got)
		}
	})
}
