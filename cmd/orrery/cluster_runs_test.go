//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// The step ids of an errand run: its plain step, its sleep (the workflow
// package names a sleep "sys:sleep") and its effect.
var errandSteps = []string{"prepare", "sys:sleep", errandPost}

// The parts of a run's step events the checker reads. It decodes them
// itself, as the chaos checker decodes the worlds: what it checks must not
// rest on the code it checks.
type (
	runStepStarted struct {
		Kind   string `cbor:"kind"`
		Timer  string `cbor:"timer,omitempty"`
		Intent string `cbor:"intent,omitempty"`
	}
	runStepCompleted struct {
		Seq uint64 `cbor:"seq,omitempty"`
	}
)

// runReport is one workflow run read back from the store: its world
// record, its stream and its inbox.
type runReport struct {
	id        string
	w         store.World
	stream    []event.Envelope
	ends      []string          // the types of its terminal events, in order
	completed map[string]int    // step id → StepCompleted events
	consumed  map[string]uint64 // step id → the inbox seq its StepCompleted consumed
	intents   map[string]string // effect intent → its step id
	timers    map[string]string // sleep timer → its step id
	inbox     map[uint64]store.InboxItem
	starts    int                        // start items in the inbox
	receipts  map[string][]world.Receipt // intent → its receipts in the inbox
	fired     map[string]int             // timer → its firings in the inbox
}

func (r *runReport) ended() bool { return len(r.ends) > 0 }

// version is the errand version the run started on: its first record's.
func (r *runReport) version() uint64 {
	if len(r.stream) == 0 {
		return 0
	}
	return r.stream[0].PlanVersion
}

// readRun reads run id back from st.
func readRun(ctx context.Context, st store.Store, id string) (*runReport, error) {
	// The stream and inbox are read before the world's row: a run's end
	// and its archiving are one commit, so a row read after a stream that
	// holds the end is archived. Read the other way round, a run that
	// ends between the two reads looks ended yet active.
	stream, err := plane.ReadTail(ctx, st, id, 0)
	if err != nil {
		return nil, err
	}
	items, err := st.ReadInbox(ctx, id, 0, 0)
	if err != nil {
		return nil, err
	}
	w, err := st.GetWorld(ctx, id)
	if err != nil {
		return nil, err
	}
	rep := &runReport{id: id, w: w, stream: stream, completed: map[string]int{}, consumed: map[string]uint64{},
		intents: map[string]string{}, timers: map[string]string{}, inbox: map[uint64]store.InboxItem{},
		receipts: map[string][]world.Receipt{}, fired: map[string]int{}}
	for _, e := range stream {
		switch e.EventType {
		case event.RunCompleted, event.RunFailed, event.RunCancelled:
			rep.ends = append(rep.ends, e.EventType)
		case event.StepStarted:
			var p runStepStarted
			if err := event.Unmarshal(e.Payload, &p); err != nil {
				return nil, fmt.Errorf("event %d (StepStarted %s): %w", e.RunSeq, e.StepID, err)
			}
			if p.Intent != "" {
				rep.intents[p.Intent] = e.StepID
			}
			if p.Timer != "" {
				rep.timers[p.Timer] = e.StepID
			}
		case event.StepCompleted:
			var p runStepCompleted
			if err := event.Unmarshal(e.Payload, &p); err != nil {
				return nil, fmt.Errorf("event %d (StepCompleted %s): %w", e.RunSeq, e.StepID, err)
			}
			rep.completed[e.StepID]++
			rep.consumed[e.StepID] = p.Seq
		}
	}
	for _, it := range items {
		rep.inbox[it.Seq] = it
		switch it.Kind {
		case workflow.ItemStart:
			rep.starts++
		case vocab.KindReceipt:
			var rc world.Receipt
			if err := world.Decode(it.Payload, &rc); err != nil {
				return nil, fmt.Errorf("receipt at inbox seq %d: %w", it.Seq, err)
			}
			rep.receipts[rc.IntentHash] = append(rep.receipts[rc.IntentHash], rc)
		case vocab.KindTimer:
			rep.fired[strings.TrimPrefix(it.DedupeKey, store.TimerKeyPrefix)]++
		}
	}
	return rep, nil
}

