package supervisor

import (
	"fmt"

	"github.com/orrery-run/orrery/actor"
)

// ErrorKind classifies a refused admin request (OTP's error atoms).
type ErrorKind uint8

const (
	// NotFound: no child has that ID (or PID, for a dynamic supervisor).
	NotFound ErrorKind = iota + 1
	// Running: the child is running; terminate it first.
	Running
	// Restarting: the child waits out a restart backoff.
	Restarting
	// AlreadyPresent: a child spec with that ID exists (not running).
	AlreadyPresent
	// AlreadyStarted: a child with that ID exists and is running. It also
	// matches ErrAlreadyPresent, of which it is the running case.
	AlreadyStarted
	// MaxChildren: a dynamic supervisor is at its MaxChildren.
	MaxChildren
)

func (k ErrorKind) String() string {
	switch k {
	case NotFound:
		return "not found"
	case Running:
		return "running"
	case Restarting:
		return "restarting"
	case AlreadyPresent:
		return "already present"
	case AlreadyStarted:
		return "already started"
	case MaxChildren:
		return "max children"
	}
	return fmt.Sprintf("error-kind(%d)", uint8(k))
}

// ChildError is a refused admin request. Match kinds with errors.Is against
// the sentinels ErrNotFound, ErrRunning, and so on.
type ChildError struct {
	Kind ErrorKind
	ID   string
	PID  actor.PID
}

func (e *ChildError) Error() string {
	switch {
	case !e.PID.IsZero():
		return fmt.Sprintf("supervisor: child %s: %s", e.PID, e.Kind)
	case e.ID != "":
		return fmt.Sprintf("supervisor: child %q: %s", e.ID, e.Kind)
	}
	return "supervisor: " + e.Kind.String()
}

// Is matches the sentinel of the same kind (ErrNotFound, ...), and a
// *ChildError of the same kind that names no child. AlreadyStarted also
// matches AlreadyPresent.
func (e *ChildError) Is(target error) bool {
	var k ErrorKind
	switch t := target.(type) {
	case childSentinel:
		k = ErrorKind(t)
	case *ChildError:
		if t.ID != "" || !t.PID.IsZero() {
			return false
		}
		k = t.Kind
	default:
		return false
	}
	return k == e.Kind || (e.Kind == AlreadyStarted && k == AlreadyPresent)
}

// Sentinels for errors.Is, one per kind. They are constants: nothing can
// reassign or mutate them.
const (
	ErrNotFound       = childSentinel(NotFound)
	ErrRunning        = childSentinel(Running)
	ErrRestarting     = childSentinel(Restarting)
	ErrAlreadyPresent = childSentinel(AlreadyPresent)
	ErrAlreadyStarted = childSentinel(AlreadyStarted)
	ErrMaxChildren    = childSentinel(MaxChildren)
)

// childSentinel is the sentinel of one ErrorKind.
type childSentinel ErrorKind

func (k childSentinel) Error() string { return "supervisor: " + ErrorKind(k).String() }

// StartChildError is a child that could not be started: at supervisor start
// (which then fails, having stopped the children it had started), by
// StartChild or by RestartChild. Err is what ChildSpec.Start returned,
// usually an *actor.StartError carrying the instance's outcome.
type StartChildError struct {
	ID  string
	Err error
}

func (e *StartChildError) Error() string {
	return fmt.Sprintf("supervisor: start child %q: %v", e.ID, e.Err)
}

func (e *StartChildError) Unwrap() error { return e.Err }

// Why a supervisor gave up, matched with errors.Is through *EscalationError.
const (
	// ErrBudgetExhausted: a child needed more restarts than the budget
	// allows (OTP's reached_max_restart_intensity).
	ErrBudgetExhausted = sentinel("supervisor: restart budget exhausted")
	// ErrChildFailed: a child that is not contained stopped for good
	// (an Err exit that is not restarted, or a Cancelled exit).
	ErrChildFailed = sentinel("supervisor: required child stopped")
	// ErrChildPanicked: a child panicked; panics are never contained.
	ErrChildPanicked = sentinel("supervisor: child panicked")
)

// EscalationError is why a supervisor stopped all its children and exited:
// it is the Err of the supervisor's outcome (and is logged with the Escalate
// entry). It keeps the outcome of the child instance that caused it.
type EscalationError struct {
	ChildID string
	PID     actor.PID // the failed instance (zero if it failed to start)
	Outcome actor.Outcome
	Reason  error // ErrBudgetExhausted, ErrChildFailed or ErrChildPanicked
}

func (e *EscalationError) Error() string {
	return fmt.Sprintf("%v: child %q (%s) %s", e.Reason, e.ChildID, e.PID, e.Outcome)
}

// Unwrap exposes the reason and the child's own error.
func (e *EscalationError) Unwrap() []error {
	if e.Outcome.Err != nil {
		return []error{e.Reason, e.Outcome.Err}
	}
	return []error{e.Reason}
}
