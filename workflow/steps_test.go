package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
)

// failedPayload reads a StepFailed payload.
type failedPayload struct {
	Error   string `cbor:"error"`
	Final   bool   `cbor:"final"`
	Timeout bool   `cbor:"timeout"`
	RetryAt int64  `cbor:"retry_at"`
}

func TestRetriesWaitTheirBackoffInVirtualTime(t *testing.T) {
	onMemstore(t, 6, func(r *rig) error {
		tl := newTally()
		policy := workflow.RetryPolicy{MaxAttempts: 4, Base: time.Second, Max: 10 * time.Second, Jitter: 0.5}
		def := workflow.New("flaky", 1, func(c *workflow.Ctx, _ int) (int, error) {
			v, err := workflow.Step(c, "flaky", func(context.Context) (int, error) {
				if tl.inc("flaky") <= 2 {
					return 0, errors.New("not yet")
				}
				return 7, nil
			}, workflow.WithRetry(policy))
			if err != nil {
				return 0, err
			}
			// A step that keeps failing ends as a *StepError after its
			// attempts; the function decides what that means.
			_, err = workflow.Step(c, "doomed", func(context.Context) (int, error) {
				tl.inc("doomed")
				return 0, errors.New("always")
			}, workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Base: time.Minute}))
			var se *workflow.StepError
			if !errors.As(err, &se) || se.Attempts != 2 || se.Message != "always" {
				return 0, fmt.Errorf("doomed step: %v", err)
			}
			// A permanent error is not retried.
			_, err = workflow.Step(c, "permanent", func(context.Context) (int, error) {
				tl.inc("permanent")
				return 0, workflow.Permanent(errors.New("no"))
			}, workflow.WithRetry(policy))
			if !errors.Is(err, workflow.ErrStepFailed) {
				return 0, fmt.Errorf("permanent step: %v", err)
			}
			return v, nil
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, def, cl, "run", 0); err != nil || got != 7 {
			return fmt.Errorf("result %d, %v", got, err)
		}
		evs, err := r.streamIs("run", "flaky", 1, []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "flaky", 1}, {event.StepFailed, "flaky", 1},
			{event.StepStarted, "flaky", 2}, {event.StepFailed, "flaky", 2},
			{event.StepStarted, "flaky", 3}, {event.StepCompleted, "flaky", 3},
			{event.StepStarted, "doomed", 1}, {event.StepFailed, "doomed", 1},
			{event.StepStarted, "doomed", 2}, {event.StepFailed, "doomed", 2},
			{event.StepStarted, "permanent", 1}, {event.StepFailed, "permanent", 1},
			{event.RunCompleted, "", 1},
		})
		if err != nil {
			return err
		}
		// Each retry is due at the failure's time plus the policy's delay
		// (jitter seeded by the run, the step and the failure count), and
		// the next attempt starts no earlier.
		for i, n := range []uint64{1, 2} {
			failed, next := evs[2+2*i], evs[3+2*i]
			var p failedPayload
			if err := event.Unmarshal(failed.Payload, &p); err != nil {
				return err
			}
			delay := policy.Delay("run", "flaky", n)
			if delay < time.Second/2<<(n-1) || delay > time.Second<<(n-1) {
				return fmt.Errorf("delay %v after failure %d is outside the policy", delay, n)
			}
			if due := failed.EmittedAt.Add(delay); p.RetryAt != due.UnixNano() || p.Final {
				return fmt.Errorf("failure %d: retry at %d, want %d (%+v)", n, p.RetryAt, due.UnixNano(), p)
			}
			if next.EmittedAt.UnixNano() < p.RetryAt {
				return fmt.Errorf("attempt %d started before its retry was due", n+1)
			}
		}
		var last failedPayload
		if err := event.Unmarshal(evs[10].Payload, &last); err != nil || !last.Final || last.Error != "always" {
			return fmt.Errorf("the doomed step's last failure %+v, %v", last, err)
		}
		if d, p := tl.get("doomed"), tl.get("permanent"); d != 2 || p != 1 {
			return fmt.Errorf("doomed ran %d times, permanent %d", d, p)
		}
		return nil
	})
}

