package supervisor

import (
	"errors"
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

// Is matches a sentinel (a ChildError naming no child) of the same kind.
func (e *ChildError) Is(target error) bool {
	t, ok := target.(*ChildError)
	if !ok || t.ID != "" || !t.PID.IsZero() {
		return false
	}
	return t.Kind == e.Kind || (e.Kind == AlreadyStarted && t.Kind == AlreadyPresent)
}

// Sentinels for errors.Is.
var (
	ErrNotFound       = &ChildError{Kind: NotFound}
	ErrRunning        = &ChildError{Kind: Running}
	ErrRestarting     = &ChildError{Kind: Restarting}
	ErrAlreadyPresent = &ChildError{Kind: AlreadyPresent}
	ErrAlreadyStarted = &ChildError{Kind: AlreadyStarted}
	ErrMaxChildren    = &ChildError{Kind: MaxChildren}
)

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
var (
	// ErrBudgetExhausted: a child needed more restarts than the budget
	// allows (OTP's reached_max_restart_intensity).
	ErrBudgetExhausted = errors.New("supervisor: restart budget exhausted")
	// ErrChildFailed: a child that is not contained stopped for good
	// (an Err exit that is not restarted, or a Cancelled exit).
	ErrChildFailed = errors.New("supervisor: required child stopped")
	// ErrChildPanicked: a child panicked; panics are never contained.
	ErrChildPanicked = errors.New("supervisor: child panicked")
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
