// Package plane is Orrery's hosted runtime for durable worlds: the host that
// runs many worlds in one process, passivation, the Go client, the
// orchestrator that places worlds on workers, fork and seed, and the
// internal ops API with its ingress validation.
//
// # What it owns
//
//   - Host: the worker. It acquires the leases of the worlds assigned to it
//     (Watch on assignments and leases, ListWorkerWorlds, then one
//     AcquireLeases per page, which also says which worlds have a backlog:
//     only those start a process, the others stay passive until their
//     next input), restores each world from its active snapshot plus the
//     journal tail (Restore), and
//     runs each active world as one process under a dynamic supervisor of
//     the actor layer. A world's cycle reads its inbox after the cursor,
//     steps the pure kernel until the inbox is drained or a budget runs out
//     (HostConfig.MaxInboxBatch, MaxTickStepsPerCycle, MaxEffectsPerCycle,
//     MaxCycleWall on the executor's clock, and the store's MaxBatch: a
//     cycle stops while one more step at the kernel's per-step limits
//     would not fit), then makes ONE store.Commit.
//   - No input wedges a world: the kernel bounds each step (see package
//     world, "Limits"), so the store takes every commit. Should it refuse
//     one all the same as invalid (store.ErrInvalid: nothing written), the
//     world is not restarted to fail again for ever: a commit of one step
//     is made again with that step's input consumed as a refused error
//     outcome (world.Instance.Refuse), and a commit of several is made
//     again one step per commit, which finds the one refused (EvRefused).
//     Leases are taken and renewed in batches through one lease holder
//     (internal/leasing, shared with the workflow worker): each lease has a
//     local deadline on the executor's clock, counted from just before
//     the AcquireLeases or RenewLeases request that granted it, and is
//     renewed RenewMargin before that deadline. The store's expiresAt, an
//     instant of the store's clock, is never compared with the host's.
//     The controller reconciles with the store one ListWorkerWorlds page
//     per turn, renewing between pages, and starts hint-driven passes at
//     most once per HintSyncGap (the assignment and lease topics are
//     global).
//   - A world process that fails (a store error, a commit that failed)
//     is restarted by the host's supervisor, after a backoff, from the
//     store. A commit whose answer was lost may have landed, so from the
//     crash until the restart restores, State answers nothing for the
//     world (the client reads the store instead) rather than a head the
//     commit may have passed.
//   - Host failure: a panic is never contained by a supervisor, so a world
//     process that panics outside the kernel ends the host's dynamic
//     supervisor. The host then fails as a whole instead of retrying: every
//     lease is fenced at once, released once the supervisor is gone, and
//     Wait and Err return ErrHostFailed (EvHostFailed is observed), for an
//     outer supervisor or the operator to start it again. The controller's
//     own death fails the host the same way.
//   - Fencing at the host: a world whose renewal fails, whose lease is
//     revoked (unassigned, reassigned, paused, taken over) or whose store
//     call answers ErrFenced is stopped at once. A fenced flag and the
//     lease's local deadline are checked before every step and every commit,
//     so no handler runs and nothing is committed after that point, and the
//     store rejects anything that raced past it by epoch.
//   - Incarnations: a host holds its leases as its worker id and an
//     incarnation drawn from crypto/rand when it starts
//     (HostConfig.Incarnation; the orchestrator and the node likewise). A
//     host started again under the same worker id, while the old one is
//     frozen or partitioned rather than dead, takes the old one's worlds
//     over at once at new epochs, so the old one is fenced; when it thaws,
//     the store refuses to give them back to it until the new host's
//     leases end.
//   - Timers: the host fires the timers of the worlds it holds. It records
//     each timer a world's commit sets (and, when it restores a world with
//     timers armed, reads their due times once with ListTimers) in one
//     schedule, a min-heap with one executor timer armed for the earliest,
//     and fires each at its due time (armed actor.TimerSlack early, the
//     rest waited out with actor.SpinUntil, so to the microsecond on the
//     production executor). A world whose process runs is handed
//     the firing and steps it at once, before any store call (no inbox
//     item: its record is named by the timer, world.TimerStepID), and the
//     commit that journals it removes the timer (CommitBatch.CancelTimers);
//     a crash before that commit leaves the timer to the next restore. A
//     passive world's timer is fired with store.FireHeld (fenced by the
//     world's lease, no claim), which wakes the world as an inbox hint
//     does; its process steps that firing without reading its inbox when
//     it is the next item. A cancelled timer and the timers of a world the
//     host no longer holds leave the schedule; a passive world keeps its
//     timers, so its timer wakes it. EvTimerFired reports each firing with
//     its lateness. Due times are the store's clock's: the schedule waits
//     for them on the host's clock through the skew each heartbeat
//     measures (the store's time of the heartbeat less the local time
//     after its answer, never above the true skew, so a firing is never
//     stepped before its due time by the store's clock); until a first
//     measurement, every firing goes through store.FireHeld, which the
//     store judges. The timer worker (plane/timer) is the fallback, for
//     worlds no live host fires: with its Lag it fires only what is that
//     late, and the store delivers a firing once whoever comes first.
//   - Passivation: an idle world's process exits after HostConfig.IdleAfter.
//     Its state is durable; the host keeps only its lease record (id, epoch,
//     local deadline), a store Watch registration and the state and cursor
//     the process parked, and the next inbox hint starts a fresh process
//     from them, like an Orleans grain: under the same holding no one else
//     commits, so they are the store's, and a wake reads nothing back. A
//     process parks before it lets go of the world, and only while it is
//     the world's registered process; a parked state below what the holding
//     committed since is refused for a restore from the store. A process
//     that crashed parks nothing; its successor restores from the store.
//     The controller claims a start under the host's lock (one process per
//     world per holding), and the host's recorded head, which State reads,
//     never moves back.
//   - Activation (Activator): the node that takes a world's input (a
//     client's, the ops API's, or a fabric.send message its effect pool
//     delivers) places the world if it is unplaced, as the reconcile would and under the
//     acting orchestrator's fence, and its host's controller acquires it
//     at once, so a world's first input is answered as fast as any other
//     instead of after a reconcile round and a sync. Pins and assignments
//     are never overwritten; a draining host takes nothing; racing
//     activations end with one holder, which the store's lease decides.
//   - Client: Send (acknowledged once durable in the inbox, deduplicated by
//     key), Call (waits for the handler's reply: applied, journaled,
//     returned) and State.
//   - Orchestrator: the worker inventory from heartbeats, rendezvous-hash
//     placement over live non-draining workers, durable pins that override
//     it, under a fenced lease of its own (world OrchestratorWorld).
//   - Ops: the internal ops API (assign, unassign, acquire, renew, release,
//     enqueue ingress, list worker worlds, fork, create from seed), each
//     idempotent with typed errors, and ingress validation (ValidateIngress):
//     one check per hop on the way to the inbox — the payload decoded once
//     (an event given by type and value, EnqueueEvent, never), the value
//     checked once by the kernel, and the item (world id, kind, key, size)
//     by the store alone, whose refusal is ErrInvalidIngress.
//   - Observability hooks, all on the executor's clock: HostConfig.Observe
//     receives every HostEvent, with latencies for metrics (EvCommit's Dur
//     is the lag from the enqueue of the oldest item the cycle journaled to
//     the commit, EvRenewed's the RenewLeases round trip; EvDiverged names
//     a journal the definition no longer replays); HostConfig.Logger logs
//     a host's lifecycle, never a line per step at Info; and OpenTelemetry
//     spans, through the API only (orrery.ingress in Client and Ops,
//     orrery.cycle per commit; the adapter pool and the timer worker add
//     theirs), record nothing unless the binary installs an SDK. The hops
//     of one flow pass through the store, where no trace context travels,
//     so ingress → cycle → effect → receipt → cycle (and timer firings)
//     are joined by span links from a TraceLinks, a bounded in-process
//     table shared by the hosts, pools, timer workers and clients of one
//     process. Across processes those links are simply absent.
//
// # The reply path of a call
//
// A call is an inbox item of kind "call" whose payload is world.EncodeCall
// with a fresh call id, enqueued with dedupe key "call:<id>". Its reply is
// never stored apart from the journal: the step that drained the call is
// journaled with the call id and the hash of the reply, and the reply is a
// deterministic function of the state before that step and the recorded
// input. So:
//
//   - in-process, the host hands the reply of every committed step to the
//     Replies hub it shares with the client, right after the commit that
//     made it durable; the waiting Call is unparked at once;
//   - across processes (or when the host crashed between its commit and the
//     hand-off) the client waits until the world's inbox cursor passes the
//     call's seq, finds the journal record of that seq, and re-derives the
//     reply by replaying the world from the highest stored snapshot below
//     the record (a fork's or a seeded world's genesis is one) up to it and
//     re-stepping its input, checking the reply hash. A reply re-derived
//     so is returned only once no in-process host (ClientConfig.Hosts)
//     whose process of the world runs is below that height: the journal holds a
//     commit before the commit returns to its host, and State, which asks
//     those hosts first, must show a caller at least what its reply saw
//     (read-your-writes through one node). Journal compacted
//     between that snapshot and the call makes it ErrReplyUnavailable,
//     wrapping the store's *store.CompactedError (errors.Is
//     store.ErrCompacted) that names the floor. The client re-checks the store on a
//     backoff on the executor's clock (a commit raises no hint a client
//     could watch); a host never polls.
//
// # What it never does
//
// It never runs world logic outside the kernel (the orchestrator runs
// none), never reads the machine's clock or sleeps (all time and waiting go
// through an actor.Executor, so the whole plane runs in the lab and under
// testing/synctest), never trusts a Watch hint for correctness (hints wake;
// durable state decides), and keeps no package-level mutable state. The
// adapters, the timer worker and the reapers live in plane/adapter and
// plane/timer.
package plane
