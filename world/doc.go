// Package world is the kernel of durable worlds: a deterministic state
// machine with all I/O outside it, as etcd's raft is. A world is a typed
// state S and one handler per input type:
//
//	type Account struct{ Balance int64 }
//	type Deposit struct{ Amount int64 }
//	type Withdraw struct{ Amount int64 }
//	type Balance struct{}
//
//	def := world.New[Account]("bank.account", 1)
//	world.On(def, func(c *world.Ctx, s *Account, d Deposit) error {
//		s.Balance += d.Amount
//		return nil
//	})
//	world.On(def, func(c *world.Ctx, s *Account, w Withdraw) error {
//		if w.Amount > s.Balance {
//			return errors.New("insufficient funds") // state unchanged
//		}
//		s.Balance -= w.Amount
//		c.Effect("http.request", world.HTTPRequest{Method: "POST", URL: "https://bank.example/payout"})
//		return nil
//	})
//	world.On(def, func(c *world.Ctx, s *Account, _ Balance) error {
//		c.Reply(s.Balance)
//		return nil
//	})
//	world.On(def, func(c *world.Ctx, s *Account, r world.Receipt) error {
//		c.Log("payout", "status", r.Status)
//		return nil
//	})
//
// # What it owns
//
//   - Definitions (New, On, EffectKind): inputs are routed by type name
//     through a handlers.Table, as the dispatcher contract routes messages; the name
//     is the Go type's, or its WorldType method's.
//   - The step: (state, height, input) → StepResult. State is canonical
//     CBOR (event's profile) and its SHA-256 is the state hash. A handler's
//     error or panic, or a step over one of the kernel's limits, consumes
//     the input, leaves the state unchanged and discards its intents; an input with no handler is recorded and
//     dropped; bytes that do not decode are an error outcome, never a panic.
//   - The handler's Ctx: the input's time (Now), randomness seeded by world
//     and height (Rand), effects (each with an optional retry policy of its
//     own, WithRetry and RetryPolicy, recorded with the intent and never
//     hashed), timers, fabric sends, the reply to a call, logs, and the
//     input's causal metadata.
//   - Intent hashes (IntentHash, pinned by test vectors), the built-in
//     params and receipts (HTTPRequest, sys/FabricSendParams@1,
//     sys/FabricSendReceipt@1), and the wire form of every input kind
//     (EncodeEvent, EncodeCall, EncodeReceipt, EncodeTimerFired,
//     EncodeFabric).
//   - The journal record of each step, an event envelope (the execution semantics contract), and Replay,
//     which re-runs a journal tail from a snapshot and names the first
//     height where the definition no longer does what the journal says.
//   - What the world awaits: the intents whose receipts it has not
//     consumed and the timers that have not fired. They are part of the
//     hashed state, so a receipt is handled once, a cancelled timer never
//     fires, and an intent whose receipt was consumed is never awaited
//     (or published) again. A receipt the kernel cannot read (over
//     MaxInputBytes, malformed) still ends the intent it was delivered
//     for (Input.ReceiptFor): its handler gets a timeout receipt, so no
//     effect stays awaited for ever.
//
// # What it never does
//
// It does no I/O, reads no clock, draws no machine randomness and starts
// no goroutine; it never imports store/ or plane/. Time comes from the
// input's enqueue time, randomness from the world id and height, and
// everything a handler wants done leaves as data in the StepResult for
// the plane to commit, in one transaction per cycle.
//
// # The plane's side
//
// The plane restores a world with Replay(def, id, snapshot, tail) (or Load
// for a snapshot at the head), feeds it inbox items one by one as Input,
// and commits each cycle's results at once: the Records as journal
// entries at heights head+1…, the Intents, the TimerSets and TimerCancels,
// and State as a snapshot when its policy says so. It answers a call with
// the step's Reply. Intents, timers, receipt statuses and inbox kinds are
// package vocab's, the vocabulary the store and the adapters speak too, so
// a step's results go to the store as they are.
//
// A timer firing the plane steps at its due time is stepped in two
// phases: World.Prepare decodes the input and the state before the due
// time, and Prepared.Step runs the handler once the plane has waited for
// it. The waiting is the plane's: the kernel never waits, and its API
// takes no callback.
//
// # State
//
// A world's state bytes are a CBOR map {"v": 1, "state": S, "effects":
// intents awaiting receipts, "timers": timers armed}, canonical, with
// lists sorted by hash. The handler's S is decoded afresh from these bytes
// at every step, so a handler always sees exactly what a replay would:
// fields the encoding drops (unexported ones, `cbor:"-"`) never survive a
// step. S must encode in event's canonical profile (no NaN, valid UTF-8);
// a step that leaves an S that cannot be encoded fails with ErrState.
//
// # Limits
//
// Every bound a step could exceed is checked before the step's result
// leaves the kernel, so the plane never asks the store for a commit it
// must refuse (a refused commit would re-step the same input for ever,
// and every input queued behind it would wait). A step that asks for
// more than a limit allows is an error outcome: the input is consumed,
// the state is unchanged, its intents, timers and cancels are discarded,
// and Err is a *LimitError (ErrLimit) that names the limit and by how much
// it was exceeded. The limits, per step:
//
//   - effects and fabric sends: MaxStepIntents (1000); timers set:
//     MaxStepTimers (1000); armed timers cancelled: MaxStepCancels (1000);
//   - one effect's params: MaxParamsBytes (4 MiB); a timer's firing
//     payload: MaxTimerBytes (1 MiB, since it returns as an input); a
//     timer's due time: within the range every store keeps (1678 to 2262);
//   - the reply to a call: MaxReplyBytes (4 MiB);
//   - the state after the step, as snapshotted: MaxStateBytes (64 MiB);
//   - the error text journaled (and StepResult.Err's text): MaxErrorBytes
//     (4 KiB), longer texts cut on a character boundary with a marker that
//     gives their length, and invalid UTF-8 replaced; errors.Is and
//     errors.As still reach the handler's error;
//   - logs, which are not journaled: MaxStepLogs (1000) kept, then one
//     entry counting the dropped ones;
//   - an input's payload: MaxInputBytes (1 MiB), a longer one being a
//     malformed input.
//
// They derive from the persistence limits in package event
// (event.MaxBatch, MaxPayloadBytes, MaxStateBytes, MaxIDBytes), which the
// store checks: a world's name and its effect kinds must be identifiers
// the store keeps too, or the definition is invalid. Bounding is a
// function of the step alone, so replay bounds exactly as the first run
// did. Should a store refuse a step all the same, the plane records the
// input with World.Refuse: an error outcome (ErrRefused) that runs no
// handler, marked in the record so that replay runs none either.
//
// # Journal records
//
// Each step is one event.Envelope: streamId = world id, runSeq = height,
// eventType = WorldStepped (for every outcome), stepId = "inbox/<seq>"
// (or "timer/<intent hash>" for a timer firing the world's holder stepped
// at its due time without an inbox item: Input.Seq 0, see TimerStepID),
// logicalAttemptId = engineAttemptId = 1, planId = the world's name,
// planVersion = its version, eventId = the idempotency key. The key
// therefore depends only on the world, the inbox item (or the timer) and
// the definition: draining the same item twice, or firing the same timer
// twice, yields the same key. The payload is
// canonical CBOR: {"v": 1, "input": {seq, kind, enqueued_at, type, cause,
// call_id, payload}, "outcome", "error", "refused", "state_hash",
// "intents", "timers", "cancels", "reply_hash"} ("refused" only on a step
// recorded by Refuse). A record holds a whole input and more, so it is
// read back within event.MaxPayloadBytes, not an input's limit. emittedAt is the caller's clock and
// nothing replay compares depends on it.
//
// # Versions and upgrades
//
// A binary may carry several versions of one world (Versions, with a typed
// Upgrade function from each version to the next). A world moves from one
// to another only by an input of kind vocab.KindUpgrade (EncodeUpgrade),
// ordered with its other inputs: its record has eventType
// WorldUpgraded, stepId "inbox/<seq>", planVersion the version the world
// is on after it, and the payload {"v": 1, "input", "from", "to",
// "outcome", "error", "refused", "state_hash"}. Only the handler's state
// is migrated; what the kernel awaits (effects, timers) carries over, and
// the image records the version (StateVersion) so that a snapshot names
// the definition that reads it. An upgrade that fails (the function's
// error or panic, a version not carried, a downgrade) is an error outcome
// and the world stays where it was; one to the version the world is on is
// a no-op. Replay runs every record with the definition that wrote it, so
// a record of one version is never re-run by another.
package world
