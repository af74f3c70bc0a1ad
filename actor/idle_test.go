package actor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

type tick struct{}

// An idle timeout fires when no user message arrives in time; a user
// message cancels it (its handler may ask again), a system message (here a
// SendAfter timer) does not, and it fires once per request.
func TestIdleTimeoutUserMessageCancelsSystemMessageDoesNot(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		ex := sys.Executor()
		var (
			mu    sync.Mutex
			fires []time.Duration
			ticks []time.Duration
		)
		t0 := ex.Now()
		ref, err := actor.StartServer[call, int, cast](context.Background(), sys.Root(), &fnServer{
			init: func(p *actor.Proc) error { p.IdleTimeout(time.Second); return nil },
			info: func(p *actor.Proc, info any) error {
				mu.Lock()
				defer mu.Unlock()
				switch m := info.(type) {
				case actor.IdleTimeout:
					if m.After != 1500*time.Millisecond {
						t.Errorf("IdleTimeout.After = %v, want 1.5s", m.After)
					}
					fires = append(fires, p.Now().Sub(t0))
				case tick:
					ticks = append(ticks, p.Now().Sub(t0))
				}
				return nil
			},
		})
		if err != nil {
			t.Errorf("StartServer: %v", err)
			return
		}
		sleep(t, sys, 500*time.Millisecond)
		// A user message at 0.5s cancels Init's timeout (due at 1s) and asks
		// for a new one of 1.5s, due at 2s. A timer message at 1.3s is a
		// system message: it leaves that timeout armed.
		if err := ref.Cast(context.Background(), func(p *actor.Proc) error {
			p.IdleTimeout(1500 * time.Millisecond)
			p.SendAfter(800*time.Millisecond, tick{})
			return nil
		}); err != nil {
			t.Errorf("Cast: %v", err)
		}
		sleep(t, sys, 5*time.Second)
		mu.Lock()
		defer mu.Unlock()
		if len(ticks) != 1 || ticks[0] != 1300*time.Millisecond {
			t.Errorf("tick handled at %v, want once at 1.3s", ticks)
		}
		if len(fires) != 1 || fires[0] != 2*time.Second {
			t.Errorf("idle timeouts at %v, want exactly one at 2s", fires)
		}
	})
}

// User messages that keep arriving within the timeout keep the process
// from timing out; once they stop, it times out once.
func TestIdleTimeoutNeverFiresWhileBusy(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		var (
			mu    sync.Mutex
			fired int
		)
		ref, err := actor.StartServer[call, int, cast](context.Background(), sys.Root(), &fnServer{
			init: func(p *actor.Proc) error { p.IdleTimeout(time.Second); return nil },
			info: func(p *actor.Proc, info any) error {
				if _, ok := info.(actor.IdleTimeout); ok {
					mu.Lock()
					fired++
					mu.Unlock()
				}
				return nil
			},
		})
		if err != nil {
			t.Errorf("StartServer: %v", err)
			return
		}
		for range 10 {
			sleep(t, sys, 900*time.Millisecond)
			if _, err := ref.Call(context.Background(), func(p *actor.Proc, _ actor.ReplyTo[int]) (int, error) {
				p.IdleTimeout(time.Second)
				return 0, nil
			}); err != nil {
				t.Errorf("Call: %v", err)
			}
		}
		mu.Lock()
		if fired != 0 {
			t.Errorf("idle timeout fired %d times while messages kept arriving", fired)
		}
		mu.Unlock()
		sleep(t, sys, 1100*time.Millisecond)
		mu.Lock()
		if fired != 1 {
			t.Errorf("idle timeout fired %d times after 1s of silence, want 1", fired)
		}
		mu.Unlock()
	})
}
