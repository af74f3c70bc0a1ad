package handlers

// Register's refusals. A refusal for a named type is a *TypeError that
// wraps one of them; match them with errors.Is.
const (
	// ErrDuplicateHandler: the message type already has a handler. Each
	// type maps to at most one, and the first one stays.
	ErrDuplicateHandler = sentinel("handlers: message type already has a handler")
	// ErrRegisterAfterStart: the table is frozen (a dispatcher's Start, a
	// world definition's first use); registration is a setup-time
	// operation.
	ErrRegisterAfterStart = sentinel("handlers: register after start")
	// ErrNilHandler: the handler is nil. A Table cannot tell a nil H for
	// every handler type, so its callers check and report it with this.
	ErrNilHandler = sentinel("handlers: nil handler")
	// ErrEmptyMessageType: the empty type name, which no message can be
	// routed by.
	ErrEmptyMessageType = sentinel("handlers: empty message type")
)

// sentinel is the type of this package's error sentinels: a string
// constant, so a sentinel can be neither reassigned nor mutated, and
// errors.Is matches it by value.
type sentinel string

func (e sentinel) Error() string { return string(e) }

// TypeError is a refused registration: which type, and why (a sentinel).
type TypeError struct {
	Type string
	Err  error
}

func (e *TypeError) Error() string { return e.Err.Error() + ": \"" + e.Type + "\"" }

func (e *TypeError) Unwrap() error { return e.Err }
