package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Port: a logical, backend-neutral copy of everything a store holds, so
// that any backend can be copied into any other (SQLite to PostgreSQL and
// back, PostgreSQL to PostgreSQL, memstore to either in tests). The copy is
// a stream of PortRecords: an Exporter emits them, an Importer writes them.
// A record is a row of the logical model, not of any backend's tables: a
// backend maps its own layout onto it (PostgreSQL keeps a world's inbox
// cursor in its stream row, SQLite in its world row; SQLite keeps every
// idempotency key in one table, PostgreSQL only the compacted ones apart).
//
// What an import changes on purpose, so that the target starts as a
// store whose processes all crashed at once, never as one that believes
// the source's processes still run:
//
//   - Leases are released, as a status change releases them: no holder
//     and no incarnation, the expiry brought back to the target's clock if
//     it was later, and the epoch kept, so an acquisition on the target
//     takes the next epoch and no lease ever goes backwards (a holder of
//     the source fenced at epoch e stays fenced on the target).
//   - An inflight effect becomes pending again: its claim is dropped
//     (worker, expiry and the incarnation it rode on cleared), its attempt
//     count kept. It will run again, at least once, as after a crash. An
//     inflight effect of an archived world is withdrawn instead (at the
//     target's clock), as a reap of it would: none of an archived world's
//     effects is ever claimed again.
//   - A held effect stays held, with its hold's reason and time: an
//     operator kept it from every adapter, and a copy does not decide for
//     them. A held effect of an archived world (held while inflight after
//     its world was archived) is withdrawn instead, at the target's clock,
//     as ReleaseHeld would withdraw it: nothing would ever release it to
//     run, and an archived world's effects are never claimed again. Its
//     hold's reason and time are kept, as its history.
//   - A claimed timer becomes scheduled, its claim dropped likewise and
//     its attempt count kept.
//   - Worker rows, their liveness promises and the retired incarnations
//     are not copied: they describe the source's processes.
//
// A workflow queue's admitted run is not released as a claim is: it
// holds its slot until its run ends, not until a process dies, so it is
// written admitted, with its worker and time (PortQueuedRun).
//
// Everything else is written as it is: every id, runSeq, head, floor,
// hash, epoch, attempt count, retry schedule, dedupe record, watermark,
// schedule, queue entry, rate-window admission and snapshot, and the
// high-water marks of the effect queue's seq (a seq the source handed out
// is never handed out again) and of the queue entries' seq (an entry
// enqueued on the target queues behind every copied one).
//
// A store's transient rows have no record: the compaction gate lives only
// inside the transaction that compacts.

// PortFormat is the version of the record layout below. A record of
// another format is refused (ErrInvalid): a later layout may mean
// something this code would misread.
const PortFormat = 1

// PortKind names what a PortRecord holds.
type PortKind string

// The record kinds, in the order an export emits them: everything a row
// refers to comes before it (worlds first), so an importer can write each
// batch as it arrives.
const (
	PortKindWorld      PortKind = "world"           // PortWorld
	PortKindStream     PortKind = "stream"          // PortStream
	PortKindEvent      PortKind = "event"           // PortEvent
	PortKindEventKey   PortKind = "event_key"       // PortEventKey: a compacted event's key
	PortKindSnapshot   PortKind = "snapshot"        // PortSnapshot
	PortKindInbox      PortKind = "inbox"           // PortInboxItem
	PortKindDrain      PortKind = "inbox_drain"     // PortDrain
	PortKindLease      PortKind = "lease"           // PortLease
	PortKindAssignment PortKind = "assignment"      // PortAssignment
	PortKindEffect     PortKind = "effect"          // PortEffect
	PortKindTimer      PortKind = "timer"           // PortTimer
	PortKindFabric     PortKind = "fabric"          // PortFabric
	PortKindWatermark  PortKind = "watermark"       // PortWatermark
	PortKindSchedule   PortKind = "schedule"        // PortSchedule
	PortKindQueue      PortKind = "queue"           // PortQueue
	PortKindQueuedRun  PortKind = "queued_run"      // PortQueuedRun
	PortKindAdmission  PortKind = "queue_admission" // PortAdmission
	PortKindCounter    PortKind = "counter"         // PortCounter
)

// PortKinds lists every kind in export order.
func PortKinds() []PortKind {
	return []PortKind{PortKindWorld, PortKindStream, PortKindEvent, PortKindEventKey, PortKindSnapshot,
		PortKindInbox, PortKindDrain, PortKindLease, PortKindAssignment, PortKindEffect, PortKindTimer,
		PortKindFabric, PortKindWatermark, PortKindSchedule, PortKindQueue, PortKindQueuedRun, PortKindAdmission,
		PortKindCounter}
}

