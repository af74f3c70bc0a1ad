package workflow

import (
	"crypto/sha256"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/orrery-run/orrery/event"
)

// Values computed once and recorded: the time (Now), a side effect's
// value (SideEffect). Each is a step of kind "side" whose StepStarted and
// StepCompleted ride with the run's next write (runner.later), so it costs
// no write of its own; a crash before that write computes it again, which
// nothing durable can have seen (any durable write carries it first).

const (
	kindSide = "side"
	nowBase  = "sys:now"
)

// sideValue records v (computed by fn the first time) as the side step
// with base id base, and returns the record.
func sideValue(c *Ctx, base string, fn func() (any, error)) (string, []byte, error) {
	id, h, err := c.begin(kindSide, base)
	if err != nil {
		return id, nil, err
	}
	if h != nil {
		switch {
		case h.completed != nil:
			return id, h.completed.Value, nil
		case h.final != nil:
			return id, nil, stepErr(id, h.settled, h.final)
		}
	}
	r := c.r
	attempt := uint64(1)
	if h != nil {
		attempt = h.attempt + 1
	}
	v, ferr := fn()
	var b []byte
	if ferr == nil {
		if b, ferr = event.Marshal(v); ferr == nil {
			ferr = checkValue("the side effect's value", b)
		}
	}
	if err := r.later(event.StepStarted, id, attempt, stepStarted{Kind: kindSide}); err != nil {
		return id, nil, c.halt(err)
	}
	if ferr != nil {
		// Failed for good, recorded: the same error on every re-run.
		f := stepFailed{Error: message(ferr), Final: true}
		if err := r.later(event.StepFailed, id, attempt, f); err != nil {
			return id, nil, c.halt(err)
		}
		return id, nil, stepErr(id, attempt, &f)
	}
	if err := r.later(event.StepCompleted, id, attempt, stepCompleted{Value: b}); err != nil {
		return id, nil, c.halt(err)
	}
	return id, b, nil
}

// SideEffect runs fn once and records its value: a re-run returns the
// record without calling fn. For a value that must not change under replay
// (a generated id, a read of configuration) and that is cheap and safe to
// compute again if the worker crashes before the run's next durable write.
// fn's error fails the step for good (a *StepError, recorded). It is not
// retried: use Step for work that can fail and should be retried.
func SideEffect[T any](c *Ctx, name string, fn func() (T, error)) (T, error) {
	var zero T
	if err := checkName("side effect", name); err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, errorf("side effect", ErrInvalid, "", detail("side effect "+name+" has no function"))
	}
	id, raw, err := sideValue(c, name, func() (any, error) { return fn() })
	if err != nil {
		return zero, err
	}
	return decodeAs[T](c, id, raw, true)
}

// Now returns the time as recorded for this point of the run: the worker's
// clock the first time, the record on every re-run, so code that branches
// on it replays the same way. Use it instead of time.Now in a workflow.
// Each call is a step (sys:now) that rides with the run's next write.
func (c *Ctx) Now() time.Time {
	// Detached: the time is no step of the run's business a cancel stops.
	_, raw, err := sideValue(Detached(c), nowBase, func() (any, error) { return c.r.ex.Now().UnixNano(), nil })
	if err != nil {
		return time.Time{}
	}
	var ns int64
	if event.Unmarshal(raw, &ns) != nil {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// Rand returns the run's deterministic random source: seeded from the run
// id, so every re-run draws the same numbers in the same order (as long as
// the function asks in the same order, which its steps' order already
// requires). It is shared by the run's branches. Never use math/rand's
// global source or crypto/rand in a workflow function; draw secrets in a
// step.
func (c *Ctx) Rand() *rand.Rand {
	if c.rng == nil {
		sum := sha256.Sum256([]byte("orrery.workflow.rand\x00" + c.r.id + "\x00" + strconv.FormatUint(c.r.h.generation, 10)))
		c.rng = rand.New(rand.NewChaCha8(sum))
	}
	return c.rng
}