func TestRetryPolicyDelayIsSeededAndBounded(t *testing.T) {
	p := workflow.RetryPolicy{MaxAttempts: 10, Base: time.Second, Max: 8 * time.Second, Jitter: 0.3}
	for n := uint64(1); n <= 70; n++ {
		d := p.Delay("r", "s", n)
		full := min(time.Second<<min(n-1, 10), 8*time.Second)
		if d > full || d < full-full*3/10-1 {
			t.Fatalf("failure %d: delay %v outside [%v, %v]", n, d, full*7/10, full)
		}
		if d != p.Delay("r", "s", n) {
			t.Fatalf("failure %d: the delay is not a function of its inputs", n)
		}
	}
	if p.Delay("r", "s", 3) == p.Delay("other", "s", 3) && p.Delay("r", "s", 4) == p.Delay("other", "s", 4) {
		t.Fatal("two runs retry at the same jittered offsets")
	}
	if d := (workflow.RetryPolicy{Base: time.Second}).Delay("r", "s", 3); d != 4*time.Second {
		t.Fatalf("no jitter: %v, want 4s", d)
	}
}

func TestStepTimeout(t *testing.T) {
	onMemstore(t, 7, func(r *rig) error {
		def := workflow.New("slow", 1, func(c *workflow.Ctx, _ int) (string, error) {
			_, err := workflow.Step(c, "slow", func(ctx context.Context) (int, error) {
				return 0, actor.Sleep(ctx, r.Ex, time.Hour)
			}, workflow.WithTimeout(time.Second))
			var se *workflow.StepError
			if !errors.As(err, &se) || !se.Timeout {
				return "", fmt.Errorf("slow step: %v", err)
			}
			return "timed out", nil
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, def, cl, "run", 0); err != nil || got != "timed out" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		if err := sameShapes(evs, []shape{{event.RunStarted, "", 1}, {event.StepStarted, "slow", 1},
			{event.StepFailed, "slow", 1}, {event.RunCompleted, "", 1}}); err != nil {
			return err
		}
		var p failedPayload
		if err := event.Unmarshal(evs[2].Payload, &p); err != nil || !p.Timeout || !p.Final {
			return fmt.Errorf("failure %+v, %v", p, err)
		}
		if d := evs[2].EmittedAt.Sub(evs[1].EmittedAt); d != time.Second {
			return fmt.Errorf("the attempt was cut after %v of virtual time, want its 1s timeout", d)
		}
		return nil
	})
}

// sleeper runs "a", sleeps an hour, then runs "b".
func sleeper(tl *tally) *workflow.Def[int, int] {
	return workflow.New("sleeper", 1, func(c *workflow.Ctx, in int) (int, error) {
		a, err := workflow.Step(c, "a", func(context.Context) (int, error) { tl.inc("a"); return in + 1, nil })
		if err != nil {
			return 0, err
		}
		if err := workflow.Sleep(c, time.Hour); err != nil {
			return 0, err
		}
		return workflow.Step(c, "b", func(context.Context) (int, error) { tl.inc("b"); return a * 2, nil })
	})
}

func TestDurableSleepSurvivesACrash(t *testing.T) {
	onMemstore(t, 8, func(r *rig) error {
		tl := newTally()
		def := sleeper(tl)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		stopTimers, err := r.Background("timers", func(ctx context.Context) error { return fireTimers(ctx, r.Ex, r.Store) })
		if err != nil {
			return err
		}
		hA := r.Mem.Restart()
		wA, err := r.worker("A", hA, wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "run", 1); err != nil {
			return err
		}
		if err := r.WaitFor("the sleep's timer", 10*time.Second, func() (bool, error) {
			ts, err := r.Store.ListTimers(r.Ctx, "run", 10)
			return len(ts) == 1, err
		}); err != nil {
			return err
		}
		wB, err := r.crashOver(hA, wA, "B", wfs)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		got, err := def.Result(r.Ctx, cl, "run")
		if err != nil || got != 4 {
			return fmt.Errorf("result %d, %v; want 4", got, err)
		}
		if err := stopTimers(); err != nil {
			return err
		}
		if a, b := tl.get("a"), tl.get("b"); a != 1 || b != 1 {
			return fmt.Errorf("executions a=%d b=%d", a, b)
		}
		evs, err := r.streamShapes("run", []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "sys:sleep", 1}, {event.StepCompleted, "sys:sleep", 1},
			{event.StepStarted, "b", 1}, {event.StepCompleted, "b", 1},
			{event.RunCompleted, "", 1},
		})
		if err != nil {
			return err
		}
		if d := evs[4].EmittedAt.Sub(evs[3].EmittedAt); d < time.Hour {
			return fmt.Errorf("the sleep ended after %v, before its hour", d)
		}
		items, err := r.Store.ReadInbox(r.Ctx, "run", 0, 0)
		if err != nil {
			return err
		}
		fired := 0
		for _, it := range items {
			if it.Kind == vocab.KindTimer {
				fired++
			}
		}
		if fired != 1 {
			return fmt.Errorf("the timer fired %d times", fired)
		}
		return nil
	})
}

