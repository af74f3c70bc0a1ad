package actor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/orrery-run/orrery/actor"
)

// same reports whether two outcomes are the same fact (identity of the
// error and panic values, equality of the rest).
func same(a, b actor.Outcome) bool {
	return a.Severity == b.Severity && a.Err == b.Err && a.Cancel == b.Cancel && a.Panic == b.Panic
}

// sampleOutcomes covers every severity, every cancel kind, and distinct
// values of equal severity (so tie-breaking is observable).
func sampleOutcomes() []actor.Outcome {
	out := []actor.Outcome{
		actor.OkOutcome(),
		{}, // the zero value is Ok too
		actor.ErrOutcome(errors.New("e1")),
		actor.ErrOutcome(errors.New("e2")),
	}
	for k := actor.CancelRequested; k <= actor.CancelKill; k++ {
		out = append(out, actor.CancelledOutcome(actor.CancelReason{Kind: k}))
	}
	out = append(out,
		actor.CancelledOutcome(actor.CancelReason{Kind: actor.CancelTimeout}), // equal kind, distinct value
		actor.PanickedOutcome("p1", []byte("stack1")),
		actor.PanickedOutcome("p2", nil),
	)
	return out
}

func describe(o actor.Outcome) string { return fmt.Sprintf("%v%+v", o, o.Cancel) }

func TestJoinOutcomesIsMonotoneAndSelectsWorst(t *testing.T) {
	os := sampleOutcomes()
	ok := actor.OkOutcome()
	for _, a := range os {
		// Idempotent.
		if got := actor.Join(a, a); !same(got, a) {
			t.Errorf("Join(a, a) = %s, want a = %s", describe(got), describe(a))
		}
		// Ok is the identity on both sides.
		if got := actor.Join(ok, a); got.Severity != a.Severity || (a.Severity != actor.Ok && !same(got, a)) {
			t.Errorf("Join(Ok, %s) = %s", describe(a), describe(got))
		}
		if got := actor.Join(a, ok); !same(got, a) {
			t.Errorf("Join(%s, Ok) = %s", describe(a), describe(got))
		}
		for _, b := range os {
			ab, ba := actor.Join(a, b), actor.Join(b, a)
			want := max(a.Severity, b.Severity)
			// Selects the worst, and the result is one of the operands.
			if ab.Severity != want {
				t.Errorf("Join(%s, %s).Severity = %v, want %v", describe(a), describe(b), ab.Severity, want)
			}
			if !same(ab, a) && !same(ab, b) {
				t.Errorf("Join(%s, %s) = %s is neither operand", describe(a), describe(b), describe(ab))
			}
			// Commutative in severity (and in the cancel reason's strength).
			if ab.Severity != ba.Severity || ab.Cancel.Kind != ba.Cancel.Kind {
				t.Errorf("Join not commutative in severity: %s vs %s", describe(ab), describe(ba))
			}
			// Two cancellations keep the stronger reason.
			if a.Severity == actor.Cancelled && b.Severity == actor.Cancelled {
				if k := max(a.Cancel.Kind, b.Cancel.Kind); ab.Cancel.Kind != k {
					t.Errorf("Join(%s, %s) kept reason %v, want %v", describe(a), describe(b), ab.Cancel.Kind, k)
				}
			}
			// Panicked absorbs.
			if a.Severity == actor.Panicked && (ab.Severity != actor.Panicked || ba.Severity != actor.Panicked) {
				t.Errorf("Panicked %s not absorbing with %s: %s, %s", describe(a), describe(b), describe(ab), describe(ba))
			}
			// Monotone: a worse left operand never gives a better join.
			for _, a2 := range os {
				if a2.Severity >= a.Severity {
					if j2 := actor.Join(a2, b); j2.Severity < ab.Severity {
						t.Errorf("not monotone: Join(%s,%s)=%v but Join(%s,%s)=%v",
							describe(a), describe(b), ab.Severity, describe(a2), describe(b), j2.Severity)
					}
				}
			}
			// Associative.
			for _, c := range os {
				l := actor.Join(actor.Join(a, b), c)
				r := actor.Join(a, actor.Join(b, c))
				if !same(l, r) {
					t.Errorf("not associative for %s, %s, %s: %s vs %s", describe(a), describe(b), describe(c), describe(l), describe(r))
				}
			}
		}
	}
	// JoinAll is the fold from Ok, and its severity ignores order.
	if got := actor.JoinAll(); !got.IsOk() {
		t.Errorf("JoinAll() = %v, want Ok", got)
	}
	fold := actor.OkOutcome()
	for _, o := range os {
		fold = actor.Join(fold, o)
	}
	if got := actor.JoinAll(os...); !same(got, fold) {
		t.Errorf("JoinAll = %s, want fold %s", describe(got), describe(fold))
	}
	rev := make([]actor.Outcome, len(os))
	for i, o := range os {
		rev[len(os)-1-i] = o
	}
	if got := actor.JoinAll(rev...); got.Severity != actor.Panicked || got.Severity != fold.Severity {
		t.Errorf("JoinAll(reversed).Severity = %v, want %v", got.Severity, fold.Severity)
	}
}

