package actor_test

import (
	"sort"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// TestPreciseAfterFuncNeverFiresEarlyAndStops: a precise timer of the
// production executor runs its function once, never before its deadline
// on the executor's clock; a stopped one never runs (Stop reports that it
// stopped it); a reset one runs once, after the new deadline.
func TestPreciseAfterFuncNeverFiresEarlyAndStops(t *testing.T) {
	ex := actor.NewExecutor(1)
	for _, d := range []time.Duration{0, 300 * time.Microsecond, 3 * time.Millisecond} {
		armed := ex.Now()
		got := make(chan time.Time, 2)
		actor.PreciseAfterFunc(ex, d, func() { got <- ex.Now() })
		if at := <-got; at.Sub(armed) < d {
			t.Fatalf("a %v timer fired after %v", d, at.Sub(armed))
		}
	}

	ran := make(chan struct{}, 2)
	stopped := actor.PreciseAfterFunc(ex, 2*time.Millisecond, func() { ran <- struct{}{} })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	if stopped.Stop() {
		t.Fatal("a second Stop reported true")
	}

	armed := ex.Now()
	reset := actor.PreciseAfterFunc(ex, time.Hour, func() { ran <- struct{}{} })
	if !reset.Reset(2 * time.Millisecond) {
		t.Fatal("Reset of a pending timer reported false")
	}
	<-ran
	if el := ex.Now().Sub(armed); el < 2*time.Millisecond {
		t.Fatalf("the reset timer fired after %v", el)
	}
	if reset.Stop() {
		t.Fatal("Stop after the timer fired reported true")
	}
	// The stopped timer's deadline has passed by now: had it run, its
	// send would be in the channel.
	select {
	case <-ran:
		t.Fatal("a stopped timer ran (or the reset one ran twice)")
	default:
	}
}

// BenchmarkTimerLateness compares the production executor's AfterFunc with
// PreciseAfterFunc: how late each runs its function, for deadlines spread
// over 0–5 ms (reported as p50-µs and p99-µs).
func BenchmarkTimerLateness(b *testing.B) {
	ex := actor.NewExecutor(1)
	for _, c := range []struct {
		name string
		arm  func(time.Duration, func()) actor.Timer
	}{
		{"AfterFunc", ex.AfterFunc},
		{"PreciseAfterFunc", func(d time.Duration, f func()) actor.Timer { return actor.PreciseAfterFunc(ex, d, f) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			late := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				d := time.Duration(i%50) * 100 * time.Microsecond
				due := ex.Now().Add(d)
				done := make(chan time.Duration, 1)
				c.arm(d, func() { done <- ex.Now().Sub(due) })
				late = append(late, <-done)
			}
			sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
			b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-µs")
		})
	}
}
