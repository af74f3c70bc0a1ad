package registry

import (
	"fmt"

	"github.com/orrery-run/orrery/actor"
)

// Sentinels for errors.Is. The typed errors below match them and carry the
// details (name, holder, state).
const (
	// ErrNameTaken: the name is bound to another lease (*NameTakenError).
	ErrNameTaken = sentinel("registry: name taken")
	// ErrInvalidName: names are non-empty strings.
	ErrInvalidName = sentinel("registry: invalid name")
	// ErrInvalidTTL: WithTTL needs a positive duration.
	ErrInvalidTTL = sentinel("registry: invalid ttl")
	// ErrClosed: the registry was closed and takes no registrations.
	ErrClosed = sentinel("registry: closed")
	// ErrLeaseExpired: the lease's TTL elapsed without renewal (*LeaseError).
	ErrLeaseExpired = sentinel("registry: lease expired")
	// ErrLeaseReleased: the lease was released, or its holder exited
	// (*LeaseError).
	ErrLeaseReleased = sentinel("registry: lease released")
	// ErrNotRegistered: a name reference found its name unbound
	// (*UnboundError).
	ErrNotRegistered = sentinel("registry: name not registered")
	// ErrWrongType: a name reference found its name bound to a process of
	// another message type (*WrongTypeError).
	ErrWrongType = sentinel("registry: name bound to a process of another type")
)

// NameTakenError is the failure of registering a bound name.
type NameTakenError struct {
	Name string
	// Holder is the process the name is bound to.
	Holder actor.PID
}

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("registry: name %q taken by %s", e.Name, e.Holder)
}

// Is matches ErrNameTaken.
func (e *NameTakenError) Is(target error) bool { return target == ErrNameTaken }

// NoProcError is the failure of registering a process that has completed
// (or the zero PID). It matches actor.ErrNoProc.
type NoProcError struct {
	Name string
	PID  actor.PID
}

func (e *NoProcError) Error() string {
	return fmt.Sprintf("registry: register %q: %s: %v", e.Name, e.PID, actor.ErrNoProc)
}

func (e *NoProcError) Unwrap() error { return actor.ErrNoProc }

// LeaseError is the failure of using a lease that has ended. It matches
// ErrLeaseExpired after expiry and ErrLeaseReleased after a release; after
// the holder's exit it matches both ErrLeaseReleased and actor.ErrNoProc.
type LeaseError struct {
	Name   string
	Holder actor.PID
	State  LeaseState
}

func (e *LeaseError) Error() string {
	return fmt.Sprintf("registry: lease on %q (%s): %s", e.Name, e.Holder, e.State)
}

// Is matches the sentinel of the lease's terminal state.
func (e *LeaseError) Is(target error) bool {
	switch target {
	case ErrLeaseExpired:
		return e.State == LeaseExpired
	case ErrLeaseReleased:
		return e.State == LeaseReleased || e.State == LeaseHolderExited
	case actor.ErrNoProc:
		return e.State == LeaseHolderExited
	}
	return false
}

// UnboundError is the failure of using a name reference whose name is not
// bound. It is a NoProc error: it matches ErrNotRegistered, actor.ErrNoProc,
// actor.ErrCallNoProc and actor.ErrCastNoProc, and Err holds the actor-level
// error of the operation (a *actor.CallError of kind CallNoProc from Resolve
// and Call, a *actor.CastError of kind CastNoProc from Cast, actor.ErrNoProc
// from Send), reachable with errors.As.
type UnboundError struct {
	Name string
	Err  error
}

func (e *UnboundError) Error() string {
	return fmt.Sprintf("registry: name %q not registered: %v", e.Name, e.Err)
}

func (e *UnboundError) Unwrap() error { return e.Err }

// Is matches ErrNotRegistered and every actor NoProc sentinel, whichever
// operation failed, so that actor.Cast through a name reference (which
// reports Resolve's error) still matches actor.ErrCastNoProc.
func (e *UnboundError) Is(target error) bool {
	if target == ErrNotRegistered || target == actor.ErrNoProc {
		return true
	}
	return (&actor.CallError{Kind: actor.CallNoProc}).Is(target) ||
		(&actor.CastError{Kind: actor.CastNoProc}).Is(target)
}

// WrongTypeError is the failure of resolving a name reference whose name is
// bound to a process started with another message type (or another kind of
// process: a plain actor where a server is expected, or the reverse).
type WrongTypeError struct {
	Name   string
	Holder actor.PID
	// Want and Got are the Go types of the expected and actual handles.
	Want, Got string
}

func (e *WrongTypeError) Error() string {
	return fmt.Sprintf("registry: name %q is bound to %s, a %s, not a %s", e.Name, e.Holder, e.Got, e.Want)
}

// Is matches ErrWrongType.
func (e *WrongTypeError) Is(target error) bool { return target == ErrWrongType }
