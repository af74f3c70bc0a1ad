package store

import (
	"context"
	"errors"
	"time"

	"github.com/orrery-run/orrery/vocab"
)

// Backend is what a storage backend implements: the Store's methods but
// the single-item forms that are a batch of one (Acquire, Renew, Release,
// Complete), which the Front answers through their batch forms. The Front
// calls a Backend only with input it has validated (ids, keys, payloads,
// sizes, times, options), so a backend keeps storage only: it reads the
// rows, asks store/internal/contract for the contract's decisions, and
// writes. What needs the stored state stays the backend's: whether the
// store is closed, whether a world exists, the fence, a cursor passing the
// last enqueued seq, a snapshot passing the head.
type Backend interface {
	Commit(ctx context.Context, world string, epoch uint64, b CommitBatch) (CommitResult, error)
	Watch(ctx context.Context, w Waker, topics ...string) (stop func(), err error)
	Now(ctx context.Context) (time.Time, error)
	Close() error

	Append(ctx context.Context, stream string, events []Record, opts AppendOptions) ([]Appended, error)
	Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]Record, error)
	Head(ctx context.Context, stream string) (uint64, error)
	Floor(ctx context.Context, stream string) (uint64, error)
	ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]Record, error)

	AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...AcquireOption) ([]AcquireResult, error)
	RenewLeases(ctx context.Context, worker string, refs []LeaseRef, ttl time.Duration) ([]LeaseResult, error)
	ReleaseLeases(ctx context.Context, worker string, refs []LeaseRef) ([]LeaseResult, error)
	GetLease(ctx context.Context, world string) (lease Lease, ok bool, err error)
	Assign(ctx context.Context, world string, a Assignment, by *Fence) error
	Unassign(ctx context.Context, world string, by *Fence) error
	GetAssignment(ctx context.Context, world string) (a Assignment, ok bool, err error)
	CompareAndAssign(ctx context.Context, world string, prev, next *Assignment, by *Fence) error
	ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]WorkerWorld, error)

	Workers
	Inbox

	Publish(ctx context.Context, world string, epoch uint64, intents []vocab.Intent) (int, error)
	Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...ClaimOption) ([]vocab.EffectItem, error)
	CompleteMany(ctx context.Context, cs []vocab.Completion) ([]CompleteResult, error)
	Resolve(ctx context.Context, intentHash string, r vocab.Receipt, reason string) (inboxSeq uint64, dup bool, err error)
	ReapEffects(ctx context.Context) (int, error)
	ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error
	RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error
	NextRetry(ctx context.Context, kinds []string) (wait time.Duration, ok bool, err error)
	RetryEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error)
	EffectStatus(ctx context.Context, intentHash string) (EffectStatus, error)
	HoldEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error)
	ReleaseHeld(ctx context.Context, intentHash, reason string) (EffectStatus, error)
	HoldOpenEffects(ctx context.Context, reason string) (int, error)
	ReleaseAllHeld(ctx context.Context, reason string) (int, error)

	Timers
	Fabric
	Snapshots
	Worlds
	Watermarks
	Dedupe
	Views
	Queues
	Schedules
}

// Front is the one front over every backend, as database/sql stands over
// its drivers: it validates each call once (store/validate.go), answers
// the single-item forms through the batch forms, and hands the backend
// only what passed. A call refused here is an *Error of Kind ErrInvalid
// (or the context's error) and never reaches the backend, so no backend
// can accept what another refuses.
//
// A finished context is answered here too, before validation; whether the
// store is closed is the backend's to say (it is state).
type Front struct {
	b Backend
}

// New puts the front over a backend.
func New(b Backend) *Front { return &Front{b: b} }

var _ Store = (*Front)(nil)

// done answers a call whose context has ended.
func done(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: op, Kind: err}
	}
	return nil
}

// first returns the first non-nil error, in order.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkFenced checks the plain arguments of a fenced world mutation.
func checkFenced(op, world string, epoch uint64) error {
	return first(CheckID(op, "world", world), CheckInt(op, "epoch", epoch))
}

// ---- batch of one ----

// asOne names err, an answer of a batch call made for a single-item form,
// after that form: a copy of a *Error with op as its Op. Anything else (a
// fault a test injected, say) passes unchanged.
func asOne(op string, err error) error {
	if e, ok := err.(*Error); ok && e.Op != op {
		c := *e
		c.Op = op
		return &c
	}
	return err
}

// Acquire is AcquireLeases of one world.
func (f *Front) Acquire(ctx context.Context, world, worker string, ttl time.Duration, opts ...AcquireOption) (Lease, error) {
	const op = "acquire"
	rs, err := f.AcquireLeases(ctx, worker, []string{world}, ttl, opts...)
	if err != nil {
		return Lease{}, asOne(op, err)
	}
	return rs[0].Lease, asOne(op, rs[0].Err)
}

