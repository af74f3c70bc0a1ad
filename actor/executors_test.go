package actor_test

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/lab"
)

// bothExecutors runs f once on the production executor in a synctest bubble
// and once on the lab's deterministic executor, so a test states one
// behaviour for both. f may block only through the seam (actor.Sleep,
// calls, Wait) and must report with t.Errorf, never t.Fatal: under the lab
// it runs on a lab thread, not on the test's goroutine.
func bothExecutors(t *testing.T, f func(t *testing.T, sys *actor.System)) {
	t.Helper()
	t.Run("production", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			sys := newSys(t)
			f(t, sys)
			closeSys(t, sys)
		})
	})
	t.Run("lab", func(t *testing.T) {
		res := lab.Run(lab.Config{Seed: 1, Name: t.Name()}, func(env *lab.Env) error {
			f(t, env.System)
			return nil
		})
		if res.Failure != nil {
			t.Fatalf("lab run failed: %v", res.Failure)
		}
	})
}

// sleep blocks for d on sys's clock (virtual under both executors here).
func sleep(t *testing.T, sys *actor.System, d time.Duration) {
	t.Helper()
	if err := actor.Sleep(context.Background(), sys.Executor(), d); err != nil {
		t.Errorf("sleep: %v", err)
	}
}
