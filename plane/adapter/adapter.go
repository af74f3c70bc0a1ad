package adapter

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// RetryPolicy says how often, and how far apart, a failed execution of
// an effect is run again before its receipt: the policy of a kind, given
// when its adapter is registered (Register), which a handler may replace
// for one intent (world.WithRetry).
//
// The delay before attempt n+1 is Base·Coefficient^(n-1), at most Max,
// shortened by up to Jitter of itself with the executor's (seeded)
// randomness, so a fleet of pools does not retry in step. Each retry is
// durable: the pool hands the claim back to the store (RetryLater) with
// the delay, and the store holds the effect until then by its own clock,
// so the schedule survives a crash of the pool and any pool may run the
// next attempt.
//
// A zero field takes its default: Base 1s, Coefficient 2, Max 100·Base,
// Attempts 0 (no limit, except for http.request: DefaultHTTPAttempts).
// The zero RetryPolicy is DefaultRetry. An error
// the adapter marks Permanent, or whose class (effect.Classified) is in
// NonRetryable, ends the effect at once.
type RetryPolicy struct {
	// Attempts bounds the executions, the first included (1: never
	// retry). 0 is the kind's default: without end for every kind but
	// http.request, which gives up after DefaultHTTPAttempts;
	// AttemptsUnlimited retries without end whatever the kind, until the
	// adapter answers or an error is not retryable.
	Attempts int
	// Base is the initial interval, the delay before the second attempt.
	Base time.Duration
	// Coefficient multiplies the delay at each further attempt (in
	// [1, 100]; 1 retries at a constant interval).
	Coefficient float64
	// Max is the largest delay.
	Max time.Duration
	// Jitter, in [0, 1], is the fraction of a delay left to chance.
	Jitter float64
	// NonRetryable lists the error classes (effect.ClassOf) that end the
	// effect at once: an error receipt, or a timeout one for an Unknown
	// error (the effect may have happened).
	NonRetryable []string
	// UntilKnown retries every error that is not Permanent until the
	// adapter answers, however long that takes (Attempts bounds nothing):
	// an execution that runs out of its claim's budget is handed back
	// without a receipt and run again at once (by this pool or another).
	// It is for effects that are safe to repeat, such as fabric.send
	// (deduplicated by message id): the world then never gets a guess,
	// only the outcome.
	UntilKnown bool
}

// AttemptsUnlimited is the Attempts of a policy that retries without end
// even where the kind's default is bounded (http.request's).
const AttemptsUnlimited = -1

// DefaultHTTPAttempts bounds the executions of an http.request whose
// policy (its kind's, or the intent's own) sets no Attempts: the effect
// gives up and the world gets the last answer (the 5xx or 429 response,
// or the failure) as its receipt.
//
// Why a bound, when other kinds retry without end: http.request calls a
// service the operator may not run, whose 503 can last for days, and a
// world waiting on the receipt is stuck until it arrives. Temporal bounds
// such a call by the activity's schedule-to-close timeout, Restate by a
// retry policy's maximum attempts or duration; a durable HTTP call that
// never answers is what neither user expects. Ten executions under DefaultRetry span
// about five and a half minutes (1+2+4+…+64+100+100 s, less jitter):
// long enough to ride out a deploy or a failover, short enough that the
// handler, which sees the status, soon decides what happens next (try
// again later from a timer, compensate, ask a person). A policy that sets
// Attempts, or AttemptsUnlimited, decides instead.
const DefaultHTTPAttempts = 10

// defaultAttempts is the bound of kind's executions when its policy sets
// no Attempts (0: none). It goes by the kind, not the adapter serving it,
// so an application's own http.request adapter, or a test's fake of it,
// gives up as the built-in one does.
func defaultAttempts(kind string) int {
	if kind == KindHTTP {
		return DefaultHTTPAttempts
	}
	return 0
}

// limit is the number of executions p allows an effect of kind: 0 for
// no limit.
func (p RetryPolicy) limit(kind string) int {
	switch {
	case p.UntilKnown || p.Attempts == AttemptsUnlimited:
		return 0
	case p.Attempts == 0:
		return defaultAttempts(kind)
	}
	return p.Attempts
}

// DefaultRetry is the policy of a zero RetryPolicy, after Temporal's
// default: 1s, doubling to at most 100s apart, each delay up to a fifth
// jittered, without end (http.request: DefaultHTTPAttempts executions).
func DefaultRetry() RetryPolicy {
	return RetryPolicy{Base: time.Second, Coefficient: 2, Max: 100 * time.Second, Jitter: 0.2}
}

