package vocab

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Intent is an effect a world asks for. IntentHash identifies it for
// ever: the effect queue deduplicates on it, and its receipt names it.
type Intent struct {
	IntentHash string // 64 lowercase hex digits (world.IntentHash)
	Kind       string // e.g. "http.request", "fabric.send"
	Params     []byte // the kind's params as canonical CBOR
	// Origin is the world and step height that asked for it, in
	// Origin.String's form "world@height": the fabric adapter sends it on
	// as the message's from_world and from_height.
	Origin string
	// PolicyContextHash names the policy the intent was published under;
	// empty when none applies. The kernel leaves it empty.
	PolicyContextHash string
	// Retry is the retry policy the handler gave this one intent, as
	// canonical CBOR (world.RetryPolicy's wire form), or nil: the policy
	// its kind's adapter was registered with applies. The store keeps it
	// beside the params and hands it back with every claim.
	Retry []byte
}

// TimerSet is a durable timer a step sets (a timer.set intent): at
// DeliverAt the store enqueues Payload, unchanged, into the world's inbox
// as an item of KindTimer.
type TimerSet struct {
	IntentHash string
	DeliverAt  time.Time
	Payload    []byte
}

// Origin is where an intent was made: its world and the height of the
// step. Intent.Origin holds it as a string (String), the form the effect
// queue stores.
type Origin struct {
	World  string
	Height uint64
}

// String writes o as "world@height".
func (o Origin) String() string { return o.World + "@" + strconv.FormatUint(o.Height, 10) }

// ErrOrigin: a string is not an origin in Origin.String's form.
var ErrOrigin = errors.New("vocab: malformed origin")

// ParseOrigin reads Origin.String's form. A world id may contain '@'; the
// height never does, so the last '@' separates them. A malformed origin is
// an error that matches ErrOrigin.
func ParseOrigin(s string) (Origin, error) {
	i := strings.LastIndexByte(s, '@')
	if i <= 0 {
		return Origin{}, originError(s, "not world@height")
	}
	h, err := strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil || strconv.FormatUint(h, 10) != s[i+1:] {
		return Origin{}, originError(s, "the height is not a decimal")
	}
	return Origin{World: s[:i], Height: h}, nil
}

func originError(s, why string) error {
	return &originErr{s: s, why: why}
}

type originErr struct{ s, why string }

func (e *originErr) Error() string {
	return ErrOrigin.Error() + " " + strconv.Quote(e.s) + ": " + e.why
}
func (e *originErr) Unwrap() error { return ErrOrigin }
