package world

import (
	"fmt"
	"strconv"
)

// sentinel is the type of this package's error sentinels: a string constant
// can be neither reassigned nor mutated, and errors.Is matches it by value.
type sentinel string

func (e sentinel) Error() string { return string(e) }

// Sentinels. Every error this package returns, or puts in a StepResult,
// matches exactly one of them with errors.Is.
const (
	// ErrInvalidDef: the world definition was built wrongly (see Def.Err).
	// Nothing runs on an invalid definition.
	ErrInvalidDef = sentinel("world: invalid definition")
	// ErrMalformedInput: an input's bytes do not decode (not CBOR, over the
	// limits, not the wire form of its kind, a value that does not fit the
	// handler's type). The input is consumed with outcome error.
	ErrMalformedInput = sentinel("world: malformed input")
	// ErrUsage: a handler misused its Ctx (an unregistered effect kind,
	// params or a reply that cannot be encoded, a second reply). The step
	// fails as if the handler had returned the error.
	ErrUsage = sentinel("world: context misuse")
	// ErrHandler: the handler returned an error; it is wrapped.
	ErrHandler = sentinel("world: handler failed")
	// ErrPanic: the handler panicked.
	ErrPanic = sentinel("world: handler panicked")
	// ErrState: state bytes that do not decode, or a post-step state that
	// cannot be encoded as canonical CBOR.
	ErrState = sentinel("world: bad state")
	// ErrUnknownInput: no handler for the input's kind or type; the input
	// is dropped (StepResult.Err of an OutcomeUnknownInput step).
	ErrUnknownInput = sentinel("world: no handler for the input")
	// ErrStale: a receipt or timer firing the world no longer awaits; it is
	// dropped (StepResult.Err of an OutcomeStale step).
	ErrStale = sentinel("world: receipt or timer firing not awaited")
	// ErrLimit: a step asked for more than a kernel limit allows (see
	// MaxStepIntents and the other limits); it is an error outcome
	// (*LimitError).
	ErrLimit = sentinel("world: step exceeds a kernel limit")
	// ErrRefused: the store refused a step's result, and the plane
	// recorded its input as a refused step instead (*RefusedError).
	ErrRefused = sentinel("world: step refused by the store")
	// ErrDivergence: replay produced something other than the journal.
	ErrDivergence = sentinel("world: replay diverged")
	// ErrTail: a journal tail that cannot be replayed (a gap, another
	// stream, a record this kernel did not write).
	ErrTail = sentinel("world: bad journal tail")
	// ErrStalePrepared: a Prepared stepped after its world stepped since
	// Prepare, or a second time. Nothing happened; prepare the input
	// again.
	ErrStalePrepared = sentinel("world: prepared step is stale")
	// ErrUpgrade: an upgrade input did not move the world
	// (*UpgradeError); the world stays on its version and serves.
	ErrUpgrade = sentinel("world: upgrade failed")
	// ErrVersionNotCarried: a version of the world's definition this
	// binary does not carry (an upgrade's target, or the version a
	// restored world is on).
	ErrVersionNotCarried = sentinel("world: version not carried")
	// ErrDowngrade: an upgrade to an older version than the world's; a
	// world never goes back.
	ErrDowngrade = sentinel("world: downgrade refused")
	// ErrVersionUnknown: a state that records no version, loaded by a
	// kernel that carries several (Versions) with nothing else to tell
	// which one wrote it (Snapshot.Version, a journal tail). Running it on
	// a guessed version could run one version's handlers on another's
	// state.
	ErrVersionUnknown = sentinel("world: version of state unknown")
)

// DefError is a mistake in a world definition: which call, about what, and
// why (a sentinel of this package or of package handlers).
type DefError struct {
	Op   string // "New", "On", "EffectKind"
	Name string // the world, input type or effect kind concerned
	Err  error
}

func (e *DefError) Error() string {
	return "world: " + e.Op + " " + strconv.Quote(e.Name) + ": " + e.Err.Error()
}

// Is matches ErrInvalidDef.
func (e *DefError) Is(target error) bool { return target == ErrInvalidDef }

func (e *DefError) Unwrap() error { return e.Err }

// InputError is an input the kernel could not turn into a handler call.
type InputError struct {
	Seq    uint64
	Kind   string
	Reason string
	Err    error // a *event.DecodeError when the bytes did not decode
}

func (e *InputError) Error() string {
	msg := "world: malformed input " + strconv.FormatUint(e.Seq, 10) + " (" + e.Kind + "): " + e.Reason
	if e.Seq == 0 { // not from an inbox: checked before it was enqueued
		msg = "world: malformed input (" + e.Kind + "): " + e.Reason
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrMalformedInput.
func (e *InputError) Is(target error) bool { return target == ErrMalformedInput }

func (e *InputError) Unwrap() error { return e.Err }

// UsageError is a Ctx call that cannot be honoured.
type UsageError struct {
	Op     string // "Effect", "SetTimer", "Send", "Reply"
	Reason string
	Err    error
}

func (e *UsageError) Error() string {
	msg := "world: Ctx." + e.Op + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

func (e *UsageError) Unwrap() error { return e.Err }

// HandlerError wraps the error a handler returned.
type HandlerError struct {
	Type string // the input type
	Err  error
}

func (e *HandlerError) Error() string { return "world: handler of " + e.Type + ": " + e.Err.Error() }

// Is matches ErrHandler.
func (e *HandlerError) Is(target error) bool { return target == ErrHandler }

func (e *HandlerError) Unwrap() error { return e.Err }

// PanicError is a handler's panic. Value is what it panicked with; no stack
// is kept, because a stack is not deterministic and the journal must be.
type PanicError struct {
	Type  string
	Value any
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("world: handler of %s panicked: %v", e.Type, e.Value)
}

// Is matches ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// StateError is state that does not decode or encode.
type StateError struct {
	Reason string
	Err    error
}

func (e *StateError) Error() string {
	msg := "world: state: " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrState.
func (e *StateError) Is(target error) bool { return target == ErrState }

func (e *StateError) Unwrap() error { return e.Err }

// TailError is a journal record replay cannot use.
type TailError struct {
	Height uint64 // the record's runSeq
	Reason string
	Err    error
}

func (e *TailError) Error() string {
	msg := "world: journal tail at height " + strconv.FormatUint(e.Height, 10) + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrTail.
func (e *TailError) Is(target error) bool { return target == ErrTail }

func (e *TailError) Unwrap() error { return e.Err }
