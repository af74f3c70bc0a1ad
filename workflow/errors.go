package workflow

import (
	"errors"
	"strconv"
)

type sentinel string

func (e sentinel) Error() string { return string(e) }

// Sentinels. Every error this package returns matches one of them, or a
// store or event sentinel it wraps, with errors.Is.
const (
	// ErrInvalid: an argument is out of range (an empty or reserved name,
	// a nil function, a value with no canonical CBOR encoding).
	ErrInvalid = sentinel("workflow: invalid argument")
	// ErrNotFound: no run has that id (or the id names a world that is
	// not a workflow run).
	ErrNotFound = sentinel("workflow: run not found")
	// ErrConflict: a start repeated a run id with another workflow,
	// version or input than the first start.
	ErrConflict = sentinel("workflow: run exists with other arguments")
	// ErrFinished: the run has ended (completed, failed or cancelled) and
	// accepts no signal, pause or resume.
	ErrFinished = sentinel("workflow: run finished")
	// ErrFailed matches the *RunError of a run that ended with RunFailed.
	ErrFailed = sentinel("workflow: run failed")
	// ErrCancelled matches the *RunError of a run that ended with
	// RunCancelled.
	ErrCancelled = sentinel("workflow: run cancelled")
	// ErrStepFailed matches every *StepError.
	ErrStepFailed = sentinel("workflow: step failed")
	// ErrDivergence matches every *DivergenceError.
	ErrDivergence = sentinel("workflow: run diverged from its recorded steps")
	// ErrStopped: the run stopped on this worker (its lease was lost or
	// revoked, it was paused or cancelled, the worker is stopping, or a
	// store call failed). Every step call of the function returns it from
	// then on; the function should return it, and nothing it returns
	// afterwards is recorded.
	ErrStopped = sentinel("workflow: run stopped on this worker")
	// ErrConcurrentUse: a step was asked for from a goroutine other than
	// the workflow function's, or from inside a running step's function.
	// The step is refused and the run fails with it (see Ctx).
	ErrConcurrentUse = sentinel("workflow: Ctx used concurrently")
	// ErrVersionNotCarried: a start asked for a workflow version that no
	// live worker carries (none advertises workflow:<name>@<version>), so
	// the run would wait for a node that may never come. Nothing is
	// written. A start from a process whose own worker carries the version
	// is never refused, and neither is one while no worker is live at all.
	ErrVersionNotCarried = sentinel("workflow: no live worker carries the workflow version")
)

// DivergenceError names the first step at which a re-run of a workflow
// function no longer asks for the steps its run recorded: the function (or
// the order of its steps) changed under a running version. The run fails
// with it, and nothing of the divergent step is recorded.
type DivergenceError struct {
	RunID string
	// StepIndex is the 0-based position of the step in the run's order.
	StepIndex int
	// Recorded is the step id the run recorded at StepIndex ("" when a
	// replay of an ended run asks for a step beyond its recorded ones).
	Recorded string
	// Got is the step id the function asked for ("" when it returned
	// before asking for the recorded step).
	Got string
	// Reason says more when the ids alone do not (another kind of step
	// under the same id, a recorded result that no longer decodes).
	Reason string
}

func (e *DivergenceError) Error() string {
	msg := "workflow: run " + e.RunID + " diverged at step " + strconv.Itoa(e.StepIndex) + ": recorded " +
		strconv.Quote(e.Recorded) + ", got " + strconv.Quote(e.Got)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is matches ErrDivergence.
func (e *DivergenceError) Is(target error) bool { return target == ErrDivergence }

// StepError is what a step call returns once the step has failed for good
// (its retries are spent, its error was Permanent, its effect's receipt
// was an error, its child run failed). It carries the recorded message
// only, so a first execution and a replay return the same error.
type StepError struct {
	Step     string // the step id
	Attempts uint64 // the logical attempt that failed last
	Message  string
	// Timeout is true when the last attempt ran out of its step timeout
	// (or its effect's receipt was a timeout).
	Timeout bool
}

func (e *StepError) Error() string {
	msg := "workflow: step " + strconv.Quote(e.Step) + " failed after attempt " + strconv.FormatUint(e.Attempts, 10)
	if e.Timeout {
		msg += " (timeout)"
	}
	return msg + ": " + e.Message
}

// Is matches ErrStepFailed.
func (e *StepError) Is(target error) bool { return target == ErrStepFailed }

// RunError is the outcome of a run that did not complete: Result returns
// it. It matches ErrFailed or ErrCancelled by Status, and unwraps to the
// *DivergenceError of a run that failed by divergence.
type RunError struct {
	RunID   string
	Status  RunStatus // StatusFailed or StatusCancelled
	Message string
	// Divergence is set when the run failed because its function
	// diverged from its recorded steps.
	Divergence *DivergenceError
}

func (e *RunError) Error() string {
	msg := "workflow: run " + e.RunID + " " + string(e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Is matches ErrFailed or ErrCancelled.
func (e *RunError) Is(target error) bool {
	switch e.Status {
	case StatusFailed:
		return target == ErrFailed
	case StatusCancelled:
		return target == ErrCancelled
	}
	return false
}

// Unwrap returns the divergence, if the run failed by one.
func (e *RunError) Unwrap() error {
	if e.Divergence == nil {
		return nil
	}
	return e.Divergence
}

// Error is the typed error of a client or worker operation: Kind is one of
// the sentinels above or a store sentinel (errors.Is matches it), Err the
// cause.
type Error struct {
	Op   string
	Kind error
	Run  string
	Err  error
}

func (e *Error) Error() string {
	msg := "workflow: " + e.Op + ": " + e.Kind.Error()
	if e.Run != "" {
		msg += " (run " + e.Run + ")"
	}
	if e.Err != nil && e.Err != e.Kind {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches Kind.
func (e *Error) Is(target error) bool { return e.Kind == target }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func errorf(op string, kind error, run string, cause error) *Error {
	return &Error{Op: op, Kind: kind, Run: run, Err: cause}
}

// detail is a cause that is only text.
type detail string

func (d detail) Error() string { return string(d) }

// permanentError marks a step error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that a step fails at once, whatever its retry
// policy. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
