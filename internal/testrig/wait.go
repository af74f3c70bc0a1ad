package testrig

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/lab"
)

// WaitFor re-checks cond every step until it holds, failing t when cond
// fails or limit has passed first. The clock is the goroutine's: the
// machine's, or a testing/synctest bubble's virtual one. On the machine's
// clock limit is a hang guard only, far above what the condition takes on
// a loaded machine, never a timing assertion.
func WaitFor(t testing.TB, what string, limit, step time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(step)
	}
}

// WaitLab lets virtual time pass under the lab, in steps of 10ms, until
// cond holds, for at most limit of it.
func WaitLab(env *lab.Env, what string, limit time.Duration, cond func() (bool, error)) error {
	for deadline := env.Lab.Now().Add(limit); ; {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !env.Lab.Now().Before(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		if err := actor.Sleep(env.Ctx, env.Lab, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// Lab runs body under the lab with cfg and fails t with the run's
// failure (its crash pack named in it).
func Lab(t testing.TB, cfg lab.Config, body func(env *lab.Env) error) {
	t.Helper()
	if res := lab.Run(cfg, body); res.Failure != nil {
		t.Fatal(res.Failure)
	}
}