// Renew is RenewLeases of one lease.
func (f *Front) Renew(ctx context.Context, world, worker string, epoch uint64, ttl time.Duration) (Lease, error) {
	const op = "renew"
	rs, err := f.RenewLeases(ctx, worker, []LeaseRef{{World: world, Epoch: epoch}}, ttl)
	if err != nil {
		return Lease{}, asOne(op, err)
	}
	return rs[0].Lease, asOne(op, rs[0].Err)
}

// Release is ReleaseLeases of one lease.
func (f *Front) Release(ctx context.Context, world, worker string, epoch uint64) error {
	const op = "release"
	rs, err := f.ReleaseLeases(ctx, worker, []LeaseRef{{World: world, Epoch: epoch}})
	if err != nil {
		return asOne(op, err)
	}
	return asOne(op, rs[0].Err)
}

// Complete is CompleteMany of one completion. The completion is checked
// first: an invalid one is the call's answer, and the backend never hears
// of it (CompleteMany would still ask it, with no item).
func (f *Front) Complete(ctx context.Context, intentHash string, c vocab.Claim, r vocab.Receipt) (uint64, bool, error) {
	const op = "complete"
	one := vocab.Completion{IntentHash: intentHash, Claim: c, Receipt: r}
	if err := first(done(ctx, op), checkCompletion(op, one)); err != nil {
		return 0, false, err
	}
	rs, err := f.CompleteMany(ctx, []vocab.Completion{one})
	if err != nil {
		return 0, false, asOne(op, err)
	}
	return rs[0].InboxSeq, rs[0].Dup, asOne(op, rs[0].Err)
}

// ---- the world cycle, the clock, watches ----

// Commit implements Store.
func (f *Front) Commit(ctx context.Context, world string, epoch uint64, b CommitBatch) (CommitResult, error) {
	const op = "commit"
	if err := first(done(ctx, op), checkFenced(op, world, epoch), checkCommit(op, &b)); err != nil {
		return CommitResult{}, err
	}
	return f.b.Commit(ctx, world, epoch, b)
}

// DrainToJournal implements Inbox: it is checked as the Commit it is.
func (f *Front) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []Record) ([]Appended, error) {
	const op = "drain"
	b := CommitBatch{ExpectedCursor: expectedCursor, NewCursor: newCursor, ExpectedHead: expectedHead, Entries: entries}
	if err := first(done(ctx, op), checkFenced(op, world, epoch), checkCommit(op, &b)); err != nil {
		return nil, err
	}
	return f.b.DrainToJournal(ctx, world, epoch, expectedCursor, expectedHead, newCursor, entries)
}

// Watch implements Store: a waker and at least one topic, each valid.
func (f *Front) Watch(ctx context.Context, w Waker, topics ...string) (func(), error) {
	const op = "watch"
	if err := done(ctx, op); err != nil {
		return nil, err
	}
	switch {
	case w == nil:
		return nil, Errorf(op, ErrInvalid, "", "nil waker")
	case len(topics) == 0:
		return nil, Errorf(op, ErrInvalid, "", "no topic")
	}
	for _, t := range topics {
		if !ValidTopic(t) {
			return nil, Errorf(op, ErrInvalid, "", "topic %q", t)
		}
	}
	return f.b.Watch(ctx, w, topics...)
}

// Now implements Store.
func (f *Front) Now(ctx context.Context) (time.Time, error) {
	if err := done(ctx, "now"); err != nil {
		return time.Time{}, err
	}
	return f.b.Now(ctx)
}

// Close implements Store.
func (f *Front) Close() error { return f.b.Close() }

// ---- the journal ----

// Append implements Journal.
func (f *Front) Append(ctx context.Context, stream string, events []Record, opts AppendOptions) ([]Appended, error) {
	const op = "append"
	if err := first(done(ctx, op), CheckID(op, "stream", stream), checkRecords(op, events)); err != nil {
		return nil, err
	}
	if opts.Fence != nil {
		if err := CheckID(op, "fence world", opts.Fence.World); err != nil {
			return nil, err
		}
	}
	if opts.ExpectedHead != nil {
		if err := CheckInt(op, "expectedHead", *opts.ExpectedHead); err != nil {
			return nil, err
		}
	}
	return f.b.Append(ctx, stream, events, opts)
}

// Read implements Journal.
func (f *Front) Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]Record, error) {
	if err := done(ctx, "read"); err != nil {
		return nil, err
	}
	return f.b.Read(ctx, stream, afterSeq, limit)
}

// Head implements Journal.
func (f *Front) Head(ctx context.Context, stream string) (uint64, error) {
	if err := done(ctx, "head"); err != nil {
		return 0, err
	}
	return f.b.Head(ctx, stream)
}