// PortRecord is one record of a store's copy: Kind says which one field is
// set. It marshals to JSON as it is (times in RFC 3339 with nanoseconds,
// UTC; bytes in base64, a nil slice as null and an empty one as "", so
// both round-trip).
type PortRecord struct {
	Format     int             `json:"format"`
	Kind       PortKind        `json:"kind"`
	World      *PortWorld      `json:"world,omitempty"`
	Stream     *PortStream     `json:"stream,omitempty"`
	Event      *PortEvent      `json:"event,omitempty"`
	EventKey   *PortEventKey   `json:"event_key,omitempty"`
	Snapshot   *PortSnapshot   `json:"snapshot,omitempty"`
	Inbox      *PortInboxItem  `json:"inbox,omitempty"`
	Drain      *PortDrain      `json:"inbox_drain,omitempty"`
	Lease      *PortLease      `json:"lease,omitempty"`
	Assignment *PortAssignment `json:"assignment,omitempty"`
	Effect     *PortEffect     `json:"effect,omitempty"`
	Timer      *PortTimer      `json:"timer,omitempty"`
	Fabric     *PortFabric     `json:"fabric,omitempty"`
	Watermark  *PortWatermark  `json:"watermark,omitempty"`
	Schedule   *PortSchedule   `json:"schedule,omitempty"`
	Queue      *PortQueue      `json:"queue,omitempty"`
	QueuedRun  *PortQueuedRun  `json:"queued_run,omitempty"`
	Admission  *PortAdmission  `json:"queue_admission,omitempty"`
	Counter    *PortCounter    `json:"counter,omitempty"`
}

// PortWorld is a world's record with its inbox position and active
// baseline.
type PortWorld struct {
	ID                 string      `json:"id"`
	Universe           string      `json:"universe"`
	Status             WorldStatus `json:"status"`
	StatusReason       string      `json:"status_reason"`
	StatusChangedAt    time.Time   `json:"status_changed_at"` // zero until the first change
	ParentWorld        string      `json:"parent_world"`
	ParentSnapshotHash string      `json:"parent_snapshot_hash"`
	ForkedAtHeight     uint64      `json:"forked_at_height"`
	CreatedAt          time.Time   `json:"created_at"`
	// InboxCursor is the seq of the last drained inbox item.
	InboxCursor uint64 `json:"inbox_cursor"`
	// LastSeq is the last inbox seq handed out (0: none).
	LastSeq uint64 `json:"last_seq"`
	// BaselineHeight is the active snapshot's height; nil: no baseline.
	BaselineHeight *uint64 `json:"baseline_height"`
}

// PortStream is a journal stream's position: its head (Journal.Head) and
// its compaction floor (Journal.Floor). An export emits one for every
// stream whose head or floor is above 0; a stream without one is empty.
type PortStream struct {
	Stream      string     `json:"stream"`
	Head        uint64     `json:"head"`
	CompactedTo uint64     `json:"compacted_to"`
	CompactedAt *time.Time `json:"compacted_at"` // the latest persistedAt compacted; nil: none
}

// PortEvent is one journal record as the append authority stored it (its
// idempotency key with it: the key's dedupe record is the event's).
type PortEvent struct {
	Record
}

// PortEventKey is the idempotency key of an event compaction removed: it
// stays a duplicate for the stream's life. EventType and PayloadSHA256
// are nil for keys compacted before the store kept them.
type PortEventKey struct {
	Stream         string    `json:"stream"`
	IdempotencyKey string    `json:"idempotency_key"`
	EventID        string    `json:"event_id"`
	RunSeq         uint64    `json:"run_seq"`
	PersistedAt    time.Time `json:"persisted_at"`
	EventType      *string   `json:"event_type"`
	PayloadSHA256  []byte    `json:"payload_sha256"`
}

// PortSnapshot is a stored snapshot.
type PortSnapshot struct {
	Snapshot
}

// PortInboxItem is an inbox item, drained or not. KeyLive says its dedupe
// key's record still exists (not swept): a delivery with that key is
// refused as a duplicate.
type PortInboxItem struct {
	World      string    `json:"world"`
	Seq        uint64    `json:"seq"`
	Kind       string    `json:"kind"`
	Payload    []byte    `json:"payload"`
	DedupeKey  string    `json:"dedupe_key"` // "": none
	EnqueuedAt time.Time `json:"enqueued_at"`
	KeyLive    bool      `json:"key_live"`
}

