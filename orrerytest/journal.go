package orrerytest

import (
	"slices"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Record is one step of a world's journal, as a test reads it: the input
// it ran, how it ended, and what it asked for. The kit derives the parts
// the journal keeps as hashes (the reply, the effects' and timers'
// params) by replaying the journal with the world's definition, as
// recovery does.
type Record struct {
	Height  uint64
	At      time.Time // the virtual time of the step's input (what Ctx.Now read)
	Kind    string    // the inbox kind: event, call, receipt, timer or fabric
	Type    string    // the input's type name; for a receipt, "receipt <kind> <status>"
	Value   []byte    // the input's value, canonical CBOR: Decode reads it
	Outcome world.Outcome
	Err     string         // why, when Outcome is not ok
	Reply   []byte         // a call's reply value, canonical CBOR
	Receipt *world.Receipt // the receipt, for a receipt input
	Effects []Effect       // the effects the step asked for
	Timers  []Timer        // the timers the step set
}

// Decode decodes the input's value into v (a receipt's body, for a
// receipt).
func (r Record) Decode(v any) error { return world.Decode(r.Value, v) }

// Effect is an effect a step asked for: its kind and params.
type Effect struct {
	Height     uint64 // the step that asked for it
	Kind       string
	IntentHash string
	Params     []byte // canonical CBOR: Decode reads them
}

// Decode decodes the effect's params into v.
func (e Effect) Decode(v any) error { return world.Decode(e.Params, v) }

// Timer is a timer a step set: when it is due and what it delivers.
type Timer struct {
	Height     uint64
	IntentHash string
	DeliverAt  time.Time
	Type       string // the type name of the value it delivers
	Value      []byte // canonical CBOR: Decode reads it
}

// Decode decodes the value the timer delivers into v.
func (t Timer) Decode(v any) error { return world.Decode(t.Value, v) }

// message is the part of an input's wire form (an event, call, timer
// firing or fabric message) the kit reads.
type message struct {
	Type  string          `cbor:"type"`
	Value cbor.RawMessage `cbor:"value"`
}

// Journal returns w's journal, every record from its first step to its
// head. It is for worlds the kit created (their journals start empty).
func (w *World) Journal() []Record {
	w.n.t.Helper()
	fail := func(err error) []Record {
		w.n.t.Fatalf("orrerytest: the journal of %s: %v", w.id, err)
		return nil
	}
	k, ok := w.n.kernels[w.universe]
	if !ok {
		return fail(errUniverse(w.universe))
	}
	tail, err := plane.ReadTail(w.n.ctx, w.n.st, w.id, 0)
	if err != nil {
		return fail(err)
	}
	inst, err := k.Load(w.id, world.Snapshot{})
	if err != nil {
		return fail(err)
	}
	out := make([]Record, 0, len(tail))
	for _, e := range tail {
		in, err := world.RecordInput(e)
		if err != nil {
			return fail(err)
		}
		refused, err := world.RecordRefused(e)
		if err != nil {
			return fail(err)
		}
		var res world.StepResult
		if refused {
			res, err = inst.Refuse(in, e.EmittedAt, nil)
		} else {
			res, err = inst.Step(in, e.EmittedAt)
		}
		if err != nil {
			return fail(err)
		}
		r := Record{Height: e.RunSeq, At: in.EnqueuedAt, Kind: in.Kind, Outcome: res.Outcome}
		if res.Err != nil {
			r.Err = res.Err.Error()
		}
		if res.Reply != nil {
			r.Reply = res.Reply.Value
		}
		if in.Kind == vocab.KindReceipt {
			var rc world.Receipt
			if decodeLarge(in.Payload, &rc) == nil {
				r.Receipt, r.Value = &rc, rc.Body
				r.Type = "receipt " + rc.Kind + " " + string(rc.Status)
			}
		} else {
			var m message
			if decodeLarge(in.Payload, &m) == nil {
				r.Type, r.Value = m.Type, []byte(m.Value)
			}
		}
		for _, it := range res.Intents {
			r.Effects = append(r.Effects, Effect{Height: r.Height, Kind: it.Kind, IntentHash: it.IntentHash, Params: it.Params})
		}
		for _, ts := range res.TimerSets {
			tm := Timer{Height: r.Height, IntentHash: ts.IntentHash, DeliverAt: ts.DeliverAt}
			var m message
			if decodeLarge(ts.Payload, &m) == nil {
				tm.Type, tm.Value = m.Type, []byte(m.Value)
			}
			r.Timers = append(r.Timers, tm)
		}
		out = append(out, r)
	}
	return out
}

// Types lists the types of w's journal's inputs in order (Record.Type):
// the shape of its history at a glance.
func (w *World) Types() []string {
	w.n.t.Helper()
	var out []string
	for _, r := range w.Journal() {
		out = append(out, r.Type)
	}
	return out
}

// Effects lists the effects w asked for over its whole journal, of the
// given kinds (none: all), in the order it asked.
func (w *World) Effects(kinds ...string) []Effect {
	w.n.t.Helper()
	var out []Effect
	for _, r := range w.Journal() {
		for _, e := range r.Effects {
			if len(kinds) == 0 || slices.Contains(kinds, e.Kind) {
				out = append(out, e)
			}
		}
	}
	return out
}

// AssertReplays fails the test unless w's state three ways is one state:
// the live one (its host's, when it runs), a restore from the store (the
// latest snapshot and the journal after it, as a restarted node does) and
// a replay of the whole journal from the first step, which also checks
// that the definition still does, step by step, what the journal says.
// It is the check that a handler is deterministic, and that a change to a
// definition did not break the worlds already running it.
func (w *World) AssertReplays() {
	w.n.t.Helper()
	live := w.snapshot()
	k, ok := w.n.kernels[w.universe]
	if !ok {
		w.n.t.Fatalf("orrerytest: %s: %v", w.id, errUniverse(w.universe))
	}
	inst, _, err := plane.Restore(w.n.ctx, w.n.st, w.n.kernels, w.id)
	if err != nil {
		w.n.t.Fatalf("orrerytest: %s: restore: %v", w.id, err)
	}
	tail, err := plane.ReadTail(w.n.ctx, w.n.st, w.id, 0)
	if err != nil {
		w.n.t.Fatalf("orrerytest: %s: reading the journal: %v", w.id, err)
	}
	full, err := k.Replay(w.id, world.Snapshot{}, tail)
	if err != nil {
		w.n.t.Fatalf("orrerytest: %s: replay from the first step: %v", w.id, err)
	}
	liveHash := world.Hash(live.State)
	if inst.StateHash() != liveHash || inst.Height() != live.Height || full.StateHash() != liveHash || full.Height() != live.Height {
		w.n.t.Fatalf("orrerytest: %s: the live state is %s at %d, a restore %s at %d, a replay from the first step %s at %d",
			w.id, liveHash, live.Height, inst.StateHash(), inst.Height(), full.StateHash(), full.Height())
	}
}

// PendingTimers lists w's timers that are set and have not fired (nor
// been cancelled), in due order: what Advance would fire next.
func (w *World) PendingTimers() []Timer {
	w.n.t.Helper()
	items, err := w.n.st.ListTimers(w.n.ctx, w.id, 1000)
	if err != nil {
		w.n.t.Fatalf("orrerytest: the timers of %s: %v", w.id, err)
	}
	// The step that set each: the journal knows.
	setAt := map[string]uint64{}
	for _, r := range w.Journal() {
		for _, set := range r.Timers {
			setAt[set.IntentHash] = set.Height
		}
	}
	out := make([]Timer, 0, len(items))
	for _, it := range items {
		tm := Timer{Height: setAt[it.IntentHash], IntentHash: it.IntentHash, DeliverAt: it.DeliverAt}
		var m message
		if decodeLarge(it.Payload, &m) == nil {
			tm.Type, tm.Value = m.Type, []byte(m.Value)
		}
		out = append(out, tm)
	}
	return out
}
