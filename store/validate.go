package store

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// The one validation of the persistence plane. The front (Front) runs these
// checks before it calls any backend, so a value one backend accepts every
// backend accepts, and a journal written on the embedded default moves to
// PostgreSQL unchanged. Each failure is an *Error of Kind ErrInvalid that
// names the field; nothing is written.
//
// The limits:
//
//   - Identifiers (world, universe, stream, worker, event id, intent hash,
//     message id, projector, kinds, event type, step id, plan id, policy
//     and state hashes): valid UTF-8 without NUL, at most MaxIDBytes
//     bytes; most are also required to be non-empty. An intent's origin
//     ("world@height") may be up to MaxOriginBytes.
//   - Keys (idempotency keys, dedupe keys): the same, up to MaxKeyBytes.
//   - Reasons (status changes, retries, resolutions, assignments): up to
//     MaxReasonBytes.
//   - Payloads (event payloads, inbox payloads, intent params, timer
//     payloads): at most MaxPayloadBytes; receipts at most MaxReceiptBytes;
//     snapshot state at most MaxStateBytes.
//   - Integers stored as signed 64-bit (attempts, plan versions, epochs,
//     heights, seqs): at most math.MaxInt64.
//   - Times (emittedAt, deliverAt): the zero time (absent) or within
//     [MinTime, MaxTime], the range every backend stores at nanosecond
//     precision. Durations (lease and claim TTLs): (0, MaxTTL].
//
// The numbers are event's (event.MaxIDBytes …), which the world kernel
// bounds every step by as well: the producer and this check share one set
// of constants, so a step the kernel lets through is one every backend
// accepts.
const (
	MaxIDBytes      = event.MaxIDBytes
	MaxKeyBytes     = event.MaxKeyBytes
	MaxReasonBytes  = event.MaxReasonBytes
	MaxPayloadBytes = event.MaxPayloadBytes
	MaxStateBytes   = event.MaxStateBytes
	// MaxReceiptBytes bounds a receipt's payload (Complete, CompleteMany,
	// Resolve): the largest input a world's kernel reads (the plane's tests
	// pin the two equal). A receipt the kernel could not read would leave
	// its effect's world to guess, so the store refuses it, and an adapter
	// pool sends a short receipt that says so instead.
	MaxReceiptBytes = 1 << 20
	MaxTTL          = 30 * 24 * time.Hour
	// MaxBatch bounds the items of one call (events of an append, intents,
	// refs or worlds of a bulk lease call, n of a claim).
	MaxBatch = event.MaxBatch
	// MaxOriginBytes bounds an intent's origin, "world@height": a world id
	// of MaxIDBytes, the '@' and the 20 digits of the largest height, so
	// that every world may emit effects whatever its id.
	MaxOriginBytes = MaxIDBytes + 1 + 20
)

// MinTime and MaxTime bound every stored time.
var (
	MinTime = event.MinTime
	MaxTime = event.MaxTime
)

func invalid(op, what, format string, args ...any) error {
	e := Errorf(op, ErrInvalid, "", format, args...)
	e.Detail = what + ": " + e.Detail
	return e
}

func checkText(op, what, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return invalid(op, what, "empty")
	case len(s) > max:
		return invalid(op, what, "%d bytes, at most %d", len(s), max)
	case !utf8.ValidString(s):
		return invalid(op, what, "not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(op, what, "contains NUL")
	}
	return nil
}

// CheckID checks a required identifier.
func CheckID(op, what, s string) error { return checkText(op, what, s, MaxIDBytes, true) }

// checkOptionalID checks an identifier that may be empty.
func checkOptionalID(op, what, s string) error { return checkText(op, what, s, MaxIDBytes, false) }

// CheckKey checks a required key.
func CheckKey(op, what, s string) error { return checkText(op, what, s, MaxKeyBytes, true) }