// PortDrain is one move of a world's inbox cursor, kept for dedupe
// retention: at DrainedAt the cursor reached Upto, completing the live
// keys of the items at or below it not completed before.
type PortDrain struct {
	World     string    `json:"world"`
	Upto      uint64    `json:"upto"`
	DrainedAt time.Time `json:"drained_at"`
}

// PortLease is a world's lease row. An import releases it (see the Port
// comment above) and keeps Epoch.
type PortLease struct {
	World       string    `json:"world"`
	Holder      string    `json:"holder"`
	Incarnation string    `json:"incarnation"`
	Epoch       uint64    `json:"epoch"`
	ExpiresAt   time.Time `json:"expires_at"`
	TookOver    bool      `json:"took_over"`
	Displaced   string    `json:"displaced"`
}

// PortAssignment is a world's assignment (a pin when set by an operator).
type PortAssignment struct {
	World string `json:"world"`
	Assignment
}

// PortEffect is an effect's queue entry and dedupe record. State is
// carried as the source stored it (a state a later schema adds passes
// through; a target that does not know it refuses it).
//
// HoldReason, HeldAt and ReleaseReason came with held effects without a
// format change: they are optional, so an export written before them
// reads as an effect never held (no reason, HeldAt nil), which is what
// every effect of such a store was.
type PortEffect struct {
	Seq               uint64     `json:"seq"`
	IntentHash        string     `json:"intent_hash"`
	World             string     `json:"world"`
	Kind              string     `json:"kind"`
	Params            []byte     `json:"params"`
	Origin            string     `json:"origin"`
	PolicyContextHash string     `json:"policy_context_hash"`
	RetryPolicy       []byte     `json:"retry_policy"` // nil: the kind's
	State             string     `json:"state"`
	EnqueuedAt        time.Time  `json:"enqueued_at"`
	Attempts          int        `json:"attempts"`
	ClaimedBy         string     `json:"claimed_by"`
	ClaimExpires      *time.Time `json:"claim_expires"`
	ClaimNode         string     `json:"claim_node"`
	ClaimIncarnation  string     `json:"claim_incarnation"`
	ReceiptStatus     *string    `json:"receipt_status"` // nil: no receipt
	ReceiptPayload    []byte     `json:"receipt_payload"`
	InboxSeq          *uint64    `json:"inbox_seq"` // the receipt's inbox seq
	CompletedAt       *time.Time `json:"completed_at"`
	Retries           int        `json:"retries"`
	RetryReason       string     `json:"retry_reason"`
	ResolveReason     *string    `json:"resolve_reason"` // nil: not an operator's receipt
	RetryAt           *time.Time `json:"retry_at"`
	Failures          int        `json:"failures"`
	LastError         string     `json:"last_error"`
	// HoldReason and HeldAt are the latest hold's (HoldEffect), kept once
	// released; HeldAt is nil for an effect never held. ReleaseReason is
	// the reason of the release that ended the hold.
	HoldReason    string     `json:"hold_reason,omitempty"`
	HeldAt        *time.Time `json:"held_at,omitempty"`
	ReleaseReason string     `json:"release_reason,omitempty"`
}

// PortTimer is a timer's queue entry and dedupe record.
type PortTimer struct {
	IntentHash       string     `json:"intent_hash"`
	World            string     `json:"world"`
	DeliverAt        time.Time  `json:"deliver_at"`
	Payload          []byte     `json:"payload"`
	State            string     `json:"state"`
	Attempt          int        `json:"attempt"`
	ClaimedBy        string     `json:"claimed_by"`
	ClaimExpires     *time.Time `json:"claim_expires"`
	ClaimNode        string     `json:"claim_node"`
	ClaimIncarnation string     `json:"claim_incarnation"`
	InboxSeq         *uint64    `json:"inbox_seq"` // the firing's inbox seq
	CompletedAt      *time.Time `json:"completed_at"`
}

// PortFabric is a fabric dedupe record: the destination inbox seq of the
// first delivery of a message.
type PortFabric struct {
	Dest        string    `json:"dest"`
	MessageID   string    `json:"message_id"`
	Seq         uint64    `json:"seq"`
	CompletedAt time.Time `json:"completed_at"`
}

// PortWatermark is a projector's progress on a stream.
type PortWatermark struct {
	Projector string `json:"projector"`
	Stream    string `json:"stream"`
	Value     uint64 `json:"value"`
}

