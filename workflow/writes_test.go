package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// writeLog is a store that counts the journal writes of one stream and can
// refuse the next Append to it.
type writeLog struct {
	store.Store
	stream string

	mu       sync.Mutex
	appends  [][]string // the event types of each Append to stream
	commits  [][]string // the entry types of each Commit of stream
	failNext bool
	failed   int
	calls    []string // every recorded call on the stream's world, in order
}

func types(evs []store.Record) []string {
	out := make([]string, len(evs))
	for i := range evs {
		out[i] = evs[i].EventType + ":" + evs[i].StepID
	}
	return out
}

func (l *writeLog) Append(ctx context.Context, stream string, evs []store.Record, o store.AppendOptions) ([]store.Appended, error) {
	l.call(stream, "Append")
	if stream == l.stream {
		l.mu.Lock()
		if l.failNext {
			l.failNext = false
			l.failed++
			l.mu.Unlock()
			return nil, errors.New("the test refuses this append")
		}
		l.appends = append(l.appends, types(evs))
		l.mu.Unlock()
	}
	return l.Store.Append(ctx, stream, evs, o)
}

func (l *writeLog) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	name := "Commit"
	if b.Status != nil {
		name += "+" + string(b.Status.Status)
	}
	l.call(world, name)
	if world == l.stream {
		l.mu.Lock()
		l.commits = append(l.commits, types(b.Entries))
		l.mu.Unlock()
	}
	return l.Store.Commit(ctx, world, epoch, b)
}

// The calls the log records by name, for the stream's world.
func (l *writeLog) call(world, name string) {
	if world == l.stream {
		l.mu.Lock()
		l.calls = append(l.calls, name)
		l.mu.Unlock()
	}
}

func (l *writeLog) Spawn(ctx context.Context, s store.SpawnSpec) (store.Spawned, error) {
	l.call(s.World, fmt.Sprintf("Spawn+%d", len(s.Events)))
	return l.Store.Spawn(ctx, s)
}

func (l *writeLog) CreateWorld(ctx context.Context, u, w string, seed *store.Snapshot) (store.World, error) {
	l.call(w, "CreateWorld")
	return l.Store.CreateWorld(ctx, u, w, seed)
}

func (l *writeLog) Enqueue(ctx context.Context, w string, it store.InboxItem) (uint64, bool, error) {
	l.call(w, "Enqueue")
	return l.Store.Enqueue(ctx, w, it)
}

func (l *writeLog) Acquire(ctx context.Context, w, worker string, ttl time.Duration, opts ...store.AcquireOption) (store.Lease, error) {
	l.call(w, "Acquire")
	return l.Store.Acquire(ctx, w, worker, ttl, opts...)
}

func (l *writeLog) SetWorldStatus(ctx context.Context, w string, s store.WorldStatus, reason string) (store.World, error) {
	l.call(w, "SetWorldStatus")
	return l.Store.SetWorldStatus(ctx, w, s, reason)
}

func (l *writeLog) Assign(ctx context.Context, w string, a store.Assignment, by *store.Fence) error {
	l.call(w, "Assign")
	return l.Store.Assign(ctx, w, a, by)
}

func (l *writeLog) Read(ctx context.Context, stream string, after uint64, limit int) ([]store.Record, error) {
	l.call(stream, "Read")
	return l.Store.Read(ctx, stream, after, limit)
}

func (l *writeLog) ReadInbox(ctx context.Context, w string, after uint64, limit int) ([]store.InboxItem, error) {
	l.call(w, "ReadInbox")
	return l.Store.ReadInbox(ctx, w, after, limit)
}

func (l *writeLog) Cursor(ctx context.Context, w string) (uint64, error) {
	l.call(w, "Cursor")
	return l.Store.Cursor(ctx, w)
}

func (l *writeLog) GetWorld(ctx context.Context, w string) (store.World, error) {
	l.call(w, "GetWorld")
	return l.Store.GetWorld(ctx, w)
}

