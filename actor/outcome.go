package actor

import (
	"fmt"
)

// Severity orders outcomes: Ok < Err < Cancelled < Panicked (the OTP contract INV-6A).
type Severity uint8

const (
	Ok Severity = iota
	Err
	Cancelled
	Panicked
)

func (s Severity) String() string {
	switch s {
	case Ok:
		return "ok"
	case Err:
		return "err"
	case Cancelled:
		return "cancelled"
	case Panicked:
		return "panicked"
	}
	return fmt.Sprintf("severity(%d)", uint8(s))
}

// Outcome is the immutable fact of how an execution completed. The zero value
// is Ok. Aggregates (scope close, supervisor join) are computed with Join.
type Outcome struct {
	Severity Severity
	// Err is the application error (Err), or the protocol violation that made
	// an outcome Panicked without a Go panic (for example a leaked reply).
	Err error
	// Cancel is the reason of a Cancelled outcome.
	Cancel CancelReason
	// Panic is the recovered panic of a Panicked outcome.
	Panic *PanicInfo
}

// PanicInfo keeps a recovered panic: the value and the stack at the panic.
type PanicInfo struct {
	Value any
	Stack []byte
}

// OkOutcome, ErrOutcome, CancelledOutcome and PanickedOutcome build outcomes.
func OkOutcome() Outcome { return Outcome{} }

func ErrOutcome(err error) Outcome { return Outcome{Severity: Err, Err: err} }

func CancelledOutcome(r CancelReason) Outcome { return Outcome{Severity: Cancelled, Cancel: r} }

func PanickedOutcome(value any, stack []byte) Outcome {
	return Outcome{Severity: Panicked, Panic: &PanicInfo{Value: value, Stack: stack}}
}

// violationOutcome is Panicked severity for a protocol violation that was not
// a Go panic, such as a reply obligation dropped without a reply.
func violationOutcome(err error) Outcome { return Outcome{Severity: Panicked, Err: err} }

// IsOk reports whether the outcome is Ok.
func (o Outcome) IsOk() bool { return o.Severity == Ok }

// Join returns the worse of two outcomes (max by severity). Ties keep a, so a
// fold over outcomes in a stable order is itself stable; two cancellations
// keep the stronger reason.
func Join(a, b Outcome) Outcome {
	if b.Severity > a.Severity {
		return b
	}
	if a.Severity == Cancelled && b.Severity == Cancelled && b.Cancel.Kind > a.Cancel.Kind {
		return b
	}
	return a
}

// JoinAll folds Join over outcomes, starting from Ok.
func JoinAll(os ...Outcome) Outcome {
	var acc Outcome
	for _, o := range os {
		acc = Join(acc, o)
	}
	return acc
}

func (o Outcome) String() string {
	switch o.Severity {
	case Ok:
		return "ok"
	case Err:
		return fmt.Sprintf("err(%v)", o.Err)
	case Cancelled:
		return fmt.Sprintf("cancelled(%v)", o.Cancel)
	case Panicked:
		if o.Panic != nil {
			return fmt.Sprintf("panicked(%v)", o.Panic.Value)
		}
		return fmt.Sprintf("panicked(%v)", o.Err)
	}
	return "invalid"
}

// AsError converts a non-Ok outcome into an error (nil for Ok), so that an
// outcome can travel where Go expects an error.
func (o Outcome) AsError() error {
	if o.Severity == Ok {
		return nil
	}
	return &OutcomeError{Outcome: o}
}

// OutcomeError carries a non-Ok outcome as an error. Everything the outcome
// knows of why is reachable through it with errors.Is and errors.As: the
// application error (Err), the cause of a cancellation (CancelReason.Cause,
// for instance the *LinkError of a linked exit), and a panic value that is
// an error. A Cancelled outcome also matches ErrCancelled, and a Cancelled
// outcome whose kind is CancelTimeout matches ErrTimeout.
type OutcomeError struct{ Outcome Outcome }