// NoRetry makes every failed attempt terminal.
func NoRetry() RetryPolicy { return RetryPolicy{Attempts: 1} }

// RetryUntilKnown is the policy of an idempotent effect (see
// RetryPolicy.UntilKnown): 50ms doubling to 5s apart, half jittered,
// without end.
func RetryUntilKnown() RetryPolicy {
	return RetryPolicy{Base: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5, UntilKnown: true}
}

func (p RetryPolicy) isZero() bool {
	return p.Attempts == 0 && p.Base == 0 && p.Coefficient == 0 && p.Max == 0 && p.Jitter == 0 &&
		p.NonRetryable == nil && !p.UntilKnown
}

// normal returns p with its defaults filled in (see RetryPolicy).
func (p RetryPolicy) normal() RetryPolicy {
	if p.isZero() {
		return DefaultRetry()
	}
	if p.Base == 0 {
		p.Base = time.Second
	}
	if p.Coefficient == 0 {
		p.Coefficient = 2
	}
	if p.Max == 0 {
		p.Max = 100 * p.Base
	}
	return p
}

// invalid says what is wrong with p, or "" when nothing is: the reason of
// the ConfigError that NewPool returns, which names the policy's fields.
func (p RetryPolicy) invalid() string {
	switch {
	case p.Attempts < AttemptsUnlimited:
		return "Attempts must not be negative but AttemptsUnlimited (0 is the kind's default)"
	case p.Base < 0 || p.Max < 0:
		return "Base and Max must not be negative"
	case p.Max != 0 && p.Base > p.Max:
		return "Base must not exceed Max"
	case p.Max > store.MaxTTL:
		return fmt.Sprintf("Max must be at most %v", store.MaxTTL)
	case p.Coefficient != 0 && !(p.Coefficient >= 1 && p.Coefficient <= 100):
		return "Coefficient must be in [1, 100]"
	case p.Jitter < 0 || p.Jitter > 1:
		return "Jitter must be in [0, 1]"
	case slices.Contains(p.NonRetryable, ""):
		return "NonRetryable names an empty class"
	}
	return ""
}

// Validate reports what is wrong with p, as a *ConfigError naming the
// policy's fields, or nil: what NewPool refuses, checked before a pool is
// built (orrery.App checks its policies at start).
func (p RetryPolicy) Validate() error {
	if why := p.invalid(); why != "" {
		return &ConfigError{Field: "RetryPolicy", Reason: why}
	}
	return nil
}

// nonRetryable reports whether err's class is one p does not retry.
func (p RetryPolicy) nonRetryable(err error) bool {
	c := effect.ClassOf(err)
	return c != "" && slices.Contains(p.NonRetryable, c)
}

// forIntent is the policy of one intent: p (the kind's), unless the
// handler gave the intent its own (vocab.Intent.Retry, world.RetryPolicy),
// which replaces p's intervals, attempts and classes (its zero fields take
// the defaults) and keeps p's jitter and UntilKnown. A policy that does
// not decode leaves p, with the reason.
func (p RetryPolicy) forIntent(b []byte) (RetryPolicy, error) {
	if len(b) == 0 {
		return p, nil
	}
	w, err := world.DecodeRetryPolicy(b)
	if err != nil {
		return p, err
	}
	q := RetryPolicy{Attempts: w.MaximumAttempts, Base: w.InitialInterval, Coefficient: w.BackoffCoefficient,
		Max: min(w.MaximumInterval, store.MaxTTL), NonRetryable: w.NonRetryable, Jitter: p.Jitter, UntilKnown: p.UntilKnown}
	if q.Base > store.MaxTTL {
		q.Base = store.MaxTTL
	}
	if why := q.invalid(); why != "" {
		return p, errors.New(why)
	}
	return q.normal(), nil
}

// Delay returns the backoff before attempt n+1 (n >= 1) of the policy
// with its defaults filled in, drawing its jitter from r (a uniform 64-bit
// value, the executor's Uint64).
func (p RetryPolicy) Delay(n int, r uint64) time.Duration {
	p = p.normal()
	d := float64(p.Base)
	for i := 1; i < n && d < float64(p.Max) && p.Coefficient > 1; i++ {
		d *= p.Coefficient
	}
	out := time.Duration(min(d, float64(p.Max)))
	if p.Jitter > 0 {
		// r>>11 is a uniform 53-bit integer: an exact float64 fraction.
		frac := float64(r>>11) / float64(uint64(1)<<53)
		out -= time.Duration(float64(out) * p.Jitter * frac)
	}
	return out
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