func (l *writeLog) GetLease(ctx context.Context, w string) (store.Lease, bool, error) {
	l.call(w, "GetLease")
	return l.Store.GetLease(ctx, w)
}

func (l *writeLog) snapshot() (appends, commits [][]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]string(nil), l.appends...), append([][]string(nil), l.commits...)
}

// A plain step's StepCompleted rides with the run's next write: a
// three-step run writes its stream in three appends and one commit (the
// end), not eight writes, and every event is still recorded in order.
func TestAStepsCompletionRidesWithTheNextWrite(t *testing.T) {
	forEachBackend(t, 3, func(r *rig) error {
		tl := newTally()
		def := threeSteps(tl)
		wfs, err := workflow.NewWorkflows(def)
		if err != nil {
			return err
		}
		log := &writeLog{Store: r.WorkerStore(), stream: "run-w"}
		w, cl, err := r.serveWith("w1", log, wfs, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if _, err := startResult(r, def, cl, "run-w", 1); err != nil {
			return err
		}
		appends, commits := log.snapshot()
		want := fmt.Sprint([][]string{
			{"RunStarted:", "StepStarted:add"},
			{"StepCompleted:add", "StepStarted:double"},
			{"StepCompleted:double", "StepStarted:add#2"},
		})
		if got := fmt.Sprint(appends); got != want {
			return fmt.Errorf("appends %s, want %s", got, want)
		}
		if got, want := fmt.Sprint(commits), fmt.Sprint([][]string{{"StepCompleted:add#2", "RunCompleted:"}}); got != want {
			return fmt.Errorf("commits %s, want %s", got, want)
		}
		return r.shapesAre("run-w", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "add", 1}, {event.StepCompleted, "add", 1},
			{event.StepStarted, "double", 1}, {event.StepCompleted, "double", 1},
			{event.StepStarted, "add#2", 1}, {event.StepCompleted, "add#2", 1},
			{event.RunCompleted, "", 1},
		})
	})
}

// While a step runs, the step before it is recorded as completed: its
// completion was written with this step's StepStarted, before this step's
// function was called.
func TestTheStepBeforeARunningStepIsDurablyCompleted(t *testing.T) {
	forEachBackend(t, 4, func(r *rig) error {
		g := newGate(r.Ex)
		def := workflow.New("gated", 1, func(c *workflow.Ctx, in int) (int, error) {
			if _, err := workflow.Step(c, "one", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			return workflow.Step(c, "two", func(ctx context.Context) (int, error) { return 2, g.wait(ctx) })
		})
		_, w, cl, err := r.serve("w1", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "run-g", 0); err != nil {
			return err
		}
		if err := r.WaitFor("step two to run", 10*time.Second, func() (bool, error) { return g.entries() > 0, nil }); err != nil {
			return err
		}
		if err := r.shapesAre("run-g", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "one", 1}, {event.StepCompleted, "one", 1},
			{event.StepStarted, "two", 1},
		}); err != nil {
			return err
		}
		g.release()
		_, err = def.Result(r.Ctx, cl, "run-g")
		return err
	})
}

