package store

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/vocab"
)

// recorder is a Backend that records every call it receives (its method)
// and answers with the
// canned errors set on it: the Front's only witness below the line.
type recorder struct {
	calls []string
	// callErr is every call's own error; itemErr every item's error in a
	// batch answer.
	callErr, itemErr error
	// completions is what CompleteMany received.
	completions []vocab.Completion
}

func (r *recorder) rec(ctx context.Context, method string) error {
	r.calls = append(r.calls, method)
	return r.callErr
}

func (r *recorder) Commit(ctx context.Context, world string, epoch uint64, b CommitBatch) (CommitResult, error) {
	return CommitResult{}, r.rec(ctx, "Commit")
}
func (r *recorder) Watch(ctx context.Context, w Waker, topics ...string) (func(), error) {
	return func() {}, r.rec(ctx, "Watch")
}
func (r *recorder) Now(ctx context.Context) (time.Time, error) { return time.Time{}, r.rec(ctx, "Now") }
func (r *recorder) Close() error                               { return r.rec(context.Background(), "Close") }
func (r *recorder) Append(ctx context.Context, stream string, events []Record, opts AppendOptions) ([]Appended, error) {
	return nil, r.rec(ctx, "Append")
}
func (r *recorder) Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]Record, error) {
	return nil, r.rec(ctx, "Read")
}
func (r *recorder) Head(ctx context.Context, stream string) (uint64, error) {
	return 0, r.rec(ctx, "Head")
}
func (r *recorder) Floor(ctx context.Context, stream string) (uint64, error) {
	return 0, r.rec(ctx, "Floor")
}
func (r *recorder) ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]Record, error) {
	return nil, r.rec(ctx, "ReadWindow")
}
func (r *recorder) AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...AcquireOption) ([]AcquireResult, error) {
	if err := r.rec(ctx, "AcquireLeases"); err != nil {
		return nil, err
	}
	out := make([]AcquireResult, len(worlds))
	for i, w := range worlds {
		out[i] = AcquireResult{World: w, Lease: Lease{World: w, Holder: worker, Epoch: 7}, Err: r.itemErr}
	}
	return out, nil
}
func (r *recorder) leaseResults(refs []LeaseRef, worker string) []LeaseResult {
	out := make([]LeaseResult, len(refs))
	for i, ref := range refs {
		out[i] = LeaseResult{World: ref.World, Lease: Lease{World: ref.World, Holder: worker, Epoch: ref.Epoch}, Err: r.itemErr}
	}
	return out
}
func (r *recorder) RenewLeases(ctx context.Context, worker string, refs []LeaseRef, ttl time.Duration) ([]LeaseResult, error) {
	if err := r.rec(ctx, "RenewLeases"); err != nil {
		return nil, err
	}
	return r.leaseResults(refs, worker), nil
}
func (r *recorder) ReleaseLeases(ctx context.Context, worker string, refs []LeaseRef) ([]LeaseResult, error) {
	if err := r.rec(ctx, "ReleaseLeases"); err != nil {
		return nil, err
	}
	return r.leaseResults(refs, worker), nil
}
func (r *recorder) GetLease(ctx context.Context, world string) (Lease, bool, error) {
	return Lease{}, false, r.rec(ctx, "GetLease")
}
func (r *recorder) Assign(ctx context.Context, world string, a Assignment, by *Fence) error {
	return r.rec(ctx, "Assign")
}
func (r *recorder) Unassign(ctx context.Context, world string, by *Fence) error {
	return r.rec(ctx, "Unassign")
}
func (r *recorder) GetAssignment(ctx context.Context, world string) (Assignment, bool, error) {
	return Assignment{}, false, r.rec(ctx, "GetAssignment")
}
func (r *recorder) CompareAndAssign(ctx context.Context, world string, prev, next *Assignment, by *Fence) error {
	return r.rec(ctx, "CompareAndAssign")
}
func (r *recorder) ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]WorkerWorld, error) {
	return nil, r.rec(ctx, "ListWorkerWorlds")
}
func (r *recorder) Heartbeat(ctx context.Context, worker string, capacity int, opts ...HeartbeatOption) (WorkerInfo, error) {
	return WorkerInfo{}, r.rec(ctx, "Heartbeat")
}
func (r *recorder) RetireWorker(ctx context.Context, worker, incarnation string) (int, error) {
	return 0, r.rec(ctx, "RetireWorker")
}
func (r *recorder) ReapOrphans(ctx context.Context) (int, error) { return 0, r.rec(ctx, "ReapOrphans") }
func (r *recorder) SetDraining(ctx context.Context, worker string, draining bool) (WorkerInfo, error) {
	return WorkerInfo{}, r.rec(ctx, "SetDraining")
}
func (r *recorder) ListWorkers(ctx context.Context) ([]WorkerInfo, error) {
	return nil, r.rec(ctx, "ListWorkers")
}
func (r *recorder) Enqueue(ctx context.Context, world string, item InboxItem) (uint64, bool, error) {
	return 0, false, r.rec(ctx, "Enqueue")
}
func (r *recorder) ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]InboxItem, error) {
	return nil, r.rec(ctx, "ReadInbox")
}
func (r *recorder) Cursor(ctx context.Context, world string) (uint64, error) {
	return 0, r.rec(ctx, "Cursor")
}
func (r *recorder) DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []Record) ([]Appended, error) {
	return nil, r.rec(ctx, "DrainToJournal")
}
func (r *recorder) Publish(ctx context.Context, world string, epoch uint64, intents []vocab.Intent) (int, error) {
	return 0, r.rec(ctx, "Publish")
}
func (r *recorder) Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...ClaimOption) ([]vocab.EffectItem, error) {
	return nil, r.rec(ctx, "Claim")
}

