// Package store defines Orrery's persistence plane: the append authority
// (seed 001), leases with fencing epochs, the durable inbox, the effect and
// timer queues, fabric delivery, snapshots, worlds, projector watermarks and
// dedupe retention (seed 002, protocols A–F). It owns the interfaces and the
// typed errors; the backends (store/memstore, store/sqlite, store/postgres)
// implement them, and store/storetest is the one conformance suite all of
// them pass unchanged.
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
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/event"
)

// Store is the whole persistence plane of one backend.
type Store interface {
	Journal
	Leases
	Inbox
	Effects
	Timers
	Fabric
	Snapshots
	Worlds
	Watermarks
	Dedupe
	// Watch returns a channel that receives a hint (coalesced, buffer 1)
	// whenever something may have changed on topic (see Topic*). Stop it by
	// calling the returned function or cancelling ctx.
	Watch(ctx context.Context, topic string) (<-chan struct{}, func())
	// Now reads the store's clock (persistedAt, expiries, due times).
	Now(ctx context.Context) (time.Time, error)
	Close() error
}

// Notification topics.
const (
	TopicEffects = "effects"
	TopicTimers  = "timers"
)

// TopicInbox is the topic of one world's inbox.
func TopicInbox(world string) string { return "inbox:" + world }

// Fence is the lease epoch a world mutation is made under.
type Fence struct {
	World string
	Epoch uint64
}

// ---- the append authority (seed 001) ----

// Record is one journal entry: the seed 001 envelope, defined once in
// event/ (its validation, idempotency key and canonical payload encoding
// live there). The store treats Payload as opaque bytes.
type Record = event.Envelope

// CheckRecord checks what the append authority itself requires of an input
// record: an event id, an idempotency key, an event type, and attempts of at
// least 1. Full envelope validation (key recomputation, canonical payload,
// step rules) is the producer's, through event.Envelope.Validate: the store
// never interprets what it stores.
func CheckRecord(r *Record) error {
	switch {
	case r.EventID == "":
		return Errorf("append", ErrInvalid, "", "empty eventId")
	case r.IdempotencyKey == "":
		return Errorf("append", ErrInvalid, "", "event %s: empty idempotencyKey", r.EventID)
	case r.EventType == "":
		return Errorf("append", ErrInvalid, "", "event %s: empty eventType", r.EventID)
	case r.LogicalAttemptID < 1:
		return Errorf("append", ErrInvalid, "", "event %s: logicalAttemptId must be >= 1", r.EventID)
	case r.EngineAttemptID < 1:
		return Errorf("append", ErrInvalid, "", "event %s: engineAttemptId must be >= 1", r.EventID)
	}
	return nil
}

// AppendOptions qualify an append.
type AppendOptions struct {
	// ExpectedHead, when set, makes the append a compare-and-swap on the
	// stream's head (the runSeq of its last event; 0 for an empty stream).
	// A mismatch fails with ErrHeadMismatch and inserts nothing. A batch
	// whose every event is a duplicate returns the existing metadata
	// without checking the head, so a retried append stays idempotent.
	ExpectedHead *uint64
	// Fence, when set, makes the append a world mutation checked against the
	// world's lease epoch in the same transaction.
	Fence *Fence
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
}

// Journal is the append authority: one append-only stream per run/world.
type Journal interface {
	// Append validates and appends events to stream in one transaction and
	// returns, for each event in order, its metadata. runSeq is assigned by
	// the store, monotonic per stream (gaps allowed); persistedAt comes from
	// the store's clock; StreamID, RunSeq and PersistedAt of the inputs are
	// ignored. A duplicate (stream, idempotencyKey), within the batch or
	// against stored records, returns the existing metadata, marked
	// idempotent, and inserts nothing — also when concurrent appenders race
	// on the same key.
	Append(ctx context.Context, stream string, events []Record, opts AppendOptions) ([]Appended, error)
	// Read returns up to limit events with runSeq > afterSeq, in runSeq order.
	Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]Record, error)
	// Head returns the runSeq of the stream's last event (0 when empty; for
	// a forked or seeded world, the snapshot height until the first append).
	Head(ctx context.Context, stream string) (uint64, error)
	// ReadWindow returns up to limit events of stream with from <= persistedAt
	// < to, in runSeq order: the audit window (seed 001 §2.2).
	ReadWindow(ctx context.Context, stream string, from, to time.Time, limit int) ([]Record, error)
}

