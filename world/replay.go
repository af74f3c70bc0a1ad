package world

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// World is one world's state in memory: its id, height and state bytes,
// and the definition that steps it. It is the plane's handle on a hosted
// world; it does no I/O, and a World is not safe for concurrent use (a
// world steps one input at a time).
type World[S any] struct {
	def    *Def[S]
	id     string
	height uint64
	state  []byte
	hash   string
	user   []byte // the handler's state inside state
	meta   meta
}

// Load returns the world id at snapshot s, checking that s is a state this
// kernel wrote (canonical, of the image version it knows).
func Load[S any](d *Def[S], id string, s Snapshot) (*World[S], error) {
	if err := d.ready(); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, &StateError{Reason: "a world needs an id"}
	}
	user, m, err := d.decodeImage(s.State)
	if err != nil {
		return nil, err
	}
	state := s.State
	if state == nil {
		if state, err = encodeImage(user, m); err != nil {
			return nil, err
		}
	}
	return &World[S]{def: d, id: id, height: s.Height, state: state, hash: Hash(state), user: user, meta: m}, nil
}

// Step runs in against the world and advances it by one height, whatever
// the outcome (every outcome consumes the input). emittedAt is the
// producer's clock for the record's emittedAt; nothing replay compares
// depends on it. An error means nothing happened: the world is unchanged.
// It is Prepare followed by Prepared.Step.
func (w *World[S]) Step(in Input, emittedAt time.Time) (StepResult, error) {
	return w.Prepare(in).Step(emittedAt)
}

// Prepared is a step cut in two: the input and the state are decoded and
// the handler is resolved, and nothing has run. The host prepares a
// timer's firing before its due time and calls Step at that time, so the
// decoding overlaps its wait and the handler never starts early; the
// kernel itself neither waits nor reads a clock. The result is the same
// as World.Step's.
type Prepared interface {
	// Step runs the handler, if one is to run, and advances the world as
	// World.Step does. It fails with ErrStalePrepared, the world
	// unchanged, when the world stepped since Prepare (a Prepared steps
	// once, from the state it was prepared on).
	Step(emittedAt time.Time) (StepResult, error)
}

// Prepare decodes in against the world's current state, up to the call of
// its handler, and changes nothing: see Prepared.
func (w *World[S]) Prepare(in Input) Prepared {
	if in.Kind == vocab.KindUpgrade {
		var v versioned = w
		return &upgradePrep{l: single(w.def), cur: &v, height: w.height, in: in}
	}
	return &prep[S]{w: w, height: w.height, p: w.def.prepare(w.id, w.height, w.user, w.meta, in, nil)}
}

type prep[S any] struct {
	w      *World[S]
	height uint64 // the world's height at Prepare
	p      *prepared[S]
}

func (p *prep[S]) Step(emittedAt time.Time) (StepResult, error) {
	if p.p == nil || p.w.height != p.height {
		return StepResult{}, ErrStalePrepared
	}
	q := p.p
	p.p = nil // the handler may have changed q's decoded state: never run it twice
	res, user, m, err := q.finish(emittedAt, false)
	if err != nil {
		return StepResult{}, err
	}
	p.w.apply(res, user, m)
	return res, nil
}

// Refuse advances the world by one height with in consumed as an error
// outcome, without running its handler: the plane's answer when the store
// refuses a step's result (reason, whose text the record keeps; Err is a
// *RefusedError wrapping it). The state is unchanged but for a receipt or
// timer firing in consumes, which is no longer awaited, as after any error
// outcome. The record says the step was refused, so replay refuses it too
// rather than run the handler the store would not take. An input that
// decodes to no handler call (malformed, unknown, stale) is stepped as
// Step would.
func (w *World[S]) Refuse(in Input, emittedAt time.Time, reason error) (StepResult, error) {
	if in.Kind == vocab.KindUpgrade {
		res, _, err := single(w.def).upgrade(w, in, emittedAt, false, &RefusedError{Err: reason})
		return res, err
	}
	res, user, m, err := w.def.step(w.id, w.height, w.user, w.meta, in, emittedAt, false, &RefusedError{Err: reason})
	if err != nil {
		return StepResult{}, err
	}
	w.apply(res, user, m)
	return res, nil
}

