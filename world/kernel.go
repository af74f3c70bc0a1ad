package world

import (
	"time"

	"github.com/orrery-run/orrery/event"
)

// Kernel is a definition with its state type erased, so that one host can
// run worlds of many definitions side by side. Def[S].Kernel returns it;
// every method is the generic function of the same name.
type Kernel interface {
	Name() string
	Version() uint64
	Err() error
	// Load is Load(d, id, s).
	Load(id string, s Snapshot) (Instance, error)
	// Replay is Replay(d, id, base, tail).
	Replay(id string, base Snapshot, tail []event.Envelope) (Instance, error)
	// ForkState returns state with nothing awaited: the user's state S
	// unchanged, no intent awaiting a receipt and no timer armed. A forked
	// world boots from it, since the effects and timers its source awaits
	// stay with the source and would never reach the fork.
	ForkState(state []byte) ([]byte, error)
	// Types lists the input types the definition has handlers for, sorted.
	Types() []string
	// CheckInput is Def.CheckInput.
	CheckInput(typeName string, value []byte) error
}

// Instance is a World[S] with S erased.
type Instance interface {
	ID() string
	Height() uint64
	State() []byte
	StateHash() string
	Snapshot() Snapshot
	Step(in Input, emittedAt time.Time) (StepResult, error)
	Prepare(in Input) Prepared
	Refuse(in Input, emittedAt time.Time, reason error) (StepResult, error)
	Awaiting() []Awaiting
	Timers() []string
	Armed(intentHash string) bool
}

var _ Instance = (*World[struct{}])(nil)

// Kernel returns d as a Kernel.
func (d *Def[S]) Kernel() Kernel { return kernel[S]{d} }

type kernel[S any] struct{ d *Def[S] }

func (k kernel[S]) Name() string    { return k.d.name }
func (k kernel[S]) Version() uint64 { return k.d.version }
func (k kernel[S]) Err() error      { return k.d.Err() }
func (k kernel[S]) Types() []string { return k.d.Types() }

func (k kernel[S]) CheckInput(typeName string, value []byte) error {
	return k.d.CheckInput(typeName, value)
}

func (k kernel[S]) Load(id string, s Snapshot) (Instance, error) {
	w, err := Load(k.d, id, s)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (k kernel[S]) Replay(id string, base Snapshot, tail []event.Envelope) (Instance, error) {
	w, err := Replay(k.d, id, base, tail)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (k kernel[S]) ForkState(state []byte) ([]byte, error) {
	if err := k.d.ready(); err != nil {
		return nil, err
	}
	user, m, err := k.d.decodeImage(state)
	if err != nil {
		return nil, err
	}
	return encodeImage(user, meta{plan: m.plan})
}

// RecordInput returns the input a journal record of this kernel was
// stepped with, as Replay re-runs it: how a reader that was not there
// (a client in another process) re-derives the step, its reply included.
func RecordInput(e event.Envelope) (Input, error) {
	var r record
	if err := unmarshalRecord(e.Payload, &r); err != nil || r.V != recordVersion || (e.EventType != EventWorldStepped && e.EventType != EventWorldUpgraded) {
		return Input{}, &TailError{Height: e.RunSeq, Reason: "payload is not a world step record", Err: err}
	}
	return Input{Seq: r.Input.Seq, Kind: r.Input.Kind, Payload: r.Input.Payload, EnqueuedAt: r.Input.EnqueuedAt.Time, ReceiptFor: r.Input.ReceiptFor}, nil
}

// RecordRefused reports whether a record is of a step the store refused
// (World.Refuse): re-deriving it is Refuse, not Step.
func RecordRefused(e event.Envelope) (bool, error) {
	var r record
	if err := unmarshalRecord(e.Payload, &r); err != nil || r.V != recordVersion {
		return false, &TailError{Height: e.RunSeq, Reason: "payload is not a world step record", Err: err}
	}
	return r.Refused, nil
}

// RecordCallID returns the call id of a record's input ("" for an input
// that is not a call), and the hash of the reply the step gave.
func RecordCallID(e event.Envelope) (callID, replyHash string, err error) {
	var r record
	if err := unmarshalRecord(e.Payload, &r); err != nil || r.V != recordVersion {
		return "", "", &TailError{Height: e.RunSeq, Reason: "payload is not a world step record", Err: err}
	}
	return r.Input.CallID, r.ReplyHash, nil
}

// unmarshalRecord reads a journal record within maxRecordBytes: a record
// holds a whole input and more, so an input's limit would refuse some.
func unmarshalRecord(b []byte, r any) error {
	dec, err := event.NewDecoder(event.DecoderOptions{MaxSize: maxRecordBytes})
	if err != nil {
		return err
	}
	return dec.Unmarshal(b, r)
}
