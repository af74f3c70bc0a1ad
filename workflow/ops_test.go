package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// signalItems counts the signal items in run's inbox.
func (r *rig) signalItems(run string) (int, error) {
	its, err := r.Store.ReadInbox(r.Ctx, run, 0, 1000)
	n := 0
	for _, it := range its {
		if it.Kind == workflow.ItemSignal {
			n++
		}
	}
	return n, err
}

func opsWorkflows() (tgt, victim, driver *workflow.Def[int, int]) {
	tgt = workflow.New("tgt", 1, func(c *workflow.Ctx, in int) (int, error) {
		return workflow.Await[int](c, "poke")
	})
	victim = workflow.New("victim", 1, func(c *workflow.Ctx, in int) (int, error) {
		return workflow.Await[int](c, "never")
	})
	driver = workflow.New("driver", 1, func(c *workflow.Ctx, in int) (int, error) {
		if err := workflow.StartRun(c, tgt, "t1", 0); err != nil {
			return 0, err
		}
		if err := workflow.SignalRun(c, "t1", "poke", 5); err != nil {
			return 0, err
		}
		if err := workflow.StartRun(c, victim, "v1", 0); err != nil {
			return 0, err
		}
		if err := workflow.CancelRun(c, "v1", "no longer needed"); err != nil {
			return 0, err
		}
		// Answers that do not change are recorded failures.
		if err := workflow.SignalRun(c, "nobody", "poke", 1); !errors.Is(err, workflow.ErrStepFailed) {
			return 0, fmt.Errorf("a signal to no run: %v", err)
		}
		if err := workflow.StartRun(c, victim, "t1", 0); !errors.Is(err, workflow.ErrStepFailed) {
			return 0, fmt.Errorf("a start of a taken run id: %v", err)
		}
		return 1, nil
	})
	return tgt, victim, driver
}

func TestWorkflowSideOperationsStartSignalAndCancelRuns(t *testing.T) {
	forEachBackend(t, 81, func(r *rig) error {
		tgt, victim, driver := opsWorkflows()
		_, w, cl, err := r.serve("w", tgt, victim, driver)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, driver, cl, "d", 0); err != nil || got != 1 {
			return fmt.Errorf("driver: %d, %v", got, err)
		}
		if got, err := tgt.Result(r.Ctx, cl, "t1"); err != nil || got != 5 {
			return fmt.Errorf("t1: %d, %v; want 5", got, err)
		}
		if _, err := cl.Result(r.Ctx, "v1"); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("v1: %v, want cancelled", err)
		}
		if n, err := r.signalItems("t1"); err != nil || n != 1 {
			return fmt.Errorf("t1 got %d signals (%v), want 1", n, err)
		}
		return replays(r, driver, "d", 1)
	})
}

// dropAfterSignal is a worker's store whose first signal to a run lands
// and then loses its answer and the handle (a connection dropped after
// the write).
type dropAfterSignal struct {
	store.Store
	crash func()
	fired atomic.Bool
}

func (s *dropAfterSignal) Enqueue(ctx context.Context, world string, it store.InboxItem) (uint64, bool, error) {
	seq, dup, err := s.Store.Enqueue(ctx, world, it)
	if err == nil && it.Kind == workflow.ItemSignal && s.fired.CompareAndSwap(false, true) {
		s.crash()
		return 0, false, errors.New("connection dropped after the write")
	}
	return seq, dup, err
}

