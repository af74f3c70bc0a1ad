package supervisor_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// terminate runs TerminateChild and returns the entry it logged and the
// virtual time it took.
func terminate(t *testing.T, e *env, sup *supervisor.Ref, id string) (supervisor.LogEntry, time.Duration) {
	t.Helper()
	seq := last(e.log(sup))
	t0 := e.now()
	if err := sup.TerminateChild(e.ctx, id); err != nil {
		t.Fatalf("terminate %s: %v", id, err)
	}
	took := e.now().Sub(t0)
	entries := since(e.log(sup), seq)
	if len(entries) != 1 {
		t.Fatalf("terminate logged %s", decisions(entries))
	}
	return entries[0], took
}

// A cooperative child gets the shutdown reason, runs its stop hook and is
// not killed; its Down does not count as a failure.
func TestShutdownCooperativeChild(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("a", func(int) instance { return instance{stopDelay: time.Second} })
		a := e.spec("a")
		a.Shutdown = supervisor.Shutdown(5 * time.Second)
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{a}})
		pid := e.pid("a")
		entry, took := terminate(t, e, sup, "a")
		if entry.Decision != supervisor.DecisionShutdown || entry.PID != pid {
			t.Errorf("entry %v, want shutdown of %s", entry, pid)
		}
		if o := entry.Outcome; o.Severity != actor.Cancelled || o.Cancel.Kind != actor.CancelShutdown {
			t.Errorf("child outcome %v, want cancelled(shutdown)", o)
		}
		if took != time.Second {
			t.Errorf("took %v, want the child's 1s stop", took)
		}
		synctest.Wait()
		if e.startCount("a") != 1 || count(e.log(sup), supervisor.DecisionRestart, "a") != 0 {
			t.Error("a stopped on purpose was restarted")
		}
	})
}

// A child that ignores shutdown is killed when its Shutdown timeout runs
// out, measured in virtual time.
func TestShutdownKillsChildIgnoringShutdownAfterTimeout(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("a", func(int) instance { return instance{ignoreShutdown: true} })
		a := e.spec("a")
		a.Shutdown = supervisor.Shutdown(2 * time.Second)
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{a}})
		entry, took := terminate(t, e, sup, "a")
		if entry.Decision != supervisor.DecisionKill {
			t.Errorf("entry %v, want kill", entry)
		}
		if o := entry.Outcome; o.Severity != actor.Cancelled || o.Cancel.Kind != actor.CancelKill {
			t.Errorf("child outcome %v, want cancelled(kill)", o)
		}
		if took != 2*time.Second {
			t.Errorf("killed after %v, want 2s", took)
		}
	})
}

// BrutalKill kills at once: no shutdown request, no stop hook.
func TestShutdownBrutalKill(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("a", func(int) instance { return instance{stopDelay: time.Second} })
		a := e.spec("a")
		a.Shutdown = supervisor.BrutalKill
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{a}})
		e.takeEvents()
		entry, took := terminate(t, e, sup, "a")
		if entry.Decision != supervisor.DecisionKill || entry.Outcome.Cancel.Kind != actor.CancelKill {
			t.Errorf("entry %v, want kill", entry)
		}
		if took != 0 {
			t.Errorf("took %v, want no wait", took)
		}
		synctest.Wait()
		if ev := e.takeEvents(); len(ev) != 0 {
			t.Errorf("a brutally killed child ran %v", ev)
		}
	})
}

// Infinity waits for as long as the child takes.
func TestShutdownInfinityWaits(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("a", func(int) instance { return instance{ignoreShutdown: true} })
		a := e.spec("a")
		a.Shutdown = supervisor.Infinity
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{a}})
		entry, took := terminate(t, e, sup, "a")
		if entry.Decision != supervisor.DecisionShutdown || entry.Outcome.Cancel.Kind != actor.CancelShutdown {
			t.Errorf("entry %v, want shutdown", entry)
		}
		if took != time.Hour {
			t.Errorf("took %v, want the child's hour", took)
		}
	})
}

// A static supervisor stops its children one at a time, newest first: each
// stop starts when the previous one has ended.
func TestShutdownIsSerialInReverseOrder(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		var specs []supervisor.ChildSpec
		for _, id := range []string{"a", "b", "c"} {
			e.plan(id, func(int) instance { return instance{stopDelay: time.Second} })
			specs = append(specs, e.spec(id))
		}
		sup := e.start(supervisor.Spec{Children: specs})
		t0 := e.now()
		if o, err := sup.Stop(e.ctx); err != nil || !o.IsOk() {
			t.Fatalf("stop: %v %v", o, err)
		}
		if took := e.now().Sub(t0); took != 3*time.Second {
			t.Errorf("stop took %v, want 3 x 1s", took)
		}
		var got []string
		var at []time.Duration
		for _, l := range since(e.hooked(), 3) {
			got = append(got, l.Decision.String()+":"+l.ChildID)
			at = append(at, l.Time.Sub(t0))
		}
		if !slices.Equal(got, []string{"shutdown:c", "shutdown:b", "shutdown:a"}) {
			t.Errorf("log %v", got)
		}
		if !slices.Equal(at, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}) {
			t.Errorf("stops ended at %v, want 1s, 2s, 3s", at)
		}
	})
}

// A killed supervisor takes its children with it (INV-1), even though it
// gets no chance to stop them in order.
func TestKilledSupervisorKillsItsChildren(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b")}})
		a, b := e.pid("a"), e.pid("b")
		sup.PID().Abort()
		for _, pid := range []actor.PID{a, b} {
			if o := e.wait(pid); o.Cancel.Kind != actor.CancelKill {
				t.Errorf("%s: %v, want killed", pid, o)
			}
		}
	})
}
