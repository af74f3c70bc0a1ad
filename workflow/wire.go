package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// Step kinds, recorded in every StepStarted so that a re-run that asks for
// the same id as another kind of step is a divergence.
const (
	kindStep   = "step"
	kindSleep  = "sleep"
	kindSignal = "signal"
	kindEffect = "effect"
	kindChild  = "child"
	// kindPatch is a patch marker (Patched): StepStarted and StepCompleted
	// of step "sys:patch:<id>", with the value true. A binary older than
	// patches refuses the kind as unknown and leaves the run to a node
	// that knows it, rather than replaying it down the wrong path.
	kindPatch = "patch"
)

// Inbox item kinds this package writes into a run's inbox. The store's own
// kinds (receipts, timer firings) arrive there too.
const (
	ItemStart   = "workflow.start"   // the run's definition and input; one per run
	ItemSignal  = "workflow.signal"  // Client.Signal
	ItemControl = "workflow.control" // Client.Cancel, Pause, Resume
	ItemChild   = "workflow.child"   // a child run ended (a hint: the child's stream decides)

	startKey = "workflow.start" // the start item's dedupe key: one start per run
)

// Control operations.
const (
	opPause  = "pause"
	opResume = "resume"
	opCancel = "cancel"
)

// Reserved step-id prefixes: user step names never start with "sys:", so
// the ids of sleeps, awaits and children never collide with them.
const (
	sleepBase = "sys:sleep"
	awaitBase = "sys:await:"
	childBase = "sys:child:"
	patchBase = "sys:patch:"
)

// maxNameBytes leaves room for "#<occurrence>" within the store's
// identifier limit.
const maxNameBytes = store.MaxIDBytes - 24

// checkName validates a user-chosen name (a step's, a signal's).
func checkName(what, name string) error {
	switch {
	case name == "" || !utf8.ValidString(name) || strings.ContainsAny(name, "#\x00"):
		return errorf(what, ErrInvalid, "", detail(fmt.Sprintf("name %q must be non-empty UTF-8 without '#' or NUL", name)))
	case strings.HasPrefix(name, "sys:"):
		return errorf(what, ErrInvalid, "", detail(fmt.Sprintf("name %q uses the reserved \"sys:\" prefix", name)))
	case len(name) > maxNameBytes:
		return errorf(what, ErrInvalid, "", detail(fmt.Sprintf("name is %d bytes, limit %d", len(name), maxNameBytes)))
	}
	return nil
}

// stepID is the id of the n-th (from 1) step with base id base.
func stepID(base string, n int) string {
	if n <= 1 {
		return base
	}
	return base + "#" + strconv.Itoa(n)
}

// ---- event payloads (canonical CBOR maps) ----

// stepStarted is the payload of StepStarted.
type stepStarted struct {
	Kind       string `cbor:"kind"`
	DeliverAt  int64  `cbor:"deliver_at,omitempty"` // a sleep's due time, Unix ns
	Deadline   int64  `cbor:"deadline,omitempty"`   // an effect attempt's receipt deadline, Unix ns
	Timer      string `cbor:"timer,omitempty"`      // a sleep's timer intent hash
	Intent     string `cbor:"intent,omitempty"`     // an effect attempt's intent hash
	EffectKind string `cbor:"effect_kind,omitempty"`
	Signal     string `cbor:"signal,omitempty"`
	Child      string `cbor:"child,omitempty"`
	// ParentClose is a child's parent-close policy (ParentClose*); empty
	// is ParentCloseCancel, which is what runs recorded before policies
	// had.
	ParentClose string `cbor:"parent_close,omitempty"`
}

// stepCompleted is the payload of StepCompleted: the step's result as
// canonical CBOR, and for a step completed by an inbox item (a signal, a
// timer firing, a receipt) that item's seq, which it consumed.
type stepCompleted struct {
	Value cbor.RawMessage `cbor:"value"`
	Seq   uint64          `cbor:"seq,omitempty"`
	// TimedOut says an AwaitWithTimeout's timer came first (Seq is the
	// firing's): the step ended without a signal.
	TimedOut bool `cbor:"timed_out,omitempty"`
}

// stepFailed is the payload of StepFailed: one failed attempt. Final says
// the step failed for good; otherwise RetryAt is when the next attempt is
// due. Intent is set when an effect attempt's wait for its receipt ran
// out: the intent it left queued or executing. The next attempt waits for
// that same intent rather than asking for the effect again; a final
// failure withdrew it in the same write, if no adapter had claimed it.
type stepFailed struct {
	Error   string `cbor:"error"`
	Final   bool   `cbor:"final,omitempty"`
	Timeout bool   `cbor:"timeout,omitempty"`
	RetryAt int64  `cbor:"retry_at,omitempty"`
	Seq     uint64 `cbor:"seq,omitempty"`
	Intent  string `cbor:"intent,omitempty"`
}

