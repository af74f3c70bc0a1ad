package adapter

import (
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/effect"
)

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
	Adapter effect.Adapter
	Policy  RetryPolicy
}

// Register returns the registration of a with policy p (the zero policy is
// DefaultRetry).
func Register(a effect.Adapter, p RetryPolicy) Registration {
	return Registration{Adapter: a, Policy: p}
}

// ConfigError reports an unusable Config or Registration.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("adapter: %s: %s", e.Field, e.Reason) }

// ErrRunning is returned by Run on a pool that is already running.
var ErrRunning = errors.New("adapter: pool already running")
