// Package storetest is the one conformance suite every store backend runs
// unchanged: memstore (the reference, and the model tests' oracle), sqlite
// and postgres. A backend's test calls Run with a factory that opens a
// fresh, isolated store.
//
// The suite uses only the store.Store API and Harness.Advance. Where the
// contract in store/store.go leaves a choice open, the suite pins the
// reading memstore implements (memstore's behaviour is the contract there),
// and says so next to the test:
//
//   - Fencing: a write passes only while its epoch is the world's current
//     lease epoch and that lease is held and unexpired by the store's clock;
//     an expired or released lease fences at once (fencing.go). A world's
//     journal is written only under its own fence; FreeStream appends take
//     none and never write a world's stream; a WorldStream append to a
//     stream no world owns is ErrWorldNotFound (streamkinds.go).
//   - Leases: epoch = previous + 1, starting at >= 1; an expired lease is
//     held by nobody, so renewing it is ErrNotHolder; the assignment is
//     checked before the lease (protocol A), so a non-assigned worker gets
//     ErrNotAssigned even when the lease is held; Release follows Renew's
//     errors, releasing a released epoch again is a no-op, and an expired
//     lease may still be released by its holder (leases.go, bulk.go).
//   - ListWorkerWorlds attaches the world's lease record whatever its state
//     (an assigned world whose lease expired shows that expired record),
//     and nil when the world was never leased (bulk.go).
//   - World status: leaving active releases the lease at once (holder
//     cleared, epoch kept, expiry brought to the store's now); the same
//     status again returns the record unchanged (status.go).
//   - Journal: persistedAt reads back exactly as Append returned it, and
//     emittedAt and deliverAt at full nanosecond precision (journal.go,
//     times.go). Appended.Conflict compares eventType and payload only: a
//     duplicate that differs in other metadata (eventId, emittedAt, step) is
//     not a conflict (integrity.go).
//   - Intent hashes (effects and timers) are global: Complete, Fire and
//     EffectStatus name them alone. A fork therefore "inherits no effects"
//     in the sense that nothing queued belongs to it (worlds.go).
//   - Claims: a reaped effect keeps its queue Seq and its latest claim
//     (ClaimedBy, Attempt), so the reaped worker may still complete until a
//     new claim; a completion of a done intent is dup=true whatever the
//     claim. Fire checks the due time before the claim: a timer that is not
//     due was never claimed, and ErrNotDue is the answer. RetryEffect keeps
//     the attempt count and clears the latest claim, so no completion of
//     the finished attempt can pass as the retry's (ErrClaimLost)
//     (effects.go, timers.go, claims.go). Resolve is a completion without
//     the claim check: it leaves the attempt count alone, and the first
//     terminal receipt, the operator's or an adapter's, wins (resolve.go).
//   - FireHeld checks the fence first (a fenced caller learns nothing of
//     the timer), then the timer's world: another world's timer is
//     ErrNotFound whatever its state, delivered included; its ErrNotDue
//     answer carries the due time and the store's clock (fireheld.go).
//   - Commit checks every part before writing any; its CancelTimers skip
//     unknown, fired and other worlds' timers, and Cancelled counts only
//     the timers it removed (commit.go).
//   - Validation: store/validate.go runs before anything else, so a bad
//     value is ErrInvalid even where another check would also fail (the
//     world is unknown, the claim is stale) (validation.go, times.go).
//   - Dedupe retention: an inbox key completes when the cursor passes its
//     item; an effect or timer record when the cursor passes its receipt's
//     or firing's inbox seq (and retention counts from the completion); a
//     fabric record at Send (dedupe.go, retention.go).
//   - Withdrawal: archiving a world withdraws its pending effects (those
//     requeued by a reap too) and a Commit's Withdraw its named pending
//     ones; inflight effects are left to complete. Nobody settles a
//     withdrawn effect (ErrClaimLost, also for an operator's Resolve), and
//     its record is swept like a done one, counted from the withdrawal
//     (withdraw.go).
//   - Held effects: a hold clears the latest claim (as the orphan reaper
//     does), so the old claim's Complete, ReleaseEffect and RetryLater are
//     ErrClaimLost, also after the release; holding a held effect keeps the
//     first hold's reason and time; a release clears the retry wait and
//     keeps the failure count; archiving and a Commit's Withdraw withdraw
//     a held effect as a pending one (held.go).
//   - Compaction floor: Compact raises Floor to baseline - retain even
//     where no record was left to remove, and never lowers it; a fork's or
//     seed's start is not a floor (its stream reads from 0 without error);
//     ReadWindow refuses every window that starts at or before the latest
//     removed persistedAt, also one that held none of them (floor.go).
//   - A bounded Enqueue (InboxItem.MaxBacklog) counts the undrained seq
//     distance, answers a live duplicate first, and refuses past the bound
//     with ErrOverloaded writing nothing; receipts, firings and fabric
//     deliveries ignore it (backlog.go).
//   - QueueDepths.InboxBacklog counts items, not seq distances: a backend
//     whose inbox seqs have gaps still reports the number of undrained
//     items (views.go).
//   - Watch hints may be lost: the suite waits a bounded time for each and,
//     on a miss, checks the durable state instead; a spurious hint is
//     always tolerated. After stop, nothing reaches the Waker (watch.go).
//
// Orders between several simultaneous failures (which error wins) are not
// pinned, except validation first, and the model tests (model.go) never
// generate them.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Harness is one fresh store under test and the control of its clock.
type Harness struct {
	Store store.Store
	// Advance moves the store's clock forward by d. Backends with a real
	// clock (postgres: the server's) add d to an offset they apply to every
	// clock read, so expiries can be tested without waiting. It must be safe
	// to call while other goroutines use Store (the fencing race test does).
	// The suite assumes nothing else of the clock: it never reads an
	// absolute value it did not get from the store, and keeps every expiry
	// and due time at least half a second away from the instants it checks.
	Advance func(d time.Duration)
}

// Factory opens a fresh, isolated store (its own database, schema or file)
// and registers its cleanup with t.
type Factory func(t *testing.T) Harness

// Run runs the whole suite against the backend factory opens.
func Run(t *testing.T, open Factory) {
	for _, tc := range suite() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, open Factory)
}

// suite lists every conformance test, in a stable order. Each file of this
// package contributes one group function; add new groups here.
func suite() []testCase {
	var all []testCase
	for _, group := range []func() []testCase{
		journalTests,
		leaseTests,
		incarnationTests,
		orphanTests,
		fencingTests,
		inboxTests,
		backlogTests,
		effectTests,
		retryTests,
		heldTests,
		timerTests,
		fireHeldTests,
		fabricTests,
		snapshotTests,
		floorTests,
		worldTests,
		dedupeTests,
		watchTests,
		namespaceTests,
		streamKindTests,
		statusTests,
		claimTests,
		integrityTests,
		timeTests,
		validationTests,
		commitTests,
		bulkTests,
		completeManyTests,
		resolveTests,
		viewTests,
		retentionTests,
		spawnTests,
		withdrawTests,
		queueTests,
		scheduleTests,
		modelTests,
	} {
		all = append(all, group()...)
	}
	return all
}

var bg = context.Background()
