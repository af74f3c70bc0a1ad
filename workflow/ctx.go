package workflow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Ctx is a run's handle on its steps, passed to the workflow function. It
// belongs to the function's own goroutine: the function calls its steps
// one after the other, which is what makes their order, and so their ids,
// the same on every re-run. A step asked for from another goroutine, or
// from inside a step's own function, is refused with ErrConcurrentUse, and
// the run fails with that error when the function returns: with two
// goroutines the order of the steps, and so which result each gets on a
// re-run, would depend on the scheduler. Parallelism comes from the
// primitives the workflow API offers, never from goroutines sharing a Ctx.
type Ctx struct {
	*cstate
	// co is the coroutine this Ctx belongs to: the function's, or a
	// branch's (Go and the *Async calls each run on a Ctx of their own).
	co    *coro
	owner uint64 // the coroutine's goroutine (goid)
	ctx   context.Context
	// detached: steps asked for on this Ctx run despite a cancel (Detached).
	detached bool
}

// cstate is what every coroutine of one execution of a run shares: the
// step positions, the patch answers, and how the execution stopped.
type cstate struct {
	r *runner
	// misuse is the first refused use, kept for the run's end.
	misuse atomic.Pointer[Error]
	next   int            // the position of the next step call
	seen   map[string]int // occurrences of each base id so far
	// patches holds each patch id's answer in this execution, so a patch
	// asked for again answers the same without taking a position.
	patches map[string]bool
	// halted is the run's stop once it stopped here (a *stop); div the
	// divergence once the function asked for another step than recorded.
	halted error
	div    *DivergenceError
	// told is set once the function has been told of the run's cancel (a
	// step of it returned the cancellation): from then on every step asked
	// for on a Ctx that is not Detached returns it too, taking no position.
	told bool
	// rng is the run's deterministic random source (Rand).
	rng *rand.Rand
	// queries are the query handlers registered so far (OnQuery).
	queries map[string]func() (any, error)
}

// Context returns the run's context: it ends when the run stops on this
// worker (lease lost, paused, cancelled, worker stopping).
func (c *Ctx) Context() context.Context { return c.ctx }

// RunID returns the run's id.
func (c *Ctx) RunID() string { return c.r.id }

func (c *Ctx) halt(err error) error {
	if isCancellation(err) || err == error(errClosed) {
		// A cancel is told to the function, and a branch stopped after
		// the function returned is no stop of the run.
		return err
	}
	if c.halted == nil {
		if err == nil {
			err = &stop{kind: stopError, cause: detail("stopped without a cause")}
		}
		c.halted = err
	}
	return c.halted
}