func (e *OutcomeError) Error() string { return e.Outcome.String() }

func (e *OutcomeError) Unwrap() []error {
	o := e.Outcome
	var errs []error
	if o.Err != nil {
		errs = append(errs, o.Err)
	}
	switch o.Severity {
	case Cancelled:
		if o.Cancel.Cause != nil {
			errs = append(errs, o.Cancel.Cause)
		}
		if o.Cancel.Kind == CancelTimeout {
			errs = append(errs, ErrTimeout)
		}
		errs = append(errs, ErrCancelled)
	case Panicked:
		if o.Panic != nil {
			if err, ok := o.Panic.Value.(error); ok && err != o.Err {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// CancelKind is why cancellation was requested. Kinds are ordered by
// strength: when requests race, the strongest wins (INV-2, INV-6B).
type CancelKind uint8

const (
	// CancelNone is the zero value: no cancellation requested.
	CancelNone CancelKind = iota
	// CancelRequested is a plain user request (Stop, Abort, a context).
	CancelRequested
	// CancelRaceLost cancels the losing branches of a Race.
	CancelRaceLost
	// CancelTimeout is a budget or deadline expiring.
	CancelTimeout
	// CancelLinked is an abnormal exit arriving over a link.
	CancelLinked
	// CancelShutdown is an owner (scope or supervisor) shutting down.
	CancelShutdown
	// CancelKill is immediate termination: no drain, no stop hook.
	CancelKill
)

func (k CancelKind) String() string {
	switch k {
	case CancelNone:
		return "none"
	case CancelRequested:
		return "requested"
	case CancelRaceLost:
		return "race-lost"
	case CancelTimeout:
		return "timeout"
	case CancelLinked:
		return "linked"
	case CancelShutdown:
		return "shutdown"
	case CancelKill:
		return "kill"
	}
	return fmt.Sprintf("cancel(%d)", uint8(k))
}

// CancelReason is a cancellation request: its kind, the process that caused
// it (for linked exits and owner shutdowns), and an optional cause.
type CancelReason struct {
	Kind CancelKind
	From PID
	// Cause says why, beyond the kind: the reason given to Shutdown, or,
	// for a linked exit, a *LinkError carrying the peer's outcome. It is
	// reachable from the completed outcome's AsError with errors.Is and
	// errors.As. Its dynamic type must be comparable (a pointer, or a
	// sentinel), as an error compared with errors.Is must be.
	Cause error
}

func (r CancelReason) String() string {
	s := r.Kind.String()
	if !r.From.IsZero() {
		s = fmt.Sprintf("%s from %s", s, r.From)
	}
	if r.Cause != nil {
		s = fmt.Sprintf("%s: %v", s, r.Cause)
	}
	return s
}

// Stronger returns the stronger of two reasons; ties keep r (the first
// request wins among equals, which keeps the reason stable).
func (r CancelReason) Stronger(o CancelReason) CancelReason {
	if o.Kind > r.Kind {
		return o
	}
	return r
}

// ErrGoexit is the Err of the Panicked outcome of a process whose goroutine
// ended through runtime.Goexit in user code (a handler, a task function):
// it cannot be recovered, but the process still completes.
const ErrGoexit sentinel = "actor: runtime.Goexit in a process"

// ErrCancelled is the error a context-style API returns when the process or
// scope it belongs to was cancelled.
const ErrCancelled sentinel = "actor: cancelled"

// LinkError is the Cause of a CancelLinked reason: the exit of the linked
// peer that brought the process down. It unwraps to the peer's own outcome,
// so the peer's original reason (its error, its panic value, or the cause of
// its own cancellation, down a chain of links) is reachable with errors.As
// from the outcome of every process the exit travelled to.
type LinkError struct {
	From    PID
	Outcome Outcome
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("actor: linked process %s exited: %s", e.From, e.Outcome)
}

func (e *LinkError) Unwrap() error { return e.Outcome.AsError() }