func (w *World[S]) apply(res StepResult, user []byte, m meta) {
	w.height, w.state, w.hash, w.user, w.meta = res.Height, res.State, res.StateHash, user, m
}

// Step is the kernel as a pure function: the world id at snapshot s, run
// against in. It is Load followed by World.Step.
func (d *Def[S]) Step(id string, s Snapshot, in Input, emittedAt time.Time) (StepResult, error) {
	w, err := Load(d, id, s)
	if err != nil {
		return StepResult{}, err
	}
	return w.Step(in, emittedAt)
}

// ID is the world's id (the journal's streamId).
func (w *World[S]) ID() string { return w.id }

// Height is the height of the last step applied (the journal head).
func (w *World[S]) Height() uint64 { return w.height }

// State is the world's state bytes (canonical CBOR): what a snapshot stores.
// The caller must not modify them.
func (w *World[S]) State() []byte { return w.state }

// StateHash is Hash(State()).
func (w *World[S]) StateHash() string { return w.hash }

// Snapshot is the world's current (height, state).
func (w *World[S]) Snapshot() Snapshot { return Snapshot{Height: w.height, State: w.state} }

// Value decodes the handler's state S, a copy the caller owns.
func (w *World[S]) Value() (S, error) {
	var s S
	if err := w.def.stateDec.Unmarshal(w.user, &s); err != nil {
		return s, &StateError{Reason: "state does not decode", Err: err}
	}
	return s, nil
}

// Awaiting is an intent whose receipt the world has not consumed.
type Awaiting struct {
	Hash string
	Kind string
}

// Awaiting lists the intents whose receipts the world still waits for,
// sorted by hash. An intent whose receipt was consumed is never listed
// again: these, and only these, may ever be published again.
func (w *World[S]) Awaiting() []Awaiting {
	out := make([]Awaiting, 0, len(w.meta.effects))
	for _, h := range slices.Sorted(maps.Keys(w.meta.effects)) {
		out = append(out, Awaiting{Hash: h, Kind: w.meta.effects[h]})
	}
	return out
}

// Timers lists the timers set and neither fired nor cancelled, sorted.
func (w *World[S]) Timers() []string { return slices.Sorted(maps.Keys(w.meta.timers)) }

// Armed reports whether timer intentHash is set and has neither fired nor
// been cancelled: whether a firing of it would run its handler.
func (w *World[S]) Armed(intentHash string) bool {
	_, ok := w.meta.timers[intentHash]
	return ok
}