// PortSchedule is a schedule (Schedules) as it is stored: its version
// and due time too, so a tick recorded on the source and not yet started
// is started by the target's schedulers (its start is idempotent).
type PortSchedule struct {
	ID         string    `json:"id"`
	Spec       []byte    `json:"spec"`
	State      []byte    `json:"state"`
	Paused     bool      `json:"paused"`
	NextFireAt time.Time `json:"next_fire_at"` // zero: nothing due
	Version    uint64    `json:"version"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// PortQueue is a queue's declaration (Queues.PutQueue).
type PortQueue struct {
	Name              string        `json:"name"`
	Concurrency       int           `json:"concurrency"`
	WorkerConcurrency int           `json:"worker_concurrency"`
	RateLimit         int           `json:"rate_limit"`
	RatePeriod        time.Duration `json:"rate_period"` // nanoseconds
	Partitioned       bool          `json:"partitioned"`
}

// Spec is q as a QueueSpec.
func (q PortQueue) Spec() QueueSpec { return QueueSpec(q) }

// PortQueueOf is spec as a record.
func PortQueueOf(spec QueueSpec) *PortQueue {
	q := PortQueue(spec)
	return &q
}

// PortQueuedRun is a run's queue entry, waiting (Worker empty) or
// admitted. Unlike an effect's claim, an admission is imported as it is,
// its worker and time kept: the admitted run goes on holding its slot on
// the target until its world is archived (a worker of the target takes
// the run over as it would after a crash), so a copy never admits more
// runs than the queue's limits while the copied ones still run.
type PortQueuedRun struct {
	Queue      string    `json:"queue"`
	Run        string    `json:"run"`
	Partition  string    `json:"partition"`
	Priority   int       `json:"priority"`
	Seq        uint64    `json:"seq"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	Worker     string    `json:"worker"`      // "": waiting
	AdmittedAt time.Time `json:"admitted_at"` // zero while waiting
	Needs      string    `json:"needs,omitempty"`
}

// Entry is r as a QueuedRun.
func (r PortQueuedRun) Entry() QueuedRun { return QueuedRun(r) }

// PortQueuedRunOf is e as a record.
func PortQueuedRunOf(e QueuedRun) *PortQueuedRun {
	e.EnqueuedAt, e.AdmittedAt = e.EnqueuedAt.UTC(), e.AdmittedAt.UTC()
	r := PortQueuedRun(e)
	return &r
}

// PortAdmission is what a queue's rate window counts: Count admissions
// of the queue's Partition at At (one AdmitRuns admits several runs at
// one time, so the count keys the record by queue, partition and time).
// Copied, a window already spent on the source stays spent on the target.
type PortAdmission struct {
	Queue     string    `json:"queue"`
	Partition string    `json:"partition"`
	At        time.Time `json:"at"`
	Count     int       `json:"count"`
}

// PortCounter is a store-wide counter's high-water mark, which an import
// only raises.
type PortCounter struct {
	Name  string `json:"name"` // PortCounterEffectSeq
	Value uint64 `json:"value"`
}

// PortCounterEffectSeq is the last effect queue seq handed out.
const PortCounterEffectSeq = "effect_seq"

// Exporter is implemented by every backend's Store.
type Exporter interface {
	// Export emits every record of the store, read in one consistent
	// snapshot (a state the store really was in, also while other
	// processes write), in PortKinds order, each kind in its key order.
	// It streams: the store is never held in memory whole. An error from
	// emit ends the export and is returned as it is.
	Export(ctx context.Context, emit func(PortRecord) error) error
}

// Importer is implemented by every backend's Store.
type Importer interface {
	// Empty reports whether the store holds no world, journal, queue or
	// dedupe record (worker rows do not count). Whether to import into a
	// store that is not empty is the caller's decision.
	Empty(ctx context.Context) (bool, error)
	// Import writes batch, all of it or none: each record as it is, but
	// for the changes the Port comment lists. A record whose key exists
	// already (a world, an event, an effect's intent hash …) holding the
	// very record being imported (PortSame) is left as it is: so a batch
	// that committed but whose answer was lost (a connection dropped
	// after the write) can be sent again and succeeds, and a copy
	// interrupted anywhere can be run again from its start. A record
	// whose key exists holding anything else is ErrConflict: an import
	// never overwrites. A record of another format or an unknown kind, or
	// one whose kind's field is missing, is ErrInvalid. Records must come
	// in an export's order: a row that names a world neither the target
	// nor the batch holds is ErrWorldNotFound.
	Import(ctx context.Context, batch []PortRecord) error
	// FinishImport does what must follow a bulk load before the store
	// serves (counters moved past the highest imported value, planner
	// statistics refreshed). It is idempotent.
	FinishImport(ctx context.Context) error
}

// ErrConflict: an imported record's key exists in the target already.
var ErrConflict = errors.New("store: record exists")

