package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"testing"

	"github.com/orrery-run/orrery/workflow"
)

// A wait whose end the store cannot hold is invalid before it is turned
// into an instant: past 2262 it wraps through int64 Unix nanoseconds into
// the 1600s, and such a sleep would fire at once (250 years from 2026 gave
// 1692). The lab's clock starts in 2000, so the waits here are 290 years. The step records nothing,
// so the function can go on, and no timer is ever scheduled.
func TestFarFutureWaitsAreInvalidAndNeverFire(t *testing.T) {
	const century = 100 * 365 * 24 * time.Hour
	onMemstore(t, 9, func(r *rig) error {
		tl := newTally()
		def := workflow.New("far", 1, func(c *workflow.Ctx, _ int) (string, error) {
			var got []string
			note := func(what string, err error) {
				switch {
				case errors.Is(err, workflow.ErrInvalid):
					got = append(got, what+":invalid")
				case err != nil:
					got = append(got, what+":"+err.Error())
				default:
					got = append(got, what+":ok")
				}
			}
			note("sleep", workflow.Sleep(c, 290*365*24*time.Hour))
			_, err := workflow.Step(c, "slow", func(context.Context) (int, error) { tl.inc("slow"); return 1, nil },
				workflow.WithTimeout(2*century+90*365*24*time.Hour))
			note("timeout", err)
			_, err = workflow.Step(c, "patient", func(context.Context) (int, error) { tl.inc("patient"); return 1, nil },
				workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 2, Max: 2*century + 90*365*24*time.Hour}))
			note("retry", err)
			_, err = workflow.Step(c, "fine", func(context.Context) (int, error) { tl.inc("fine"); return 1, nil })
			note("fine", err)
			return strings.Join(got, " "), nil
		})
		_, w, cl, err := r.serve("A", def)
		if err != nil {
			return err
		}
		defer w.Stop(r.Ctx)
		got, err := startResult(r, def, cl, "run", 0)
		if err != nil {
			return err
		}
		if want := "sleep:invalid timeout:invalid retry:invalid fine:ok"; got != want {
			return fmt.Errorf("result %q, want %q", got, want)
		}
		if tl.get("slow") != 0 || tl.get("patient") != 0 || tl.get("fine") != 1 {
			return fmt.Errorf("executions slow=%d patient=%d fine=%d, want 0 0 1", tl.get("slow"), tl.get("patient"), tl.get("fine"))
		}
		ts, err := r.Store.ListTimers(r.Ctx, "run", 10)
		if err != nil {
			return err
		}
		if len(ts) != 0 {
			return fmt.Errorf("%d timers scheduled, want none: %+v", len(ts), ts)
		}
		return nil
	})
}
