package world

import (
	"fmt"
	"time"

	"github.com/orrery-run/orrery/event"
)

// RetryPolicy is how the effect pool retries a failed execution of one
// intent, given by the handler that asks for it (Ctx.Effect with
// WithRetry). It replaces the policy the kind's adapter was registered
// with, field by field as a registration's would be: a zero field takes
// the default (InitialInterval 1s, BackoffCoefficient 2, MaximumInterval
// 100 × InitialInterval, MaximumAttempts the kind's default: unlimited,
// but ten executions for http.request). The adapter's jitter,
// and whether it retries until the outcome is known, stay its own.
//
// The delay before attempt n+1 is InitialInterval × BackoffCoefficient^(n-1),
// at most MaximumInterval. An error of a class named in NonRetryable (the
// adapter's effect.Classified error, or http.request's "http.transport"
// and "http.unknown") ends the effect at once with an error receipt, and so
// does an effect.Permanent one; once MaximumAttempts executions have
// failed, the receipt says so (error, or timeout when the last failure
// left the outcome unknown).
//
// The policy is recorded with the intent (vocab.Intent.Retry) but is not
// part of its hash: it says how to run the effect, not which effect it
// is, so changing a policy in a new release never makes an old journal
// replay differently.
type RetryPolicy struct {
	InitialInterval    time.Duration
	BackoffCoefficient float64
	MaximumInterval    time.Duration
	// MaximumAttempts counts executions, the first included: 1 never
	// retries; 0 takes the kind's default (without end, but bounded for
	// http.request, whose default gives up so the world hears the last
	// answer); UnlimitedAttempts retries without end whatever the kind.
	MaximumAttempts int
	NonRetryable    []string
}

// UnlimitedAttempts is the MaximumAttempts of a policy that retries
// without end even where the kind's default is bounded (http.request's).
const UnlimitedAttempts = -1

// MaxRetryPolicyBytes bounds a policy's wire form, the store's bound on
// vocab.Intent.Retry.
const MaxRetryPolicyBytes = 4 << 10

// retryWire is RetryPolicy's wire form: durations as int64 nanoseconds
// (the CBOR time encoding drops precision), every field omitted when zero.
type retryWire struct {
	Initial      int64    `cbor:"initial,omitempty"`
	Coefficient  float64  `cbor:"coefficient,omitempty"`
	Max          int64    `cbor:"max,omitempty"`
	Attempts     int      `cbor:"attempts,omitempty"`
	NonRetryable []string `cbor:"non_retryable,omitempty"`
}

// Validate says what is wrong with p, as an error, or nil.
func (p RetryPolicy) Validate() error {
	switch {
	case p.InitialInterval < 0 || p.MaximumInterval < 0:
		return fmt.Errorf("retry policy: intervals must not be negative")
	case p.BackoffCoefficient != 0 && !(p.BackoffCoefficient >= 1 && p.BackoffCoefficient <= 100):
		return fmt.Errorf("retry policy: BackoffCoefficient %v outside [1, 100]", p.BackoffCoefficient)
	case p.MaximumAttempts < UnlimitedAttempts:
		return fmt.Errorf("retry policy: MaximumAttempts must not be negative but UnlimitedAttempts (0 is the kind's default)")
	case p.MaximumInterval != 0 && p.InitialInterval > p.MaximumInterval:
		return fmt.Errorf("retry policy: InitialInterval %v above MaximumInterval %v", p.InitialInterval, p.MaximumInterval)
	}
	for _, c := range p.NonRetryable {
		if c == "" {
			return fmt.Errorf("retry policy: an empty NonRetryable class")
		}
	}
	return nil
}

// EncodeRetryPolicy returns p's wire form, canonical CBOR, the bytes
// vocab.Intent.Retry holds.
func EncodeRetryPolicy(p RetryPolicy) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return event.Marshal(retryWire{Initial: int64(p.InitialInterval), Coefficient: p.BackoffCoefficient,
		Max: int64(p.MaximumInterval), Attempts: p.MaximumAttempts, NonRetryable: p.NonRetryable})
}

// DecodeRetryPolicy reads EncodeRetryPolicy's form.
func DecodeRetryPolicy(b []byte) (RetryPolicy, error) {
	var w retryWire
	if err := Decode(b, &w); err != nil {
		return RetryPolicy{}, err
	}
	p := RetryPolicy{InitialInterval: time.Duration(w.Initial), BackoffCoefficient: w.Coefficient,
		MaximumInterval: time.Duration(w.Max), MaximumAttempts: w.Attempts, NonRetryable: w.NonRetryable}
	return p, p.Validate()
}

// EffectOption qualifies one Ctx.Effect call.
type EffectOption func(*effectOptions)

type effectOptions struct {
	retry *RetryPolicy
}

// WithRetry gives the effect its own retry policy (see RetryPolicy).
func WithRetry(p RetryPolicy) EffectOption {
	return func(o *effectOptions) { o.retry = &p }
}