func TestASignalFromAWorkflowIsDeliveredOnceAcrossACrash(t *testing.T) {
	onMemstore(t, 82, func(r *rig) error {
		tgt, victim, driver := opsWorkflows()
		wfs, cl, err := r.clientFor(tgt, victim, driver)
		if err != nil {
			return err
		}
		hA := r.Mem.Restart()
		wA, err := r.worker("A", &dropAfterSignal{Store: hA, crash: hA.Crash}, wfs, nil, nil)
		if err != nil {
			return err
		}
		if err := driver.Start(r.Ctx, cl, "d", 0); err != nil {
			return err
		}
		if err := r.WaitFor("the signal to land", 10*time.Second, func() (bool, error) {
			n, err := r.signalItems("t1")
			if errors.Is(err, store.ErrWorldNotFound) {
				return false, nil
			}
			return n == 1, err
		}); err != nil {
			return err
		}
		wA.Kill(r.Ctx)
		wB, err := r.worker("B", r.WorkerStore(), wfs, nil, nil)
		if err != nil {
			return err
		}
		defer wB.Stop(r.Ctx)
		if got, err := driver.Result(r.Ctx, cl, "d"); err != nil || got != 1 {
			return fmt.Errorf("driver: %d, %v", got, err)
		}
		if n, err := r.signalItems("t1"); err != nil || n != 1 {
			return fmt.Errorf("t1 got %d signals (%v) after the crash, want 1", n, err)
		}
		if got, err := tgt.Result(r.Ctx, cl, "t1"); err != nil || got != 5 {
			return fmt.Errorf("t1: %d, %v; want 5", got, err)
		}
		return nil
	})
}

func TestSignalWithStartNeverLosesTheSignal(t *testing.T) {
	forEachBackend(t, 83, func(r *rig) error {
		tgt, _, _ := opsWorkflows()
		_, w, cl, err := r.serve("w", tgt)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		// Absent: started and signalled; the signal waits for the Await.
		if err := cl.SignalWithStart(r.Ctx, tgt, "s1", 0, "poke", 9, "k1"); err != nil {
			return err
		}
		// Again with the same key: nothing more.
		if err := cl.SignalWithStart(r.Ctx, tgt, "s1", 0, "poke", 9, "k1"); err != nil && !errors.Is(err, workflow.ErrFinished) {
			return err
		}
		if got, err := tgt.Result(r.Ctx, cl, "s1"); err != nil || got != 9 {
			return fmt.Errorf("s1: %d, %v; want 9", got, err)
		}
		if n, err := r.signalItems("s1"); err != nil || n != 1 {
			return fmt.Errorf("s1 got %d signals (%v), want 1", n, err)
		}
		// Running with another input: signalled, not restarted.
		if err := tgt.Start(r.Ctx, cl, "s2", 1); err != nil {
			return err
		}
		if err := cl.SignalWithStart(r.Ctx, tgt, "s2", 2, "poke", 4, "k2"); err != nil {
			return err
		}
		if got, err := tgt.Result(r.Ctx, cl, "s2"); err != nil || got != 4 {
			return fmt.Errorf("s2: %d, %v; want 4", got, err)
		}
		return nil
	})
}

// lostAnswers is a worker's store whose first start of each of the
// driver's targets, first signal and first cancel request land and then
// lose their answer (a connection dropped after the commit), so each
// operation's step is re-run with its write already done.
type lostAnswers struct {
	store.Store
	mu   sync.Mutex
	seen map[string]bool
}

func (s *lostAnswers) once(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[key] {
		return false
	}
	s.seen[key] = true
	return true
}

func (s *lostAnswers) Spawn(ctx context.Context, sp store.SpawnSpec) (store.Spawned, error) {
	got, err := s.Store.Spawn(ctx, sp)
	if err == nil && (sp.World == "t1" || sp.World == "v1") && s.once("spawn:"+sp.World) {
		return store.Spawned{}, errors.New("connection dropped after the spawn")
	}
	return got, err
}

func (s *lostAnswers) Enqueue(ctx context.Context, world string, it store.InboxItem) (uint64, bool, error) {
	seq, dup, err := s.Store.Enqueue(ctx, world, it)
	if err == nil && (it.Kind == workflow.ItemSignal || it.Kind == workflow.ItemControl) && s.once("enqueue:"+it.Kind) {
		return 0, false, errors.New("connection dropped after the enqueue")
	}
	return seq, dup, err
}