// CompleteMany answers each completion with an inbox seq read from its
// intent hash's length, so a test can tell which answer went where.
func (r *recorder) CompleteMany(ctx context.Context, cs []vocab.Completion) ([]CompleteResult, error) {
	r.completions = slices.Clone(cs)
	if err := r.rec(ctx, "CompleteMany"); err != nil {
		return nil, err
	}
	out := make([]CompleteResult, len(cs))
	for i, c := range cs {
		out[i] = CompleteResult{InboxSeq: uint64(len(c.IntentHash)), Err: r.itemErr}
	}
	return out, nil
}
func (r *recorder) Resolve(ctx context.Context, intentHash string, rc vocab.Receipt, reason string) (uint64, bool, error) {
	return 0, false, r.rec(ctx, "Resolve")
}
func (r *recorder) ReapEffects(ctx context.Context) (int, error) { return 0, r.rec(ctx, "ReapEffects") }
func (r *recorder) ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error {
	return r.rec(ctx, "ReleaseEffect")
}
func (r *recorder) RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error {
	return r.rec(ctx, "RetryLater")
}
func (r *recorder) NextRetry(ctx context.Context, kinds []string) (time.Duration, bool, error) {
	return 0, false, r.rec(ctx, "NextRetry")
}
func (r *recorder) RetryEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	return EffectStatus{}, r.rec(ctx, "RetryEffect")
}
func (r *recorder) EffectStatus(ctx context.Context, intentHash string) (EffectStatus, error) {
	return EffectStatus{}, r.rec(ctx, "EffectStatus")
}
func (r *recorder) HoldEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	return EffectStatus{}, r.rec(ctx, "HoldEffect")
}
func (r *recorder) ReleaseHeld(ctx context.Context, intentHash, reason string) (EffectStatus, error) {
	return EffectStatus{}, r.rec(ctx, "ReleaseHeld")
}
func (r *recorder) HoldOpenEffects(ctx context.Context, reason string) (int, error) {
	return 0, r.rec(ctx, "HoldOpenEffects")
}
func (r *recorder) ReleaseAllHeld(ctx context.Context, reason string) (int, error) {
	return 0, r.rec(ctx, "ReleaseAllHeld")
}
func (r *recorder) Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error {
	return r.rec(ctx, "Schedule")
}
func (r *recorder) CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error {
	return r.rec(ctx, "CancelTimer")
}
func (r *recorder) ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...ClaimOption) ([]TimerItem, error) {
	return nil, r.rec(ctx, "ClaimDue")
}
func (r *recorder) Fire(ctx context.Context, intentHash string, c vocab.Claim) (uint64, bool, error) {
	return 0, false, r.rec(ctx, "Fire")
}
func (r *recorder) FireHeld(ctx context.Context, world string, epoch uint64, intentHash string) (HeldFiring, error) {
	return HeldFiring{}, r.rec(ctx, "FireHeld")
}
func (r *recorder) ReapTimers(ctx context.Context) (int, error) { return 0, r.rec(ctx, "ReapTimers") }
func (r *recorder) NextDue(ctx context.Context) (time.Time, bool, error) {
	return time.Time{}, false, r.rec(ctx, "NextDue")
}
func (r *recorder) Send(ctx context.Context, dest, messageID string, item InboxItem) (FabricResult, error) {
	return FabricResult{}, r.rec(ctx, "Send")
}
func (r *recorder) PutSnapshot(ctx context.Context, world string, epoch uint64, s Snapshot) error {
	return r.rec(ctx, "PutSnapshot")
}
func (r *recorder) ActiveSnapshot(ctx context.Context, world string) (Snapshot, bool, error) {
	return Snapshot{}, false, r.rec(ctx, "ActiveSnapshot")
}
func (r *recorder) SnapshotBelow(ctx context.Context, world string, height uint64) (Snapshot, bool, error) {
	return Snapshot{}, false, r.rec(ctx, "SnapshotBelow")
}
func (r *recorder) Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error) {
	return 0, r.rec(ctx, "Compact")
}
func (r *recorder) CreateWorld(ctx context.Context, universe, world string, seed *Snapshot) (World, error) {
	return World{}, r.rec(ctx, "CreateWorld")
}
func (r *recorder) Spawn(ctx context.Context, s SpawnSpec) (Spawned, error) {
	return Spawned{}, r.rec(ctx, "Spawn")
}
func (r *recorder) ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (World, error) {
	return World{}, r.rec(ctx, "ForkWorld")
}

func (r *recorder) ForkWorldFrom(ctx context.Context, src string, base Snapshot, newWorld string) (World, error) {
	return World{}, r.rec(ctx, "ForkWorldFrom")
}
func (r *recorder) GetWorld(ctx context.Context, world string) (World, error) {
	return World{}, r.rec(ctx, "GetWorld")
}
func (r *recorder) ListWorlds(ctx context.Context, universe string, status WorldStatus) ([]World, error) {
	return nil, r.rec(ctx, "ListWorlds")
}
func (r *recorder) SetWorldStatus(ctx context.Context, world string, status WorldStatus, reason string) (World, error) {
	return World{}, r.rec(ctx, "SetWorldStatus")
}
func (r *recorder) GetWatermark(ctx context.Context, projector, stream string) (uint64, error) {
	return 0, r.rec(ctx, "GetWatermark")
}
func (r *recorder) CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error {
	return r.rec(ctx, "CASWatermark")
}
func (r *recorder) SweepDedupe(ctx context.Context) (int, error) { return 0, r.rec(ctx, "SweepDedupe") }
func (r *recorder) DedupeRetention() time.Duration {
	r.calls = append(r.calls, "DedupeRetention")
	return time.Hour
}
func (r *recorder) ListEffects(ctx context.Context, world string, afterSeq uint64, limit int) ([]vocab.EffectItem, error) {
	return nil, r.rec(ctx, "ListEffects")
}
func (r *recorder) ListTimers(ctx context.Context, world string, limit int) ([]TimerItem, error) {
	return nil, r.rec(ctx, "ListTimers")
}
func (r *recorder) QueryEffects(ctx context.Context, f EffectFilter) ([]vocab.EffectItem, error) {
	return nil, r.rec(ctx, "QueryEffects")
}
func (r *recorder) QueryTimers(ctx context.Context, f TimerFilter) ([]TimerItem, error) {
	return nil, r.rec(ctx, "QueryTimers")
}
func (r *recorder) QueueDepths(ctx context.Context) (QueueDepths, error) {
	return QueueDepths{}, r.rec(ctx, "QueueDepths")
}
func (r *recorder) PutQueue(ctx context.Context, q QueueSpec) error { return r.rec(ctx, "PutQueue") }
func (r *recorder) GetQueue(ctx context.Context, name string) (QueueSpec, error) {
	return QueueSpec{}, r.rec(ctx, "GetQueue")
}
func (r *recorder) ListQueues(ctx context.Context) ([]QueueSpec, error) {
	return nil, r.rec(ctx, "ListQueues")
}
func (r *recorder) EnqueueRun(ctx context.Context, q QueuedRun) (QueuedRun, bool, error) {
	return q, false, r.rec(ctx, "EnqueueRun")
}
func (r *recorder) AdmitRuns(ctx context.Context, queue, worker string, max int, carries ...string) ([]QueuedRun, error) {
	return nil, r.rec(ctx, "AdmitRuns")
}
func (r *recorder) ListQueuedRuns(ctx context.Context, queue string) ([]QueuedRun, error) {
	return nil, r.rec(ctx, "ListQueuedRuns")
}
func (r *recorder) QueueRunOf(ctx context.Context, run string) (QueuedRun, bool, error) {
	return QueuedRun{}, false, r.rec(ctx, "QueueRunOf")
}
func (r *recorder) RecentAdmissions(ctx context.Context, queue string) (int, error) {
	return 0, r.rec(ctx, "RecentAdmissions")
}
func (r *recorder) PendingEffects(ctx context.Context) (map[string]int64, error) {
	return nil, r.rec(ctx, "PendingEffects")
}