// begin takes the next step position for a step of kind with base id
// base, and returns its id and, when the run recorded a step there, its
// history. A different id or kind at a recorded position is the run's
// divergence.
func (c *Ctx) begin(kind, base string) (string, *stepHist, error) {
	if c == nil || c.r == nil {
		return "", nil, errorf("step", ErrInvalid, "", detail("a nil workflow context"))
	}
	// Only immutable fields and atomics are touched before this check: a
	// foreign goroutine gets here too.
	if err := c.exclusive(kind, base); err != nil {
		return "", nil, err
	}
	if c.halted != nil {
		return "", nil, c.halted
	}
	if c.div != nil {
		return "", nil, c.div
	}
	if c.r.sch.closing != nil {
		return "", nil, c.r.sch.closing
	}
	if c.told && !c.detached {
		return "", nil, c.r.cancellation()
	}
	c.seen[base]++
	id := stepID(base, c.seen[base])
	k := c.next
	c.next++
	steps := c.r.h.steps
	if k >= len(steps) {
		if c.r.replay {
			if c.r.h.terminal != nil && c.r.h.terminal.EventType != event.RunCancelled {
				c.div = &DivergenceError{RunID: c.r.id, StepIndex: k, Got: id, Reason: "the run recorded no more steps"}
				return "", nil, c.div
			}
			c.r.journalEnd()
			return "", nil, c.halt(&stop{kind: stopError, cause: detail("step " + id + " is not recorded")})
		}
		if h := c.r.h.reset[id]; h != nil && h.kind == kind {
			return id, h, nil // discarded by a reset: its attempts go on
		}
		return id, nil, nil
	}
	h := steps[k]
	if h.id == id && h.kind == kind && h.done() {
		// A recorded end resumes this branch in the journal's order
		// among the others (see sched).
		if err := c.r.yieldRecorded(c, h.endSeq); err != nil {
			return "", nil, err
		}
		if h.skipped {
			c.told = true
			return "", nil, c.r.cancellation()
		}
	}
	switch {
	case h.id != id:
		c.div = &DivergenceError{RunID: c.r.id, StepIndex: k, Recorded: h.id, Got: id}
	case h.kind != kind:
		c.div = &DivergenceError{RunID: c.r.id, StepIndex: k, Recorded: h.id, Got: id,
			Reason: "recorded as a " + h.kind + " step, asked for as a " + kind + " step"}
	case c.r.replay && h.completed == nil && h.final == nil && c.co.idx != 0:
		// A branch whose step never ended (the function returned without
		// waiting for it): it waits for ever, until the replay stops it.
		c.co.match, c.co.keyed = nil, false
		_, err := c.r.block(c)
		if err == nil {
			err = c.halt(&stop{kind: stopError, cause: detail("step " + id + " is not recorded as ended")})
		}
		return "", nil, err
	case c.r.replay && h.completed == nil && h.final == nil:
		c.r.journalEnd()
		return "", nil, c.halt(&stop{kind: stopError, cause: detail("step " + id + " is not recorded as ended")})
	default:
		return id, h, nil
	}
	return "", nil, c.div
}

// attempt names attempt n of step id as this Ctx's in flight.
func (c *Ctx) attempt(id string, n uint64) *attemptRef {
	return &attemptRef{step: id, attempt: n, detached: c.detached}
}

// newCtx is the Ctx of r's function, which runs on the calling goroutine.
func newCtx(r *runner, ctx context.Context) *Ctx {
	st := &cstate{r: r, seen: map[string]int{}, patches: map[string]bool{}}
	c := &Ctx{cstate: st, ctx: ctx, owner: goid()}
	r.cs = st
	c.co = r.sch.main(r)
	return c
}

// exclusive refuses a step asked for from a goroutine other than the
// function's, or from inside a running step's function, and keeps the
// first refusal for the run's end (Misuse).
func (c *Ctx) exclusive(kind, base string) error {
	why := ""
	switch {
	case goid() != c.owner:
		why = "from a goroutine other than the workflow function's"
	case c.co.inFn.Load():
		why = "from inside a running step's function"
	default:
		if e := c.misuse.Load(); e != nil {
			return e
		}
		return nil
	}
	e := errorf(kind, ErrConcurrentUse, c.r.id, detail("step "+base+" asked for "+why+
		": a workflow.Ctx is used by its function's goroutine, one step at a time"))
	c.misuse.CompareAndSwap(nil, e)
	return e
}

// misused returns the first refused concurrent use of c, or nil.
func (c *Ctx) misused() error {
	if e := c.misuse.Load(); e != nil {
		return e
	}
	return nil
}

// decodeAs decodes a step's recorded value. A recorded result that no
// longer decodes (its type changed) is a divergence; a signal's or a
// receipt's value that does not decode is the caller's input error, the
// same on every re-run.
func decodeAs[T any](c *Ctx, id string, raw []byte, recorded bool) (T, error) {
	var v T
	if err := event.Unmarshal(raw, &v); err != nil {
		if !recorded {
			return v, errorf("decode", ErrInvalid, c.r.id, fmt.Errorf("step %q: the value does not decode as %T: %w", id, v, err))
		}
		c.div = &DivergenceError{RunID: c.r.id, StepIndex: c.r.h.byID[id].index, Recorded: id, Got: id,
			Reason: fmt.Sprintf("the recorded result does not decode as %T: %v", v, err)}
		return v, c.div
	}
	return v, nil
}