// checkOptionalKey checks a key that may be empty.
func checkOptionalKey(op, what, s string) error { return checkText(op, what, s, MaxKeyBytes, false) }

// CheckReason checks an operator's free-text reason (may be empty).
func CheckReason(op, s string) error { return checkText(op, "reason", s, MaxReasonBytes, false) }

// checkPayload checks a payload's size.
func checkPayload(op, what string, b []byte) error {
	if len(b) > MaxPayloadBytes {
		return invalid(op, what, "%d bytes, at most %d", len(b), MaxPayloadBytes)
	}
	return nil
}

// CheckInt checks that an unsigned integer fits a signed 64-bit column.
func CheckInt(op, what string, v uint64) error {
	if v > math.MaxInt64 {
		return invalid(op, what, "%d exceeds %d", v, int64(math.MaxInt64))
	}
	return nil
}

// checkTime checks a time that may be absent (zero).
func checkTime(op, what string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	return checkRequiredTime(op, what, t)
}

// checkRequiredTime checks a time that must be present and in range.
func checkRequiredTime(op, what string, t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return invalid(op, what, "%s outside [%s, %s]", t.UTC().Format(time.RFC3339Nano),
			MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339))
	}
	return nil
}

// checkTTL checks a lease or claim duration.
func checkTTL(op, what string, d time.Duration) error {
	if d <= 0 || d > MaxTTL {
		return invalid(op, what, "%v outside (0, %v]", d, MaxTTL)
	}
	return nil
}

// checkBatch checks the size of a batch or a claim's n. Zero is allowed
// (an empty call); negative or above MaxBatch is not.
func checkBatch(op, what string, n int) error {
	if n < 0 || n > MaxBatch {
		return invalid(op, what, "%d outside [0, %d]", n, MaxBatch)
	}
	return nil
}

// checkRecord checks what the append authority itself requires of an input
// record: the identifiers, key and attempts are present and within the
// limits, the payload is within its size and emittedAt in range. Full
// envelope validation (key recomputation, canonical payload, step rules) is
// the producer's, through event.Envelope.Validate: the store never
// interprets what it stores.
func checkRecord(op string, r *Record) error {
	if err := CheckID(op, "eventId", r.EventID); err != nil {
		return err
	}
	for _, c := range []error{
		CheckKey(op, "idempotencyKey", r.IdempotencyKey),
		CheckID(op, "eventType", r.EventType),
		checkOptionalID(op, "stepId", r.StepID),
		checkOptionalID(op, "planId", r.PlanID),
		CheckInt(op, "planVersion", r.PlanVersion),
		CheckInt(op, "logicalAttemptId", r.LogicalAttemptID),
		CheckInt(op, "engineAttemptId", r.EngineAttemptID),
		checkTime(op, "emittedAt", r.EmittedAt),
		checkPayload(op, "payload", r.Payload),
	} {
		if c != nil {
			return withEvent(c, r.EventID)
		}
	}
	switch {
	case r.LogicalAttemptID < 1:
		return withEvent(invalid(op, "logicalAttemptId", "must be >= 1"), r.EventID)
	case r.EngineAttemptID < 1:
		return withEvent(invalid(op, "engineAttemptId", "must be >= 1"), r.EventID)
	}
	return nil
}

func withEvent(err error, id string) error {
	if e, ok := err.(*Error); ok {
		e.Detail = "event " + id + ": " + e.Detail
	}
	return err
}

// checkRecords checks a batch of records.
func checkRecords(op string, rs []Record) error {
	if err := checkBatch(op, "events", len(rs)); err != nil {
		return err
	}
	for i := range rs {
		if err := checkRecord(op, &rs[i]); err != nil {
			return err
		}
	}
	return nil
}