func TestAwaitConsumesSignalsInOrderOnce(t *testing.T) {
	forEachBackend(t, 9, func(r *rig) error {
		def := workflow.New("approval", 1, func(c *workflow.Ctx, _ int) (string, error) {
			a, err := workflow.Await[string](c, "vote")
			if err != nil {
				return "", err
			}
			b, err := workflow.Await[string](c, "vote")
			if err != nil {
				return "", err
			}
			n, err := workflow.Await[int](c, "count")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s,%s,%d", a, b, n), nil
		})
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "run", 0); err != nil {
			return err
		}
		// Signals sent before any worker runs wait in the inbox; a retry
		// with the same key is one signal.
		for _, s := range []struct{ name, value, key string }{{"vote", "yes", "k1"}, {"vote", "yes", "k1"}, {"vote", "no", "k2"}} {
			if err := cl.Signal(r.Ctx, "run", s.name, s.value, s.key); err != nil {
				return err
			}
		}
		w, err := r.worker("w", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := r.waitStreamLen("the count await", "run", 6); err != nil {
			return err
		}
		if err := cl.Signal(r.Ctx, "run", "count", 3, ""); err != nil {
			return err
		}
		if got, err := def.Result(r.Ctx, cl, "run"); err != nil || got != "yes,no,3" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		if _, err := r.streamIs("run", "approval", 1, []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "sys:await:vote", 1}, {event.StepCompleted, "sys:await:vote", 1},
			{event.StepStarted, "sys:await:vote#2", 1}, {event.StepCompleted, "sys:await:vote#2", 1},
			{event.StepStarted, "sys:await:count", 1}, {event.StepCompleted, "sys:await:count", 1},
			{event.RunCompleted, "", 1},
		}); err != nil {
			return err
		}
		if err := cl.Signal(r.Ctx, "run", "vote", "late", ""); !errors.Is(err, workflow.ErrFinished) {
			return fmt.Errorf("a signal to a finished run: %v, want ErrFinished", err)
		}
		if err := cl.Signal(r.Ctx, "nope", "vote", "x", ""); !errors.Is(err, workflow.ErrNotFound) {
			return fmt.Errorf("a signal to no run: %v, want ErrNotFound", err)
		}
		return nil
	})
}