func (r *recorder) CreateSchedule(ctx context.Context, s ScheduleRecord) (ScheduleRecord, error) {
	return ScheduleRecord{}, r.rec(ctx, "CreateSchedule")
}
func (r *recorder) GetSchedule(ctx context.Context, id string) (ScheduleRecord, error) {
	return ScheduleRecord{}, r.rec(ctx, "GetSchedule")
}
func (r *recorder) ListSchedules(ctx context.Context, after string, limit int) ([]ScheduleRecord, error) {
	return nil, r.rec(ctx, "ListSchedules")
}
func (r *recorder) UpdateSchedule(ctx context.Context, s ScheduleRecord) (ScheduleRecord, error) {
	return ScheduleRecord{}, r.rec(ctx, "UpdateSchedule")
}
func (r *recorder) DeleteSchedule(ctx context.Context, id string) error {
	return r.rec(ctx, "DeleteSchedule")
}
func (r *recorder) DueSchedules(ctx context.Context, limit int) ([]ScheduleRecord, time.Time, error) {
	return nil, time.Time{}, r.rec(ctx, "DueSchedules")
}
func (r *recorder) NextScheduleDue(ctx context.Context) (time.Time, time.Time, bool, error) {
	return time.Time{}, time.Time{}, false, r.rec(ctx, "NextScheduleDue")
}

var _ Backend = (*recorder)(nil)

var (
	fbg       = context.Background()
	fclaim    = vocab.Claim{Worker: "ad", Attempt: 1}
	freceipt  = vocab.Receipt{Status: vocab.ReceiptOK}
	fsnap     = Snapshot{Height: 1, StateHash: "h"}
	fdue      = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	huge      = uint64(math.MaxInt64) + 1
	badID     = "w\x00x"
	longKey   = strings.Repeat("k", MaxKeyBytes+1)
	longText  = strings.Repeat("r", MaxReasonBytes+1)
	bigBytes  = make([]byte, MaxPayloadBytes+1)
	tooMany   = MaxBatch + 1
	noopWaker = NewSignal()
)

// frontCall is one call through the Front: the op its errors must name,
// and the call.
type frontCall struct {
	name string
	op   string
	do   func(f *Front) error
}

