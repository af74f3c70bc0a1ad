package supervisor_test

import (
	"errors"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

func TestSpecValidation(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		ok := e.spec("a")
		child := func(f func(*supervisor.ChildSpec)) supervisor.Spec {
			c := ok
			f(&c)
			return supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("first"), c}}
		}
		cases := []struct {
			name   string
			spec   supervisor.Spec
			reason error
			field  string
			index  int
		}{
			{"duplicate id", supervisor.Spec{Children: []supervisor.ChildSpec{ok, e.spec("b"), ok}}, supervisor.ErrDuplicateID, "ID", 2},
			{"missing id", child(func(c *supervisor.ChildSpec) { c.ID = "" }), supervisor.ErrMissingID, "ID", 1},
			{"missing start", child(func(c *supervisor.ChildSpec) { c.Start = nil }), supervisor.ErrMissingStart, "Start", 1},
			{"restart type", child(func(c *supervisor.ChildSpec) { c.Restart = 7 }), supervisor.ErrBadValue, "Restart", 1},
			{"child type", child(func(c *supervisor.ChildSpec) { c.Type = 7 }), supervisor.ErrBadValue, "Type", 1},
			{"containment", child(func(c *supervisor.ChildSpec) { c.Containment = 7 }), supervisor.ErrBadValue, "Containment", 1},
			{"negative shutdown", child(func(c *supervisor.ChildSpec) { c.Shutdown = -5 }), supervisor.ErrBadShutdown, "Shutdown", 1},
			{"strategy", supervisor.Spec{Strategy: 9}, supervisor.ErrBadValue, "Strategy", -1},
			{"max restarts", supervisor.Spec{MaxRestarts: -2}, supervisor.ErrBadBudget, "MaxRestarts", -1},
			{"window", supervisor.Spec{Window: -time.Second}, supervisor.ErrBadBudget, "Window", -1},
			{"escalation", supervisor.Spec{Escalation: 9}, supervisor.ErrBadValue, "Escalation", -1},
			{"log limit", supervisor.Spec{LogLimit: -1}, supervisor.ErrBadValue, "LogLimit", -1},
			{"fixed backoff", supervisor.Spec{Backoff: supervisor.Fixed(-time.Second)}, supervisor.ErrBadBackoff, "Backoff", -1},
			{"exponential initial", supervisor.Spec{Backoff: supervisor.Exponential(0, time.Second, 2)}, supervisor.ErrBadBackoff, "Backoff", -1},
			{"exponential max", supervisor.Spec{Backoff: supervisor.Exponential(time.Second, time.Millisecond, 2)}, supervisor.ErrBadBackoff, "Backoff", -1},
			{"exponential multiplier", supervisor.Spec{Backoff: supervisor.Exponential(time.Second, time.Minute, 0.5)}, supervisor.ErrBadBackoff, "Backoff", -1},
			{"jitter", supervisor.Spec{Backoff: supervisor.Fixed(time.Second).WithJitter(1.5)}, supervisor.ErrBadBackoff, "Backoff", -1},
			{"jitter nan", supervisor.Spec{Backoff: supervisor.Fixed(time.Second).WithJitter(math.NaN())}, supervisor.ErrBadBackoff, "Backoff", -1},
		}
		for _, c := range cases {
			_, err := supervisor.Start(e.ctx, e.sys.Root(), c.spec)
			var se *supervisor.SpecError
			if !errors.As(err, &se) || !errors.Is(err, supervisor.ErrInvalidSpec) || !errors.Is(err, c.reason) {
				t.Errorf("%s: %v, want a SpecError for %v", c.name, err, c.reason)
				continue
			}
			if se.Field != c.field || se.Index != c.index || se.Child != (c.index >= 0) {
				t.Errorf("%s: %+v, want field %s index %d", c.name, se, c.field, c.index)
			}
		}
		if _, err := supervisor.StartDynamic(e.ctx, e.sys.Root(), supervisor.DynamicSpec{MaxChildren: -1}); !errors.Is(err, supervisor.ErrBadValue) {
			t.Errorf("dynamic max children: %v", err)
		}
		if n := e.startCount("a") + e.startCount("first"); n != 0 {
			t.Errorf("an invalid spec started %d children", n)
		}
		if procs := e.sys.Root().Processes(); len(procs) != 0 {
			t.Errorf("invalid specs left processes %v", procs)
		}
		// Valid edge values pass.
		good := []supervisor.Spec{
			{MaxRestarts: supervisor.NoRestarts},
			{Backoff: supervisor.Fixed(0)},
			{Backoff: supervisor.Exponential(time.Second, time.Second, 1).WithJitter(1)},
			child(func(c *supervisor.ChildSpec) { c.Shutdown = supervisor.BrutalKill }),
			child(func(c *supervisor.ChildSpec) { c.Shutdown = supervisor.Infinity }),
		}
		for i, s := range good {
			sup, err := supervisor.Start(e.ctx, e.sys.Root(), s)
			if err != nil {
				t.Errorf("good spec %d: %v", i, err)
				continue
			}
			if _, err := sup.Stop(e.ctx); err != nil {
				t.Error(err)
			}
		}
	})
}

