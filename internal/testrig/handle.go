package testrig

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// ErrCrashed is what a crashed Handle answers.
var ErrCrashed = errors.New("the process of this store handle crashed")

// Handle is one process's store handle over the rig's durable state: a
// fault hook runs before each of its operations (with memstore's op
// names; a single-item form is named as the batch form the store's front
// answers it with), and Crash kills it as memstore's Crash does: every later call
// fails and its watches end. Operations the plane's processes do not use
// pass straight through.
type Handle struct {
	store.Store
	hook func(op string) error

	mu      sync.Mutex
	crashed bool
	stops   []func()
}

// NewHandle returns a process's handle over st with hook (nil: none).
func NewHandle(st store.Store, hook func(op string) error) *Handle {
	return &Handle{Store: st, hook: hook}
}

// Crash kills the handle.
func (h *Handle) Crash() {
	h.mu.Lock()
	h.crashed = true
	stops := h.stops
	h.stops = nil
	h.mu.Unlock()
	for _, s := range stops {
		s()
	}
}

func (h *Handle) begin(op string) error {
	if h.hook != nil {
		if err := h.hook(op); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.crashed {
		return ErrCrashed
	}
	return nil
}

func (h *Handle) Watch(ctx context.Context, w store.Waker, topics ...string) (func(), error) {
	if err := h.begin("watch"); err != nil {
		return nil, err
	}
	stop, err := h.Store.Watch(ctx, w, topics...)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.crashed {
		stop()
		return nil, ErrCrashed
	}
	h.stops = append(h.stops, stop)
	return stop, nil
}

func (h *Handle) Commit(ctx context.Context, world string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	if err := h.begin("commit"); err != nil {
		return store.CommitResult{}, err
	}
	return h.Store.Commit(ctx, world, epoch, b)
}

func (h *Handle) Now(ctx context.Context) (time.Time, error) {
	if err := h.begin("now"); err != nil {
		return time.Time{}, err
	}
	return h.Store.Now(ctx)
}

func (h *Handle) Read(ctx context.Context, stream string, after uint64, limit int) ([]store.Record, error) {
	if err := h.begin("read"); err != nil {
		return nil, err
	}
	return h.Store.Read(ctx, stream, after, limit)
}

func (h *Handle) Floor(ctx context.Context, stream string) (uint64, error) {
	if err := h.begin("floor"); err != nil {
		return 0, err
	}
	return h.Store.Floor(ctx, stream)
}

func (h *Handle) Head(ctx context.Context, stream string) (uint64, error) {
	if err := h.begin("head"); err != nil {
		return 0, err
	}
	return h.Store.Head(ctx, stream)
}

func (h *Handle) Acquire(ctx context.Context, world, worker string, ttl time.Duration, opts ...store.AcquireOption) (store.Lease, error) {
	if err := h.begin("acquire_leases"); err != nil {
		return store.Lease{}, err
	}
	return h.Store.Acquire(ctx, world, worker, ttl, opts...)
}

func (h *Handle) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...store.AcquireOption) ([]store.AcquireResult, error) {
	if err := h.begin("acquire_leases"); err != nil {
		return nil, err
	}
	return h.Store.AcquireLeases(ctx, worker, worlds, ttl, opts...)
}

func (h *Handle) RenewLeases(ctx context.Context, worker string, refs []store.LeaseRef, ttl time.Duration) ([]store.LeaseResult, error) {
	if err := h.begin("renew_leases"); err != nil {
		return nil, err
	}
	return h.Store.RenewLeases(ctx, worker, refs, ttl)
}

func (h *Handle) Release(ctx context.Context, world, worker string, epoch uint64) error {
	if err := h.begin("release_leases"); err != nil {
		return err
	}
	return h.Store.Release(ctx, world, worker, epoch)
}

func (h *Handle) ReleaseLeases(ctx context.Context, worker string, refs []store.LeaseRef) ([]store.LeaseResult, error) {
	if err := h.begin("release_leases"); err != nil {
		return nil, err
	}
	return h.Store.ReleaseLeases(ctx, worker, refs)
}

func (h *Handle) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]store.WorkerWorld, error) {
	if err := h.begin("list_worker_worlds"); err != nil {
		return nil, err
	}
	return h.Store.ListWorkerWorlds(ctx, worker, after, limit)
}

func (h *Handle) Heartbeat(ctx context.Context, worker string, capacity int, opts ...store.HeartbeatOption) (store.WorkerInfo, error) {
	if err := h.begin("heartbeat"); err != nil {
		return store.WorkerInfo{}, err
	}
	return h.Store.Heartbeat(ctx, worker, capacity, opts...)
}

func (h *Handle) RetireWorker(ctx context.Context, worker, incarnation string) (int, error) {
	if err := h.begin("retire_worker"); err != nil {
		return 0, err
	}
	return h.Store.RetireWorker(ctx, worker, incarnation)
}