// Floor implements Journal.
func (f *Front) Floor(ctx context.Context, stream string) (uint64, error) {
	if err := done(ctx, "floor"); err != nil {
		return 0, err
	}
	return f.b.Floor(ctx, stream)
}

// ReadWindow implements Journal.
func (f *Front) ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]Record, error) {
	if err := done(ctx, "read_window"); err != nil {
		return nil, err
	}
	return f.b.ReadWindow(ctx, stream, from, to, limit)
}

// ---- leases ----

// AcquireLeases implements Leases: the worker, the TTL, the worlds and
// the options are the call's; a world's own answer is the backend's.
func (f *Front) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...AcquireOption) ([]AcquireResult, error) {
	const op = "acquire_leases"
	if err := first(done(ctx, op), checkAcquireLeases(op, worker, worlds, ttl)); err != nil {
		return nil, err
	}
	if _, err := ResolveAcquireOptions(op, opts); err != nil {
		return nil, err
	}
	return f.b.AcquireLeases(ctx, worker, worlds, ttl, opts...)
}

// RenewLeases implements Leases.
func (f *Front) RenewLeases(ctx context.Context, worker string, refs []LeaseRef, ttl time.Duration) ([]LeaseResult, error) {
	const op = "renew_leases"
	if err := first(done(ctx, op), CheckID(op, "worker", worker), checkTTL(op, "ttl", ttl), checkRefs(op, refs)); err != nil {
		return nil, err
	}
	return f.b.RenewLeases(ctx, worker, refs, ttl)
}

// ReleaseLeases implements Leases.
func (f *Front) ReleaseLeases(ctx context.Context, worker string, refs []LeaseRef) ([]LeaseResult, error) {
	const op = "release_leases"
	if err := first(done(ctx, op), CheckID(op, "worker", worker), checkRefs(op, refs)); err != nil {
		return nil, err
	}
	return f.b.ReleaseLeases(ctx, worker, refs)
}

// checkRefs checks the leases a bulk call names: at most MaxBatch, each a
// world id and an epoch.
func checkRefs(op string, refs []LeaseRef) error {
	if err := checkBatch(op, "refs", len(refs)); err != nil {
		return err
	}
	for _, r := range refs {
		if err := first(CheckID(op, "world", r.World), CheckInt(op, "epoch", r.Epoch)); err != nil {
			return err
		}
	}
	return nil
}

// GetLease implements Leases.
func (f *Front) GetLease(ctx context.Context, world string) (Lease, bool, error) {
	if err := done(ctx, "get_lease"); err != nil {
		return Lease{}, false, err
	}
	return f.b.GetLease(ctx, world)
}

// Assign implements Leases.
func (f *Front) Assign(ctx context.Context, world string, a Assignment, by *Fence) error {
	const op = "assign"
	if err := first(done(ctx, op), CheckID(op, "world", world), checkOptionalID(op, "desiredWorker", a.DesiredWorker),
		CheckReason(op, a.Reason), checkAuthority(op, by)); err != nil {
		return err
	}
	return f.b.Assign(ctx, world, a, by)
}

// Unassign implements Leases.
func (f *Front) Unassign(ctx context.Context, world string, by *Fence) error {
	const op = "unassign"
	if err := first(done(ctx, op), CheckID(op, "world", world), checkAuthority(op, by)); err != nil {
		return err
	}
	return f.b.Unassign(ctx, world, by)
}

// CompareAndAssign implements Leases.
func (f *Front) CompareAndAssign(ctx context.Context, world string, prev, next *Assignment, by *Fence) error {
	const op = "compare_and_assign"
	if err := first(done(ctx, op), CheckID(op, "world", world), checkAuthority(op, by)); err != nil {
		return err
	}
	if next != nil {
		if err := first(checkOptionalID(op, "desiredWorker", next.DesiredWorker), CheckReason(op, next.Reason)); err != nil {
			return err
		}
	}
	return f.b.CompareAndAssign(ctx, world, prev, next, by)
}

// checkAuthority checks an assignment writer's fence (nil: an operator).
func checkAuthority(op string, by *Fence) error {
	if by == nil {
		return nil
	}
	return CheckID(op, "fence world", by.World)
}

// GetAssignment implements Leases.
func (f *Front) GetAssignment(ctx context.Context, world string) (Assignment, bool, error) {
	if err := done(ctx, "get_assignment"); err != nil {
		return Assignment{}, false, err
	}
	return f.b.GetAssignment(ctx, world)
}

// ListWorkerWorlds implements Leases.
func (f *Front) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]WorkerWorld, error) {
	const op = "list_worker_worlds"
	if err := first(done(ctx, op), CheckID(op, "worker", worker), checkOptionalID(op, "after", after), checkBatch(op, "limit", limit)); err != nil {
		return nil, err
	}
	return f.b.ListWorkerWorlds(ctx, worker, after, limit)
}

