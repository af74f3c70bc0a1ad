package supervisor_test

import (
	"errors"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// Every escalation reason is matchable with errors.Is on the supervisor's
// outcome (supervisor/errors.go): a panic, a required child that stopped
// (Err not restarted, or Cancelled), and an exhausted budget. errors.As
// reaches the *EscalationError naming the child in each case.
func TestEscalationReasonsMatchWithErrorsIs(t *testing.T) {
	cases := []struct {
		name   string
		reason error
		sev    actor.Severity
		spec   func(e *env) supervisor.Spec
		cause  func(e *env)
	}{
		{
			name: "panic", reason: supervisor.ErrChildPanicked, sev: actor.Panicked,
			spec:  func(e *env) supervisor.Spec { return supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a")}} },
			cause: func(e *env) { e.send("a", cmdPanic) },
		},
		{
			name: "err not restarted", reason: supervisor.ErrChildFailed, sev: actor.Err,
			spec: func(e *env) supervisor.Spec {
				a := e.spec("a")
				a.Restart = supervisor.Temporary
				return supervisor.Spec{Children: []supervisor.ChildSpec{a}}
			},
			cause: func(e *env) { e.send("a", cmdFail) },
		},
		{
			name: "cancelled", reason: supervisor.ErrChildFailed, sev: actor.Cancelled,
			spec: func(e *env) supervisor.Spec { return supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a")}} },
			cause: func(e *env) {
				e.pid("a").Cancel(actor.CancelReason{Kind: actor.CancelRequested})
				synctest.Wait()
			},
		},
		{
			name: "budget", reason: supervisor.ErrBudgetExhausted, sev: actor.Err,
			spec: func(e *env) supervisor.Spec {
				return supervisor.Spec{Children: []supervisor.ChildSpec{e.spec("a")}, MaxRestarts: supervisor.NoRestarts}
			},
			cause: func(e *env) { e.send("a", cmdFail) },
		},
	}
	reasons := []error{supervisor.ErrChildPanicked, supervisor.ErrChildFailed, supervisor.ErrBudgetExhausted}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, 1, func(t *testing.T, e *env) {
				sup := e.start(tc.spec(e))
				victim := e.pid("a")
				tc.cause(e)
				o := e.wait(sup.PID())
				if o.Severity != tc.sev {
					t.Fatalf("supervisor outcome %v, want severity %v", o, tc.sev)
				}
				err := o.AsError()
				for _, r := range reasons {
					if got, want := errors.Is(err, r), r == tc.reason; got != want {
						t.Errorf("errors.Is(%v, %v) = %v, want %v", err, r, got, want)
					}
				}
				esc, ok := errors.AsType[*supervisor.EscalationError](err)
				if !ok || esc.ChildID != "a" || esc.PID != victim {
					t.Errorf("errors.As EscalationError: %v %v, want one for a (%s)", esc, ok, victim)
				}
			})
		})
	}
}