func (h *Handle) ReapOrphans(ctx context.Context) (int, error) {
	if err := h.begin("reap_orphans"); err != nil {
		return 0, err
	}
	return h.Store.ReapOrphans(ctx)
}

func (h *Handle) SetDraining(ctx context.Context, worker string, draining bool) (store.WorkerInfo, error) {
	if err := h.begin("set_draining"); err != nil {
		return store.WorkerInfo{}, err
	}
	return h.Store.SetDraining(ctx, worker, draining)
}

func (h *Handle) Enqueue(ctx context.Context, world string, item store.InboxItem) (uint64, bool, error) {
	if err := h.begin("enqueue"); err != nil {
		return 0, false, err
	}
	return h.Store.Enqueue(ctx, world, item)
}

func (h *Handle) ReadInbox(ctx context.Context, world string, after uint64, limit int) ([]store.InboxItem, error) {
	if err := h.begin("read_inbox"); err != nil {
		return nil, err
	}
	return h.Store.ReadInbox(ctx, world, after, limit)
}

func (h *Handle) Cursor(ctx context.Context, world string) (uint64, error) {
	if err := h.begin("cursor"); err != nil {
		return 0, err
	}
	return h.Store.Cursor(ctx, world)
}

func (h *Handle) ActiveSnapshot(ctx context.Context, world string) (store.Snapshot, bool, error) {
	if err := h.begin("active_snapshot"); err != nil {
		return store.Snapshot{}, false, err
	}
	return h.Store.ActiveSnapshot(ctx, world)
}

func (h *Handle) SnapshotBelow(ctx context.Context, world string, height uint64) (store.Snapshot, bool, error) {
	if err := h.begin("snapshot_below"); err != nil {
		return store.Snapshot{}, false, err
	}
	return h.Store.SnapshotBelow(ctx, world, height)
}

func (h *Handle) GetWorld(ctx context.Context, world string) (store.World, error) {
	if err := h.begin("get_world"); err != nil {
		return store.World{}, err
	}
	return h.Store.GetWorld(ctx, world)
}

func (h *Handle) Claim(ctx context.Context, worker string, kinds []string, n int, ttl time.Duration, opts ...store.ClaimOption) ([]vocab.EffectItem, error) {
	if err := h.begin("claim"); err != nil {
		return nil, err
	}
	return h.Store.Claim(ctx, worker, kinds, n, ttl, opts...)
}

func (h *Handle) Complete(ctx context.Context, hash string, c vocab.Claim, rc vocab.Receipt) (uint64, bool, error) {
	if err := h.begin("complete_many"); err != nil {
		return 0, false, err
	}
	return h.Store.Complete(ctx, hash, c, rc)
}

func (h *Handle) ReleaseEffect(ctx context.Context, hash string, c vocab.Claim) error {
	if err := h.begin("release_effect"); err != nil {
		return err
	}
	return h.Store.ReleaseEffect(ctx, hash, c)
}

func (h *Handle) RetryLater(ctx context.Context, hash string, c vocab.Claim, delay time.Duration, lastError string) error {
	if err := h.begin("retry_later"); err != nil {
		return err
	}
	return h.Store.RetryLater(ctx, hash, c, delay, lastError)
}

func (h *Handle) NextRetry(ctx context.Context, kinds []string) (time.Duration, bool, error) {
	if err := h.begin("next_retry"); err != nil {
		return 0, false, err
	}
	return h.Store.NextRetry(ctx, kinds)
}

func (h *Handle) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...store.ClaimOption) ([]store.TimerItem, error) {
	if err := h.begin("claim_due"); err != nil {
		return nil, err
	}
	return h.Store.ClaimDue(ctx, worker, n, ttl, opts...)
}

func (h *Handle) Fire(ctx context.Context, hash string, c vocab.Claim) (uint64, bool, error) {
	if err := h.begin("fire"); err != nil {
		return 0, false, err
	}
	return h.Store.Fire(ctx, hash, c)
}

func (h *Handle) FireHeld(ctx context.Context, world string, epoch uint64, hash string) (store.HeldFiring, error) {
	if err := h.begin("fire_held"); err != nil {
		return store.HeldFiring{}, err
	}
	return h.Store.FireHeld(ctx, world, epoch, hash)
}

func (h *Handle) ListTimers(ctx context.Context, world string, limit int) ([]store.TimerItem, error) {
	if err := h.begin("list_timers"); err != nil {
		return nil, err
	}
	return h.Store.ListTimers(ctx, world, limit)
}

func (h *Handle) Send(ctx context.Context, dest, messageID string, item store.InboxItem) (store.FabricResult, error) {
	if err := h.begin("send"); err != nil {
		return store.FabricResult{}, err
	}
	return h.Store.Send(ctx, dest, messageID, item)
}

func (h *Handle) GetAssignment(ctx context.Context, world string) (store.Assignment, bool, error) {
	if err := h.begin("get_assignment"); err != nil {
		return store.Assignment{}, false, err
	}
	return h.Store.GetAssignment(ctx, world)
}