// CheckIngress checks a producer's inbox item: a kind that is not one the
// store reserves for itself, a dedupe key outside the store's namespaces,
// and a payload within its size.
func CheckIngress(op string, item InboxItem) error {
	if err := CheckID(op, "kind", item.Kind); err != nil {
		return err
	}
	switch item.Kind {
	case vocab.KindReceipt, vocab.KindTimer, vocab.KindFabric:
		return invalid(op, "kind", "%q is reserved for the store's own deliveries", item.Kind)
	}
	if err := checkOptionalKey(op, "dedupeKey", item.DedupeKey); err != nil {
		return err
	}
	if strings.HasPrefix(item.DedupeKey, ReceiptKeyPrefix) || strings.HasPrefix(item.DedupeKey, TimerKeyPrefix) {
		return invalid(op, "dedupeKey", "%q is in a namespace reserved for the store's own deliveries", item.DedupeKey)
	}
	if item.MaxBacklog < RefuseNew {
		return invalid(op, "maxBacklog", "%d is below RefuseNew (0 is unbounded)", item.MaxBacklog)
	}
	if call := strings.HasPrefix(item.DedupeKey, CallKeyPrefix); item.DedupeKey != "" && call != (item.Kind == vocab.KindCall) {
		if call {
			return invalid(op, "dedupeKey", "%q is in the namespace reserved for calls (%q)", item.DedupeKey, CallKeyPrefix)
		}
		return invalid(op, "dedupeKey", "%q: a call's key is %q followed by its call id", item.DedupeKey, CallKeyPrefix)
	}
	if upgrade := strings.HasPrefix(item.DedupeKey, UpgradeKeyPrefix); upgrade != (item.Kind == vocab.KindUpgrade) {
		if upgrade {
			return invalid(op, "dedupeKey", "%q is in the namespace reserved for upgrades (%q)", item.DedupeKey, UpgradeKeyPrefix)
		}
		return invalid(op, "dedupeKey", "an upgrade's key is %q followed by its version", UpgradeKeyPrefix)
	}
	if sched := strings.HasPrefix(item.DedupeKey, ScheduleKeyPrefix); sched != item.ScheduleTick {
		if sched {
			return invalid(op, "dedupeKey", "%q is in the namespace reserved for schedules' ticks (%q)", item.DedupeKey, ScheduleKeyPrefix)
		}
		return invalid(op, "dedupeKey", "a schedule tick's key is %q followed by the schedule and the tick", ScheduleKeyPrefix)
	}
	return checkPayload(op, "payload", item.Payload)
}

// MaxRetryPolicyBytes bounds an intent's own retry policy (Intent.Retry):
// a handful of durations and the names of its non-retryable error
// classes.
const MaxRetryPolicyBytes = 4 << 10

func checkRetry(op string, b []byte) error {
	if len(b) > MaxRetryPolicyBytes {
		return invalid(op, "retry", "%d bytes, at most %d", len(b), MaxRetryPolicyBytes)
	}
	return nil
}

// checkIntent checks an intent to publish.
func checkIntent(op string, in vocab.Intent) error {
	for _, c := range []error{
		CheckID(op, "intentHash", in.IntentHash),
		CheckID(op, "kind", in.Kind),
		checkText(op, "origin", in.Origin, MaxOriginBytes, false),
		checkOptionalID(op, "policyContextHash", in.PolicyContextHash),
		checkPayload(op, "params", in.Params),
		checkRetry(op, in.Retry),
	} {
		if c != nil {
			return c
		}
	}
	return nil
}

// checkTimerSet checks a timer to schedule.
func checkTimerSet(op string, t vocab.TimerSet) error {
	if err := CheckID(op, "intentHash", t.IntentHash); err != nil {
		return err
	}
	if err := checkRequiredTime(op, "deliverAt", t.DeliverAt); err != nil {
		return err
	}
	return checkPayload(op, "payload", t.Payload)
}