// ---- the worker inventory ----

// Heartbeat implements Workers.
func (f *Front) Heartbeat(ctx context.Context, worker string, capacity int, opts ...HeartbeatOption) (WorkerInfo, error) {
	const op = "heartbeat"
	if err := first(done(ctx, op), checkHeartbeat(op, worker, capacity)); err != nil {
		return WorkerInfo{}, err
	}
	if _, err := ResolveHeartbeatOptions(op, opts); err != nil {
		return WorkerInfo{}, err
	}
	return f.b.Heartbeat(ctx, worker, capacity, opts...)
}

// RetireWorker implements Workers.
func (f *Front) RetireWorker(ctx context.Context, worker, incarnation string) (int, error) {
	const op = "retire_worker"
	if err := first(done(ctx, op), CheckID(op, "worker", worker), checkOptionalID(op, "incarnation", incarnation)); err != nil {
		return 0, err
	}
	return f.b.RetireWorker(ctx, worker, incarnation)
}

// ReapOrphans implements Workers.
func (f *Front) ReapOrphans(ctx context.Context) (int, error) {
	if err := done(ctx, "reap_orphans"); err != nil {
		return 0, err
	}
	return f.b.ReapOrphans(ctx)
}

// SetDraining implements Workers.
func (f *Front) SetDraining(ctx context.Context, worker string, draining bool) (WorkerInfo, error) {
	const op = "set_draining"
	if err := first(done(ctx, op), CheckID(op, "worker", worker)); err != nil {
		return WorkerInfo{}, err
	}
	return f.b.SetDraining(ctx, worker, draining)
}

// ListWorkers implements Workers.
func (f *Front) ListWorkers(ctx context.Context) ([]WorkerInfo, error) {
	if err := done(ctx, "list_workers"); err != nil {
		return nil, err
	}
	return f.b.ListWorkers(ctx)
}

// ---- the inbox ----

// Enqueue implements Inbox.
func (f *Front) Enqueue(ctx context.Context, world string, item InboxItem) (uint64, bool, error) {
	const op = "enqueue"
	if err := first(done(ctx, op), CheckID(op, "world", world), CheckIngress(op, item)); err != nil {
		return 0, false, err
	}
	return f.b.Enqueue(ctx, world, item)
}

// ReadInbox implements Inbox.
func (f *Front) ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]InboxItem, error) {
	if err := done(ctx, "read_inbox"); err != nil {
		return nil, err
	}
	return f.b.ReadInbox(ctx, world, afterSeq, limit)
}

// Cursor implements Inbox.
func (f *Front) Cursor(ctx context.Context, world string) (uint64, error) {
	if err := done(ctx, "cursor"); err != nil {
		return 0, err
	}
	return f.b.Cursor(ctx, world)
}

// ---- effects ----

// Publish implements Effects.
func (f *Front) Publish(ctx context.Context, world string, epoch uint64, intents []vocab.Intent) (int, error) {
	const op = "publish"
	if err := first(done(ctx, op), checkFenced(op, world, epoch), checkBatch(op, "intents", len(intents))); err != nil {
		return 0, err
	}
	for _, in := range intents {
		if err := checkIntent(op, in); err != nil {
			return 0, err
		}
	}
	return f.b.Publish(ctx, world, epoch, intents)
}

// Claim implements Effects.
func (f *Front) Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...ClaimOption) ([]vocab.EffectItem, error) {
	const op = "claim"
	if err := first(done(ctx, op), CheckID(op, "worker", worker), checkKinds(op, kinds), checkBatch(op, "n", n),
		checkTTL(op, "claimTTL", claimTTL)); err != nil {
		return nil, err
	}
	if _, err := ResolveClaimOptions(op, opts); err != nil {
		return nil, err
	}
	return f.b.Claim(ctx, worker, kinds, n, claimTTL, opts...)
}

// CompleteMany implements Effects. The batch's size is the call's; each
// item is checked alone, as Complete checks it: an invalid one is answered
// ErrInvalid here, the valid ones go to the backend (in their order, so
// that an intent named twice is still decided in order), and the answers
// are merged back in the caller's order. The backend is called even when
// no item is valid, so that the call's own answer (a closed store) is the
// same whatever the items.
func (f *Front) CompleteMany(ctx context.Context, cs []vocab.Completion) ([]CompleteResult, error) {
	const op = "complete_many"
	if err := first(done(ctx, op), checkBatch(op, "completions", len(cs))); err != nil {
		return nil, err
	}
	out := make([]CompleteResult, len(cs))
	valid := make([]vocab.Completion, 0, len(cs))
	at := make([]int, 0, len(cs)) // at[j]: the index in cs of valid[j]
	for i, c := range cs {
		if out[i].Err = checkCompletion("complete", c); out[i].Err == nil {
			valid = append(valid, c)
			at = append(at, i)
		}
	}
	if len(valid) == len(cs) {
		return f.b.CompleteMany(ctx, cs)
	}
	rs, err := f.b.CompleteMany(ctx, valid)
	if err != nil {
		return nil, err
	}
	for j, r := range rs {
		out[at[j]] = r
	}
	return out, nil
}