// invalidCalls is one or more invalid calls of every method of the Store
// that takes an argument the front checks, across every protocol, each
// with every other argument valid.
func invalidCalls() []frontCall {
	badRec := Record{EventID: "e", IdempotencyKey: "k", EventType: "T", LogicalAttemptID: 0, EngineAttemptID: 1}
	refs := func(n int) []LeaseRef { return make([]LeaseRef, n) }
	return []frontCall{
		{"Commit world", "commit", func(f *Front) error { _, err := f.Commit(fbg, "", 1, CommitBatch{}); return err }},
		{"Commit epoch", "commit", func(f *Front) error { _, err := f.Commit(fbg, "w", huge, CommitBatch{}); return err }},
		{"Commit entry", "commit", func(f *Front) error {
			_, err := f.Commit(fbg, "w", 1, CommitBatch{Entries: []Record{badRec}})
			return err
		}},
		{"Commit cursor back", "commit", func(f *Front) error {
			_, err := f.Commit(fbg, "w", 1, CommitBatch{ExpectedCursor: 2, NewCursor: 1})
			return err
		}},
		{"Commit status", "commit", func(f *Front) error {
			_, err := f.Commit(fbg, "w", 1, CommitBatch{Status: &StatusChange{Status: WorldActive}})
			return err
		}},
		{"DrainToJournal world", "drain", func(f *Front) error { _, err := f.DrainToJournal(fbg, badID, 1, 0, 0, 0, nil); return err }},
		{"DrainToJournal entry", "drain", func(f *Front) error {
			_, err := f.DrainToJournal(fbg, "w", 1, 0, 0, 1, []Record{badRec})
			return err
		}},
		{"Watch no topic", "watch", func(f *Front) error { _, err := f.Watch(fbg, noopWaker); return err }},
		{"Watch bad topic", "watch", func(f *Front) error { _, err := f.Watch(fbg, noopWaker, TopicEffects, "bogus"); return err }},
		{"Watch nil waker", "watch", func(f *Front) error { _, err := f.Watch(fbg, nil, TopicEffects); return err }},
		{"Append stream", "append", func(f *Front) error { _, err := f.Append(fbg, "", nil, AppendOptions{}); return err }},
		{"Append record", "append", func(f *Front) error { _, err := f.Append(fbg, "s", []Record{badRec}, AppendOptions{}); return err }},
		{"Append fence world", "append", func(f *Front) error {
			_, err := f.Append(fbg, "s", nil, AppendOptions{Fence: &Fence{World: badID}})
			return err
		}},
		{"Append expected head", "append", func(f *Front) error {
			_, err := f.Append(fbg, "s", nil, AppendOptions{ExpectedHead: Head(huge)})
			return err
		}},
		{"Append too many", "append", func(f *Front) error {
			_, err := f.Append(fbg, "s", make([]Record, tooMany), AppendOptions{})
			return err
		}},
		{"Acquire world", "acquire", func(f *Front) error { _, err := f.Acquire(fbg, "", "A", time.Second); return err }},
		{"Acquire ttl", "acquire", func(f *Front) error { _, err := f.Acquire(fbg, "w", "A", 0); return err }},
		{"Acquire incarnation", "acquire", func(f *Front) error {
			_, err := f.Acquire(fbg, "w", "A", time.Second, WithIncarnation(badID))
			return err
		}},
		{"AcquireLeases worker", "acquire_leases", func(f *Front) error {
			_, err := f.AcquireLeases(fbg, "", []string{"w"}, time.Second)
			return err
		}},
		{"AcquireLeases too many", "acquire_leases", func(f *Front) error {
			_, err := f.AcquireLeases(fbg, "A", make([]string, tooMany), time.Second)
			return err
		}},
		{"AcquireLeases incarnation", "acquire_leases", func(f *Front) error {
			_, err := f.AcquireLeases(fbg, "A", []string{"w"}, time.Second, WithIncarnation(longText))
			return err
		}},
		{"Renew epoch", "renew", func(f *Front) error { _, err := f.Renew(fbg, "w", "A", huge, time.Second); return err }},
		{"Renew ttl", "renew", func(f *Front) error { _, err := f.Renew(fbg, "w", "A", 1, MaxTTL+1); return err }},
		{"RenewLeases ref", "renew_leases", func(f *Front) error {
			_, err := f.RenewLeases(fbg, "A", []LeaseRef{{World: badID, Epoch: 1}}, time.Second)
			return err
		}},
		{"RenewLeases too many", "renew_leases", func(f *Front) error {
			_, err := f.RenewLeases(fbg, "A", refs(tooMany), time.Second)
			return err
		}},
		{"Release worker", "release", func(f *Front) error { return f.Release(fbg, "w", "", 1) }},
		{"ReleaseLeases ref epoch", "release_leases", func(f *Front) error {
			_, err := f.ReleaseLeases(fbg, "A", []LeaseRef{{World: "w", Epoch: huge}})
			return err
		}},
		{"Assign world", "assign", func(f *Front) error { return f.Assign(fbg, "", Assignment{}, nil) }},
		{"Assign desired worker", "assign", func(f *Front) error { return f.Assign(fbg, "w", Assignment{DesiredWorker: badID}, nil) }},
		{"Assign reason", "assign", func(f *Front) error { return f.Assign(fbg, "w", Assignment{Reason: longText}, nil) }},
		{"Assign fence", "assign", func(f *Front) error { return f.Assign(fbg, "w", Assignment{}, &Fence{World: ""}) }},
		{"Unassign fence", "unassign", func(f *Front) error { return f.Unassign(fbg, "w", &Fence{World: badID}) }},
		{"CompareAndAssign world", "compare_and_assign", func(f *Front) error { return f.CompareAndAssign(fbg, "", nil, nil, nil) }},
		{"CompareAndAssign desired worker", "compare_and_assign", func(f *Front) error {
			return f.CompareAndAssign(fbg, "w", nil, &Assignment{DesiredWorker: badID}, nil)
		}},
		{"CompareAndAssign reason", "compare_and_assign", func(f *Front) error {
			return f.CompareAndAssign(fbg, "w", nil, &Assignment{Reason: longText}, nil)
		}},
		{"CompareAndAssign fence", "compare_and_assign", func(f *Front) error {
			return f.CompareAndAssign(fbg, "w", nil, &Assignment{}, &Fence{World: ""})
		}},
		{"ListWorkerWorlds after", "list_worker_worlds", func(f *Front) error {
			_, err := f.ListWorkerWorlds(fbg, "A", badID, 1)
			return err
		}},
		{"ListWorkerWorlds limit", "list_worker_worlds", func(f *Front) error {
			_, err := f.ListWorkerWorlds(fbg, "A", "", -1)
			return err
		}},
		{"Heartbeat capacity", "heartbeat", func(f *Front) error { _, err := f.Heartbeat(fbg, "A", -1); return err }},
		{"Heartbeat liveness TTL", "heartbeat", func(f *Front) error { _, err := f.Heartbeat(fbg, "A", 1, AliveAs("i", 0)); return err }},
		{"RetireWorker worker", "retire_worker", func(f *Front) error { _, err := f.RetireWorker(fbg, "", "i"); return err }},
		{"Claim incarnation without node", "claim", func(f *Front) error {
			_, err := f.Claim(fbg, "ad", []string{"k"}, 1, time.Second, ClaimFor("", "i"))
			return err
		}},
		{"ClaimDue node", "claim_due", func(f *Front) error {
			_, err := f.ClaimDue(fbg, "tw", 1, time.Second, ClaimFor(strings.Repeat("n", MaxIDBytes+1), ""))
			return err
		}},
		{"SetDraining worker", "set_draining", func(f *Front) error { _, err := f.SetDraining(fbg, "", true); return err }},
		{"Enqueue world", "enqueue", func(f *Front) error { _, _, err := f.Enqueue(fbg, "", InboxItem{Kind: "event"}); return err }},
		{"Enqueue store kind", "enqueue", func(f *Front) error {
			_, _, err := f.Enqueue(fbg, "w", InboxItem{Kind: vocab.KindReceipt})
			return err
		}},
		{"Enqueue key", "enqueue", func(f *Front) error {
			_, _, err := f.Enqueue(fbg, "w", InboxItem{Kind: "event", DedupeKey: longKey})
			return err
		}},
		{"Publish intent", "publish", func(f *Front) error {
			_, err := f.Publish(fbg, "w", 1, []vocab.Intent{{IntentHash: "i", Kind: ""}})
			return err
		}},
		{"Publish params", "publish", func(f *Front) error {
			_, err := f.Publish(fbg, "w", 1, []vocab.Intent{{IntentHash: "i", Kind: "k", Params: bigBytes}})
			return err
		}},
		{"Publish too many", "publish", func(f *Front) error { _, err := f.Publish(fbg, "w", 1, make([]vocab.Intent, tooMany)); return err }},
		{"Claim kinds", "claim", func(f *Front) error { _, err := f.Claim(fbg, "ad", nil, 1, time.Second); return err }},
		{"Claim n", "claim", func(f *Front) error { _, err := f.Claim(fbg, "ad", []string{"k"}, tooMany, time.Second); return err }},
		{"Claim ttl", "claim", func(f *Front) error { _, err := f.Claim(fbg, "ad", []string{"k"}, 1, -time.Second); return err }},
		{"Complete claim", "complete", func(f *Front) error {
			_, _, err := f.Complete(fbg, "i", vocab.Claim{Worker: "ad"}, freceipt)
			return err
		}},
		{"Complete receipt", "complete", func(f *Front) error {
			_, _, err := f.Complete(fbg, "i", fclaim, vocab.Receipt{Status: "maybe"})
			return err
		}},
		{"CompleteMany too many", "complete_many", func(f *Front) error {
			_, err := f.CompleteMany(fbg, make([]vocab.Completion, tooMany))
			return err
		}},
		{"Resolve reason", "resolve", func(f *Front) error { _, _, err := f.Resolve(fbg, "i", freceipt, longText); return err }},
		{"Resolve receipt", "resolve", func(f *Front) error {
			_, _, err := f.Resolve(fbg, "i", vocab.Receipt{Status: vocab.ReceiptOK, Payload: make([]byte, MaxReceiptBytes+1)}, "")
			return err
		}},
		{"ReleaseEffect claim", "release_effect", func(f *Front) error { return f.ReleaseEffect(fbg, "i", vocab.Claim{Attempt: 1}) }},
		{"RetryLater claim", "retry_later", func(f *Front) error { return f.RetryLater(fbg, "i", vocab.Claim{Attempt: 1}, time.Second, "") }},
		{"RetryLater delay", "retry_later", func(f *Front) error { return f.RetryLater(fbg, "i", fclaim, -time.Second, "") }},
		{"RetryLater error", "retry_later", func(f *Front) error { return f.RetryLater(fbg, "i", fclaim, time.Second, longText) }},
		{"NextRetry kinds", "next_retry", func(f *Front) error { _, _, err := f.NextRetry(fbg, nil); return err }},
		{"RetryEffect hash", "retry_effect", func(f *Front) error { _, err := f.RetryEffect(fbg, "", ""); return err }},
		{"EffectStatus hash", "effect_status", func(f *Front) error { _, err := f.EffectStatus(fbg, badID); return err }},
		{"HoldEffect hash", "hold_effect", func(f *Front) error { _, err := f.HoldEffect(fbg, "", "r"); return err }},
		{"HoldEffect reason", "hold_effect", func(f *Front) error { _, err := f.HoldEffect(fbg, "i", longText); return err }},
		{"ReleaseHeld hash", "release_held", func(f *Front) error { _, err := f.ReleaseHeld(fbg, badID, "r"); return err }},
		{"ReleaseHeld reason", "release_held", func(f *Front) error { _, err := f.ReleaseHeld(fbg, "i", longText); return err }},
		{"HoldOpenEffects reason", "hold_open_effects", func(f *Front) error { _, err := f.HoldOpenEffects(fbg, longText); return err }},
		{"ReleaseAllHeld reason", "release_all_held", func(f *Front) error { _, err := f.ReleaseAllHeld(fbg, longText); return err }},
		{"Schedule deliverAt", "schedule", func(f *Front) error { return f.Schedule(fbg, "w", 1, "t", time.Time{}, nil) }},
		{"Schedule payload", "schedule", func(f *Front) error { return f.Schedule(fbg, "w", 1, "t", fdue, bigBytes) }},
		{"CancelTimer hash", "cancel_timer", func(f *Front) error { return f.CancelTimer(fbg, "w", 1, "") }},
		{"ClaimDue ttl", "claim_due", func(f *Front) error { _, err := f.ClaimDue(fbg, "tw", 1, 0); return err }},
		{"Fire claim", "fire", func(f *Front) error { _, _, err := f.Fire(fbg, "t", vocab.Claim{Worker: "tw", Attempt: 0}); return err }},
		{"FireHeld epoch", "fire_held", func(f *Front) error { _, err := f.FireHeld(fbg, "w", huge, "t"); return err }},
		{"Send message id", "send", func(f *Front) error { _, err := f.Send(fbg, "w", "", InboxItem{}); return err }},
		{"Send payload", "send", func(f *Front) error { _, err := f.Send(fbg, "w", "m", InboxItem{Payload: bigBytes}); return err }},
		{"PutSnapshot state hash", "put_snapshot", func(f *Front) error { return f.PutSnapshot(fbg, "w", 1, Snapshot{Height: 1}) }},
		{"PutSnapshot state", "put_snapshot", func(f *Front) error {
			return f.PutSnapshot(fbg, "w", 1, Snapshot{StateHash: "h", State: make([]byte, MaxStateBytes+1)})
		}},
		{"SnapshotBelow height", "snapshot_below", func(f *Front) error { _, _, err := f.SnapshotBelow(fbg, "w", huge); return err }},
		{"Compact retain", "compact", func(f *Front) error { _, err := f.Compact(fbg, "w", 1, huge); return err }},
		{"CreateWorld universe", "create_world", func(f *Front) error { _, err := f.CreateWorld(fbg, "", "w", nil); return err }},
		{"CreateWorld seed", "create_world", func(f *Front) error { _, err := f.CreateWorld(fbg, "u", "w", &Snapshot{}); return err }},
		{"Spawn holderless events", "spawn", func(f *Front) error {
			_, err := f.Spawn(fbg, SpawnSpec{Universe: "u", World: "w", Events: []Record{{EventID: "e", IdempotencyKey: "k", EventType: "T", LogicalAttemptID: 1, EngineAttemptID: 1}}})
			return err
		}},
		{"Spawn key twice", "spawn", func(f *Front) error {
			_, err := f.Spawn(fbg, SpawnSpec{Universe: "u", World: "w", Items: []InboxItem{{Kind: "event", DedupeKey: "d"}, {Kind: "event", DedupeKey: "d"}}})
			return err
		}},
		{"ForkWorld new world", "fork_world", func(f *Front) error { _, err := f.ForkWorld(fbg, "w", 1, ""); return err }},
		{"ForkWorldFrom new world", "fork_world_from", func(f *Front) error { _, err := f.ForkWorldFrom(fbg, "w", fsnap, ""); return err }},
		{"ForkWorldFrom base", "fork_world_from", func(f *Front) error { _, err := f.ForkWorldFrom(fbg, "w", Snapshot{}, "f"); return err }},
		{"ListWorlds status", "list_worlds", func(f *Front) error { _, err := f.ListWorlds(fbg, "u", "gone"); return err }},
		{"SetWorldStatus status", "set_world_status", func(f *Front) error { _, err := f.SetWorldStatus(fbg, "w", "", ""); return err }},
		{"SetWorldStatus reason", "set_world_status", func(f *Front) error {
			_, err := f.SetWorldStatus(fbg, "w", WorldPaused, longText)
			return err
		}},
		{"CreateSchedule id", "create_schedule", func(f *Front) error {
			_, err := f.CreateSchedule(fbg, ScheduleRecord{ID: badID, Spec: []byte("x")})
			return err
		}},
		{"CreateSchedule spec", "create_schedule", func(f *Front) error { _, err := f.CreateSchedule(fbg, ScheduleRecord{ID: "s"}); return err }},
		{"GetSchedule id", "get_schedule", func(f *Front) error { _, err := f.GetSchedule(fbg, ""); return err }},
		{"ListSchedules limit", "list_schedules", func(f *Front) error { _, err := f.ListSchedules(fbg, "", tooMany); return err }},
		{"UpdateSchedule version", "update_schedule", func(f *Front) error {
			_, err := f.UpdateSchedule(fbg, ScheduleRecord{ID: "s", Spec: []byte("x")})
			return err
		}},
		{"DeleteSchedule id", "delete_schedule", func(f *Front) error { return f.DeleteSchedule(fbg, "") }},
		{"DueSchedules limit", "due_schedules", func(f *Front) error { _, _, err := f.DueSchedules(fbg, 0); return err }},
		{"CASWatermark projector", "cas_watermark", func(f *Front) error { return f.CASWatermark(fbg, "", "s", 0, 1) }},
		{"CASWatermark old", "cas_watermark", func(f *Front) error { return f.CASWatermark(fbg, "p", "s", huge, 1) }},
		{"CASWatermark next", "cas_watermark", func(f *Front) error { return f.CASWatermark(fbg, "p", "s", 0, huge) }},
		{"ListEffects limit", "list_effects", func(f *Front) error { _, err := f.ListEffects(fbg, "w", 0, tooMany); return err }},
		{"ListTimers world", "list_timers", func(f *Front) error { _, err := f.ListTimers(fbg, "", 1); return err }},
		{"QueryEffects limit over the max", "query_effects", func(f *Front) error {
			_, err := f.QueryEffects(fbg, EffectFilter{Limit: MaxListLimit + 1})
			return err
		}},
		{"QueryEffects state", "query_effects", func(f *Front) error {
			_, err := f.QueryEffects(fbg, EffectFilter{States: []vocab.EffectState{"gone"}, Limit: 1})
			return err
		}},
		{"QueryEffects world", "query_effects", func(f *Front) error { _, err := f.QueryEffects(fbg, EffectFilter{World: badID, Limit: 1}); return err }},
		{"QueryEffects afterSeq", "query_effects", func(f *Front) error {
			_, err := f.QueryEffects(fbg, EffectFilter{AfterSeq: huge, Limit: 1})
			return err
		}},
		{"QueryTimers limit over the max", "query_timers", func(f *Front) error {
			_, err := f.QueryTimers(fbg, TimerFilter{Limit: MaxListLimit + 1})
			return err
		}},
		{"QueryTimers negative limit", "query_timers", func(f *Front) error { _, err := f.QueryTimers(fbg, TimerFilter{Limit: -1}); return err }},
		{"QueryTimers state", "query_timers", func(f *Front) error {
			_, err := f.QueryTimers(fbg, TimerFilter{States: []TimerState{"due"}, Limit: 1})
			return err
		}},
		{"QueryTimers cursor time", "query_timers", func(f *Front) error {
			_, err := f.QueryTimers(fbg, TimerFilter{After: TimerCursor{IntentHash: "h"}, Limit: 1})
			return err
		}},
	}
}

