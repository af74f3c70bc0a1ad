package orrerytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Fake is an effect adapter whose answers a test scripts, for the effect
// kinds it serves: each execution takes the next Outcome of the script,
// then the default one (OK with no body unless Default says otherwise),
// and every execution is recorded (Asked). It runs in the node's effect
// pool like a real adapter, with a real adapter's retry policy, so a
// failed attempt is retried, a crash leaves its effect in flight, and the
// world gets the receipt production would give it.
type Fake struct {
	kinds  []string
	policy adapter.RetryPolicy

	mu     sync.Mutex
	script map[string][]Outcome // by kind
	dflt   Outcome
	asked  []Asked
}

// NewFake returns a fake adapter serving kinds, retrying failed attempts
// by the production default policy (adapter.DefaultRetry; see Retry).
func NewFake(kinds ...string) *Fake {
	return &Fake{kinds: slices.Clone(kinds), script: map[string][]Outcome{}, dflt: OK(nil)}
}

// Script queues outcomes for the executions of kind's effects, one per
// execution (an attempt the pool retries is an execution too), in order.
// Kind "" scripts every kind the fake serves: its queue answers an
// execution whose own kind's queue is empty. A kind the fake does not
// serve is a mistake in the test, and panics.
func (f *Fake) Script(kind string, outcomes ...Outcome) *Fake {
	if kind != "" && !slices.Contains(f.kinds, kind) {
		panic(fmt.Sprintf("orrerytest: Fake.Script: the fake serves %q, not %q", f.kinds, kind))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[kind] = append(f.script[kind], outcomes...)
	return f
}

// Default sets the outcome of every execution the script does not cover.
func (f *Fake) Default(o Outcome) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dflt = o
	return f
}

// Retry sets the retry policy the node registers the fake with (before
// the node starts).
func (f *Fake) Retry(p adapter.RetryPolicy) *Fake {
	f.policy = p
	return f
}

// Asked lists the executions so far, in order.
func (f *Fake) Asked() []Asked {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

// Kinds implements effect.Adapter.
func (f *Fake) Kinds() []string { return slices.Clone(f.kinds) }

// Execute implements effect.Adapter: it records the execution and
// answers the scripted outcome, after its delay in virtual time.
func (f *Fake) Execute(ctx context.Context, it vocab.EffectItem) (effect.Result, error) {
	f.mu.Lock()
	n := 1
	for _, a := range f.asked {
		if a.IntentHash == it.IntentHash {
			n++
		}
	}
	f.asked = append(f.asked, Asked{Kind: it.Kind, World: it.World, IntentHash: it.IntentHash, Params: slices.Clone(it.Params),
		Claim: it.Attempt, Execution: n, At: time.Now()})
	o := f.dflt
	for _, k := range []string{it.Kind, ""} {
		if q := f.script[k]; len(q) > 0 {
			o, f.script[k] = q[0], q[1:]
			break
		}
	}
	f.mu.Unlock()
	if o.delay > 0 {
		t := time.NewTimer(o.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			// The pool stopped or the claim's budget ran out: as a real
			// adapter cut off mid-call, the outcome is unknown.
			return effect.Result{}, effect.Unknown(ctx.Err())
		}
	}
	switch o.how {
	case howFail:
		return effect.Result{}, errors.New(o.msg)
	case howPermanent:
		return effect.Result{}, effect.Permanent(errors.New(o.msg))
	case howUnknown:
		return effect.Result{}, effect.Unknown(errors.New(o.msg))
	case howRefuse:
		return effect.Result{Status: vocab.ReceiptError, Body: o.body}, nil
	}
	return effect.OK(o.body), nil
}

// Asked is one execution of an effect by a Fake.
type Asked struct {
	Kind       string
	World      string // the world that asked for it
	IntentHash string
	Params     []byte // the intent's params, canonical CBOR: Decode reads them
	// Claim counts the effect's claims: 1 for the first, more after its
	// claim expired (a crashed node's) and another took it.
	Claim int
	// Execution counts this effect's executions by the fake, retries and
	// re-executions after a crash included: 1 for the first.
	Execution int
	At        time.Time // virtual time
}

// Decode decodes the effect's params into v.
func (a Asked) Decode(v any) error { return world.Decode(a.Params, v) }

// Outcome is a scripted answer of a Fake to one execution.
type Outcome struct {
	how   int
	body  any
	msg   string
	delay time.Duration
}

const (
	howOK = iota
	howRefuse
	howFail
	howPermanent
	howUnknown
)

// OK: the effect happened; the world's receipt is ok and carries body
// (nil: none), which the handler reads with world.Receipt.Decode.
func OK(body any) Outcome { return Outcome{how: howOK, body: body} }

// Refuse: the other side answered that it did nothing; the receipt is an
// error carrying body, at once, without retries.
func Refuse(body any) Outcome { return Outcome{how: howRefuse, body: body} }

// Fail: this attempt failed and nothing happened; the pool retries it by
// the fake's policy, and gives the world an error receipt (its body an
// effect.Failure) once it gives up.
func Fail(msg string) Outcome { return Outcome{how: howFail, msg: msg} }

// Permanent: a failure retrying cannot fix; the receipt is an error at
// once.
func Permanent(msg string) Outcome { return Outcome{how: howPermanent, msg: msg} }

// Unknown: the attempt may have happened (a lost answer); the pool
// retries it, and gives the world a timeout receipt once it gives up.
func Unknown(msg string) Outcome { return Outcome{how: howUnknown, msg: msg} }

// After delays the outcome by d of virtual time: the effect is in flight
// meanwhile (a Crash then cuts it off, as in production).
func (o Outcome) After(d time.Duration) Outcome {
	o.delay = d
	return o
}

// String names the outcome in failure messages.
func (o Outcome) String() string {
	s := [...]string{"OK", "Refuse", "Fail", "Permanent", "Unknown"}[o.how]
	if o.msg != "" {
		s += fmt.Sprintf("(%q)", o.msg)
	} else {
		s += fmt.Sprintf("(%v)", o.body)
	}
	if o.delay > 0 {
		s += ".After(" + o.delay.String() + ")"
	}
	return s
}