// Resolve implements Effects.
func (f *Front) Resolve(ctx context.Context, intentHash string, r vocab.Receipt, reason string) (uint64, bool, error) {
	const op = "resolve"
	if err := first(done(ctx, op), checkResolve(op, intentHash, r, reason)); err != nil {
		return 0, false, err
	}
	return f.b.Resolve(ctx, intentHash, r, reason)
}

// ReapEffects implements Effects.
func (f *Front) ReapEffects(ctx context.Context) (int, error) {
	if err := done(ctx, "reap_effects"); err != nil {
		return 0, err
	}
	return f.b.ReapEffects(ctx)
}

// ReleaseEffect implements Effects.
func (f *Front) ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error {
	const op = "release_effect"
	if err := first(done(ctx, op), CheckID(op, "intentHash", intentHash), checkClaim(op, c)); err != nil {
		return err
	}
	return f.b.ReleaseEffect(ctx, intentHash, c)
}

// RetryLater implements Effects. The delay is at most MaxTTL (a policy's
// longest interval is far below it) and the error at most MaxReasonBytes.
func (f *Front) RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error {
	const op = "retry_later"
	var bad error
	if delay < 0 || delay > MaxTTL {
		bad = invalid(op, "delay", "%v outside [0, %v]", delay, MaxTTL)
	}
	if err := first(done(ctx, op), CheckID(op, "intentHash", intentHash), checkClaim(op, c), bad,
		checkText(op, "lastError", lastError, MaxReasonBytes, false)); err != nil {
		return err
	}
	return f.b.RetryLater(ctx, intentHash, c, delay, lastError)
}

// NextRetry implements Effects.
func (f *Front) NextRetry(ctx context.Context, kinds []string) (time.Duration, bool, error) {
	const op = "next_retry"
	if err := first(done(ctx, op), checkKinds(op, kinds)); err != nil {
		return 0, false, err
	}
	return f.b.NextRetry(ctx, kinds)
}

// RetryEffect implements Effects.
func (f *Front) RetryEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	const op = "retry_effect"
	if err := first(done(ctx, op), CheckID(op, "intentHash", intentHash), CheckReason(op, reason)); err != nil {
		return EffectStatus{}, err
	}
	return f.b.RetryEffect(ctx, intentHash, reason)
}

// HoldEffect implements Effects.
func (f *Front) HoldEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	const op = "hold_effect"
	if err := first(done(ctx, op), CheckID(op, "intentHash", intentHash), CheckReason(op, reason)); err != nil {
		return EffectStatus{}, err
	}
	st, err := f.b.HoldEffect(ctx, intentHash, reason)
	if errors.Is(err, ErrEffectEnded) && reason != "" {
		return f.endedSince(ctx, intentHash, err, func(st EffectStatus) bool { return st.HoldReason == reason })
	}
	return st, err
}

// endedSince answers a hold or release refused as ErrEffectEnded whose
// own earlier attempt (a retry after its answer was lost) is what the
// effect's record shows, by same: the effect's status, no error. A hold
// or release is known by its reason, so one without a reason is never
// taken for an earlier one.
func (f *Front) endedSince(ctx context.Context, intentHash string, refused error, same func(EffectStatus) bool) (EffectStatus, error) {
	st, err := f.b.EffectStatus(ctx, intentHash)
	if err != nil {
		return EffectStatus{}, refused
	}
	ended := st.State == vocab.EffectDone || st.State == vocab.EffectWithdrawn
	if ended && !st.HeldAt.IsZero() && same(st) {
		return st, nil
	}
	return EffectStatus{}, refused
}

// ReleaseHeld implements Effects.
func (f *Front) ReleaseHeld(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	const op = "release_held"
	if err := first(done(ctx, op), CheckID(op, "intentHash", intentHash), CheckReason(op, reason)); err != nil {
		return EffectStatus{}, err
	}
	st, err := f.b.ReleaseHeld(ctx, intentHash, reason)
	if errors.Is(err, ErrEffectEnded) && reason != "" {
		return f.endedSince(ctx, intentHash, err, func(st EffectStatus) bool { return st.ReleaseReason == reason })
	}
	return st, err
}