// CheckPortRecord validates r's format and kind and that the kind's field,
// and only it, is set.
func CheckPortRecord(r PortRecord) error {
	const op = "import"
	if r.Format != PortFormat {
		return Errorf(op, ErrInvalid, "", "record format %d, this store reads format %d", r.Format, PortFormat)
	}
	set := 0
	for _, p := range []bool{r.World != nil, r.Stream != nil, r.Event != nil, r.EventKey != nil,
		r.Snapshot != nil, r.Inbox != nil, r.Drain != nil, r.Lease != nil, r.Assignment != nil,
		r.Effect != nil, r.Timer != nil, r.Fabric != nil, r.Watermark != nil, r.Schedule != nil, r.Queue != nil,
		r.QueuedRun != nil, r.Admission != nil, r.Counter != nil} {
		if p {
			set++
		}
	}
	var ok bool
	switch r.Kind {
	case PortKindWorld:
		ok = r.World != nil
	case PortKindStream:
		ok = r.Stream != nil
	case PortKindEvent:
		ok = r.Event != nil
	case PortKindEventKey:
		ok = r.EventKey != nil
	case PortKindSnapshot:
		ok = r.Snapshot != nil
	case PortKindInbox:
		ok = r.Inbox != nil
	case PortKindDrain:
		ok = r.Drain != nil
	case PortKindLease:
		ok = r.Lease != nil
	case PortKindAssignment:
		ok = r.Assignment != nil
	case PortKindEffect:
		ok = r.Effect != nil
	case PortKindTimer:
		ok = r.Timer != nil
	case PortKindFabric:
		ok = r.Fabric != nil
	case PortKindWatermark:
		ok = r.Watermark != nil
	case PortKindSchedule:
		ok = r.Schedule != nil
		if ok {
			if err := checkSchedule(op, ScheduleRecord{ID: r.Schedule.ID, Spec: r.Schedule.Spec, State: r.Schedule.State,
				NextFireAt: r.Schedule.NextFireAt, Version: r.Schedule.Version}); err != nil {
				return err
			}
			if r.Schedule.Version == 0 {
				return Errorf(op, ErrInvalid, "", "schedule %s: version 0", r.Schedule.ID)
			}
		}
	case PortKindQueue:
		ok = r.Queue != nil
		if ok {
			if err := checkQueueSpec(op, r.Queue.Spec()); err != nil {
				return err
			}
		}
	case PortKindQueuedRun:
		ok = r.QueuedRun != nil
		if ok {
			if err := checkPortQueuedRun(op, *r.QueuedRun); err != nil {
				return err
			}
		}
	case PortKindAdmission:
		ok = r.Admission != nil
		if ok {
			a := r.Admission
			if err := CheckID(op, "queue", a.Queue); err != nil {
				return err
			}
			if a.Count <= 0 || a.At.IsZero() {
				return Errorf(op, ErrInvalid, "", "queue admission %s/%s: a time and a positive count", a.Queue, a.Partition)
			}
		}
	case PortKindCounter:
		ok = r.Counter != nil && r.Counter.Name == PortCounterEffectSeq
	default:
		return Errorf(op, ErrInvalid, "", "unknown record kind %q", r.Kind)
	}
	if !ok || set != 1 {
		return Errorf(op, ErrInvalid, "", "a %q record must set its own field and no other", r.Kind)
	}
	return nil
}

func checkPortQueuedRun(op string, r PortQueuedRun) error {
	if err := checkQueuedRun(op, r.Entry()); err != nil {
		return err
	}
	switch {
	case r.Seq == 0 || r.EnqueuedAt.IsZero():
		return Errorf(op, ErrInvalid, r.Run, "queued run: a seq and an enqueue time")
	case (r.Worker == "") != r.AdmittedAt.IsZero():
		return Errorf(op, ErrInvalid, r.Run, "queued run: a worker and an admission time, both or neither")
	}
	return nil
}

