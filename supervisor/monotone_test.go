package supervisor_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// INV-6C: a Panicked child is never restarted, not even a Permanent one
// whose spec says Contain; the supervisor stops the others and exits
// Panicked.
func TestSupervisorNeverRestartsPanicked(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		a, b := e.spec("a"), e.spec("b")
		a.Containment = supervisor.Contain
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{a, b}, MaxRestarts: 10})
		e.takeEvents()

		e.send("a", cmdPanic)
		o := e.wait(sup.PID())
		if o.Severity != actor.Panicked {
			t.Fatalf("supervisor outcome %v, want panicked", o)
		}
		escErr, ok := o.Panic.Value.(*supervisor.EscalationError)
		if !ok || !errors.Is(escErr, supervisor.ErrChildPanicked) || escErr.ChildID != "a" {
			t.Fatalf("panic value %#v, want an EscalationError for a", o.Panic.Value)
		}
		if n := e.startCount("a"); n != 1 {
			t.Errorf("a started %d times, want 1", n)
		}
		log := e.hooked()
		if count(log, supervisor.DecisionRestart, "a") != 0 {
			t.Errorf("a was restarted: %s", decisions(log))
		}
		stop, _ := find(log, supervisor.DecisionStop, "a")
		if stop.Outcome.Severity != actor.Panicked {
			t.Errorf("stop entry %v, want a's panicked outcome", stop)
		}
		want := "start:a start:b stop:a escalate:a shutdown:b"
		if got := decisions(log); got != want {
			t.Errorf("log %q, want %q", got, want)
		}
		if ev := e.takeEvents(); !slices.Equal(ev, []string{"stop:a", "stop:b"}) {
			t.Errorf("events %v", ev)
		}
	})
}

// INV-6C: a Cancelled child is never restarted. Uncontained, it makes the
// supervisor stop the others and exit Cancelled; contained, the supervisor
// goes on without it.
func TestSupervisorNeverRestartsCancelled(t *testing.T) {
	for _, contain := range []supervisor.Containment{supervisor.Propagate, supervisor.Contain} {
		t.Run(contain.String(), func(t *testing.T) {
			bubble(t, 1, func(t *testing.T, e *env) {
				a, b := e.spec("a"), e.spec("b")
				a.Containment = contain
				sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{a, b}, MaxRestarts: 10})
				old := e.pid("a")
				old.Cancel(actor.CancelReason{Kind: actor.CancelRequested})
				synctest.Wait()

				if n := e.startCount("a"); n != 1 {
					t.Fatalf("a started %d times, want 1", n)
				}
				log := e.hooked()
				stop, ok := find(log, supervisor.DecisionStop, "a")
				if !ok || stop.PID != old || stop.Outcome.Severity != actor.Cancelled {
					t.Fatalf("no stop entry for the cancelled a: %s", decisions(log))
				}
				if contain == supervisor.Contain {
					if !sup.PID().Alive() {
						t.Fatal("contained cancellation stopped the supervisor")
					}
					if got := statuses(e.which(sup)); got != "a:terminated b:running" {
						t.Errorf("children %s", got)
					}
					return
				}
				o := e.wait(sup.PID())
				if o.Severity != actor.Cancelled {
					t.Fatalf("supervisor outcome %v, want cancelled", o)
				}
				if o.Cancel.From != old {
					t.Errorf("cancel reason %v, want one from %s", o.Cancel, old)
				}
				if want, got := "start:a start:b stop:a escalate:a shutdown:b", decisions(e.hooked()); got != want {
					t.Errorf("log %q, want %q", got, want)
				}
			})
		})
	}
}

// INV-6C, INV-2: a restart creates a fresh instance; the failed one keeps
// its outcome, and the log shows the failure and then the new start.
func TestRestartDoesNotMutatePriorOutcome(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a")}})
		first := e.pid("a")
		e.send("a", cmdFail)
		second := e.pid("a")
		e.send("a", cmdFail)
		third := e.pid("a")

		if first == second || second == third || first == third {
			t.Fatalf("restart reused a PID: %s %s %s", first, second, third)
		}
		for _, old := range []actor.PID{first, second} {
			o, done := old.Outcome()
			if !done || o.Severity != actor.Err || !errors.Is(o.Err, errBoom) {
				t.Errorf("old instance %s outcome %v (done %v), want its own err", old, o, done)
			}
		}
		if !third.Alive() {
			t.Error("the new instance is not running")
		}
		log := e.log(sup)
		want := "start:a restart:a start:a restart:a start:a"
		if got := decisions(log); got != want {
			t.Fatalf("log %q, want %q", got, want)
		}
		pids := []actor.PID{first, first, second, second, third}
		for i, l := range log {
			if l.PID != pids[i] {
				t.Errorf("entry %v names %s, want %s", l, l.PID, pids[i])
			}
		}
		if !errors.Is(log[1].Outcome.Err, errBoom) || !errors.Is(log[3].Outcome.Err, errBoom) {
			t.Errorf("restart entries lost the failure: %v / %v", log[1], log[3])
		}
	})
}

