package actor_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// orderLog is an append-only log shared by processes and finalizers.
type orderLog struct {
	mu sync.Mutex
	s  []string
}

func (l *orderLog) add(format string, args ...any) {
	l.mu.Lock()
	l.s = append(l.s, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *orderLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.s)
}

func (l *orderLog) index(s string) int { return slices.Index(l.get(), s) }

// Kept beside lab's TestLabScopeCloseQuiescence: the order of finalizers across nested and sibling scopes is stated here only.
func TestScopeCloseClosesSubScopesFirst(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		root := sys.Root()
		a, _ := root.Sub("a")
		b, _ := a.Sub("b")
		c, _ := root.Sub("c") // newer than a: closed before a
		log := &orderLog{}
		for _, s := range []*actor.Scope{root, a, b, c} {
			name := s.Name()
			spawn(t, s, &fnActor{stop: func(*actor.Proc, actor.Outcome) { log.add("stop:%s", name) }})
			if err := s.Defer(func() { log.add("fin:%s", name) }); err != nil {
				t.Fatal(err)
			}
		}
		closeSys(t, sys)
		var fins []string
		for _, e := range log.get() {
			if len(e) > 4 && e[:4] == "fin:" {
				fins = append(fins, e)
			}
		}
		if want := []string{"fin:c", "fin:b", "fin:a", "fin:root"}; !slices.Equal(fins, want) {
			t.Errorf("finalizers ran as %v, want %v (sub-scopes first, newest first)", fins, want)
		}
		for _, s := range []string{"root", "a", "b", "c"} {
			if i, j := log.index("stop:"+s), log.index("fin:"+s); i < 0 || i > j {
				t.Errorf("scope %s: stop hook at %d, finalizer at %d: the scope was not quiescent before its finalizers", s, i, j)
			}
		}
		// Descendants' processes are gone before an ancestor's finalizers.
		if log.index("stop:b") > log.index("fin:a") || log.index("stop:c") > log.index("fin:root") {
			t.Errorf("sub-scope process outlived its parent's close: %v", log.get())
		}
		for _, s := range []*actor.Scope{a, b, c} {
			if _, err := actor.Spawn[fn](context.Background(), s, &fnActor{}); !errors.Is(err, actor.ErrScopeClosed) {
				t.Errorf("spawn into %s after parent close: %v, want ErrScopeClosed", s.Name(), err)
			}
		}
	})
}

func TestScopeCloseReturnsAggregateOutcome(t *testing.T) {
	errApp := errors.New("app failure")
	exitOk := func(p *actor.Proc) error { p.Exit(nil); return nil }
	fail := func(*actor.Proc) error { return errApp }
	boom := func(*actor.Proc) error { panic("boom") }

	// run spawns one process per message in a fresh sub-scope, lets each
	// handle its message and complete, leaves the rest running, and closes.
	run := func(t *testing.T, msgs []fn, running int, stopByOther bool) (actor.Outcome, actor.Outcome) {
		sys := newSys(t)
		scope, _ := sys.Root().Sub("s")
		for _, m := range msgs {
			ref := spawn(t, scope, &fnActor{})
			if err := ref.Send(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			if _, err := ref.PID().Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		for range running {
			spawn(t, scope, &fnActor{})
		}
		if stopByOther {
			ref := spawn(t, scope, &fnActor{})
			if _, err := ref.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		o, err := scope.Close(context.Background())
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
		root := closeSys(t, sys)
		return o, root
	}

	cases := []struct {
		name        string
		msgs        []fn
		running     int
		stopByOther bool
		want        actor.Severity
	}{
		{"empty", nil, 0, false, actor.Ok},
		{"owner-shutdown-counts-as-ok", nil, 3, false, actor.Ok},
		{"normal-exit", []fn{exitOk}, 1, false, actor.Ok},
		{"err", []fn{exitOk, fail}, 1, false, actor.Err},
		{"cancelled-by-other", []fn{exitOk, fail}, 1, true, actor.Cancelled},
		{"panicked", []fn{exitOk, fail, boom}, 2, true, actor.Panicked},
		{"panicked-first", []fn{boom, fail, exitOk}, 1, false, actor.Panicked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				o, root := run(t, c.msgs, c.running, c.stopByOther)
				if o.Severity != c.want {
					t.Errorf("scope outcome %v, want severity %v", o, c.want)
				}
				if root.Severity != c.want {
					t.Errorf("parent scope outcome %v, want severity %v (a sub-scope's outcome folds into its parent)", root, c.want)
				}
			})
		})
	}

	t.Run("scope-cancel-counts-as-ok", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			s, _ := sys.Root().Sub("s")
			ref := spawn(t, s, &fnActor{})
			s.Cancel(actor.CancelReason{Kind: actor.CancelShutdown})
			if o := wait(t, ref.PID()); o.Severity != actor.Cancelled {
				t.Fatalf("process outcome %v, want Cancelled", o)
			}
			if o, err := s.Close(context.Background()); err != nil || !o.IsOk() {
				t.Errorf("Close after Scope.Cancel = %v, %v; want Ok (the owner's own cancellation is no failure)", o, err)
			}
			closeSys(t, sys)
		})
	})

	t.Run("panicked-in-nested-sub-scope", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			a, _ := sys.Root().Sub("a")
			b, _ := a.Sub("b")
			spawn(t, a, &fnActor{})
			ref := spawn(t, b, &fnActor{})
			_ = ref.Send(context.Background(), boom)
			if o, _ := ref.PID().Wait(context.Background()); o.Severity != actor.Panicked {
				t.Fatalf("child outcome %v, want panicked", o)
			}
			o, err := a.Close(context.Background())
			if err != nil || o.Severity != actor.Panicked {
				t.Errorf("a.Close() = %v, %v; want panicked from the nested scope", o, err)
			}
			if o := closeSys(t, sys); o.Severity != actor.Panicked {
				t.Errorf("root outcome %v, want panicked", o)
			}
		})
	})

	t.Run("panicking-finalizer", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			s, _ := sys.Root().Sub("s")
			ran := false
			_ = s.Defer(func() { ran = true })
			_ = s.Defer(func() { panic("finalizer") })
			o, _ := s.Close(context.Background())
			if o.Severity != actor.Panicked {
				t.Errorf("scope outcome %v, want panicked", o)
			}
			if !ran {
				t.Errorf("a panicking finalizer stopped the remaining finalizers")
			}
			closeSys(t, sys)
		})
	})
}

