// Package store defines Orrery's persistence plane: the append authority
// (the execution semantics contract), leases with fencing epochs, the durable inbox, the effect and
// timer queues, fabric delivery, snapshots, worlds, projector watermarks and
// dedupe retention (the runtime plane contract, protocols A–F). It owns the interfaces and the
// typed errors; the backends (store/memstore, store/sqlite, store/postgres)
// implement them, each as the one Front (front.go) over its Backend: the
// front validates every call once and answers the single-item forms, the
// backend keeps storage only. store/storetest is the one conformance suite
// all of them pass unchanged.
//
// Every backend also copies into every other (port.go): Exporter emits a
// logical, backend-neutral stream of PortRecords read in one snapshot,
// Importer writes it, releasing leases and requeuing claims on purpose.
//
// The effect vocabulary the store shares with the kernel and the adapters
// (intents, timers set, receipts and their status, inbox item kinds,
// effect items, claims, completions) is package vocab's: the names here
// (Intent, Receipt, KindReceipt …) are aliases of it, so a value passes
// between the layers as it is.
//
// What the store never does: interpret world state (it stores bytes and
// metadata, and never imports world/), order by timestamps (readers order by
// runSeq and inbox seq), or trust a client clock for persistedAt, lease
// expiry or queue deadlines (the store's own clock decides: the database
// server's for Postgres).
//
// Fencing: every mutation of a world's durable state takes the lease epoch
// and the backend checks it in the same transaction as the write. A stale
// epoch fails with ErrFenced and changes nothing. Notifications (Watch) are
// hints only: correctness comes from scanning durable state, so a lost
// notification delays work and never loses it.
package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// Store is the whole persistence plane of one backend.
type Store interface {
	Journal
	Leases
	Workers
	Inbox
	Effects
	Timers
	Fabric
	Snapshots
	Worlds
	Watermarks
	Dedupe
	Views
	Queues
	Schedules
	// Commit is the world cycle's one transaction (see CommitBatch).
	Commit(ctx context.Context, world string, epoch uint64, b CommitBatch) (CommitResult, error)
	// Watch registers w to be woken (w.Unpark, which must not block) after
	// every committed change that may interest one of topics (see Topic*).
	// Hints coalesce and may be lost (correctness comes from scanning
	// durable state, never from a hint); a hint may also be spurious. The
	// registration lasts until stop is called or the store handle is closed
	// (or, for memstore, crashed); ctx bounds only the call itself, so a
	// watch holds no goroutine of its own and works under the deterministic
	// lab, whose Parker is a Waker. A closed store: ErrClosed. An empty or
	// unknown topic: ErrInvalid.
	Watch(ctx context.Context, w Waker, topics ...string) (stop func(), err error)
	// Now reads the store's clock (persistedAt, expiries, due times).
	Now(ctx context.Context) (time.Time, error)
	Close() error
}

// Waker is woken by a Watch. actor.Parker satisfies it; NewSignal gives a
// channel-backed one for code outside the actor layer.
type Waker interface{ Unpark() }

// Signal is a channel-backed Waker: C receives one value after any number
// of Unparks (coalesced, buffer 1).
type Signal struct{ C chan struct{} }

// NewSignal returns a ready Signal.
func NewSignal() *Signal { return &Signal{C: make(chan struct{}, 1)} }

// Unpark implements Waker without blocking.
func (s *Signal) Unpark() {
	select {
	case s.C <- struct{}{}:
	default:
	}
}

// Notification topics.
const (
	// TopicEffects: effects became claimable (Publish, Commit, ReapEffects,
	// RetryEffect, ReleaseHeld).
	TopicEffects = "effects"
	// TopicTimers: the timer set changed (Schedule, CancelTimer, Commit,
	// ReapTimers), so the next due time may have moved.
	TopicTimers = "timers"
	// TopicAssignments: an assignment was written or removed, or a world's
	// status changed.
	TopicAssignments = "assignments"
	// TopicLeases: a lease was acquired, released, revoked by a status
	// change, or released in bulk.
	TopicLeases = "leases"
	// TopicWorkers: the worker inventory changed (Heartbeat, SetDraining).
	TopicWorkers = "workers"
)

// TopicInbox is the topic of one world's inbox: an item entered it.
func TopicInbox(world string) string { return topicInboxPrefix + world }

const topicInboxPrefix = "inbox:"

// InboxTopicWorld returns the world of an inbox topic (TopicInbox), and
// false for any other topic.
func InboxTopicWorld(topic string) (string, bool) {
	w, ok := strings.CutPrefix(topic, topicInboxPrefix)
	return w, ok && w != ""
}

// ValidTopic reports whether topic is one a Watch accepts.
func ValidTopic(topic string) bool {
	switch topic {
	case TopicEffects, TopicTimers, TopicAssignments, TopicLeases, TopicWorkers, TopicSchedules:
		return true
	}
	return len(topic) > len(topicInboxPrefix) && topic[:len(topicInboxPrefix)] == topicInboxPrefix &&
		CheckID("watch", "world", topic[len(topicInboxPrefix):]) == nil
}

// Fence is the lease epoch a world mutation is made under.
type Fence struct {
	World string
	Epoch uint64
}

// ---- the append authority (the execution semantics contract) ----

// Record is one journal entry: the event envelope of the execution semantics contract, defined once in
// event/ (its validation, idempotency key and canonical payload encoding
// live there). The store treats Payload as opaque bytes.
type Record = event.Envelope

// StreamKind says what kind of stream an append writes, so that the lease
// requirement is stated, never implied by a missing option.
type StreamKind uint8

const (
	// WorldStream (the zero value) is a world's journal: its id is the
	// world's id, and every append needs the world's own fence
	// (AppendOptions.Fence naming the same world at its current epoch).
	// Anything else — no fence, another world's fence, a stale epoch — is
	// ErrFenced and writes nothing. A stream that is not a world's (no world
	// with that id exists) is ErrWorldNotFound.
	WorldStream StreamKind = iota
	// FreeStream is a stream no world owns (a workflow run's, an audit
	// log's): appends need no lease, and a Fence is ErrInvalid. A FreeStream
	// append to a world's stream is ErrFenced, and a world cannot be
	// created over a free stream that has events (ErrWorldExists).
	FreeStream
)

// AppendOptions qualify an append.
type AppendOptions struct {
	// Kind is the stream's kind; see WorldStream and FreeStream.
	Kind StreamKind
	// Fence is the world's lease epoch, required for a WorldStream and
	// checked in the same transaction as the write.
	Fence *Fence
	// ExpectedHead, when set, makes the append a compare-and-swap on the
	// stream's head (the runSeq of its last event; 0 for an empty stream).
	// A mismatch fails with ErrHeadMismatch and inserts nothing. A batch
	// whose every event is a duplicate returns the existing metadata
	// without checking the head, so a retried append stays idempotent.
	// With ExpectedHead the new events get head+1 … head+n in order
	// (gapless), so a producer knows their runSeqs before it appends.
	ExpectedHead *uint64
}

// Head returns a pointer to h, for AppendOptions.ExpectedHead.
func Head(h uint64) *uint64 { return &h }

// Appended is the append authority's answer for one event.
type Appended struct {
	EventID     string
	RunSeq      uint64
	PersistedAt time.Time
	// Idempotent is true when (stream, idempotencyKey) already existed: the
	// metadata is the existing record's and nothing was inserted.
	Idempotent bool
	// Conflict is true when Idempotent and the stored record differs from
	// the one offered: another eventType, or another payload (compared by
	// SHA-256, which the store keeps with the key, also after compaction).
	// The stored record wins (the execution semantics contract §3.2); a world runtime raises a
	// non-determinism error on it.
	Conflict bool
}

