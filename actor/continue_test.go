package actor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// journal is a concurrency-safe list of strings a server appends to.
type journal struct {
	mu  sync.Mutex
	all []string
}

func (j *journal) add(s string) { j.mu.Lock(); j.all = append(j.all, s); j.mu.Unlock() }
func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.all)
}

// A continuation asked for in Init runs after Start has returned (Start does
// not wait for it) and before any message: a cast sent right after Start
// sees its effects. One asked for in a handler runs before the next message.
func TestContinueRunsAfterStartBeforeAnyMessage(t *testing.T) {
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		ex := sys.Executor()
		var j journal
		start := ex.Now()
		ref, err := actor.StartServer[call, int, cast](context.Background(), sys.Root(), &fnServer{init: func(p *actor.Proc) error {
			j.add("init")
			p.Continue(func(p *actor.Proc) error {
				// Slow on purpose: Start must not wait for it.
				if err := actor.Sleep(p.Ctx(), p.Executor(), time.Second); err != nil {
					return err
				}
				j.add("continue")
				return nil
			})
			return nil
		}})
		if err != nil {
			t.Errorf("StartServer: %v", err)
			return
		}
		if d := ex.Now().Sub(start); d != 0 {
			t.Errorf("Start returned after %v: it waited for the continuation", d)
		}
		for _, name := range []string{"a", "b"} {
			if err := ref.Cast(context.Background(), func(p *actor.Proc) error {
				j.add(name)
				if name == "a" {
					p.Continue(func(*actor.Proc) error { j.add("continue-a"); return nil })
				}
				return nil
			}); err != nil {
				t.Errorf("Cast: %v", err)
			}
		}
		if _, err := ref.Call(context.Background(), reply(0)); err != nil {
			t.Errorf("Call: %v", err)
		}
		want := []string{"init", "continue", "a", "continue-a", "b"}
		if got := j.get(); !slices.Equal(got, want) {
			t.Errorf("order %v, want %v", got, want)
		}
	})
}

// A continuation fails the process like a handler: an error is Err, a panic
// Panicked.
func TestContinueFailureEndsProcess(t *testing.T) {
	errCont := errors.New("continue failed")
	bothExecutors(t, func(t *testing.T, sys *actor.System) {
		for _, tc := range []struct {
			f    func(*actor.Proc) error
			want actor.Severity
		}{
			{func(*actor.Proc) error { return errCont }, actor.Err},
			{func(*actor.Proc) error { panic("in continue") }, actor.Panicked},
		} {
			ref, err := actor.StartServer[call, int, cast](context.Background(), sys.Root(), &fnServer{init: func(p *actor.Proc) error {
				p.Continue(tc.f)
				return nil
			}})
			if err != nil {
				t.Errorf("StartServer: %v", err)
				return
			}
			o, err := ref.PID().Wait(context.Background())
			if err != nil || o.Severity != tc.want {
				t.Errorf("outcome %v (%v), want %v", o, err, tc.want)
			}
			if tc.want == actor.Err && !errors.Is(o.AsError(), errCont) {
				t.Errorf("outcome %v does not carry the continuation's error", o)
			}
		}
	})
}
