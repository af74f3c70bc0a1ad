package world

import (
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// Outcome is how a step ended. Every outcome consumes its input.
type Outcome string

const (
	// OutcomeOK: the handler returned nil; its state, intents, timers and
	// reply stand.
	OutcomeOK Outcome = "ok"
	// OutcomeError: the input was malformed, or the handler returned an
	// error or misused its Ctx, or left a state that cannot be encoded,
	// or the step exceeded a kernel limit (ErrLimit), or the store refused
	// it (ErrRefused). The state is unchanged and the intents are
	// discarded.
	OutcomeError Outcome = "error"
	// OutcomePanic: the handler panicked; as OutcomeError otherwise.
	OutcomePanic Outcome = "panic"
	// OutcomeUnknownInput: no handler for the input's kind or type
	// (the dispatcher contract §5: dropped). Recorded, and nothing else happens.
	OutcomeUnknownInput Outcome = "unknown-input"
	// OutcomeStale: a receipt or timer firing for an intent the world no
	// longer awaits (already received, cancelled): dropped, so a receipt
	// is handled at most once and a cancelled timer never fires.
	OutcomeStale Outcome = "stale"
)

// EventWorldStepped is the event type of every journal record the kernel
// writes. It is one type whatever the outcome, because the idempotency key
// covers the event type: draining an inbox item again must give the same
// key even if the handler now ends differently.
const EventWorldStepped = "WorldStepped"

// StepResult is everything a step produced. The plane journals Record,
// publishes Intents, schedules TimerSets, cancels TimerCancels, answers
// the call with Reply, and keeps State as the world's new state, all in
// the cycle's one commit.
type StepResult struct {
	Height       uint64 // the record's runSeq: the previous height + 1
	State        []byte // the world's state after the step, canonical CBOR
	StateHash    string // Hash(State)
	Intents      []vocab.Intent
	TimerSets    []vocab.TimerSet
	TimerCancels []string
	Reply        *Reply // set iff the input is a call
	Outcome      Outcome
	Err          error // why, when Outcome is not ok
	Logs         []LogEntry
	Record       event.Envelope

	digest StepDigest // Record's, for replay to compare without decoding it
}

// Snapshot is a world's state at a height: the baseline of a restore.
// State nil is the initial state (the zero S, nothing pending).
type Snapshot struct {
	Height uint64
	State  []byte
	// Version is the version of the definition that wrote State, for a
	// state that records none itself (StateVersion is 0: a binary that
	// carried one version of its world wrote it, and that may have been
	// any version). The journal knows it (the record at Height names the
	// version it left the world on), so a reader that read it says so
	// here; 0: not known. A kernel of several versions (Versions) refuses
	// an unstamped state whose version nothing tells (ErrVersionUnknown)
	// rather than guess; one of a single version ignores it.
	Version uint64
}

// image is the state the kernel hashes and snapshots: the handler's state
// S and what the kernel itself must remember across steps, so that replay
// and a restored world agree on it too. Lists are sorted by hash.
type image struct {
	V       uint64     `cbor:"v"`
	State   rawCBOR    `cbor:"state"`
	Effects []awaiting `cbor:"effects,omitempty"` // intents awaiting receipts
	Timers  []string   `cbor:"timers,omitempty"`  // timers set, not fired or cancelled
	// Plan is the definition version that migrated S into this image
	// (an upgrade), kept by every later step; 0 when the world was never
	// upgraded, so images written before versions could be carried side
	// by side keep their bytes and hashes.
	Plan uint64 `cbor:"plan,omitempty"`
}

type awaiting struct {
	Hash string `cbor:"hash"`
	Kind string `cbor:"kind"`
}

const imageVersion = 1

// meta is the decoded kernel part of an image. Its maps are never modified
// in place: a step that changes them makes new ones, so a result never
// aliases the state it came from.
type meta struct {
	effects map[string]string // hash → kind
	timers  map[string]struct{}
	plan    uint64 // image.Plan
}

// record is the payload of a journal record: what replay needs to re-run
// the step (input) and to name a divergence (the rest).
type record struct {
	V         uint64      `cbor:"v"`
	Input     recordInput `cbor:"input"`
	Outcome   Outcome     `cbor:"outcome"`
	Error     string      `cbor:"error,omitempty"`   // at most MaxErrorBytes
	Refused   bool        `cbor:"refused,omitempty"` // recorded by Refuse: replay runs no handler either
	StateHash string      `cbor:"state_hash"`
	Intents   []string    `cbor:"intents,omitempty"`
	Timers    []string    `cbor:"timers,omitempty"`
	Cancels   []string    `cbor:"cancels,omitempty"`
	ReplyHash string      `cbor:"reply_hash,omitempty"`
}

// recordInput is the input as the step saw it. Payload is its canonical
// form (the raw bytes when they are not CBOR), so the journal holds the
// input canonicalised once; type and cause are decoded copies for readers.
type recordInput struct {
	Seq        uint64          `cbor:"seq"`
	Kind       string          `cbor:"kind"`
	EnqueuedAt event.Timestamp `cbor:"enqueued_at"`
	Type       string          `cbor:"type,omitempty"`
	Cause      *Cause          `cbor:"cause,omitempty"`
	CallID     string          `cbor:"call_id,omitempty"`
	Payload    []byte          `cbor:"payload"`
	// ReceiptFor is set when an unreadable receipt ended the effect its
	// Input.ReceiptFor named: replay reads it back to do the same.
	ReceiptFor string `cbor:"receipt_for,omitempty"`
}

const recordVersion = 1

// StepID is the journal stepId of the step that drains inbox item seq. It
// depends on nothing else, so draining the same item twice yields the same
// idempotency key by construction.
func StepID(seq uint64) string { return "inbox/" + strconv.FormatUint(seq, 10) }

// TimerStepID is the journal stepId of the step that fires timer
// intentHash without an inbox item: the holder of the world's lease steps
// a firing directly at its due time (Input.Seq 0, kind timer) and the same
// commit removes the timer. It depends on the timer alone, so firing the
// same timer twice yields the same idempotency key by construction.
func TimerStepID(intentHash string) string { return "timer/" + intentHash }

// stepID is the stepId of the step that ran in, decoded as dec.
func stepID(in Input, dec decoded) string {
	if in.Seq == 0 && in.Kind == vocab.KindTimer && dec.consumes != "" {
		return TimerStepID(dec.consumes)
	}
	return StepID(in.Seq)
}

// decoded is an input taken apart: what to run, and what to consume.
type decoded struct {
	typ      string
	value    []byte
	cause    Cause
	callID   string
	consumes string // the receipt's or timer's intent hash
	outcome  Outcome
	err      error
}

// decodeInput reads in by its kind. It never runs a handler.
func (d *Def[S]) decodeInput(in Input, payload []byte, m meta) decoded {
	bad := func(reason string, err error) decoded {
		return decoded{outcome: OutcomeError, err: &InputError{Seq: in.Seq, Kind: in.Kind, Reason: reason, Err: err}}
	}
	switch in.Kind {
	case vocab.KindEvent, vocab.KindCall, vocab.KindTimer, vocab.KindFabric:
	case vocab.KindReceipt:
		var r Receipt
		if err := d.dec.Unmarshal(payload, &r); err != nil {
			return bad("not a receipt", err)
		}
		if err := r.validate(); err != nil {
			return bad("invalid receipt", err)
		}
		if _, ok := m.effects[r.IntentHash]; !ok {
			if r.Retry > 0 {
				// An operator retry's receipt: the world consumed the
				// terminal error of an earlier execution, and an operator
				// ran the effect again. Only the store delivers receipts,
				// one per retry (its dedupe key names the retry), so this
				// is news, not a duplicate: the handler sees it, Retry set.
				return decoded{typ: ReceiptType, value: payload}
			}
			return decoded{typ: ReceiptType, consumes: r.IntentHash, outcome: OutcomeStale, err: ErrStale}
		}
		return decoded{typ: ReceiptType, value: payload, consumes: r.IntentHash}
	default:
		return decoded{outcome: OutcomeUnknownInput, err: ErrUnknownInput}
	}
	var msg message
	if err := d.dec.Unmarshal(payload, &msg); err != nil {
		return bad("not a message", err)
	}
	out := decoded{typ: msg.Type, value: msg.Value,
		cause: Cause{FromWorld: msg.FromWorld, FromHeight: msg.FromHeight, CorrelationID: msg.CorrelationID}}
	if len(out.value) == 0 {
		out.value = []byte{0xf6} // null: the zero value
	}
	switch {
	case msg.Type == "":
		return bad("no type", nil)
	case (in.Kind == vocab.KindCall) != (msg.CallID != ""):
		return bad("call_id is set on exactly the calls", nil)
	case (in.Kind == vocab.KindTimer) != (msg.IntentHash != ""):
		return bad("intent_hash is set on exactly the timer firings", nil)
	case in.Kind != vocab.KindFabric && (msg.FromWorld != "" || msg.MessageID != "" || msg.Headers != nil):
		return bad("from_world, message_id and headers are set on fabric messages only", nil)
	}
	out.callID = msg.CallID
	if in.Kind == vocab.KindTimer {
		out.consumes = msg.IntentHash
		if _, ok := m.timers[msg.IntentHash]; !ok {
			out.outcome, out.err = OutcomeStale, ErrStale
		}
	}
	return out
}

// unreadableBody is the body of the receipt the kernel makes for an
// unreadable one: the field of an adapter pool's Failure, so that a
// handler reads both alike.
type unreadableBody struct {
	Error string `cbor:"error"`
}

// unreadableReceipt stands in for a receipt of intent hash (of kind) whose
// payload the kernel could not read: a timeout receipt, since what it said
// is unknown, that consumes the effect like any receipt. Its reason names
// no size or byte, so that a replay from the record (whose payload may have
// been left out for its size) makes the same receipt.
func unreadableReceipt(hash, kind string) decoded {
	body, err := event.Marshal(unreadableBody{Error: "the effect's receipt cannot be read by the world's kernel (over its input limit, or malformed); its outcome is unknown"})
	if err == nil {
		var v []byte
		if v, err = event.Marshal(Receipt{IntentHash: hash, Kind: kind, Status: vocab.ReceiptTimeout, Body: body}); err == nil {
			return decoded{typ: ReceiptType, value: v, consumes: hash}
		}
	}
	// Unreachable: both are plain structs of strings.
	return decoded{typ: ReceiptType, consumes: hash, outcome: OutcomeError, err: &InputError{Kind: vocab.KindReceipt, Reason: "unreadable receipt", Err: err}}
}

// step runs one input against the state (user, m) at height and returns
// the result. It reads nothing but its arguments and the definition.
//
// A replay (replaying) needs the record's digest and stepId only: the
// record is not encoded, and res.Record holds just its StepID.
//
// refused, when not nil, is why the store refused this input's step: no
// handler runs, and the input is consumed as an error outcome that the
// record marks refused (see World.Refuse).
func (d *Def[S]) step(id string, height uint64, user []byte, m meta, in Input, emittedAt time.Time, replaying bool, refused error) (res StepResult, newUser []byte, next meta, err error) {
	return d.prepare(id, height, user, m, in, refused).finish(emittedAt, replaying)
}

// prepared is a step cut right before its handler runs: the input
// decoded, the handler resolved, its value and the state decoded. finish
// is the rest. The cut is where World.Prepare hands the step to the host,
// which may wait there (for a timer's due time) with the decoding done.
type prepared[S any] struct {
	d       *Def[S]
	id      string
	h       uint64 // the step's height
	user    []byte // the handler's state before the step
	m       meta   // the kernel's state before the step
	in      Input
	rin     recordInput
	dec     decoded // outcome set when no handler is to run
	next    meta    // m without what the input consumes
	ctx     *Ctx
	refused bool // the store refused the step: no handler runs (World.Refuse)
	call    func(*Ctx, *S) error
	s       *S // the state the handler is given, decoded afresh
}

func (d *Def[S]) prepare(id string, height uint64, user []byte, m meta, in Input, refused error) *prepared[S] {
	p := &prepared[S]{d: d, id: id, h: height + 1, user: user, m: m, in: in}
	p.rin = recordInput{Seq: in.Seq, Kind: in.Kind, Payload: in.Payload}
	if p.rin.Payload == nil || len(p.rin.Payload) > MaxInputBytes {
		// Over the limit it is refused whatever it holds, and so it is
		// again on replay from an empty payload: same outcome, no bloat.
		p.rin.Payload = []byte{}
	}

	var dec decoded
	if _, err := event.Marshal(event.Timestamp{Time: in.EnqueuedAt}); err != nil {
		dec = decoded{outcome: OutcomeError, err: &InputError{Seq: in.Seq, Kind: in.Kind, Reason: "enqueued_at out of range", Err: err}}
	} else {
		p.rin.EnqueuedAt = event.Timestamp{Time: in.EnqueuedAt}
		if canon, err := d.dec.Canonicalize(in.Payload); err == nil {
			p.rin.Payload = canon
			dec = d.decodeInput(in, canon, m)
		} else if in.Kind == vocab.KindEvent || in.Kind == vocab.KindCall || in.Kind == vocab.KindTimer ||
			in.Kind == vocab.KindFabric || in.Kind == vocab.KindReceipt {
			dec = decoded{outcome: OutcomeError, err: &InputError{Seq: in.Seq, Kind: in.Kind, Reason: "not CBOR", Err: err}}
		} else {
			dec = decoded{outcome: OutcomeUnknownInput, err: ErrUnknownInput}
		}
	}
	if in.Kind == vocab.KindReceipt && dec.outcome == OutcomeError && in.ReceiptFor != "" {
		if kind, ok := m.effects[in.ReceiptFor]; ok {
			dec = unreadableReceipt(in.ReceiptFor, kind)
			p.rin.ReceiptFor = in.ReceiptFor
		}
	}
	p.rin.Type, p.rin.CallID = dec.typ, dec.callID
	if dec.cause != (Cause{}) {
		c := dec.cause
		p.rin.Cause = &c
	}

	// A receipt or firing is consumed whatever the handler makes of it:
	// the world must not wait for it again.
	p.next = m
	if dec.consumes != "" && dec.outcome != OutcomeStale {
		p.next = m.without(dec.consumes)
	}

	p.ctx = &Ctx{kinds: d.effects, world: id, height: p.h, seq: in.Seq, now: in.EnqueuedAt,
		cause: dec.cause, callID: dec.callID, pre: &p.m, routes: d.routes}
	switch {
	case refused != nil:
		// No handler runs: what it would do is what the store refused.
		if dec.outcome == "" {
			dec.outcome, dec.err, p.refused = OutcomeError, refused, true
		}
	case dec.outcome == "":
		dec.outcome, dec.err = p.load(dec)
	}
	p.dec = dec
	return p
}

// load resolves the handler, decodes the value for it and decodes the
// state. It sets p.call, or returns why no handler can run.
func (p *prepared[S]) load(dec decoded) (Outcome, error) {
	hdl, ok := p.d.table.Resolve(dec.typ)
	if !ok {
		return OutcomeUnknownInput, ErrUnknownInput
	}
	call, err := hdl(dec.value)
	if err != nil {
		return OutcomeError, &InputError{Seq: p.ctx.seq, Kind: "value", Reason: "does not fit " + dec.typ, Err: err}
	}
	// Decoded afresh from bytes every step: the handler sees exactly the
	// state a replay or a restored world would, never a live value with
	// unexported fields or aliases the encoding dropped.
	var s S
	if err := p.d.stateDec.Unmarshal(p.user, &s); err != nil {
		return OutcomeError, &StateError{Reason: "state does not decode", Err: err}
	}
	p.call, p.s = call, &s
	return "", nil
}

// finish runs the handler, if one is to run, and builds the result and
// the journal record. emittedAt goes into the record alone.
func (p *prepared[S]) finish(emittedAt time.Time, replaying bool) (res StepResult, newUser []byte, next meta, err error) {
	d, dec, ctx, user, next := p.d, p.dec, p.ctx, p.user, p.next
	h, in, rin := p.h, p.in, p.rin
	res.Height = h
	newUser = user
	if p.call != nil {
		dec.outcome, newUser, dec.err = d.run(ctx, dec, user, p.call, p.s)
		if dec.outcome == OutcomeOK {
			if err := ctx.checkLimits(); err != nil {
				dec.outcome, dec.err = OutcomeError, err
			}
		}
	}
	ctx.done = true

	// The state is bounded as it is hashed and snapshotted, with what the
	// step leaves awaited: only then is its size known.
	var state []byte
	if dec.outcome == OutcomeOK && len(newUser) > MaxStateBytes {
		// The image holds S whole: no need to build it to know.
		dec.outcome, dec.err = OutcomeError, &LimitError{What: "state", Got: len(newUser), Max: MaxStateBytes}
	}
	if dec.outcome == OutcomeOK {
		after := next.with(ctx.intents, ctx.timers, ctx.cancels)
		if state, err = encodeImage(newUser, after); err != nil {
			return StepResult{}, nil, meta{}, err
		}
		if len(state) > MaxStateBytes {
			dec.outcome, dec.err = OutcomeError, &LimitError{What: "state", Got: len(state), Max: MaxStateBytes}
		} else {
			next = after
			res.Intents, res.TimerSets, res.TimerCancels = ctx.intents, ctx.timers, ctx.cancels
		}
	}
	if dec.outcome != OutcomeOK {
		newUser = user
		if state, err = encodeImage(user, next); err != nil {
			return StepResult{}, nil, meta{}, err
		}
	}
	var errText string
	if dec.err != nil {
		errText, dec.err = bound(dec.err)
	}

	res.Outcome, res.Err, res.Logs = dec.outcome, dec.err, ctx.logs
	if ctx.droppedLogs > 0 {
		res.Logs = append(res.Logs, LogEntry{Msg: "world: log entries dropped",
			Attrs: []Attr{{Key: "dropped", Value: ctx.droppedLogs}, {Key: "kept", Value: MaxStepLogs}}})
	}
	if dec.callID != "" {
		switch {
		case dec.outcome != OutcomeOK:
			res.Reply = &Reply{CallID: dec.callID, Err: dec.err}
		case ctx.reply == nil:
			res.Reply = &Reply{CallID: dec.callID, Err: ErrNoReply}
		default:
			res.Reply = ctx.reply
		}
	}

	res.State, res.StateHash = state, Hash(state)

	rec := record{V: recordVersion, Input: rin, Outcome: res.Outcome, Error: errText, StateHash: res.StateHash, Refused: p.refused}
	for _, it := range res.Intents {
		rec.Intents = append(rec.Intents, it.IntentHash)
	}
	for _, t := range res.TimerSets {
		rec.Timers = append(rec.Timers, t.IntentHash)
	}
	rec.Cancels = res.TimerCancels
	if res.Reply != nil && res.Reply.Value != nil {
		rec.ReplyHash = Hash(res.Reply.Value)
	}
	res.digest = digestOf(d.name, d.version, rec)
	if replaying {
		res.Record.StepID = stepID(in, dec)
		return res, newUser, next, nil
	}
	payload, err := event.Marshal(rec)
	if err != nil {
		return StepResult{}, nil, meta{}, &StateError{Reason: "journal record cannot be encoded", Err: err}
	}
	res.Record = event.Envelope{
		StreamID:         p.id,
		RunSeq:           h,
		EventType:        EventWorldStepped,
		EmittedAt:        emittedAt,
		StepID:           stepID(in, dec),
		LogicalAttemptID: 1,
		EngineAttemptID:  1,
		PlanID:           d.name,
		PlanVersion:      d.version,
		Payload:          payload,
	}
	res.Record.Normalize()
	// The key is unique in the stream and fixed by the inbox item, so it
	// makes a stable event id too.
	res.Record.EventID = res.Record.IdempotencyKey
	return res, newUser, next, nil
}

// run calls the handler with the state load decoded.
func (d *Def[S]) run(ctx *Ctx, dec decoded, user []byte, call func(*Ctx, *S) error, s *S) (Outcome, []byte, error) {
	if perr, err := invoke(ctx, s, call); perr != nil {
		return OutcomePanic, user, &PanicError{Type: dec.typ, Value: perr.value}
	} else if ctx.misuse != nil {
		return OutcomeError, user, ctx.misuse
	} else if err != nil {
		return OutcomeError, user, &HandlerError{Type: dec.typ, Err: err}
	}
	b, err := event.Marshal(s)
	if err != nil {
		return OutcomeError, user, &StateError{Reason: "state cannot be encoded", Err: err}
	}
	return OutcomeOK, b, nil
}

type recovered struct{ value any }

func invoke[S any](ctx *Ctx, s *S, call func(*Ctx, *S) error) (p *recovered, err error) {
	defer func() {
		if v := recover(); v != nil {
			p = &recovered{value: v}
		}
	}()
	return nil, call(ctx, s)
}

func (d *Def[S]) routes(typ string) bool {
	_, ok := d.table.Resolve(typ)
	return ok
}

func (m meta) without(hash string) meta {
	_, e := m.effects[hash]
	_, t := m.timers[hash]
	if !e && !t {
		return m
	}
	n := meta{effects: m.effects, timers: m.timers, plan: m.plan}
	if e {
		n.effects = maps.Clone(m.effects)
		delete(n.effects, hash)
	}
	if t {
		n.timers = maps.Clone(m.timers)
		delete(n.timers, hash)
	}
	return n
}

func (m meta) with(intents []vocab.Intent, timers []vocab.TimerSet, cancels []string) meta {
	n := meta{effects: m.effects, timers: m.timers, plan: m.plan}
	if len(intents) > 0 {
		n.effects = maps.Clone(m.effects)
		if n.effects == nil {
			n.effects = map[string]string{}
		}
		for _, it := range intents {
			n.effects[it.IntentHash] = it.Kind
		}
	}
	if len(timers)+len(cancels) > 0 {
		n.timers = maps.Clone(m.timers)
		if n.timers == nil {
			n.timers = map[string]struct{}{}
		}
		for _, t := range timers {
			n.timers[t.IntentHash] = struct{}{}
		}
		for _, h := range cancels {
			delete(n.timers, h)
		}
	}
	return n
}

func encodeImage(user []byte, m meta) ([]byte, error) {
	img := image{V: imageVersion, State: user, Plan: m.plan}
	for _, h := range slices.Sorted(maps.Keys(m.effects)) {
		img.Effects = append(img.Effects, awaiting{Hash: h, Kind: m.effects[h]})
	}
	img.Timers = slices.Sorted(maps.Keys(m.timers))
	b, err := event.Marshal(img)
	if err != nil {
		return nil, &StateError{Reason: "state cannot be encoded", Err: err}
	}
	return b, nil
}

// decodeImage reads a state the kernel wrote (nil: the initial state, the
// zero S). It must be exactly canonical, so that its hash is the one the
// journal names.
func (d *Def[S]) decodeImage(state []byte) (user []byte, m meta, err error) {
	if state == nil {
		var zero S
		if user, err = event.Marshal(&zero); err != nil {
			return nil, meta{}, &StateError{Reason: "the zero state cannot be encoded", Err: err}
		}
		return user, meta{}, nil
	}
	var img image
	if err := d.stateDec.Unmarshal(state, &img); err != nil {
		return nil, meta{}, &StateError{Reason: "not a world state", Err: err}
	}
	if img.V != imageVersion {
		return nil, meta{}, &StateError{Reason: "state version " + strconv.FormatUint(img.V, 10)}
	}
	if img.Plan != 0 && img.Plan != d.version {
		return nil, meta{}, &StateError{Reason: "state of version " + strconv.FormatUint(img.Plan, 10) +
			", not " + strconv.FormatUint(d.version, 10), Err: ErrVersionNotCarried}
	}
	m.plan = img.Plan
	for _, a := range img.Effects {
		if m.effects == nil {
			m.effects = map[string]string{}
		}
		m.effects[a.Hash] = a.Kind
	}
	for _, h := range img.Timers {
		if m.timers == nil {
			m.timers = map[string]struct{}{}
		}
		m.timers[h] = struct{}{}
	}
	again, err := encodeImage(img.State, m)
	if err != nil || string(again) != string(state) {
		return nil, meta{}, &StateError{Reason: "state is not in canonical form", Err: err}
	}
	return img.State, m, nil
}
