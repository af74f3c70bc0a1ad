// Package handlers is the type-to-handler table both dispatchers share: a
// message type resolves to at most one handler, handlers are registered
// at setup time, and freezing the table ends setup. actor/dispatch's
// Runtime runs its loop over a Table, and the world kernel routes every
// input through one, so a message and a world input are resolved by the
// same rules.
//
// # What it never does
//
// It is a leaf: it imports only the standard library's pure packages (no
// actor, no context, no logging), reads no clock, does no I/O and starts
// no goroutine. Resolving is a map lookup, which is why the pure world
// kernel may depend on it; internal/archtest checks that it stays so.
package handlers
