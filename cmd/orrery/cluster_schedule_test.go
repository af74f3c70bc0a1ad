//go:build unix

package main

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
)

// tickStamp finds a cadence tick's nominal time in the dedupe key of the
// input it sent (the key names the tick, whatever else it holds).
var tickStamp = regexp.MustCompile(`\d{8}T\d{6}\.\d{9}Z`)

// TestScheduleClusterFiresEachTickOnce runs a one-second schedule that
// sends a world an input, on three `orrery serve` processes on PostgreSQL,
// each of which runs a scheduler. Mid-way one process is killed -9 and
// started again, then another is killed for good. Every tick the schedule
// recorded reached the world exactly once: the inputs' ticks are
// consecutive seconds with none missing and none twice (catch-up "all"
// fires whatever a slow or dead scheduler left, so no gap is allowed
// however busy the machine), there are as many as the schedule counts as
// fired, and the world's state counts each once.
func TestScheduleClusterFiresEachTickOnce(t *testing.T) {
	db := newClusterDB(t)
	c := newCluster(t, db, db.dsn, 3)
	const w = "s00"
	c.createWorlds([]string{w})
	ctx := context.Background()
	if _, err := c.procs[0].api.CreateSchedule(ctx, api.CreateScheduleRequest{ID: "beat", ScheduleSpec: api.ScheduleSpec{
		Every: "1s", CatchUp: "all", CatchUpLimit: 1000,
		Target: api.ScheduleTarget{World: w, Type: Add{}.WorldType(), Value: []byte(`{"Key":"beat"}`)},
	}}); err != nil {
		t.Fatal(err)
	}
	fired := func(p *child) uint64 {
		v, err := p.api.GetSchedule(ctx, "beat")
		if err != nil {
			return 0
		}
		return v.Fired
	}
	awaitFired := func(p *child, n uint64) {
		t.Helper()
		if !poll(clusterBound, 100*time.Millisecond, func() bool { return fired(p) >= n }) {
			t.Fatalf("schedule fired %d ticks within %v, want %d", fired(p), clusterBound, n)
		}
	}
	awaitFired(c.procs[2], 3)
	c.kill(c.procs[0])
	n := fired(c.procs[2])
	awaitFired(c.procs[2], n+3)
	c.restart(c.procs[0])
	c.kill(c.procs[1])
	n = fired(c.procs[2])
	awaitFired(c.procs[2], n+3)
	last := c.procs[2]
	if _, err := last.api.PauseSchedule(ctx, "beat"); err != nil {
		t.Fatal(err)
	}

	// Paused, the schedule fires nothing more; a tick it recorded before
	// the pause may still be delivering, so the count settles first.
	var ticks []time.Time
	var view api.ScheduleView
	if !poll(clusterBound, 200*time.Millisecond, func() bool {
		v, err := last.api.GetSchedule(ctx, "beat")
		if err != nil {
			return false
		}
		items, err := c.db.st.ReadInbox(ctx, w, 0, 0)
		if err != nil {
			return false
		}
		ticks = ticks[:0]
		for _, it := range items {
			if m := tickStamp.FindString(it.DedupeKey); m != "" {
				at, err := time.Parse("20060102T150405.000000000Z", m)
				if err != nil {
					t.Fatalf("inbox item %d: tick %q: %v", it.Seq, m, err)
				}
				ticks = append(ticks, at)
			}
		}
		view = v
		return v.Pending == 0 && uint64(len(ticks)) == v.Fired
	}) {
		t.Fatalf("the schedule counts %d ticks fired (%d pending), the world's inbox holds %d", view.Fired, view.Pending, len(ticks))
	}
	slices.SortFunc(ticks, time.Time.Compare)
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Errorf("ticks %s and %s are %v apart: want consecutive seconds, each once", ticks[i-1].Format(time.TimeOnly), ticks[i].Format(time.TimeOnly), d)
		}
	}
	// Each tick was applied once.
	if !poll(clusterBound, 200*time.Millisecond, func() bool {
		rep, err := readWorld(ctx, c.db.st, w)
		if err != nil || rep.cursor < rep.lastSeq {
			return false
		}
		if got := rep.state.Adds["beat"]; got != int64(len(ticks)) {
			t.Fatalf("the world counts %d ticks, its inbox holds %d", got, len(ticks))
		}
		return true
	}) {
		t.Fatalf("the world did not drain its %d ticks within %v", len(ticks), clusterBound)
	}
	c.figure("schedules: a 1s schedule on 3 processes, one killed -9 and restarted, another killed: %d ticks, each delivered once, none missing (%d counted missed and caught up)", len(ticks), view.Missed)
}
