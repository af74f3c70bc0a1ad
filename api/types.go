package api

import (
	"encoding/json"
	"time"

	"github.com/orrery-run/orrery/store"
)

// The JSON bodies of the API, shared by the server and the Go client.
// Times are RFC 3339 in UTC with nanoseconds, and absent when zero; byte
// strings are base64 (standard encoding); CBOR values are also given as
// JSON (see the package doc for the conversion).

// World is a world's record.
type World struct {
	ID              string    `json:"id"`
	Universe        string    `json:"universe"`
	Status          string    `json:"status"`
	StatusReason    string    `json:"status_reason"`
	StatusChangedAt time.Time `json:"status_changed_at,omitzero"`
	CreatedAt       time.Time `json:"created_at,omitzero"`
	Lineage         *Lineage  `json:"lineage"` // null for a world that is not a fork
}

// Lineage is where a fork came from.
type Lineage struct {
	Parent             string `json:"parent"`
	ParentSnapshotHash string `json:"parent_snapshot_hash"`
	ForkedAtHeight     uint64 `json:"forked_at_height"`
}

// WorldView is GET /v1/worlds/{id}: the record with what runs it.
type WorldView struct {
	World
	Lease       *Lease      `json:"lease"`      // null: never leased
	Assignment  *Assignment `json:"assignment"` // null: not placed
	Head        uint64      `json:"head"`       // the journal height
	InboxCursor *uint64     `json:"inbox_cursor,omitempty"`
	// InboxDepth counts the inbox items after the cursor: enqueued, not
	// yet drained. It is counted up to MaxInboxDepth; InboxDepthMore says
	// there are more.
	InboxDepth     int  `json:"inbox_depth"`
	InboxDepthMore bool `json:"inbox_depth_more,omitempty"`
	// JournalFloor is the journal's compaction floor: records at or below
	// it are gone, so a journal read starts at or above it.
	JournalFloor uint64 `json:"journal_floor"`
	// Version is the version of its universe's definition the world is
	// on (its last record's; 0: it never stepped, any version starts it).
	Version uint64 `json:"version"`
	// PendingUpgrade is the version an upgrade waiting in its inbox asks
	// for (absent: none).
	PendingUpgrade uint64 `json:"pending_upgrade,omitempty"`
}

// MaxInboxDepth is the most inbox items a world view counts: a count
// reads the items, so a world with a deep backlog shows this many and
// InboxDepthMore.
const MaxInboxDepth = 1000

// Queues is GET /v1/queues: the store's global queue gauges.
type Queues struct {
	EffectsPending  int64 `json:"effects_pending"`
	EffectsInflight int64 `json:"effects_inflight"`
	EffectsHeld     int64 `json:"effects_held"`     // waiting for an operator's release or receipt
	TimersScheduled int64 `json:"timers_scheduled"` // not yet claimed, due or not
	TimersClaimed   int64 `json:"timers_claimed"`
	InboxBacklog    int64 `json:"inbox_backlog"` // enqueued, not yet drained, over all worlds
}