// checkRun checks an acknowledged errand run: one start item, at most one
// end and, once ended, that it completed exactly once with each of its
// steps completed once, replays to its recorded output, is archived, its
// sleep's timer fired once and its effect has one ok receipt. final adds
// what is read from outside the run: the effect's record is done and the
// target saw the POST.
func (c *cluster) checkRun(ctx context.Context, rep *runReport, f *findings, final bool) {
	id := rep.id
	if u := workflow.Universe(clusterErrand); rep.w.Universe != u {
		f.brokenf("run %s: its world is of universe %q, want %q", id, rep.w.Universe, u)
		return
	}
	if rep.starts != 1 {
		f.brokenf("run %s: %d start items in its inbox, want 1", id, rep.starts)
	}
	for intent, rs := range rep.receipts {
		if len(rs) > 1 {
			f.brokenf("run %s: intent %.12s (step %q) has %d receipts, want 1", id, intent, rep.intents[intent], len(rs))
		}
	}
	for timer, n := range rep.fired {
		if n > 1 {
			f.brokenf("run %s: timer %.12s (step %q) fired %d times, want 1", id, timer, rep.timers[timer], n)
		}
	}
	for step, n := range rep.completed {
		if n > 1 {
			f.brokenf("run %s: step %q completed %d times, want 1", id, step, n)
		}
	}
	switch {
	case len(rep.ends) == 0:
		f.pendingf("run %s has not ended (head %d, status %s)", id, len(rep.stream), rep.w.Status)
		return
	case len(rep.ends) > 1:
		f.brokenf("run %s ended %d times: %v", id, len(rep.ends), rep.ends)
		return
	case rep.ends[0] != event.RunCompleted:
		f.brokenf("run %s ended with %s, want %s", id, rep.ends[0], event.RunCompleted)
		return
	}
	if rep.w.Status != store.WorldArchived {
		f.brokenf("run %s completed but its world is %s, not archived", id, rep.w.Status)
	}
	// The run finished on the version that started it: its first record
	// names it, and its steps and output are that version's.
	v := rep.version()
	def, ok := errandDefs()[v]
	if !ok {
		f.brokenf("run %s started on version %d, which no test binary carries", id, v)
		return
	}
	for _, step := range errandStepsOf(v) {
		if rep.completed[step] != 1 {
			f.brokenf("run %s completed with step %q completed %d times, want 1", id, step, rep.completed[step])
		}
	}
	for step, n := range rep.completed {
		if n > 0 && !slices.Contains(errandStepsOf(v), step) {
			f.brokenf("run %s (v%d) completed step %q, which its version does not have", id, v, step)
		}
	}
	out, err := workflow.Replay(def, rep.stream)
	if err != nil {
		f.brokenf("run %s does not replay: %v", id, err)
		return
	}
	var done errandDone
	if err := event.Unmarshal(out, &done); err != nil || done.Status != 200 || done.Note != errandNote(v, id) {
		f.brokenf("run %s replays to the output %+v (%v), want the note %q and the target's 200", id, done, err, errandNote(v, id))
	}
	// The sleep consumed its own timer's firing.
	sleep := rep.inbox[rep.consumed["sys:sleep"]]
	if timer := strings.TrimPrefix(sleep.DedupeKey, store.TimerKeyPrefix); sleep.Kind != vocab.KindTimer || rep.timers[timer] != "sys:sleep" {
		f.brokenf("run %s: its sleep completed on inbox item %d (%s %q), not its timer's firing", id, sleep.Seq, sleep.Kind, sleep.DedupeKey)
	}
	// The effect completed on its own intent's one receipt, an ok one.
	post := rep.inbox[rep.consumed[errandPost]]
	intent, ok := store.ReceiptKeyIntent(post.DedupeKey)
	if post.Kind != vocab.KindReceipt || !ok || rep.intents[intent] != errandPost {
		f.brokenf("run %s: its effect completed on inbox item %d (%s %q), not its intent's receipt", id, post.Seq, post.Kind, post.DedupeKey)
		return
	}
	if rs := rep.receipts[intent]; len(rs) != 1 || rs[0].Status != vocab.ReceiptOK {
		f.brokenf("run %s: its effect's intent %.12s has receipts %+v, want one ok", id, intent, rs)
	}
	if !final {
		return
	}
	switch es, err := c.db.st.EffectStatus(ctx, intent); {
	case err != nil:
		f.brokenf("run %s: effect status of %.12s: %v", id, intent, err)
	case es.State != vocab.EffectDone:
		f.brokenf("run %s: effect %.12s is %s in the store, want done", id, intent, es.State)
	}
	if c.target.seen(id) < 1 {
		f.brokenf("run %s: its effect's receipt is ok but the target never saw the key", id)
	}
}

// runChecker reads the acknowledged runs for verify's rounds, keeping
// the ended ones (an ended run is archived: nothing changes it any more)
// so that a round reads only the runs still going.
type runChecker struct {
	c     *cluster
	runs  []ackedRun
	tried map[string]bool
	ended map[string]*runReport
	// read reads a run back: readRun on the cluster's store, or, in the
	// checkers' own unit tests, reports built to break a promise.
	read func(ctx context.Context, id string) (*runReport, error)
	// takenOver is what the final round counted: the runs taken up by
	// more than one worker.
	takenOver int
}