// ---- leases (protocols A and B) ----

// Lease is the per-world lease record. Epochs strictly increase per world
// and are never reused, including after a release.
type Lease struct {
	World     string
	Holder    string // empty after release
	Epoch     uint64
	ExpiresAt time.Time
}

// Assignment is the orchestrator's desired placement of a world.
type Assignment struct {
	DesiredWorker string
	Priority      int
	Reason        string
}

// Leases implements protocols A and B.
type Leases interface {
	// Acquire takes the world's lease for worker if it is absent, released
	// or expired (by the store's clock), with epoch = previous epoch + 1.
	// A worker that already holds an unexpired lease gets it back unchanged
	// (idempotent). Another unexpired holder: ErrLeaseHeld. An assignment
	// naming another desired worker: ErrNotAssigned. The world must exist
	// and be active.
	Acquire(ctx context.Context, world, worker string, ttl time.Duration) (Lease, error)
	// Renew extends the lease if worker holds it at epoch: ErrNotHolder if
	// another worker holds it (or nobody), ErrStaleEpoch if the epoch moved.
	Renew(ctx context.Context, world, worker string, epoch uint64, ttl time.Duration) (Lease, error)
	// Release gives the lease up; the epoch counter is kept.
	Release(ctx context.Context, world, worker string, epoch uint64) error
	// GetLease returns the current lease record (ok=false if never leased).
	GetLease(ctx context.Context, world string) (lease Lease, ok bool, err error)
	// Assign and Unassign write the desired placement; GetAssignment reads it.
	Assign(ctx context.Context, world string, a Assignment) error
	Unassign(ctx context.Context, world string) error
	GetAssignment(ctx context.Context, world string) (a Assignment, ok bool, err error)
	// WorkerWorlds lists, sorted, the worlds whose unexpired lease worker
	// holds or whose assignment names worker.
	WorkerWorlds(ctx context.Context, worker string) ([]string, error)
}

// ---- the durable inbox ----

// InboxItem is one durable input of a world.
type InboxItem struct {
	Seq        uint64 // assigned by the store, increasing per world
	World      string
	Kind       string // e.g. "event", "receipt", "timer", "fabric"
	Payload    []byte
	DedupeKey  string // optional; per-world uniqueness
	EnqueuedAt time.Time
}

// Inbox is the world's durable input queue. Items are kept after
// consumption; a per-world cursor marks what has been drained.
type Inbox interface {
	// Enqueue appends item (Kind, Payload, DedupeKey) to world's inbox and
	// returns its seq. A repeated non-empty DedupeKey returns the existing
	// seq with dup=true and enqueues nothing. Enqueue needs no lease: any
	// producer may enqueue. A fenced or archived world: ErrWorldFenced or
	// ErrWorldArchived.
	Enqueue(ctx context.Context, world string, item InboxItem) (seq uint64, dup bool, err error)
	// ReadInbox returns up to limit items with seq > afterSeq, in seq order.
	ReadInbox(ctx context.Context, world string, afterSeq uint64, limit int) ([]InboxItem, error)
	// Cursor returns the seq of the last drained item (0 if none).
	Cursor(ctx context.Context, world string) (uint64, error)
	// DrainToJournal appends entries to the world's journal and moves the
	// inbox cursor from expectedCursor to newCursor, in one transaction,
	// fenced by epoch and compare-and-swapped on both the cursor
	// (ErrCursorMismatch) and the journal head (ErrHeadMismatch). newCursor
	// must not pass the last enqueued seq.
	DrainToJournal(ctx context.Context, world string, epoch uint64, expectedCursor, expectedHead, newCursor uint64, entries []Record) ([]Appended, error)
}