// Lease is a world's lease record; Holder is empty once released.
type Lease struct {
	Holder string `json:"holder"`
	// Incarnation is the holder process's lifetime under its worker id:
	// two processes sharing a worker id hold leases as different ones.
	Incarnation string    `json:"incarnation,omitempty"`
	Epoch       uint64    `json:"epoch"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
}

// Assignment is a world's desired placement.
type Assignment struct {
	Worker string `json:"worker"`
	Reason string `json:"reason"`
}

// Ack answers an event: its inbox seq, and whether its idempotency key
// had been seen (then Seq is the first's).
type Ack struct {
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// CallResult answers a call: the reply as JSON and as the canonical CBOR
// the handler produced.
type CallResult struct {
	CallID    string          `json:"call_id"`
	Reply     json.RawMessage `json:"reply"`
	ReplyCBOR []byte          `json:"reply_cbor"`
}

// State is a world's state at its head. State is the user's state S as
// JSON; StateCBOR is the world's whole state bytes, whose SHA-256 is Hash
// (S is its "state" key).
type State struct {
	Height    uint64          `json:"height"`
	Hash      string          `json:"hash"`
	State     json.RawMessage `json:"state"`
	StateCBOR []byte          `json:"state_cbor"`
}

// JournalPage is a page of a world's journal; Next is the height to ask
// after for the following page.
type JournalPage struct {
	Records []Record `json:"records"`
	Next    uint64   `json:"next"`
}

// Record is one journal record: the envelope's fields and the step
// record's summary. Input is null for a record that is not a world step.
//
// The fields after CallID are the record's detail, present only when the
// journal is read with detail=true (see history.go): Receipt (for a
// receipt input) from the record itself, and, when the step could be
// derived again (Derived), its Reply (for a call), the Intents, Sends and
// Timers it made and the timers it cancelled. DeriveError says why a
// step could not be derived (its lists are then absent, not empty).
type Record struct {
	Height      uint64       `json:"height"`
	EventID     string       `json:"event_id"`
	EventType   string       `json:"event_type"`
	PersistedAt time.Time    `json:"persisted_at,omitzero"`
	StepID      string       `json:"step_id"`
	Input       *RecordInput `json:"input"`
	Outcome     string       `json:"outcome"`
	Error       string       `json:"error,omitempty"`
	StateHash   string       `json:"state_hash"`
	CallID      string       `json:"call_id,omitempty"`

	Receipt     *RecordReceipt `json:"receipt,omitempty"`
	Derived     bool           `json:"derived,omitempty"`
	DeriveError string         `json:"derive_error,omitempty"`
	Reply       *RecordReply   `json:"reply,omitempty"`
	Intents     []RecordIntent `json:"intents,omitempty"`
	Sends       []RecordSend   `json:"sends,omitempty"`
	Timers      []RecordTimer  `json:"timers,omitempty"`
	Cancels     []string       `json:"cancels,omitempty"` // the intent hashes of the timers cancelled
}

// RecordInput is the inbox item a step drained. The fields after
// EnqueuedAt are detail (journal?detail=true): the value as JSON (for an
// event, call, timer or fabric message; a receipt is Record.Receipt),
// the whole wire payload as the journal keeps it (canonical CBOR, base64),
// the timer a timer input fired and the input's cause.
type RecordInput struct {
	Seq        uint64    `json:"seq"`
	Kind       string    `json:"kind"`
	Type       string    `json:"type,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at,omitzero"`

	Value       json.RawMessage `json:"value,omitempty"`
	PayloadCBOR []byte          `json:"payload_cbor,omitempty"`
	Timer       string          `json:"timer,omitempty"`
	Cause       *RecordCause    `json:"cause,omitempty"`
}

// LeaseRow is one world a worker holds or is assigned.
type LeaseRow struct {
	Worker     string      `json:"worker"`
	World      string      `json:"world"`
	Lease      *Lease      `json:"lease"`
	Assignment *Assignment `json:"assignment"`
}

// Effect is a pending or inflight effect.
type Effect struct {
	IntentHash   string          `json:"intent_hash"`
	World        string          `json:"world"`
	Kind         string          `json:"kind"`
	Origin       string          `json:"origin"`
	Seq          uint64          `json:"seq"`
	State        string          `json:"state"`
	EnqueuedAt   time.Time       `json:"enqueued_at,omitzero"`
	Attempt      int             `json:"attempt"`
	ClaimedBy    string          `json:"claimed_by,omitempty"`
	ClaimExpires time.Time       `json:"claim_expires,omitzero"`
	Retries      int             `json:"retries"`
	Params       json.RawMessage `json:"params,omitempty"` // absent when not CBOR
	ParamsCBOR   []byte          `json:"params_cbor"`

	// Failures and RetryAt are the retry schedule: the failed executions
	// so far and when the effect may run again (absent: at once).
	Failures int       `json:"failures"`
	RetryAt  time.Time `json:"retry_at,omitzero"`
	// HoldReason and HeldAt are the latest hold's: a held effect waits
	// for an operator's release or receipt (absent: never held).
	HoldReason string    `json:"hold_reason,omitempty"`
	HeldAt     time.Time `json:"held_at,omitzero"`
}

// EffectStatus is an effect's record after an operator's retry, hold or
// release.
type EffectStatus struct {
	IntentHash  string    `json:"intent_hash"`
	World       string    `json:"world"`
	Kind        string    `json:"kind"`
	State       string    `json:"state"`
	Attempts    int       `json:"attempts"`
	Retries     int       `json:"retries"`
	RetryReason string    `json:"retry_reason,omitempty"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
	// The retry schedule (see Effect) and the latest failure's message.
	Failures  int       `json:"failures"`
	RetryAt   time.Time `json:"retry_at,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// The latest hold (absent: never held) and the release that ended it.
	HoldReason    string    `json:"hold_reason,omitempty"`
	HeldAt        time.Time `json:"held_at,omitzero"`
	ReleaseReason string    `json:"release_reason,omitempty"`
}

// HeldCount answers a release of every held effect: how many it released.
type HeldCount struct {
	Released int `json:"released"`
}

// ReceiptAck answers an injected receipt: its inbox seq, and whether the
// effect was already done (then Seq is the first receipt's).
type ReceiptAck struct {
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// Timer is a scheduled or claimed timer.
type Timer struct {
	IntentHash   string    `json:"intent_hash"`
	World        string    `json:"world"`
	DeliverAt    time.Time `json:"deliver_at,omitzero"`
	State        string    `json:"state"`
	Attempt      int       `json:"attempt"`
	ClaimedBy    string    `json:"claimed_by,omitempty"`
	ClaimExpires time.Time `json:"claim_expires,omitzero"`
}

// Worker is a worker's inventory record. Live: its last heartbeat (store
// clock) is within the server's WorkerLiveFor. WorldsHeld counts the
// worlds whose unexpired lease it holds, WorldsAssigned those placed on
// it; the orchestrator's own lease, which a node holds under its worker
// id while it places worlds, counts as neither.
type Worker struct {
	ID       string `json:"id"`
	Capacity int    `json:"capacity"`
	Draining bool   `json:"draining"`
	Live     bool   `json:"live"`
	// Status is live, draining (live and marked draining) or dead (no
	// heartbeat within WorkerLiveFor, whatever its draining mark says).
	Status         string    `json:"status"`
	HeartbeatAt    time.Time `json:"heartbeat_at,omitzero"`
	StartedAt      time.Time `json:"started_at,omitzero"`
	WorldsHeld     int       `json:"worlds_held"`
	WorldsAssigned int       `json:"worlds_assigned"`
	// Capabilities is what the worker last advertised (role:<role>,
	// world:<universe>@<version>, workflow:<name>@<version>,
	// effect:<kind>), sorted; empty for a binary older than worker
	// classes, which is taken as carrying everything.
	Capabilities []string `json:"capabilities"`
	// Roles are the roles among them (plane.Roles' names, in their
	// order): every role for a worker that advertised nothing.
	Roles []string `json:"roles"`
}

// request bodies

type createWorldReq struct {
	ID       string `json:"id,omitempty"`
	Universe string `json:"universe,omitempty"`
}

type eventReq struct {
	Type           string          `json:"type,omitempty"`
	Value          json.RawMessage `json:"value,omitempty"`
	Payload        []byte          `json:"payload,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

type callReq struct {
	Type      string          `json:"type,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
	Payload   []byte          `json:"payload,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	TimeoutMs int64           `json:"timeout_ms,omitempty"`
}

type upgradeReq struct {
	To    uint64 `json:"to"`
	After string `json:"after,omitempty"` // a universe's: the world id to continue after
	Limit int    `json:"limit,omitempty"` // a universe's: worlds in this page (0: 100)
}

// WorldUpgrade answers POST /v1/worlds/{id}/upgrade.
type WorldUpgrade struct {
	World string `json:"world"`
	From  uint64 `json:"from"` // the version the world is on (0: it never stepped)
	To    uint64 `json:"to"`
	// Status is "requested" (an upgrade input was enqueued), "pending"
	// (one to that version waits already) or "already" (the world is on
	// it). The upgrade's outcome is its journal record's.
	Status string `json:"status"`
	Seq    uint64 `json:"seq,omitempty"` // the upgrade input's inbox seq
}

// UniverseUpgrade answers POST /v1/universes/{universe}/upgrade: one
// page of the universe's worlds, by id.
type UniverseUpgrade struct {
	Asked    int              `json:"asked"`   // upgrade inputs enqueued, or waiting already
	Already  int              `json:"already"` // worlds on the version already
	Failed   int              `json:"failed"`  // requests that failed: Failures says why
	Failures []UpgradeFailure `json:"failures"`
	Next     string           `json:"next,omitempty"` // pass as "after" for the next page; absent: done
}

// UpgradeFailure is a world whose upgrade could not be requested.
type UpgradeFailure struct {
	World string `json:"world"`
	Code  string `json:"code"`
	Error string `json:"error"`
}

type forkReq struct {
	ID     string `json:"id,omitempty"`
	Height uint64 `json:"height,omitempty"`
}

type reasonReq struct {
	Reason string `json:"reason,omitempty"`
}

type receiptReq struct {
	Status string          `json:"status,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	Reason string          `json:"reason,omitempty"`
}

type drainReq struct {
	Draining *bool `json:"draining,omitempty"`
}

// list bodies

type worldsResp struct {
	Worlds []World `json:"worlds"`
	Next   string  `json:"next,omitempty"` // the "after" of the page after; absent on the last page
}

type worldViewsResp struct {
	Worlds []WorldView `json:"worlds"`
	Next   string      `json:"next,omitempty"` // the "after" of the page after; absent on the last page
}

type leasesResp struct {
	Leases []LeaseRow `json:"leases"`
}

type effectsResp struct {
	Effects []Effect `json:"effects"`
	Next    string   `json:"next,omitempty"` // the "after" of the page after; absent on the last page
}

type timersResp struct {
	Timers []Timer `json:"timers"`
	Next   string  `json:"next,omitempty"` // the "after" of the page after; absent on the last page
}

type workersResp struct {
	Workers []Worker `json:"workers"`
	Next    string   `json:"next,omitempty"` // the "after" of the page after; absent on the last page
}

type statusResp struct {
	Status string `json:"status"`
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func worldOf(w store.World) World {
	out := World{
		ID: w.ID, Universe: w.Universe, Status: string(w.Status), StatusReason: w.StatusReason,
		StatusChangedAt: utc(w.StatusChangedAt), CreatedAt: utc(w.CreatedAt),
	}
	if w.ParentWorld != "" {
		out.Lineage = &Lineage{Parent: w.ParentWorld, ParentSnapshotHash: w.ParentSnapshotHash, ForkedAtHeight: w.ForkedAtHeight}
	}
	return out
}

func leaseOf(l *store.Lease) *Lease {
	if l == nil {
		return nil
	}
	return &Lease{Holder: l.Holder, Incarnation: l.Incarnation, Epoch: l.Epoch, ExpiresAt: utc(l.ExpiresAt)}
}

func assignmentOf(a *store.Assignment) *Assignment {
	if a == nil {
		return nil
	}
	return &Assignment{Worker: a.DesiredWorker, Reason: a.Reason}
}