// Every operation's write lands and its answer is lost once: the re-run
// steps start t1 and v1 once each, signal t1 once and cancel v1 once, on
// every backend.
func TestOperationsFromAWorkflowHappenOnceWhenTheirAnswerIsLost(t *testing.T) {
	forEachBackend(t, 84, func(r *rig) error {
		tgt, victim, driver := opsWorkflows()
		wfs, cl, err := r.clientFor(tgt, victim, driver)
		if err != nil {
			return err
		}
		lost := &lostAnswers{Store: r.WorkerStore(), seen: map[string]bool{}}
		w, err := r.worker("A", lost, wfs, nil, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, driver, cl, "d", 0); err != nil || got != 1 {
			return fmt.Errorf("driver: %d, %v", got, err)
		}
		if n, err := r.signalItems("t1"); err != nil || n != 1 {
			return fmt.Errorf("t1 got %d signals (%v), want 1", n, err)
		}
		if got, err := tgt.Result(r.Ctx, cl, "t1"); err != nil || got != 5 {
			return fmt.Errorf("t1: %d, %v; want 5", got, err)
		}
		if _, err := cl.Result(r.Ctx, "v1"); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("v1: %v, want cancelled", err)
		}
		for _, id := range []string{"t1", "v1"} {
			evs, err := r.stream(id)
			if err != nil {
				return err
			}
			n := 0
			for _, e := range evs {
				if e.EventType == event.RunStarted {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("%s started %d times, want once", id, n)
			}
		}
		lost.mu.Lock()
		fired := len(lost.seen)
		lost.mu.Unlock()
		if fired != 4 {
			return fmt.Errorf("%d answers lost, want 4 (both starts, the signal, the cancel)", fired)
		}
		return replays(r, driver, "d", 1)
	})
}

// The answers about ended runs: StartRun of an ended run's id with its
// workflow and input is that run (nothing new starts), with another input
// a recorded failure; SignalRun to it is a recorded failure; CancelRun of
// it completes. A replay gives the same answers.
func TestOperationsOnAnEndedRun(t *testing.T) {
	forEachBackend(t, 85, func(r *rig) error {
		done := workflow.New("done", 1, func(c *workflow.Ctx, in int) (int, error) { return in, nil })
		driver := workflow.New("driver2", 1, func(c *workflow.Ctx, in int) (int, error) {
			if err := workflow.StartRun(c, done, "e1", 3); err != nil {
				return 0, fmt.Errorf("a start of the ended run's id with its input: %v", err)
			}
			var se *workflow.StepError
			if err := workflow.StartRun(c, done, "e1", 4); !errors.As(err, &se) {
				return 0, fmt.Errorf("a start of the ended run's id with another input: %v", err)
			}
			if err := workflow.SignalRun(c, "e1", "poke", 1); !errors.Is(err, workflow.ErrStepFailed) {
				return 0, fmt.Errorf("a signal to an ended run: %v", err)
			}
			if err := workflow.CancelRun(c, "e1", "late"); err != nil {
				return 0, fmt.Errorf("a cancel of an ended run: %v", err)
			}
			if err := workflow.CancelRun(c, "nobody", "late"); !errors.Is(err, workflow.ErrStepFailed) {
				return 0, fmt.Errorf("a cancel of no run: %v", err)
			}
			return 1, nil
		})
		_, w, cl, err := r.serve("w", done, driver)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, done, cl, "e1", 3); err != nil || got != 3 {
			return fmt.Errorf("e1: %d, %v", got, err)
		}
		if got, err := startResult(r, driver, cl, "d", 0); err != nil || got != 1 {
			return fmt.Errorf("driver: %d, %v", got, err)
		}
		if n, err := r.signalItems("e1"); err != nil || n != 0 {
			return fmt.Errorf("e1 got %d signals (%v) after it ended, want 0", n, err)
		}
		evs, err := r.stream("e1")
		if err != nil {
			return err
		}
		n := 0
		for _, e := range evs {
			if e.EventType == event.RunStarted {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("e1 started %d times, want once", n)
		}
		return replays(r, driver, "d", 1)
	})
}
