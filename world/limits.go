package world

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
)

// The kernel's limits on one step. Every one is checked before the step's
// result leaves the kernel, so that the plane never hands the store a
// commit it must refuse: a refused commit would be retried with the same
// input for ever, and every input queued behind it would wait. A step over
// a limit is an error outcome instead (its input consumed, the state
// unchanged, its intents, timers and cancels discarded, Err a *LimitError
// saying which limit and by how much), and the world goes on with the
// next input. They derive from the store's limits (event.MaxBatch,
// event.MaxPayloadBytes, event.MaxStateBytes), which both sides share;
// TestKernelLimitsFitTheStore pins that a step at every limit at once is
// still a commit the store accepts.
const (
	// MaxStepIntents bounds the effects a step asks for (Effect, Send and
	// SendParams together). A host commits many steps at once, and leaves
	// room for one more step at this bound under event.MaxBatch.
	MaxStepIntents = 1000
	// MaxStepTimers bounds the timers a step sets (one set and cancelled
	// in the same step counts).
	MaxStepTimers = 1000
	// MaxStepCancels bounds the armed timers a step cancels.
	MaxStepCancels = 1000
	// MaxParamsBytes bounds one effect's params, canonical CBOR.
	MaxParamsBytes = event.MaxPayloadBytes
	// MaxTimerBytes bounds a timer's firing payload: it comes back as an
	// input, and an input is read within event.DefaultMaxSize.
	MaxTimerBytes = event.DefaultMaxSize
	// MaxReplyBytes bounds the reply to a call.
	MaxReplyBytes = event.MaxPayloadBytes
	// MaxStateBytes bounds the world's state after a step, as it is
	// hashed and snapshotted (what awaits included).
	MaxStateBytes = event.MaxStateBytes
	// MaxErrorBytes bounds the error text a journal record keeps, and the
	// text of StepResult.Err: a longer one is cut, on a character
	// boundary, and ends with a marker that says how long it was.
	MaxErrorBytes = 4 << 10
	// MaxStepLogs bounds the log entries a step keeps. Logs are not
	// journaled, so more is no failure: the rest are dropped and one last
	// entry says how many. A log message longer than MaxErrorBytes is cut
	// as an error text is.
	MaxStepLogs = 1000
	// MaxInputBytes bounds an input's payload: a longer one is a
	// malformed input, journaled without its bytes (a receipt's still ends
	// its effect: see Input.ReceiptFor). It is the bound every producer of
	// inputs works to: the store's receipt limit and an adapter pool's
	// receipts are no larger.
	MaxInputBytes = event.DefaultMaxSize
	// maxRecordBytes bounds a journal record's payload. A record holds
	// the input (at most MaxInputBytes), a bounded error text and the
	// hashes of a step's intents, timers and cancels, so it stays well
	// under it; replay reads records within it.
	maxRecordBytes = event.MaxPayloadBytes
)

// LimitError is a step that asked for more than a kernel limit allows.
type LimitError struct {
	What string // "intents", "timers", "cancels", "params", "timer payload", "reply", "state"
	Got  int    // what the step asked for: a count, or bytes
	Max  int
}

func (e *LimitError) Error() string {
	return "world: step exceeds the " + e.What + " limit: " + strconv.Itoa(e.Got) + ", at most " +
		strconv.Itoa(e.Max) + " (" + strconv.Itoa(e.Got-e.Max) + " over)"
}

// Is matches ErrLimit.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// RefusedError is a step whose result the store refused although it was
// within the kernel's limits (a store with narrower limits, say). The
// plane records the input again as a refused step (World.Refuse): an
// error outcome that runs no handler, so that replay, which meets the
// same refusal in the journal, re-derives it without asking the store.
type RefusedError struct {
	Err error // why the store refused it; nil on replay
}

func (e *RefusedError) Error() string {
	if e.Err == nil {
		return "world: the store refused the step"
	}
	return "world: the store refused the step: " + e.Err.Error()
}

// Is matches ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func (e *RefusedError) Unwrap() error { return e.Err }

// boundedError is an error whose text is cut to MaxErrorBytes; errors.Is
// and errors.As still see the error it cuts.
type boundedError struct {
	text string
	err  error
}

func (e *boundedError) Error() string { return e.text }
func (e *boundedError) Unwrap() error { return e.err }

// bound returns the text of err cut to at most MaxErrorBytes of valid
// UTF-8 (a journal record's text must be), and err with that text.
func bound(err error) (string, error) {
	s := err.Error()
	t := boundText(s, MaxErrorBytes)
	if t == s {
		return s, err
	}
	return t, &boundedError{text: t, err: err}
}

// boundText is s as valid UTF-8 (invalid bytes replaced by U+FFFD) of at
// most limit bytes: a longer text is cut on a character boundary and ends
// with a marker that says how long it was. It depends on s alone, so a
// replay cuts a text where the first run did.
func boundText(s string, limit int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= limit {
		return s
	}
	marker := " … [cut: " + strconv.Itoa(len(s)) + " bytes, at most " + strconv.Itoa(limit) + " kept]"
	cut := max(limit-len(marker), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}

// checkLimits returns the first limit the handler's requests exceed, in a
// fixed order, or nil.
func (c *Ctx) checkLimits() error {
	switch {
	case c.nIntents > MaxStepIntents:
		return &LimitError{What: "intents", Got: c.nIntents, Max: MaxStepIntents}
	case c.nTimers > MaxStepTimers:
		return &LimitError{What: "timers", Got: c.nTimers, Max: MaxStepTimers}
	case c.nCancels > MaxStepCancels:
		return &LimitError{What: "cancels", Got: c.nCancels, Max: MaxStepCancels}
	}
	return nil
}