// Journal is the append authority: one append-only stream per run/world.
type Journal interface {
	// Append validates (checkRecords) and appends events to stream in one
	// transaction and returns, for each event in order, its metadata.
	// runSeq is assigned by the store, monotonic per stream (gapless under
	// ExpectedHead); persistedAt comes from the store's clock; StreamID,
	// RunSeq and PersistedAt of the inputs are ignored. A duplicate (stream,
	// idempotencyKey), within the batch or against stored records, returns
	// the existing metadata, marked idempotent (and Conflict when it
	// differs), and inserts nothing — also when concurrent appenders race
	// on the same key.
	Append(ctx context.Context, stream string, events []Record, opts AppendOptions) ([]Appended, error)
	// Read returns up to limit events with runSeq > afterSeq, in runSeq order.
	// runSeqs may have gaps, so a reader cannot tell a removed record from
	// one that never existed: a read that starts below the stream's floor
	// (afterSeq < Floor) is refused with a *CompactedError
	// (errors.Is(err, ErrCompacted)) naming the floor, never answered with
	// what is left above it. A read at or above the floor sees every record
	// appended above afterSeq.
	Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]Record, error)
	// Head returns the runSeq of the stream's last event (0 when empty; for
	// a forked or seeded world, the snapshot height until the first append).
	Head(ctx context.Context, stream string) (uint64, error)
	// Floor returns the stream's compaction floor: every record with runSeq
	// <= Floor is gone, removed by Compact (0 when nothing ever was). It
	// only rises, and is written in the transaction that removes the
	// records. A reader that accepts the loss reads on from Floor, knowing
	// what it skipped. A forked or seeded world's stream starts above its
	// fork height, which its world record says (World.ForkedAtHeight); that
	// is not a floor until a compaction passes it.
	Floor(ctx context.Context, stream string) (uint64, error)
	// ReadWindow returns up to limit events of stream with from <= persistedAt
	// < to, in runSeq order: the audit window (the execution semantics contract §2.2).
	// A window that may hold compacted records (from at or before the
	// latest persistedAt among them) is refused with a *CompactedError whose
	// FloorAt says from when on the window is whole.
	ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]Record, error)
}

// ErrCompacted: a journal read asked for records below the stream's
// compaction floor (see CompactedError).
var ErrCompacted = errors.New("store: journal compacted")

// CompactedError is the answer to a journal read that asks for records
// compaction removed (see Journal.Read and ReadWindow). errors.Is matches
// ErrCompacted.
type CompactedError struct {
	Op     string // "read" or "read_window"
	Stream string
	// After is the read's afterSeq (Read only).
	After uint64
	// Floor is the stream's compaction floor: records at or below it are
	// gone; a read from Floor on is whole.
	Floor uint64
	// FloorAt is the latest persistedAt among the removed records (zero if
	// none was ever removed): a window starting after it is whole.
	FloorAt time.Time
}

func (e *CompactedError) Error() string {
	msg := fmt.Sprintf("%s: %s (stream %s): records up to runSeq %d are compacted", e.Op, ErrCompacted.Error(), e.Stream, e.Floor)
	if e.Op == "read_window" {
		return msg + fmt.Sprintf(" (the latest persisted at %s)", e.FloorAt.UTC().Format(time.RFC3339Nano))
	}
	return msg + fmt.Sprintf(", asked after %d", e.After)
}

// Unwrap makes errors.Is(err, ErrCompacted) hold.
func (e *CompactedError) Unwrap() error { return ErrCompacted }

// ---- the world cycle ----

// CommitBatch is everything one world cycle changes. Commit applies all of
// it in one transaction, fenced by the world's epoch, or none of it:
//
//  1. the inbox cursor moves from ExpectedCursor to NewCursor
//     (ErrCursorMismatch if it is not at ExpectedCursor; ErrInvalid if
//     NewCursor is below it or passes the last enqueued seq);
//  2. Entries are appended to the world's journal, compare-and-swapped on
//     ExpectedHead (ErrHeadMismatch, also when every entry is a
//     duplicate), the new ones at head+1 … head+n;
//  3. Intents are published (as Publish: an intent hash ever published is
//     skipped);
//  4. Timers are scheduled (as Schedule) and CancelTimers cancelled (as
//     CancelTimer, except that an unknown, other world's or already fired
//     timer is skipped, not an error: the kernel may cancel a timer whose
//     firing is still in its inbox). The holder of a world's lease also
//     lists here the timers whose firings the commit journals directly
//     (stepped at their due time without an inbox item): the commit's
//     entries are their firing, so the timer leaves the queue with it. A
//     timer worker's claim of one then fires nothing (Fire: ErrNotFound),
//     and a firing already delivered to the inbox stays there, for the
//     kernel to drop as stale;
//  5. Snapshot, when set, is stored (as PutSnapshot, its height at most the
//     new head);
//  6. Withdraw withdraws those of the listed intents that are the world's
//     and pending (published, not claimed: never claimed, or requeued by a
//     reap) or held (no claim: nothing runs it until an operator would), as a producer that gives an effect up must (a workflow step
//     whose wait for a receipt ran out for good): they become
//     EffectWithdrawn and no adapter will claim them. An inflight, done,
//     withdrawn, unknown or other world's intent is skipped: an effect
//     already claimed may be executing, and its receipt still lands;
//  7. Status, when set, moves the world from active to Status.Status with
//     Status.Reason, as SetWorldStatus does (the store's time is recorded,
//     the lease ends in the same transaction, the same hints are raised).
//     It is how a workflow run records its end and leaves every worker's
//     scan in one write. Only WorldPaused and WorldArchived may be asked
//     (ErrInvalid otherwise): the fence proves the world active. Archiving
//     withdraws every pending and held effect of the world, as
//     SetWorldStatus does.
//
// The inbox items up to NewCursor count as drained (their dedupe keys
// complete, see Dedupe). This one transaction is why the runtime plane contract's crash
// window "after journal append, before effect publish" cannot happen.
type CommitBatch struct {
	ExpectedCursor uint64
	NewCursor      uint64
	ExpectedHead   uint64
	Entries        []Record
	Intents        []vocab.Intent
	Timers         []vocab.TimerSet
	CancelTimers   []string
	Snapshot       *Snapshot
	Withdraw       []string // intent hashes (step 6)
	Status         *StatusChange
}

// StatusChange is a Commit's move of its world out of active.
type StatusChange struct {
	Status WorldStatus // WorldPaused or WorldArchived
	Reason string
}

// CommitResult answers a Commit.
type CommitResult struct {
	Appended  []Appended // one per entry, in order
	Head      uint64     // the journal head after the commit
	Published int        // intents newly queued
	Scheduled int        // timers newly scheduled
	Cancelled int        // timers cancelled
	// Withdrawn counts the intents this commit withdrew: by Withdraw, and
	// every pending and held one of the world when Status archived it.
	Withdrawn int
}

// ---- leases (protocols A and B) ----

// Lease is the per-world lease record. Epochs strictly increase per world
// and are never reused, including after a release.
type Lease struct {
	World  string
	Holder string // empty after release
	// Incarnation is the holder's incarnation (WithIncarnation): which
	// process lifetime under the worker id Holder took the lease. Empty
	// after release, and for a holder that named none.
	Incarnation string
	Epoch       uint64
	ExpiresAt   time.Time
}

// AcquireOption qualifies an Acquire or AcquireLeases.
type AcquireOption func(*AcquireOptions)

// AcquireOptions is what an acquisition's options resolve to
// (ResolveAcquireOptions).
type AcquireOptions struct {
	// Incarnation names one lifetime of the acquiring process under its
	// worker id: a process draws a fresh one from real entropy each time
	// it starts, so that two processes sharing a worker id (a restart
	// while the old process is frozen or partitioned, not dead) never
	// share an epoch. See Leases.Acquire. Empty is an incarnation like any
	// other (the one of a caller that names none). At most MaxIDBytes.
	Incarnation string
}

// WithIncarnation acquires as the given incarnation of the worker.
func WithIncarnation(id string) AcquireOption {
	return func(o *AcquireOptions) { o.Incarnation = id }
}

// NewIncarnation draws a fresh incarnation from the operating system's
// entropy (crypto/rand: 128 bits, base32): never from a seeded source,
// since two processes seeded alike would then share it, and with it their
// epochs. A process draws one when it starts; the lab passes its own.
func NewIncarnation() string { return rand.Text() }

// ResolveAcquireOptions applies opts in order and checks the result for
// op (ErrInvalid).
func ResolveAcquireOptions(op string, opts []AcquireOption) (AcquireOptions, error) {
	var o AcquireOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o, checkOptionalID(op, "incarnation", o.Incarnation)
}

// Assignment is the orchestrator's desired placement of a world.
type Assignment struct {
	DesiredWorker string
	Priority      int
	Reason        string
}

// LeaseRef names one lease a worker holds, for the bulk calls.
type LeaseRef struct {
	World string
	Epoch uint64
}

// LeaseResult is one world's answer in a bulk call: the lease, or the
// typed error that call would have returned for this world alone.
type LeaseResult struct {
	World string
	Lease Lease
	Err   error
}

