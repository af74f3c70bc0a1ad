package handlers

import "slices"

// Table is the type-to-handler resolution of the dispatcher contract (§5),
// apart from any loop: each message type maps to at most one handler,
// handlers are registered at setup time, and Freeze ends setup. H is the
// handler type: actor/dispatch's Runtime keeps a Table of its Handler, the
// world kernel one of its own signature.
//
// A Table is not safe for concurrent Register calls; once frozen, Resolve
// and Types may be called from any goroutine.
type Table[H any] struct {
	m      map[string]H
	frozen bool
}

// NewTable returns an empty table in its setup phase.
func NewTable[H any]() *Table[H] { return &Table[H]{m: make(map[string]H)} }

// Register makes h the handler of messageType. It fails with
// ErrEmptyMessageType for the empty type, with ErrRegisterAfterStart once
// the table is frozen, and with ErrDuplicateHandler if messageType already
// has a handler (the first one stays). Errors wrap those sentinels.
func (t *Table[H]) Register(messageType string, h H) error {
	switch {
	case messageType == "":
		return ErrEmptyMessageType
	case t.frozen:
		return &TypeError{Type: messageType, Err: ErrRegisterAfterStart}
	}
	if _, dup := t.m[messageType]; dup {
		return &TypeError{Type: messageType, Err: ErrDuplicateHandler}
	}
	t.m[messageType] = h
	return nil
}

// Freeze ends the setup phase: Register refuses from now on. It is
// idempotent.
func (t *Table[H]) Freeze() { t.frozen = true }

// Frozen reports whether Freeze has been called.
func (t *Table[H]) Frozen() bool { return t.frozen }

// Resolve returns the handler of messageType. ok is false for a type with no
// handler (including the empty type): the dispatcher contract drops such a message.
func (t *Table[H]) Resolve(messageType string) (h H, ok bool) {
	h, ok = t.m[messageType]
	return h, ok
}

// Types returns the registered message types in ascending order.
func (t *Table[H]) Types() []string {
	out := make([]string, 0, len(t.m))
	for k := range t.m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
