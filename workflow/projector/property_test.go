package projector_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/workflow/projector"
)

// genRun is one generated clean run stream and what its projection must
// say.
type genRun struct {
	id     string
	events []event.Envelope // runSeq 1…n, persistedAt t0 + runSeq seconds
	want   wantRun
}

type wantRun struct {
	workflow string
	version  uint64
	status   projector.RunStatus
	lastErr  string
	// steps lists each step's attempts' statuses, by attempt number, in
	// the order of the step's first event.
	steps []wantStep
}

type wantStep struct {
	id       string
	attempts []projector.AttemptStatus
}

// drawRun draws a clean run: an optional RunQueued, then either nothing
// more, a cancellation, or a RunStarted followed by steps that run
// concurrently (each step's events in order, the steps interleaved),
// retried attempts that fail before the last, skipped steps, pause and
// resume pairs, and an optional end. Every key is distinct: repeated
// run-level events (pauses) count their logical attempts up.
func drawRun(t *rapid.T, id string) genRun {
	plan := rapid.SampledFrom([]string{"checkout", "refund"}).Draw(t, "plan")
	ver := rapid.Uint64Range(1, 3).Draw(t, "version")
	var run []spec
	if rapid.Bool().Draw(t, "queued") {
		run = append(run, spec{typ: event.RunQueued, attempt: 1})
	}
	var want []wantStep
	switch rapid.IntRange(0, 5).Draw(t, "start") {
	case 0: // still queued
		if len(run) == 0 {
			run = append(run, spec{typ: event.RunQueued, attempt: 1})
		}
	case 1:
		run = append(run, spec{typ: event.RunCancelled, attempt: 1})
	default:
		run = append(run, spec{typ: event.RunStarted, attempt: 1})
		var lanes [][]spec
		stepWant := map[string]wantStep{}
		for i := range rapid.IntRange(0, 4).Draw(t, "steps") {
			sid := fmt.Sprintf("step-%d", i)
			var lane []spec
			ws := wantStep{id: sid}
			if rapid.IntRange(0, 4).Draw(t, "skip") == 0 {
				lane = append(lane, spec{typ: event.StepSkipped, step: sid, attempt: 1})
				ws.attempts = append(ws.attempts, projector.AttemptSkipped)
			} else {
				n := rapid.IntRange(1, 3).Draw(t, "attempts")
				for a := 1; a <= n; a++ {
					lane = append(lane, spec{typ: event.StepStarted, step: sid, attempt: uint64(a)})
					end := event.StepFailed
					if a == n {
						end = rapid.SampledFrom([]string{event.StepCompleted, event.StepFailed, ""}).Draw(t, "end")
					}
					switch end {
					case event.StepFailed:
						lane = append(lane, spec{typ: end, step: sid, attempt: uint64(a), err: fmt.Sprintf("%s attempt %d failed", sid, a)})
						ws.attempts = append(ws.attempts, projector.AttemptFailed)
					case event.StepCompleted:
						lane = append(lane, spec{typ: end, step: sid, attempt: uint64(a)})
						ws.attempts = append(ws.attempts, projector.AttemptCompleted)
					default:
						ws.attempts = append(ws.attempts, projector.AttemptRunning)
					}
				}
			}
			lanes = append(lanes, lane)
			stepWant[sid] = ws
		}
		// Interleave the lanes; a step's place in the timeline is that of
		// its first event.
		var firsts []string
		for {
			var open []int
			for i, l := range lanes {
				if len(l) > 0 {
					open = append(open, i)
				}
			}
			if len(open) == 0 {
				break
			}
			i := open[rapid.IntRange(0, len(open)-1).Draw(t, "lane")]
			s := lanes[i][0]
			lanes[i] = lanes[i][1:]
			if !slices.Contains(firsts, s.step) {
				firsts = append(firsts, s.step)
			}
			run = append(run, s)
		}
		for _, sid := range firsts {
			want = append(want, stepWant[sid])
		}
		// Pause and resume pairs, each somewhere after the start.
		for p := range rapid.IntRange(0, 2).Draw(t, "pauses") {
			start := slices.IndexFunc(run, func(s spec) bool { return s.typ == event.RunStarted })
			at := rapid.IntRange(start+1, len(run)).Draw(t, "pauseAt")
			pair := []spec{{typ: event.RunPaused, attempt: uint64(p + 1)}, {typ: event.RunResumed, attempt: uint64(p + 1)}}
			run = slices.Insert(run, at, pair...)
		}
		switch rapid.IntRange(0, 3).Draw(t, "terminal") {
		case 1:
			run = append(run, spec{typ: event.RunCompleted, attempt: 1})
		case 2:
			run = append(run, spec{typ: event.RunFailed, attempt: 1, err: "run " + id + " failed"})
		case 3:
			run = append(run, spec{typ: event.RunCancelled, attempt: 1})
		}
	}
	g := genRun{id: id, want: wantRun{workflow: plan, version: ver, steps: want}}
	for i, s := range run {
		e := envelope(t, id, plan, ver, s)
		e.RunSeq = uint64(i + 1)
		e.PersistedAt = t0.Add(time.Duration(i+1) * time.Second)
		g.events = append(g.events, e)
		if s.err != "" {
			g.want.lastErr = s.err
		}
		switch s.typ {
		case event.RunQueued:
			g.want.status = projector.StatusQueued
		case event.RunStarted, event.RunResumed:
			g.want.status = projector.StatusRunning
		case event.RunPaused:
			g.want.status = projector.StatusPaused
		case event.RunCompleted:
			g.want.status = projector.StatusCompleted
		case event.RunFailed:
			g.want.status = projector.StatusFailed
		case event.RunCancelled:
			g.want.status = projector.StatusCancelled
		}
	}
	return g
}