// HoldOpenEffects implements Effects.
func (f *Front) HoldOpenEffects(ctx context.Context, reason string) (int, error) {
	const op = "hold_open_effects"
	if err := first(done(ctx, op), CheckReason(op, reason)); err != nil {
		return 0, err
	}
	return f.b.HoldOpenEffects(ctx, reason)
}

// ReleaseAllHeld implements Effects.
func (f *Front) ReleaseAllHeld(ctx context.Context, reason string) (int, error) {
	const op = "release_all_held"
	if err := first(done(ctx, op), CheckReason(op, reason)); err != nil {
		return 0, err
	}
	return f.b.ReleaseAllHeld(ctx, reason)
}

// EffectStatus implements Effects. An intent hash no write could have
// stored is ErrInvalid, as everywhere else it is named.
func (f *Front) EffectStatus(ctx context.Context, intentHash string) (EffectStatus, error) {
	const op = "effect_status"
	if err := first(done(ctx, op), CheckID(op, "intentHash", intentHash)); err != nil {
		return EffectStatus{}, err
	}
	return f.b.EffectStatus(ctx, intentHash)
}

// ---- timers ----

// Schedule implements Timers.
func (f *Front) Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	const op = "schedule"
	ts := vocab.TimerSet{IntentHash: intentHash, DeliverAt: deliverAt, Payload: payload}
	if err := first(done(ctx, op), checkFenced(op, world, epoch), checkTimerSet(op, ts)); err != nil {
		return err
	}
	return f.b.Schedule(ctx, world, epoch, intentHash, deliverAt, payload)
}

// CancelTimer implements Timers.
func (f *Front) CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error {
	const op = "cancel_timer"
	if err := first(done(ctx, op), checkFenced(op, world, epoch), CheckID(op, "intentHash", intentHash)); err != nil {
		return err
	}
	return f.b.CancelTimer(ctx, world, epoch, intentHash)
}

// ClaimDue implements Timers.
func (f *Front) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...ClaimOption) ([]TimerItem, error) {
	const op = "claim_due"
	if err := first(done(ctx, op), CheckID(op, "worker", worker), checkBatch(op, "n", n), checkTTL(op, "ttl", ttl)); err != nil {
		return nil, err
	}
	if _, err := ResolveClaimOptions(op, opts); err != nil {
		return nil, err
	}
	return f.b.ClaimDue(ctx, worker, n, ttl, opts...)
}

// Fire implements Timers.
func (f *Front) Fire(ctx context.Context, intentHash string, c vocab.Claim) (uint64, bool, error) {
	const op = "fire"
	if err := first(done(ctx, op), CheckID(op, "intentHash", intentHash), checkClaim(op, c)); err != nil {
		return 0, false, err
	}
	return f.b.Fire(ctx, intentHash, c)
}

// FireHeld implements Timers.
func (f *Front) FireHeld(ctx context.Context, world string, epoch uint64, intentHash string) (HeldFiring, error) {
	const op = "fire_held"
	if err := first(done(ctx, op), checkFireHeld(op, world, epoch, intentHash)); err != nil {
		return HeldFiring{}, err
	}
	return f.b.FireHeld(ctx, world, epoch, intentHash)
}

// ReapTimers implements Timers.
func (f *Front) ReapTimers(ctx context.Context) (int, error) {
	if err := done(ctx, "reap_timers"); err != nil {
		return 0, err
	}
	return f.b.ReapTimers(ctx)
}

// NextDue implements Timers.
func (f *Front) NextDue(ctx context.Context) (time.Time, bool, error) {
	if err := done(ctx, "next_due"); err != nil {
		return time.Time{}, false, err
	}
	return f.b.NextDue(ctx)
}

// ---- fabric ----

// Send implements Fabric: the destination, the message id and the payload
// (the item's other fields are ignored).
func (f *Front) Send(ctx context.Context, dest, messageID string, item InboxItem) (FabricResult, error) {
	const op = "send"
	if err := first(done(ctx, op), CheckID(op, "world", dest), CheckID(op, "messageId", messageID),
		checkPayload(op, "payload", item.Payload)); err != nil {
		return FabricResult{}, err
	}
	return f.b.Send(ctx, dest, messageID, item)
}

// ---- snapshots ----

// PutSnapshot implements Snapshots.
func (f *Front) PutSnapshot(ctx context.Context, world string, epoch uint64, s Snapshot) error {
	const op = "put_snapshot"
	if err := first(done(ctx, op), checkFenced(op, world, epoch), checkSnapshot(op, s)); err != nil {
		return err
	}
	return f.b.PutSnapshot(ctx, world, epoch, s)
}

// ActiveSnapshot implements Snapshots.
func (f *Front) ActiveSnapshot(ctx context.Context, world string) (Snapshot, bool, error) {
	if err := done(ctx, "active_snapshot"); err != nil {
		return Snapshot{}, false, err
	}
	return f.b.ActiveSnapshot(ctx, world)
}