func TestCancelStopsTheStepAndRecordsSkipAndCancel(t *testing.T) {
	onMemstore(t, 10, func(r *rig) error {
		tl, g := newTally(), newGate(r.Ex)
		stepErr := make(chan error, 1)
		def := workflow.New("long", 1, func(c *workflow.Ctx, _ int) (int, error) {
			return workflow.Step(c, "wait", func(ctx context.Context) (int, error) {
				tl.inc("wait")
				err := g.wait(ctx)
				stepErr <- err
				return 1, err
			})
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "run", 0); err != nil {
			return err
		}
		if err := r.waitEntries("the step running", g, 1); err != nil {
			return err
		}
		if err := cl.Cancel(r.Ctx, "run", "no longer needed"); err != nil {
			return err
		}
		_, err = cl.Result(r.Ctx, "run")
		var re *workflow.RunError
		if !errors.Is(err, workflow.ErrCancelled) || !errors.As(err, &re) || re.Message != "no longer needed" {
			return fmt.Errorf("result error %v, want the cancellation", err)
		}
		select {
		case err := <-stepErr:
			if err == nil {
				return errors.New("the step's context did not end")
			}
		default:
			return errors.New("the step did not return")
		}
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		if err := sameShapes(evs, []shape{{event.RunStarted, "", 1}, {event.StepStarted, "wait", 1},
			{event.StepSkipped, "wait", 1}, {event.RunCancelled, "", 1}}); err != nil {
			return err
		}
		if err := checkEnvelopes(evs, "run", "long", 1); err != nil {
			return err
		}
		rec, err := r.Store.GetWorld(r.Ctx, "run")
		if err != nil || rec.Status != store.WorldArchived || rec.StatusReason != "cancelled" {
			return fmt.Errorf("world %+v, %v", rec, err)
		}
		if err := cl.Cancel(r.Ctx, "run", "again"); err != nil {
			return fmt.Errorf("cancelling a cancelled run: %v", err)
		}
		return nil
	})
}

func TestCancelWithNoWorkerIsRecordedByTheClient(t *testing.T) {
	forEachBackend(t, 11, func(r *rig) error {
		def := workflow.New("idle", 1, func(c *workflow.Ctx, _ int) (int, error) { return 0, nil })
		_, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		if err := def.Start(r.Ctx, cl, "run", 0); err != nil {
			return err
		}
		if err := cl.Cancel(r.Ctx, "run", "changed my mind"); err != nil {
			return err
		}
		if _, err := cl.Result(r.Ctx, "run"); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("result %v, want cancelled", err)
		}
		if err := r.shapesAre("run", []shape{{event.RunCancelled, "", 1}}); err != nil {
			return err
		}
		sum, err := cl.Get(r.Ctx, "run")
		if err != nil || sum.Status != workflow.StatusCancelled || sum.Error != "changed my mind" {
			return fmt.Errorf("summary %+v, %v", sum, err)
		}
		if err := cl.Pause(r.Ctx, "run", ""); !errors.Is(err, workflow.ErrFinished) {
			return fmt.Errorf("pausing a cancelled run: %v, want ErrFinished", err)
		}
		return nil
	})
}

