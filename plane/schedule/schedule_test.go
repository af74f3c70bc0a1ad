package schedule_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
)

// TestIntervalTicksOnTime: an every-15m schedule with a 5m offset starts
// one run per tick, each at its nominal time, with the tick's run id.
func TestIntervalTicksOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		spec := wf(15 * time.Minute)
		spec.Offset = schedule.Duration(5 * time.Minute)
		e.create("s", spec)
		e.starts.autoEnd = true
		e.scheduler(nil)
		time.Sleep(time.Hour + time.Second)
		got := e.starts.started()
		want := []time.Time{at(0, 5), at(0, 20), at(0, 35), at(0, 50)}
		if len(got) != len(want) {
			t.Fatalf("started %v, want %d runs", got, len(want))
		}
		for i, w := range want {
			id := schedule.RunID("s", schedule.Tick{Key: w.Format("20060102T150405.000000000Z")})
			if got[i] != id || !e.starts.startedAt(id).Equal(w) {
				t.Fatalf("run %d = %s at %v, want %s at %v", i, got[i], e.starts.startedAt(got[i]), id, w)
			}
		}
		if sc := e.get("s"); sc.State.Fired != 4 || !sc.NextFireAt.Equal(at(1, 5)) {
			t.Fatalf("state %+v next %v, want 4 fired and next at 01:05", sc.State, sc.NextFireAt)
		}
	})
}

// TestCronTicksOnTime: "*/10 * * * *" and a six-field expression with
// seconds both start on their minutes.
func TestCronTicksOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.create("ten", schedule.Spec{Cron: "*/10 * * * *", Target: schedule.Target{Workflow: "w"}})
		e.create("sec", schedule.Spec{Cron: "30 0 * * * *", Overlap: schedule.OverlapAllow, Target: schedule.Target{Workflow: "w"}})
		e.starts.autoEnd = true
		e.scheduler(nil)
		time.Sleep(2*time.Hour + time.Minute)
		var ten, sec []time.Time
		for _, id := range e.starts.started() {
			switch id[:len("sched.ten")] {
			case "sched.ten":
				ten = append(ten, e.starts.startedAt(id))
			default:
				sec = append(sec, e.starts.startedAt(id))
			}
		}
		if len(ten) != 12 || !ten[0].Equal(at(0, 10)) || !ten[11].Equal(at(2, 0)) {
			t.Fatalf("*/10 fired at %v, want 12 from 00:10 to 02:00", ten)
		}
		if len(sec) != 3 || !sec[0].Equal(at(0, 0).Add(30*time.Second)) || !sec[2].Equal(at(2, 0).Add(30*time.Second)) {
			t.Fatalf("'30 0 * * * *' fired at %v, want 00:00:30, 01:00:30 and 02:00:30", sec)
		}
	})
}

// TestCronFollowsTheZoneAcrossDST: "0 9 * * *" in America/New_York fires
// at 9:00 local on both sides of the end of daylight saving (1 November
// 2026): 13:00 UTC before, 14:00 UTC after.
func TestCronFollowsTheZoneAcrossDST(t *testing.T) {
	spec := schedule.Spec{Cron: "0 9 * * *", TimeZone: "America/New_York", Target: schedule.Target{Workflow: "w"}}
	cad, err := spec.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	n := cad.Next(time.Date(2026, 10, 30, 0, 0, 0, 0, time.UTC))
	var got []time.Time
	for range 4 {
		got = append(got, n)
		n = cad.Next(n)
	}
	want := []time.Time{
		time.Date(2026, 10, 30, 13, 0, 0, 0, time.UTC),
		time.Date(2026, 10, 31, 13, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 1, 14, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 2, 14, 0, 0, 0, time.UTC),
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("ticks %v, want %v", got, want)
		}
	}
	// Spring forward (8 March 2026): 02:30 does not exist that day, and
	// the schedule does not fire twice or at a shifted hour.
	spec = schedule.Spec{Cron: "30 2 * * *", TimeZone: "America/New_York", Target: schedule.Target{Workflow: "w"}}
	if cad, err = spec.Normalize(); err != nil {
		t.Fatal(err)
	}
	n = cad.Next(time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC))
	ny, _ := time.LoadLocation("America/New_York")
	for range 3 {
		if l := n.In(ny); l.Hour() != 2 && l.Day() != 8 {
			t.Fatalf("tick %v (%v local) is not at 02:30 local", n, l)
		}
		if n.In(ny).Day() == 8 && n.In(ny).Hour() == 2 {
			t.Fatalf("tick at a local time that does not exist: %v", n)
		}
		n = cad.Next(n)
	}
}

