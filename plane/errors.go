package plane

import "fmt"

type sentinel string

func (e sentinel) Error() string { return string(e) }

// Sentinels. Every error this package returns matches one of them, or a
// store or world sentinel it wraps, with errors.Is.
const (
	// ErrFenced: the world's lease was lost, revoked, not renewed in time,
	// or the store fenced a write; the world stopped on this host.
	ErrFenced = sentinel("plane: world fenced")
	// ErrNoKernel: no world definition is registered for the universe.
	ErrNoKernel = sentinel("plane: no world definition for the universe")
	// ErrInvalidIngress: external input that does not validate; nothing
	// was enqueued.
	ErrInvalidIngress = sentinel("plane: invalid ingress")
	// ErrConflict: an idempotent operation repeated with other arguments
	// than the first time (another seed, another fork point).
	ErrConflict = sentinel("plane: conflicting repeat")
	// ErrCallFailed: the handler of a call failed or did not reply; the
	// world's error is wrapped.
	ErrCallFailed = sentinel("plane: call failed")
	// ErrReplyUnavailable: the reply of a call can no longer be re-derived
	// from the journal (its baseline was superseded on a seeded or forked
	// world, or the journal was compacted past it: then the cause is a
	// *store.CompactedError, errors.Is store.ErrCompacted).
	ErrReplyUnavailable = sentinel("plane: reply no longer derivable")
	// ErrHostFailed: the host's world supervisor or its controller died
	// (a world process crashed outside the kernel's containment, a
	// panic): every world on it stopped, and the host must be started
	// again (by an outer supervisor or the operator). Host.Wait and
	// Host.Err return it, with the cause wrapped.
	ErrHostFailed = sentinel("plane: host failed")
	// ErrStopped: the host or orchestrator is stopped.
	ErrStopped = sentinel("plane: stopped")
	// ErrNotLeader: this orchestrator does not hold the orchestrator lease.
	ErrNotLeader = sentinel("plane: not the acting orchestrator")
	// ErrSnapshotPending: an on-demand snapshot at or above the world's
	// head when it was asked for was not written before the caller's
	// context ended (the world's holder may run a release that takes no
	// snapshot on demand, and none reached that height since); the
	// context's error is wrapped.
	ErrSnapshotPending = sentinel("plane: snapshot not taken yet")
	// ErrIneligible: the worker cannot run the world: it does not host
	// worlds (its roles lack RoleHost), or does not carry the world's
	// type (see Eligible).
	ErrIneligible = sentinel("plane: worker cannot run the world")
	// ErrDowngrade: an upgrade asked a world to go back to an older
	// version of its definition; nothing was enqueued (world.ErrDowngrade
	// is wrapped).
	ErrDowngrade = sentinel("plane: downgrade refused")
	// ErrOverloaded: ingress was refused because a bound was reached (a
	// world's inbox, an effect queue; see Limits): nothing was written.
	// It also matches store.ErrOverloaded; RetryAfter says when to try
	// the same request (with the same idempotency key) again.
	ErrOverloaded = sentinel("plane: overloaded")
	// ErrInvalid: an argument is out of range.
	ErrInvalid = sentinel("plane: invalid argument")
)

// Error is the typed error of a plane operation: Kind is one of the
// sentinels above (errors.Is matches it), Err the cause.
type Error struct {
	Op    string
	Kind  error
	World string
	Err   error
}

func (e *Error) Error() string {
	msg := "plane: " + e.Op + ": " + e.Kind.Error()
	if e.World != "" {
		msg += " (world " + e.World + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches Kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func errorf(op string, kind error, world string, cause error) *Error {
	return &Error{Op: op, Kind: kind, World: world, Err: cause}
}

func detail(format string, args ...any) error { return fmt.Errorf(format, args...) }
