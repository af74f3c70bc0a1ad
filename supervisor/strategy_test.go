package supervisor_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

func TestOneForOneRestartsOnlyTheFailedChild(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		sup := e.start(supervisor.Spec{Strategy: supervisor.OneForOne, Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c")}})
		a, c := e.pid("a"), e.pid("c")
		e.takeEvents()
		e.send("b", cmdFail)
		if ev := e.takeEvents(); !slices.Equal(ev, []string{"stop:b", "start:b"}) {
			t.Errorf("events %v", ev)
		}
		if e.pid("a") != a || e.pid("c") != c || !a.Alive() || !c.Alive() {
			t.Error("siblings were touched")
		}
		if got := statuses(e.which(sup)); got != "a:running b:running c:running" {
			t.Errorf("children %s", got)
		}
	})
}

// OneForAll stops the others newest first, then starts everyone in order.
func TestOneForAllRestartsAllInStartOrder(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		sup := e.start(supervisor.Spec{Strategy: supervisor.OneForAll, Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c")}})
		e.takeEvents()
		seq := last(e.log(sup))
		e.send("b", cmdFail)
		want := []string{"stop:b", "stop:c", "stop:a", "start:a", "start:b", "start:c"}
		if ev := e.takeEvents(); !slices.Equal(ev, want) {
			t.Errorf("events %v, want %v", ev, want)
		}
		if got, want := decisions(since(e.log(sup), seq)), "restart:b shutdown:c shutdown:a start:a start:b start:c"; got != want {
			t.Errorf("log %q, want %q", got, want)
		}
	})
}

// RestForOne stops those started after the failed child, newest first, and
// restarts the failed child and those after it, in order.
func TestRestForOneRestartsFailedAndLaterInOrder(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		sup := e.start(supervisor.Spec{Strategy: supervisor.RestForOne,
			Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c"), e.spec("d")}})
		a := e.pid("a")
		e.takeEvents()
		seq := last(e.log(sup))
		e.send("b", cmdFail)
		want := []string{"stop:b", "stop:d", "stop:c", "start:b", "start:c", "start:d"}
		if ev := e.takeEvents(); !slices.Equal(ev, want) {
			t.Errorf("events %v, want %v", ev, want)
		}
		if got, want := decisions(since(e.log(sup), seq)), "restart:b shutdown:d shutdown:c start:b start:c start:d"; got != want {
			t.Errorf("log %q, want %q", got, want)
		}
		if e.pid("a") != a || !a.Alive() {
			t.Error("a, started before b, was restarted")
		}
	})
}

// Every strategy stops its children newest first when the supervisor stops,
// and a clean stop is an Ok outcome.
func TestShutdownStopsChildrenInReverseStartOrder(t *testing.T) {
	for _, s := range []supervisor.Strategy{supervisor.OneForOne, supervisor.OneForAll, supervisor.RestForOne} {
		t.Run(s.String(), func(t *testing.T) {
			bubble(t, 1, func(t *testing.T, e *env) {
				sup := e.start(supervisor.Spec{Strategy: s, Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c")}})
				if ev := e.takeEvents(); !slices.Equal(ev, []string{"start:a", "start:b", "start:c"}) {
					t.Errorf("start events %v", ev)
				}
				o, err := sup.Stop(e.ctx)
				if err != nil || !o.IsOk() {
					t.Fatalf("stop: %v %v", o, err)
				}
				if ev := e.takeEvents(); !slices.Equal(ev, []string{"stop:c", "stop:b", "stop:a"}) {
					t.Errorf("stop events %v", ev)
				}
				if got := decisions(since(e.hooked(), 3)); got != "shutdown:c shutdown:b shutdown:a" {
					t.Errorf("log %q", got)
				}
			})
		})
	}
}

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

// OTP: a group restart stops temporary children and does not start them
// again; their specs are forgotten.
func TestTemporaryBystanderInGroupRestart(t *testing.T) {
	for _, s := range []supervisor.Strategy{supervisor.OneForAll, supervisor.RestForOne} {
		t.Run(s.String(), func(t *testing.T) {
			bubble(t, 1, func(t *testing.T, e *env) {
				tmp := e.spec("t")
				tmp.Restart = supervisor.Temporary
				sup := e.start(supervisor.Spec{Strategy: s, Children: []supervisor.ChildSpec{e.spec("a"), tmp, e.spec("c")}})
				first := e.pid("t")
				e.takeEvents()
				e.send("a", cmdFail)
				if first.Alive() || e.startCount("t") != 1 {
					t.Fatal("the temporary child was not stopped for good")
				}
				if got := statuses(e.which(sup)); got != "a:running c:running" {
					t.Errorf("children %s", got)
				}
				ev := strings.Join(e.takeEvents(), " ")
				if want := "stop:a stop:c stop:t start:a start:c"; ev != want {
					t.Errorf("events %q, want %q", ev, want)
				}
				if _, ok := find(e.log(sup), supervisor.DecisionShutdown, "t"); !ok {
					t.Error("no shutdown entry for the temporary child")
				}
			})
		})
	}
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
