package supervisor_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// A sibling that fails to start during a OneForAll restart is a failure of
// its own: the group is stopped and tried again (OTP's try_again), within
// the same budget.
func TestOneForAllSiblingFailsToStartDuringRestart(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		bubble(t, 1, func(t *testing.T, e *env) {
			e.plan("b", func(n int) instance {
				if n == 2 {
					return instance{startErr: errStart}
				}
				return instance{}
			})
			sup := e.start(supervisor.Spec{Strategy: supervisor.OneForAll, Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c")}})
			e.send("a", cmdFail)
			log := e.log(sup)
			want := "start:a start:b start:c " +
				"restart:a shutdown:c shutdown:b start:a start-failed:b " +
				"restart:b shutdown:a start:a start:b start:c"
			if got := decisions(log); got != want {
				t.Fatalf("log %q, want %q", got, want)
			}
			failed, _ := find(log, supervisor.DecisionStartFailed, "b")
			if !errors.Is(failed.Err, errStart) || failed.Outcome.Severity != actor.Err {
				t.Errorf("start-failed entry %v", failed)
			}
			if got := statuses(e.which(sup)); got != "a:running b:running c:running" {
				t.Errorf("children %s", got)
			}
		})
	})
	t.Run("always", func(t *testing.T) {
		bubble(t, 1, func(t *testing.T, e *env) {
			e.plan("b", func(n int) instance {
				if n >= 2 {
					return instance{startErr: errStart}
				}
				return instance{}
			})
			sup := e.start(supervisor.Spec{Strategy: supervisor.OneForAll, MaxRestarts: 3,
				Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c")}})
			e.send("a", cmdFail)
			o := e.wait(sup.PID())
			var esc *supervisor.EscalationError
			if !errors.As(o.Err, &esc) || esc.ChildID != "b" || !errors.Is(o.Err, supervisor.ErrBudgetExhausted) || !errors.Is(o.Err, errStart) {
				t.Fatalf("supervisor outcome %v, want b's start failure to exhaust the budget", o)
			}
			if n := e.startCount("b"); n != 4 {
				t.Errorf("b started %d times, want 1 + 3 restarts", n)
			}
			for _, id := range []string{"a", "b", "c"} {
				if e.pid(id).Alive() {
					t.Errorf("%s outlived its supervisor", id)
				}
			}
		})
	})
}

// A sibling that ended on its own just before a group restart stops it is
// judged on its own outcome: an Err is taken along by the restart, a panic
// still fails the supervisor (it is never restarted, INV-6).
func TestGroupRestartJudgesSiblingThatAlreadyExited(t *testing.T) {
	for _, c := range []struct {
		name string
		do   cmd
		want string
	}{
		{"err", cmdFail, "restart:a restart:b start:a start:b"},
		{"panicked", cmdPanic, "restart:a stop:b escalate:b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bubble(t, 1, func(t *testing.T, e *env) {
				e.plan("slow", func(int) instance { return instance{stopDelay: time.Second} })
				sup := e.start(supervisor.Spec{Strategy: supervisor.OneForAll,
					Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("slow")}})
				// Keep the supervisor busy while a and then b fail, so that
				// both Downs wait in its mailbox.
				done := make(chan error)
				go func() { done <- sup.TerminateChild(e.ctx, "slow") }()
				synctest.Wait()
				e.send("a", cmdFail)
				e.send("b", c.do)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				got := decisions(since(e.hooked(), 4))
				if !strings.HasPrefix(got, c.want) {
					t.Fatalf("log %q, want %q...", got, c.want)
				}
				if c.do == cmdPanic {
					if o := e.wait(sup.PID()); o.Severity != actor.Panicked {
						t.Errorf("supervisor %v, want panicked", o)
					}
					return
				}
				if got := statuses(e.which(sup)); got != "a:running b:running slow:terminated" {
					t.Errorf("children %s", got)
				}
				if e.startCount("b") != 2 {
					t.Errorf("b started %d times, want 2", e.startCount("b"))
				}
			})
		})
	}
}
