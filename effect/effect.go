// Package effect is the contract between an effect pool and an
// application's own adapter: the Adapter interface, the Result it answers,
// and the errors that tell the pool whether to retry (Permanent, Unknown,
// Classified).
// An adapter imports this package, vocab (the queue item it is handed) and
// world (to decode params and build bodies), never the store or the plane.
//
// It is apart from vocab because an adapter's Execute takes a context,
// which the pure kernel (world, which speaks vocab) must never reach.
package effect

import (
	"context"
	"errors"
	"time"

	"github.com/orrery-run/orrery/vocab"
)

// Adapter executes the effects of the kinds it serves: the contract
// between an effect pool (plane/adapter's Pool) and an application's own
// adapter, which implements it with this package (and world/, for the
// params and bodies of the built-in kinds) and never needs the store.
// Execute is called
// with the claimed queue item (its Params are the intent's canonical CBOR
// params: decode them with world.Decode) and a context that ends when the
// pool stops or the claim's execution budget runs out.
//
// Execute answers in one of two ways:
//   - a Result and a nil error: the terminal outcome, delivered as the
//     receipt whatever its status (ok, error or timeout);
//   - an error: a failure of this attempt. The pool retries it by the
//     effect's retry policy (its kind's registration with the pool, or the
//     intent's own) unless it is Permanent or of a class (Classified) the
//     policy does not retry, and delivers a receipt
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
// registered to retry until known (plane/adapter's RetryUntilKnown), so
// that the world gets the real answer.
//
// Execute must be safe for concurrent use: the pool runs up to its
// concurrency at once.
type Adapter interface {
	Kinds() []string
	Execute(ctx context.Context, item vocab.EffectItem) (Result, error)
}

// Result is an effect's terminal outcome. Body is encoded as canonical CBOR
// into the receipt's body (nil: no body); the world decodes it with
// world.Receipt.Decode.
type Result struct {
	Status vocab.ReceiptStatus
	Body   any
}

// OK returns an ok Result carrying body.
func OK(body any) Result { return Result{Status: vocab.ReceiptOK, Body: body} }

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
// retry policy and, once it gives up, delivers a timeout receipt, never an
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

// classError names the class of an attempt's error.
type classError struct {
	class string
	err   error
}

func (e *classError) Error() string { return e.err.Error() }
func (e *classError) Unwrap() error { return e.err }

// Classified names err's class (for example "card_declined", or
// http.request's "http.status.404"), which a retry policy may list as
// non-retryable: the pool then delivers an error receipt at once, as for
// a Permanent error (a timeout one when err is also Unknown). A class
// listed nowhere changes nothing: the error is retried as any other.
// Classified(c, nil) is nil.
func Classified(class string, err error) error {
	if err == nil {
		return nil
	}
	return &classError{class: class, err: err}
}

// ClassOf returns the class Classified gave err (the outermost, when
// wrapped more than once), or "".
func ClassOf(err error) string {
	var c *classError
	if errors.As(err, &c) {
		return c.class
	}
	return ""
}

// answerError is an attempt that got an answer the policy should retry.
type answerError struct {
	last  Result
	after time.Duration
	err   error
}

func (e *answerError) Error() string { return e.err.Error() }
func (e *answerError) Unwrap() error { return e.err }

// RetryAnswer wraps err, the failure of an attempt that was answered with
// something worth retrying (an HTTP 503, a 429): the pool retries it by
// the adapter's retry policy, no sooner than after (zero: the policy's
// delay alone; a server's Retry-After), and, once the policy gives up or
// the class is non-retryable, delivers last as the receipt (the answer as
// it came, its status kept) instead of a failure. RetryAnswer(_, _, nil)
// is nil.
func RetryAnswer(last Result, after time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &answerError{last: last, after: after, err: err}
}

// AnswerOf returns the answer RetryAnswer gave err and the least delay
// before its retry; ok is false when err carries none.
func AnswerOf(err error) (last Result, after time.Duration, ok bool) {
	var a *answerError
	if errors.As(err, &a) {
		return a.last, a.after, true
	}
	return Result{}, 0, false
}
