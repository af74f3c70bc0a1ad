package supervisor

import (
	"fmt"
	"time"
)

type backoffKind uint8

const (
	backoffNone backoffKind = iota
	backoffFixed
	backoffExponential
)

// Backoff is the delay before a restart, so that a child failing at once on
// every start does not spin (and its dependencies get time to recover). The
// zero value is NoBackoff. Build one with NoBackoff, Fixed or Exponential.
//
// The delay grows with a child's consecutive restarts: the count goes back
// to zero when an instance has run for a whole restart Window before it
// failed, because that failure is not part of a crash loop.
type Backoff struct {
	kind       backoffKind
	initial    time.Duration
	max        time.Duration
	multiplier float64
	jitter     float64
}

// NoBackoff restarts at once.
func NoBackoff() Backoff { return Backoff{} }

// Fixed waits d before every restart.
func Fixed(d time.Duration) Backoff { return Backoff{kind: backoffFixed, initial: d, max: d} }

// Exponential waits initial before the first restart and multiplies the
// delay by multiplier for each consecutive one, up to max.
func Exponential(initial, max time.Duration, multiplier float64) Backoff {
	return Backoff{kind: backoffExponential, initial: initial, max: max, multiplier: multiplier}
}

// WithJitter shortens each delay by a random fraction of up to fraction
// (0..1) of it, drawn from the executor's seeded source, so that siblings
// failing together do not restart in lock step. Jitter never lengthens a
// delay, so max stays a bound; the same seed gives the same delays.
func (b Backoff) WithJitter(fraction float64) Backoff {
	b.jitter = fraction
	return b
}

func (b Backoff) String() string {
	var s string
	switch b.kind {
	case backoffNone:
		return "none"
	case backoffFixed:
		s = fmt.Sprintf("fixed(%v)", b.initial)
	case backoffExponential:
		s = fmt.Sprintf("exponential(%v, %v, x%g)", b.initial, b.max, b.multiplier)
	default:
		return "invalid"
	}
	if b.jitter > 0 {
		s += fmt.Sprintf("+jitter(%g)", b.jitter)
	}
	return s
}

func (b Backoff) validate() error {
	if !(b.jitter >= 0 && b.jitter <= 1) { // also rejects NaN
		return fmt.Errorf("%w: jitter %v outside [0, 1]", ErrBadBackoff, b.jitter)
	}
	switch b.kind {
	case backoffNone:
		return nil
	case backoffFixed:
		if b.initial < 0 {
			return fmt.Errorf("%w: negative delay %v", ErrBadBackoff, b.initial)
		}
		return nil
	case backoffExponential:
		switch {
		case b.initial <= 0:
			return fmt.Errorf("%w: initial delay %v must be positive", ErrBadBackoff, b.initial)
		case b.max < b.initial:
			return fmt.Errorf("%w: max %v below initial %v", ErrBadBackoff, b.max, b.initial)
		case !(b.multiplier >= 1):
			return fmt.Errorf("%w: multiplier %v below 1", ErrBadBackoff, b.multiplier)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown kind", ErrBadBackoff)
}

// delay is the wait before restart number attempt (0 for the first of a
// run of consecutive restarts). rnd is drawn only when jitter applies, so a
// backoff without jitter never consumes the executor's random stream.
func (b Backoff) delay(attempt int, rnd func() uint64) time.Duration {
	var d time.Duration
	switch b.kind {
	case backoffFixed:
		d = b.initial
	case backoffExponential:
		f, limit := float64(b.initial), float64(b.max)
		for i := 0; i < attempt && f < limit && b.multiplier > 1; i++ {
			f *= b.multiplier
		}
		d = time.Duration(min(f, limit))
	}
	if d <= 0 || b.jitter == 0 {
		return d
	}
	u := float64(rnd()>>11) / (1 << 53) // uniform in [0, 1)
	return d - time.Duration(float64(d)*b.jitter*u)
}