// AcquireResult is one world's answer in an AcquireLeases call: the lease,
// or the typed error Acquire would have returned for this world alone. On
// success it also carries what a host reads before it runs the world, so
// that taking over many worlds needs no call per world: the world's
// universe (which definition runs it) and whether its inbox holds items
// beyond its cursor (whether a process must start now, or the world may
// stay passive until its next input), and when its earliest timer not yet
// delivered is due (NextTimer, zero for none: a passive world must wake
// then, since only its firing will). Universe, Backlog and NextTimer are
// read in the transaction that took the lease; they are zero when Err is
// set.
type AcquireResult struct {
	World     string
	Lease     Lease
	Universe  string
	Backlog   bool
	NextTimer time.Time
	Err       error
}

// WorkerWorld is one row of ListWorkerWorlds: a world whose unexpired lease
// the worker holds, or whose assignment names the worker, or both.
type WorkerWorld struct {
	World      string
	Lease      *Lease      // the world's lease record, if any
	Assignment *Assignment // the world's assignment, if any
	// Backlog: the world's inbox holds items beyond its cursor. A host
	// wakes a world it holds with no process running on it, so that an
	// input whose hint was lost (a notification dropped with its
	// connection, say) waits one rescan, never for ever.
	Backlog bool
}

// Leases implements protocols A and B.
type Leases interface {
	// Acquire takes the world's lease for worker if it is absent, released
	// or expired (by the store's clock), with epoch = previous epoch + 1.
	// The holder is the worker id together with its incarnation
	// (WithIncarnation; none: the empty one), which the lease records:
	//   - the same worker and incarnation already holding an unexpired
	//     lease get it back unchanged (a retry is idempotent);
	//   - the same worker under another incarnation takes an unexpired
	//     lease over at epoch + 1: a new process under the worker's id
	//     (a restart) never shares its predecessor's epoch, so whatever
	//     the predecessor still does at the old epoch (a frozen or
	//     partitioned process is not dead) is fenced (ErrFenced, and
	//     ErrStaleEpoch on Renew);
	//   - the incarnation of the same worker that held the lease last
	//     (unexpired, or expired before the new incarnation came, but not
	//     released) is remembered with the lease as displaced: while the
	//     lease taken from it is unexpired, its own Acquire is refused
	//     (ErrLeaseHeld), so an old process that thaws does not take the
	//     world back, and two live processes under one worker id never
	//     trade a world back and forth;
	//   - another unexpired holder: ErrLeaseHeld.
	// An assignment naming another desired worker: ErrNotAssigned. The
	// world must exist (ErrWorldNotFound) and be active (ErrWorldPaused,
	// ErrWorldArchived). An invalid option: ErrInvalid.
	Acquire(ctx context.Context, world, worker string, ttl time.Duration, opts ...AcquireOption) (Lease, error)
	// AcquireLeases acquires many worlds for one worker (and incarnation,
	// as for Acquire) in one round trip
	// and one transaction: one AcquireResult per world, in order, each as
	// Acquire would answer it alone (ErrLeaseHeld, ErrNotAssigned,
	// ErrWorldPaused, ErrWorldArchived, ErrWorldNotFound). Worlds are
	// decided in order, so a world named twice gets on its second
	// occurrence what a second Acquire would: the lease its first took,
	// unchanged. The call's own error is for the call (context, closed
	// store, invalid arguments: the worker, more than MaxBatch worlds, a
	// world id, the TTL, an option), never for one world; then there are
	// no results.
	// A lease taken raises TopicLeases once per call.
	AcquireLeases(ctx context.Context, worker string, worlds []string, ttl time.Duration, opts ...AcquireOption) ([]AcquireResult, error)
	// Renew extends the lease if worker holds it at epoch: ErrNotHolder if
	// another worker holds it (or nobody, or it expired), ErrStaleEpoch if
	// the epoch moved (also when another incarnation of worker took it
	// over: the epoch is what tells incarnations apart here).
	Renew(ctx context.Context, world, worker string, epoch uint64, ttl time.Duration) (Lease, error)
	// RenewLeases renews many leases of one worker in one round trip and
	// one transaction: one LeaseResult per ref, in order, each as Renew
	// would answer it alone. The call's own error is for the call (context,
	// closed store, invalid arguments), never for one lease.
	RenewLeases(ctx context.Context, worker string, refs []LeaseRef, ttl time.Duration) ([]LeaseResult, error)
	// Release gives the lease up; the epoch counter is kept.
	Release(ctx context.Context, world, worker string, epoch uint64) error
	// ReleaseLeases releases many leases of one worker at once (a planned
	// drain), one LeaseResult per ref as Release would answer it.
	ReleaseLeases(ctx context.Context, worker string, refs []LeaseRef) ([]LeaseResult, error)
	// GetLease returns the current lease record (ok=false if never leased).
	GetLease(ctx context.Context, world string) (lease Lease, ok bool, err error)
	// Assign and Unassign write the desired placement; GetAssignment reads
	// it. by is the writer's authority: nil for an operator, or the fence
	// of the lease the writer acts under (the orchestrator passes its own
	// lease), in which case the write happens only while that lease is
	// unexpired at that epoch, in the same transaction: otherwise ErrFenced
	// (ErrWorldNotFound if by names no world) and nothing is written. So a
	// deposed orchestrator, paused past its TTL, cannot move a world.
	Assign(ctx context.Context, world string, a Assignment, by *Fence) error
	Unassign(ctx context.Context, world string, by *Fence) error
	GetAssignment(ctx context.Context, world string) (a Assignment, ok bool, err error)
	// CompareAndAssign writes the world's assignment (next; nil removes
	// it) only if it is still prev (nil: none), compared field by field,
	// in one transaction with the check of by (as for Assign): otherwise
	// ErrAssignmentChanged and nothing is written. It is how a placement
	// decided on an earlier read is written without overwriting what
	// landed since (an operator's pin). An assignment that already is next
	// succeeds and writes nothing, so a retry of a write whose answer was
	// lost is not taken for a change. The world must exist
	// (ErrWorldNotFound); a refused fence is ErrFenced.
	CompareAndAssign(ctx context.Context, world string, prev, next *Assignment, by *Fence) error
	// ListWorkerWorlds lists, sorted by world id, up to limit worlds after
	// the id `after` ("" = from the start) whose unexpired lease worker
	// holds or whose assignment names worker, each with its lease and
	// assignment. It is one indexed query per page, so it pages through a
	// million worlds; the last page is shorter than limit.
	ListWorkerWorlds(ctx context.Context, worker, after string, limit int) ([]WorkerWorld, error)
}

// ---- the worker inventory ----

// WorkerInfo is a worker's inventory record, which the orchestrator reads.
type WorkerInfo struct {
	ID          string
	Capacity    int       // worlds it is willing to host
	Draining    bool      // set by an operator: place nothing new here
	HeartbeatAt time.Time // the store's clock at the last Heartbeat
	StartedAt   time.Time // the store's clock at the first Heartbeat
	// Incarnation is the incarnation the last heartbeat named (AliveAs;
	// empty for a worker that never named one).
	Incarnation string
	// AliveUntil is when, by the store's clock, that incarnation is known
	// dead unless it heartbeats again (the last AliveAs heartbeat's time
	// plus its TTL; at the store's time of a RetireWorker of it). Zero: the
	// worker made no such promise, and only claim TTLs recover its work.
	AliveUntil time.Time
	// Capabilities is what the worker last advertised (Advertise), sorted
	// and without duplicates: the roles it runs, the world types, workflow
	// versions and effect kinds it carries (the plane's vocabulary, e.g.
	// "role:host", "world:orders@3"). Empty: a worker that never advertised
	// (an older binary), which HasCapability takes as carrying everything,
	// so that a cluster mid-upgrade keeps placing work on it.
	Capabilities []string
}

// HasCapability reports whether info's worker carries capability c: it
// advertised c, or it advertised nothing at all (an older binary, taken as
// carrying everything).
func HasCapability(info WorkerInfo, c string) bool {
	if len(info.Capabilities) == 0 {
		return true
	}
	_, found := slices.BinarySearch(info.Capabilities, c)
	return found
}

// Dead reports whether the record says its incarnation is known dead at
// now, an instant of the store's clock (Now): it promised liveness
// (AliveUntil) and the promise ran out. Never judge it on a local clock.
func (w WorkerInfo) Dead(now time.Time) bool {
	return !w.AliveUntil.IsZero() && !now.Before(w.AliveUntil)
}

// HeartbeatOption qualifies a Heartbeat.
type HeartbeatOption func(*HeartbeatOptions)