// ---- effects (protocols C and D) ----

// Intent is an effect a world asks for; IntentHash identifies it forever.
type Intent struct {
	IntentHash        string
	Kind              string // e.g. "http.request", "fabric.send"
	Params            []byte // CBOR
	Origin            string
	PolicyContextHash string
}

// EffectItem is a queued (pending or claimed) effect.
type EffectItem struct {
	Intent
	World        string
	Seq          uint64 // queue order
	EnqueuedAt   time.Time
	Attempt      int // 1 on the first claim, +1 per reclaim
	ClaimedBy    string
	ClaimExpires time.Time
}

// ReceiptStatus is the terminal state of an effect.
type ReceiptStatus string

const (
	ReceiptOK      ReceiptStatus = "ok"
	ReceiptError   ReceiptStatus = "error"
	ReceiptTimeout ReceiptStatus = "timeout"
)

// Receipt is an effect's result, delivered to the world's inbox.
type Receipt struct {
	Status  ReceiptStatus
	Payload []byte
}

// EffectState is where an intent is in its life.
type EffectState string

const (
	EffectPending  EffectState = "pending"
	EffectInflight EffectState = "inflight"
	EffectDone     EffectState = "done"
)

// EffectStatus is the dedupe record of an intent.
type EffectStatus struct {
	IntentHash  string
	World       string
	State       EffectState
	Attempts    int
	Receipt     *Receipt // when done
	InboxSeq    uint64   // the receipt's inbox seq, when done
	CompletedAt time.Time
}

// Effects is the global effect dispatch queue.
type Effects interface {
	// Publish queues the world's new intents, fenced by epoch. An intent
	// whose hash was ever published (pending, inflight or done, until its
	// dedupe record is swept) is skipped. It returns how many were queued.
	Publish(ctx context.Context, world string, epoch uint64, intents []Intent) (int, error)
	// Claim moves up to n pending items (queue order) to inflight for
	// worker, with a claim that expires after claimTTL.
	Claim(ctx context.Context, worker string, n int, claimTTL time.Duration) ([]EffectItem, error)
	// Complete, atomically: enqueues the receipt into the world's inbox
	// (kind "receipt", dedupe key "receipt:"+intentHash, payload =
	// r.Payload), marks the intent done and removes it from the queue. The
	// status travels in the dedupe record (EffectStatus), not in the inbox
	// item: an adapter whose world must see ok/error/timeout in-band encodes
	// it in the payload (the plane's receipt encoding does). Completing a done intent returns
	// the first completion's inbox seq with dup=true (one terminal receipt
	// per intent). An unknown intent: ErrNotFound.
	Complete(ctx context.Context, intentHash string, r Receipt) (inboxSeq uint64, dup bool, err error)
	// ReapEffects requeues inflight items whose claim expired (store clock).
	ReapEffects(ctx context.Context) (int, error)
	// EffectStatus reads an intent's dedupe record.
	EffectStatus(ctx context.Context, intentHash string) (EffectStatus, error)
}

// ---- timers (protocol E) ----

// TimerItem is a durable timer.
type TimerItem struct {
	World        string
	IntentHash   string
	DeliverAt    time.Time
	Payload      []byte
	Attempt      int
	ClaimedBy    string
	ClaimExpires time.Time
}