// checkSnapshot checks a snapshot to store: a state hash, and a state
// within its size. (That its height does not pass the head is the
// backend's check, inside its transaction.)
func checkSnapshot(op string, s Snapshot) error {
	if err := CheckID(op, "stateHash", s.StateHash); err != nil {
		return err
	}
	if err := CheckInt(op, "height", s.Height); err != nil {
		return err
	}
	if len(s.State) > MaxStateBytes {
		return invalid(op, "state", "%d bytes, at most %d", len(s.State), MaxStateBytes)
	}
	return nil
}

// checkReceipt checks an effect's receipt.
func checkReceipt(op string, r vocab.Receipt) error {
	switch r.Status {
	case vocab.ReceiptOK, vocab.ReceiptError, vocab.ReceiptTimeout:
	default:
		return invalid(op, "receipt status", "%q is not ok, error or timeout", r.Status)
	}
	if len(r.Payload) > MaxReceiptBytes {
		return invalid(op, "receipt payload", "%d bytes, at most %d", len(r.Payload), MaxReceiptBytes)
	}
	return nil
}

// checkFireHeld checks FireHeld's arguments: the world, its lease epoch
// and the timer's intent hash.
func checkFireHeld(op, world string, epoch uint64, intentHash string) error {
	if err := CheckID(op, "world", world); err != nil {
		return err
	}
	if err := CheckInt(op, "epoch", epoch); err != nil {
		return err
	}
	return CheckID(op, "intentHash", intentHash)
}

// checkClaim checks a claim presented to Complete or Fire.
func checkClaim(op string, c vocab.Claim) error {
	if err := CheckID(op, "claim worker", c.Worker); err != nil {
		return err
	}
	if c.Attempt < 1 {
		return invalid(op, "claim attempt", "%d, must be >= 1", c.Attempt)
	}
	return nil
}

// checkCompletion checks one completion of a CompleteMany (Complete's
// arguments): the intent hash, the claim and the receipt.
func checkCompletion(op string, c vocab.Completion) error {
	if err := CheckID(op, "intentHash", c.IntentHash); err != nil {
		return err
	}
	if err := checkClaim(op, c.Claim); err != nil {
		return err
	}
	return checkReceipt(op, c.Receipt)
}

// checkResolve checks an operator's Resolve: the intent hash, the receipt
// and the reason.
func checkResolve(op, intentHash string, r vocab.Receipt, reason string) error {
	if err := CheckID(op, "intentHash", intentHash); err != nil {
		return err
	}
	if err := checkReceipt(op, r); err != nil {
		return err
	}
	return CheckReason(op, reason)
}

// checkKinds checks the effect kinds of a Claim.
func checkKinds(op string, kinds []string) error {
	if len(kinds) == 0 {
		return invalid(op, "kinds", "empty: an adapter claims the kinds it serves")
	}
	if err := checkBatch(op, "kinds", len(kinds)); err != nil {
		return err
	}
	for _, k := range kinds {
		if err := CheckID(op, "kind", k); err != nil {
			return err
		}
	}
	return nil
}

// checkAcquireLeases checks an AcquireLeases call: the worker, the TTL,
// at most MaxBatch worlds, and each world's id.
func checkAcquireLeases(op, worker string, worlds []string, ttl time.Duration) error {
	if err := CheckID(op, "worker", worker); err != nil {
		return err
	}
	if err := checkTTL(op, "ttl", ttl); err != nil {
		return err
	}
	if err := checkBatch(op, "worlds", len(worlds)); err != nil {
		return err
	}
	for _, w := range worlds {
		if err := CheckID(op, "world", w); err != nil {
			return err
		}
	}
	return nil
}

// CheckStatus checks a world status an operator asks for.
func CheckStatus(op string, s WorldStatus) error {
	switch s {
	case WorldActive, WorldPaused, WorldArchived:
		return nil
	}
	return invalid(op, "status", "%q is not active, paused or archived", s)
}