// HeartbeatOptions is what a heartbeat's options resolve to
// (ResolveHeartbeatOptions).
type HeartbeatOptions struct {
	// Incarnation names the process lifetime that beats (the one its
	// leases and claims name; see AcquireOptions.Incarnation). At most
	// MaxIDBytes.
	Incarnation string
	// TTL is how long, from this heartbeat by the store's clock, the
	// incarnation is alive without another one. Positive, at most MaxTTL.
	TTL time.Duration
	set bool
	// Capabilities replaces the recorded list when Advertised (sorted,
	// without duplicates; at most MaxCapabilities of at most MaxKeyBytes
	// each). A heartbeat that does not advertise keeps the recorded list.
	Capabilities []string
	advertised   bool
}

// AliveAs makes a heartbeat a promise of liveness: incarnation of the
// worker is alive for ttl from now, by the store's clock. Once the promise
// runs out, or the incarnation retires (RetireWorker), or another
// incarnation of the worker heartbeats (a restart), its effect and timer
// claims made with ClaimFor are requeued by ReapOrphans without waiting for
// their own TTLs. A heartbeat without it records no promise (AliveUntil
// zero) and keeps the recorded incarnation.
func AliveAs(incarnation string, ttl time.Duration) HeartbeatOption {
	return func(o *HeartbeatOptions) { o.Incarnation, o.TTL, o.set = incarnation, ttl, true }
}

// Promised reports whether the options carry AliveAs.
func (o HeartbeatOptions) Promised() bool { return o.set }

// Advertise makes a heartbeat record caps as the worker's capabilities
// (WorkerInfo.Capabilities), replacing what it recorded before; the list
// is stored sorted and without duplicates. Advertising an empty list
// clears the record, which readers then take as an older binary's: it
// carries everything (HasCapability).
func Advertise(caps []string) HeartbeatOption {
	norm := slices.Clone(caps)
	slices.Sort(norm)
	norm = slices.Compact(norm)
	if norm == nil {
		norm = []string{}
	}
	return func(o *HeartbeatOptions) { o.Capabilities, o.advertised = norm, true }
}

// Advertised reports whether the options carry Advertise.
func (o HeartbeatOptions) Advertised() bool { return o.advertised }

// ResolveHeartbeatOptions applies opts in order and checks the result for
// op (ErrInvalid).
func ResolveHeartbeatOptions(op string, opts []HeartbeatOption) (HeartbeatOptions, error) {
	var o HeartbeatOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.advertised {
		if err := checkCapabilities(op, o.Capabilities); err != nil {
			return o, err
		}
	}
	if !o.set {
		return o, nil
	}
	return o, first(checkOptionalID(op, "incarnation", o.Incarnation), checkTTL(op, "ttl", o.TTL))
}

// ClaimOption qualifies an effect Claim or a timer ClaimDue.
type ClaimOption func(*ClaimOptions)

// ClaimOptions is what a claim's options resolve to (ResolveClaimOptions).
type ClaimOptions struct {
	// Node and Incarnation name the worker record (its id, and the
	// incarnation its AliveAs heartbeats name) whose liveness the claim
	// rides on; empty Node: none, the claim lasts its TTL.
	Node, Incarnation string
}

// ClaimFor makes a claim ride on the liveness of node's incarnation (see
// AliveAs): it is requeued by ReapOrphans as soon as the store knows that
// incarnation dead, and a claim for an incarnation already known dead is
// refused (ErrFenced, nothing claimed), so a stopping or superseded process
// takes no new work.
func ClaimFor(node, incarnation string) ClaimOption {
	return func(o *ClaimOptions) { o.Node, o.Incarnation = node, incarnation }
}

// ResolveClaimOptions applies opts in order and checks the result for op
// (ErrInvalid).
func ResolveClaimOptions(op string, opts []ClaimOption) (ClaimOptions, error) {
	var o ClaimOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.Node == "" {
		if o.Incarnation != "" {
			return o, Errorf(op, ErrInvalid, "", "an incarnation needs its node")
		}
		return o, nil
	}
	return o, first(CheckID(op, "node", o.Node), checkOptionalID(op, "incarnation", o.Incarnation))
}

// Workers is the worker inventory.
type Workers interface {
	// Heartbeat records that worker is alive with capacity (creating its
	// record on the first call). It keeps Draining as it was. With AliveAs
	// it records the incarnation and its promise (AliveUntil = now + TTL);
	// an incarnation that differs from the recorded one supersedes it: the
	// recorded one is retired in the same transaction (as RetireWorker
	// would, its claims requeued), since a new process under the worker's
	// id means the old one is gone or must be treated so. A retired
	// incarnation's heartbeat is ErrFenced and changes nothing, so a
	// process that thaws after its successor started cannot take the
	// record back. With Advertise it replaces the recorded capabilities;
	// without, it keeps them.
	Heartbeat(ctx context.Context, worker string, capacity int, opts ...HeartbeatOption) (WorkerInfo, error)
	// SetDraining marks a worker draining (or not). ErrNotFound if the
	// worker never sent a heartbeat.
	SetDraining(ctx context.Context, worker string, draining bool) (WorkerInfo, error)
	// ListWorkers lists every worker, sorted by id. Liveness is the
	// reader's judgement from HeartbeatAt against Now, or WorkerInfo.Dead.
	ListWorkers(ctx context.Context) ([]WorkerInfo, error)
	// RetireWorker ends worker's incarnation for good (a planned stop):
	// in one transaction it is recorded retired (its later heartbeats are
	// ErrFenced, its ClaimFor claims refused), the worker record, if it
	// names that incarnation, is marked dead now (AliveUntil), and every
	// effect and timer claim made for it is requeued as ReapOrphans would.
	// It returns how many claims it requeued; retiring again is a no-op
	// that returns 0. A worker that never beat: recorded all the same.
	RetireWorker(ctx context.Context, worker, incarnation string) (int, error)
	// ReapOrphans requeues every inflight effect and claimed timer whose
	// claim rides (ClaimFor) on an incarnation the store knows dead, by the
	// store's clock alone: retired (RetireWorker, or superseded by another
	// incarnation's heartbeat), or whose worker record names it and whose
	// AliveUntil has passed. A claim of a live incarnation (one that keeps
	// heartbeating, however slowly it works) is never touched, and
	// neither is one whose incarnation the store has no record of yet (a
	// process that claims before its first heartbeat): its TTL recovers
	// it. A requeued claim is revoked, not kept: its old holder's Complete,
	// Fire or ReleaseEffect is ErrClaimLost (a returning process never
	// records the result of work handed to someone else), and the next
	// claim is attempt+1. An effect of an archived world is withdrawn
	// instead, as by ReapEffects. It returns how many it requeued or
	// withdrew, and hints TopicEffects, TopicTimers as they changed.
	ReapOrphans(ctx context.Context) (int, error)
}

// ---- the durable inbox ----

// The inbox item kinds the store itself writes (vocab.KindReceipt,
// KindTimer, KindFabric): a producer's Enqueue may not use them, and its
// dedupe key may not start
// with ReceiptKeyPrefix or TimerKeyPrefix: the store's delivery keys and
// producers' keys never collide.
const (
	ReceiptKeyPrefix = "receipt:"
	TimerKeyPrefix   = "timer:"
)

// Calls have a namespace of their own: an item of vocab.KindCall is keyed
// CallKeyPrefix + its call id, and no other kind may use a key with that
// prefix. So an event whose idempotency key happens to read "call:X" can
// neither pass for call X (and be dropped as its duplicate) nor make call
// X look answered.
const CallKeyPrefix = "call:"

// UpgradeKeyPrefix is the dedupe-key namespace of upgrade inputs
// (vocab.KindUpgrade): such an input's key is in it, and no other input's
// is, so that no event can take the key of an operator's upgrade.
const UpgradeKeyPrefix = "upgrade:"

// The namespaces of schedules' ticks. A world schedule's tick is an input
// keyed ScheduleKeyPrefix + schedule + ":" + tick, and a workflow
// schedule's tick starts the run ScheduleRunPrefix + schedule + "." + tick:
// those keys and ids are each tick's exactly-once identity across the
// cluster, so no producer may take them first (the tick would then dedupe
// against an unrelated input or run and never happen). An input in the
// key namespace is refused unless it is marked InboxItem.ScheduleTick,
// which the scheduler's path alone sets, and the workflow client refuses
// such run ids on the same terms.
const (
	ScheduleKeyPrefix = "schedule:"
	ScheduleRunPrefix = "sched."
)