func TestOutcomeAsErrorMatchesSeverity(t *testing.T) {
	app := errors.New("app")
	if err := actor.OkOutcome().AsError(); err != nil {
		t.Errorf("Ok.AsError() = %v, want nil", err)
	}
	err := actor.ErrOutcome(app).AsError()
	var oe *actor.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome.Severity != actor.Err || !errors.Is(err, app) {
		t.Errorf("Err outcome as error = %v; want *OutcomeError unwrapping to the app error", err)
	}
	for _, o := range []actor.Outcome{actor.CancelledOutcome(actor.CancelReason{Kind: actor.CancelKill}), actor.PanickedOutcome("x", nil)} {
		if err := o.AsError(); !errors.As(err, &oe) || oe.Outcome.Severity != o.Severity {
			t.Errorf("%v.AsError() = %v", o, err)
		}
	}
}

func TestStrongestCancelReasonWins(t *testing.T) {
	t.Run("Stronger", func(t *testing.T) {
		// Two distinct From values make the tie-break observable.
		sys := newSys(t)
		p1 := spawn(t, sys.Root(), &fnActor{}).PID()
		p2 := spawn(t, sys.Root(), &fnActor{}).PID()
		for a := actor.CancelNone; a <= actor.CancelKill; a++ {
			for b := actor.CancelNone; b <= actor.CancelKill; b++ {
				ra := actor.CancelReason{Kind: a, From: p1}
				rb := actor.CancelReason{Kind: b, From: p2}
				got := ra.Stronger(rb)
				if got.Kind != max(a, b) {
					t.Errorf("%v.Stronger(%v).Kind = %v, want %v", a, b, got.Kind, max(a, b))
				}
				if a == b && got != ra {
					t.Errorf("tie %v: Stronger = %v, want the receiver %v (first request wins among equals)", a, got, ra)
				}
				if back := rb.Stronger(ra); back.Kind != got.Kind {
					t.Errorf("Stronger not symmetric in strength: %v vs %v", got, back)
				}
			}
		}
		// The order of strength the spec relies on.
		order := []actor.CancelKind{actor.CancelNone, actor.CancelRequested, actor.CancelRaceLost,
			actor.CancelTimeout, actor.CancelLinked, actor.CancelShutdown, actor.CancelKill}
		for i := 1; i < len(order); i++ {
			if !(order[i-1] < order[i]) {
				t.Errorf("%v should be weaker than %v", order[i-1], order[i])
			}
		}
		closeSys(t, sys)
	})

	t.Run("process", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			tl := &traceLog{}
			sys := newSys(t, tl.opt())
			stops := make(chan actor.Outcome, 4)
			ref := spawn(t, sys.Root(), &fnActor{stop: func(_ *actor.Proc, o actor.Outcome) { stops <- o }})
			release := block(t, ref)
			pid := ref.PID()
			// Requests race in while the handler is busy; a weaker one after
			// a stronger one must not downgrade the reason.
			pid.Cancel(actor.CancelReason{Kind: actor.CancelTimeout})
			pid.Cancel(actor.CancelReason{Kind: actor.CancelRequested})
			pid.Cancel(actor.CancelReason{Kind: actor.CancelLinked})
			pid.Cancel(actor.CancelReason{Kind: actor.CancelRaceLost})
			release()
			o, err := pid.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if o.Severity != actor.Cancelled || o.Cancel.Kind != actor.CancelLinked {
				t.Errorf("outcome = %v, want cancelled(linked): the strongest request wins", o)
			}
			if got := <-stops; got.Cancel.Kind != actor.CancelLinked {
				t.Errorf("stop hook saw %v, want cancelled(linked)", got)
			}
			if len(stops) != 0 {
				t.Errorf("stop hook ran more than once")
			}
			// Idempotent: four requests are one cancellation.
			n := 0
			for _, ev := range tl.of(actor.TraceCancelRequested) {
				if ev.PID == pid {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d cancel-requested trace events, want 1 (requests must not compound)", n)
			}
			closeSys(t, sys)
		})
	})
}