// cborNull is the value of a step with no result (a sleep): CBOR null.
func cborNull() cbor.RawMessage { return cbor.RawMessage{0xf6} }

// maxMessage bounds a recorded error message.
const maxMessage = 8 << 10

func message(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) > maxMessage {
		s = strings.ToValidUTF8(s[:maxMessage], "") + "…"
	}
	return s
}

func stepErr(id string, attempt uint64, f *stepFailed) *StepError {
	return &StepError{Step: id, Attempts: attempt, Message: f.Error, Timeout: f.Timeout}
}

// attemptResult is one attempt's outcome as try reports it.
type attemptResult struct {
	value   []byte
	seq     uint64 // the inbox item the attempt consumed, if any
	failure error
	timeout bool
	halt    error
	// outstanding is the intent an effect attempt leaves behind when its
	// wait ran out: still queued or executing, its receipt may come yet.
	outstanding string
}

// settle records the end of the attempt in flight.
func (c *Ctx) settle(typ, id string, attempt uint64, payload any) error {
	if err := c.r.event(c.ctx, typ, id, attempt, payload); err != nil {
		return c.halt(err)
	}
	c.co.inflight = nil
	switch p := payload.(type) {
	case stepCompleted:
		c.r.emitStep(id, StepCompleted, nil)
	case stepFailed:
		c.r.emitStep(id, stepFailedOutcome(p), errors.New(p.Error))
	}
	return nil
}

func stepFailedOutcome(f stepFailed) string {
	if f.Final {
		return StepFailedForGood
	}
	return StepRetried
}

// settleWithdrawing records a final failure of the attempt in flight and,
// in the same write, withdraws its outstanding intent if no adapter has
// claimed it: a step that gave up on an effect never has it executed
// afterwards. One already claimed may be executing; its receipt arrives
// for a failed step and is ignored, so such a failure leaves the effect's
// outcome unknown (a StepError with Timeout set says the wait ran out).
func (c *Ctx) settleWithdrawing(id string, attempt uint64, f stepFailed) error {
	e, err := c.r.envelope(event.StepFailed, id, attempt, f)
	if err != nil {
		return c.halt(&stop{kind: stopError, cause: errorf("append", ErrInvalid, c.r.id, err)})
	}
	if err := c.r.commitWithdraw(c.ctx, []string{f.Intent}, e); err != nil {
		return c.halt(err)
	}
	c.co.inflight = nil
	c.r.emitStep(id, stepFailedOutcome(f), errors.New(f.Error))
	return nil
}

// settleLater records a plain step's completion with the run's next
// write (see runner.pending).
func (c *Ctx) settleLater(id string, attempt uint64, p stepCompleted) error {
	if err := c.r.later(event.StepCompleted, id, attempt, p); err != nil {
		return c.halt(err)
	}
	c.co.inflight = nil
	c.r.emitStep(id, StepCompleted, nil)
	return nil
}

