//go:build unix

package main

// The run checker's checks, each shown to fire on a run that breaks its
// promise. They need no database: the reports are built here, in the
// shape readRun reads.

import (
	"context"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// runningReport is a run that has started and waits on its effect: one
// start item, its first two steps completed, its timer fired once and no
// receipt yet.
func runningReport() *runReport {
	return &runReport{
		id:        "run-1",
		w:         store.World{ID: "run-1", Universe: workflow.Universe(clusterErrand), Status: store.WorldActive},
		stream:    []event.Envelope{{StreamID: "run-1", RunSeq: 1, EventType: event.RunStarted, PlanID: clusterErrand, PlanVersion: 1}},
		completed: map[string]int{"prepare": 1, "sys:sleep": 1},
		consumed:  map[string]uint64{"sys:sleep": 2},
		intents:   map[string]string{"i1": errandPost},
		timers:    map[string]string{"t1": "sys:sleep"},
		inbox: map[uint64]store.InboxItem{
			1: {Seq: 1, Kind: workflow.ItemStart},
			2: {Seq: 2, Kind: vocab.KindTimer, DedupeKey: store.TimerKey("t1")},
		},
		starts:   1,
		receipts: map[string][]world.Receipt{},
		fired:    map[string]int{"t1": 1},
	}
}

func TestRunCheckerFindsBrokenRuns(t *testing.T) {
	c := &cluster{}
	check := func(rep *runReport) findings {
		var f findings
		c.checkRun(context.Background(), rep, &f, false)
		return f
	}
	if f := check(runningReport()); len(f.broken) != 0 || len(f.pending) != 1 || !strings.Contains(f.pending[0], "has not ended") {
		t.Fatalf("a run in flight: broken %q, pending %q; want only that it has not ended", f.broken, f.pending)
	}
	for _, tc := range []struct {
		name, want string
		mutate     func(*runReport)
	}{
		{"started twice", "2 start items", func(r *runReport) { r.starts = 2 }},
		{"another workflow", "of universe", func(r *runReport) { r.w.Universe = workflow.Universe("other") }},
		{"two receipts of one intent", "has 2 receipts", func(r *runReport) {
			r.receipts["i1"] = []world.Receipt{{IntentHash: "i1", Status: vocab.ReceiptOK}, {IntentHash: "i1", Status: vocab.ReceiptOK}}
		}},
		{"a timer fired twice", "fired 2 times", func(r *runReport) { r.fired["t1"] = 2 }},
		{"a step completed twice", `step "prepare" completed 2 times`, func(r *runReport) { r.completed["prepare"] = 2 }},
		{"two ends", "ended 2 times", func(r *runReport) { r.ends = []string{event.RunCompleted, event.RunCompleted} }},
		{"failed", "ended with RunFailed", func(r *runReport) { r.ends = []string{event.RunFailed} }},
		{"completed, not archived", "not archived", func(r *runReport) { r.ends = []string{event.RunCompleted} }},
		{"completed without its effect", `step "post" completed 0 times`, func(r *runReport) {
			r.ends, r.w.Status = []string{event.RunCompleted}, store.WorldArchived
		}},
		{"v2 completed without its added step", `step "confirm" completed 0 times`, func(r *runReport) {
			r.stream[0].PlanVersion = 2
			r.ends, r.w.Status = []string{event.RunCompleted}, store.WorldArchived
		}},
		{"v1 completed a step only v2 has", `step "confirm", which its version does not have`, func(r *runReport) {
			r.completed[errandPost], r.completed[errandConfirm] = 1, 1
			r.ends, r.w.Status = []string{event.RunCompleted}, store.WorldArchived
		}},
		{"a version no binary carries", "started on version 3", func(r *runReport) {
			r.stream[0].PlanVersion = 3
			r.ends, r.w.Status = []string{event.RunCompleted}, store.WorldArchived
		}},
	} {
		rep := runningReport()
		tc.mutate(rep)
		f := check(rep)
		if !strings.Contains(strings.Join(f.broken, "\n"), tc.want) {
			t.Errorf("%s: broken %q, want one saying %q", tc.name, f.broken, tc.want)
		}
	}
}
