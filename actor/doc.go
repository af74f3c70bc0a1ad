// Package actor is Orrery's in-process actor runtime, the layer its
// supervisors, registry, dispatcher and lab are built on.
//
// # What it owns
//
//   - Processes. A GenServer (StartServer: calls, casts and info messages),
//     a plain actor (Spawn: messages of one type) or a task (Scope.Go: a
//     function). Each has a PID, which stays valid after the process exits
//     and never names a later one.
//   - Scopes. Every process belongs to one Scope and cannot outlive it:
//     Close cancels what is left, waits until no process goroutine remains,
//     then runs the finalizers. A process can own a scope of its own
//     (Proc.Children), which closes before the process completes.
//   - Bounded mailboxes, with two-phase sends (Reserve, then Permit.Send or
//     Permit.Abort). A full mailbox is ErrMailboxFull: a message is never
//     dropped in silence.
//   - Reply obligations. A call is answered exactly once: by the handler's
//     return, by a Deferred, or by a typed error when the server stops or
//     crashes. A dropped Deferred is NoReply, a visible protocol violation.
//   - Links, monitors (Proc.Monitor, or a Watcher from outside any
//     process) and trapped exits, following Erlang's rules.
//   - Outcomes. Ok < Err < Cancelled < Panicked, fixed when a process
//     completes. Cancellation runs request, then drain, then finalize; it
//     is idempotent, and the strongest reason wins.
//   - The combinators Race, Select and Timeout, which drain their losers
//     before they return.
//   - The Executor seam: every clock read, timer, random number, goroutine
//     start and blocking point. NewExecutor is the production executor;
//     the lab provides a deterministic one.
//
// # What it never does
//
//   - It keeps no package-level state. There is no default System, process
//     table or registry: a System is created and passed explicitly, and
//     the error sentinels are constants.
//   - It never reads the machine's clock, sleeps, arms a timer or draws
//     randomness except through the Executor (executor_real.go is the one
//     exception, and internal/archtest's TestHouseRules enforces it). So the same
//     code runs in real time, in virtual time under testing/synctest, and
//     deterministically under the lab.
//   - It never lets an error or a panic cross its API as a panic: handler
//     panics become Panicked outcomes, and failures are typed errors
//     (*CallError, *CastError, *StartError, *OutcomeError, *LinkError,
//     *NotQuiescentError, *BranchError), matched with errors.Is and
//     errors.As.
//   - It never restarts anything: recovery belongs to the supervisor
//     package, which starts fresh instances and never rewrites an outcome.
//   - It never lets observable order depend on Go map iteration: Downs,
//     exits and scope shutdowns follow ids assigned in spawn order.
//
// # A process's life
//
//  1. Start. Spawn or StartServer runs init on the caller's goroutine,
//     under WithInitTimeout and Start's context, and returns once init has
//     succeeded. If init fails, overruns its budget or is cancelled, the
//     start fails with a *StartError and nothing remains: no process, no
//     link, no name (WithBinding, registry.WithName).
//  2. Run. Continuations (Proc.Continue) run first, then messages in
//     order, one at a time. An idle timeout (Proc.IdleTimeout) wakes the
//     process if no user message arrives in time. The process gets its
//     goroutine on its first message, so an idle process costs only memory.
//  3. Stop. Stop, Shutdown, a closing scope or a linked exit requests
//     cancellation. The process drains what was already committed to its
//     mailbox (at most its capacity), never executes queued calls, and runs
//     its stop hook under a masked context bounded by WithStopTimeout.
//     Abort kills at once: links, monitors, names and callers are released
//     immediately, even while a handler still runs.
//  4. Complete. The outcome is fixed. Exit hooks run first (names are
//     released there), then links, then monitors. Wait and Stop return
//     after all of them.
//
// docs/semantics.md in the repository states these rules in prose, with the
// test that shows each one.
package actor
