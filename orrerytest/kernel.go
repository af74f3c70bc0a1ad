package orrerytest

import (
	"strconv"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Kernel steps one world of a definition directly, one input at a time,
// as a host would, with no node, store or clock: the unit test of a
// handler. Each step returns the kernel's world.StepResult (the reply,
// the intents, timers and sends it asked for, the outcome and error), and
// fails the test only when the kernel itself errs. Inputs are stamped
// with the kernel's time (At), which moves only when the test says, or
// when Fire delivers a timer at its due time. It needs no virtual-time
// bubble; use NewWorld to see the same world run by a node.
type Kernel[S any] struct {
	t     testing.TB
	w     *world.World[S]
	now   time.Time
	calls int
}

// Epoch is where the kit's clocks start: Kernel's, and the virtual
// clock of Test (testing/synctest's), midnight UTC on 2000-01-01.
func Epoch() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }

// NewKernel loads world id of d at its initial state, at Epoch().
func NewKernel[S any](t testing.TB, d *world.Def[S], id string) *Kernel[S] {
	t.Helper()
	w, err := world.Load(d, id, world.Snapshot{})
	if err != nil {
		t.Fatalf("orrerytest: %v", err)
	}
	return &Kernel[S]{t: t, w: w, now: Epoch()}
}

// At sets the time the next inputs are stamped with (what Ctx.Now reads).
func (k *Kernel[S]) At(t time.Time) *Kernel[S] {
	k.now = t
	return k
}

// Now is the time the next input is stamped with.
func (k *Kernel[S]) Now() time.Time { return k.now }

// Height is the number of steps taken.
func (k *Kernel[S]) Height() uint64 { return k.w.Height() }

// State is the world's state, a copy the test owns.
func (k *Kernel[S]) State() S {
	k.t.Helper()
	s, err := k.w.Value()
	if err != nil {
		k.t.Fatalf("orrerytest: %v", err)
	}
	return s
}

// Input steps the world with a raw input; its Seq is set to the next
// one. Event, Call, Receipt and Fire build theirs.
func (k *Kernel[S]) Input(kind string, payload []byte) world.StepResult {
	k.t.Helper()
	res, err := k.w.Step(world.Input{Seq: k.w.Height() + 1, Kind: kind, Payload: payload, EnqueuedAt: k.now}, k.now)
	if err != nil {
		k.t.Fatalf("orrerytest: step %d: %v", k.w.Height()+1, err)
	}
	return res
}

// Event steps the world with v as an event.
func (k *Kernel[S]) Event(v any) world.StepResult {
	k.t.Helper()
	p, err := world.EncodeEvent(v)
	if err != nil {
		k.t.Fatalf("orrerytest: %v", err)
	}
	return k.Input(vocab.KindEvent, p)
}

// Call steps the world with v as a call: the result's Reply holds the
// handler's reply (world.Decode its Value) or its error.
func (k *Kernel[S]) Call(v any) world.StepResult {
	k.t.Helper()
	k.calls++
	p, err := world.EncodeCall("orrerytest-call-"+strconv.Itoa(k.calls), v)
	if err != nil {
		k.t.Fatalf("orrerytest: %v", err)
	}
	return k.Input(vocab.KindCall, p)
}

// Receipt steps the world with the receipt of intent (one of a step's
// Intents) with status and body (nil: none), as an adapter would answer.
func (k *Kernel[S]) Receipt(intent vocab.Intent, status vocab.ReceiptStatus, body any) world.StepResult {
	k.t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = event.Marshal(body); err != nil {
			k.t.Fatalf("orrerytest: %v", err)
		}
	}
	p, err := world.EncodeReceipt(world.Receipt{IntentHash: intent.IntentHash, Kind: intent.Kind, Status: status, Body: b})
	if err != nil {
		k.t.Fatalf("orrerytest: %v", err)
	}
	return k.Input(vocab.KindReceipt, p)
}

// Fire delivers timer (one of a step's TimerSets) at its due time, moving
// the kernel's time there first.
func (k *Kernel[S]) Fire(timer vocab.TimerSet) world.StepResult {
	k.t.Helper()
	k.now = timer.DeliverAt
	return k.Input(vocab.KindTimer, timer.Payload)
}
