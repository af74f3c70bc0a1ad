// Package contract holds the decisions of the persistence-plane contract
// that every backend makes the same way: the fence predicate, protocol B's
// holder check, the claim check of Complete and Fire (which an operator's
// Resolve and a lease holder's FireHeld skip), world status
// transitions, snapshot idempotency and the journal's compaction floor.
// Each is a pure function of the rows a backend has read inside its
// transaction and the store's clock, so
// a backend keeps only storage: it loads the rows, asks here, and writes.
//
// What it never does: touch storage, read a clock, or hold state.
package contract

import (
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// LeaseRow is a lease as a backend read it; Found is false when the world
// was never leased.
type LeaseRow struct {
	Found       bool
	Holder      string
	Incarnation string // the holder's incarnation
	// TookOver says the lease was taken from Displaced, another
	// incarnation of the same worker that held it last (unexpired or
	// expired, not released): Acquire refuses that incarnation while the
	// lease is unexpired. (A lease taken after a release, or from another
	// worker, displaced nobody.)
	TookOver  bool
	Displaced string
	Epoch     uint64
	ExpiresAt time.Time
}

// Lease is the lease the row records for world. A released lease names no
// incarnation, whatever a backend left in the row when it cleared the
// holder.
func (l LeaseRow) Lease(world string) store.Lease {
	inc := l.Incarnation
	if l.Holder == "" {
		inc = ""
	}
	return store.Lease{World: world, Holder: l.Holder, Incarnation: inc, Epoch: l.Epoch, ExpiresAt: l.ExpiresAt}
}

// Expired reports whether a deadline has passed at now: a lease or claim
// is live strictly before its deadline.
func Expired(deadline, now time.Time) bool { return !now.Before(deadline) }

// Fence is the check every world mutation makes in its own transaction:
// the world exists (worldFound), and epoch is the epoch of its lease, which
// is held (not released) and unexpired by the store's clock. An expired
// lease fences its holder even before anyone takes it over: a paused
// holder never writes. (A status change that leaves active releases the
// lease, so a paused or archived world fences every writer.)
func Fence(op, world string, epoch uint64, worldFound bool, l LeaseRow, now time.Time) error {
	if !worldFound {
		return store.Errorf(op, store.ErrWorldNotFound, world, "")
	}
	switch {
	case !l.Found:
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: never leased", epoch)
	case l.Epoch != epoch:
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: lease is at epoch %d", epoch, l.Epoch)
	case l.Holder == "":
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: lease released", epoch)
	case Expired(l.ExpiresAt, now):
		return store.Errorf(op, store.ErrFenced, world, "epoch %d: lease expired", epoch)
	}
	return nil
}

// AppendFence decides whether an append may write stream under opts, given
// whether a world with the stream's id exists and its lease. It returns nil
// when the append may go ahead.
func AppendFence(op, stream string, opts store.AppendOptions, worldFound bool, l LeaseRow, now time.Time) error {
	switch opts.Kind {
	case store.FreeStream:
		if opts.Fence != nil {
			return store.Errorf(op, store.ErrInvalid, "", "stream %s: a free stream takes no fence", stream)
		}
		if worldFound {
			return store.Errorf(op, store.ErrFenced, stream, "a world's journal is written only under its own fence")
		}
		return nil
	case store.WorldStream:
		if !worldFound {
			return store.Errorf(op, store.ErrWorldNotFound, stream, "a world stream's id names no world (use FreeStream for other streams)")
		}
		if opts.Fence == nil {
			return store.Errorf(op, store.ErrFenced, stream, "no fence: a world's journal is written only under its own fence")
		}
		if opts.Fence.World != stream {
			return store.Errorf(op, store.ErrFenced, stream, "fence names world %q", opts.Fence.World)
		}
		return Fence(op, stream, opts.Fence.Epoch, true, l, now)
	}
	return store.Errorf(op, store.ErrInvalid, "", "stream kind %d", opts.Kind)
}

// Holder is protocol B's test (Renew, Release): an absent, released or
// expired lease is held by nobody (ErrNotHolder), as is one held by another
// worker; the holder of a live lease naming another epoch gets
// ErrStaleEpoch.
func Holder(op, world, worker string, epoch uint64, l LeaseRow, now time.Time) error {
	switch {
	case !l.Found || l.Holder == "":
		return store.Errorf(op, store.ErrNotHolder, world, "lease not held")
	case l.Holder != worker:
		return store.Errorf(op, store.ErrNotHolder, world, "held by %s", l.Holder)
	case Expired(l.ExpiresAt, now):
		return store.Errorf(op, store.ErrNotHolder, world, "lease expired")
	case l.Epoch != epoch:
		return store.Errorf(op, store.ErrStaleEpoch, world, "epoch %d, lease at %d", epoch, l.Epoch)
	}
	return nil
}

// ReleaseCheck decides a Release: (noop=true, nil) when the epoch is
// already released (a retried release succeeds); an expired lease may
// still be released by its holder; otherwise Renew's errors.
func ReleaseCheck(op, world, worker string, epoch uint64, l LeaseRow) (noop bool, err error) {
	switch {
	case l.Found && l.Holder == "" && l.Epoch == epoch:
		return true, nil
	case !l.Found || l.Holder == "":
		return false, store.Errorf(op, store.ErrNotHolder, world, "lease not held")
	case l.Holder != worker:
		return false, store.Errorf(op, store.ErrNotHolder, world, "held by %s", l.Holder)
	case l.Epoch != epoch:
		return false, store.Errorf(op, store.ErrStaleEpoch, world, "epoch %d, lease at %d", epoch, l.Epoch)
	}
	return false, nil
}

// Acquire decides protocol A for a world that exists with status, an
// assignment (assigned=false when none) and a lease row, for worker's
// incarnation inc. It returns keep=true when the same worker and
// incarnation already hold a live lease (answer it unchanged), or the row
// to write: epoch+1, expiry now+ttl, and TookOver with Displaced naming
// the incarnation it is taken from when the same worker last held it under
// another incarnation, live (a takeover) or expired. That displaced
// incarnation is refused (ErrLeaseHeld) while the lease is live: a new
// process takes over from an old one, never the reverse, also when the old
// one was frozen past its lease's expiry before the new one came.
func Acquire(op, world, worker, inc string, status store.WorldStatus, desired string, assigned bool, l LeaseRow, now time.Time, ttl time.Duration) (next LeaseRow, keep bool, err error) {
	switch status {
	case store.WorldPaused:
		return LeaseRow{}, false, store.Errorf(op, store.ErrWorldPaused, world, "")
	case store.WorldArchived:
		return LeaseRow{}, false, store.Errorf(op, store.ErrWorldArchived, world, "")
	}
	if assigned && desired != "" && desired != worker {
		return LeaseRow{}, false, store.Errorf(op, store.ErrNotAssigned, world, "assigned to %s", desired)
	}
	if l.Found && l.Holder != "" && !Expired(l.ExpiresAt, now) {
		switch {
		case l.Holder != worker:
			return LeaseRow{}, false, store.Errorf(op, store.ErrLeaseHeld, world, "held by %s at epoch %d", l.Holder, l.Epoch)
		case l.Incarnation == inc:
			return l, true, nil
		case l.TookOver && l.Displaced == inc:
			return LeaseRow{}, false, store.Errorf(op, store.ErrLeaseHeld, world,
				"held by %s at epoch %d under a newer incarnation, which took it from this one", l.Holder, l.Epoch)
		}
	}
	took, displaced := false, ""
	if l.Found && l.Holder == worker && l.Incarnation != inc {
		took, displaced = true, l.Incarnation
	}
	return LeaseRow{Found: true, Holder: worker, Incarnation: inc, TookOver: took, Displaced: displaced, Epoch: l.Epoch + 1, ExpiresAt: now.Add(ttl)}, false, nil
}

// Transition decides an operator's status change from -> to: noop when
// nothing changes, endLease when the world leaves active (its lease must
// be released in the same transaction).
func Transition(op, world string, from, to store.WorldStatus) (noop, endLease bool, err error) {
	if err := store.CheckStatus(op, to); err != nil {
		return false, false, err
	}
	switch {
	case from == to:
		return true, false, nil
	case from == store.WorldArchived:
		return false, false, store.Errorf(op, store.ErrWorldArchived, world, "an archived world stays archived")
	}
	return false, from == store.WorldActive, nil
}

// Ingress decides whether a producer's input (Enqueue, Send) may enter a
// world of status: everything but an archived world.
func Ingress(op, world string, found bool, status store.WorldStatus) error {
	switch {
	case !found:
		return store.Errorf(op, store.ErrWorldNotFound, world, "")
	case status == store.WorldArchived:
		return store.Errorf(op, store.ErrWorldArchived, world, "")
	}
	return nil
}

// ClaimRow is the claim state of a queued effect or timer.
type ClaimRow struct {
	Attempt   int
	ClaimedBy string
}

// ClaimCheck decides a completion (Complete, Fire) of an item that is not
// yet done: c must be its latest claim. A reap keeps the latest claim, so
// a late worker's result still counts until someone claims the item anew.
func ClaimCheck(op, id string, row ClaimRow, c vocab.Claim) error {
	if row.Attempt != c.Attempt || row.ClaimedBy != c.Worker {
		return store.Errorf(op, store.ErrClaimLost, "", "%s: claim %s#%d, latest is %s#%d", id, c.Worker, c.Attempt, row.ClaimedBy, row.Attempt)
	}
	return nil
}

// ReleaseEffect decides a ReleaseEffect of an effect in state (found=false:
// unknown) under c: noop=true when it is pending under c already (reaped
// or released), otherwise it must be inflight under c, its latest claim.
func ReleaseEffect(op, id string, found bool, state vocab.EffectState, row ClaimRow, c vocab.Claim) (noop bool, err error) {
	switch {
	case !found:
		return false, store.Errorf(op, store.ErrNotFound, "", "intent %s", id)
	case state == vocab.EffectDone:
		return false, store.Errorf(op, store.ErrClaimLost, "", "%s: done", id)
	case state == vocab.EffectWithdrawn:
		// Withdrawn (its world ended): a late release must not bring it
		// back, where no claim would ever take it again.
		return false, store.Errorf(op, store.ErrClaimLost, "", "%s: withdrawn", id)
	case state == vocab.EffectHeld:
		// The hold revoked every claim: only an operator lets it run.
		return false, store.Errorf(op, store.ErrClaimLost, "", "%s: held", id)
	}
	if err := ClaimCheck(op, id, row, c); err != nil {
		return false, err
	}
	return state == vocab.EffectPending, nil
}

// ReleaseTo is the state a released effect goes to: pending, to be claimed
// again at once, unless its world is archived, which claims never serve:
// then it is withdrawn, as the archive withdrew its pending effects.
func ReleaseTo(worldStatus store.WorldStatus) vocab.EffectState {
	if worldStatus == store.WorldArchived {
		return vocab.EffectWithdrawn
	}
	return vocab.EffectPending
}

// SettleRow is a queued effect or timer as a settle (Complete, Fire,
// Resolve) reads it in its own transaction.
type SettleRow struct {
	Found bool
	World string // the item's world (read for a lease holder's settle)
	Done  bool   // completed (an effect) or delivered (a timer)
	// Withdrawn: an effect given up before any claim (vocab.EffectWithdrawn).
	Withdrawn bool
	// Held: an effect an operator holds (vocab.EffectHeld); its claim
	// was revoked, so only an operator settles it.
	Held  bool
	DueAt *time.Time // a timer's deliverAt; nil for an effect
	Claim ClaimRow
}

// By is who settles an item: a claimant (Complete, Fire) presenting the
// Claim it was handed, an operator (Resolve: Operator set) giving Reason,
// or the holder of a world's lease (FireHeld: World set). Neither of the
// last two is bound by a claim; the holder, whose fence the backend checks
// in the same transaction, settles only its own world's items. A backend
// carries By from the call to the one settle path it has, so these settles
// are a claimant's with the claim check left out, never a second copy of
// the protocol.
type By struct {
	Claim    vocab.Claim
	Operator bool
	Reason   string
	World    string
}

// Claimant is the settle of the holder of claim c.
func Claimant(c vocab.Claim) By { return By{Claim: c} }

// Operator is an operator's settle, for reason.
func Operator(reason string) By { return By{Operator: true, Reason: reason} }

// LeaseHolder is the settle of the holder of world's lease (the backend
// has checked its fence).
func LeaseHolder(world string) By { return By{World: world} }

// OperatorReason is what a settle records as the operator's reason: nil
// when a claimant settles, so "no operator" and "an operator who gave no
// reason" stay apart.
func (b By) OperatorReason() *string {
	if !b.Operator {
		return nil
	}
	r := b.Reason
	return &r
}

// Settle decides a settle of the item id (noun names its kind in errors:
// "intent", "timer") by by at now: an unknown item, or for a lease holder
// another world's, is ErrNotFound; a done one answers its first delivery
// (dup=true), whoever settles; otherwise it must be due (a timer: Due)
// and, unless an operator or a lease holder settles, by's claim must be
// its latest (ClaimCheck). A withdrawn effect is ErrClaimLost, whoever
// settles; a held one is ErrClaimLost unless an operator settles.
func Settle(op, noun, id string, row SettleRow, by By, now time.Time) (dup bool, err error) {
	switch {
	case !row.Found:
		return false, store.Errorf(op, store.ErrNotFound, "", "%s %s", noun, id)
	case by.World != "" && row.World != by.World:
		// Said as for an unknown item: a holder learns nothing of
		// another world's queue.
		return false, store.Errorf(op, store.ErrNotFound, by.World, "%s %s", noun, id)
	case row.Done:
		return true, nil
	case row.Withdrawn:
		// Nobody settles it, an operator neither: the world ended or gave
		// the effect up, and no receipt of it will ever be read.
		return false, store.Errorf(op, store.ErrClaimLost, row.World, "%s %s was withdrawn", noun, id)
	}
	if row.DueAt != nil {
		if err := Due(op, id, *row.DueAt, now); err != nil {
			return false, err
		}
	}
	if by.Operator || by.World != "" {
		return false, nil
	}
	if row.Held {
		return false, store.Errorf(op, store.ErrClaimLost, row.World, "%s %s is held", noun, id)
	}
	return false, ClaimCheck(op, id, row.Claim, by.Claim)
}

// Due decides whether a timer may fire at now.
func Due(op, id string, deliverAt, now time.Time) error {
	if deliverAt.After(now) {
		return store.Errorf(op, store.ErrNotDue, "", "timer %s is due at %s, the store's clock reads %s", id,
			deliverAt.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// Retryable decides an operator's RetryEffect of an effect in state with
// receipt status rs (empty when not done).
func Retryable(op, id string, state vocab.EffectState, rs vocab.ReceiptStatus) error {
	if state == vocab.EffectDone && (rs == vocab.ReceiptError || rs == vocab.ReceiptTimeout) {
		return nil
	}
	if state == vocab.EffectDone {
		return store.Errorf(op, store.ErrNotRetryable, "", "intent %s completed %s", id, rs)
	}
	return store.Errorf(op, store.ErrNotRetryable, "", "intent %s is %s, not completed", id, state)
}

// Snapshot decides a PutSnapshot (or a Commit's snapshot) against the
// journal head and the snapshot already stored at its height (existing is
// "" when none): store=false for an idempotent repeat.
func Snapshot(op, world string, s store.Snapshot, head uint64, existing string) (write bool, err error) {
	if s.Height > head {
		return false, store.Errorf(op, store.ErrInvalid, world, "snapshot height %d passes the journal head %d", s.Height, head)
	}
	switch existing {
	case "":
		return true, nil
	case s.StateHash:
		return false, nil
	}
	return false, store.Errorf(op, store.ErrSnapshotConflict, world, "height %d holds state %s, offered %s", s.Height, existing, s.StateHash)
}

// Sweepable decides whether a done effect's or delivered timer's dedupe
// record may go: its inbox item has been consumed (cursor >= inboxSeq) and
// retention has passed since completion.
func Sweepable(completedAt time.Time, inboxSeq, cursor uint64, retention time.Duration, now time.Time) bool {
	return cursor >= inboxSeq && !completedAt.Add(retention).After(now)
}

// ReadFloor is the rule of every backend's Read: a read after afterSeq is
// whole only when afterSeq is at or above the stream's compaction floor;
// below it, the answer is a *store.CompactedError naming the floor.
func ReadFloor(stream string, afterSeq, floor uint64) error {
	if afterSeq < floor {
		return &store.CompactedError{Op: "read", Stream: stream, After: afterSeq, Floor: floor}
	}
	return nil
}

// WindowFloor is the rule of every backend's ReadWindow: a window may hold
// removed records unless it starts after the latest of them (floorAt).
func WindowFloor(stream string, from time.Time, floor uint64, floorAt time.Time) error {
	if floor > 0 && !floorAt.IsZero() && !from.After(floorAt) {
		return &store.CompactedError{Op: "read_window", Stream: stream, Floor: floor, FloorAt: floorAt}
	}
	return nil
}