// retrying runs a step's attempts until one succeeds or the step fails for
// good, from wherever its history left it: a recorded result is returned
// as it is; a retry that was due is waited for until its recorded time;
// an attempt in flight is run again as the next attempt, unless durable
// (an effect: its intent is in the store's queue whatever happened to the
// worker), in which case the same attempt is resumed and waited for.
func (c *Ctx) retrying(id string, h *stepHist, o stepOptions, durable bool, try func(attempt uint64, resumed bool) attemptResult) ([]byte, error) {
	settleOK := func(attempt uint64, p stepCompleted) error {
		if durable {
			return c.settle(event.StepCompleted, id, attempt, p)
		}
		return c.settleLater(id, attempt, p)
	}
	r := c.r
	var attempt, failures uint64
	var retryAt time.Time
	resume := false
	if h != nil {
		switch {
		case h.completed != nil:
			return h.completed.Value, nil
		case h.final != nil:
			return nil, stepErr(id, h.settled, h.final)
		}
		attempt, failures = h.attempt, h.failures
		switch {
		case h.inFlight():
			resume = durable
		case h.retry != nil:
			retryAt = fromUnixNano(h.retry.RetryAt)
		}
	}
	for {
		if !retryAt.IsZero() {
			// Between attempts nothing is in flight; a cancel that comes
			// now is told by skipping the attempt that would follow.
			c.co.inflight = c.attempt(id, attempt+1)
			c.co.inflight.unstarted = true
			_, err := r.wait(c, retryAt, func() (bool, error) { return false, nil })
			c.co.inflight = nil
			if err != nil {
				return nil, err
			}
		}
		if !resume {
			attempt++
		}
		res := try(attempt, resume)
		resume = false
		if res.halt != nil {
			return nil, c.halt(res.halt)
		}
		if res.failure == nil {
			if len(res.value) == 0 {
				res.value = cborNull()
			}
			if err := settleOK(attempt, stepCompleted{Value: res.value, Seq: res.seq}); err != nil {
				return nil, err
			}
			return res.value, nil
		}
		failures++
		f := stepFailed{Error: message(res.failure), Timeout: res.timeout, Seq: res.seq, Intent: res.outstanding}
		if failures >= uint64(o.retry.MaxAttempts) || IsPermanent(res.failure) {
			f.Final = true
			var err error
			if f.Intent != "" {
				err = c.settleWithdrawing(id, attempt, f)
			} else {
				err = c.settle(event.StepFailed, id, attempt, f)
			}
			if err != nil {
				return nil, err
			}
			return nil, stepErr(id, attempt, &f)
		}
		retryAt = r.ex.Now().Add(o.retry.Delay(r.id, id, failures))
		f.RetryAt = unixNano(retryAt)
		if err := c.settle(event.StepFailed, id, attempt, f); err != nil {
			return nil, err
		}
	}
}

// Step runs fn as the step name of the run and returns its result. The
// result is journaled (as canonical CBOR, in StepCompleted) before Step
// returns, so when the run is re-run after a crash, a completed step
// returns its recorded result without running fn again; what Step returns
// is always the decoded record, the first time too, so both runs see the
// same value. A step that was running when its worker stopped runs again
// as its next logical attempt: fn runs at least once per completed step,
// and should be idempotent where that matters.
//
// A name that repeats gets an occurrence number ("charge", "charge#2",
// ...). Names are non-empty UTF-8 without '#', NUL or the "sys:" prefix.
// fn's error fails the attempt; WithRetry retries it, WithTimeout bounds
// it, Permanent makes it final. A step that failed for good returns a
// *StepError. Once the run stops on this worker Step returns an error
// matching ErrStopped, which the function should return.
func Step[T any](c *Ctx, name string, fn func(ctx context.Context) (T, error), opts ...StepOption) (T, error) {
	var zero T
	if err := checkName("step", name); err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, errorf("step", ErrInvalid, "", detail("step "+name+" has no function"))
	}
	o := applyOptions(opts)
	if err := checkOptions(c, "step", o); err != nil {
		return zero, err
	}
	id, h, err := c.begin(kindStep, name)
	if err != nil {
		return zero, err
	}
	r := c.r
	raw, err := c.retrying(id, h, o, false, func(attempt uint64, _ bool) attemptResult {
		if err := r.event(c.ctx, event.StepStarted, id, attempt, stepStarted{Kind: kindStep}); err != nil {
			return attemptResult{halt: err}
		}
		c.co.inflight = c.attempt(id, attempt)
		v, failure, timedOut, halt := r.runAttempt(c, o.timeout, func(ctx context.Context) ([]byte, error) {
			c.co.inFn.Store(true)
			v, err := fn(ctx)
			c.co.inFn.Store(false)
			if err != nil {
				return nil, err
			}
			b, err := event.Marshal(v)
			if err != nil {
				return nil, Permanent(fmt.Errorf("the step's result has no canonical encoding: %w", err))
			}
			if err := checkValue("the step's result", b); err != nil {
				return nil, Permanent(err) // the same on every attempt
			}
			return b, nil
		})
		return attemptResult{value: v, failure: failure, timeout: timedOut, halt: halt}
	})
	if err != nil {
		return zero, err
	}
	return decodeAs[T](c, id, raw, true)
}