// CheckPortBatch checks every record of batch (CheckPortRecord) before an
// importer writes any of it.
func CheckPortBatch(batch []PortRecord) error {
	for i, r := range batch {
		if err := CheckPortRecord(r); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	return nil
}

// PortImported returns r as an import writes it: the changes the Port
// comment lists, but for the withdrawal of an archived world's inflight or
// held effect, which needs the world (archived says whether r's world is
// archived; now is the target's clock). A test compares a source's export,
// passed through it, with the target's.
func PortImported(r PortRecord, archived bool, now time.Time) PortRecord {
	switch r.Kind {
	case PortKindLease:
		l := *r.Lease
		l.Holder, l.Incarnation, l.TookOver, l.Displaced = "", "", false, ""
		if l.ExpiresAt.After(now) {
			l.ExpiresAt = now.UTC()
		}
		r.Lease = &l
	case PortKindEffect:
		e := *r.Effect
		switch e.State {
		case "inflight":
			e.State = "pending"
			e.ClaimedBy, e.ClaimExpires, e.ClaimNode, e.ClaimIncarnation = "", nil, "", ""
			if archived {
				e.State = "withdrawn"
				t := now.UTC()
				e.CompletedAt = &t
			}
		case "held":
			if archived {
				e.State = "withdrawn"
				t := now.UTC()
				e.CompletedAt = &t
			}
		}
		r.Effect = &e
	case PortKindTimer:
		t := *r.Timer
		if t.State == string(TimerClaimed) {
			t.State = string(TimerScheduled)
			t.ClaimedBy, t.ClaimExpires, t.ClaimNode, t.ClaimIncarnation = "", nil, "", ""
		}
		r.Timer = &t
	}
	return r
}

// PortBackend is what a backend implements for Export and Import; the
// Front checks every imported record (CheckPortBatch) before the backend
// sees it. A backend's Import refuses any record whose key exists
// (ErrConflict); the Front then asks PortLookup which of them are there
// already as they would be imported, and imports the rest.
type PortBackend interface {
	Exporter
	Importer
	// PortLookup returns, for each record of batch, the record the store
	// holds under the same key, as Export would emit it, or nil when it
	// holds none. The keys: a world's id; a stream's id (a stream with
	// neither head nor floor is none); an event's stream and runSeq; a
	// compacted key's stream and key (a key whose event is live is none);
	// a snapshot's world and height; an inbox item's world and seq; a
	// drain's world and upto; a lease's and an assignment's world; an
	// effect's and a timer's intent hash; a fabric record's destination
	// and message id; a watermark's projector and stream; a schedule's
	// id; a queue's name; a queued run's run; a queue admission's queue,
	// partition and time. A counter has no key: always nil.
	PortLookup(ctx context.Context, batch []PortRecord) ([]*PortRecord, error)
}

var (
	_ Exporter = (*Front)(nil)
	_ Importer = (*Front)(nil)
)

// ErrUnsupported: the backend cannot do what was asked.
var ErrUnsupported = errors.New("store: not supported by this backend")

func (f *Front) port(op string) (PortBackend, error) {
	if p, ok := f.b.(PortBackend); ok {
		return p, nil
	}
	return nil, Errorf(op, ErrUnsupported, "", "%T has no export or import", f.b)
}

// Export implements Exporter.
func (f *Front) Export(ctx context.Context, emit func(PortRecord) error) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: "export", Kind: err}
	}
	p, err := f.port("export")
	if err != nil {
		return err
	}
	return p.Export(ctx, emit)
}

// Empty implements Importer.
func (f *Front) Empty(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, &Error{Op: "empty", Kind: err}
	}
	p, err := f.port("empty")
	if err != nil {
		return false, err
	}
	return p.Empty(ctx)
}

// Import implements Importer.
func (f *Front) Import(ctx context.Context, batch []PortRecord) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: "import", Kind: err}
	}
	if err := CheckPortBatch(batch); err != nil {
		return err
	}
	if len(batch) == 0 {
		return nil
	}
	p, err := f.port("import")
	if err != nil {
		return err
	}
	err = p.Import(ctx, batch)
	if !errors.Is(err, ErrConflict) {
		return err
	}
	// Some key exists: a batch sent again after its answer was lost, a
	// copy run again, or a true conflict. What is there already as it
	// would be imported is left; the rest is imported, and refused again
	// if anything of it still collides.
	rest, err := f.portUnseen(ctx, p, batch)
	if err != nil || len(rest) == 0 {
		return err
	}
	return p.Import(ctx, rest)
}