func TestCallErrorOutcomeMapping(t *testing.T) {
	sys := newSys(t)
	target := spawn(t, sys.Root(), &fnActor{}).PID()
	sentinels := []error{actor.ErrCallCancelled, actor.ErrCallTimeout, actor.ErrServerStopped,
		actor.ErrCallNoProc, actor.ErrCallingSelf, actor.ErrNoReply}
	cases := []struct {
		kind     actor.CallErrorKind
		sentinel error
		sev      actor.Severity
		cancel   actor.CancelKind // for Cancelled
	}{
		{actor.CallCancelled, actor.ErrCallCancelled, actor.Cancelled, actor.CancelRequested},
		{actor.CallTimeout, actor.ErrCallTimeout, actor.Cancelled, actor.CancelTimeout},
		{actor.CallServerStopped, actor.ErrServerStopped, actor.Err, 0},
		{actor.CallNoProc, actor.ErrCallNoProc, actor.Err, 0},
		{actor.CallCallingSelf, actor.ErrCallingSelf, actor.Err, 0},
		{actor.CallNoReply, actor.ErrNoReply, actor.Panicked, 0},
	}
	for _, c := range cases {
		e := &actor.CallError{Kind: c.kind, Target: target}
		o := e.Outcome()
		if o.Severity != c.sev {
			t.Errorf("%v: Outcome().Severity = %v, want %v", c.kind, o.Severity, c.sev)
		}
		if c.sev == actor.Cancelled && o.Cancel.Kind != c.cancel {
			t.Errorf("%v: cancel reason = %v, want %v", c.kind, o.Cancel.Kind, c.cancel)
		}
		// Err and Panicked outcomes keep the error itself, so the fact stays
		// inspectable (and a NoReply is visible as what it is).
		if c.sev == actor.Err || c.sev == actor.Panicked {
			if !errors.Is(o.Err, c.sentinel) {
				t.Errorf("%v: Outcome().Err = %v, want the CallError", c.kind, o.Err)
			}
		}
		for _, s := range sentinels {
			if got, want := errors.Is(e, s), s == c.sentinel; got != want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", e, s, got, want)
			}
		}
	}
	closeSys(t, sys)
}

func TestCastErrorOutcomeMapping(t *testing.T) {
	sentinels := []error{actor.ErrCastFull, actor.ErrCastServerStopped, actor.ErrCastCancelled, actor.ErrCastNoProc}
	cases := []struct {
		kind     actor.CastErrorKind
		sentinel error
		sev      actor.Severity
	}{
		{actor.CastFull, actor.ErrCastFull, actor.Err},
		{actor.CastServerStopped, actor.ErrCastServerStopped, actor.Err},
		{actor.CastCancelled, actor.ErrCastCancelled, actor.Cancelled},
		{actor.CastNoProc, actor.ErrCastNoProc, actor.Err},
	}
	for _, c := range cases {
		e := &actor.CastError{Kind: c.kind, Cause: context.Canceled}
		o := e.Outcome()
		if o.Severity != c.sev {
			t.Errorf("%v: Outcome().Severity = %v, want %v", c.kind, o.Severity, c.sev)
		}
		if c.sev == actor.Cancelled && o.Cancel.Kind != actor.CancelRequested {
			t.Errorf("%v: cancel reason = %v, want requested", c.kind, o.Cancel.Kind)
		}
		if c.sev == actor.Err && !errors.Is(o.Err, c.sentinel) {
			t.Errorf("%v: Outcome().Err = %v, want the CastError", c.kind, o.Err)
		}
		for _, s := range sentinels {
			if got, want := errors.Is(e, s), s == c.sentinel; got != want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", e, s, got, want)
			}
		}
	}
}