func (c *cluster) newRunChecker(led *ackLog) *runChecker {
	runs, tried := led.ackedRuns()
	return &runChecker{c: c, runs: runs, tried: tried, ended: map[string]*runReport{},
		read: func(ctx context.Context, id string) (*runReport, error) { return readRun(ctx, c.db.st, id) }}
}

// check is one round: every acknowledged run exists and is checked;
// final reads every run again and adds the checks that read outside it,
// and that the runs of the workflow are exactly runs the load started.
func (rc *runChecker) check(ctx context.Context, f *findings, final bool) {
	for _, r := range rc.runs {
		if r.AgainCreated {
			f.brokenf("run %s: started again after its acknowledgement, the start answered that it created the run", r.ID)
		}
		rep := rc.ended[r.ID]
		if rep == nil || final {
			var err error
			rep, err = rc.read(ctx, r.ID)
			switch {
			case errors.Is(err, store.ErrWorldNotFound):
				f.brokenf("run %s: acknowledged at %v, but the store has no such run", r.ID, r.At.Format(time.RFC3339Nano))
				continue
			case err != nil:
				f.pendingf("run %s: %v", r.ID, err)
				continue
			}
		}
		rc.c.checkRun(ctx, rep, f, final)
		if rep.ended() {
			rc.ended[r.ID] = rep
		}
	}
	if !final {
		return
	}
	ws, err := rc.c.db.st.ListWorlds(ctx, workflow.Universe(clusterErrand), "")
	if err != nil {
		f.brokenf("list the runs: %v", err)
		return
	}
	for _, w := range ws {
		if !rc.tried[w.ID] {
			f.brokenf("run %s exists, but the load never started it", w.ID)
		}
	}
	// A run's lease epoch counts the workers that took it up: above 1, a
	// worker took it over from another (after a kill, a drain or a lost
	// lease). The figure shows that the fault reached runs in flight.
	rc.takenOver = 0
	for _, r := range rc.runs {
		l, ok, err := rc.c.db.st.GetLease(ctx, r.ID)
		if err != nil {
			f.brokenf("run %s: read its lease: %v", r.ID, err)
			return
		}
		if ok && l.Epoch > 1 {
			rc.takenOver++
		}
	}
}

// checkRunsAPI lists the errand runs through every running process's API
// and requires each acknowledged run listed once, completed, and no run
// the load never started (runsListed). A process's list comes from its
// projection of the runs' streams, which catches up on each request: a
// list that lags is asked again until clusterBound, the hang guard.
func (c *cluster) checkRunsAPI(led *ackLog) {
	c.t.Helper()
	for worker, problems := range c.runsAPIProblems(led, clusterBound) {
		c.t.Errorf("%s's API does not list the runs as the store holds them within %v:\n%s", worker, clusterBound, first(problems, 20))
	}
}

// runsAPIProblems asks every running process's API for the errand runs
// until its list is as runsListed wants or limit passes, and returns what
// was still wrong, by worker.
func (c *cluster) runsAPIProblems(led *ackLog, limit time.Duration) map[string][]string {
	runs, tried := led.ackedRuns()
	out := map[string][]string{}
	for _, p := range c.current() {
		if !p.serves() {
			continue
		}
		var problems []string
		if !poll(limit, 100*time.Millisecond, func() bool {
			problems = runsListed(p.api, runs, tried)
			return len(problems) == 0
		}) {
			out[p.worker] = problems
		}
	}
	return out
}

// runsListed reads the errand runs through cl once and says what is wrong
// with the list: an acknowledged run missing or not completed, a run
// listed twice or one the load never started.
func runsListed(cl *api.Client, runs []ackedRun, tried map[string]bool) []string {
	seen := map[string]int{}
	status, problems := listRuns(cl, seen)
	if problems != nil {
		return problems
	}
	for _, id := range keys(seen) {
		if n := seen[id]; n > 1 {
			problems = append(problems, fmt.Sprintf("run %s listed %d times", id, n))
		}
		if !tried[id] {
			problems = append(problems, fmt.Sprintf("run %s listed, but the load never started it", id))
		}
	}
	for _, r := range runs {
		if s := status[r.ID]; s != string(workflow.StatusCompleted) {
			problems = append(problems, fmt.Sprintf("run %s listed as %q, want completed", r.ID, s))
		}
	}
	return problems
}

// listRuns reads every page of the errand runs through cl, counting each
// id in seen, and returns their statuses, or what went wrong.
func listRuns(cl *api.Client, seen map[string]int) (map[string]string, []string) {
	status := map[string]string{}
	after := ""
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, next, err := cl.SearchRuns(ctx, api.RunQuery{Workflow: clusterErrand, ListOptions: api.ListOptions{After: after, Limit: 500}})
		cancel()
		if err != nil {
			return nil, []string{err.Error()}
		}
		for _, r := range page {
			seen[r.ID]++
			status[r.ID] = r.Status
		}
		if next == "" {
			return status, nil
		}
		after = next
	}
}
