package supervisor_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// collector keeps log entries of one supervisor in a nested tree.
type collector struct {
	mu      sync.Mutex
	entries []supervisor.LogEntry
}

func (c *collector) add(e supervisor.LogEntry) {
	c.mu.Lock()
	c.entries = append(c.entries, e)
	c.mu.Unlock()
}

func (c *collector) get() []supervisor.LogEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.entries)
}

// tree starts parent{inner{w1, w2}, s} and returns the parent and the log
// collector of inner (all its instances).
func tree(e *env, parentBudget int) (*supervisor.Ref, *collector) {
	innerLog := &collector{}
	inner := supervisor.ChildSpecFor("inner", supervisor.Spec{
		MaxRestarts: 1,
		OnLog:       innerLog.add,
		Children:    []supervisor.ChildSpec{e.spec("w1"), e.spec("w2")},
	})
	parent := e.start(supervisor.Spec{MaxRestarts: parentBudget, Children: []supervisor.ChildSpec{inner, e.spec("s")}})
	return parent, innerLog
}

func innerOf(t *testing.T, e *env, parent *supervisor.Ref) *supervisor.Ref {
	t.Helper()
	ch := e.which(parent)
	if len(ch) == 0 || ch[0].ID != "inner" || ch[0].Type != supervisor.Supervisor {
		t.Fatalf("children %+v", ch)
	}
	inner, ok := supervisor.FromPID(ch[0].PID)
	if !ok {
		t.Fatal("FromPID did not recognise the inner supervisor")
	}
	return inner
}

// An inner supervisor that exhausts its budget exits Err; its parent treats
// that like any child failure and restarts it, fresh children and all.
func TestNestedSupervisorEscalatesToParent(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		parent, innerLog := tree(e, 3)
		inner := innerOf(t, e, parent)
		s := e.pid("s")
		e.send("w1", cmdFail)
		e.send("w1", cmdFail)

		o, done := inner.PID().Outcome()
		if !done || o.Severity != actor.Err || !errors.Is(o.Err, supervisor.ErrBudgetExhausted) {
			t.Fatalf("inner outcome %v (done %v), want err(budget exhausted)", o, done)
		}
		if got, want := decisions(innerLog.get()), "start:w1 start:w2 restart:w1 start:w1 budget-exhausted:w1 escalate:w1 shutdown:w2"; !strings.HasPrefix(got, want) {
			t.Errorf("inner log %q, want %q...", got, want)
		}
		log := e.log(parent)
		restart, ok := find(log, supervisor.DecisionRestart, "inner")
		if !ok || restart.PID != inner.PID() || !errors.Is(restart.Outcome.Err, supervisor.ErrBudgetExhausted) {
			t.Fatalf("parent log %s", decisions(log))
		}
		again := innerOf(t, e, parent)
		if again.PID() == inner.PID() || !again.PID().Alive() {
			t.Fatal("inner was not restarted")
		}
		if got := statuses(e.which(again)); got != "w1:running w2:running" {
			t.Errorf("new inner's children %s", got)
		}
		if e.startCount("w1") != 3 || e.startCount("w2") != 2 {
			t.Errorf("starts w1=%d w2=%d", e.startCount("w1"), e.startCount("w2"))
		}
		if e.pid("s") != s || !s.Alive() {
			t.Error("the inner supervisor's sibling was touched")
		}
	})
}

// With no budget of its own left, the parent escalates too: the failure
// reaches the top with its whole causal chain.
func TestNestedEscalationReachesTheTop(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		parent, _ := tree(e, supervisor.NoRestarts)
		e.takeEvents()
		e.send("w2", cmdFail)
		e.send("w2", cmdFail)
		o := e.wait(parent.PID())
		var top *supervisor.EscalationError
		if !errors.As(o.Err, &top) || top.ChildID != "inner" {
			t.Fatalf("parent outcome %v, want an escalation for inner", o)
		}
		var bottom *supervisor.EscalationError
		if !errors.As(top.Outcome.Err, &bottom) || bottom.ChildID != "w2" || !errors.Is(o.Err, errBoom) {
			t.Fatalf("inner's escalation lost: %v", top.Outcome)
		}
		want := []string{"stop:w2", "start:w2", "stop:w2", "stop:w1", "stop:s"}
		if ev := e.takeEvents(); !slices.Equal(ev, want) {
			t.Errorf("events %v, want %v", ev, want)
		}
	})
}

// A panic deep in the tree is never contained at any level.
func TestNestedPanicEscalatesAsPanicked(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		parent, _ := tree(e, 10)
		inner := innerOf(t, e, parent)
		e.send("w1", cmdPanic)
		if o := e.wait(inner.PID()); o.Severity != actor.Panicked {
			t.Errorf("inner %v, want panicked", o)
		}
		if o := e.wait(parent.PID()); o.Severity != actor.Panicked {
			t.Errorf("parent %v, want panicked", o)
		}
		if got := decisions(since(e.hooked(), 2)); got != "stop:inner escalate:inner shutdown:s" {
			t.Errorf("parent log %q", got)
		}
	})
}

// Stopping the top stops the whole tree depth first, newest first.
func TestNestedShutdownIsOrderedThroughTheTree(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		parent, _ := tree(e, 3)
		e.takeEvents()
		if o, err := parent.Stop(e.ctx); err != nil || !o.IsOk() {
			t.Fatalf("stop: %v %v", o, err)
		}
		if ev := e.takeEvents(); !slices.Equal(ev, []string{"stop:s", "stop:w2", "stop:w1"}) {
			t.Errorf("events %v", ev)
		}
	})
}

// A dynamic supervisor can be a child too, and is found again from its PID.
func TestNestedDynamicSupervisor(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		parent := e.start(supervisor.Spec{Children: []supervisor.ChildSpec{supervisor.DynamicChildSpecFor("pool", supervisor.DynamicSpec{})}})
		pid := e.which(parent)[0].PID
		if _, ok := supervisor.FromPID(pid); ok {
			t.Error("FromPID accepted a dynamic supervisor")
		}
		pool, ok := supervisor.DynamicFromPID(pid)
		if !ok {
			t.Fatal("DynamicFromPID did not recognise the pool")
		}
		w, err := pool.StartChild(e.ctx, e.spec("w"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parent.Stop(e.ctx); err != nil {
			t.Fatal(err)
		}
		if w.Alive() {
			t.Error("the pool's child outlived the tree")
		}
	})
}