// Timers is the durable timer queue.
type Timers interface {
	// Schedule persists a timer, fenced by epoch; the same intent hash again
	// is a no-op (dedupe).
	Schedule(ctx context.Context, world string, epoch uint64, intentHash string, deliverAt time.Time, payload []byte) error
	// CancelTimer removes a timer that has not fired, fenced by epoch, with
	// its dedupe record: scheduling the same intent hash again afterwards
	// schedules it anew (a world that replays a cancelled timer.set must
	// replay its cancel too).
	CancelTimer(ctx context.Context, world string, epoch uint64, intentHash string) error
	// ClaimDue claims up to n timers due at the store's clock, in (deliverAt,
	// intentHash) order, so timers due at the same instant fire in a stable
	// order.
	ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration) ([]TimerItem, error)
	// Fire, atomically: enqueues the timer-fired item into the world's inbox
	// (kind "timer", dedupe key "timer:"+intentHash), marks the timer
	// delivered and removes it. Firing a delivered timer returns the first
	// delivery's seq with dup=true.
	Fire(ctx context.Context, intentHash string) (inboxSeq uint64, dup bool, err error)
	// ReapTimers requeues claimed timers whose claim expired.
	ReapTimers(ctx context.Context) (int, error)
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
	// Send enqueues item into dest's inbox (kind "fabric") unless messageID
	// was already delivered there. A fenced, archived or unknown destination
	// is an error (ErrWorldFenced, ErrWorldArchived, ErrWorldNotFound), never
	// a silent drop.
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
	// active baseline if its height is above the current one.
	PutSnapshot(ctx context.Context, world string, epoch uint64, s Snapshot) error
	// ActiveSnapshot returns the active baseline (ok=false if none).
	ActiveSnapshot(ctx context.Context, world string) (s Snapshot, ok bool, err error)
	// Compact deletes journal entries with runSeq <= baseline.Height -
	// retain, fenced by epoch, and returns how many were removed. Nothing at
	// or above the active baseline minus retain is ever removed. Compaction
	// is the only path that deletes journal records, and the idempotency
	// keys of compacted events are kept: re-appending one still returns
	// idempotent (without its metadata's payload, which is gone).
	Compact(ctx context.Context, world string, epoch uint64, retain uint64) (int, error)
}

// ---- worlds ----

// WorldStatus is a world's operational status.
type WorldStatus string

const (
	WorldActive   WorldStatus = "active"
	WorldFenced   WorldStatus = "fenced"
	WorldArchived WorldStatus = "archived"
)

// World is a world's record.
type World struct {
	ID                 string
	Universe           string
	Status             WorldStatus
	ParentWorld        string
	ParentSnapshotHash string
	ForkedAtHeight     uint64
	CreatedAt          time.Time
}

// Worlds manages world records.
type Worlds interface {
	// CreateWorld creates an active world, optionally seeded from a
	// snapshot (its baseline; the head is the snapshot's height).
	// ErrWorldExists if the id is taken.
	CreateWorld(ctx context.Context, universe, world string, seed *Snapshot) (World, error)
	// ForkWorld creates newWorld from src's snapshot at height, in one
	// transaction: its baseline is that snapshot, its head is the height,
	// its inbox is empty, lineage is recorded, and it has no effects,
	// timers or dedupe records. ErrSnapshotNotFound, ErrWorldExists.
	ForkWorld(ctx context.Context, src string, height uint64, newWorld string) (World, error)
	GetWorld(ctx context.Context, world string) (World, error)
	// ListWorlds lists a universe's worlds sorted by id ("" = every status).
	ListWorlds(ctx context.Context, universe string, status WorldStatus) ([]World, error)
	// SetWorldStatus changes status, fenced by epoch.
	SetWorldStatus(ctx context.Context, world string, epoch uint64, status WorldStatus) error
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
// records. Each completed record is kept at least for the store's retention
// after its completion; pending records are never swept.
type Dedupe interface {
	// SweepDedupe removes records whose completedAt + retention is at or
	// before the store's clock, and returns how many.
	SweepDedupe(ctx context.Context) (int, error)
	// DedupeRetention returns the configured retention.
	DedupeRetention() time.Duration
}

// DefaultDedupeRetention is the retention unless a backend is told otherwise.
const DefaultDedupeRetention = 7 * 24 * time.Hour

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
	ErrWorldFenced       = errors.New("store: world fenced")
	ErrWorldArchived     = errors.New("store: world archived")
	ErrSnapshotNotFound  = errors.New("store: snapshot not found")
	ErrNotFound          = errors.New("store: not found")
	ErrWatermarkConflict = errors.New("store: watermark conflict")
	ErrInvalid           = errors.New("store: invalid argument")
	ErrClosed            = errors.New("store: closed")
)

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