// TestJitterIsBoundedAndTheSameOnEveryScheduler: each tick fires at its
// nominal time plus JitterOf(id, nominal), which lies in [0, jitter) and
// varies by tick; two schedulers on one store start each tick once, at
// that very instant.
func TestJitterIsBoundedAndTheSameOnEveryScheduler(t *testing.T) {
	const jitter = 4 * time.Minute
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := schedule.JitterOf("s", at(0, 0).Add(time.Duration(i)*time.Hour), jitter)
		if d < 0 || d >= jitter {
			t.Fatalf("jitter %v outside [0, %v)", d, jitter)
		}
		if d != schedule.JitterOf("s", at(0, 0).Add(time.Duration(i)*time.Hour), jitter) {
			t.Fatal("jitter is not a function of the id and the tick")
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct jitters over 200 ticks", len(seen))
	}
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		spec := wf(10 * time.Minute)
		spec.Jitter = schedule.Duration(jitter)
		spec.Overlap = schedule.OverlapAllow
		e.create("s", spec)
		e.scheduler(nil)
		e.scheduler(nil)
		time.Sleep(time.Hour + jitter)
		got := e.starts.started()
		if len(got) != 6 {
			t.Fatalf("started %d runs, want 6: %v", len(got), got)
		}
		for i, id := range got {
			nominal := at(0, 10*(i+1))
			want := nominal.Add(schedule.JitterOf("s", nominal, jitter))
			if at := e.starts.startedAt(id); !at.Equal(want) {
				t.Fatalf("run %s started at %v, want %v", id, at, want)
			}
		}
	})
}

// TestOverlapPolicies: with every run still running, skip starts only the
// first tick, buffer_one keeps one tick and starts it when the run ends,
// allow starts every tick.
func TestOverlapPolicies(t *testing.T) {
	for _, tc := range []struct {
		overlap schedule.Overlap
		before  int // runs started after 3 ticks
		skipped uint64
		after   int // runs once the first run ends
	}{
		{schedule.OverlapSkip, 1, 2, 1},
		{schedule.OverlapBufferOne, 1, 1, 2},
		{schedule.OverlapAllow, 3, 0, 3},
	} {
		t.Run(string(tc.overlap), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				spec := wf(time.Minute)
				spec.Overlap = tc.overlap
				e.create("s", spec)
				e.scheduler(nil)
				time.Sleep(3*time.Minute + time.Second)
				runs := e.starts.started()
				if len(runs) != tc.before {
					t.Fatalf("%d runs after 3 ticks, want %d: %v", len(runs), tc.before, runs)
				}
				if sc := e.get("s"); sc.State.Skipped != tc.skipped {
					t.Fatalf("skipped %d, want %d", sc.State.Skipped, tc.skipped)
				}
				// The runs end well before the next tick.
				for _, id := range runs {
					e.starts.end(id)
				}
				time.Sleep(10 * time.Second)
				if got := len(e.starts.started()); got != tc.after {
					t.Fatalf("%d runs after the first ended, want %d", got, tc.after)
				}
			})
		})
	}
}

