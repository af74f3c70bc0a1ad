// Package dispatch is the runtime of the dispatcher contract: a single-authority dispatcher that
// pulls typed messages from its own mailbox, resolves one handler per message
// type, and runs handlers strictly one at a time in mailbox (FIFO) order.
//
// [Runtime] is the loop. The resolution (message type → one handler,
// registered at setup time, then frozen) is a [handlers.Table]: a pure
// lookup, kept in that leaf package so that the world kernel routes its
// inputs by the same rules without depending on this package's actor
// process, context or logging.
//
// # What it owns
//
//   - The mailbox: an unbounded (optionally bounded) FIFO that [Runtime.Deliver]
//     appends to. The mailbox is passive data; it never calls the runtime.
//     It is not an actor mailbox on purpose: the dispatcher contract §7 says Deliver always
//     enqueues and never blocks (an actor mailbox is bounded, 64 by default),
//     and [Stats] is one consistent snapshot of the mailbox and the counters
//     under one lock. Its full error is the actor layer's ErrMailboxFull.
//   - The handler table: a [handlers.Table] of [Handler], filled at setup
//     time by [Runtime.Register] and frozen by [Runtime.Start].
//   - The loop: exactly one actor process at a time (a task of the scope
//     given [WithScope], or of a private actor.System), started by the first
//     Start, that repeats dequeue → resolve → execute and parks on an
//     [actor.Parker] when the mailbox is empty (the dispatcher contract §4 leaves idle
//     behaviour to the runtime; this one parks, it never polls). As a
//     process it belongs to a scope, is traced, is stopped when its scope
//     closes, and can be started under a supervisor.
//   - Failure containment: a handler's error, panic or runtime.Goexit is
//     caught, logged through log/slog, counted in [Stats], and the message is
//     consumed; the loop carries on with the next message.
//
// # What it never does
//
//   - It never executes a handler on the caller's goroutine, never starts a
//     goroutine per message, and never runs two handlers at once.
//   - It never reports a handler's outcome to whoever delivered the message:
//     Deliver only says whether the message was enqueued. There is no
//     request–response, no retry, no dead letter, no durability (the dispatcher contract
//     §§10–11); those belong to the layers above (world/, workflow/).
//   - It never drains on Stop (§8): Stop halts the loop, and messages still in
//     the mailbox are not executed.
//   - It never reads the machine clock, sleeps, or draws randomness: every
//     goroutine start and blocking point goes through the [actor.Executor]
//     seam, so the lab can run it deterministically.
//
// # Mapping to the dispatcher contract
//
//	§3, §4  Runtime.loop pulls from mailbox; one process; sequential.
//	§5      handlers.Table (setup time, ≤ 1 handler per type;
//	        Runtime.Register fills it); unknown types are dropped silently
//	        and counted as Stats.Dropped.
//	§6      The loop waits for each Handler to return; errors and panics are
//	        contained and the message counts as consumed.
//	§7      Deliver enqueues under a short lock and returns; it never waits
//	        for, nor performs, execution.
//	§8      Start is idempotent; Stop halts the loop and waits for its exit.
//	§9      One FIFO across all message types; nothing reorders it.
//	§12     Stats and logging only observe; a faulty log handler cannot
//	        change what executes.
//
// Messages are values of the struct [Message]: the type is data (a string, as
// an event envelope's eventType is), so a message read off the wire needs no
// Go type to be dispatched, and resolution is a map lookup, not reflection.
package dispatch
