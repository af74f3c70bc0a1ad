package supervisor_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

func (e *env) startDynamic(spec supervisor.DynamicSpec) *supervisor.DynamicRef {
	e.t.Helper()
	if spec.OnLog == nil {
		spec.OnLog = e.onLog
	}
	d, err := supervisor.StartDynamic(e.ctx, e.sys.Root(), spec, actor.WithName("dyn"))
	if err != nil {
		e.t.Fatalf("start dynamic supervisor: %v", err)
	}
	return d
}

func pids(ch []supervisor.ChildInfo) []actor.PID {
	var out []actor.PID
	for _, c := range ch {
		out = append(out, c.PID)
	}
	return out
}

// Children come and go at run time, are known by PID, restart one for one
// under the budget, and are forgotten once they stop for good.
func TestDynamicStartAndTerminateChildren(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		d := e.startDynamic(supervisor.DynamicSpec{MaxChildren: 3})
		if n, err := d.CountChildren(e.ctx); err != nil || n != (supervisor.Counts{}) {
			t.Fatalf("empty supervisor counts %+v %v", n, err)
		}
		var started []actor.PID
		for _, id := range []string{"w1", "w2", "w3"} {
			pid, err := d.StartChild(e.ctx, e.spec(id))
			if err != nil {
				t.Fatal(err)
			}
			started = append(started, pid)
		}
		if _, err := d.StartChild(e.ctx, e.spec("w4")); !errors.Is(err, supervisor.ErrMaxChildren) {
			t.Errorf("fourth child: %v, want ErrMaxChildren", err)
		}
		ch, err := d.WhichChildren(e.ctx)
		if err != nil || !slices.Equal(pids(ch), started) {
			t.Fatalf("children %v %v, want %v", pids(ch), err, started)
		}

		if err := d.TerminateChild(e.ctx, started[1]); err != nil {
			t.Fatal(err)
		}
		if started[1].Alive() {
			t.Fatal("terminated child still running")
		}
		if err := d.TerminateChild(e.ctx, started[1]); !errors.Is(err, supervisor.ErrNotFound) {
			t.Errorf("second terminate: %v, want ErrNotFound", err)
		}

		// A failed child comes back with a new PID in the same place.
		e.send("w1", cmdFail)
		ch, _ = d.WhichChildren(e.ctx)
		if len(ch) != 2 || ch[0].ID != "w1" || ch[0].PID == started[0] || !ch[0].PID.Alive() || ch[1].PID != started[2] {
			t.Fatalf("after restart: %+v", ch)
		}
		// A contained temporary child that fails is forgotten.
		tmp := e.spec("tmp")
		tmp.Restart, tmp.Containment = supervisor.Temporary, supervisor.Contain
		if _, err := d.StartChild(e.ctx, tmp); err != nil {
			t.Fatal(err)
		}
		e.send("tmp", cmdFail)
		n, _ := d.CountChildren(e.ctx)
		if n != (supervisor.Counts{Specs: 2, Active: 2, Workers: 2}) {
			t.Errorf("counts %+v", n)
		}
		want := "start:w1 start:w2 start:w3 shutdown:w2 restart:w1 start:w1 start:tmp stop:tmp"
		if got := decisions(e.log(d)); got != want {
			t.Errorf("log %q, want %q", got, want)
		}
	})
}

// At shutdown a dynamic supervisor asks every child at once and gives each
// its own timeout from that moment: three 1s stops take 1s, not 3s, and a
// child that ignores shutdown is killed at its 2s deadline.
func TestDynamicStopsChildrenInParallel(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		d := e.startDynamic(supervisor.DynamicSpec{})
		for _, id := range []string{"a", "b", "c"} {
			e.plan(id, func(int) instance { return instance{stopDelay: time.Second} })
			if _, err := d.StartChild(e.ctx, e.spec(id)); err != nil {
				t.Fatal(err)
			}
		}
		t0 := e.now()
		if o, err := d.Stop(e.ctx); err != nil || !o.IsOk() {
			t.Fatalf("stop: %v %v", o, err)
		}
		if took := e.now().Sub(t0); took != time.Second {
			t.Errorf("parallel stop took %v, want 1s", took)
		}
		for _, l := range since(e.hooked(), 3) {
			if l.Decision != supervisor.DecisionShutdown || !l.Time.Equal(t0.Add(time.Second)) {
				t.Errorf("entry %v at %v", l, l.Time.Sub(t0))
			}
		}
	})
	bubble(t, 1, func(t *testing.T, e *env) {
		d := e.startDynamic(supervisor.DynamicSpec{})
		e.plan("slow", func(int) instance { return instance{stopDelay: time.Second} })
		e.plan("deaf", func(int) instance { return instance{ignoreShutdown: true} })
		slow, deaf := e.spec("slow"), e.spec("deaf")
		deaf.Shutdown = supervisor.Shutdown(2 * time.Second)
		for _, s := range []supervisor.ChildSpec{slow, deaf} {
			if _, err := d.StartChild(e.ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		t0 := e.now()
		deafPID := e.pid("deaf")
		// Stop is bounded by the shutdown timeouts: it returns when deaf is
		// killed, and reports that deaf's goroutine still runs.
		o, err := d.Stop(e.ctx)
		var nq *actor.NotQuiescentError
		if !errors.As(err, &nq) || len(nq.Running) != 1 || nq.Running[0] != deafPID || !o.IsOk() {
			t.Fatalf("stop: %v, %v; want Ok and a NotQuiescentError listing %s", o, err, deafPID)
		}
		if took := e.now().Sub(t0); took != 2*time.Second {
			t.Errorf("stop took %v, want deaf's 2s shutdown timeout", took)
		}
		tail := since(e.hooked(), 2)
		if got := decisions(tail); got != "kill:deaf shutdown:slow" {
			t.Fatalf("log %q", got)
		}
		if at := tail[0].Time.Sub(t0); at != 2*time.Second {
			t.Errorf("deaf killed after %v, want its 2s", at)
		}
		if o := tail[1].Outcome; o.Cancel.Kind != actor.CancelShutdown {
			t.Errorf("slow stopped with %v, want shutdown", o)
		}
		// Nothing outlives its scope: closing the system still waits for
		// deaf's goroutine (its hour-long stop hook), in virtual time.
		t1 := e.now()
		if _, err := e.sys.Close(e.ctx); err != nil {
			t.Errorf("system close: %v", err)
		}
		if took := e.now().Sub(t1); took < time.Hour-2*time.Second {
			t.Errorf("system close returned after %v, before deaf's goroutine", took)
		}
	})
}
