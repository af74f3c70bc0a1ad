package supervisor_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// PolicyEscalate (the default): at the limit the supervisor stops every
// child, newest first, and exits Err carrying the child's failure.
func TestEscalationPolicyEscalate(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		sup := e.start(supervisor.Spec{MaxRestarts: 1, Children: []supervisor.ChildSpec{e.spec("a"), e.spec("b"), e.spec("c")}})
		e.send("b", cmdFail)
		e.takeEvents()
		e.send("b", cmdFail)
		o := e.wait(sup.PID())
		if o.Severity != actor.Err {
			t.Fatalf("supervisor outcome %v, want err", o)
		}
		var esc *supervisor.EscalationError
		if !errors.As(o.Err, &esc) || esc.ChildID != "b" || !errors.Is(o.Err, supervisor.ErrBudgetExhausted) || !errors.Is(o.Err, errBoom) {
			t.Fatalf("outcome error %v, want an escalation for b's boom", o.Err)
		}
		if ev := e.takeEvents(); !slices.Equal(ev, []string{"stop:b", "stop:c", "stop:a"}) {
			t.Errorf("events %v, want b's failure then c and a stopped", ev)
		}
		log := e.hooked()
		want := "budget-exhausted:b escalate:b shutdown:c shutdown:a"
		if got := decisions(since(log, 5)); got != want {
			t.Errorf("log tail %q, want %q (whole: %s)", got, want, decisions(log))
		}
	})
}

// PolicyStop: a contained child is stopped for good and the supervisor goes
// on; an uncontained one that failed with Err fails the supervisor.
func TestEscalationPolicyStop(t *testing.T) {
	for _, contain := range []supervisor.Containment{supervisor.Contain, supervisor.Propagate} {
		t.Run(contain.String(), func(t *testing.T) {
			bubble(t, 1, func(t *testing.T, e *env) {
				b := e.spec("b")
				b.Containment = contain
				sup := e.start(supervisor.Spec{MaxRestarts: 1, Escalation: supervisor.PolicyStop,
					Children: []supervisor.ChildSpec{e.spec("a"), b}})
				e.send("b", cmdFail)
				e.send("b", cmdFail)
				log := e.hooked()
				if got, want := decisions(since(log, 4)), "budget-exhausted:b stop:b"; !strings.HasPrefix(got, want) {
					t.Fatalf("log tail %q, want %q", got, want)
				}
				if contain == supervisor.Propagate {
					if o := e.wait(sup.PID()); !errors.Is(o.Err, supervisor.ErrBudgetExhausted) {
						t.Fatalf("supervisor outcome %v, want budget exhausted", o)
					}
					return
				}
				if !sup.PID().Alive() {
					t.Fatal("supervisor stopped")
				}
				if got := statuses(e.which(sup)); got != "a:running b:terminated" {
					t.Errorf("children %s", got)
				}
				if n := e.startCount("b"); n != 2 {
					t.Errorf("b started %d times, want 2", n)
				}
			})
		})
	}
}

// PolicyResetCounter: at the limit the window is cleared and the child
// restarts anyway.
func TestEscalationPolicyResetCounter(t *testing.T) {
	bubble(t, 1, func(t *testing.T, e *env) {
		sup := e.start(supervisor.Spec{MaxRestarts: 1, Escalation: supervisor.PolicyResetCounter,
			Children: []supervisor.ChildSpec{e.spec("a")}})
		for range 4 {
			e.send("a", cmdFail)
		}
		if !sup.PID().Alive() || !e.pid("a").Alive() {
			t.Fatal("supervisor or child not running")
		}
		log := e.log(sup)
		// The reset clears the window, then the restart it allows counts.
		want := "start:a restart:a start:a" + strings.Repeat(" budget-exhausted:a reset-counter:a restart:a start:a", 3)
		if got := decisions(log); got != want {
			t.Errorf("log %q, want %q", got, want)
		}
	})
}

// restartDelays returns, for each Restart entry of id, its backoff and the
// virtual time until the next Start entry of id.
func restartDelays(t *testing.T, log []supervisor.LogEntry, id string) (delays, observed []time.Duration) {
	t.Helper()
	for i, l := range log {
		if l.Decision != supervisor.DecisionRestart || l.ChildID != id {
			continue
		}
		delays = append(delays, l.Delay)
		for _, n := range log[i+1:] {
			if n.Decision == supervisor.DecisionStart && n.ChildID == id {
				observed = append(observed, n.Time.Sub(l.Time))
				break
			}
		}
	}
	return delays, observed
}

// Jitter comes from the executor's seeded source: the same seed gives the
// same delays, another seed other delays, all within [d*(1-j), d].
// Kept beside lab's TestLabSupervisorBackoffInVirtualTime: it seeds the production executor, which the table runs with one seed only.
func TestBackoffJitterIsDeterministicPerSeed(t *testing.T) {
	run := func(seed uint64) []time.Duration {
		var delays []time.Duration
		bubble(t, seed, func(t *testing.T, e *env) {
			e.plan("a", func(n int) instance { return instance{crash: n <= 5} })
			sup := e.start(supervisor.Spec{
				MaxRestarts: 100, Window: time.Minute,
				Backoff:  supervisor.Exponential(time.Second, 8*time.Second, 2).WithJitter(0.5),
				Children: []supervisor.ChildSpec{e.spec("a")},
			})
			e.sleep(time.Minute)
			var observed []time.Duration
			delays, observed = restartDelays(t, e.log(sup), "a")
			if !slices.Equal(delays, observed) {
				t.Errorf("seed %d: delays %v but observed %v", seed, delays, observed)
			}
		})
		return delays
	}
	a, b, c := run(7), run(7), run(8)
	if len(a) != 5 {
		t.Fatalf("delays %v, want 5", a)
	}
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different delays: %v vs %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("different seeds, same delays: %v", a)
	}
	for i, d := range a {
		full := min(time.Second<<i, 8*time.Second)
		if d > full || d < full/2 {
			t.Errorf("delay %d = %v outside [%v, %v]", i, d, full/2, full)
		}
	}
}
