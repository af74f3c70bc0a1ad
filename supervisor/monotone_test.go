package supervisor_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

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
