// Package demo is `orrery demo`: a real scenario on the embedded default
// store, narrated step by step, that shows in under a minute what the
// runtime promises. Two nodes in one process host the ledger example worlds
// (examples/ledger) on one SQLite file; the demo makes calls, runs transfer
// sagas over fabric.send with durable timers, sends an audit request as an
// http.request effect to a local HTTP server, crashes a node and watches
// the other take its worlds over after the lease TTL, and forks an account.
//
// It checks what it narrates: every claim it prints (a balance, a receipt,
// a new holder with a higher epoch, a fork that diverged while its source
// stayed untouched, money conserved) is read back from the store or from a
// call, and Run returns an error wrapping ErrCheck when one does not hold.
// It waits only on conditions (call replies, journal heads, leases, queue
// states), each wait bounded by the context and a limit, never on a fixed
// sleep.
//
// What it never does: leave anything behind it did not say it would (a
// temporary directory is removed; a Dir keeps the database for `orrery
// serve` and `orrery world list`), close a store it was given, or keep
// package-level state.
package demo