func TestPauseFencesTheHolderAndResumeContinues(t *testing.T) {
	onMemstore(t, 12, func(r *rig) error {
		tl, g, def := r.gated()
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		ev := &events{}
		w, err := r.worker("w", r.WorkerStore(), wfs, ev, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := r.startGated(def, cl, "step b running", g); err != nil {
			return err
		}
		acq, _ := ev.find(workflow.EvAcquired, "run")
		if err := cl.Pause(r.Ctx, "run", "maintenance"); err != nil {
			return err
		}
		// The holder is fenced at once: the lease is gone, and a write at
		// its epoch is refused.
		l, _, err := r.Store.GetLease(r.Ctx, "run")
		if err != nil || l.Holder != "" {
			return fmt.Errorf("lease %+v after the pause, %v", l, err)
		}
		probe := event.Envelope{EventID: "probe", StreamID: "run", EventType: "Probe", EmittedAt: r.Ex.Now(),
			LogicalAttemptID: 1, EngineAttemptID: 1, Payload: event.EmptyPayload()}
		probe.Normalize()
		if _, err := r.Store.Append(r.Ctx, "run", []event.Envelope{probe}, store.AppendOptions{Fence: &store.Fence{World: "run", Epoch: acq.Epoch}}); !errors.Is(err, store.ErrFenced) {
			return fmt.Errorf("an append at the holder's epoch after the pause: %v, want ErrFenced", err)
		}
		if err := r.WaitFor("the run stopped on the worker", 10*time.Second, func() (bool, error) {
			return len(w.Runs()) == 0, nil
		}); err != nil {
			return err
		}
		before, err := r.stream("run")
		if err != nil {
			return err
		}
		if sum, err := cl.Get(r.Ctx, "run"); err != nil || sum.Status != workflow.StatusPaused {
			return fmt.Errorf("summary %+v, %v", sum, err)
		}
		// Nothing happens while paused, whatever time passes.
		if err := r.Advance(time.Minute); err != nil {
			return err
		}
		if len(w.Runs()) != 0 || tl.get("b") != 1 {
			return fmt.Errorf("the paused run ran: held %v, b ran %d times", w.Runs(), tl.get("b"))
		}
		g.release()
		if err := cl.Resume(r.Ctx, "run", "done"); err != nil {
			return err
		}
		if got, err := def.Result(r.Ctx, cl, "run"); err != nil || got != 23 {
			return fmt.Errorf("result %d, %v", got, err)
		}
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		if len(before) != 4 {
			return fmt.Errorf("%d events while paused, want 4 (through StepStarted b)", len(before))
		}
		if err := sameShapes(evs, []shape{
			{event.RunStarted, "", 1},
			{event.StepStarted, "a", 1}, {event.StepCompleted, "a", 1},
			{event.StepStarted, "b", 1},
			{event.RunPaused, "", 1}, {event.RunResumed, "", 1},
			{event.StepStarted, "b", 2}, {event.StepCompleted, "b", 2},
			{event.StepStarted, "c", 1}, {event.StepCompleted, "c", 1},
			{event.RunCompleted, "", 1},
		}); err != nil {
			return err
		}
		if err := checkEnvelopes(evs, "run", "gated", 1); err != nil {
			return err
		}
		// RunPaused carries when the pause was asked for.
		items, err := r.Store.ReadInbox(r.Ctx, "run", 0, 0)
		if err != nil {
			return err
		}
		var pausedAt time.Time
		for _, it := range items {
			if it.Kind == workflow.ItemControl && pausedAt.IsZero() {
				pausedAt = it.EnqueuedAt
			}
		}
		at, ok, err := event.SourceOccurredAt(evs[4].Payload)
		if err != nil || !ok || !at.Equal(pausedAt) {
			return fmt.Errorf("RunPaused's sourceOccurredAt %v (%v, %v), want the request's %v", at, ok, err, pausedAt)
		}
		return nil
	})
}

func TestPauseWithNoHolderIsRecordedByTheClient(t *testing.T) {
	forEachBackend(t, 18, func(r *rig) error {
		tl := newTally()
		def := threeSteps(tl)
		wfs, cl, err := r.clientFor(def)
		if err != nil {
			return err
		}
		for _, id := range []string{"by-resume", "by-operator"} {
			if err := def.Start(r.Ctx, cl, id, 1); err != nil {
				return err
			}
			if err := cl.Pause(r.Ctx, id, "hold on"); err != nil {
				return err
			}
			if err := cl.Pause(r.Ctx, id, "again"); err != nil {
				return fmt.Errorf("pausing a paused run: %v", err)
			}
			evs, err := r.stream(id)
			if err != nil {
				return err
			}
			if err := sameShapes(evs, []shape{{event.RunPaused, "", 1}}); err != nil {
				return fmt.Errorf("%s: the client did not record the pause: %w", id, err)
			}
			if s, err := cl.Get(r.Ctx, id); err != nil || s.Status != workflow.StatusPaused {
				return fmt.Errorf("%s: %+v, %v", id, s, err)
			}
		}
		if err := cl.Resume(r.Ctx, "by-resume", "go on"); err != nil {
			return err
		}
		// An operator's status change without a resume request: the next
		// holder records the resume itself, once.
		if _, err := r.Store.SetWorldStatus(r.Ctx, "by-operator", store.WorldActive, "ops"); err != nil {
			return err
		}
		w, err := r.worker("w", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		for _, id := range []string{"by-resume", "by-operator"} {
			if v, err := def.Result(r.Ctx, cl, id); err != nil || v != 5 {
				return fmt.Errorf("%s: result %d, %v", id, v, err)
			}
			evs, err := r.stream(id)
			if err != nil {
				return err
			}
			if err := sameShapes(evs[:3], []shape{{event.RunPaused, "", 1}, {event.RunResumed, "", 1}, {event.RunStarted, "", 1}}); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			if len(evs) != 10 {
				return fmt.Errorf("%s: %d events, want 10", id, len(evs))
			}
			if err := checkEnvelopes(evs, id, "three", 1); err != nil {
				return err
			}
		}
		return nil
	})
}
