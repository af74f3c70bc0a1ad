package actor_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/orrery-run/orrery/actor"
)

// A handler or task that calls runtime.Goexit (which no recover stops)
// still completes its process, Panicked with ErrGoexit: Wait returns, its
// pending caller is answered, and its scope forgets it.
func TestGoexitInHandlerOrTaskCompletesProcess(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		task, err := sys.Root().Go("goexit", func(context.Context) error { runtime.Goexit(); return nil })
		if err != nil {
			t.Fatal(err)
		}
		o, err := task.Wait(context.Background())
		if err != nil || o.Severity != actor.Panicked || !errors.Is(o.AsError(), actor.ErrGoexit) {
			t.Errorf("task: %v, %v; want Panicked(ErrGoexit)", o, err)
		}

		ref := startServer(t, sys.Root(), &fnServer{})
		_, cerr := ref.Call(context.Background(), func(*actor.Proc, actor.ReplyTo[int]) (int, error) {
			runtime.Goexit()
			return 0, nil
		})
		if !errors.Is(cerr, actor.ErrServerStopped) {
			t.Errorf("call into a Goexit: %v, want ErrServerStopped", cerr)
		}
		o, err = ref.PID().Wait(context.Background())
		if err != nil || o.Severity != actor.Panicked || !errors.Is(o.AsError(), actor.ErrGoexit) {
			t.Errorf("server: %v, %v; want Panicked(ErrGoexit)", o, err)
		}
		if procs := sys.Root().Processes(); len(procs) != 0 {
			t.Errorf("scope still lists %v", procs)
		}
		closeSys(t, sys)
	})
}