// A completion that was pending when its write failed is lost with it: the
// run is taken up again from its history, where that step was in flight,
// and runs it again as its next logical attempt (the at-least-once a step
// promises), then completes.
func TestALostPendingCompletionRerunsTheStepAsItsNextAttempt(t *testing.T) {
	onMemstore(t, 5, func(r *rig) error {
		tl := newTally()
		log := &writeLog{Store: r.WorkerStore(), stream: "run-l"}
		g := newGate(r.Ex)
		// The second append carries add's completion and double's start:
		// refuse it once.
		twice := workflow.New("three", 1, func(c *workflow.Ctx, in int) (int, error) {
			a, err := workflow.Step(c, "add", func(context.Context) (int, error) {
				if tl.inc("add") == 1 {
					log.mu.Lock()
					log.failNext = true
					log.mu.Unlock()
				}
				return in + 1, nil
			})
			if err != nil {
				return 0, err
			}
			b, err := workflow.Step(c, "double", func(ctx context.Context) (int, error) { tl.inc("double"); return a * 2, g.wait(ctx) })
			if err != nil {
				return 0, err
			}
			return workflow.Step(c, "add", func(context.Context) (int, error) { tl.inc("add#2"); return b + 1, nil })
		})
		wfs, err := workflow.NewWorkflows(twice)
		if err != nil {
			return err
		}
		w, cl, err := r.serveWith("w1", log, wfs, func(c *workflow.WorkerConfig) { c.RetryAfter = 50 * time.Millisecond })
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := twice.Start(r.Ctx, cl, "run-l", 5); err != nil {
			return err
		}
		g.release()
		got, err := twice.Result(r.Ctx, cl, "run-l")
		if err != nil {
			return err
		}
		if got != 13 {
			return fmt.Errorf("result %d, want 13", got)
		}
		if log.failed != 1 || tl.get("add") != 2 || tl.get("double") != 1 {
			return fmt.Errorf("refused %d appends, add ran %d times, double %d; want 1, 2, 1", log.failed, tl.get("add"), tl.get("double"))
		}
		return r.shapesAre("run-l", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "add", 1},
			{event.StepStarted, "add", 2}, {event.StepCompleted, "add", 2},
			{event.StepStarted, "double", 1}, {event.StepCompleted, "double", 1},
			{event.StepStarted, "add#2", 1}, {event.StepCompleted, "add#2", 1},
			{event.RunCompleted, "", 1},
		})
	})
}

// A run started by a client given the worker (WithWorkers) is taken up by
// that worker at once, not by a scan: with scans an hour apart, the run
// still completes within a minute of the lab's virtual time, and no
// assignment hint was written for it.
func TestStartHandsTheRunToALocalWorker(t *testing.T) {
	onMemstore(t, 6, func(r *rig) error {
		def := threeSteps(newTally())
		wfs, err := workflow.NewWorkflows(def)
		if err != nil {
			return err
		}
		w, err := r.worker("w1", r.WorkerStore(), wfs, nil, func(c *workflow.WorkerConfig) {
			c.LeaseTTL, c.ScanEvery, c.HintGap = 3*time.Hour, time.Hour, time.Hour
		})
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		cl, err := workflow.NewClient(r.Store, wfs, r.Ex, workflow.WithWorkers(w))
		if err != nil {
			return err
		}
		// Past the worker's first scan, which runs at its start.
		if err := r.Advance(time.Second); err != nil {
			return err
		}
		started := r.Ex.Now()
		got, err := startResult(r, def, cl, "run-a", 5)
		if err != nil {
			return err
		}
		if took := r.Ex.Now().Sub(started); got != 13 || took > time.Minute {
			return fmt.Errorf("result %d after %v, want 13 within a minute", got, took)
		}
		if _, ok, err := r.Store.GetAssignment(r.Ctx, "run-a"); err != nil || ok {
			return fmt.Errorf("an assignment was written for the handed-over run (ok=%v, err=%v)", ok, err)
		}
		return nil
	})
}

