// Package supervisor owns supervision trees: child specifications, the
// restart strategies (one-for-one, one-for-all, rest-for-one), restart
// budgets over a sliding window, restart backoff, ordered shutdown, dynamic
// children, and the supervision log that records every decision.
//
// A supervisor is an actor.Server process. It starts its children in the
// scope of its own process (so no child outlives it), monitors each one, and
// decides on every Down. Decisions are monotone (the OTP contract INV-6, INV-6B):
//
//   - a Panicked child is never restarted; the supervisor stops every other
//     child and exits Panicked, whatever the child's containment;
//   - a Cancelled child is never restarted; the supervisor goes on only if
//     the child's spec says the stop is contained, and exits Cancelled
//     otherwise;
//   - an Err (or Ok) exit restarts according to the child's restart type and
//     the restart budget; a restart always starts a fresh instance and never
//     rewrites the outcome of the one that failed, which stays in the log.
//
// Containment is always explicit in the ChildSpec (INV-6A, INV-6C): nothing
// is contained by default, so a failure is never silently swallowed.
//
// The package never reads the machine's clock, sleeps, or draws randomness
// of its own: time (restart windows, backoff, shutdown timeouts) and jitter
// come from the actor.Executor seam, so the lab and testing/synctest control
// them (INV-8). It keeps no package-level state, never orders anything by map
// iteration, and never blocks a supervisor while a restart waits out its
// backoff: delayed restarts are timer messages to the supervisor itself.
package supervisor
