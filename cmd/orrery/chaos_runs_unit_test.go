//go:build unix

package main

// The chaos checker's run row, shown to fail on runs that break their
// promise. The runs are reports built here, in the shape readRun reads,
// handed to the run checker in place of the store.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// judgeRunReports runs the chaos checker's run row over acknowledged runs
// whose reads return reps (a run without a report is not in the store).
// Its limit is zero: one round, so a run still going is judged at once.
func judgeRunReports(t *testing.T, runs []ackedRun, reps map[string]*runReport) *verdict {
	t.Helper()
	tried := map[string]bool{}
	for _, r := range runs {
		tried[r.ID] = true
	}
	rc := &runChecker{c: &cluster{}, runs: runs, tried: tried, ended: map[string]*runReport{},
		read: func(_ context.Context, id string) (*runReport, error) {
			if rep, ok := reps[id]; ok {
				return rep, nil
			}
			return nil, fmt.Errorf("read run %s: %w", id, store.ErrWorldNotFound)
		}}
	v := newVerdict()
	judgeRuns(context.Background(), rc, 0, v)
	return v
}

// wantRunsFail requires the run row failed, with a violation saying want,
// and no other row touched.
func wantRunsFail(t *testing.T, v *verdict, want string) {
	t.Helper()
	wantFail(t, v, chkRuns)
	if !strings.Contains(strings.Join(v.violations[chkRuns], "\n"), want) {
		t.Fatalf("the run row's violations %q, want one saying %q", v.violations[chkRuns], want)
	}
	for name, vs := range v.violations {
		if name != chkRuns && len(vs) > 0 {
			t.Fatalf("row %q failed too: %q", name, vs)
		}
	}
	if !strings.Contains(v.table(), chkRuns) {
		t.Fatalf("the report's table has no row %q:\n%s", chkRuns, v.table())
	}
}

func TestChaosCheckerFindsBrokenRuns(t *testing.T) {
	ack := []ackedRun{{ID: "run-1"}}
	for _, tc := range []struct {
		name, want string
		runs       []ackedRun
		mutate     func(*runReport) // nil: the store has no such run
	}{
		{"completed twice", "ended 2 times", ack, func(r *runReport) {
			r.ends, r.w.Status = []string{event.RunCompleted, event.RunCompleted}, store.WorldArchived
		}},
		{"never completed", "has not ended", ack, func(*runReport) {}},
		{"failed instead", "ended with RunFailed", ack, func(r *runReport) { r.ends = []string{event.RunFailed} }},
		{"a step completed twice", `step "prepare" completed 2 times`, ack, func(r *runReport) { r.completed["prepare"] = 2 }},
		{"its timer fired twice", "fired 2 times", ack, func(r *runReport) { r.fired["t1"] = 2 }},
		{"started twice as two runs", "answered that it created the run", []ackedRun{{ID: "run-1", Again: true, AgainCreated: true}}, func(*runReport) {}},
		{"acknowledged but absent", "the store has no such run", ack, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reps := map[string]*runReport{}
			if tc.mutate != nil {
				rep := runningReport()
				tc.mutate(rep)
				reps[rep.id] = rep
			}
			wantRunsFail(t, judgeRunReports(t, tc.runs, reps), tc.want)
		})
	}
}

// TestChaosCheckerJudgesEveryRun holds the row to every acknowledged run:
// one broken run among sound ones in flight is found, by its id.
func TestChaosCheckerJudgesEveryRun(t *testing.T) {
	var runs []ackedRun
	reps := map[string]*runReport{}
	for i := range 5 {
		rep := runningReport()
		rep.id = fmt.Sprintf("run-%d", i)
		rep.w.ID = rep.id
		if i == 3 {
			rep.ends, rep.w.Status = []string{event.RunCompleted, event.RunCompleted}, store.WorldArchived
		}
		reps[rep.id] = rep
		runs = append(runs, ackedRun{ID: rep.id})
	}
	v := judgeRunReports(t, runs, reps)
	wantRunsFail(t, v, "run run-3 ended 2 times")
	// The four sound ones are in flight: each is reported as not done.
	if n := len(v.violations[chkRuns]); n != 5 {
		t.Fatalf("%d violations, want 5 (one broken, four never ended): %q", n, v.violations[chkRuns])
	}
}

// TestChaosFailoverCountsEndedRuns: a run the lost node held ends (its
// lease keeps its row, the holder cleared, and nobody takes it again), so
// the failover waits for it no longer; a world whose lease is merely
// released (a handoff) is still waited for. The limit is zero: one look.
func TestChaosFailoverCountsEndedRuns(t *testing.T) {
	held := map[string]int64{"c00": 1, "r-0-1": 1}
	m := &leaseMonitor{latest: map[string]leaseObs{
		"c00":   {World: "c00", Holder: "w2", Epoch: 2, ExpiresNs: 200},
		"r-0-1": {World: "r-0-1", Holder: "", Epoch: 2, ExpiresNs: 90, Ended: true},
	}}
	if got := m.awaitRenewed(held, 100, time.Now(), 0); got < 0 {
		t.Fatalf("failover %v with the run ended and the world held again, want a time", got)
	}
	m.latest["r-0-1"] = leaseObs{World: "r-0-1", Holder: "", Epoch: 2, ExpiresNs: 90}
	if got := m.awaitRenewed(held, 100, time.Now(), 0); got >= 0 {
		t.Fatalf("failover %v with a world released and nobody holding it, want -1", got)
	}
}

// TestChaosHeldByCountsTheNodesRuns: the worlds a node held at a fault
// include the workflow runs its workflow worker held (holder
// <worker>/runs), so the fault's summary counts them and the failover
// waits for them too; another node's runs are not counted.
func TestChaosHeldByCountsTheNodesRuns(t *testing.T) {
	m := &leaseMonitor{latest: map[string]leaseObs{
		"c00":   {World: "c00", Holder: "w1", Epoch: 3},
		"r-0-1": {World: "r-0-1", Holder: "w1/runs", Epoch: 1},
		"r-0-2": {World: "r-0-2", Holder: "w2/runs", Epoch: 1},
		"c01":   {World: "c01", Holder: "w10", Epoch: 1},
	}}
	got := m.heldBy("w1")
	want := map[string]int64{"c00": 3, "r-0-1": 1}
	if len(got) != len(want) || got["c00"] != 3 || got["r-0-1"] != 1 {
		t.Fatalf("heldBy(w1) = %v, want %v", got, want)
	}
}