// InboxItem is one durable input of a world.
type InboxItem struct {
	Seq        uint64 // assigned by the store, increasing per world
	World      string
	Kind       string // a producer's kind (e.g. "event"), or a store kind
	Payload    []byte
	DedupeKey  string // optional; per-world uniqueness
	EnqueuedAt time.Time
	// MaxBacklog bounds a producer's Enqueue (read by Enqueue only; 0:
	// unbounded): when the world's inbox already holds MaxBacklog items
	// past its cursor (enqueued and not yet drained), the item is refused
	// with ErrOverloaded and nothing is written. The count is checked in
	// the transaction that would insert, so concurrent producers never
	// pass the bound together. A duplicate of an accepted key is answered
	// as a duplicate whatever the backlog. Items the store writes itself
	// (receipts, timer firings, fabric deliveries) never carry a bound: a
	// world's own effects and timers are not ingress and are never shed.
	// RefuseNew accepts no new item at all (a duplicate still answers as
	// one): how a caller that sheds for another reason (an effect queue
	// past its bound) keeps a retry of accepted work answered as a
	// duplicate.
	MaxBacklog int
	// ScheduleTick marks a schedule's tick (read by Enqueue only, like
	// MaxBacklog): its key, and only its, is in ScheduleKeyPrefix's
	// namespace. Only the scheduler sets it; no API or client takes it
	// from a caller.
	ScheduleTick bool
}

// RefuseNew is the InboxItem.MaxBacklog that refuses every new item.
const RefuseNew = -1

// Inbox is the world's durable input queue. Items are kept after
// consumption; a per-world cursor marks what has been drained.
type Inbox interface {
	// Enqueue validates (CheckIngress) and appends item (Kind, Payload,
	// DedupeKey) to world's inbox and returns its seq. A repeated non-empty
	// DedupeKey returns the existing seq with dup=true and enqueues
	// nothing. Enqueue needs no lease: any producer may enqueue, also to a
	// paused world (its input waits). An archived world: ErrWorldArchived.
	// A full inbox (see InboxItem.MaxBacklog): ErrOverloaded, nothing
	// written.
	Enqueue(ctx context.Context, world string, item InboxItem) (seq uint64, dup bool, err error)
	// ReadInbox returns up to limit items with seq > afterSeq, in seq order.
	ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]InboxItem, error)
	// Cursor returns the seq of the last drained item (0 if none).
	Cursor(ctx context.Context, world string) (uint64, error)
	// DrainToJournal is a Commit of only a cursor move and entries.
	DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []Record) ([]Appended, error)
}

// ---- effects (protocols C and D) ----

// EffectStatus is the dedupe record of an intent.
type EffectStatus struct {
	IntentHash  string
	World       string
	Kind        string
	State       vocab.EffectState
	Attempts    int
	Retries     int
	RetryReason string         // the last operator retry's reason
	Receipt     *vocab.Receipt // when done
	InboxSeq    uint64         // the receipt's inbox seq, when done
	CompletedAt time.Time      // when done or withdrawn
	// Resolved is true when the receipt is an operator's (Resolve), not an
	// adapter's (Complete), and ResolveReason is the reason the operator
	// gave. A RetryEffect clears both with the receipt.
	Resolved      bool
	ResolveReason string
	// Failures, RetryAt and LastError are the effect's retry schedule (see
	// RetryLater): the failed executions since it was published or last
	// retried by an operator, when a pending effect may be claimed again
	// (zero: at once), and the latest failure's message.
	Failures  int
	RetryAt   time.Time
	LastError string
	// HoldReason and HeldAt are the latest hold's (HoldEffect), and
	// ReleaseReason the reason of the release that ended it (ReleaseHeld):
	// kept once the effect runs on, as its history. HeldAt is zero for an
	// effect never held.
	HoldReason    string
	HeldAt        time.Time
	ReleaseReason string
}

// ReceiptKey is the inbox dedupe key of an intent's receipt: one terminal
// receipt per intent and per operator retry.
func ReceiptKey(intentHash string, retries int) string {
	if retries == 0 {
		return ReceiptKeyPrefix + intentHash
	}
	return ReceiptKeyPrefix + intentHash + "#" + strconv.Itoa(retries)
}

// ReceiptKeyIntent returns the intent hash a receipt's dedupe key
// (ReceiptKey) names, and false for any other key.
func ReceiptKeyIntent(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, ReceiptKeyPrefix)
	if !ok {
		return "", false
	}
	if i := strings.LastIndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	return rest, rest != ""
}

// TimerKey is the inbox dedupe key of a timer's firing.
func TimerKey(intentHash string) string { return TimerKeyPrefix + intentHash }

// CompleteResult is one completion's answer in a CompleteMany: Complete's
// results.
type CompleteResult struct {
	InboxSeq uint64
	Dup      bool
	Err      error
}