// Replay restores world id from a baseline snapshot and the journal records
// after it, re-running every step with the same inputs and checking each
// against its record. It returns the world at the tail's end, its state
// byte for byte what the journal says, or the first divergence: a
// *DivergenceError when the definition (its code or version) no longer
// does what the journal recorded, a *TailError when the tail itself is
// unusable (a gap, another stream, a foreign record).
func Replay[S any](d *Def[S], id string, base Snapshot, tail []event.Envelope) (*World[S], error) {
	w, err := Load(d, id, base)
	if err != nil {
		return nil, err
	}
	for i := range tail {
		if err := w.replayOne(&tail[i]); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func (w *World[S]) replayOne(e *event.Envelope) error {
	if e.EventType == EventWorldUpgraded {
		// A world of one version replays upgrades that left it on it
		// (already there, or failed): the one that moved a world to
		// another version is replayed by a Versions kernel.
		next, err := single(w.def).replayUpgrade(w, e)
		if err != nil {
			return err
		}
		*w = *next.(*World[S])
		return nil
	}
	h := w.height + 1
	switch {
	case e.StreamID != w.id:
		return &TailError{Height: e.RunSeq, Reason: "record of stream " + e.StreamID + ", not " + w.id}
	case e.RunSeq != h:
		return &TailError{Height: e.RunSeq, Reason: fmt.Sprintf("expected height %d (the tail must follow the baseline without gaps)", h)}
	case e.EventType != EventWorldStepped:
		return &TailError{Height: h, Reason: "event type " + e.EventType + " is not a world step"}
	}
	// Read with the state's limits, not an input's: a record holds a whole
	// input and more, and one the kernel wrote must always read back.
	var want record
	if err := w.def.stateDec.Unmarshal(e.Payload, &want); err != nil || want.V != recordVersion {
		return &TailError{Height: h, Reason: "payload is not a world step record", Err: err}
	}
	in := Input{Seq: want.Input.Seq, Kind: want.Input.Kind, Payload: want.Input.Payload, EnqueuedAt: want.Input.EnqueuedAt.Time, ReceiptFor: want.Input.ReceiptFor}
	var refused error
	if want.Refused {
		refused = &RefusedError{}
	}
	res, user, m, err := w.def.step(w.id, w.height, w.user, w.meta, in, e.EmittedAt, true, refused)
	if err != nil {
		return err
	}
	// The stepId is a function of the input alone (its inbox seq, or the
	// timer a direct firing consumed), so the re-derived one must match.
	if e.StepID != res.Record.StepID {
		return &TailError{Height: h, Reason: "stepId " + e.StepID + " does not match the input (" + res.Record.StepID + ")"}
	}
	// The re-derived record's digest, as the step built it: decoding its
	// payload again would give the same strings and lists.
	wantD, gotD := digestOf(e.PlanID, e.PlanVersion, want), res.digest
	if reason := diverges(wantD, gotD); reason != "" {
		return &DivergenceError{Height: h, Reason: reason, Want: wantD, Got: gotD}
	}
	w.apply(res, user, m)
	return nil
}

// Reasons a replay diverges, in the order they are checked.
const (
	ReasonPlan    = "plan"    // the record is of another world definition
	ReasonVersion = "version" // the record is of another version
	ReasonOutcome = "outcome" // the step ended differently
	ReasonIntents = "intents" // other effects, timers or cancels
	ReasonReply   = "reply"   // another reply to the call
	ReasonState   = "state"   // the post-step state differs
)

// StepDigest is what replay compares of a step: the journal's (Want) or the
// definition's (Got). Error texts and logs are not compared: rewording an
// error is not a change of behaviour.
type StepDigest struct {
	Plan      string
	Version   uint64
	Outcome   Outcome
	StateHash string
	Intents   []string
	Timers    []string
	Cancels   []string
	ReplyHash string
}

func digestOf(plan string, version uint64, r record) StepDigest {
	return StepDigest{Plan: plan, Version: version, Outcome: r.Outcome, StateHash: r.StateHash,
		Intents: r.Intents, Timers: r.Timers, Cancels: r.Cancels, ReplyHash: r.ReplyHash}
}

func diverges(want, got StepDigest) string {
	switch {
	case want.Plan != got.Plan:
		return ReasonPlan
	case want.Version != got.Version:
		return ReasonVersion
	case want.Outcome != got.Outcome:
		return ReasonOutcome
	case !slices.Equal(want.Intents, got.Intents), !slices.Equal(want.Timers, got.Timers),
		!slices.Equal(want.Cancels, got.Cancels):
		// Before the state: awaited intents are part of the state, so new
		// intents change its hash too, and "intents" is the sharper name.
		return ReasonIntents
	case want.ReplyHash != got.ReplyHash:
		return ReasonReply
	case want.StateHash != got.StateHash:
		return ReasonState
	}
	return ""
}

// DivergenceError is a replay that does not reproduce the journal: the
// first height at which the definition and the journal disagree, why, and
// both sides, so the change that caused it can be found.
type DivergenceError struct {
	Height uint64
	Reason string // one of the Reason* constants
	Want   StepDigest
	Got    StepDigest
}

func (e *DivergenceError) Error() string {
	return fmt.Sprintf("world: replay diverged at height %d (%s): journal has %s v%d %s state %s intents %v, definition gives %s v%d %s state %s intents %v",
		e.Height, e.Reason,
		e.Want.Plan, e.Want.Version, e.Want.Outcome, e.Want.StateHash, e.Want.Intents,
		e.Got.Plan, e.Got.Version, e.Got.Outcome, e.Got.StateHash, e.Got.Intents)
}

// Is matches ErrDivergence.
func (e *DivergenceError) Is(target error) bool { return target == ErrDivergence }