// SnapshotBelow implements Snapshots.
func (f *Front) SnapshotBelow(ctx context.Context, world string, height uint64) (Snapshot, bool, error) {
	const op = "snapshot_below"
	if err := first(done(ctx, op), CheckInt(op, "height", height)); err != nil {
		return Snapshot{}, false, err
	}
	return f.b.SnapshotBelow(ctx, world, height)
}

// Compact implements Snapshots.
func (f *Front) Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error) {
	const op = "compact"
	if err := first(done(ctx, op), checkFenced(op, world, epoch), CheckInt(op, "retain", retain)); err != nil {
		return 0, err
	}
	return f.b.Compact(ctx, world, epoch, retain)
}

// ---- worlds ----

// CreateWorld implements Worlds.
func (f *Front) CreateWorld(ctx context.Context, universe, world string, seed *Snapshot) (World, error) {
	const op = "create_world"
	if err := first(done(ctx, op), CheckID(op, "universe", universe), CheckID(op, "world", world)); err != nil {
		return World{}, err
	}
	if seed != nil {
		if err := checkSnapshot(op, *seed); err != nil {
			return World{}, err
		}
	}
	return f.b.CreateWorld(ctx, universe, world, seed)
}

// Spawn implements Worlds.
func (f *Front) Spawn(ctx context.Context, s SpawnSpec) (Spawned, error) {
	const op = "spawn"
	if err := first(done(ctx, op), CheckSpawn(op, s)); err != nil {
		return Spawned{}, err
	}
	return f.b.Spawn(ctx, s)
}

// ForkWorld implements Worlds.
func (f *Front) ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (World, error) {
	const op = "fork_world"
	if err := first(done(ctx, op), CheckID(op, "world", src), CheckInt(op, "height", height), CheckID(op, "new world", newWorld)); err != nil {
		return World{}, err
	}
	return f.b.ForkWorld(ctx, src, height, newWorld)
}

// ForkWorldFrom implements Worlds.
func (f *Front) ForkWorldFrom(ctx context.Context, src string, base Snapshot, newWorld string) (World, error) {
	const op = "fork_world_from"
	if err := first(done(ctx, op), CheckID(op, "world", src), CheckID(op, "new world", newWorld), checkSnapshot(op, base)); err != nil {
		return World{}, err
	}
	return f.b.ForkWorldFrom(ctx, src, base, newWorld)
}

// GetWorld implements Worlds.
func (f *Front) GetWorld(ctx context.Context, world string) (World, error) {
	if err := done(ctx, "get_world"); err != nil {
		return World{}, err
	}
	return f.b.GetWorld(ctx, world)
}

// ListWorlds implements Worlds ("" lists every status).
func (f *Front) ListWorlds(ctx context.Context, universe string, status WorldStatus) ([]World, error) {
	const op = "list_worlds"
	if err := done(ctx, op); err != nil {
		return nil, err
	}
	if status != "" {
		if err := CheckStatus(op, status); err != nil {
			return nil, err
		}
	}
	return f.b.ListWorlds(ctx, universe, status)
}

// SetWorldStatus implements Worlds.
func (f *Front) SetWorldStatus(ctx context.Context, world string, status WorldStatus, reason string) (World, error) {
	const op = "set_world_status"
	if err := first(done(ctx, op), CheckID(op, "world", world), CheckStatus(op, status), CheckReason(op, reason)); err != nil {
		return World{}, err
	}
	return f.b.SetWorldStatus(ctx, world, status, reason)
}

// ---- watermarks, dedupe, views ----

// GetWatermark implements Watermarks.
func (f *Front) GetWatermark(ctx context.Context, projector, stream string) (uint64, error) {
	if err := done(ctx, "get_watermark"); err != nil {
		return 0, err
	}
	return f.b.GetWatermark(ctx, projector, stream)
}

// CASWatermark implements Watermarks.
func (f *Front) CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error {
	const op = "cas_watermark"
	if err := first(done(ctx, op), CheckID(op, "projector", projector), CheckID(op, "stream", stream),
		CheckInt(op, "old", old), CheckInt(op, "next", next)); err != nil {
		return err
	}
	return f.b.CASWatermark(ctx, projector, stream, old, next)
}

// SweepDedupe implements Dedupe.
func (f *Front) SweepDedupe(ctx context.Context) (int, error) {
	if err := done(ctx, "sweep_dedupe"); err != nil {
		return 0, err
	}
	return f.b.SweepDedupe(ctx)
}

// DedupeRetention implements Dedupe.
func (f *Front) DedupeRetention() time.Duration { return f.b.DedupeRetention() }