// Sleep waits for d as a durable step: its first execution schedules a
// durable timer (fenced by the run's lease) due d after the store's now
// (its clock judges the due time, whatever the worker's reads) and journals
// the due time; the run then waits for the timer's firing in its inbox,
// on whichever worker holds it by then. A crash does not move the due
// time, and a re-run returns at once once the sleep is recorded as
// completed. The timers fire through the plane's timer worker. A sleep
// that would end after the latest instant the store holds (2262-01-01) is
// ErrInvalid and records nothing; so is a step whose timeout or longest
// retry wait would.
func Sleep(c *Ctx, d time.Duration) error {
	if err := checkSpan(c, "sleep", "the sleep", d); err != nil {
		return err
	}
	id, h, err := c.begin(kindSleep, sleepBase)
	if err != nil {
		return err
	}
	if h != nil && h.completed != nil {
		return nil
	}
	r := c.r
	p, attempt := stepStarted{}, uint64(1)
	if h != nil && h.attempt > 0 {
		p, attempt = h.last, h.attempt
	} else {
		// The due time is an instant of the store's clock, which judges
		// it (the timer fires when the store's clock reaches it): d after
		// the store's now, never after the worker's, which may be seconds
		// away.
		now, err := r.st.Now(c.ctx)
		if err != nil {
			return c.halt(r.failed(c.ctx, "sleep", err))
		}
		p = stepStarted{Kind: kindSleep, DeliverAt: unixNano(now.Add(max(d, 0))), Timer: timerHash(r.id, id)}
		if err := r.event(c.ctx, event.StepStarted, id, attempt, p); err != nil {
			return c.halt(err)
		}
	}
	c.co.inflight = c.attempt(id, attempt)
	payload, err := event.Marshal(timerPayload{Run: r.id, Step: id})
	if err != nil {
		return c.halt(r.failed(c.ctx, "sleep", err))
	}
	// Scheduling again after a crash is a no-op: the store dedupes the
	// timer by its hash.
	if err := r.writable(c.ctx); err != nil {
		return c.halt(err)
	}
	if err := r.st.Schedule(c.ctx, r.id, r.epoch, p.Timer, fromUnixNano(p.DeliverAt), payload); err != nil {
		return c.halt(r.failed(c.ctx, "sleep", err))
	}
	key := store.TimerKey(p.Timer)
	var seq uint64
	if _, err := r.wait(c, time.Time{}, func() (bool, error) {
		for i := range r.items {
			it := &r.items[i]
			if it.kind == vocab.KindTimer && (it.dedupe == key || it.timer != nil && it.timer.Run == r.id && it.timer.Step == id) {
				seq = it.seq
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	return c.settle(event.StepCompleted, id, attempt, stepCompleted{Value: cborNull(), Seq: seq})
}

// Await waits for the signal name (Client.Signal) and returns its value
// decoded as T, as a durable step: the signal item it consumed is
// journaled with its value, so a re-run returns the same value. Signals
// of one name are consumed in inbox order, each by one Await; a signal
// sent before the Await waits for it.
func Await[T any](c *Ctx, name string) (T, error) {
	var zero T
	if err := checkName("await", name); err != nil {
		return zero, err
	}
	id, h, err := c.begin(kindSignal, awaitBase+name)
	if err != nil {
		return zero, err
	}
	if h != nil && h.completed != nil {
		return decodeAs[T](c, id, h.completed.Value, false)
	}
	r := c.r
	attempt := uint64(1)
	if h == nil || !h.inFlight() {
		if h != nil {
			// Discarded by a reset (Client.Reset): the await starts
			// again, its attempts going on.
			attempt = h.attempt + 1
		}
		if err := r.event(c.ctx, event.StepStarted, id, attempt, stepStarted{Kind: kindSignal, Signal: name}); err != nil {
			return zero, c.halt(err)
		}
	} else {
		attempt = h.attempt
	}
	c.co.inflight = c.attempt(id, attempt)
	var got *item
	if _, err := r.wait(c, time.Time{}, func() (bool, error) {
		for i := range r.items {
			it := &r.items[i]
			if it.signal != nil && it.signal.Name == name && !r.h.consumed[it.seq] {
				got = it
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return zero, err
	}
	if err := c.settle(event.StepCompleted, id, attempt, stepCompleted{Value: got.signal.Value, Seq: got.seq}); err != nil {
		return zero, err
	}
	return decodeAs[T](c, id, got.signal.Value, false)
}

// Effect asks the plane's adapters for an effect of kind with params (any
// value with a canonical CBOR encoding) as the step name, and returns the
// body of its receipt decoded as T. An attempt publishes one intent,
// fenced by the run's lease, whose hash derives from the run id, the step
// id and the attempt, so the store queues it once whatever happens to the
// worker; its receipt arrives in the run's inbox. A worker that takes over
// an attempt in flight waits for that same intent's receipt: the effect is
// not asked for twice. An ok receipt completes the step; an error or
// timeout receipt fails the attempt, and the retry policy decides whether
// a new attempt (a new intent) follows: the receipt says that intent is
// finished.
//
// WithTimeout bounds the wait for each receipt. A wait that runs out
// fails the attempt but leaves its intent where it is (queued, or
// claimed and executing): the next attempt waits for that same intent, so
// a timeout never makes a second intent of one logical effect. When the
// retries are spent, the step's final StepFailed withdraws the intent in
// the same write if no adapter has claimed it yet; one already claimed
// may still execute, its receipt then ignored, so a StepError with
// Timeout set means the effect's outcome is unknown, not that it failed.
func Effect[T any](c *Ctx, name, kind string, params any, opts ...StepOption) (T, error) {
	var zero T
	if err := checkName("effect", name); err != nil {
		return zero, err
	}
	if err := store.CheckID("effect", "kind", kind); err != nil {
		return zero, errorf("effect", ErrInvalid, "", err)
	}
	b, err := event.Marshal(params)
	if err != nil {
		return zero, errorf("effect", ErrInvalid, "", err)
	}
	if err := checkValue("the effect's params", b); err != nil {
		return zero, errorf("effect", ErrInvalid, "", err)
	}
	o := applyOptions(opts)
	if err := checkOptions(c, "effect", o); err != nil {
		return zero, err
	}
	id, h, err := c.begin(kindEffect, name)
	if err != nil {
		return zero, err
	}
	r := c.r
	// carry is the intent an attempt whose wait ran out left behind: the
	// next attempt waits for it instead of asking for the effect again, so
	// one logical effect is one intent however often its wait times out.
	var carry string
	if h != nil && h.retry != nil {
		carry = h.retry.Intent
	}
	raw, err := c.retrying(id, h, o, true, func(attempt uint64, resumed bool) attemptResult {
		hash := intentHash(r.id, id, attempt)
		var deadline time.Time
		if resumed {
			last := r.h.byID[id].last
			if last.Intent != "" {
				hash = last.Intent
			}
			deadline = fromUnixNano(last.Deadline)
		} else {
			if carry != "" {
				hash = carry
			}
			if o.timeout > 0 {
				deadline = r.ex.Now().Add(o.timeout)
			}
			p := stepStarted{Kind: kindEffect, Intent: hash, EffectKind: kind, Deadline: unixNano(deadline)}
			if err := r.event(c.ctx, event.StepStarted, id, attempt, p); err != nil {
				return attemptResult{halt: err}
			}
		}
		c.co.inflight = c.attempt(id, attempt)
		if err := r.writable(c.ctx); err != nil {
			return attemptResult{halt: err}
		}
		// Publishing again after a crash is a no-op: the store skips an
		// intent hash it has seen.
		if _, err := r.st.Publish(c.ctx, r.id, r.epoch, []vocab.Intent{{IntentHash: hash, Kind: kind, Params: b,
			Origin: r.id + "@" + strconv.FormatUint(r.h.head, 10)}}); err != nil {
			return attemptResult{halt: r.failed(c.ctx, "effect", err)}
		}
		var got *item
		timedOut, err := r.wait(c, deadline, func() (bool, error) {
			for i := range r.items {
				if it := &r.items[i]; it.receipt != nil && it.receipt.IntentHash == hash {
					got = it
					return true, nil
				}
			}
			return false, nil
		})
		switch {
		case err != nil:
			return attemptResult{halt: err}
		case timedOut:
			carry = hash
			return attemptResult{failure: fmt.Errorf("no receipt for intent %s within %v", hash, o.timeout), timeout: true,
				outstanding: hash}
		}
		carry = ""
		rc := got.receipt
		switch rc.Status {
		case vocab.ReceiptOK:
			v := rc.Body
			if len(v) == 0 {
				v = cborNull()
			}
			return attemptResult{value: v, seq: got.seq}
		case vocab.ReceiptTimeout:
			return attemptResult{failure: receiptFailure(rc.Status, rc.Body), timeout: true, seq: got.seq}
		}
		return attemptResult{failure: receiptFailure(rc.Status, rc.Body), seq: got.seq}
	})
	if err != nil {
		return zero, err
	}
	return decodeAs[T](c, id, raw, false)
}

// receiptFailure is an error or timeout receipt as an attempt's failure:
// the body's "error" text when it has one (the adapter pool's failures
// do).
func receiptFailure[S ~string](status S, body []byte) error {
	var f struct {
		Error string `cbor:"error"`
	}
	if len(body) > 0 && event.Unmarshal(body, &f) == nil && f.Error != "" {
		return fmt.Errorf("effect receipt %s: %s", status, f.Error)
	}
	return fmt.Errorf("effect receipt %s", status)
}

// Child starts def as the run childID with input in (idempotently: a run
// that exists with the same workflow, version and input is the same child)
// and waits for its result, as a durable step. The child runs on any
// worker like every run; when it ends it tells this run, which reads the
// child's stream for its result. A child that failed or was cancelled
// fails the step with a *StepError; a childID taken by another run fails
// it with ErrConflict's message.
func Child[In, Out any](c *Ctx, def *Def[In, Out], childID string, in In, opts ...ChildOption) (Out, error) {
	var zero Out
	co, err := applyChildOptions(opts)
	if err != nil {
		return zero, err
	}
	if def == nil {
		return zero, errorf("child", ErrInvalid, "", detail("a nil workflow"))
	}
	if err := def.check(); err != nil {
		return zero, err
	}
	if err := store.CheckID("child", "run id", childID); err != nil {
		return zero, errorf("child", ErrInvalid, "", err)
	}
	if err := checkRunNamespace(childID, startOptions{}); err != nil {
		return zero, err
	}
	if len(childBase)+len(childID) > maxNameBytes {
		return zero, errorf("child", ErrInvalid, "", detail(fmt.Sprintf("a child's run id is at most %d bytes", maxNameBytes-len(childBase))))
	}
	input, err := event.Marshal(in)
	if err != nil {
		return zero, errorf("child", ErrInvalid, "", err)
	}
	id, h, err := c.begin(kindChild, childBase+childID)
	if err != nil {
		return zero, err
	}
	if h != nil {
		switch {
		case h.completed != nil:
			return decodeAs[Out](c, id, h.completed.Value, true)
		case h.final != nil:
			return zero, stepErr(id, h.settled, h.final)
		}
	}
	r := c.r
	if h == nil || h.attempt == 0 {
		p := stepStarted{Kind: kindChild, Child: childID}
		if co.parentClose != ParentCloseCancel {
			p.ParentClose = string(co.parentClose)
		}
		if err := r.event(c.ctx, event.StepStarted, id, 1, p); err != nil {
			return zero, c.halt(err)
		}
	}
	c.co.inflight = c.attempt(id, 1)
	fail := func(msg string) (Out, error) {
		f := stepFailed{Error: message(detail(msg)), Final: true}
		if err := c.settle(event.StepFailed, id, 1, f); err != nil {
			return zero, err
		}
		return zero, stepErr(id, 1, &f)
	}
	if err := r.writable(c.ctx); err != nil {
		return zero, c.halt(err)
	}
	if _, err := startRun(c.ctx, r.st, def, childID, input, r.id, nil, nil, nil, 0); err != nil {
		if errors.Is(err, ErrConflict) {
			return fail(err.Error())
		}
		return zero, c.halt(r.failed(c.ctx, "child", err))
	}
	var end *event.Envelope
	if _, err := r.wait(c, time.Time{}, func() (bool, error) {
		var err error
		end, err = r.childEnd(c.ctx, childID)
		return end != nil, err
	}); err != nil {
		return zero, err
	}
	p, err := decodePayload(end.EventType, end.Payload)
	if err != nil {
		return zero, c.halt(r.failed(c.ctx, "child", err))
	}
	re := p.(runEnd)
	if end.EventType != event.RunCompleted {
		msg := "child run " + childID + " " + string(endStatus(end.EventType))
		if re.Error != "" {
			msg += ": " + re.Error
		}
		return fail(msg)
	}
	if err := c.settle(event.StepCompleted, id, 1, stepCompleted{Value: re.Output}); err != nil {
		return zero, err
	}
	return decodeAs[Out](c, id, re.Output, true)
}

// childNoticed reports whether the notice of child's end (the item its
// finish enqueues) has arrived in the run's inbox since the last look.
func (r *runner) childNoticed(child string, cs *childState) bool {
	key := ItemChild + ":" + child
	for ; cs.seen < len(r.items); cs.seen++ {
		if it := &r.items[cs.seen]; it.kind == ItemChild && it.dedupe == key {
			cs.seen++
			return true
		}
	}
	return false
}

// childEnd reads a child's stream past what it read before and returns
// its end once recorded.
func (r *runner) childEnd(ctx context.Context, child string) (*event.Envelope, error) {
	cs := r.kids[child]
	if cs == nil {
		cs = &childState{}
		r.kids[child] = cs
	}
	if cs.end == nil && r.ex != nil && !cs.lastRead.IsZero() && r.ex.Now().Before(cs.lastRead.Add(r.poll)) && !r.childNoticed(child, cs) {
		// Nothing says the child ended since the last read: a parent of
		// many children reads each one's stream on its end's notice (or
		// once a poll interval), not on every wake of the run.
		return nil, nil
	}
	if r.ex != nil {
		cs.lastRead = r.ex.Now()
	}
	for cs.end == nil {
		evs, err := r.st.Read(ctx, child, cs.after, 256)
		if err != nil {
			return nil, err
		}
		for i := range evs {
			cs.after = evs[i].RunSeq
			if endStatus(evs[i].EventType) != "" {
				cs.end = &evs[i]
				break
			}
		}
		if len(evs) < 256 {
			break
		}
	}
	return cs.end, nil
}