// Effects is the global effect dispatch queue.
type Effects interface {
	// Publish queues the world's new intents, fenced by epoch. An intent
	// whose hash was ever published (pending, inflight or done, until its
	// dedupe record is swept) is skipped. It returns how many were queued.
	Publish(ctx context.Context, world string, epoch uint64, intents []vocab.Intent) (int, error)
	// Claim moves up to n pending items whose Kind is one of kinds (queue
	// order) to inflight for worker, with a claim that expires after
	// claimTTL. kinds must not be empty: an adapter claims what it serves.
	// An effect of an archived world is never handed out.
	// With ClaimFor, the claim rides on the liveness of a worker's
	// incarnation (see ReapOrphans); for one already known dead it is
	// ErrFenced and claims nothing.
	Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...ClaimOption) ([]vocab.EffectItem, error)
	// Complete, atomically: enqueues the receipt into the world's inbox
	// (kind KindReceipt, dedupe key ReceiptKey(intentHash, retries),
	// payload = r.Payload), marks the intent done and removes it from the
	// queue. The status travels in the dedupe record (EffectStatus), not in
	// the inbox item: an adapter whose world must see ok/error/timeout
	// in-band encodes it in the payload. c must be the item's latest claim
	// (its worker and attempt), which stays valid after a reap until
	// another claim: otherwise ErrClaimLost, and nothing changes.
	// Completing a done intent returns the first completion's inbox seq
	// with dup=true whatever the claim (one terminal receipt per intent):
	// a late worker learns its result was not used. The receipt enters the
	// inbox whatever the world's status. An unknown intent: ErrNotFound.
	Complete(ctx context.Context, intentHash string, c vocab.Claim, r vocab.Receipt) (inboxSeq uint64, dup bool, err error)
	// CompleteMany completes several effects in one transaction, each as
	// Complete would alone: one CompleteResult per Completion, in order,
	// with its own typed Err (ErrClaimLost, ErrNotFound, ErrInvalid …).
	// Items are decided in order, so an intent named twice is dup=true on
	// its second occurrence when the first completed it. An item's error
	// does not abort the others: the transaction is there for throughput
	// (one commit for the batch), it is not all-or-nothing, and an invalid
	// item is answered ErrInvalid while the valid ones complete. The
	// call's own error is for the call (context, closed store, more than
	// MaxBatch completions, the database), and then there are no results:
	// nothing completed or, when the answer was lost after the commit (as
	// with any write), the batch did, and a retry answers dup=true for
	// what it completed.
	CompleteMany(ctx context.Context, cs []vocab.Completion) ([]CompleteResult, error)
	// Resolve is an operator's receipt for a pending or inflight effect: it
	// completes the intent exactly as Complete would (receipt into the world's
	// inbox under ReceiptKey(intentHash, retries), intent done, removed from
	// the queue), whatever the claim, with reason recorded as the operator's
	// (EffectStatus.Resolved and ResolveReason). An inflight claim loses the
	// effect: its holder's later Complete answers dup=true (the first
	// terminal receipt wins), as after any other completion. A done intent
	// answers the first completion's seq with dup=true and changes nothing.
	// Unknown intent: ErrNotFound. A receipt that does not validate (status,
	// payload limits), or a reason over its limit: ErrInvalid, nothing
	// written.
	Resolve(ctx context.Context, intentHash string, r vocab.Receipt, reason string) (inboxSeq uint64, dup bool, err error)
	// ReapEffects requeues inflight items whose claim expired (store clock);
	// one of an archived world is withdrawn instead (EffectWithdrawn), and
	// counted all the same.
	ReapEffects(ctx context.Context) (int, error)
	// ReleaseEffect hands a claim back without a receipt (a planned stop
	// that cannot finish the effect, an outcome still unknown): an
	// inflight item whose latest claim is c is pending again at once,
	// claimable without waiting for the claim to expire, and TopicEffects
	// is hinted. As after a reap, its attempt count is kept (the next
	// claim is attempt+1) and c stays its latest claim until then. A
	// pending item whose latest claim is c (reaped, or released already)
	// is a no-op, so a retried release succeeds. Another claim, or a done
	// or withdrawn intent: ErrClaimLost, nothing changes. Unknown intent:
	// ErrNotFound. An effect of a world archived since its claim is
	// withdrawn instead of requeued: no claim serves an archived world.
	ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error
	// RetryLater hands a claim back after a failed execution that the
	// effect's retry policy runs again: as ReleaseEffect, but the item is
	// claimable only once delay has passed by the store's clock (its
	// RetryAt), its Failures count rises by one and lastError is kept
	// (EffectStatus.LastError). So a retry schedule outlives the worker
	// that made it, and the next attempt's time is judged by one clock,
	// the store's. A pending item whose latest claim is c is a no-op, so a
	// retried call neither counts twice nor moves the time. Another claim,
	// or a done or withdrawn intent: ErrClaimLost; unknown: ErrNotFound;
	// an effect of a world archived since its claim is withdrawn.
	RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error
	// NextRetry returns how long, by the store's clock, until the earliest
	// pending effect of one of kinds that waits for its RetryAt becomes
	// claimable (ok=false: none waits), so a pool parks until then rather
	// than comparing the store's instant with its own clock.
	NextRetry(ctx context.Context, kinds []string) (wait time.Duration, ok bool, err error)
	// RetryEffect is an operator's retry of an effect whose terminal
	// receipt was error or timeout: it goes back to pending with Retries+1
	// and reason recorded, its retry schedule cleared (Failures 0,
	// claimable at once), keeping its intent hash; its next completion
	// delivers a new receipt (ReceiptKey with the new retry count). Any
	// other state: ErrNotRetryable. Unknown: ErrNotFound. An effect of an
	// archived world: ErrWorldArchived (an ended world asks for nothing
	// more, and no claim would hand the retry out).
	RetryEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error)
	// EffectStatus reads an intent's dedupe record.
	EffectStatus(ctx context.Context, intentHash string) (EffectStatus, error)
	// HoldEffect is an operator's hold (vocab.EffectHeld): a pending or
	// inflight effect is kept from every adapter until ReleaseHeld or
	// Resolve, with reason and the store's time recorded. An inflight
	// effect's claim is revoked in the same transaction: its holder's
	// Complete, ReleaseEffect and RetryLater are ErrClaimLost, so nothing
	// an execution already under way reports moves the effect on (the
	// operator, who holds it because it may have run, decides instead);
	// the orphan and expiry reapers leave a held effect alone. Holding a
	// held effect is a no-op (its first hold's reason and time are kept).
	// A done or withdrawn effect: ErrEffectEnded, but for one whose latest
	// hold had this very reason (not empty), which answers its status and
	// no error: a hold retried after its answer was lost, the effect
	// released and ended since (or withdrawn by its world's archiving), is
	// told the hold happened. Unknown: ErrNotFound.
	HoldEffect(ctx context.Context, intentHash, reason string) (EffectStatus, error)
	// ReleaseHeld is an operator's release of a held effect: pending
	// again and claimable at once (its retry wait cleared), reason
	// recorded (EffectStatus.ReleaseReason), TopicEffects hinted. Its next
	// claim is attempt+1 and runs the effect under its unchanged intent
	// hash, which adapters send as the idempotency key. Releasing a
	// pending or inflight effect is a no-op. Done or withdrawn:
	// ErrEffectEnded, but for one whose hold was ended by a release with
	// this very reason (not empty), which answers its status and no
	// error: a release retried after its answer was lost (the release
	// withdrew an archived world's effect, or the effect ran and ended
	// since) is told the release happened. Unknown: ErrNotFound.
	ReleaseHeld(ctx context.Context, intentHash, reason string) (EffectStatus, error)
	// HoldOpenEffects holds every pending and inflight effect of the store
	// in one transaction, as HoldEffect holds one (a restore's first
	// step: none of them runs again before an operator decides). It
	// returns how many effects are held under reason once it is done:
	// those it held and those held under the same reason before, so a
	// call retried after its answer was lost returns what the first
	// attempt would have (unless other holds under that reason came or
	// went in between).
	HoldOpenEffects(ctx context.Context, reason string) (int, error)
	// ReleaseAllHeld releases every held effect in one transaction, as
	// ReleaseHeld releases one, and returns how many.
	ReleaseAllHeld(ctx context.Context, reason string) (int, error)
}

// ---- timers (protocol E) ----

// TimerState is where a timer is in its life.
type TimerState string

const (
	TimerScheduled TimerState = "scheduled" // waiting for its due time, or due and unclaimed
	TimerClaimed   TimerState = "claimed"
	TimerDelivered TimerState = "delivered"
)

// TimerItem is a durable timer.
type TimerItem struct {
	World        string
	IntentHash   string
	DeliverAt    time.Time
	Payload      []byte
	State        TimerState
	Attempt      int    // claims so far
	ClaimedBy    string // the latest claim's worker (kept by a reap)
	ClaimExpires time.Time
}

// ClaimOf returns the claim of a claimed timer.
func (t TimerItem) ClaimOf() vocab.Claim { return vocab.Claim{Worker: t.ClaimedBy, Attempt: t.Attempt} }

// HeldFiring answers a FireHeld.
type HeldFiring struct {
	// Item is the firing in the world's inbox: every field as ReadInbox
	// returns it, or, when Dup, only Seq (the first delivery's).
	Item InboxItem
	// Dup: the timer had been delivered already (by a timer worker or an
	// earlier FireHeld); nothing was written.
	Dup bool
	// DueAt is the timer's due time and Now the store's clock at the
	// decision. With ErrNotDue they say how long to wait (DueAt − Now,
	// measured on any clock: the store's need not be the caller's).
	DueAt time.Time
	Now   time.Time
}

// Timers is the durable timer queue.
type Timers interface {
	// Schedule persists a timer, fenced by epoch; the same intent hash again
	// is a no-op (dedupe).
	Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error
	// CancelTimer removes a timer that has not fired, fenced by epoch, with
	// its dedupe record: scheduling the same intent hash again afterwards
	// schedules it anew (a world that replays a cancelled timer.set must
	// replay its cancel too). Unknown, another world's or fired: ErrNotFound.
	CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error
	// ClaimDue claims up to n timers due at the store's clock, in (deliverAt,
	// intentHash) order, so timers due at the same instant fire in a stable
	// order. ClaimFor as for Effects.Claim.
	ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...ClaimOption) ([]TimerItem, error)
	// Fire, atomically: enqueues the timer-fired item into the world's inbox
	// (kind KindTimer, dedupe key TimerKey(intentHash)), marks the timer
	// delivered and removes it. The timer must be due by the store's clock
	// (ErrNotDue) and c its latest claim (ErrClaimLost), as for Complete.
	// Firing a delivered timer returns the first delivery's seq with
	// dup=true whatever the claim.
	Fire(ctx context.Context, intentHash string, c vocab.Claim) (inboxSeq uint64, dup bool, err error)
	// FireHeld is the firing of a timer by the holder of its world's lease,
	// which knows the timer (its own commit scheduled it) and so needs no
	// claim. Atomically, fenced by world's lease at epoch as Commit is
	// (ErrFenced, ErrWorldNotFound): the timer must be world's (an unknown,
	// cancelled or other world's timer: ErrNotFound) and due by the store's
	// clock (ErrNotDue, with HeldFiring.DueAt and Now set so that the
	// caller can come back when it is due); a delivered timer answers its
	// first delivery (Dup, Item.Seq); otherwise, scheduled or claimed by a
	// timer worker, it is fired exactly as Fire fires it (the same inbox
	// item, the timer delivered, the same hints), and the timer worker's
	// later Fire of it answers dup=true. Item is then the firing as
	// ReadInbox returns it, so the holder may step it without reading.
	FireHeld(ctx context.Context, world string, epoch uint64, intentHash string) (HeldFiring, error)
	// ReapTimers requeues claimed timers whose claim expired.
	ReapTimers(ctx context.Context) (int, error)
	// NextDue returns the earliest DeliverAt of an unclaimed, undelivered
	// timer (ok=false if none), so a timer worker sleeps until then.
	NextDue(ctx context.Context) (at time.Time, ok bool, err error)
}

