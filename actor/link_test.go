package actor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

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

func TestDownOrderIsStable(t *testing.T) {
	bubble(t, func(t *testing.T) {
		for iter := range 50 {
			tl := &traceLog{}
			sys := newSys(t, tl.opt())

			// One target, a link and many monitors from one trapping watcher:
			// the Exit comes first (links before monitors), then the Downs in
			// increasing ref order.
			w := spawnProbe(t, sys.Root(), actor.WithTrapExits())
			target := spawnProbe(t, sys.Root())
			var refs []actor.MonitorRef
			do(t, w.ref, func(p *actor.Proc) {
				refs = append(refs, p.Monitor(target.pid()))
				_ = p.Link(target.pid())
				for range 5 {
					refs = append(refs, p.Monitor(target.pid()))
				}
			})
			for i := 1; i < len(refs); i++ {
				if refs[i].ID() <= refs[i-1].ID() {
					t.Fatalf("monitor refs not increasing: %d then %d", refs[i-1].ID(), refs[i].ID())
				}
			}
			_ = target.ref.Send(context.Background(), func(*actor.Proc) error { return errors.New("x") })
			wait(t, target.pid())
			if ex, ok := (<-w.infos).(actor.Exit); !ok || ex.From != target.pid() {
				t.Fatalf("iteration %d: first message %#v, want the link's Exit", iter, ex)
			}
			for i, want := range refs {
				d, ok := (<-w.infos).(actor.Down)
				if !ok || d.Ref.ID() != want.ID() {
					t.Fatalf("iteration %d: Down #%d has ref %d, want %d (ref order)", iter, i, d.Ref.ID(), want.ID())
				}
			}

			// Many targets exiting in a known order: Downs in exit order.
			var targets []*probe
			for range 4 {
				targets = append(targets, spawnProbe(t, sys.Root()))
			}
			do(t, w.ref, func(p *actor.Proc) {
				for _, tg := range targets {
					p.Monitor(tg.pid())
				}
			})
			order := []int{2, 0, 3, 1}
			for _, i := range order {
				_, _ = targets[i].ref.Stop(context.Background())
				synctest.Wait() // its exit is fully processed before the next one
			}
			for _, i := range order {
				if d, _ := (<-w.infos).(actor.Down); d.PID != targets[i].pid() {
					t.Fatalf("iteration %d: Down for %v, want %v", iter, d.PID, targets[i].pid())
				}
			}

			// Many watchers of one target: Downs are sent in ref order, which
			// the trace shows.
			var watchers []*probe
			t2 := spawnProbe(t, sys.Root())
			for range 4 {
				wi := spawnProbe(t, sys.Root())
				do(t, wi.ref, func(p *actor.Proc) { p.Monitor(t2.pid()) })
				watchers = append(watchers, wi)
			}
			_, _ = t2.ref.Stop(context.Background())
			synctest.Wait()  // every Down is delivered before the watchers are shut down
			closeSys(t, sys) // quiescent: every trace event is in
			var got []actor.PID
			for _, ev := range tl.of(actor.TraceDown) {
				if ev.Peer == t2.pid() {
					got = append(got, ev.PID)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint([]actor.PID{watchers[0].pid(), watchers[1].pid(), watchers[2].pid(), watchers[3].pid()}) {
				t.Fatalf("iteration %d: Downs traced to %v, want the watchers in monitor order", iter, got)
			}
		}
	})
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