// Specs are copied when given: changing the caller's slice afterwards
// changes neither a running supervisor nor the tree a restart builds.
func TestSpecIsCopied(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		children := []supervisor.ChildSpec{e.spec("a"), e.spec("b")}
		inner := supervisor.ChildSpecFor("inner", supervisor.Spec{Children: children})
		inner.Containment = supervisor.Contain
		children[0].ID = "changed"
		children[1].Restart = 9
		parent := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{inner}})
		ch := e.which(parent)
		first, _ := supervisor.FromPID(ch[0].PID)
		if got := statuses(e.which(first)); got != "a:running b:running" {
			t.Fatalf("inner children %s", got)
		}
		first.PID().Cancel(actor.CancelReason{Kind: actor.CancelRequested})
		synctest.Wait()
		// The parent stops a cancelled child; start it again by hand.
		pid, err := parent.RestartChild(e.ctx, "inner")
		if err != nil {
			t.Fatalf("restart inner: %v", err)
		}
		second, _ := supervisor.FromPID(pid)
		if got := statuses(e.which(second)); got != "a:running b:running" {
			t.Errorf("restarted inner children %s", got)
		}
	})
}

// A child that cannot start fails the supervisor's start, after the
// children started before it are stopped, newest first.
func TestStartFailureStopsStartedChildren(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("c", func(int) instance { return instance{startErr: errStart} })
		_, err := supervisor.Start(e.ctx, e.sys.Root(), supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c"), e.spec("d")}})
		var sce *supervisor.StartChildError
		var ae *actor.StartError
		if !errors.As(err, &sce) || sce.ID != "c" || !errors.Is(err, errStart) || !errors.As(err, &ae) {
			t.Fatalf("start: %v, want a StartChildError for c", err)
		}
		if ev := e.takeEvents(); !slices.Equal(ev, []string{"start:a", "start:b", "stop:b", "stop:a"}) {
			t.Errorf("events %v", ev)
		}
		if e.startCount("d") != 0 {
			t.Error("d started after c failed")
		}
		if procs := e.sys.Root().Processes(); len(procs) != 0 {
			t.Errorf("left processes %v", procs)
		}
	})
	// A panic at start is never contained: the supervisor's start panics too.
	bubble(t, 1, func(t *testing.T, e *env) {
		e.plan("p", func(int) instance { return instance{startPanic: true} })
		_, err := supervisor.Start(e.ctx, e.sys.Root(), supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a"), e.spec("p")}})
		var ae *actor.StartError
		if !errors.As(err, &ae) || ae.Outcome.Severity != actor.Panicked {
			t.Fatalf("start: %v, want a Panicked start", err)
		}
		if e.pid("a").Alive() {
			t.Error("a outlived the failed start")
		}
	})
}