// TestCatchUpAfterADayDown: an hourly schedule whose schedulers were all
// down for a day fires, when one comes back, according to its catch-up
// policy: skip none of the 24 missed ticks, once one (the latest), all
// with a limit of 5 the 5 latest; and then keeps its cadence.
func TestCatchUpAfterADayDown(t *testing.T) {
	for _, tc := range []struct {
		policy schedule.CatchUp
		limit  int
		want   []int // hours (after the start) of the missed ticks fired
	}{
		{schedule.CatchUpSkip, 0, nil},
		{schedule.CatchUpOnce, 0, []int{24}},
		{schedule.CatchUpAll, 5, []int{20, 21, 22, 23, 24}},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t)
				spec := wf(time.Hour)
				spec.CatchUp, spec.CatchUpLimit, spec.Overlap = tc.policy, tc.limit, schedule.OverlapAllow
				e.create("s", spec)
				time.Sleep(24*time.Hour + 30*time.Minute) // every scheduler is down
				e.scheduler(nil)
				time.Sleep(time.Minute)
				got := e.starts.started()
				if len(got) != len(tc.want) {
					t.Fatalf("after the downtime started %v, want hours %v", got, tc.want)
				}
				for i, h := range tc.want {
					if want := schedule.RunID("s", schedule.Tick{Key: at(0, 0).Add(time.Duration(h) * time.Hour).Format("20060102T150405.000000000Z")}); got[i] != want {
						t.Fatalf("run %d = %s, want %s", i, got[i], want)
					}
				}
				sc := e.get("s")
				if sc.State.Missed != uint64(24-len(tc.want)) {
					t.Fatalf("missed %d, want %d", sc.State.Missed, 24-len(tc.want))
				}
				time.Sleep(30 * time.Minute)
				last := e.starts.started()
				if len(last) != len(tc.want)+1 || !e.starts.startedAt(last[len(last)-1]).Equal(at(0, 0).Add(25*time.Hour)) {
					t.Fatalf("the cadence after catch-up: %v", last)
				}
			})
		})
	}
}

// TestPauseResumeTriggerDelete: a paused schedule fires nothing and does
// not catch up the pause once resumed; a trigger starts a run at once with
// a key of its own and leaves the cadence as it was; after a delete
// nothing fires.
func TestPauseResumeTriggerDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		ctx := t.Context()
		e.starts.autoEnd = true
		e.create("s", wf(10*time.Minute))
		e.scheduler(nil)
		time.Sleep(10*time.Minute + time.Second) // 00:10 fired
		if _, err := schedule.Pause(ctx, e.st, "s"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Minute) // 00:20, 00:30, 00:40 paused
		if n := len(e.starts.started()); n != 1 {
			t.Fatalf("%d runs through a pause, want 1", n)
		}
		if _, err := schedule.Resume(ctx, e.st, "s"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if n := len(e.starts.started()); n != 1 {
			t.Fatalf("resume caught up the pause: %d runs", n)
		}
		time.Sleep(10 * time.Minute) // 00:50 fires
		if n := len(e.starts.started()); n != 2 {
			t.Fatalf("%d runs after resume, want 2", n)
		}
		// Trigger at 00:55: it starts now, and 01:00 still fires.
		time.Sleep(4*time.Minute + 59*time.Second - 2*time.Second)
		tk, _, err := schedule.Trigger(ctx, e.st, "s")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		runs := e.starts.started()
		if len(runs) != 3 || runs[2] != schedule.RunID("s", tk) || !tk.Manual {
			t.Fatalf("after trigger: %v, want the manual run %s", runs, schedule.RunID("s", tk))
		}
		time.Sleep(5*time.Minute + 5*time.Second)
		runs = e.starts.started()
		if len(runs) != 4 || !e.starts.startedAt(runs[3]).Equal(at(1, 0)) {
			t.Fatalf("the trigger disturbed the cadence: %v", runs)
		}
		if err := schedule.Delete(ctx, e.st, "s"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		if n := len(e.starts.started()); n != 4 {
			t.Fatalf("%d runs after delete, want 4", n)
		}
		if _, err := schedule.Get(ctx, e.st, "s"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get after delete: %v", err)
		}
	})
}

// TestRacingSchedulersStartEachTickOnce: four schedulers on one store
// record each tick once (the fired counter) and create each run once.
func TestRacingSchedulersStartEachTickOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		spec := wf(time.Minute)
		spec.Overlap = schedule.OverlapAllow
		e.create("s", spec)
		for range 4 {
			e.scheduler(nil)
		}
		time.Sleep(30*time.Minute + time.Second)
		if n := len(e.starts.started()); n != 30 {
			t.Fatalf("%d runs for 30 ticks", n)
		}
		if sc := e.get("s"); sc.State.Fired != 30 {
			t.Fatalf("fired counter %d for 30 ticks: a tick was recorded twice or lost", sc.State.Fired)
		}
	})
}