// Kept beside lab's TestLabScopeCloseQuiescence (which checks a closed scope refuses servers, tasks, Sub and Defer): Spawn of a plain actor, and the closed root, are outside the table.
func TestSpawnIntoClosedScopeIsErrScopeClosed(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		s, _ := sys.Root().Sub("s")
		if _, err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		started := false
		_, err := actor.Spawn[fn](context.Background(), s, &fnActor{start: func(*actor.Proc) error { started = true; return nil }})
		if !errors.Is(err, actor.ErrScopeClosed) {
			t.Errorf("Spawn: %v, want ErrScopeClosed", err)
		}
		if started {
			t.Errorf("OnStart ran for a process spawned into a closed scope")
		}
		closeSys(t, sys)
		if _, err := actor.Spawn[fn](context.Background(), sys.Root(), &fnActor{}); !errors.Is(err, actor.ErrScopeClosed) {
			t.Errorf("Spawn into closed root: %v, want ErrScopeClosed", err)
		}
	})
}

func TestScopeCloseIsIdempotent(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			s, _ := sys.Root().Sub("s")
			runs := 0
			_ = s.Defer(func() { runs++ })
			ref := spawn(t, s, &fnActor{})
			_ = ref.Send(context.Background(), func(*actor.Proc) error { return errors.New("x") })
			_, _ = ref.PID().Wait(context.Background())
			o1, err1 := s.Close(context.Background())
			o2, err2 := s.Close(context.Background())
			if err1 != nil || err2 != nil {
				t.Errorf("Close errors: %v, %v", err1, err2)
			}
			if !same(o1, o2) || o1.Severity != actor.Err {
				t.Errorf("Close outcomes %v then %v; want the same Err outcome twice", o1, o2)
			}
			if runs != 1 {
				t.Errorf("finalizer ran %d times, want 1", runs)
			}
			closeSys(t, sys)
		})
	})

	t.Run("concurrent", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			s, _ := sys.Root().Sub("s")
			entered, release := make(chan struct{}), make(chan struct{})
			runs := 0
			_ = s.Defer(func() {
				runs++
				close(entered)
				<-release
			})
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { _, err := s.Close(context.Background()); first <- err }()
			<-entered
			go func() { _, err := s.Close(context.Background()); second <- err }()
			synctest.Wait()
			if _, done := ready(second); done {
				t.Errorf("a second, concurrent Close returned while the first one's finalizer was still running (INV-1: Close returns only once every finalizer has run)")
			}
			close(release)
			<-first
			synctest.Wait()
			if runs != 1 {
				t.Errorf("finalizer ran %d times, want 1", runs)
			}
			closeSys(t, sys)
		})
	})
}

func TestScopeCloseNotQuiescentWhenHandlerIgnoresCancel(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		s, _ := sys.Root().Sub("stuck")
		finalized := false
		_ = s.Defer(func() { finalized = true })
		ref := spawn(t, s, &fnActor{})
		release := block(t, ref) // ignores its context

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := s.Close(ctx)
		var nq *actor.NotQuiescentError
		if !errors.As(err, &nq) {
			t.Fatalf("Close = %v, want *NotQuiescentError", err)
		}
		if nq.Live != 1 {
			t.Errorf("NotQuiescentError.Live = %d, want 1", nq.Live)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close error %v does not wrap the context's error", err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("Close gave up after %v, want the context's 2s", d)
		}
		if !finalized {
			t.Errorf("finalizers did not run before Close returned")
		}
		// The process is completed for everyone else, even though its
		// goroutine is still in user code.
		o, dead := ref.PID().Outcome()
		if !dead || o.Severity != actor.Cancelled || o.Cancel.Kind != actor.CancelKill {
			t.Errorf("stuck process outcome %v (dead=%v), want cancelled(kill)", o, dead)
		}
		release()
		synctest.Wait()
		// Now it is quiescent: closing again succeeds.
		if _, err := s.Close(context.Background()); err != nil {
			t.Errorf("Close after the handler returned: %v", err)
		}
		closeSys(t, sys)
	})
}

