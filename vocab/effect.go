package vocab

import "time"

// EffectState is where an intent is in its life on the effect queue.
type EffectState string

const (
	EffectPending  EffectState = "pending"
	EffectInflight EffectState = "inflight"
	EffectDone     EffectState = "done"
	// EffectWithdrawn: given up before any adapter claimed it (its world
	// was archived, or its world withdrew it while pending; an inflight
	// effect of an archived world whose claim expired, too). It is final:
	// never claimed, never completed, no receipt.
	EffectWithdrawn EffectState = "withdrawn"
	// EffectHeld: kept from every adapter until an operator decides. An
	// effect that may already have run (one that was pending or inflight
	// when a restored backup was taken, or one an operator stopped) is
	// held rather than run again; the operator releases it (pending again:
	// it runs at least once more, under its idempotency key) or resolves
	// it with the receipt the external system gave. A held effect has no
	// claim: holding an inflight one revokes its claim.
	EffectHeld EffectState = "held"
)

// EffectItem is a queued (pending or inflight) effect: what an adapter is
// handed to execute.
type EffectItem struct {
	Intent
	World      string
	Seq        uint64 // queue order
	EnqueuedAt time.Time
	State      EffectState
	// Attempt counts claims: 1 on the first, +1 on every later claim
	// (after a reap or an operator retry). With ClaimedBy it is the claim
	// a completion must present.
	Attempt int
	// ClaimedBy is the worker of the latest claim; a reap keeps it (the
	// item is pending again, but that worker may still complete it until
	// someone claims it anew).
	ClaimedBy    string
	ClaimExpires time.Time // zero unless inflight
	Retries      int       // operator retries so far
	// Failures counts the executions that failed and were scheduled to
	// run again (store RetryLater) since the effect was published or an
	// operator last retried it: the attempt an execution is, by its retry
	// policy, is Failures+1. A claim lost in a crash is not counted.
	Failures int
	// RetryAt is when a failed effect may be claimed again, by the store's
	// clock (zero: at once). A pending item is not claimable before it.
	RetryAt time.Time
	// HoldReason and HeldAt are the latest hold's (store HoldEffect), kept
	// once released; HeldAt is zero for an effect never held.
	HoldReason string
	HeldAt     time.Time
}

// ClaimOf returns the claim of a claimed item.
func (e EffectItem) ClaimOf() Claim { return Claim{Worker: e.ClaimedBy, Attempt: e.Attempt} }

// Claim is what a claimant presents to complete its work: the worker and
// the attempt it was handed. A claim stays valid after its lease on the
// work expired, until another claim takes the work.
type Claim struct {
	Worker  string
	Attempt int
}
