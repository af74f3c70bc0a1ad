package actor_test

import (
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// TestSpinUntilReachesTheDeadline: on the production executor a timer
// armed TimerSlack early and followed by SpinUntil runs its work at or
// after the deadline on the executor's clock, never before; the slack is a
// millisecond there and nothing elsewhere (the lab's clock is exact).
func TestSpinUntilReachesTheDeadline(t *testing.T) {
	ex := actor.NewExecutor(1)
	slack := actor.TimerSlack(ex)
	if slack != time.Millisecond {
		t.Fatalf("the production executor's slack is %v, want 1ms", slack)
	}
	for _, d := range []time.Duration{0, 300 * time.Microsecond, 3 * time.Millisecond} {
		deadline := ex.Now().Add(d)
		got := make(chan time.Time, 1)
		ex.AfterFunc(max(d-slack, 0), func() {
			actor.SpinUntil(ex, deadline)
			got <- ex.Now()
		})
		if at := <-got; at.Before(deadline) {
			t.Fatalf("a %v deadline was reached %v early", d, deadline.Sub(at))
		}
	}
}

// TestSpinUntilInASynctestBubble: a bubble's clock stands still until
// every goroutine in it blocks, so a yielding wait would never end;
// SpinUntil sees the clock stand still and sleeps instead, and returns at
// the deadline.
func TestSpinUntilInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ex := actor.NewExecutor(1)
		deadline := ex.Now().Add(700 * time.Microsecond)
		done := make(chan time.Time, 1)
		ex.AfterFunc(0, func() {
			actor.SpinUntil(ex, deadline)
			done <- ex.Now()
		})
		if at := <-done; !at.Equal(deadline) {
			t.Fatalf("returned at %v, want the deadline %v", at, deadline)
		}
	})
}

// BenchmarkTimerLateness compares the production executor's AfterFunc with
// the same timer armed TimerSlack early and finished with SpinUntil: how
// late each runs its function, for deadlines spread over 0–5 ms (reported
// as p50-µs and p99-µs).
func BenchmarkTimerLateness(b *testing.B) {
	ex := actor.NewExecutor(1)
	slack := actor.TimerSlack(ex)
	for _, c := range []struct {
		name string
		arm  func(time.Duration, time.Time, func())
	}{
		{"AfterFunc", func(d time.Duration, _ time.Time, f func()) { ex.AfterFunc(d, f) }},
		{"SlackAndSpinUntil", func(d time.Duration, due time.Time, f func()) {
			ex.AfterFunc(max(d-slack, 0), func() { actor.SpinUntil(ex, due); f() })
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			late := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				d := time.Duration(i%50) * 100 * time.Microsecond
				due := ex.Now().Add(d)
				done := make(chan time.Duration, 1)
				c.arm(d, due, func() { done <- ex.Now().Sub(due) })
				late = append(late, <-done)
			}
			sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
			b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-µs")
		})
	}
}