// INV-6C: containment is written in the child spec, and the same spec and
// events give the same decisions under any seed.
func TestContainmentIsExplicitAndDeterministic(t *testing.T) {
	type exit struct {
		name string
		do   func(e *env)
	}
	exits := []exit{
		{"err", func(e *env) { e.send("a", cmdFail) }},
		{"cancelled", func(e *env) {
			e.pid("a").Cancel(actor.CancelReason{Kind: actor.CancelRequested})
			synctest.Wait()
		}},
		{"panicked", func(e *env) { e.send("a", cmdPanic) }},
	}
	// want is the supervisor's state after a Temporary child "a" stops.
	want := map[string]map[supervisor.Containment]actor.Severity{
		"err":       {supervisor.Propagate: actor.Err, supervisor.Contain: actor.Ok},
		"cancelled": {supervisor.Propagate: actor.Cancelled, supervisor.Contain: actor.Ok},
		"panicked":  {supervisor.Propagate: actor.Panicked, supervisor.Contain: actor.Panicked},
	}
	for _, x := range exits {
		for _, contain := range []supervisor.Containment{supervisor.Propagate, supervisor.Contain} {
			t.Run(fmt.Sprintf("%s/%s", x.name, contain), func(t *testing.T) {
				var logs []string
				for _, seed := range []uint64{1, 2, 99} {
					bubble(t, seed, func(t *testing.T, e *env) {
						a := e.spec("a")
						a.Restart = supervisor.Temporary
						a.Containment = contain
						sup := e.start(supervisor.Spec{Strategy: supervisor.OneForAll, Children: []supervisor.ChildSpec{a, e.spec("b")}})
						x.do(e)
						got := actor.Ok
						if o, done := sup.PID().Outcome(); done {
							got = o.Severity
						}
						if got != want[x.name][contain] {
							t.Errorf("seed %d: supervisor %v, want %v", seed, got, want[x.name][contain])
						}
						if got == actor.Ok && statuses(e.which(sup)) != "b:running" {
							t.Errorf("seed %d: children %s", seed, statuses(e.which(sup)))
						}
						logs = append(logs, decisions(e.hooked()))
					})
				}
				for _, l := range logs[1:] {
					if l != logs[0] {
						t.Errorf("decisions differ across seeds: %q vs %q", logs[0], l)
					}
				}
			})
		}
	}
}

// INV-6, INV-6A: which exits restart, by restart type. Children are
// contained so that only the restart decision is under test; a panic still
// fails the supervisor.
func TestRestartTypeByExitOutcome(t *testing.T) {
	type want struct {
		restarted bool
		status    string // the child's status afterwards ("" if forgotten)
		sup       actor.Severity
	}
	exits := []struct {
		name string
		do   func(e *env)
	}{
		{"ok", func(e *env) { e.send("a", cmdExit) }},
		{"err", func(e *env) { e.send("a", cmdFail) }},
		{"cancelled", func(e *env) {
			e.pid("a").Cancel(actor.CancelReason{Kind: actor.CancelRequested})
			synctest.Wait()
		}},
		{"panicked", func(e *env) { e.send("a", cmdPanic) }},
	}
	table := map[supervisor.RestartType]map[string]want{
		supervisor.Permanent: {
			"ok":        {true, "running", actor.Ok},
			"err":       {true, "running", actor.Ok},
			"cancelled": {false, "terminated", actor.Ok},
			"panicked":  {false, "", actor.Panicked},
		},
		supervisor.Transient: {
			"ok":        {false, "terminated", actor.Ok},
			"err":       {true, "running", actor.Ok},
			"cancelled": {false, "terminated", actor.Ok},
			"panicked":  {false, "", actor.Panicked},
		},
		supervisor.Temporary: {
			"ok":        {false, "", actor.Ok},
			"err":       {false, "", actor.Ok},
			"cancelled": {false, "", actor.Ok},
			"panicked":  {false, "", actor.Panicked},
		},
	}
	for _, rt := range []supervisor.RestartType{supervisor.Permanent, supervisor.Transient, supervisor.Temporary} {
		for _, x := range exits {
			w := table[rt][x.name]
			t.Run(rt.String()+"/"+x.name, func(t *testing.T) {
				bubble(t, 1, func(t *testing.T, e *env) {
					a := e.spec("a")
					a.Restart, a.Containment = rt, supervisor.Contain
					sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{a}})
					x.do(e)
					if got := e.startCount("a") == 2; got != w.restarted {
						t.Errorf("restarted %v, want %v", got, w.restarted)
					}
					log := e.hooked()
					if w.restarted != (count(log, supervisor.DecisionRestart, "a") == 1) {
						t.Errorf("log %s", decisions(log))
					}
					if w.sup != actor.Ok {
						if o := e.wait(sup.PID()); o.Severity != w.sup {
							t.Errorf("supervisor %v, want %v", o, w.sup)
						}
						return
					}
					if !sup.PID().Alive() {
						t.Fatal("supervisor stopped")
					}
					got := ""
					if ch := e.which(sup); len(ch) == 1 {
						got = ch[0].Status.String()
					}
					if got != w.status {
						t.Errorf("child status %q, want %q", got, w.status)
					}
				})
			})
		}
	}
}