// ---- fabric (protocol F) ----

// FabricStatus is the outcome of a fabric send.
type FabricStatus string

const (
	FabricOK              FabricStatus = "ok"
	FabricAlreadyEnqueued FabricStatus = "already_enqueued"
)

// FabricResult answers a send.
type FabricResult struct {
	Status FabricStatus
	Seq    uint64 // the destination inbox seq (of the first delivery)
}

// Fabric delivers messages between worlds exactly once per message id.
type Fabric interface {
	// Send enqueues item's payload into dest's inbox (kind KindFabric)
	// unless messageID was already delivered there (FabricAlreadyEnqueued,
	// also when dest was archived since: a retry whose first answer was
	// lost learns the message took effect). An archived or unknown
	// destination is an error (ErrWorldArchived, ErrWorldNotFound), never a
	// silent drop; a paused one accepts it.
	Send(ctx context.Context, dest, messageID string, item InboxItem) (FabricResult, error)
}

// ---- snapshots ----

// Snapshot is a world state at a journal height.
type Snapshot struct {
	World     string
	Height    uint64
	State     []byte
	StateHash string
	CreatedAt time.Time
}

// Snapshots stores baselines and compacts the journal below them.
type Snapshots interface {
	// PutSnapshot stores a snapshot, fenced by epoch, and makes it the
	// active baseline if its height is above the current one. Its height
	// must not pass the journal head and its StateHash must not be empty
	// (ErrInvalid). The same snapshot again (same height and state hash) is
	// a no-op; another state hash at a stored height is
	// ErrSnapshotConflict.
	PutSnapshot(ctx context.Context, world string, epoch uint64, s Snapshot) error
	// ActiveSnapshot returns the active baseline (ok=false if none).
	ActiveSnapshot(ctx context.Context, world string) (s Snapshot, ok bool, err error)
	// SnapshotBelow returns the stored snapshot with the greatest height
	// below height, the active baseline or an older one (ok=false if
	// none): the state from which the step at that height can be derived
	// again. A forked or seeded world's first snapshot is its genesis.
	SnapshotBelow(ctx context.Context, world string, height uint64) (s Snapshot, ok bool, err error)
	// Compact deletes journal entries with runSeq <= baseline.Height -
	// retain, fenced by epoch, and returns how many were removed. Nothing at
	// or above the active baseline minus retain is ever removed. Compaction
	// is the only path that deletes journal records, and the idempotency
	// keys of compacted events are kept: re-appending one still returns
	// idempotent (without its metadata's payload, which is gone). In the
	// same transaction the stream's floor (Journal.Floor) rises to
	// baseline.Height - retain (it never falls), so a reader below it is
	// told, not handed a gap.
	Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error)
}

// ---- worlds ----

// WorldStatus is a world's operational status: an operator's decision,
// never a worker's. (A worker whose renewal fails fences itself locally;
// the store fences its writes by epoch. Neither is a stored status.)
type WorldStatus string

const (
	// WorldActive: leases may be acquired and the world runs.
	WorldActive WorldStatus = "active"
	// WorldPaused: no lease may be acquired (ErrWorldPaused); input is
	// still accepted and waits in the inbox. Resuming makes it active.
	WorldPaused WorldStatus = "paused"
	// WorldArchived: final. No lease, no new input (ErrWorldArchived);
	// receipts and timer firings of its own requests still land. Its
	// pending and held effects were withdrawn when it was archived, and none of its
	// effects is ever claimed again (a reaped claim is withdrawn, not
	// requeued).
	WorldArchived WorldStatus = "archived"
)

// World is a world's record.
type World struct {
	ID                 string
	Universe           string
	Status             WorldStatus
	StatusReason       string    // the operator's reason for the last status change
	StatusChangedAt    time.Time // zero until the first change
	ParentWorld        string
	ParentSnapshotHash string
	ForkedAtHeight     uint64
	CreatedAt          time.Time
}

// SpawnSpec is a world to create with its first inbox items and,
// optionally, its first lease (see Worlds.Spawn).
type SpawnSpec struct {
	Universe string
	World    string
	Items    []InboxItem   // Kind, Payload and DedupeKey are read
	Holder   string        // empty: no lease is taken
	TTL      time.Duration // the lease's; required with Holder
	// Incarnation is Holder's incarnation, which the lease records as an
	// Acquire's (store.WithIncarnation); only with Holder.
	Incarnation string
	// Events, when set, open the world's journal: appended at heights
	// 1…n in the same transaction, under the new lease (Holder is
	// required), as a fenced Append with ExpectedHead 0 would append
	// them. It is how a workflow run records its start and its first
	// step's start in the write that creates it. They are checked as
	// Append checks them; an idempotency key given twice among them is
	// ErrInvalid.
	Events []Record
}

// Spawned answers a Spawn.
type Spawned struct {
	World    World
	Seqs     []uint64   // the items' seqs, in order
	Lease    Lease      // zero unless SpawnSpec.Holder was set
	Appended []Appended // one per event, in order (none is a duplicate)
}

// Worlds manages world records.
type Worlds interface {
	// CreateWorld creates an active world, optionally seeded from a
	// snapshot (its baseline; the head is the snapshot's height; its
	// StateHash must not be empty). ErrWorldExists if the id is taken.
	CreateWorld(ctx context.Context, universe, world string, seed *Snapshot) (World, error)
	// Spawn creates an active world, enqueues its first inbox items and,
	// when Holder is set, acquires its lease for Holder: one transaction,
	// all of it or nothing. It is how a workflow run starts already held
	// by the worker that will run it, in one write instead of three.
	// ErrWorldExists (nothing written) when the id is taken, as for
	// CreateWorld. Each item is checked as Enqueue checks it (CheckSpawn:
	// store kinds and key namespaces refused, a dedupe key repeated among
	// Items is ErrInvalid); they get seqs 1…n in order. The lease is the
	// world's first (epoch 1), expiring TTL after the store's now. The
	// hints are those the three separate calls would raise.
	Spawn(ctx context.Context, s SpawnSpec) (Spawned, error)
	// ForkWorld creates newWorld from src's snapshot at height, in one
	// transaction: its baseline is that snapshot, its head is the height,
	// its inbox is empty, lineage is recorded, and it has no effects,
	// timers or dedupe records. ErrSnapshotNotFound, ErrWorldExists.
	ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (World, error)
	// ForkWorldFrom is ForkWorld from a state the caller derived rather
	// than a stored snapshot: newWorld's baseline is base (its World field
	// ignored) at base.Height, which must not pass src's journal head
	// (ErrInvalid), and its lineage names src, base.Height and
	// base.StateHash. It is how a world forks at any height of its
	// journal: the plane replays src up to the height and hands the
	// state here. The store cannot check that base is src's state at that
	// height; the caller vouches for it. ErrWorldNotFound (src),
	// ErrWorldExists (newWorld), in one transaction as ForkWorld.
	ForkWorldFrom(ctx context.Context, src string, base Snapshot, newWorld string) (World, error)
	GetWorld(ctx context.Context, world string) (World, error)
	// ListWorlds lists a universe's worlds sorted by id ("" = every status).
	ListWorlds(ctx context.Context, universe string, status WorldStatus) ([]World, error)
	// SetWorldStatus is the operator's path: it needs no lease, records
	// reason and the store's time, and returns the new record. Allowed:
	// active <-> paused, active|paused -> archived; the same status again
	// is a no-op that keeps the recorded reason. Leaving active ends the
	// current lease in the same transaction (holder cleared, epoch kept),
	// so its holder is fenced at once and the next Acquire after a resume
	// gets a higher epoch. From archived: ErrWorldArchived. An unknown
	// status: ErrInvalid. Archiving withdraws the world's pending and held
	// effects in the same transaction (EffectWithdrawn): an ended world asks for
	// nothing more. An effect inflight at that moment may be executing;
	// its receipt still enters the archived world's inbox, where nobody
	// reads it.
	SetWorldStatus(ctx context.Context, world string, status WorldStatus, reason string) (World, error)
}

// ---- projector watermarks ----

// Watermarks are the per (projector, stream) progress of projectors.
type Watermarks interface {
	GetWatermark(ctx context.Context, projector, stream string) (uint64, error)
	// CASWatermark sets the watermark to next if it is old, else
	// ErrWatermarkConflict.
	CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error
}

// ---- dedupe retention ----

