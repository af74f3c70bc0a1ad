// Package workflow runs durable workflows: ordinary Go functions whose
// steps survive crashes, as in Temporal, DBOS or Restate, on Orrery's store.
//
//	charge := workflow.New("charge", 1, func(c *workflow.Ctx, o Order) (Receipt, error) {
//		id, err := workflow.Step(c, "reserve", func(ctx context.Context) (string, error) { return reserve(ctx, o) })
//		if err != nil {
//			return Receipt{}, err
//		}
//		if err := workflow.Sleep(c, time.Hour); err != nil { // durable: survives a restart
//			return Receipt{}, err
//		}
//		ok, err := workflow.Await[bool](c, "approved") // Client.Signal(run, "approved", true, key)
//		...
//	})
//
// # What it owns
//
//   - The run record. A run is a world of universe "sys.run/<workflow>"
//     whose id is the run id, so it has what every world has: a lease with
//     fencing epochs, an operator status (paused, archived), an inbox, and
//     effect and timer queues; ListWorlds finds the runs. The run's stream
//     (its world journal) holds only the lifecycle events of the execution
//     semantics contract — RunQueued, RunStarted, RunPaused, RunResumed,
//     RunCompleted, RunFailed, RunCancelled, StepStarted, StepCompleted,
//     StepFailed, StepSkipped — each a full event envelope: planId is the
//     workflow's name and planVersion the version the run started with,
//     stepId the step's id, logicalAttemptId counts a step's attempts from
//     1 (and, on RunPaused and RunResumed, the n-th pause or resume),
//     engineAttemptId is 1 (no execution provider below exposes attempts),
//     and the idempotency key is event.IdempotencyKey of those fields. Every
//     append is fenced by the run's lease and compare-and-swapped on the
//     stream's head, so runSeqs are gapless and a deposed worker can never
//     write. The run's input, signals and control requests are items of its
//     inbox; receipts and timer firings arrive there from the store.
//   - Replay. A worker that takes a run's lease reads its stream and runs
//     the function from the start; each step call consults the recorded
//     steps in order. A completed step returns its recorded result without
//     running; a step that failed for good returns its recorded error; an
//     attempt in flight when the last worker stopped runs again as the next
//     logical attempt (or, for a durable wait, is waited for again); a step
//     call that asks for another step than the one recorded at its position
//     is a *DivergenceError naming it (the worker reports EvDiverged), and
//     nothing of the divergent step is recorded: the run is held, not
//     failed (see "Divergence holds a run" below).
//   - Steps: Step (a function, with retries and timeouts), Sleep (a
//     durable timer), Await (a signal), Effect (an intent executed by the
//     plane's adapters, its receipt back in the inbox), Child (another run,
//     started idempotently), Patched (a patch marker, step
//     "sys:patch:<id>"), AwaitWithTimeout (a signal or a durable timer,
//     whichever comes first in the inbox). Step ids are the step's name
//     plus an occurrence number when a name repeats ("pay", "pay#2").
//   - Branches: Go starts a branch of the run and returns a Future; the
//     *Async calls (StepAsync, EffectAsync, NewTimer, AwaitAsync,
//     ChildAsync) are branches of one step. Future.Get waits for one,
//     Select for the first of several. Branches are coroutines (sched.go):
//     one runs at a time, so they share the run without locks, and their
//     steps overlap (a plain step's function runs while the others go on;
//     sleeps, signals, effects and children wait side by side). Go runs
//     the branch until its first wait before it returns, so positions are
//     taken in program order; a re-run resumes branches in the order
//     their steps' ends were recorded, which makes them ask for their
//     next steps in the same order, and Select picks what ended first in
//     that order. A branch still running when the function returns is
//     stopped; nothing it asks for afterwards is recorded.
//   - Cancellation: Client.Cancel is told to the function. The steps in
//     flight (but Detached ones) are recorded StepSkipped with the
//     request's inbox seq, and return a *Cancelled (matching ErrCancelled);
//     every later step on a Ctx that is not Detached returns it too, so
//     compensation runs on Detached(c). A function that returns an error
//     matching ErrCancelled ends the run RunCancelled. A run that recorded
//     no step yet is cancelled at once, without running its function.
//   - Determinism helpers: Ctx.Now (the time recorded for this point of
//     the run), Ctx.Rand (a source seeded from the run id), SideEffect (a
//     value computed once and recorded). Now and SideEffect are steps of
//     kind "side" that ride with the run's next write (determ.go).
//   - ContinueAsNew (continue.go): the function returns it, and the run
//     starts afresh under the same id from a new input, after a marker
//     (RunResumed of step "sys:continue", its attempt the generation)
//     from which history folding starts over.
//   - WithRunTimeout: a durable timer on the store's clock, due the
//     timeout after the start; its firing ends the run RunFailed ("run
//     timed out") without asking the function.
//   - Children end with their parent according to their parent-close
//     policy (WithParentClose): cancel (the default), abandon, or wait
//     (the parent's end waits for the child's).
//   - Worker: finds runnable runs (active, not held by a live lease
//     elsewhere, started with a version it carries), takes their leases, renews them
//     in batches, runs each run in a process of its own, and stops a run at
//     once when its lease is lost, revoked or fenced, or when the lease's
//     local deadline passes. The leases are held through internal/leasing,
//     as the plane's host holds its own: a deadline counts on the worker's
//     clock from just before the request that granted or renewed the
//     lease, never from the store's expiresAt, since the two clocks may be
//     seconds apart. MaxActiveRuns bounds
//     its runs; a run beyond it that never started gets RunQueued and
//     starts when room frees up. A run that ends is archived with the end
//     as its reason, so scans never see it again. A run started by a
//     client given the worker (WithWorkers) is handed to it before it
//     exists: the worker runs the function up to its first durable point,
//     and that first write creates the run (store.Spawn: its world, its
//     start item, the worker's lease, RunStarted and the first step's
//     StepStarted, in one transaction); Start returns once it is written.
//     A Result waiting on a run the worker runs gets the end from it
//     without reading the store.
//   - Queues: a named Queue (AddQueues, or one an operator made in the
//     store) bounds its runs across the cluster: a global and a per-worker
//     concurrency, a rate, and, partitioned, each partition key's own. A
//     run started OnQueue is written with RunQueued and its queue entry;
//     workers admit runs with one store transaction (store.AdmitRuns) that
//     counts the limits, by priority then FIFO, and take only admitted
//     runs. An entry needs its run's workflow version (Capability's
//     string), and a worker admits only entries whose version it carries:
//     the others take no slot and do not block the runs behind them. The commit that ends a run archives it, which frees its slot
//     in that transaction; a run taken over after a crash keeps its slot.
//   - Writes: a run writes its stream at its durable points only. A plain
//     step's StepCompleted (and RunStarted) rides with the run's next
//     write, the next step's StepStarted or the end, and the end's commit
//     archives the run, so a three-step run started in process is four
//     writes: the Spawn, two appends and the end. A crash between a step's
//     return and that write re-runs the step as its next attempt, which a
//     step's at-least-once contract allows. A running step's control watch
//     looks at the inbox at most every 20ms, so short steps cost no read.
//   - Client: Start (idempotent by run id), Result, Get, List, Signal,
//     Cancel (which cancels the run's live children too), Pause, Resume.
//     Run ids starting store.ScheduleRunPrefix ("sched.") are schedules'
//     ticks': a start (or a child) under one is ErrInvalid unless it is
//     the scheduler's (ScheduleTick), so no run can take a tick's id first.
//     Pause sets the run's status to paused, which
//     ends its lease at once; control requests that nobody holding the run
//     could record are recorded by the client under a lease of its own, or
//     caught up by the next holder, with the request's time as the event's
//     sourceOccurredAt. A cancel wins over a pause whatever their order: a
//     cancel makes a paused run active for a worker to end it, and a pause
//     that lands after that looks for a cancel and makes the run active
//     again.
//   - Asking a run how it is doing. SetEvent publishes a value under a key
//     as a durable step of kind "event" (step id "sys:event:<key>", with
//     "#n" for a key published again); Client.GetEvent and Client.Events
//     read the latest value per key straight from the journal. OnQuery
//     registers a handler that is never journaled and takes no step
//     position; Client.Query replays the run's journal in the asking
//     process (which must carry the run's workflow version, or it is
//     ErrVersionNotCarried) up to the first step the journal does not hold
//     ended and calls the handler there, so it answers for a run held by
//     any node and for an ended one, and writes nothing. A name with no
//     handler by then is ErrUnknownQuery (matching ErrNotFound); a handler
//     that fails or panics is ErrInvalid, keeping the handler's error.
//
// # What it never does
//
// It never trusts a hint for correctness (the store's state decides;
// hints wake and periodic re-reads back them up), never writes a run's
// stream without its lease's fence, never reads the machine's clock,
// sleeps or starts a goroutine except through the actor executor (so a
// worker runs in virtual time under testing/synctest and the lab), never
// draws randomness (retry jitter is a hash of the run, the step and the
// failure count), keeps no package-level mutable state, and never lets a
// map's order reach anything observable. It does not execute effects or
// fire timers: the plane's adapter pool and timer worker do, and a worker
// only publishes and waits. It imports no plane or API package.
//
// # Semantics worth knowing
//
//   - A step runs at least once per completed step: a crash between its
//     function's return and its StepCompleted runs it again (as the next
//     attempt). Side effects that must not repeat belong in an Effect:
//     one logical effect is one intent. A retry after an error receipt
//     asks again with a new intent (the receipt says the first is over);
//     a retry after the wait for a receipt timed out waits for the same
//     intent, which may still be queued or executing; a step that gives
//     up withdraws its intent in the same write if no adapter has claimed
//     it, and one already claimed may still run (its outcome unknown).
//   - A run's end (completed, failed, cancelled) archives it, and the same
//     write withdraws every effect it published that no adapter has
//     claimed: a cancelled run's queued effect never runs. An effect
//     already claimed may finish; its receipt lands in the ended run's
//     inbox and is ignored.
//   - What a step returns is always the decoded record, the first time
//     too, so a run and its replay see the same values; a failed step's
//     error is a *StepError carrying the recorded message only.
//   - A value the journal records (a step's result, an effect's params,
//     the run's output) is at most about 1 MiB encoded (maxValueBytes) and
//     within the decoder's depth and element limits. A larger step result
//     fails its step for good (a *StepError the function can handle), a
//     larger params is ErrInvalid, and a larger output fails the run: no
//     value can make a run retry for ever a write the store refuses.
//   - A Ctx is used by its coroutine's own goroutine (the function's, or
//     the branch's Ctx that Go hands it), one step at a time.
//     A step asked for from another goroutine, or from inside a step's
//     function, is refused with ErrConcurrentUse and the run fails with it:
//     with goroutines sharing a Ctx the order of the steps, and so which
//     recorded result each gets on a re-run, would be the scheduler's.
//   - A run keeps the version it started with and finishes on it. A binary
//     may carry several versions of a workflow (NewWorkflows takes v1 and
//     v2 of one name); a worker runs the runs of every version it carries,
//     each on its own version's code, and a start by name takes the newest
//     unless it names one (WithVersion). A start of a version that no live
//     worker carries (judged from the workers' advertised capabilities,
//     workflow:<name>@<version>) is ErrVersionNotCarried.
//   - Changing the steps of a running version makes its runs diverge at
//     the first changed step, unless the change is behind Patched: a run
//     that recorded another step where the patch stands takes the old
//     path, a new run records a patch marker and takes the new one
//     (docs/workflows.md, "Changing workflow code").
//   - Divergence holds a run: the worker records a RunPaused whose reason
//     is "divergent at step N: recorded X, got Y", takes no more steps,
//     and releases the run, which shows StatusBlocked. It stays takeable:
//     a worker whose replay gets past step N (a rollback, or a fix behind
//     Patched) records RunResumed with its first new write and carries on.
//     A worker that saw the run diverge does not take it again until its
//     journal moves or the worker restarts, and a held run that diverges
//     again records nothing, so old-code workers cannot flip it. The
//     operator's ways out are Client.Reset (a RunResumed carrying resetTo:
//     the steps at and after N are discarded for replay, kept in the
//     journal for the record, and a re-run one continues its attempt
//     numbers) and Client.Terminate (RunFailed "terminated: reason" under
//     the operator's lease).
package workflow
