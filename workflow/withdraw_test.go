package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow"
)

// executions counts what an adapter executed, by intent hash.
type executions struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *executions) add(hash string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[hash]++
}

func (e *executions) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.n))
	for k, v := range e.n {
		out[k] = v
	}
	return out
}

// effectIntents returns the intent hash each StepStarted of step records,
// in order.
func effectIntents(evs []event.Envelope, step string) ([]string, error) {
	var out []string
	for _, e := range evs {
		if e.EventType != event.StepStarted || e.StepID != step {
			continue
		}
		var p startedPayload
		if err := event.Unmarshal(e.Payload, &p); err != nil {
			return nil, err
		}
		out = append(out, p.Intent)
	}
	return out, nil
}

// oneIntentTwice is the intent that both attempts of step recorded, or an
// error when they did not record one intent twice.
func oneIntentTwice(evs []event.Envelope, step string) (string, error) {
	hashes, err := effectIntents(evs, step)
	if err != nil {
		return "", err
	}
	if len(hashes) != 2 || hashes[0] != hashes[1] {
		return "", fmt.Errorf("the attempts recorded intents %v, want the first one twice", hashes)
	}
	return hashes[0], nil
}

// One logical effect is one intent: an Effect whose first execution is
// slower than its timeout retries by waiting for that same intent, so the
// adapters never see a second one. (Before, the retry published a new
// intent and the adapter, once done with the first, executed the second:
// two charges.)
func TestEffectTimeoutRetryKeepsTheFirstIntent(t *testing.T) {
	onMemstore(t, 41, func(r *rig) error {
		def := echoEffect("charge", "charge", "test.charge",
			workflow.WithTimeout(5*time.Second), workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Base: time.Second}))
		wfs, err := workflow.NewWorkflows(def)
		if err != nil {
			return err
		}
		// The adapter takes 8s per execution: past the first attempt's
		// 5s wait, within the second's.
		var ex executions
		stopAdapter, err := r.Background("adapter", func(ctx context.Context) error {
			return runAdapter(ctx, r.Ex, r.Store, "test.charge", func(it vocab.EffectItem) (vocab.ReceiptStatus, any) {
				ex.add(it.IntentHash)
				if err := actor.Sleep(ctx, r.Ex, 8*time.Second); err != nil {
					return vocab.ReceiptError, map[string]string{"error": err.Error()}
				}
				return vocab.ReceiptOK, echoOut{Echo: "charged"}
			})
		})
		if err != nil {
			return err
		}
		w, cl, err := r.serveWith("w", r.WorkerStore(), wfs, nil)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, def, cl, "run", "k"); err != nil || got != "charged" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		// Long enough for the adapter to have claimed a second intent, had
		// there been one.
		if err := r.Advance(30 * time.Second); err != nil {
			return err
		}
		if err := stopAdapter(); err != nil {
			return err
		}
		evs, err := r.streamShapes("run", retriedOnce("charge"))
		if err != nil {
			return err
		}
		hash, err := oneIntentTwice(evs, "charge")
		if err != nil {
			return err
		}
		if got := ex.snapshot(); len(got) != 1 || got[hash] != 1 {
			return fmt.Errorf("the adapter executed %v, want %s once", got, hash)
		}
		return nil
	})
}

// A timed-out Effect whose retries are spent withdraws its intent in the
// write that records the step's final failure: an adapter that starts
// afterwards finds nothing to execute, and no retry left a second intent.
func TestEffectGivenUpOnTimeoutIsWithdrawn(t *testing.T) {
	onMemstore(t, 42, func(r *rig) error {
		def := workflow.New("charge", 1, func(c *workflow.Ctx, key string) (string, error) {
			_, err := workflow.Effect[echoOut](c, "charge", "test.charge", echoIn{Key: key},
				workflow.WithTimeout(5*time.Second), workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Base: time.Second}))
			var se *workflow.StepError
			if !errors.As(err, &se) || !se.Timeout {
				return "", fmt.Errorf("the effect's error %v, want a timed-out StepError", err)
			}
			return "gave up", nil
		})
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if got, err := startResult(r, def, cl, "run", "k"); err != nil || got != "gave up" {
			return fmt.Errorf("result %q, %v", got, err)
		}
		evs, err := r.stream("run")
		if err != nil {
			return err
		}
		hash, err := oneIntentTwice(evs, "charge")
		if err != nil {
			return err
		}
		if st, err := r.Store.EffectStatus(r.Ctx, hash); err != nil || st.State != vocab.EffectWithdrawn {
			return fmt.Errorf("the given-up intent: %+v, %v; want withdrawn", st, err)
		}
		items, err := r.Store.Claim(r.Ctx, "late-adapter", []string{"test.charge"}, 10, time.Minute)
		if err != nil || len(items) != 0 {
			return fmt.Errorf("an adapter starting after the step gave up claimed %+v, %v", items, err)
		}
		return nil
	})
}

// Cancelling a run whose effect is published but unclaimed withdraws the
// effect with the run's end: an adapter pool started after the cancel
// claims nothing, and the effect's record says it was withdrawn.
func TestCancelledRunsUnclaimedEffectIsNeverExecuted(t *testing.T) {
	forEachBackend(t, 43, func(r *rig) error {
		def := echoEffect("charge", "charge", "test.charge")
		_, w, cl, err := r.serve("w", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		if err := def.Start(r.Ctx, cl, "run", "k"); err != nil {
			return err
		}
		var pending []vocab.EffectItem
		if err := r.WaitFor("the published intent", 10*time.Second, func() (bool, error) {
			var err error
			pending, err = r.Store.ListEffects(r.Ctx, "run", 0, 10)
			return len(pending) == 1, err
		}); err != nil {
			return err
		}
		if err := cl.Cancel(r.Ctx, "run", "customer changed their mind"); err != nil {
			return err
		}
		if _, err := def.Result(r.Ctx, cl, "run"); !errors.Is(err, workflow.ErrCancelled) {
			return fmt.Errorf("result after the cancel: %v, want ErrCancelled", err)
		}
		var ex executions
		stopAdapter, err := r.Background("adapter", func(ctx context.Context) error {
			return runAdapter(ctx, r.Ex, r.Store, "test.charge", func(it vocab.EffectItem) (vocab.ReceiptStatus, any) {
				ex.add(it.IntentHash)
				return vocab.ReceiptOK, echoOut{Echo: "charged"}
			})
		})
		if err != nil {
			return err
		}
		// The adapter's first claim runs at once; give it a few more
		// turns to show nothing comes later either.
		if err := r.Advance(3 * time.Second); err != nil {
			return err
		}
		items, err := r.Store.Claim(r.Ctx, "late-adapter", []string{"test.charge"}, 10, time.Minute)
		if err != nil || len(items) != 0 {
			return fmt.Errorf("a claim after the cancel got %+v, %v", items, err)
		}
		if err := stopAdapter(); err != nil {
			return err
		}
		if got := ex.snapshot(); len(got) != 0 {
			return fmt.Errorf("the adapter executed %v after the run was cancelled", got)
		}
		if st, err := r.Store.EffectStatus(r.Ctx, pending[0].IntentHash); err != nil || st.State != vocab.EffectWithdrawn {
			return fmt.Errorf("the cancelled run's intent: %+v, %v; want withdrawn", st, err)
		}
		return nil
	})
}