// checkCommit checks a commit batch's contents (everything that does not
// need the transaction).
func checkCommit(op string, b *CommitBatch) error {
	if err := checkRecords(op, b.Entries); err != nil {
		return err
	}
	for _, v := range []uint64{b.ExpectedCursor, b.NewCursor, b.ExpectedHead} {
		if err := CheckInt(op, "cursor or head", v); err != nil {
			return err
		}
	}
	if b.NewCursor < b.ExpectedCursor {
		return invalid(op, "newCursor", "cannot move back from %d to %d", b.ExpectedCursor, b.NewCursor)
	}
	if err := checkBatch(op, "intents", len(b.Intents)); err != nil {
		return err
	}
	for _, in := range b.Intents {
		if err := checkIntent(op, in); err != nil {
			return err
		}
	}
	if err := checkBatch(op, "timers", len(b.Timers)+len(b.CancelTimers)); err != nil {
		return err
	}
	for _, t := range b.Timers {
		if err := checkTimerSet(op, t); err != nil {
			return err
		}
	}
	for _, h := range b.CancelTimers {
		if err := CheckID(op, "cancelled timer", h); err != nil {
			return err
		}
	}
	if err := checkBatch(op, "withdrawn intents", len(b.Withdraw)); err != nil {
		return err
	}
	for _, h := range b.Withdraw {
		if err := CheckID(op, "withdrawn intent", h); err != nil {
			return err
		}
	}
	if b.Status != nil {
		if b.Status.Status != WorldPaused && b.Status.Status != WorldArchived {
			return invalid(op, "status", "a commit may move its world to paused or archived, not %q", b.Status.Status)
		}
		if err := CheckReason(op, b.Status.Reason); err != nil {
			return err
		}
	}
	if b.Snapshot != nil {
		return checkSnapshot(op, *b.Snapshot)
	}
	return nil
}

// CheckSpawn checks a Spawn's spec: the ids, every item as Enqueue checks
// it, no dedupe key twice among the items, and a TTL when a holder is
// named.
func CheckSpawn(op string, s SpawnSpec) error {
	if err := CheckID(op, "universe", s.Universe); err != nil {
		return err
	}
	if err := CheckID(op, "world", s.World); err != nil {
		return err
	}
	if err := checkBatch(op, "items", len(s.Items)); err != nil {
		return err
	}
	keys := make(map[string]bool, len(s.Items))
	for _, it := range s.Items {
		if err := CheckIngress(op, it); err != nil {
			return err
		}
		if it.DedupeKey != "" {
			if keys[it.DedupeKey] {
				return invalid(op, "dedupeKey", "%q is given to two items", it.DedupeKey)
			}
			keys[it.DedupeKey] = true
		}
	}
	if err := checkRecords(op, s.Events); err != nil {
		return err
	}
	ids := make(map[string]bool, len(s.Events))
	for _, e := range s.Events {
		if ids[e.IdempotencyKey] {
			return invalid(op, "idempotencyKey", "%q is given to two events", e.IdempotencyKey)
		}
		ids[e.IdempotencyKey] = true
	}
	if s.Holder != "" {
		if err := CheckID(op, "holder", s.Holder); err != nil {
			return err
		}
		if err := checkOptionalID(op, "incarnation", s.Incarnation); err != nil {
			return err
		}
		return checkTTL(op, "ttl", s.TTL)
	}
	if s.Incarnation != "" {
		return invalid(op, "incarnation", "an incarnation without a holder")
	}
	if s.TTL != 0 {
		return invalid(op, "ttl", "a TTL without a holder")
	}
	if len(s.Events) > 0 {
		return invalid(op, "events", "events without a holder: a world's journal is written under its lease")
	}
	return nil
}

// checkHeartbeat checks a worker's heartbeat: its id, and a capacity in
// [0, MaxCapacity].
func checkHeartbeat(op, worker string, capacity int) error {
	if err := CheckID(op, "worker", worker); err != nil {
		return err
	}
	if capacity < 0 || capacity > MaxCapacity {
		return invalid(op, "capacity", "%d outside [0, %d]", capacity, MaxCapacity)
	}
	return nil
}

