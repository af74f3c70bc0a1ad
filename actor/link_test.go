package actor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/orrery-run/orrery/actor"
)

func wait(t *testing.T, pid actor.PID) actor.Outcome {
	t.Helper()
	o, err := pid.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestMessagesBeforeExitArriveBeforeDown(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		for iter := range 20 {
			events := make(chan any, 16)
			b := spawn(t, sys.Root(), &fnActor{info: func(_ *actor.Proc, info any) error { events <- info; return nil }})
			a := spawnProbe(t, sys.Root())
			do(t, b, func(p *actor.Proc) { p.Monitor(a.pid()) })
			release := block(t, b) // both the message and the Down queue up
			_ = a.ref.Send(context.Background(), func(p *actor.Proc) error {
				if err := b.TrySend(func(*actor.Proc) error { events <- "m"; return nil }); err != nil {
					return err
				}
				if iter%2 == 0 {
					p.Exit(nil)
					return nil
				}
				return errors.New("crash")
			})
			wait(t, a.pid())
			release()
			if first := <-events; first != "m" {
				t.Fatalf("iteration %d: %#v arrived before the message sent ahead of the exit", iter, first)
			}
			if d, ok := (<-events).(actor.Down); !ok || d.PID != a.pid() {
				t.Fatalf("iteration %d: want the Down after the message, got %#v", iter, d)
			}
			_, _ = b.Stop(context.Background())
		}
		closeSys(t, sys)
	})
}

// TestDownOrderFollowsRefsUnderConcurrentMonitors: watchers that monitor the
// same target concurrently get their Downs sent in ref order, the documented
// tie-break key, whatever the interleaving of the Monitor calls. The window
// is narrow, so the check is repeated; it cannot fail spuriously.
// Kept beside lab's TestLabDownOrderStableUnderManyMonitors: it needs 300 runs under real parallelism, outside a bubble, to hit the window.
func TestDownOrderFollowsRefsUnderConcurrentMonitors(t *testing.T) {
	const watchers, iterations = 16, 300
	for iter := range iterations {
		tl := &traceLog{}
		sys := newSys(t, tl.opt())
		target := spawnProbe(t, sys.Root())
		var mu sync.Mutex
		refOf := map[actor.PID]uint64{}
		var wg sync.WaitGroup
		var ws []*probe
		for range watchers {
			w := spawnProbe(t, sys.Root())
			ws = append(ws, w)
			wg.Add(1)
			_ = w.ref.Send(context.Background(), func(p *actor.Proc) error {
				defer wg.Done()
				r := p.Monitor(target.pid())
				mu.Lock()
				refOf[p.Self()] = r.ID()
				mu.Unlock()
				return nil
			})
		}
		wg.Wait()
		_, _ = target.ref.Stop(context.Background())
		for _, w := range ws {
			<-w.infos // every Down is delivered before the watchers are shut down
		}
		closeSys(t, sys) // quiescent: every trace event is in
		var sent []uint64
		for _, ev := range tl.of(actor.TraceDown) {
			if ev.Peer == target.pid() {
				sent = append(sent, refOf[ev.PID])
			}
		}
		if len(sent) != watchers {
			t.Fatalf("iteration %d: %d Downs traced, want %d", iter, len(sent), watchers)
		}
		if !slices.IsSorted(sent) {
			t.Fatalf("iteration %d: Downs sent in ref order %v, want increasing refs", iter, sent)
		}
	}
}