// Dedupe sweeps dedupe records: inbox dedupe keys, effect, timer and fabric
// records. A record completes as follows, and is kept at least for the
// store's retention after that:
//
//   - an inbox dedupe key, when the cursor passes its item;
//   - an effect record, when its receipt has been consumed: it is done
//     and the world's cursor has passed the receipt's inbox seq. So no
//     world that stays offline past the retention can re-publish an intent
//     and run its effect twice: its record lives until the world reads the
//     receipt;
//   - a timer record, likewise, when the world's cursor has passed its
//     firing's inbox seq;
//   - a fabric record, at Send.
//
// Pending records are never swept.
type Dedupe interface {
	// SweepDedupe removes completed records whose completion + retention is
	// at or before the store's clock, and returns how many.
	SweepDedupe(ctx context.Context) (int, error)
	// DedupeRetention returns the configured retention.
	DedupeRetention() time.Duration
}

// DefaultDedupeRetention is the retention unless a backend is told otherwise.
const DefaultDedupeRetention = 7 * 24 * time.Hour

// ---- read-only views for operations ----

// QueueDepths are the global queue gauges.
type QueueDepths struct {
	EffectsPending  int64
	EffectsInflight int64
	EffectsHeld     int64 // waiting for an operator (HoldEffect)
	TimersScheduled int64 // not yet claimed (due or not)
	TimersClaimed   int64
	InboxBacklog    int64 // enqueued, not yet drained, over all worlds
}

// Views read queue state for operators and metrics without changing it.
type Views interface {
	// ListEffects lists up to limit of world's pending, inflight and held effects
	// with queue seq > afterSeq, in queue order.
	ListEffects(ctx context.Context, world string, afterSeq uint64, limit int) ([]vocab.EffectItem, error)
	// ListTimers lists up to limit of world's scheduled and claimed timers
	// in (deliverAt, intentHash) order.
	ListTimers(ctx context.Context, world string, limit int) ([]TimerItem, error)
	// QueueDepths reads the gauges.
	QueueDepths(ctx context.Context) (QueueDepths, error)
	// PendingEffects counts the pending effects of each kind (waiting to
	// be claimed, a retry wait included; not inflight, held or ended);
	// kinds with none are absent. It is an indexed count, read by the
	// plane's ingress admission (a bounded effect queue per kind) from a
	// cache it refreshes, never per request.
	PendingEffects(ctx context.Context) (map[string]int64, error)
	// QueryEffects lists, across worlds, up to f.Limit effect records that
	// pass f's filters with queue seq > f.AfterSeq, in seq order: pending,
	// inflight and held effects and the done and withdrawn records kept until
	// swept. A page is keyset-paged: the next page starts after the last
	// seq of this one, so rows written meanwhile never shift a page and
	// every row is listed once. An unknown world is an empty page.
	QueryEffects(ctx context.Context, f EffectFilter) ([]vocab.EffectItem, error)
	// QueryTimers lists, across worlds, up to f.Limit timers that pass f's
	// filters and come after f.After in (deliverAt, intentHash) order:
	// scheduled and claimed timers and the delivered ones kept until
	// swept. Keyset-paged as QueryEffects.
	QueryTimers(ctx context.Context, f TimerFilter) ([]TimerItem, error)
}

// MaxListLimit bounds one page of QueryEffects and QueryTimers. A larger
// limit is refused (ErrInvalid), not clamped, so a caller never mistakes a
// short page for the end of the list.
const MaxListLimit = 1000

// EffectFilter selects a page of QueryEffects. Empty fields match
// everything; States matches a row in any of its states.
type EffectFilter struct {
	World    string
	Kind     string
	States   []vocab.EffectState // any of pending, inflight, held, done, withdrawn
	AfterSeq uint64              // the last seq of the page before (0: from the start)
	Limit    int                 // [0, MaxListLimit]
}

// TimerFilter selects a page of QueryTimers. Empty fields match
// everything; States matches a row in any of its states.
type TimerFilter struct {
	World  string
	States []TimerState // any of scheduled, claimed, delivered
	After  TimerCursor  // zero: from the start
	Limit  int          // [0, MaxListLimit]
}

// TimerCursor is a place in (deliverAt, intentHash) order: the last timer
// of the page before.
type TimerCursor struct {
	DeliverAt  time.Time
	IntentHash string
}

// IsZero reports whether c is the start of the list.
func (c TimerCursor) IsZero() bool { return c.IntentHash == "" }

// CursorOf is the cursor that pages on after t.
func (t TimerItem) CursorOf() TimerCursor {
	return TimerCursor{DeliverAt: t.DeliverAt, IntentHash: t.IntentHash}
}

// ---- errors ----

var (
	ErrLeaseHeld         = errors.New("store: lease held by another worker")
	ErrNotHolder         = errors.New("store: not the lease holder")
	ErrStaleEpoch        = errors.New("store: stale epoch")
	ErrNotAssigned       = errors.New("store: world assigned to another worker")
	ErrFenced            = errors.New("store: fenced")
	ErrHeadMismatch      = errors.New("store: journal head mismatch")
	ErrCursorMismatch    = errors.New("store: inbox cursor mismatch")
	ErrWorldNotFound     = errors.New("store: world not found")
	ErrWorldExists       = errors.New("store: world exists")
	ErrWorldPaused       = errors.New("store: world paused")
	ErrWorldArchived     = errors.New("store: world archived")
	ErrSnapshotNotFound  = errors.New("store: snapshot not found")
	ErrSnapshotConflict  = errors.New("store: another snapshot at that height")
	ErrClaimLost         = errors.New("store: claim lost")
	ErrNotDue            = errors.New("store: timer not due")
	ErrNotRetryable      = errors.New("store: effect not retryable")
	ErrEffectEnded       = errors.New("store: effect done or withdrawn")
	ErrNotFound          = errors.New("store: not found")
	ErrWatermarkConflict = errors.New("store: watermark conflict")
	ErrInvalid           = errors.New("store: invalid argument")
	ErrClosed            = errors.New("store: closed")
	// ErrAssignmentChanged: a CompareAndAssign found the assignment no
	// longer what its caller read.
	ErrAssignmentChanged = errors.New("store: assignment changed")
	// ErrUnavailable: the database could not be reached, or the
	// connection was lost (a restart, a terminated backend, a network
	// cut) before it answered. The operation may or may not have taken
	// effect: retry it (every write is idempotent by its key or fenced by
	// its epoch), never report it as failed. See Unavailable.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrOverloaded: ingress was refused because a bound was reached (a
	// world's inbox backlog, see InboxItem.MaxBacklog). Nothing was
	// written: the same request, dedupe key included, may be retried once
	// the world has drained.
	ErrOverloaded = errors.New("store: overloaded")
)

// Backlog is the undrained depth of an inbox whose last item has seq last
// and whose cursor is cursor: the seq distance, which is the item count
// while seqs are gapless and never less than it otherwise, so a bound on
// it refuses early rather than late.
func Backlog(last, cursor uint64) uint64 {
	if last <= cursor {
		return 0
	}
	return last - cursor
}

// Overloaded reports whether an inbox with backlog undrained items is full
// under bound max (0: unbounded; RefuseNew: always).
func Overloaded(backlog uint64, max int) bool {
	return max == RefuseNew || (max > 0 && backlog >= uint64(max))
}

// Unavailable is the Kind of a *Error whose cause is a lost or refused
// connection: it matches ErrUnavailable, and errors.Is and errors.As still
// reach cause (the driver's error).
func Unavailable(cause error) error { return &unavailable{cause: cause} }

type unavailable struct{ cause error }

func (u *unavailable) Error() string {
	if u.cause == nil {
		return ErrUnavailable.Error()
	}
	return ErrUnavailable.Error() + " (" + u.cause.Error() + ")"
}
func (u *unavailable) Is(target error) bool { return target == ErrUnavailable }
func (u *unavailable) Unwrap() error        { return u.cause }

// Error is the typed error of every store operation: Kind is one of the
// sentinels above (errors.Is matches it), the rest says where.
type Error struct {
	Op     string // e.g. "append", "acquire"
	Kind   error
	World  string
	Detail string
}

func (e *Error) Error() string {
	msg := e.Op + ": " + e.Kind.Error()
	if e.World != "" {
		msg += " (world " + e.World + ")"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Kind }

// Errorf builds an *Error.
func Errorf(op string, kind error, world, format string, args ...any) *Error {
	return &Error{Op: op, Kind: kind, World: world, Detail: fmt.Sprintf(format, args...)}
}
