package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// A world's history as a person debugs it: each journal record with the
// input it consumed, the reply it gave and the intents, timers and sends
// it made (GET /v1/worlds/{id}/journal?detail=true), the state at any
// past height (GET /v1/worlds/{id}/state?height=N) and the forks of a
// world (GET /v1/worlds/{id}/forks).
//
// The detail is opt-in rather than always there for two reasons. Size: an
// input may be as large as the input limit, and a tailer that polls the
// journal's head (orrery world journal --follow, the dashboard's live
// view) wants the summary, not every payload. Cost: a record keeps the
// hashes of its intents, timers and reply, not their contents, so the
// detail re-derives each step, replaying the world from the highest
// snapshot at or below the page's first height with its kernel, which
// checks every step against its record; that costs up to a snapshot
// interval of steps per page.

// RecordCause is the causal metadata an input carried: the world and
// height of a fabric message's sender, the correlation id that travels
// from a call into what its handler sends, a fabric message's id.
type RecordCause struct {
	FromWorld     string `json:"from_world,omitempty"`
	FromHeight    uint64 `json:"from_height,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
	MessageID     string `json:"message_id,omitempty"`
}

// RecordReceipt is the effect a receipt input answers: its intent hash
// and kind, the receipt's status, the operator retry it answers (0: the
// first execution's), the receipt's body, and, while the store keeps the
// effect's record (until the dedupe sweep removes it), the number of
// executions the effect took (Attempt) and its state now.
type RecordReceipt struct {
	IntentHash  string          `json:"intent_hash"`
	Kind        string          `json:"kind"`
	Status      string          `json:"status"`
	Retry       uint64          `json:"retry"`
	Attempt     int             `json:"attempt,omitempty"`
	EffectState string          `json:"effect_state,omitempty"`
	Body        json.RawMessage `json:"body,omitempty"`
	BodyCBOR    []byte          `json:"body_cbor,omitempty"`
}

// RecordReply is the reply a call's step gave: its value (JSON and
// canonical CBOR) or, when the handler failed, the error the caller got.
type RecordReply struct {
	CallID    string          `json:"call_id"`
	Value     json.RawMessage `json:"value,omitempty"`
	ValueCBOR []byte          `json:"value_cbor,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// RecordIntent is an effect a step asked for (every kind but fabric.send,
// which is a RecordSend, and the timer kinds).
type RecordIntent struct {
	IntentHash string          `json:"intent_hash"`
	Kind       string          `json:"kind"`
	Params     json.RawMessage `json:"params,omitempty"` // absent when not CBOR
	ParamsCBOR []byte          `json:"params_cbor"`
}

// RecordSend is a message a step sent to another world (fabric.send): the
// intent hash is also the message id the destination deduplicates on.
type RecordSend struct {
	IntentHash    string          `json:"intent_hash"`
	DestUniverse  string          `json:"dest_universe,omitempty"` // empty: the sender's
	DestWorld     string          `json:"dest_world"`
	Mode          string          `json:"mode"` // typed_event or inbox
	Type          string          `json:"type"` // the schema (typed_event) or the inbox name
	Value         json.RawMessage `json:"value,omitempty"`
	CorrelationID string          `json:"correlation_id,omitempty"`
}

// RecordTimer is a durable timer a step set: when it is due and the input
// it will deliver.
type RecordTimer struct {
	IntentHash string          `json:"intent_hash"`
	DeliverAt  time.Time       `json:"deliver_at,omitzero"`
	Type       string          `json:"type,omitempty"`
	Value      json.RawMessage `json:"value,omitempty"`
}

// inputMessage is the wire form of event, call, timer and fabric inputs,
// as package world writes it: the fields a reader shows.
type inputMessage struct {
	Type          string          `cbor:"type"`
	Value         cbor.RawMessage `cbor:"value"`
	CallID        string          `cbor:"call_id"`
	IntentHash    string          `cbor:"intent_hash"`
	FromWorld     string          `cbor:"from_world"`
	FromHeight    uint64          `cbor:"from_height"`
	CorrelationID string          `cbor:"correlation_id"`
	MessageID     string          `cbor:"message_id"`
}

// boolParam reads an optional boolean parameter: true or 1, false or 0.
func boolParam(q url.Values, name string) (bool, error) {
	switch q.Get(name) {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, invalid(fmt.Sprintf("query parameter %q must be true or false", name))
}

// detailRecords fills in the detail of a page of records: what the
// records themselves hold (the input), and what re-deriving their steps
// adds. A page whose steps cannot be derived (compacted below, a
// definition that diverges) keeps its inputs and says why in each
// record's derive_error: the rest of the page is still worth showing.
func (s *Server) detailRecords(ctx context.Context, id string, recs []event.Envelope, out []Record) {
	for i := range recs {
		s.detailInput(ctx, recs[i], &out[i])
	}
	steps, err := s.cfg.Ops.Derive(ctx, id, recs)
	for i, d := range steps {
		detailStep(d.Result, &out[i])
	}
	if err != nil {
		msg := cleanMessage(describe(err))
		if errors.Is(err, store.ErrCompacted) {
			msg = "the journal below this page is compacted, so its steps cannot be derived again: " + msg
		}
		for i := len(steps); i < len(out); i++ {
			out[i].DeriveError = msg
		}
	}
}

// detailInput shows what a step record holds of its input: the value as
// JSON, the wire payload, its cause and, for a receipt, the effect it
// answers.
func (s *Server) detailInput(ctx context.Context, e event.Envelope, r *Record) {
	if r.Input == nil {
		return
	}
	in, err := world.RecordInput(e)
	if err != nil {
		return
	}
	r.Input.PayloadCBOR = in.Payload
	if in.Kind == vocab.KindReceipt {
		var rc world.Receipt
		if stateDecoder.Unmarshal(in.Payload, &rc) != nil {
			return
		}
		out := &RecordReceipt{IntentHash: rc.IntentHash, Kind: rc.Kind, Status: string(rc.Status), Retry: rc.Retry, BodyCBOR: rc.Body}
		if len(rc.Body) > 0 {
			if js, err := cborToJSON(rc.Body); err == nil {
				out.Body = js
			}
		}
		if es, err := s.cfg.Store.EffectStatus(ctx, rc.IntentHash); err == nil {
			out.Attempt, out.EffectState = es.Attempts, string(es.State)
		}
		r.Receipt = out
		return
	}
	var m inputMessage
	if stateDecoder.Unmarshal(in.Payload, &m) != nil {
		return // not the message form (the kernel journaled it as malformed): the bytes are shown
	}
	if js, err := cborToJSON(m.Value); err == nil {
		r.Input.Value = js
	}
	r.Input.Timer = m.IntentHash
	if m.FromWorld != "" || m.CorrelationID != "" || m.MessageID != "" {
		r.Input.Cause = &RecordCause{FromWorld: m.FromWorld, FromHeight: m.FromHeight, CorrelationID: m.CorrelationID, MessageID: m.MessageID}
	}
}

// detailStep shows what a re-derived step did.
func detailStep(res world.StepResult, r *Record) {
	r.Derived = true
	if res.Reply != nil {
		rp := &RecordReply{CallID: res.Reply.CallID}
		if res.Reply.Err != nil {
			rp.Error = cleanMessage(res.Reply.Err.Error())
		} else {
			rp.ValueCBOR = res.Reply.Value
			if js, err := cborToJSON(res.Reply.Value); err == nil {
				rp.Value = js
			}
		}
		r.Reply = rp
	}
	for _, it := range res.Intents {
		if it.Kind == world.KindFabricSend {
			r.Sends = append(r.Sends, sendOf(it))
			continue
		}
		ri := RecordIntent{IntentHash: it.IntentHash, Kind: it.Kind, ParamsCBOR: it.Params}
		if js, err := cborToJSON(it.Params); err == nil {
			ri.Params = js
		}
		r.Intents = append(r.Intents, ri)
	}
	for _, t := range res.TimerSets {
		rt := RecordTimer{IntentHash: t.IntentHash, DeliverAt: utc(t.DeliverAt)}
		var m inputMessage
		if stateDecoder.Unmarshal(t.Payload, &m) == nil {
			rt.Type = m.Type
			if js, err := cborToJSON(m.Value); err == nil {
				rt.Value = js
			}
		}
		r.Timers = append(r.Timers, rt)
	}
	r.Cancels = append(r.Cancels, res.TimerCancels...)
}

func sendOf(it vocab.Intent) RecordSend {
	out := RecordSend{IntentHash: it.IntentHash}
	var p world.FabricSendParams
	if stateDecoder.Unmarshal(it.Params, &p) != nil {
		return out
	}
	out.DestUniverse, out.DestWorld, out.Mode, out.CorrelationID = p.DestUniverse, p.DestWorld, p.Mode, p.CorrelationID
	raw := p.ValueCBOR
	out.Type = p.Schema
	if p.Mode == world.FabricInbox {
		raw, out.Type = p.PayloadCBOR, p.Inbox
	}
	if js, err := cborToJSON(raw); err == nil {
		out.Value = js
	}
	return out
}

// heightParam reads the optional height of a state request.
func heightParam(q url.Values) (uint64, bool, error) {
	if !q.Has("height") {
		return 0, false, nil
	}
	h, err := strconv.ParseUint(q.Get("height"), 10, 64)
	if err != nil {
		return 0, false, invalid(`query parameter "height" must be a non-negative integer`)
	}
	if err := store.CheckInt("state", "height", h); err != nil {
		return 0, false, invalid(cleanMessage(describe(err)))
	}
	return h, true, nil
}

// stateAt answers GET /v1/worlds/{id}/state?height=N: the state after the
// step at height N (0: the initial state), replayed from the highest
// snapshot at or below N. A height above the head is 400
// invalid_argument; one whose journal is compacted 410 compacted.
func (s *Server) stateAt(ctx context.Context, id string, height uint64) (State, error) {
	snap, err := s.cfg.Ops.StateAt(ctx, id, height)
	if err != nil {
		return State{}, err
	}
	return stateOf(id, snap)
}

func stateOf(id string, snap world.Snapshot) (State, error) {
	var img image
	if err := stateDecoder.Unmarshal(snap.State, &img); err != nil {
		return State{}, fmt.Errorf("api: state of %s: %w", id, err)
	}
	js, err := cborToJSON(img.State)
	if err != nil {
		return State{}, fmt.Errorf("api: state of %s: %w", id, err)
	}
	return State{Height: snap.Height, Hash: world.Hash(snap.State), State: js, StateCBOR: snap.State}, nil
}

// forks answers GET /v1/worlds/{id}/forks: the worlds forked from this
// one, sorted by id (a world's lineage names its parent; this is the
// other direction).
func (s *Server) forks(r *http.Request, rc *reqCtx) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	if err := checkID("world", rc.world); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	rec, err := s.cfg.Store.GetWorld(ctx, rc.world)
	if err != nil {
		return 0, nil, err
	}
	// A fork is always of its source's universe.
	ws, err := s.cfg.Store.ListWorlds(ctx, rec.Universe, "")
	if err != nil {
		return 0, nil, err
	}
	out := []World{}
	for _, w := range ws {
		if w.ParentWorld == rc.world {
			out = append(out, worldOf(w))
		}
	}
	return http.StatusOK, worldsResp{Worlds: out}, nil
}
