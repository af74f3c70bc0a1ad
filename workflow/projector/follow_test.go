package projector_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow/projector"
)

// startRun runs r.Run in the background; the returned stop ends it and
// returns Run's error.
func startRun(r *projector.Runner) (stop func() error) {
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// TestRunFollowsLiveAppends: Run catches up at its start, then picks up
// events appended while it runs, on existing and new streams, within one
// longest poll interval of virtual time, however long it was idle before.
func TestRunFollowsLiveAppends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.WithClock(time.Now))
		appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1})
		runs := projector.NewRuns()
		r := newRunner(t, projector.RunnerConfig{Store: st, Executor: actor.NewExecutor(1),
			Streams: projector.Fixed("run-1", "run-2"), Projectors: []projector.Projector{runs}})
		stop := startRun(r)
		synctest.Wait()
		if got, _ := runs.Get("run-1"); got.Status != projector.StatusRunning {
			t.Fatalf("run-1 after the start: %+v", got)
		}
		time.Sleep(time.Minute) // idle: the polls back off to the longest

		appendFree(t, st, "run-1", spec{typ: event.RunCompleted, attempt: 1})
		appendFree(t, st, "run-2", spec{typ: event.RunQueued, attempt: 1})
		time.Sleep(projector.DefaultMaxPoll)
		synctest.Wait()
		if got, _ := runs.Get("run-1"); got.Status != projector.StatusCompleted {
			t.Fatalf("run-1 one poll after its end was appended: %+v", got)
		}
		if got, _ := runs.Get("run-2"); got.Status != projector.StatusQueued {
			t.Fatalf("run-2 one poll after it was appended: %+v", got)
		}
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}

// TestNotifyWakesRunAtOnce: after a long idle, a Notify makes the next
// pass happen without any time passing.
func TestNotifyWakesRunAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.WithClock(time.Now))
		runs := projector.NewRuns()
		r := newRunner(t, projector.RunnerConfig{Store: st, Executor: actor.NewExecutor(1),
			Streams: projector.Fixed("run-1"), Projectors: []projector.Projector{runs}})
		stop := startRun(r)
		time.Sleep(time.Minute)
		synctest.Wait()
		at := time.Now()
		appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1})
		r.Notify()
		synctest.Wait()
		if _, ok := runs.Get("run-1"); !ok || !time.Now().Equal(at) {
			t.Fatalf("after Notify: projected %v, %v of virtual time passed", ok, time.Since(at))
		}
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}

// TestRunBacksOffWhileIdleAndResetsOnProgress: an idle Run doubles its
// wait from MinPoll up to MaxPoll, and the pass after one that moved a
// watermark comes MinPoll later.
func TestRunBacksOffWhileIdleAndResetsOnProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.WithClock(time.Now))
		var mu sync.Mutex
		var passes []time.Duration
		start := time.Now()
		streams := func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			passes = append(passes, time.Since(start))
			return []string{"run-1"}, nil
		}
		const minPoll, maxPoll = 10 * time.Millisecond, 200 * time.Millisecond
		r := newRunner(t, projector.RunnerConfig{Store: st, Executor: actor.NewExecutor(1), Streams: streams,
			Projectors: []projector.Projector{projector.NewRuns()}, MinPoll: minPoll, MaxPoll: maxPoll})
		stop := startRun(r)
		time.Sleep(time.Second)
		synctest.Wait()
		var want []time.Duration
		for at, wait := time.Duration(0), minPoll; at <= time.Second; at, wait = at+wait, min(2*wait, maxPoll) {
			want = append(want, at)
		}
		mu.Lock()
		got := append([]time.Duration(nil), passes...)
		mu.Unlock()
		if !equalDurations(got, want) {
			t.Fatalf("idle passes at %v, want %v", got, want)
		}

		appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1})
		r.Notify()
		synctest.Wait()
		progressAt := time.Since(start)
		time.Sleep(minPoll)
		synctest.Wait()
		mu.Lock()
		last := passes[len(passes)-1]
		mu.Unlock()
		if last != progressAt+minPoll {
			t.Fatalf("pass after progress at %v, want %v", last, progressAt+minPoll)
		}
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRunReportsFailedPassesAndKeepsGoing: a failing pass is handed to
// OnError and retried at the next poll.
func TestRunReportsFailedPassesAndKeepsGoing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.WithClock(time.Now))
		appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1})
		var calls atomic.Int32
		listErr := errors.New("lister down")
		streams := func(context.Context) ([]string, error) {
			if calls.Add(1) <= 2 {
				return nil, listErr
			}
			return []string{"run-1"}, nil
		}
		var reported []error
		var mu sync.Mutex
		runs := projector.NewRuns()
		r := newRunner(t, projector.RunnerConfig{Store: st, Executor: actor.NewExecutor(1), Streams: streams,
			Projectors: []projector.Projector{runs}, OnError: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				reported = append(reported, err)
			}})
		stop := startRun(r)
		time.Sleep(time.Second)
		synctest.Wait()
		if _, ok := runs.Get("run-1"); !ok {
			t.Fatal("run-1 not projected after the lister came back")
		}
		mu.Lock()
		if len(reported) != 2 || !errors.Is(reported[0], listErr) || !errors.Is(reported[1], listErr) {
			t.Errorf("reported %v, want the two failed passes", reported)
		}
		mu.Unlock()
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}

// TestRunIsExclusive: a second Run of a running Runner is refused.
func TestRunIsExclusive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRunner(t, projector.RunnerConfig{Store: memstore.New(memstore.WithClock(time.Now)), Executor: actor.NewExecutor(1),
			Streams: projector.Fixed("run-1"), Projectors: []projector.Projector{projector.NewRuns()}})
		stop := startRun(r)
		synctest.Wait() // the first Run is waiting for its next poll
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		if err := r.Run(ctx); !errors.Is(err, projector.ErrAlreadyRunning) {
			t.Fatalf("second Run: %v", err)
		}
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	})
}

// TestCatchUpBesideRunAppliesInOrderOnce: CatchUp calls racing a Run of
// the same Runner (on real time, while events are appended) never overlap
// with its passes: every event reaches the projector once, in runSeq
// order.
func TestCatchUpBesideRunAppliesInOrderOnce(t *testing.T) {
	st := memstore.New()
	var mu sync.Mutex
	var last uint64
	var disorder []uint64
	c := newCounter("c")
	ordered := projectorFunc{name: "ordered", apply: func(_ context.Context, _ string, e event.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if e.RunSeq != last+1 {
			disorder = append(disorder, e.RunSeq)
		}
		last = e.RunSeq
		return nil
	}}
	r := newRunner(t, projector.RunnerConfig{Store: st, Executor: actor.NewExecutor(1), Streams: projector.Fixed("run-1"),
		Projectors: []projector.Projector{c, ordered}, Batch: 3, MinPoll: time.Microsecond, MaxPoll: time.Millisecond})
	stop := startRun(r)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := r.CatchUp(bg); err != nil {
				t.Error(err)
				return
			}
		}
	})
	appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1})
	for i := range 40 {
		appendFree(t, st, "run-1", steps(i, 1)...)
	}
	close(done)
	wg.Wait()
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	catchUp(t, r)
	c.checkOnce(t, heads(t, st, "run-1"))
	if len(disorder) != 0 {
		t.Fatalf("events applied out of order at %v", disorder)
	}
}
