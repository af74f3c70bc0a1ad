package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// OTP semantics: TerminateChild keeps the spec, RestartChild starts it
// again, DeleteChild forgets it; StartChild appends a new child.
func TestAdminTerminateRestartDeleteStart(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		tmp := e.spec("t")
		tmp.Restart = supervisor.Temporary
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), tmp}})
		old := e.pid("b")

		if err := sup.TerminateChild(e.ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if old.Alive() {
			t.Fatal("b still running")
		}
		if got := statuses(e.which(sup)); got != "a:running b:terminated t:running" {
			t.Fatalf("after terminate: %s", got)
		}
		n, err := sup.CountChildren(e.ctx)
		if err != nil || n != (supervisor.Counts{Specs: 3, Active: 2, Workers: 3}) {
			t.Fatalf("counts %+v %v", n, err)
		}

		pid, err := sup.RestartChild(e.ctx, "b")
		if err != nil || pid.IsZero() || pid == old || !pid.Alive() {
			t.Fatalf("restart: %s %v", pid, err)
		}
		if ch := e.which(sup); ch[1].PID != pid || ch[1].Status != supervisor.StatusRunning {
			t.Fatalf("after restart: %+v", ch[1])
		}

		if err := sup.TerminateChild(e.ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if err := sup.DeleteChild(e.ctx, "b"); err != nil {
			t.Fatal(err)
		}
		// A temporary child's spec goes with its instance.
		if err := sup.TerminateChild(e.ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if got := statuses(e.which(sup)); got != "a:running" {
			t.Fatalf("after delete: %s", got)
		}

		added, err := sup.StartChild(e.ctx, e.spec("d"))
		if err != nil || !added.Alive() {
			t.Fatalf("start child: %s %v", added, err)
		}
		if got := statuses(e.which(sup)); got != "a:running d:running" {
			t.Fatalf("after start child: %s", got)
		}
		want := "start:a start:b start:t shutdown:b start:b shutdown:b delete:b shutdown:t start:d"
		if got := decisions(e.log(sup)); got != want {
			t.Errorf("log %q, want %q", got, want)
		}
	})
}

// A Start that returns no PID and no error is OTP's ignore: the spec is kept
// and nothing runs.
func TestAdminIgnoredChild(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		ignore := supervisor.ChildSpec{ID: "i", Start: func(_ context.Context, _ *actor.Scope) (actor.PID, error) { return actor.PID{}, nil }}
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{ignore, e.spec("a")}})
		if got := statuses(e.which(sup)); got != "i:terminated a:running" {
			t.Errorf("children %s", got)
		}
		if got := decisions(e.log(sup)); got != "ignore:i start:a" {
			t.Errorf("log %q", got)
		}
	})
}

// Log, OnLog and the entry fields agree; entries are numbered without gaps
// and stamped with the executor's clock.
func TestSupervisionLogEntries(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		t0 := e.now()
		sup := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a")}})
		e.sleep(time.Minute)
		e.send("a", cmdFail)
		log := e.log(sup)
		hooked := e.hooked()
		if len(log) != 3 || len(hooked) != 3 {
			t.Fatalf("log %s, hooked %s", decisions(log), decisions(hooked))
		}
		for i := range log {
			if log[i].Seq != uint64(i+1) || log[i].Seq != hooked[i].Seq || log[i].Decision != hooked[i].Decision {
				t.Errorf("entry %d: %v vs %v", i, log[i], hooked[i])
			}
		}
		if !log[0].Time.Equal(t0) || !log[1].Time.Equal(t0.Add(time.Minute)) {
			t.Errorf("times %v, %v; want %v and a minute later", log[0].Time, log[1].Time, t0)
		}

		// LogLimit keeps the newest entries; Seq shows what was dropped.
		e2 := supervisor.Spec{LogLimit: 2, OnLog: func(supervisor.LogEntry) {}, Children: []supervisor.ChildSpec{e.spec("b")}}
		small, err := supervisor.Start(e.ctx, e.sys.Root(), e2)
		if err != nil {
			t.Fatal(err)
		}
		e.send("b", cmdFail)
		if l := e.log(small); len(l) != 2 || l[0].Seq != 2 || l[1].Seq != 3 {
			t.Errorf("limited log %v", l)
		}
	})
}
