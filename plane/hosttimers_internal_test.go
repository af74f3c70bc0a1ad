package plane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// fakeClock is an executor whose clock the test sets and whose AfterFuncs
// it inspects: which are live, and for when.
type fakeClock struct {
	actor.Executor // the rest is never called here
	now            time.Time
	timers         []*fakeTimer
	unparks        int
}

type fakeTimer struct {
	at      time.Time
	stopped bool
}

func (t *fakeTimer) Stop() bool               { was := !t.stopped; t.stopped = true; return was }
func (t *fakeTimer) Reset(time.Duration) bool { panic("not used") }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) AfterFunc(d time.Duration, _ func()) actor.Timer {
	t := &fakeTimer{at: c.now.Add(d)}
	c.timers = append(c.timers, t)
	return t
}
func (c *fakeClock) NewParker() actor.Parker { return &countingParker{c} }

type countingParker struct{ c *fakeClock }

func (p *countingParker) Park(context.Context) error { return nil }
func (p *countingParker) Unpark()                    { p.c.unparks++ }

// live returns when the one live timer fires; an error if there are more.
func (c *fakeClock) live() (time.Time, bool, error) {
	var at []time.Time
	for _, t := range c.timers {
		if !t.stopped {
			at = append(at, t.at)
		}
	}
	switch len(at) {
	case 0:
		return time.Time{}, false, nil
	case 1:
		return at[0], true, nil
	}
	return time.Time{}, false, fmt.Errorf("%d timers armed: %v", len(at), at)
}

// TestHostScheduleArmsOneTimerForTheEarliest: however timers are added,
// cancelled, dropped with their world or taken when due, the schedule has
// exactly one executor timer armed, for its earliest entry (none when it
// is empty), and an entry due already wakes the firing task at once.
func TestHostScheduleArmsOneTimerForTheEarliest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &fakeClock{now: t0}
	s := newHostTimers(c)
	a, b := &lease{world: "a"}, &lease{world: "b"}
	want := func(step string, at time.Time, armed bool) {
		t.Helper()
		got, ok, err := c.live()
		if err != nil || ok != armed || ok && !got.Equal(at) {
			t.Fatalf("%s: armed %v for %v (%v), want %v for %v", step, ok, got, err, armed, at)
		}
	}
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	s.add(a, "a30", sec(30), nil)
	want("one timer", sec(30), true)
	s.add(b, "b10", sec(10), nil)
	want("an earlier one", sec(10), true)
	s.add(a, "a20", sec(20), nil)
	want("a middle one", sec(10), true)
	s.add(b, "b10", sec(10), nil)
	want("the same again", sec(10), true)
	s.cancel(b, []string{"b10"})
	want("the earliest cancelled", sec(20), true)
	s.cancel(b, []string{"a20"}) // another world's hash: not b's to cancel
	want("a cancel of another world's timer", sec(20), true)
	s.add(b, "b15", sec(15), nil)
	s.add(b, "b25", sec(25), nil)
	s.drop(b)
	want("b dropped", sec(20), true)
	c.now = sec(25)
	due := s.take(c.now)
	if len(due) != 1 || due[0].hash != "a20" {
		t.Fatalf("taken at 25s: %v", due)
	}
	want("after the take", sec(30), true)
	s.again(due[0], sec(26))
	want("a retry", sec(26), true)
	before := c.unparks
	s.add(a, "a-past", sec(1), nil)
	if c.unparks != before+1 {
		t.Fatal("an entry due already did not wake the firing task")
	}
	if due := s.take(c.now); len(due) != 1 || due[0].hash != "a-past" {
		t.Fatalf("taken: %v", due)
	}
	a.hold.Fence()
	s.drop(a)
	want("every world dropped", time.Time{}, false)
	s.add(a, "a40", sec(40), nil)
	want("a fenced lease's timer is not scheduled", time.Time{}, false)
	if len(s.q) != 0 || len(s.byHash) != 0 || len(s.byLease) != 0 {
		t.Fatalf("left behind: %d in the heap, %d by hash, %d by lease", len(s.q), len(s.byHash), len(s.byLease))
	}
}

// TestTakeFiredHandsOverOnlyTheNextItem: the process takes the firing the
// host wrote only when it is the next item after its cursor; firings at or
// below the cursor are forgotten, later ones kept.
func TestTakeFiredHandsOverOnlyTheNextItem(t *testing.T) {
	h := &Host{}
	l := &lease{world: "w"}
	for _, seq := range []uint64{3, 5, 6} {
		h.offerFired(l, firingAt(seq))
	}
	if _, ok := h.takeFired(l, 3); ok {
		t.Fatal("took a firing at cursor 3: the next item, 4, is not one")
	}
	if len(l.fired) != 2 {
		t.Fatalf("kept %v, want 5 and 6", l.fired)
	}
	it, ok := h.takeFired(l, 4)
	if !ok || it.Seq != 5 || len(l.fired) != 1 || l.fired[0].Seq != 6 {
		t.Fatalf("took %v (%v), kept %v", it, ok, l.fired)
	}
	if _, ok := h.takeFired(l, 9); ok || len(l.fired) != 0 {
		t.Fatalf("past the cursor: kept %v", l.fired)
	}
}

func firingAt(seq uint64) store.InboxItem {
	return store.InboxItem{Seq: seq, World: "w", Kind: vocab.KindTimer}
}