// Every invalid call is answered by the front with an *Error of Kind
// ErrInvalid naming the caller's op, and the backend never hears of it.
func TestFrontRefusesInvalidCallsBeforeTheBackend(t *testing.T) {
	for _, c := range invalidCalls() {
		r := &recorder{}
		err := c.do(New(r))
		var se *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &se) || se.Op != c.op {
			t.Errorf("%s: %T %v, want an *Error of op %q and Kind ErrInvalid", c.name, err, err, c.op)
		}
		if len(r.calls) > 0 {
			t.Errorf("%s reached the backend: %v", c.name, r.calls)
		}
	}
}

// validCalls is a valid call of every method of the Store, with the
// backend method it must reach.
func validCalls() []struct {
	method string
	do     func(f *Front) error
} {
	rec := Record{EventID: "e", IdempotencyKey: "k", EventType: "T", LogicalAttemptID: 1, EngineAttemptID: 1}
	return []struct {
		method string
		do     func(f *Front) error
	}{
		{"Commit", func(f *Front) error {
			_, err := f.Commit(fbg, "w", 1, CommitBatch{NewCursor: 1, Entries: []Record{rec}, Snapshot: &fsnap})
			return err
		}},
		{"Watch", func(f *Front) error { _, err := f.Watch(fbg, noopWaker, TopicEffects, TopicInbox("w")); return err }},
		{"Now", func(f *Front) error { _, err := f.Now(fbg); return err }},
		{"Close", func(f *Front) error { return f.Close() }},
		{"Append", func(f *Front) error {
			_, err := f.Append(fbg, "w", []Record{rec}, AppendOptions{Fence: &Fence{World: "w", Epoch: 1}, ExpectedHead: Head(0)})
			return err
		}},
		{"Read", func(f *Front) error { _, err := f.Read(fbg, "w", 0, 0); return err }},
		{"Head", func(f *Front) error { _, err := f.Head(fbg, "w"); return err }},
		{"Floor", func(f *Front) error { _, err := f.Floor(fbg, "w"); return err }},
		{"ReadWindow", func(f *Front) error { _, err := f.ReadWindow(fbg, "w", fdue, fdue, 0); return err }},
		{"AcquireLeases", func(f *Front) error {
			_, err := f.AcquireLeases(fbg, "A", []string{"w", "v"}, time.Second, WithIncarnation("i"))
			return err
		}},
		{"RenewLeases", func(f *Front) error {
			_, err := f.RenewLeases(fbg, "A", []LeaseRef{{World: "w", Epoch: 1}}, time.Second)
			return err
		}},
		{"ReleaseLeases", func(f *Front) error {
			_, err := f.ReleaseLeases(fbg, "A", []LeaseRef{{World: "w", Epoch: 1}})
			return err
		}},
		{"GetLease", func(f *Front) error { _, _, err := f.GetLease(fbg, "w"); return err }},
		{"Assign", func(f *Front) error {
			return f.Assign(fbg, "w", Assignment{DesiredWorker: "A", Reason: "r"}, &Fence{World: "o", Epoch: 1})
		}},
		{"Unassign", func(f *Front) error { return f.Unassign(fbg, "w", nil) }},
		{"GetAssignment", func(f *Front) error { _, _, err := f.GetAssignment(fbg, "w"); return err }},
		{"CompareAndAssign", func(f *Front) error {
			return f.CompareAndAssign(fbg, "w", &Assignment{DesiredWorker: "A"}, nil, &Fence{World: "o", Epoch: 1})
		}},
		{"ListWorkerWorlds", func(f *Front) error { _, err := f.ListWorkerWorlds(fbg, "A", "", 10); return err }},
		{"Heartbeat", func(f *Front) error { _, err := f.Heartbeat(fbg, "A", 4, AliveAs("i", time.Second)); return err }},
		{"RetireWorker", func(f *Front) error { _, err := f.RetireWorker(fbg, "A", "i"); return err }},
		{"ReapOrphans", func(f *Front) error { _, err := f.ReapOrphans(fbg); return err }},
		{"SetDraining", func(f *Front) error { _, err := f.SetDraining(fbg, "A", true); return err }},
		{"ListWorkers", func(f *Front) error { _, err := f.ListWorkers(fbg); return err }},
		{"Enqueue", func(f *Front) error {
			_, _, err := f.Enqueue(fbg, "w", InboxItem{Kind: vocab.KindCall, DedupeKey: CallKeyPrefix + "c"})
			return err
		}},
		{"ReadInbox", func(f *Front) error { _, err := f.ReadInbox(fbg, "w", 0, 0); return err }},
		{"Cursor", func(f *Front) error { _, err := f.Cursor(fbg, "w"); return err }},
		{"DrainToJournal", func(f *Front) error { _, err := f.DrainToJournal(fbg, "w", 1, 0, 0, 1, []Record{rec}); return err }},
		{"Publish", func(f *Front) error {
			_, err := f.Publish(fbg, "w", 1, []vocab.Intent{{IntentHash: "i", Kind: "k", Origin: "w@1"}})
			return err
		}},
		{"Claim", func(f *Front) error {
			_, err := f.Claim(fbg, "ad", []string{"k"}, 1, time.Second, ClaimFor("A", "i"))
			return err
		}},
		{"CompleteMany", func(f *Front) error {
			_, err := f.CompleteMany(fbg, []vocab.Completion{{IntentHash: "i", Claim: fclaim, Receipt: freceipt}})
			return err
		}},
		{"Resolve", func(f *Front) error { _, _, err := f.Resolve(fbg, "i", freceipt, "r"); return err }},
		{"ReapEffects", func(f *Front) error { _, err := f.ReapEffects(fbg); return err }},
		{"ReleaseEffect", func(f *Front) error { return f.ReleaseEffect(fbg, "i", fclaim) }},
		{"RetryLater", func(f *Front) error { return f.RetryLater(fbg, "i", fclaim, time.Second, "503") }},
		{"NextRetry", func(f *Front) error { _, _, err := f.NextRetry(fbg, []string{"k"}); return err }},
		{"RetryEffect", func(f *Front) error { _, err := f.RetryEffect(fbg, "i", "r"); return err }},
		{"EffectStatus", func(f *Front) error { _, err := f.EffectStatus(fbg, "i"); return err }},
		{"HoldEffect", func(f *Front) error { _, err := f.HoldEffect(fbg, "i", "r"); return err }},
		{"ReleaseHeld", func(f *Front) error { _, err := f.ReleaseHeld(fbg, "i", "r"); return err }},
		{"HoldOpenEffects", func(f *Front) error { _, err := f.HoldOpenEffects(fbg, "r"); return err }},
		{"ReleaseAllHeld", func(f *Front) error { _, err := f.ReleaseAllHeld(fbg, "r"); return err }},
		{"Schedule", func(f *Front) error { return f.Schedule(fbg, "w", 1, "t", fdue, []byte("p")) }},
		{"CancelTimer", func(f *Front) error { return f.CancelTimer(fbg, "w", 1, "t") }},
		{"ClaimDue", func(f *Front) error { _, err := f.ClaimDue(fbg, "tw", 1, time.Second); return err }},
		{"Fire", func(f *Front) error { _, _, err := f.Fire(fbg, "t", fclaim); return err }},
		{"FireHeld", func(f *Front) error { _, err := f.FireHeld(fbg, "w", 1, "t"); return err }},
		{"ReapTimers", func(f *Front) error { _, err := f.ReapTimers(fbg); return err }},
		{"NextDue", func(f *Front) error { _, _, err := f.NextDue(fbg); return err }},
		{"Send", func(f *Front) error { _, err := f.Send(fbg, "w", "m", InboxItem{Payload: []byte("p")}); return err }},
		{"PutSnapshot", func(f *Front) error { return f.PutSnapshot(fbg, "w", 1, fsnap) }},
		{"ActiveSnapshot", func(f *Front) error { _, _, err := f.ActiveSnapshot(fbg, "w"); return err }},
		{"SnapshotBelow", func(f *Front) error { _, _, err := f.SnapshotBelow(fbg, "w", 1); return err }},
		{"Compact", func(f *Front) error { _, err := f.Compact(fbg, "w", 1, 0); return err }},
		{"CreateWorld", func(f *Front) error { _, err := f.CreateWorld(fbg, "u", "w", &fsnap); return err }},
		{"Spawn", func(f *Front) error {
			_, err := f.Spawn(fbg, SpawnSpec{Universe: "u", World: "w", Items: []InboxItem{{Kind: "event"}}, Holder: "A", TTL: time.Second, Events: []Record{rec}})
			return err
		}},
		{"ForkWorld", func(f *Front) error { _, err := f.ForkWorld(fbg, "w", 1, "f"); return err }},
		{"ForkWorldFrom", func(f *Front) error { _, err := f.ForkWorldFrom(fbg, "w", fsnap, "f"); return err }},
		{"GetWorld", func(f *Front) error { _, err := f.GetWorld(fbg, "w"); return err }},
		{"ListWorlds", func(f *Front) error { _, err := f.ListWorlds(fbg, "u", ""); return err }},
		{"SetWorldStatus", func(f *Front) error { _, err := f.SetWorldStatus(fbg, "w", WorldArchived, "r"); return err }},
		{"GetWatermark", func(f *Front) error { _, err := f.GetWatermark(fbg, "p", "s"); return err }},
		{"CASWatermark", func(f *Front) error { return f.CASWatermark(fbg, "p", "s", 0, 1) }},
		{"SweepDedupe", func(f *Front) error { _, err := f.SweepDedupe(fbg); return err }},
		{"DedupeRetention", func(f *Front) error { f.DedupeRetention(); return nil }},
		{"ListEffects", func(f *Front) error { _, err := f.ListEffects(fbg, "w", 0, 10); return err }},
		{"ListTimers", func(f *Front) error { _, err := f.ListTimers(fbg, "w", 10); return err }},
		{"QueryEffects", func(f *Front) error {
			_, err := f.QueryEffects(fbg, EffectFilter{World: "w", Kind: "k", States: []vocab.EffectState{vocab.EffectDone, vocab.EffectPending}, AfterSeq: 3, Limit: MaxListLimit})
			return err
		}},
		{"QueryTimers", func(f *Front) error {
			_, err := f.QueryTimers(fbg, TimerFilter{World: "w", States: []TimerState{TimerDelivered}, After: TimerCursor{DeliverAt: fdue, IntentHash: "h"}, Limit: 0})
			return err
		}},
		{"QueueDepths", func(f *Front) error { _, err := f.QueueDepths(fbg); return err }},
		{"PendingEffects", func(f *Front) error { _, err := f.PendingEffects(fbg); return err }},
	}
}

