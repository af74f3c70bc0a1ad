package contract

import (
	"bytes"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// The journal's and the world cycle's compare-and-swaps, the id a new world
// may take, compaction's reach, the watermark's compare, and the fabric's
// and the operator's decisions that depend on what the store holds. Each is
// a pure function of rows a backend read in its transaction, as in
// contract.go. The last three (IsDue, Serves, Rebase) are predicates the
// SQL backends spell in a WHERE clause; a backend that selects in Go asks
// them by name, so that it spells no rule of its own.

// AppendHead is a plain Append's head compare-and-swap (expected nil: the
// caller asked none). An append that brings no new event (every record a
// duplicate) is answered without it, so that a retried append stays
// idempotent: fresh says whether any record was new.
func AppendHead(op, stream string, expected *uint64, head uint64, fresh bool) error {
	if expected == nil || !fresh || *expected == head {
		return nil
	}
	return store.Errorf(op, store.ErrHeadMismatch, stream, "expected head %d, head is %d", *expected, head)
}

// CycleHead is a world cycle's head compare-and-swap (Commit,
// DrainToJournal). Unlike a plain Append's it holds even when every entry
// is a duplicate: a cycle is built on the head it read, and a retried cycle
// already fails the cursor's compare-and-swap.
func CycleHead(op, world string, expected, head uint64) error {
	if expected != head {
		return store.Errorf(op, store.ErrHeadMismatch, world, "expected head %d, head is %d", expected, head)
	}
	return nil
}

// CycleCursor is a world cycle's inbox-cursor compare-and-swap: the cursor
// must be expected, and the new cursor (next) may not pass the last seq
// ever enqueued (last): a world drains only what it was sent.
func CycleCursor(op, world string, cursor, expected, next, last uint64) error {
	switch {
	case cursor != expected:
		return store.Errorf(op, store.ErrCursorMismatch, world, "expected cursor %d, cursor is %d", expected, cursor)
	case next > last:
		return store.Errorf(op, store.ErrInvalid, world, "new cursor %d passes the last enqueued seq %d", next, last)
	}
	return nil
}

// Conflict decides whether a record offered again under an idempotency
// key its stream already holds differs from the stored one: another
// eventType or another payload hash (storedSum and sum are SHA-256 sums of
// the payloads). A key whose record kept no fingerprint (storedSum nil: a
// key compacted before fingerprints were kept) has nothing to compare and
// never conflicts.
func Conflict(storedType string, storedSum []byte, eventType string, sum []byte) bool {
	if storedSum == nil {
		return false
	}
	return storedType != eventType || !bytes.Equal(storedSum, sum)
}

// CancelMissing decides the cancel of a timer that is not there to cancel
// (unknown, another world's, or fired): a world cycle's CancelTimers skip
// it (inCycle: the kernel may cancel a timer whose firing is still in its
// inbox, or one it never got to schedule), a CancelTimer alone is
// ErrNotFound.
func CancelMissing(op, world, intentHash string, inCycle bool) error {
	if inCycle {
		return nil
	}
	return store.Errorf(op, store.ErrNotFound, world, "timer %s", intentHash)
}

// WorldID decides whether id may name a new world (CreateWorld, Spawn,
// ForkWorld): no world has it (worldFound), and its stream has no events
// (head 0): a world's journal is written only under its fence from its
// first event on, so a free stream's history never becomes one.
func WorldID(op, id string, worldFound bool, head uint64) error {
	switch {
	case worldFound:
		return store.Errorf(op, store.ErrWorldExists, id, "")
	case head > 0:
		return store.Errorf(op, store.ErrWorldExists, id, "its stream already has events")
	}
	return nil
}

// CompactTo decides how far a Compact removes a world's journal: the
// events up to the active baseline's height less retain (ok=false: nothing
// to remove, when the world has no baseline or retain reaches below the
// first event).
func CompactTo(baseline uint64, hasBaseline bool, retain uint64) (upto uint64, ok bool) {
	if !hasBaseline || baseline <= retain {
		return 0, false
	}
	return baseline - retain, true
}

// Watermark is CASWatermark's compare: the projector's watermark on the
// stream (cur, 0 when never set) must be old.
func Watermark(op, projector, stream string, cur, old uint64) error {
	if cur != old {
		return store.Errorf(op, store.ErrWatermarkConflict, "", "projector %s on %s: expected %d, watermark is %d", projector, stream, old, cur)
	}
	return nil
}

// Reassign is CompareAndAssign's compare, on the world's assignment as the
// transaction read it (cur, nil: none): write says whether next must be
// written. An assignment that already is next needs no write and is no
// conflict (a retry of a write whose answer was lost); any other than prev
// is ErrAssignmentChanged.
func Reassign(op, world string, cur, prev, next *store.Assignment) (write bool, err error) {
	switch {
	case sameAssignment(cur, next):
		return false, nil
	case sameAssignment(cur, prev):
		return true, nil
	}
	return false, store.Errorf(op, store.ErrAssignmentChanged, world, "assignment is %s, expected %s", describe(cur), describe(prev))
}

func sameAssignment(a, b *store.Assignment) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func describe(a *store.Assignment) string {
	if a == nil {
		return "none"
	}
	return a.DesiredWorker + " (" + a.Reason + ")"
}

// RetryEffect decides an operator's RetryEffect of an effect in state with
// receipt status rs (empty when not done), of world in worldStatus: the
// effect must be Retryable, and its world not archived, since no claim
// ever serves an archived world's effects.
func RetryEffect(op, id, world string, state vocab.EffectState, rs vocab.ReceiptStatus, worldStatus store.WorldStatus) error {
	if err := Retryable(op, id, state, rs); err != nil {
		return err
	}
	if worldStatus == store.WorldArchived {
		return store.Errorf(op, store.ErrWorldArchived, world, "intent %s", id)
	}
	return nil
}

// HoldEffect decides an operator's hold of an effect in state
// (found=false: unknown): pending and inflight ones are held, a held one
// is a no-op, an ended one (done, withdrawn) cannot be held: its outcome
// is already decided.
func HoldEffect(op, id string, found bool, state vocab.EffectState) (noop bool, err error) {
	switch {
	case !found:
		return false, store.Errorf(op, store.ErrNotFound, "", "intent %s", id)
	case state == vocab.EffectHeld:
		return true, nil
	case state == vocab.EffectPending || state == vocab.EffectInflight:
		return false, nil
	}
	return false, store.Errorf(op, store.ErrEffectEnded, "", "intent %s is %s", id, state)
}

// ReleaseHeld decides an operator's release of an effect in state: a held
// one goes back to pending, a pending or inflight one is a no-op (released
// already, so a retried release succeeds), an ended one cannot run again.
func ReleaseHeld(op, id string, found bool, state vocab.EffectState) (noop bool, err error) {
	switch {
	case !found:
		return false, store.Errorf(op, store.ErrNotFound, "", "intent %s", id)
	case state == vocab.EffectHeld:
		return false, nil
	case state == vocab.EffectPending || state == vocab.EffectInflight:
		return true, nil
	}
	return false, store.Errorf(op, store.ErrEffectEnded, "", "intent %s is %s", id, state)
}

// Withdrawable reports whether a producer's Withdraw or its world's
// archiving withdraws an effect in state: a pending or a held one, which
// no claim holds; an inflight one may be executing and its receipt still
// lands.
func Withdrawable(state vocab.EffectState) bool {
	return state == vocab.EffectPending || state == vocab.EffectHeld
}

// WithdrawsPending reports whether a world's move to status withdraws its
// pending effects in the same transaction: archiving does (no claim serves
// an archived world), pausing does not (a resumed world's effects still
// run).
func WithdrawsPending(to store.WorldStatus) bool { return to == store.WorldArchived }

// Send decides a fabric send to dest: a message whose dedupe record exists
// (delivered) answers as already enqueued whatever its destination became
// since (archived by the very message), so a retried send whose answer was
// lost learns it was delivered instead of being refused; otherwise the
// destination must take input (Ingress).
func Send(op, dest string, delivered, destFound bool, destStatus store.WorldStatus) (already bool, err error) {
	if delivered {
		return true, nil
	}
	return false, Ingress(op, dest, destFound, destStatus)
}

// SweepCutoff is the retention half of Sweepable as a bound a backend can
// select by: a dedupe record completed at or before it has been kept the
// retention. A record with no consumption to wait for (an inbox key whose
// item was drained, a fabric message id, a withdrawn effect) may go once
// it completed by then.
func SweepCutoff(now time.Time, retention time.Duration) time.Time { return now.Add(-retention) }

// IsDue is Due as a predicate a backend can select by (ClaimDue): a timer
// is due once the store's clock reaches its deliverAt.
func IsDue(deliverAt, now time.Time) bool { return !deliverAt.After(now) }

// Serves reports whether claims serve the effects of a world in status:
// every world's but an archived one's, whose pending effects its archiving
// withdrew (ReleaseTo and the reapers withdraw the inflight ones too).
func Serves(status store.WorldStatus) bool { return status != store.WorldArchived }

// Rebase reports whether a snapshot stored at height becomes the world's
// active baseline, given the current one (hasBaseline=false: none): the
// active baseline is the highest snapshot, so a lower one never replaces it.
func Rebase(baseline uint64, hasBaseline bool, height uint64) bool {
	return !hasBaseline || height > baseline
}