// A run started by a client given the worker costs the store four writes
// and no read: one Spawn (the run's world, its start item, the worker's
// lease, RunStarted and the first step's start), two appends (each next
// step's start with the completion before it) and one commit that records
// the end and archives the run; the Result gets the end from the worker.
func TestARunStartedInProcessIsFourWritesAndNoRead(t *testing.T) {
	forEachBackend(t, 7, func(r *rig) error {
		def := threeSteps(newTally())
		wfs, err := workflow.NewWorkflows(def)
		if err != nil {
			return err
		}
		log := &writeLog{Store: r.WorkerStore(), stream: "run-5"}
		// No backstop re-read of the inbox, and no look for control
		// requests, within the test: a read would be one the run did not
		// need (the poll's and the control watch's own tests cover them).
		w, err := r.worker("w1", log, wfs, nil, func(c *workflow.WorkerConfig) { c.PollEvery, c.ControlEvery = time.Hour, time.Hour })
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		cl, err := workflow.NewClient(log, wfs, r.Ex, workflow.WithWorkers(w))
		if err != nil {
			return err
		}
		if got, err := startResult(r, def, cl, "run-5", 5); err != nil || got != 13 {
			return fmt.Errorf("result %d, %v", got, err)
		}
		log.mu.Lock()
		got := fmt.Sprint(log.calls)
		log.mu.Unlock()
		if want := "[Spawn+2 Append Append Commit+archived]"; got != want {
			return fmt.Errorf("calls on the run %s, want %s", got, want)
		}
		rec, err := r.Store.GetWorld(r.Ctx, "run-5")
		if err != nil || rec.Status != store.WorldArchived || rec.StatusReason != string(workflow.StatusCompleted) {
			return fmt.Errorf("the run's world %+v, %v: want archived as completed", rec, err)
		}
		return nil
	})
}

// Through a local worker, Start stays idempotent by run id: a second
// start of the same run creates nothing and runs nothing again, and one
// with another input is ErrConflict; a function with no step has its end
// as its first write, and still creates the run first.
func TestHandedOverStartsAreIdempotentAndStepless(t *testing.T) {
	forEachBackend(t, 8, func(r *rig) error {
		tl := newTally()
		def := threeSteps(tl)
		bare := workflow.New("bare", 1, func(c *workflow.Ctx, in int) (int, error) { return in * 3, nil })
		wfs, w, err := r.work("w1", def, bare)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		cl, err := workflow.NewClient(r.Store, wfs, r.Ex, workflow.WithWorkers(w))
		if err != nil {
			return err
		}
		for range 2 {
			if got, err := startResult(r, def, cl, "twice", 5); err != nil || got != 13 {
				return fmt.Errorf("result %d, %v", got, err)
			}
		}
		if err := def.Start(r.Ctx, cl, "twice", 6); !errors.Is(err, workflow.ErrConflict) {
			return fmt.Errorf("a start with another input: %v, want ErrConflict", err)
		}
		if n := tl.get("add"); n != 1 {
			return fmt.Errorf("the first step ran %d times, want 1", n)
		}
		if got, err := startResult(r, bare, cl, "bare", 4); err != nil || got != 12 {
			return fmt.Errorf("the stepless run: %d, %v", got, err)
		}
		return r.shapesAre("bare", []shape{{event.RunStarted, "", 1}, {event.RunCompleted, "", 1}})
	})
}

// A client's worker that does not run the workflow leaves the run to the
// others: Start creates it without a lease and a worker that runs it
// takes it up from its scan.
func TestStartWithAWorkerThatLacksTheWorkflowLeavesItToTheScans(t *testing.T) {
	onMemstore(t, 9, func(r *rig) error {
		def := threeSteps(newTally())
		other := workflow.New("other", 1, func(c *workflow.Ctx, in int) (int, error) { return in, nil })
		theirs, err := workflow.NewWorkflows(other)
		if err != nil {
			return err
		}
		ours, err := workflow.NewWorkflows(def)
		if err != nil {
			return err
		}
		local, err := r.worker("local", r.WorkerStore(), theirs, nil, nil)
		if err != nil {
			return err
		}
		defer local.Stop(r.Ctx)
		ev := &events{}
		remote, err := r.worker("remote", r.WorkerStore(), ours, ev, nil)
		if err != nil {
			return err
		}
		defer remote.Stop(r.Ctx)
		cl, err := workflow.NewClient(r.Store, ours, r.Ex, workflow.WithWorkers(local))
		if err != nil {
			return err
		}
		if got, err := startResult(r, def, cl, "elsewhere", 5); err != nil || got != 13 {
			return fmt.Errorf("result %d, %v", got, err)
		}
		if _, ok := ev.find(workflow.EvFinished, "elsewhere"); !ok {
			return fmt.Errorf("the remote worker did not run the run")
		}
		return nil
	})
}