// A valid call of each method reaches the backend's method once: the
// refusals above are the front's checks, not a front that forwards
// nothing.
func TestFrontPassesEveryValidCallToTheBackend(t *testing.T) {
	for _, c := range validCalls() {
		r := &recorder{}
		if err := c.do(New(r)); err != nil {
			t.Errorf("%s: %v", c.method, err)
		}
		if !slices.Equal(r.calls, []string{c.method}) {
			t.Errorf("%s reached the backend as %v", c.method, r.calls)
		}
	}
}

// A finished context is answered by the front, whatever the arguments,
// and the backend never hears of the call.
func TestFrontAnswersADoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(fbg)
	cancel()
	r := &recorder{}
	f := New(r)
	_, err := f.Acquire(ctx, "w", "A", time.Second)
	var se *Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &se) || se.Op != "acquire" {
		t.Fatalf("Acquire with a done context: %v", err)
	}
	if _, err := f.Claim(ctx, "", nil, -1, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("an invalid Claim with a done context: %v, want the context's error", err)
	}
	if len(r.calls) > 0 {
		t.Fatalf("the backend heard %v", r.calls)
	}
}

// The single-item forms are their batch forms of one: the backend hears
// the batch call, and every error
// the caller sees names the single-item op, the backend's own error
// unchanged.
func TestFrontAnswersSingleItemFormsThroughBatchForms(t *testing.T) {
	itemErr := &Error{Op: "renew_leases", Kind: ErrStaleEpoch, World: "w"}
	callErr := &Error{Op: "release_leases", Kind: ErrClosed}
	cases := []struct {
		op, method string
		callErr    bool // the backend fails the call, else the one item
		do         func(f *Front) error
	}{
		{"acquire", "AcquireLeases", false, func(f *Front) error { _, err := f.Acquire(fbg, "w", "A", time.Second); return err }},
		{"renew", "RenewLeases", false, func(f *Front) error { _, err := f.Renew(fbg, "w", "A", 1, time.Second); return err }},
		{"release", "ReleaseLeases", false, func(f *Front) error { return f.Release(fbg, "w", "A", 1) }},
		{"complete", "CompleteMany", false, func(f *Front) error { _, _, err := f.Complete(fbg, "i", fclaim, freceipt); return err }},
		{"acquire", "AcquireLeases", true, func(f *Front) error { _, err := f.Acquire(fbg, "w", "A", time.Second); return err }},
		{"renew", "RenewLeases", true, func(f *Front) error { _, err := f.Renew(fbg, "w", "A", 1, time.Second); return err }},
		{"release", "ReleaseLeases", true, func(f *Front) error { return f.Release(fbg, "w", "A", 1) }},
		{"complete", "CompleteMany", true, func(f *Front) error { _, _, err := f.Complete(fbg, "i", fclaim, freceipt); return err }},
	}
	for _, c := range cases {
		r := &recorder{itemErr: itemErr}
		want := itemErr.Kind
		if c.callErr {
			r.callErr, want = callErr, callErr.Kind
		}
		err := c.do(New(r))
		var se *Error
		if !errors.Is(err, want) || !errors.As(err, &se) || se.Op != c.op {
			t.Errorf("%s (call error %v): %v, want %v named %q", c.op, c.callErr, err, want, c.op)
		}
		if !slices.Equal(r.calls, []string{c.method}) {
			t.Errorf("%s reached the backend as %v", c.op, r.calls)
		}
	}
	if itemErr.Op != "renew_leases" || callErr.Op != "release_leases" {
		t.Fatalf("the front renamed the backend's own errors: %v, %v", itemErr, callErr)
	}

	// An answer that is no *Error (a fault a test injected) passes as is.
	fault := errors.New("injected")
	r := &recorder{callErr: fault}
	if _, err := New(r).Renew(fbg, "w", "A", 1, time.Second); err != fault {
		t.Fatalf("Renew answered %v, want the injected fault itself", err)
	}
	// A success carries the batch's one answer.
	r = &recorder{}
	l, err := New(r).Acquire(fbg, "w", "A", time.Second)
	if err != nil || l.Epoch != 7 || l.World != "w" {
		t.Fatalf("Acquire = %+v, %v", l, err)
	}
}

