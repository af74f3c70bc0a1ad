package store

import (
	"context"
	"time"
)

// Backend is what a storage backend implements: the Store's methods but
// the single-item forms that are a batch of one (Acquire, Renew, Release,
// Complete), which the Front answers through their batch forms. The Front
// calls a Backend only with input it has validated (ids, keys, payloads,
// sizes, times, options), so a backend keeps storage only: it reads the
// rows, asks store/internal/contract for the contract's decisions, and
// writes.
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
	ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]WorkerWorld, error)

	Workers
	Inbox

	Publish(ctx context.Context, world string, epoch uint64, intents []Intent) (int, error)
	Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration) ([]EffectItem, error)
	CompleteMany(ctx context.Context, cs []Completion) ([]CompleteResult, error)
	Resolve(ctx context.Context, intentHash string, r Receipt, reason string) (inboxSeq uint64, dup bool, err error)
	ReapEffects(ctx context.Context) (int, error)
	ReleaseEffect(ctx context.Context, intentHash string, c Claim) error
	RetryEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error)
	EffectStatus(ctx context.Context, intentHash string) (EffectStatus, error)

	Timers
	Fabric
	Snapshots
	Worlds
	Watermarks
	Dedupe
	Views
}

// Front is the one front over every backend, as database/sql stands over
// its drivers: it validates each call once, answers the single-item forms
// through the batch forms, and hands the backend only what passed.
//
// (Skeleton: the validation moves here from the backends.)
type Front struct {
	Backend
}

// New puts the front over a backend.
func New(b Backend) *Front { return &Front{Backend: b} }

// Acquire is AcquireLeases of one world.
func (f *Front) Acquire(ctx context.Context, world, worker string, ttl time.Duration, opts ...AcquireOption) (Lease, error) {
	rs, err := f.AcquireLeases(ctx, worker, []string{world}, ttl, opts...)
	if err != nil {
		return Lease{}, err
	}
	return rs[0].Lease, rs[0].Err
}

// Renew is RenewLeases of one lease.
func (f *Front) Renew(ctx context.Context, world, worker string, epoch uint64, ttl time.Duration) (Lease, error) {
	rs, err := f.RenewLeases(ctx, worker, []LeaseRef{{World: world, Epoch: epoch}}, ttl)
	if err != nil {
		return Lease{}, err
	}
	return rs[0].Lease, rs[0].Err
}

// Release is ReleaseLeases of one lease.
func (f *Front) Release(ctx context.Context, world, worker string, epoch uint64) error {
	rs, err := f.ReleaseLeases(ctx, worker, []LeaseRef{{World: world, Epoch: epoch}})
	if err != nil {
		return err
	}
	return rs[0].Err
}

// Complete is CompleteMany of one completion.
func (f *Front) Complete(ctx context.Context, intentHash string, c Claim, r Receipt) (uint64, bool, error) {
	rs, err := f.CompleteMany(ctx, []Completion{{IntentHash: intentHash, Claim: c, Receipt: r}})
	if err != nil {
		return 0, false, err
	}
	return rs[0].InboxSeq, rs[0].Dup, rs[0].Err
}

var _ Store = (*Front)(nil)
