package supervisor_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// Stop is bounded by the shutdown timeouts (OTP): a child that ignores its
// shutdown is killed at its timeout, Stop returns then, and it reports the
// killed child whose goroutine is still running. The goroutine is still
// reclaimed by the enclosing scope's Close (nothing outlives its scope).
func TestStopReturnsAtShutdownTimeoutAndReportsWhatStillRuns(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("deaf", func(int) instance { return instance{ignoreShutdown: true} })
		e.plan("polite", func(int) instance { return instance{stopDelay: time.Second} })
		deaf, polite := e.spec("deaf"), e.spec("polite")
		deaf.Shutdown = supervisor.Shutdown(3 * time.Second)
		quick := e.spec("quick")
		quick.Shutdown = supervisor.BrutalKill
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{deaf, polite, quick}})
		deafPID := e.pid("deaf")

		t0 := e.now()
		o, err := sup.Stop(e.ctx)
		if took := e.now().Sub(t0); took != 4*time.Second {
			t.Errorf("Stop took %v, want polite's 1s then deaf's 3s timeout", took)
		}
		if !o.IsOk() {
			t.Errorf("supervisor outcome %v, want ok", o)
		}
		var nq *actor.NotQuiescentError
		if !errors.As(err, &nq) || len(nq.Running) != 1 || nq.Running[0] != deafPID {
			t.Fatalf("Stop error %v, want a NotQuiescentError listing only %s (quick was killed idle and has returned)", err, deafPID)
		}
		if o, _ := deafPID.Outcome(); o.Cancel.Kind != actor.CancelKill {
			t.Errorf("deaf completed %v, want killed", o)
		}
		if want, got := "kill:quick shutdown:polite kill:deaf", decisions(since(e.hooked(), 3)); got != want {
			t.Errorf("log %q, want %q", got, want)
		}

		t1 := e.now()
		if _, err := e.sys.Close(e.ctx); err != nil {
			t.Errorf("system close: %v", err)
		}
		if took := e.now().Sub(t1); took < time.Hour-4*time.Second {
			t.Errorf("system close returned after %v, before deaf's goroutine returned", took)
		}
	})
}

// The same through a nested supervisor: the inner one kills its deaf child
// at its timeout, the outer Stop returns then and reports the grandchild,
// and the system's Close still waits for the grandchild's goroutine.
func TestNestedStopReportsKilledGrandchildAndCloseWaitsForIt(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("deaf", func(int) instance { return instance{ignoreShutdown: true} })
		deaf := e.spec("deaf")
		deaf.Shutdown = supervisor.Shutdown(2 * time.Second)
		inner := supervisor.ChildSpecFor("inner", supervisor.Spec{Children: []supervisor.ChildSpec{deaf}})
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{inner}})
		deafPID := e.pid("deaf")

		t0 := e.now()
		_, err := sup.Stop(e.ctx)
		if took := e.now().Sub(t0); took != 2*time.Second {
			t.Errorf("Stop took %v, want the grandchild's 2s shutdown timeout", took)
		}
		var nq *actor.NotQuiescentError
		if !errors.As(err, &nq) || len(nq.Running) != 1 || nq.Running[0] != deafPID {
			t.Fatalf("Stop error %v, want a NotQuiescentError listing %s", err, deafPID)
		}
		t1 := e.now()
		if _, err := e.sys.Close(e.ctx); err != nil {
			t.Errorf("system close: %v", err)
		}
		if took := e.now().Sub(t1); took < time.Hour-2*time.Second {
			t.Errorf("system close returned after %v, before the grandchild's goroutine returned", took)
		}
	})
}