// ListEffects implements Views.
func (f *Front) ListEffects(ctx context.Context, world string, afterSeq uint64, limit int) ([]vocab.EffectItem, error) {
	const op = "list_effects"
	if err := first(done(ctx, op), CheckID(op, "world", world), checkBatch(op, "limit", limit)); err != nil {
		return nil, err
	}
	return f.b.ListEffects(ctx, world, afterSeq, limit)
}

// ListTimers implements Views.
func (f *Front) ListTimers(ctx context.Context, world string, limit int) ([]TimerItem, error) {
	const op = "list_timers"
	if err := first(done(ctx, op), CheckID(op, "world", world), checkBatch(op, "limit", limit)); err != nil {
		return nil, err
	}
	return f.b.ListTimers(ctx, world, limit)
}

// QueueDepths implements Views.
func (f *Front) QueueDepths(ctx context.Context) (QueueDepths, error) {
	if err := done(ctx, "queue_depths"); err != nil {
		return QueueDepths{}, err
	}
	return f.b.QueueDepths(ctx)
}

// PendingEffects implements Views.
func (f *Front) PendingEffects(ctx context.Context) (map[string]int64, error) {
	if err := done(ctx, "pending_effects"); err != nil {
		return nil, err
	}
	return f.b.PendingEffects(ctx)
}

// QueryEffects implements Views.
func (f *Front) QueryEffects(ctx context.Context, q EffectFilter) ([]vocab.EffectItem, error) {
	const op = "query_effects"
	if err := first(done(ctx, op), checkEffectFilter(op, q)); err != nil {
		return nil, err
	}
	return f.b.QueryEffects(ctx, q)
}

// QueryTimers implements Views.
func (f *Front) QueryTimers(ctx context.Context, q TimerFilter) ([]TimerItem, error) {
	const op = "query_timers"
	if err := first(done(ctx, op), checkTimerFilter(op, q)); err != nil {
		return nil, err
	}
	return f.b.QueryTimers(ctx, q)
}

// PutQueue implements Queues.
func (f *Front) PutQueue(ctx context.Context, q QueueSpec) error {
	const op = "put_queue"
	if err := first(done(ctx, op), checkQueueSpec(op, q)); err != nil {
		return err
	}
	return f.b.PutQueue(ctx, q)
}

// GetQueue implements Queues.
func (f *Front) GetQueue(ctx context.Context, name string) (QueueSpec, error) {
	const op = "get_queue"
	if err := first(done(ctx, op), CheckID(op, "queue", name)); err != nil {
		return QueueSpec{}, err
	}
	return f.b.GetQueue(ctx, name)
}

// ListQueues implements Queues.
func (f *Front) ListQueues(ctx context.Context) ([]QueueSpec, error) {
	if err := done(ctx, "list_queues"); err != nil {
		return nil, err
	}
	return f.b.ListQueues(ctx)
}

// EnqueueRun implements Queues.
func (f *Front) EnqueueRun(ctx context.Context, r QueuedRun) (QueuedRun, bool, error) {
	const op = "enqueue_run"
	if err := first(done(ctx, op), checkQueuedRun(op, r)); err != nil {
		return QueuedRun{}, false, err
	}
	r.Seq, r.EnqueuedAt, r.Worker, r.AdmittedAt = 0, time.Time{}, "", time.Time{}
	return f.b.EnqueueRun(ctx, r)
}

// AdmitRuns implements Queues.
func (f *Front) AdmitRuns(ctx context.Context, queue, worker string, max int, carries ...string) ([]QueuedRun, error) {
	const op = "admit_runs"
	if err := first(done(ctx, op), CheckID(op, "queue", queue), CheckID(op, "worker", worker), checkBatch(op, "max", max)); err != nil {
		return nil, err
	}
	if max == 0 {
		return nil, nil
	}
	return f.b.AdmitRuns(ctx, queue, worker, max, carries...)
}

// ListQueuedRuns implements Queues.
func (f *Front) ListQueuedRuns(ctx context.Context, queue string) ([]QueuedRun, error) {
	const op = "list_queued_runs"
	if err := first(done(ctx, op), CheckID(op, "queue", queue)); err != nil {
		return nil, err
	}
	return f.b.ListQueuedRuns(ctx, queue)
}

// QueueRunOf implements Queues.
func (f *Front) QueueRunOf(ctx context.Context, run string) (QueuedRun, bool, error) {
	const op = "queue_run_of"
	if err := first(done(ctx, op), CheckID(op, "run", run)); err != nil {
		return QueuedRun{}, false, err
	}
	return f.b.QueueRunOf(ctx, run)
}

// RecentAdmissions implements Queues.
func (f *Front) RecentAdmissions(ctx context.Context, queue string) (int, error) {
	const op = "recent_admissions"
	if err := first(done(ctx, op), CheckID(op, "queue", queue)); err != nil {
		return 0, err
	}
	return f.b.RecentAdmissions(ctx, queue)
}