// TestKilledBetweenRecordAndStart: a scheduler that dies after recording a
// tick and before its start leaves the tick pending; another scheduler
// starts it, once.
func TestKilledBetweenRecordAndStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.create("s", wf(time.Hour))
		dying := newFake()
		killed := make(chan struct{}, 1)
		dying.before = func(string) error {
			select {
			case killed <- struct{}{}:
			default:
			}
			return fmt.Errorf("killed")
		}
		stop := e.scheduler(dying)
		time.Sleep(time.Hour)
		<-killed
		stop() // the process dies with the tick recorded and not started
		sc := e.get("s")
		if len(sc.State.Pending) != 1 || len(e.starts.started()) != 0 {
			t.Fatalf("after the kill: pending %v, started %v", sc.State.Pending, e.starts.started())
		}
		e.scheduler(nil)
		time.Sleep(2 * time.Second) // the dead scheduler's tick waits out its retry
		runs := e.starts.started()
		if len(runs) != 1 || runs[0] != schedule.RunID("s", sc.State.Pending[0]) {
			t.Fatalf("the next scheduler started %v, want the pending tick's run", runs)
		}
		if sc := e.get("s"); len(sc.State.Pending) != 0 || sc.State.Fired != 1 {
			t.Fatalf("after completion: %+v", sc.State)
		}
	})
}

// TestWorldTargetDedupeKeyPerTick: a world schedule sends one event per
// tick, keyed by schedule and tick.
func TestWorldTargetDedupeKeyPerTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.create("w", schedule.Spec{Every: schedule.Duration(time.Minute), Target: schedule.Target{World: "acct", Type: "Tick", Value: []byte{0xa0}}})
		e.scheduler(nil)
		e.scheduler(nil)
		time.Sleep(3*time.Minute + time.Second)
		e.starts.mu.Lock()
		defer e.starts.mu.Unlock()
		if len(e.starts.events) != 3 {
			t.Fatalf("events %v, want 3", e.starts.events)
		}
		for i := 1; i <= 3; i++ {
			k := schedule.DedupeKey("w", schedule.Tick{Key: at(0, i).Format("20060102T150405.000000000Z")})
			if _, ok := e.starts.events[k]; !ok {
				t.Fatalf("no event keyed %s: %v", k, e.starts.events)
			}
		}
	})
}

// TestSpecValidation: bad specs are ErrInvalid, before anything is stored.
func TestSpecValidation(t *testing.T) {
	w := schedule.Target{Workflow: "w"}
	for name, s := range map[string]schedule.Spec{
		"neither":        {Target: w},
		"both":           {Cron: "* * * * *", Every: schedule.Duration(time.Minute), Target: w},
		"bad cron":       {Cron: "61 * * * *", Target: w},
		"tz in cron":     {Cron: "TZ=UTC", Target: w},
		"every in cron":  {Cron: "@every 1m", Target: w},
		"bad zone":       {Cron: "* * * * *", TimeZone: "Mars/Olympus", Target: w},
		"short every":    {Every: schedule.Duration(time.Millisecond), Target: w},
		"offset":         {Every: schedule.Duration(time.Minute), Offset: schedule.Duration(time.Hour), Target: w},
		"jitter":         {Every: schedule.Duration(time.Minute), Jitter: schedule.Duration(time.Hour), Target: w},
		"no target":      {Every: schedule.Duration(time.Minute)},
		"two targets":    {Every: schedule.Duration(time.Minute), Target: schedule.Target{Workflow: "w", World: "x", Type: "T"}},
		"overlap":        {Every: schedule.Duration(time.Minute), Overlap: "sometimes", Target: w},
		"catch up":       {Every: schedule.Duration(time.Minute), CatchUp: "all", Target: w},
		"catch up limit": {Every: schedule.Duration(time.Minute), CatchUp: "once", CatchUpLimit: 3, Target: w},
	} {
		if _, err := s.Normalize(); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
