package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/orrery-run/orrery/workflow"
)

// A Ctx belongs to its function's goroutine. Two goroutines asking for
// steps on one Ctx would make the step order, and so which recorded result
// each gets on a re-run, depend on the scheduler: the steps are refused
// with ErrConcurrentUse and the run fails with it, whatever the function
// returns. A step asked for from inside a step's function is refused too.
func TestConcurrentUseOfACtxFailsTheRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(c *workflow.Ctx, tl *tally) error
	}{
		{"two goroutines", func(c *workflow.Ctx, tl *tally) error {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = workflow.Step(c, fmt.Sprint("g", i), func(context.Context) (int, error) { tl.inc("g"); return i, nil })
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if !errors.Is(err, workflow.ErrConcurrentUse) {
					return fmt.Errorf("a step from another goroutine: %v, want ErrConcurrentUse", err)
				}
			}
			return nil // the function swallows the refusal; the run still fails
		}},
		{"nested", func(c *workflow.Ctx, tl *tally) error {
			var inner error
			_, err := workflow.Step(c, "outer", func(context.Context) (int, error) {
				_, inner = workflow.Step(c, "inner", func(context.Context) (int, error) { tl.inc("g"); return 0, nil })
				return 1, nil
			})
			if err != nil {
				return err
			}
			if !errors.Is(inner, workflow.ErrConcurrentUse) {
				return fmt.Errorf("a step inside a step: %v, want ErrConcurrentUse", inner)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onMemstore(t, 10, func(r *rig) error {
				tl := newTally()
				var checked error
				def := workflow.New("shared", 1, func(c *workflow.Ctx, _ int) (int, error) {
					checked = tc.fn(c, tl)
					return 0, nil
				})
				_, w, cl, err := r.serve("A", def)
				if err != nil {
					return err
				}
				defer w.Stop(r.Ctx)
				_, err = startResult(r, def, cl, "run", 0)
				if checked != nil {
					return checked
				}
				if !errors.Is(err, workflow.ErrFailed) || !strings.Contains(err.Error(), "Ctx used concurrently") {
					return fmt.Errorf("result error %v, want the run failed for concurrent use", err)
				}
				if n := tl.get("g"); n != 0 {
					return fmt.Errorf("a refused step's function ran %d times", n)
				}
				return nil
			})
		})
	}
}