// stepSkipped is the payload of StepSkipped: an attempt that was in
// flight when its run was cancelled, and will never end.
type stepSkipped struct {
	Reason string `cbor:"reason"`
	// Control is the inbox seq of the cancel request the skip delivered
	// to the function (0 for skips recorded before cancellation was
	// observable): the first such skip is where the function saw the
	// cancel, on every re-run.
	Control uint64 `cbor:"control,omitempty"`
}

// runStart is the payload of RunStarted: the run's input, so that the
// stream alone replays the run (Replay).
type runStart struct {
	Input cbor.RawMessage `cbor:"input"`
	// Attrs are the start's search attributes (WithAttributes).
	Attrs map[string]string `cbor:"attrs,omitempty"`
}

// runControl is the payload of RunPaused and RunResumed. Control is the
// inbox seq of the request it records (0 when the run was resumed without
// one, by an operator's status change); sourceOccurredAt is when the
// request was made, which may be well before the event is appended.
type runControl struct {
	Control          uint64 `cbor:"control,omitempty"`
	Reason           string `cbor:"reason,omitempty"`
	SourceOccurredAt int64  `cbor:"sourceOccurredAt,omitempty"`
	// ResetTo, on an operator's RunResumed, discards the steps at and
	// after that index for replay (they stay in the journal for the record).
	ResetTo *uint64 `cbor:"resetTo,omitempty"`
	// ContinuedInput, on the RunResumed of step "sys:continue" (attempt =
	// the new generation), is the input of a run that continued as new:
	// history folding starts over from it (ContinueAsNew).
	ContinuedInput cbor.RawMessage `cbor:"continuedInput,omitempty"`
}

// runEnd is the payload of RunCompleted, RunFailed and RunCancelled.
type runEnd struct {
	Output           cbor.RawMessage `cbor:"output,omitempty"`
	Error            string          `cbor:"error,omitempty"`
	Divergence       *divergenceWire `cbor:"divergence,omitempty"`
	Control          uint64          `cbor:"control,omitempty"`
	Reason           string          `cbor:"reason,omitempty"`
	SourceOccurredAt int64           `cbor:"sourceOccurredAt,omitempty"`
}

type divergenceWire struct {
	Index    uint64 `cbor:"index"`
	Recorded string `cbor:"recorded"`
	Got      string `cbor:"got"`
	Reason   string `cbor:"reason,omitempty"`
}

// ---- inbox payloads ----

// startItem is the payload of the run's start item.
type startItem struct {
	Workflow string          `cbor:"workflow"`
	Version  uint64          `cbor:"version"`
	Input    cbor.RawMessage `cbor:"input"`
	// Parent is the run that started this one as a child; it is told
	// when this run ends. It is not part of the run's identity.
	Parent string `cbor:"parent,omitempty"`
	// Queue, Priority and Partition place the run in a queue (OnQueue):
	// a worker's scan puts a run whose start names a queue but which has
	// no entry there (its starter stopped in between) in it.
	Queue     string `cbor:"queue,omitempty"`
	Priority  int    `cbor:"priority,omitempty"`
	Partition string `cbor:"partition,omitempty"`
	// Timeout is WithRunTimeout's, in ns: the run fails if not ended that
	// long after its start item was enqueued.
	Timeout int64 `cbor:"timeout,omitempty"`
	// Attrs are the run's search attributes at its start (WithAttributes):
	// not part of its identity.
	Attrs map[string]string `cbor:"attrs,omitempty"`
}

type signalItem struct {
	Name  string          `cbor:"name"`
	Value cbor.RawMessage `cbor:"value"`
}

type controlItem struct {
	Op     string `cbor:"op"`
	Reason string `cbor:"reason,omitempty"`
}

type childItem struct {
	Child string `cbor:"child"`
}

// timerPayload is a sleep's timer payload, handed back by its firing.
type timerPayload struct {
	Run  string `cbor:"run"`
	Step string `cbor:"step"`
}

// decodePayload decodes the payload of a recorded step or run event
// of this package (eventType one of the event package's lifecycle types)
// and checks what the worker relies on. It never panics; every failure is
// an *event.DecodeError or an error matching ErrInvalid. Unknown event
// types decode to nil: projectors must tolerate them.
func decodePayload(eventType string, payload []byte) (any, error) {
	var err error
	switch eventType {
	case event.StepStarted:
		var p stepStarted
		if err = event.Unmarshal(payload, &p); err == nil {
			switch p.Kind {
			case kindStep, kindSleep, kindSignal, kindEffect, kindChild, kindPatch, kindSide, kindOp, kindEvent, kindAttrs:
			default:
				return nil, errorf("decode", ErrInvalid, "", detail("unknown step kind "+strconv.Quote(p.Kind)))
			}
			return p, nil
		}
	case event.StepCompleted:
		var p stepCompleted
		if err = event.Unmarshal(payload, &p); err == nil {
			if len(p.Value) == 0 {
				return nil, errorf("decode", ErrInvalid, "", detail("a completed step has no value"))
			}
			return p, nil
		}
	case event.StepFailed:
		var p stepFailed
		if err = event.Unmarshal(payload, &p); err == nil {
			return p, nil
		}
	case event.StepSkipped:
		var p stepSkipped
		if err = event.Unmarshal(payload, &p); err == nil {
			return p, nil
		}
	case event.RunPaused, event.RunResumed:
		var p runControl
		if err = event.Unmarshal(payload, &p); err == nil {
			return p, nil
		}
	case event.RunCompleted, event.RunFailed, event.RunCancelled:
		var p runEnd
		if err = event.Unmarshal(payload, &p); err == nil {
			return p, nil
		}
	case event.RunStarted:
		var p runStart
		if err = event.Unmarshal(payload, &p); err == nil {
			if len(p.Input) == 0 {
				return nil, errorf("decode", ErrInvalid, "", detail("RunStarted has no input"))
			}
			return p, nil
		}
	case event.RunQueued:
		var p runQueued
		if err = event.Unmarshal(payload, &p); err == nil {
			return p, nil
		}
	default:
		return nil, nil
	}
	return nil, err
}

