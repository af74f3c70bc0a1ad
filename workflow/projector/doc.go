// Package projector turns append-only journal streams into read models: a
// Projector is fed a stream's events, and a Runner feeds every projector
// every stream it is given, from where the projector last stopped, and then
// follows what is appended later.
//
// # The rules a Runner keeps
//
//   - Per stream, events reach a projector in runSeq order only, the order
//     the append authority assigned. No timestamp is ever used to order
//     anything: persistedAt is the store's clock, and a clock can step
//     back or two transactions can commit in the other order than their
//     clock readings.
//   - Each (projector, stream) pair has a watermark: the runSeq of the last
//     event the projector was handed. It only moves with a compare-and-swap
//     (store.Watermarks.CASWatermark), so two runners never both move it
//     over the same event, and an event at or below it is never handed to
//     the projector again.
//   - Every event moves the watermark, including events of types the
//     projector does not know. A projection tolerates the types a later
//     version of the contract adds by ignoring them; it never stalls on
//     them.
//   - Delivery says which of the two comes first, the watermark's move or
//     the apply. ClaimFirst (the default) moves it first: two runners never
//     apply one event twice, and a runner that dies between the move and
//     the apply loses that one event for that projector. ApplyFirst applies
//     first: nothing is ever lost, and a runner that dies between the apply
//     and the move, or a second runner racing it, hands the same event over
//     again. Either way a projector should treat a repeat as the no-op it
//     is (see below).
//   - Two runners of one durable projector at once split its events between
//     them, each event applied once under ClaimFirst, but they do not share
//     one order: one may apply an event while the other still applies the
//     one before. A projection whose transitions depend on order runs one
//     runner at a time (the watermark CAS keeps a second one harmless, not
//     useful).
//   - A projector is never handed a silent gap. runSeqs may have gaps, so
//     when compaction has removed records a projector was never handed (its
//     watermark is below the stream's floor, see store.Journal.Floor), the
//     runner cannot just feed it what is left: by default it stops that
//     stream for that projector and reports the range (watermark+1 … floor)
//     as a *GapError on every pass, logged at ERROR, listed by Runner.Gaps
//     and handed to RunnerConfig.OnGap; the other projectors go on. With
//     RunnerConfig.SkipCompacted it moves the watermark to the floor
//     instead, knowingly: the skipped range is logged at WARN and listed
//     the same way.
//   - There is no journal notification to wait on, so Run polls, backing
//     off on the executor's clock while nothing moves; a producer in the
//     same process calls Notify after an append to be projected at once.
//
// # The rules a projection keeps
//
// The append authority never stores one (stream, idempotencyKey) twice,
// but a projection may be fed from elsewhere (a copy, an import, a test),
// so the built-in projections check for themselves: an event whose key the
// stream already delivered is a no-op, an event at or below the last runSeq
// they applied for the stream is a no-op, an unknown type is a no-op, and a
// payload they cannot read is read as empty. A failure's error is read
// from its payload, a CBOR map whose "error" entry is text (or a map with a
// "message" text entry). None of them returns an error for what an event
// says; Apply fails only when the projection itself cannot go on.
//
// # Where watermarks live
//
// A projector whose state is durable (a table, a file) keeps its watermarks
// in the store, so a restarted runner resumes where the last one stopped.
// A projection held in memory (it implements InMemory) is rebuilt from
// runSeq 0 by each process: its runner keeps its watermarks in a
// MemWatermarks of its own, so a new process never skips events its memory
// has not seen.
//
// # Built-in projections
//
//   - Runs: one row per workflow run: its workflow and version, status,
//     queued, started and ended times (persistedAt), duration, step count
//     and last error.
//   - Timeline: per run, each step's attempts (by logicalAttemptId), their
//     status, times, durations and errors.
//   - Worlds: one row per world journal: head height, the time of the last
//     step, and the steps by outcome, read from each WorldStepped record.
//
// Their readers are safe for concurrent use with Apply and return copies,
// sorted (runs and worlds by id, steps by the runSeq of their first event,
// attempts by number).
//
// # Audit
//
// Audit selects a stream's events by a persistedAt window, which is what a
// time window means for a journal (the append authority's clock), while the
// events it returns stay in runSeq order. A window that may hold compacted
// events fails with the store's *store.CompactedError, whose FloorAt says
// from when on a window is whole.
//
// # What it never does
//
// It never writes to a journal, never orders by a timestamp, never reads
// the machine's clock or sleeps outside the actor.Executor it is given, and
// starts no goroutine: Run and CatchUp run on the caller's.
package projector
