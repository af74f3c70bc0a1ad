package adapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// Adapter executes the effects of the kinds it serves. Execute is called
// with the claimed queue item (its Params are the intent's canonical CBOR
// params: decode them with world.Decode) and a context that ends when the
// pool stops or the claim's execution budget runs out.
//
// Execute answers in one of two ways:
//   - a Result and a nil error: the terminal outcome, delivered as the
//     receipt whatever its status (ok, error or timeout);
//   - an error: a failure of this attempt. The pool retries it by the
//     adapter's RetryPolicy unless it is Permanent, and delivers a receipt
//     (its body a Failure) once it gives up: error for a plain or
//     Permanent error, timeout for an Unknown one.
//
// The statuses are promises to the world, which acts on them (it may
// release a hold, refund, or give up): ok means the effect happened; error
// means it did not and will not happen; timeout means nobody knows. So an
// adapter answers error (a Permanent error, a plain one, or an error
// Result) only for a definite refusal: nothing was sent, or the other side
// answered that it did nothing. Whenever the effect may have happened (the
// request was written and the answer was lost: a reset, a timeout after
// sending, a store call whose outcome is unknown), it returns Unknown(err),
// which the pool retries and, once it gives up, delivers as a timeout; an
// effect that is safe to repeat (idempotent by its intent hash) is better
// registered with RetryUntilKnown, so that the world gets the real answer.
//
// Execute must be safe for concurrent use: the pool runs up to its
// concurrency at once.
type Adapter interface {
	Kinds() []string
	Execute(ctx context.Context, item store.EffectItem) (Result, error)
}

// Result is an effect's terminal outcome. Body is encoded as canonical CBOR
// into the receipt's body (nil: no body); the world decodes it with
// Receipt.Decode.
type Result struct {
	Status world.ReceiptStatus
	Body   any
}

// OK returns an ok Result carrying body.
func OK(body any) Result { return Result{Status: world.StatusOK, Body: body} }

// Failure is the body of the error and timeout receipts the pool writes
// itself (an attempt's error after retries, a permanent error, an
// exhausted claim budget), and of the built-in adapters' error receipts.
type Failure struct {
	Error    string `cbor:"error"`
	Attempts int    `cbor:"attempts,omitempty"`
}

// WorldType names the body's schema.
func (Failure) WorldType() string { return "sys/EffectFailure@1" }

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the pool does not retry it: the effect's
// receipt is an error at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// unknownError marks an attempt whose effect may have happened.
type unknownError struct{ err error }

func (e *unknownError) Error() string { return e.err.Error() }
func (e *unknownError) Unwrap() error { return e.err }

// Unknown wraps err, the failure of an attempt whose outcome is unknown
// (the effect may have happened): the pool retries it by the adapter's
// RetryPolicy and, once it gives up, delivers a timeout receipt, never an
// error one. Unknown(nil) is nil.
func Unknown(err error) error {
	if err == nil {
		return nil
	}
	return &unknownError{err: err}
}

// IsUnknown reports whether err was wrapped by Unknown.
func IsUnknown(err error) bool {
	var u *unknownError
	return errors.As(err, &u)
}

// RetryPolicy says how often, and how far apart, a failed attempt is
// retried before the receipt. The delay before attempt n+1 is
// min(Max, Base·2^(n-1)), shortened by up to Jitter of itself with the
// executor's (seeded) randomness, so a fleet of pools does not retry in
// step. The zero RetryPolicy is DefaultRetry.
type RetryPolicy struct {
	Attempts int           // attempts in all, the first included (1: never retry)
	Base     time.Duration // the first delay
	Max      time.Duration // the largest delay
	Jitter   float64       // in [0, 1]: the fraction of a delay left to chance
	// UntilKnown retries every error that is not Permanent until the
	// adapter answers, however long that takes (Attempts bounds nothing):
	// when the claim's budget runs out first, the pool releases the claim
	// without a receipt, and the effect is claimed and executed again at
	// once (by this pool or another). It is for effects that are safe to
	// repeat, such as fabric.send (deduplicated by message id): the world
	// then never gets a guess, only the outcome.
	UntilKnown bool
}

// DefaultRetry is the policy of a zero RetryPolicy: three attempts, 200ms
// then 400ms apart, each delay up to half jittered.
func DefaultRetry() RetryPolicy {
	return RetryPolicy{Attempts: 3, Base: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}
}

// NoRetry makes every failed attempt terminal.
func NoRetry() RetryPolicy { return RetryPolicy{Attempts: 1} }

// RetryUntilKnown is the policy of an idempotent effect (see
// RetryPolicy.UntilKnown): 50ms doubling to 5s apart, half jittered,
// without end.
func RetryUntilKnown() RetryPolicy {
	return RetryPolicy{Attempts: 1, Base: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5, UntilKnown: true}
}

func (p RetryPolicy) orDefault() RetryPolicy {
	if p == (RetryPolicy{}) {
		return DefaultRetry()
	}
	return p
}

// invalid says what is wrong with p, or "" when nothing is: the reason of
// the ConfigError that NewPool returns, which names the policy's fields.
func (p RetryPolicy) invalid() string {
	switch {
	case p.Attempts < 1:
		return "Attempts must be at least 1"
	case p.Base < 0 || p.Max < 0:
		return "Base and Max must not be negative"
	case (p.Attempts > 1 || p.UntilKnown) && p.Base == 0:
		return "a policy that retries needs a Base delay"
	case p.UntilKnown && p.Max == 0:
		return "a policy that retries until known needs a Max delay"
	case p.Jitter < 0 || p.Jitter > 1:
		return "Jitter must be in [0, 1]"
	}
	return ""
}

// Delay returns the backoff before attempt n+1 (n >= 1), drawing its
// jitter from r (a uniform 64-bit value, the executor's Uint64).
func (p RetryPolicy) Delay(n int, r uint64) time.Duration {
	d := p.Base
	for i := 1; i < n && (p.Max == 0 || d < p.Max); i++ {
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	if p.Jitter > 0 {
		// r>>11 is a uniform 53-bit integer: an exact float64 fraction.
		frac := float64(r>>11) / float64(uint64(1)<<53)
		d -= time.Duration(float64(d) * p.Jitter * frac)
	}
	return d
}

// Registration pairs an adapter with its retry policy; see Register.
type Registration struct {
	Adapter Adapter
	Policy  RetryPolicy
}

// Register returns the registration of a with policy p (the zero policy is
// DefaultRetry).
func Register(a Adapter, p RetryPolicy) Registration { return Registration{Adapter: a, Policy: p} }

// ConfigError reports an unusable Config or Registration.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("adapter: %s: %s", e.Field, e.Reason) }

// ErrRunning is returned by Run on a pool that is already running.
var ErrRunning = errors.New("adapter: pool already running")