// portUnseen returns the records of batch the store does not hold as it
// would import them, or ErrConflict naming the first whose key it holds
// with anything else.
func (f *Front) portUnseen(ctx context.Context, p PortBackend, batch []PortRecord) ([]PortRecord, error) {
	const op = "import"
	stored, err := p.PortLookup(ctx, batch)
	if err != nil {
		return nil, err
	}
	if len(stored) != len(batch) {
		return nil, fmt.Errorf("store: import: lookup of %d records answered %d", len(batch), len(stored))
	}
	now, err := f.b.Now(ctx)
	if err != nil {
		return nil, err
	}
	// Whether an effect's world is archived decides the import of an
	// inflight or held effect (withdrawn); the world is in the batch or
	// in the store.
	archived := map[string]bool{}
	for _, r := range batch {
		if r.Kind == PortKindWorld {
			archived[r.World.ID] = r.World.Status == WorldArchived
		}
	}
	isArchived := func(world string) (bool, error) {
		if a, ok := archived[world]; ok {
			return a, nil
		}
		w, err := f.b.GetWorld(ctx, world)
		switch {
		case err == nil:
			archived[world] = w.Status == WorldArchived
		case errors.Is(err, ErrWorldNotFound) || errors.Is(err, ErrNotFound):
			archived[world] = false
		default:
			return false, err
		}
		return archived[world], nil
	}
	rest := make([]PortRecord, 0, len(batch))
	for i, r := range batch {
		s := stored[i]
		if s == nil {
			rest = append(rest, r)
			continue
		}
		arch := false
		if r.Kind == PortKindEffect {
			if arch, err = isArchived(r.Effect.World); err != nil {
				return nil, err
			}
		}
		if !PortSame(*s, r, arch, now) {
			return nil, Errorf(op, ErrConflict, portWorld(r), "a %s record %s exists and differs", r.Kind, portKey(r))
		}
	}
	return rest, nil
}

// FinishImport implements Importer.
func (f *Front) FinishImport(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: "finish_import", Kind: err}
	}
	p, err := f.port("finish_import")
	if err != nil {
		return err
	}
	return p.FinishImport(ctx)
}

// PortCopy streams everything src holds into dst, batch records per Import
// (DefaultPortBatch when batch <= 0), then finishes the import; it returns
// how many records it copied. progress, when set, is called after each
// batch with the count so far. It does not ask whether dst is empty: the
// caller decides (Importer.Empty). src and dst must be different stores
// (memstore exports under its lock).
func PortCopy(ctx context.Context, src Exporter, dst Importer, batch int, progress func(copied int)) (int, error) {
	if batch <= 0 {
		batch = DefaultPortBatch
	}
	buf := make([]PortRecord, 0, batch)
	n := 0
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		if err := dst.Import(ctx, buf); err != nil {
			return err
		}
		n += len(buf)
		buf = buf[:0]
		if progress != nil {
			progress(n)
		}
		return nil
	}
	err := src.Export(ctx, func(r PortRecord) error {
		buf = append(buf, r)
		if len(buf) < batch {
			return nil
		}
		return flush()
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = dst.FinishImport(ctx)
	}
	return n, err
}

// DefaultPortBatch is PortCopy's records per Import: large enough that a
// transaction's fixed cost is spread thin, small enough to bound memory.
const DefaultPortBatch = 1000

// PortSame reports whether stored, a record as a store exports it, is
// incoming as an import writes it (PortImported; archived says whether
// incoming's world is archived, now is the target's clock): what a record
// imported before, by a batch whose answer was lost or by an earlier run
// of the same copy, holds. Two things an import takes from the clock are
// allowed to differ, as an earlier import took them at an earlier time: a
// released lease's expiry (brought back to the clock of that import, so
// at or before incoming's), and the withdrawal time of an archived
// world's inflight or held effect. A world's last inbox seq may stand
// below incoming's: a store that derives it from its inbox items has not
// imported them all yet.
func PortSame(stored, incoming PortRecord, archived bool, now time.Time) bool {
	if stored.Kind != incoming.Kind {
		return false
	}
	want := PortImported(incoming, archived, now)
	switch want.Kind {
	case PortKindWorld:
		if stored.World.LastSeq > want.World.LastSeq {
			return false
		}
		w := *want.World
		w.LastSeq = stored.World.LastSeq
		want.World = &w
	case PortKindLease:
		src := incoming.Lease.ExpiresAt
		got := stored.Lease.ExpiresAt
		if got.After(src) {
			return false
		}
		l := *want.Lease
		l.ExpiresAt = got
		want.Lease = &l
	case PortKindEffect:
		if archived && (incoming.Effect.State == "inflight" || incoming.Effect.State == "held") &&
			stored.Effect.CompletedAt != nil {
			e := *want.Effect
			e.CompletedAt = stored.Effect.CompletedAt
			want.Effect = &e
		}
	}
	return portCanon(stored) == portCanon(want)
}