// MaxCapacity bounds a worker's declared capacity (worlds it may host).
const MaxCapacity = 1 << 30

// MaxCapabilities bounds how many capabilities one heartbeat advertises:
// a worker record is read by every orchestrator pass, so a runaway list
// (a bug, not a big binary) is refused rather than stored.
const MaxCapabilities = 1024

// checkCapabilities checks an advertised list (normalized by Advertise).
func checkCapabilities(op string, caps []string) error {
	if len(caps) > MaxCapabilities {
		return invalid(op, "capabilities", "%d, at most %d", len(caps), MaxCapabilities)
	}
	for _, c := range caps {
		if err := CheckKey(op, "capability", c); err != nil {
			return err
		}
	}
	return nil
}

// checkListLimit checks a page's limit: zero is an empty page, above
// MaxListLimit is refused rather than clamped (see MaxListLimit).
func checkListLimit(op string, n int) error {
	if n < 0 || n > MaxListLimit {
		return invalid(op, "limit", "%d outside [0, %d]", n, MaxListLimit)
	}
	return nil
}

// checkEffectFilter checks QueryEffects' filter.
func checkEffectFilter(op string, q EffectFilter) error {
	if len(q.States) > 5 {
		return invalid(op, "states", "%d states, there are 5", len(q.States))
	}
	for _, st := range q.States {
		switch st {
		case vocab.EffectPending, vocab.EffectInflight, vocab.EffectHeld, vocab.EffectDone, vocab.EffectWithdrawn:
		default:
			return invalid(op, "states", "%q is not an effect state", st)
		}
	}
	return first(checkOptionalID(op, "world", q.World), checkOptionalID(op, "kind", q.Kind),
		CheckInt(op, "afterSeq", q.AfterSeq), checkListLimit(op, q.Limit))
}

// checkTimerFilter checks QueryTimers' filter. A cursor's time is checked
// only with its hash: the zero cursor is the start of the list.
func checkTimerFilter(op string, q TimerFilter) error {
	if len(q.States) > 3 {
		return invalid(op, "states", "%d states, there are 3", len(q.States))
	}
	for _, st := range q.States {
		switch st {
		case TimerScheduled, TimerClaimed, TimerDelivered:
		default:
			return invalid(op, "states", "%q is not a timer state", st)
		}
	}
	var cursor error
	if !q.After.IsZero() {
		cursor = first(CheckID(op, "after.intentHash", q.After.IntentHash), checkRequiredTime(op, "after.deliverAt", q.After.DeliverAt))
	}
	return first(checkOptionalID(op, "world", q.World), cursor, checkListLimit(op, q.Limit))
}

// checkQueueSpec checks a queue's declaration.
func checkQueueSpec(op string, q QueueSpec) error {
	switch {
	case q.Concurrency < 0 || q.WorkerConcurrency < 0 || q.RateLimit < 0:
		return invalid(op, "queue", "negative limit")
	case q.RateLimit > 0 && (q.RatePeriod <= 0 || q.RatePeriod > MaxTTL):
		return invalid(op, "queue", "a rate limit needs a rate period in (0, %v]", MaxTTL)
	case q.RateLimit == 0 && q.RatePeriod != 0:
		return invalid(op, "queue", "a rate period without a rate limit")
	}
	return CheckID(op, "queue", q.Name)
}

// checkQueuedRun checks what EnqueueRun reads of an entry.
func checkQueuedRun(op string, r QueuedRun) error {
	if r.Priority < -MaxPriority || r.Priority > MaxPriority {
		return invalid(op, "priority", "%d outside [%d, %d]", r.Priority, -MaxPriority, MaxPriority)
	}
	return first(CheckID(op, "queue", r.Queue), CheckID(op, "run", r.Run), checkOptionalKey(op, "partition", r.Partition),
		checkOptionalKey(op, "needs", r.Needs))
}