// projection is what the run projections say about a set of streams.
type projection struct {
	Runs      []projector.Run
	Timelines []projector.RunTimeline
}

// project feeds the streams to fresh Runs and Timeline projections, the
// streams interleaved as drawn (each stream's events in their order).
func project(t *rapid.T, label string, streams [][]event.Envelope) projection {
	runs, tl := projector.NewRuns(), projector.NewTimeline()
	pos := make([]int, len(streams))
	for {
		var open []int
		for i, s := range streams {
			if pos[i] < len(s) {
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			break
		}
		i := open[rapid.IntRange(0, len(open)-1).Draw(t, label+"-stream")]
		e := streams[i][pos[i]]
		pos[i]++
		for _, p := range []projector.Projector{runs, tl} {
			if err := p.Apply(bg, e.StreamID, e); err != nil {
				t.Fatalf("%s: Apply(%s@%d %s): %v", p.Name(), e.StreamID, e.RunSeq, e.EventType, err)
			}
		}
	}
	out := projection{Runs: runs.List()}
	for _, id := range tl.Runs() {
		rt, _ := tl.Get(id)
		out.Timelines = append(out.Timelines, rt)
	}
	return out
}

// renumber gives evs increasing runSeqs from 1, with gaps.
func renumber(t *rapid.T, label string, evs []event.Envelope) {
	var seq uint64
	for i := range evs {
		seq += rapid.Uint64Range(1, 3).Draw(t, label+"-gap")
		evs[i].RunSeq = seq
	}
}

// withDuplicates copies some events of a clean stream to later positions,
// as a feed that bypassed the append authority would: same key, a new
// runSeq, a persistedAt of their own and, sometimes, another payload.
func withDuplicates(t *rapid.T, evs []event.Envelope) []event.Envelope {
	out := slices.Clone(evs)
	for range rapid.IntRange(1, 5).Draw(t, "dups") {
		i := rapid.IntRange(0, len(out)-1).Draw(t, "dupOf")
		d := out[i]
		d.PersistedAt = t0.Add(time.Duration(rapid.IntRange(0, 10_000).Draw(t, "dupAt")) * time.Second)
		if rapid.Bool().Draw(t, "dupPayload") {
			d.Payload = errPayload(t, "a duplicate says something else")
		}
		out = slices.Insert(out, rapid.IntRange(i+1, len(out)).Draw(t, "dupTo"), d)
	}
	renumber(t, "dup", out)
	return out
}

// withShuffledTimes permutes the persistedAt values of a clean stream's
// events among them, so that they no longer rise with runSeq, and returns
// the runSeq each time now belongs to.
func withShuffledTimes(t *rapid.T, evs []event.Envelope) ([]event.Envelope, map[time.Time]uint64) {
	out := slices.Clone(evs)
	times := make([]time.Time, len(out))
	for i, e := range out {
		times[i] = e.PersistedAt
	}
	times = rapid.Permutation(times).Draw(t, "times")
	owner := map[time.Time]uint64{}
	for i := range out {
		out[i].PersistedAt = times[i]
		owner[times[i]] = out[i].RunSeq
	}
	return out, owner
}

// withUnknown interleaves events of types this contract version does not
// define, some naming the run's steps and attempts, some with errors.
func withUnknown(t *rapid.T, evs []event.Envelope) []event.Envelope {
	out := slices.Clone(evs)
	for range rapid.IntRange(1, 6).Draw(t, "unknowns") {
		like := out[rapid.IntRange(0, len(out)-1).Draw(t, "unknownLike")]
		u := like
		u.EventType = rapid.SampledFrom([]string{"RunArchived", "StepRetrying", "StepHeartbeat", "WorldStepped", "runstarted"}).Draw(t, "unknownType")
		u.IdempotencyKey = event.IdempotencyKey(u.StreamID, u.StepID, u.LogicalAttemptID, u.EventType, u.PlanID, u.PlanVersion)
		u.EventID = u.IdempotencyKey
		u.PersistedAt = t0.Add(time.Duration(rapid.IntRange(0, 10_000).Draw(t, "unknownAt")) * time.Second)
		u.Payload = errPayload(t, "unknown events carry no error the projection reads")
		out = slices.Insert(out, rapid.IntRange(0, len(out)).Draw(t, "unknownTo"), u)
	}
	renumber(t, "unknown", out)
	return out
}

// normalizeTimes replaces every time of p by the runSeq of the event it
// came from (owner maps each run's times), after checking each duration
// against its two times, so that projections of streams whose times were
// permuted compare by which event each time was taken from.
func normalizeTimes(t *rapid.T, p projection, owner map[string]map[time.Time]uint64) projection {
	ref := func(run string, at time.Time) time.Time {
		if at.IsZero() {
			return at
		}
		seq, ok := owner[run][at]
		if !ok {
			t.Fatalf("run %s: time %v is no event's persistedAt", run, at)
		}
		return time.Unix(0, int64(seq))
	}
	dur := func(what string, d time.Duration, start, end time.Time) time.Duration {
		var want time.Duration
		if !start.IsZero() && !end.IsZero() {
			want = end.Sub(start)
		}
		if d != want {
			t.Fatalf("%s: duration %v, want %v (%v to %v)", what, d, want, start, end)
		}
		return 0
	}
	var out projection
	for _, r := range p.Runs {
		r.Duration = dur("run "+r.ID, r.Duration, r.StartedAt, r.EndedAt)
		r.QueuedAt, r.StartedAt, r.EndedAt = ref(r.ID, r.QueuedAt), ref(r.ID, r.StartedAt), ref(r.ID, r.EndedAt)
		out.Runs = append(out.Runs, r)
	}
	for _, rt := range p.Timelines {
		c := projector.RunTimeline{Run: rt.Run}
		for _, s := range rt.Steps {
			cs := projector.Step{ID: s.ID, Status: s.Status}
			for _, a := range s.Attempts {
				a.Duration = dur(fmt.Sprintf("%s/%s#%d", rt.Run, s.ID, a.Attempt), a.Duration, a.StartedAt, a.EndedAt)
				a.StartedAt, a.EndedAt = ref(rt.Run, a.StartedAt), ref(rt.Run, a.EndedAt)
				cs.Attempts = append(cs.Attempts, a)
			}
			c.Steps = append(c.Steps, cs)
		}
		out.Timelines = append(out.Timelines, c)
	}
	return out
}

// checkModel checks the clean projection against what the generator meant.
func checkModel(t *rapid.T, got projection, runs []genRun) {
	if len(got.Runs) != len(runs) || len(got.Timelines) != len(runs) {
		t.Fatalf("%d runs and %d timelines projected from %d streams", len(got.Runs), len(got.Timelines), len(runs))
	}
	for i, g := range runs {
		r, rt := got.Runs[i], got.Timelines[i]
		w := g.want
		if r.ID != g.id || r.Workflow != w.workflow || r.Version != w.version || r.Status != w.status ||
			r.LastError != w.lastErr || r.Steps != len(w.steps) {
			t.Fatalf("run %s: got %+v, want %+v", g.id, r, w)
		}
		if r.Status.Terminal() != !r.EndedAt.IsZero() {
			t.Fatalf("run %s: status %s but EndedAt %v", g.id, r.Status, r.EndedAt)
		}
		if len(rt.Steps) != len(w.steps) {
			t.Fatalf("run %s: timeline has %d steps, want %d", g.id, len(rt.Steps), len(w.steps))
		}
		for j, ws := range w.steps {
			s := rt.Steps[j]
			var statuses []projector.AttemptStatus
			for k, a := range s.Attempts {
				if a.Attempt != uint64(k+1) {
					t.Fatalf("run %s step %s: attempt %d at index %d", g.id, s.ID, a.Attempt, k)
				}
				if (a.Status == projector.AttemptFailed) != (a.Error != "") {
					t.Fatalf("run %s step %s#%d: status %s, error %q", g.id, s.ID, a.Attempt, a.Status, a.Error)
				}
				statuses = append(statuses, a.Status)
			}
			if s.ID != ws.id || !slices.Equal(statuses, ws.attempts) || s.Status != ws.attempts[len(ws.attempts)-1] {
				t.Fatalf("run %s: step %d is %s %v (%s), want %s %v", g.id, j, s.ID, statuses, s.Status, ws.id, ws.attempts)
			}
		}
	}
}

// TestProjectionIgnoresDuplicatesTimesAndUnknownTypes is the projections'
// core property. For random clean run streams (steps in parallel, retried
// attempts, skips, pauses, every end), feeding Runs and Timeline
//
//	(a) the clean streams,
//	(b) the streams with events repeated at later runSeqs (same key),
//	(c) the streams with their persistedAt values permuted, so that they
//	    no longer follow runSeq,
//	(d) the streams with events of unknown types interleaved,
//
// gives exactly the projection of (a), and (a) says what the generator
// meant. For (c) the times must be the same events' times: each time is
// compared by the runSeq of the event it was read from.
func TestProjectionIgnoresDuplicatesTimesAndUnknownTypes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var runs []genRun
		var clean, dups, shuffled, unknown [][]event.Envelope
		cleanOwner, shuffledOwner := map[string]map[time.Time]uint64{}, map[string]map[time.Time]uint64{}
		for i := range rapid.IntRange(1, 4).Draw(t, "runs") {
			g := drawRun(t, fmt.Sprintf("run-%d", i))
			runs = append(runs, g)
			clean = append(clean, g.events)
			cleanOwner[g.id] = map[time.Time]uint64{}
			for _, e := range g.events {
				cleanOwner[g.id][e.PersistedAt] = e.RunSeq
			}
			dups = append(dups, withDuplicates(t, g.events))
			s, owner := withShuffledTimes(t, g.events)
			shuffled = append(shuffled, s)
			shuffledOwner[g.id] = owner
			unknown = append(unknown, withUnknown(t, g.events))
		}
		a := project(t, "clean", clean)
		checkModel(t, a, runs)
		if b := project(t, "dups", dups); !reflect.DeepEqual(b, a) {
			t.Fatalf("with duplicates:\n got %+v\nwant %+v", b, a)
		}
		if d := project(t, "unknown", unknown); !reflect.DeepEqual(d, a) {
			t.Fatalf("with unknown types:\n got %+v\nwant %+v", d, a)
		}
		c := normalizeTimes(t, project(t, "shuffled", shuffled), shuffledOwner)
		if want := normalizeTimes(t, a, cleanOwner); !reflect.DeepEqual(c, want) {
			t.Fatalf("with shuffled persistedAt (times as runSeqs):\n got %+v\nwant %+v", c, want)
		}
	})
}