// portCanon is r's JSON with every time in UTC, so that two records
// compare equal whatever location their times were read in.
func portCanon(r PortRecord) string {
	r.Format = PortFormat
	u := func(t time.Time) time.Time { return t.UTC() }
	uo := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		v := t.UTC()
		return &v
	}
	switch r.Kind {
	case PortKindWorld:
		w := *r.World
		w.StatusChangedAt, w.CreatedAt = u(w.StatusChangedAt), u(w.CreatedAt)
		r.World = &w
	case PortKindStream:
		x := *r.Stream
		x.CompactedAt = uo(x.CompactedAt)
		r.Stream = &x
	case PortKindEvent:
		e := *r.Event
		e.EmittedAt, e.PersistedAt = u(e.EmittedAt), u(e.PersistedAt)
		r.Event = &e
	case PortKindEventKey:
		k := *r.EventKey
		k.PersistedAt = u(k.PersistedAt)
		r.EventKey = &k
	case PortKindSnapshot:
		n := *r.Snapshot
		n.CreatedAt = u(n.CreatedAt)
		r.Snapshot = &n
	case PortKindInbox:
		i := *r.Inbox
		i.EnqueuedAt = u(i.EnqueuedAt)
		r.Inbox = &i
	case PortKindDrain:
		d := *r.Drain
		d.DrainedAt = u(d.DrainedAt)
		r.Drain = &d
	case PortKindLease:
		l := *r.Lease
		l.ExpiresAt = u(l.ExpiresAt)
		r.Lease = &l
	case PortKindEffect:
		e := *r.Effect
		e.EnqueuedAt = u(e.EnqueuedAt)
		e.ClaimExpires, e.CompletedAt, e.RetryAt, e.HeldAt = uo(e.ClaimExpires), uo(e.CompletedAt), uo(e.RetryAt), uo(e.HeldAt)
		r.Effect = &e
	case PortKindTimer:
		t := *r.Timer
		t.DeliverAt = u(t.DeliverAt)
		t.ClaimExpires, t.CompletedAt = uo(t.ClaimExpires), uo(t.CompletedAt)
		r.Timer = &t
	case PortKindFabric:
		f := *r.Fabric
		f.CompletedAt = u(f.CompletedAt)
		r.Fabric = &f
	case PortKindQueuedRun:
		q := *r.QueuedRun
		q.EnqueuedAt, q.AdmittedAt = u(q.EnqueuedAt), u(q.AdmittedAt)
		r.QueuedRun = &q
	case PortKindAdmission:
		a := *r.Admission
		a.At = u(a.At)
		r.Admission = &a
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "unmarshalable: " + err.Error()
	}
	return string(b)
}

// portWorld is the world r belongs to ("" for a stream's, a watermark's
// or a counter's record).
func portWorld(r PortRecord) string {
	switch r.Kind {
	case PortKindWorld:
		return r.World.ID
	case PortKindSnapshot:
		return r.Snapshot.World
	case PortKindInbox:
		return r.Inbox.World
	case PortKindDrain:
		return r.Drain.World
	case PortKindLease:
		return r.Lease.World
	case PortKindAssignment:
		return r.Assignment.World
	case PortKindEffect:
		return r.Effect.World
	case PortKindTimer:
		return r.Timer.World
	case PortKindFabric:
		return r.Fabric.Dest
	case PortKindQueuedRun:
		return r.QueuedRun.Run
	}
	return ""
}

// portKey names r's key (PortBackend.PortLookup) for an error.
func portKey(r PortRecord) string {
	switch r.Kind {
	case PortKindWorld:
		return r.World.ID
	case PortKindStream:
		return r.Stream.Stream
	case PortKindEvent:
		return fmt.Sprintf("%s/%d", r.Event.StreamID, r.Event.RunSeq)
	case PortKindEventKey:
		return r.EventKey.Stream + "/" + r.EventKey.IdempotencyKey
	case PortKindSnapshot:
		return fmt.Sprintf("%s@%d", r.Snapshot.World, r.Snapshot.Height)
	case PortKindInbox:
		return fmt.Sprintf("%s#%d", r.Inbox.World, r.Inbox.Seq)
	case PortKindDrain:
		return fmt.Sprintf("%s upto %d", r.Drain.World, r.Drain.Upto)
	case PortKindLease:
		return r.Lease.World
	case PortKindAssignment:
		return r.Assignment.World
	case PortKindEffect:
		return r.Effect.IntentHash
	case PortKindTimer:
		return r.Timer.IntentHash
	case PortKindFabric:
		return r.Fabric.Dest + "/" + r.Fabric.MessageID
	case PortKindWatermark:
		return r.Watermark.Projector + "/" + r.Watermark.Stream
	case PortKindSchedule:
		return r.Schedule.ID
	case PortKindQueue:
		return r.Queue.Name
	case PortKindQueuedRun:
		return r.QueuedRun.Run
	case PortKindAdmission:
		return fmt.Sprintf("%s/%s@%s", r.Admission.Queue, r.Admission.Partition, r.Admission.At.UTC().Format(time.RFC3339Nano))
	}
	return string(r.Kind)
}