func decodeStart(b []byte) (startItem, error) {
	var s startItem
	if err := event.Unmarshal(b, &s); err != nil {
		return startItem{}, err
	}
	if s.Workflow == "" || s.Version < 1 || s.Version > maxInt || len(s.Input) == 0 {
		return startItem{}, errorf("decode", ErrInvalid, "", detail("a start item needs a workflow, a version and an input"))
	}
	return s, nil
}

// decodeSignal decodes a signal item's payload (canonical CBOR): its name
// and its value's canonical CBOR. Every failure is an *event.DecodeError or matches
// ErrInvalid.
func decodeSignal(payload []byte) (name string, value []byte, err error) {
	// Canonical as a whole, so the value recorded from it is canonical
	// too (a step's record must be).
	if err := event.IsCanonical(payload); err != nil {
		return "", nil, err
	}
	var s signalItem
	if err := event.Unmarshal(payload, &s); err != nil {
		return "", nil, err
	}
	if err := checkName("signal", s.Name); err != nil {
		return "", nil, err
	}
	if len(s.Value) == 0 {
		return "", nil, errorf("decode", ErrInvalid, "", detail("a signal has no value"))
	}
	return s.Name, s.Value, nil
}

func decodeControl(b []byte) (controlItem, error) {
	var c controlItem
	if err := event.Unmarshal(b, &c); err != nil {
		return controlItem{}, err
	}
	switch c.Op {
	case opPause, opResume, opCancel:
		return c, nil
	}
	return controlItem{}, errorf("decode", ErrInvalid, "", detail("unknown control op "+strconv.Quote(c.Op)))
}

// ---- hashes ----

// hashOf is a 64-hex-digit SHA-256 of parts joined by NUL bytes (no part
// contains NUL: ids are store identifiers).
func hashOf(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:])
}

// intentHash is the hash of an effect step's attempt: the same run, step
// and logical attempt always publish the same intent, which the store
// queues once.
func intentHash(run, step string, attempt uint64) string {
	return hashOf("orrery.workflow.effect", run, step, strconv.FormatUint(attempt, 10))
}

// timerHash is the hash of a sleep's timer; one per sleep step.
func timerHash(run, step string) string { return hashOf("orrery.workflow.timer", run, step) }

// maxValueBytes bounds a value the journal records for a run (a step's
// result, an effect's params, the run's output): a record holds it with a
// few fields more, and every record must read back within the decoder's
// default limit (event.DefaultMaxSize), or the run's history would not
// load and the run would be retried for ever.
const maxValueBytes = event.DefaultMaxSize - 16<<10

// checkValue refuses a value the journal could not record and read back:
// over maxValueBytes, or past the decoder's other limits (depth, elements).
func checkValue(what string, b []byte) error {
	if len(b) > maxValueBytes {
		return fmt.Errorf("%s is %d bytes encoded, more than a journal record holds (%d)", what, len(b), maxValueBytes)
	}
	if err := event.IsCanonical(b); err != nil {
		return fmt.Errorf("%s would not read back from the journal: %w", what, err)
	}
	return nil
}

// checkSpan refuses a wait of d from the run's clock whose end the store
// cannot hold (store.MaxTime): converted to Unix nanoseconds it would wrap
// into the past and fire at once. It is asked before a step takes its
// position, so a refused step records nothing and a re-run refuses it the
// same way. Under replay (no clock) every such step was decided live.
func checkSpan(c *Ctx, op, what string, d time.Duration) error {
	if c == nil || c.r == nil || c.r.ex == nil || d <= 0 {
		return nil
	}
	if end := c.r.ex.Now().Add(d); end.After(store.MaxTime) {
		return errorf(op, ErrInvalid, c.r.id, detail(fmt.Sprintf("%s %v ends %s, past the latest instant the store holds (%s)",
			what, d, end.UTC().Format(time.RFC3339), store.MaxTime.Format(time.RFC3339))))
	}
	return nil
}

// checkOptions is checkSpan for a step's timeout and longest retry wait.
func checkOptions(c *Ctx, op string, o stepOptions) error {
	if err := checkSpan(c, op, "the timeout", o.timeout); err != nil {
		return err
	}
	return checkSpan(c, op, "the retry policy's longest wait", o.retry.Max)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