// CompleteMany checks each completion alone: an invalid one is answered
// ErrInvalid (named "complete") in its place, the valid ones reach the
// backend in their order, and the answers come back in the caller's
// order.
func TestFrontCompleteManyValidatesPerItem(t *testing.T) {
	r := &recorder{}
	cs := []vocab.Completion{
		{IntentHash: "a", Claim: fclaim, Receipt: freceipt},
		{IntentHash: "bad", Claim: vocab.Claim{Worker: "ad", Attempt: 0}, Receipt: freceipt},
		{IntentHash: "ccc", Claim: fclaim, Receipt: freceipt},
		{IntentHash: "", Claim: fclaim, Receipt: freceipt},
		{IntentHash: "dddd", Claim: fclaim, Receipt: freceipt},
	}
	out, err := New(r).CompleteMany(fbg, cs)
	if err != nil || len(out) != len(cs) {
		t.Fatalf("CompleteMany = %+v, %v", out, err)
	}
	var got []string
	for _, c := range r.completions {
		got = append(got, c.IntentHash)
	}
	if !slices.Equal(got, []string{"a", "ccc", "dddd"}) {
		t.Fatalf("the backend got %q, want the valid ones in order", got)
	}
	for i, want := range []uint64{1, 0, 3, 0, 4} {
		var se *Error
		invalid := errors.Is(out[i].Err, ErrInvalid) && errors.As(out[i].Err, &se) && se.Op == "complete"
		if out[i].InboxSeq != want || invalid != (want == 0) || (want != 0 && out[i].Err != nil) {
			t.Errorf("item %d = %+v, want seq %d (invalid: %v)", i, out[i], want, want == 0)
		}
	}

	// With no valid item the backend is still asked, so that the call's
	// own answer (here a closed store) does not depend on the items.
	r = &recorder{callErr: &Error{Op: "complete_many", Kind: ErrClosed}}
	out, err = New(r).CompleteMany(fbg, cs[1:2])
	if !errors.Is(err, ErrClosed) || out != nil || len(r.completions) != 0 || len(r.calls) != 1 {
		t.Fatalf("CompleteMany of only invalid items on a closed store = %+v, %v (backend got %v)", out, err, r.completions)
	}
}