func TestSpawnRacingCloseNeverOutlivesScope(t *testing.T) {
	bubble(t, func(t *testing.T) {
		sys := newSys(t)
		s, _ := sys.Root().Sub("racy")
		const spawners = 4
		var mu sync.Mutex
		var pids []actor.PID
		var wg sync.WaitGroup
		for range spawners {
			wg.Go(func() {
				for {
					ref, err := actor.Spawn[fn](context.Background(), s, &fnActor{})
					if errors.Is(err, actor.ErrScopeClosed) {
						return
					}
					var se *actor.StartError
					if err != nil && !errors.As(err, &se) {
						t.Errorf("Spawn during Close: %v", err)
						return
					}
					if err == nil {
						mu.Lock()
						pids = append(pids, ref.PID())
						mu.Unlock()
					}
				}
			})
		}
		for len(s.Processes()) < 10 {
			runtime.Gosched() // let the spawners get going
		}
		if _, err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for _, pid := range pids {
			if pid.Alive() {
				t.Errorf("%v outlived its scope's Close", pid)
			}
		}
		closeSys(t, sys)
	})
}

func TestProcChildrenDoNotOutliveProcess(t *testing.T) {
	// parentWithChild spawns a parent that starts a child in its Children
	// scope; it returns the parent's ref and the child's PID.
	parentWithChild := func(t *testing.T, sys *actor.System) (*actor.Ref[fn], actor.PID, <-chan struct{}) {
		childStopped := make(chan struct{})
		var child actor.PID
		parent := spawn(t, sys.Root(), &fnActor{start: func(p *actor.Proc) error {
			cs, err := p.Children()
			if err != nil {
				return err
			}
			ref, err := actor.Spawn[fn](p.Ctx(), cs, &fnActor{stop: func(*actor.Proc, actor.Outcome) { close(childStopped) }})
			if err != nil {
				return err
			}
			child = ref.PID()
			return nil
		}})
		return parent, child, childStopped
	}

	t.Run("stop", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			parent, child, stopped := parentWithChild(t, sys)
			if _, err := parent.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if child.Alive() {
				t.Errorf("child alive after its parent completed")
			}
			if _, ok := ready(stopped); !ok {
				t.Errorf("child stop hook had not run when its parent completed")
			}
			closeSys(t, sys)
		})
	})

	t.Run("error", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			parent, child, _ := parentWithChild(t, sys)
			_ = parent.Send(context.Background(), func(*actor.Proc) error { return errors.New("x") })
			if _, err := parent.PID().Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if child.Alive() {
				t.Errorf("child alive after its parent failed")
			}
			closeSys(t, sys)
		})
	})

	t.Run("abort", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			parent, child, _ := parentWithChild(t, sys)
			parent.Abort()
			synctest.Wait() // everything the abort set in motion has happened
			if child.Alive() {
				t.Errorf("child %v still alive after its parent was aborted and the system went idle: nothing started in Proc.Children may outlive the process", child)
			}
			closeSys(t, sys)
		})
	})
}

// TestScopeCloseCoversProcessChildren: a scope is quiescent only when the
// processes its processes started in their Children scopes have returned too
// (INV-1 covers the whole subtree).
func TestScopeCloseCoversProcessChildren(t *testing.T) {
	// spawnTree starts, in a fresh sub-scope, a parent whose OnStart starts a
	// child in its Children scope; child is the child's behaviour.
	spawnTree := func(t *testing.T, sys *actor.System, child *fnActor) (*actor.Scope, *actor.Ref[fn]) {
		s, _ := sys.Root().Sub("tree")
		var c *actor.Ref[fn]
		spawn(t, s, &fnActor{start: func(p *actor.Proc) error {
			cs, err := p.Children()
			if err != nil {
				return err
			}
			c, err = actor.Spawn[fn](p.Ctx(), cs, child)
			return err
		}})
		return s, c
	}

	t.Run("slow-child-stop-hook", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			stopped := false
			s, _ := spawnTree(t, sys, &fnActor{stop: func(*actor.Proc, actor.Outcome) {
				time.Sleep(3 * time.Second)
				stopped = true
			}})
			if _, err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !stopped {
				t.Errorf("Close returned before a grandchild's stop hook completed")
			}
			closeSys(t, sys)
		})
	})

	t.Run("stuck-child", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			s, c := spawnTree(t, sys, &fnActor{})
			release := block(t, c) // ignores cancellation
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := s.Close(ctx)
			var nq *actor.NotQuiescentError
			if !errors.As(err, &nq) {
				t.Errorf("Close = %v while a process started in a Children scope was still running its handler; want a *NotQuiescentError", err)
			}
			release()
			synctest.Wait()
			closeSys(t, sys)
		})
	})
}
