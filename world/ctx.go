package world

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// Ctx is a handler's view of the world: the input's time and causal
// metadata, deterministic randomness, and the only ways out (effects,
// timers, sends, a reply, logs), each of which is recorded in the step
// result and nothing more. It is deliberately not a context.Context: it
// carries no deadline or cancellation to tempt a handler into I/O, and
// nothing reachable from it touches the machine.
//
// A Ctx is valid only during the handler call that received it. A misuse
// (an unregistered effect kind, params that cannot be encoded, a second
// Reply) fails the step with a *UsageError, whatever the handler returns.
// Asking for more than a kernel limit allows (MaxStepIntents and the
// others) fails it with a *LimitError: a call past a count limit returns
// "" and is only counted, so that the error says by how much.
type Ctx struct {
	kinds   effectKinds
	world   string
	height  uint64
	seq     uint64
	now     time.Time
	cause   Cause
	callID  string
	rng     *rand.Rand
	done    bool
	misuse  error
	index   uint64
	intents []vocab.Intent
	timers  []vocab.TimerSet
	cancels []string
	pre     *meta // the kernel's metadata before the step; read-only here
	reply   *Reply
	logs    []LogEntry
	routes  func(string) bool // whether an input type has a handler
	// What the handler asked for, counted past the kernel's limits (only
	// what is within them is kept), so that the error names the excess.
	nIntents, nTimers, nCancels, droppedLogs int
}

type effectKinds = map[string]reflect.Type

// World is the world's id.
func (c *Ctx) World() string { return c.world }

// Height is the height this step will have in the journal.
func (c *Ctx) Height() uint64 { return c.height }

// Seq is the inbox seq of the input: 0 for a timer firing that the
// world's holder stepped at its due time without an inbox item.
func (c *Ctx) Seq() uint64 { return c.seq }

// Now is the time the input entered the inbox (by the store's clock), or,
// for a timer firing its holder stepped directly, the time the holder
// fired it at (its due time, or a later retry's); the journal keeps it, so
// replay sees the same instant. It does not advance during the handler.
func (c *Ctx) Now() time.Time { return c.now }

// Cause is the input's causal metadata.
func (c *Ctx) Cause() Cause { return c.cause }

// IsCall reports whether the input is a call, which Reply answers.
func (c *Ctx) IsCall() bool { return c.callID != "" }

// Rand returns a generator seeded from the world id and the height, so a
// replay draws the same numbers. Each call returns the same generator.
func (c *Ctx) Rand() *rand.Rand {
	if c.rng == nil {
		c.rng = rand.New(rand.NewChaCha8(randSeed(c.world, c.height)))
	}
	return c.rng
}

// randSeed is SHA-256("orrery/world/rand/v1" L(world) U(height)), in the
// notation of IntentHash.
func randSeed(world string, height uint64) [32]byte {
	b := append([]byte("orrery/world/rand/v1"), binary.BigEndian.AppendUint64(nil, uint64(len(world)))...)
	b = append(b, world...)
	b = binary.BigEndian.AppendUint64(b, height)
	return sha256.Sum256(b)
}

// Effect asks for an effect of kind with params, and returns its intent
// hash; its Receipt arrives later with the same hash. kind must be
// http.request, fabric.send or a kind the definition registered with
// EffectKind, and params of that kind's type. WithRetry gives this one
// effect its own retry policy; it does not change the hash.
func (c *Ctx) Effect(kind string, params any, opts ...EffectOption) string {
	if c.usable() != nil {
		return ""
	}
	if c.nIntents++; c.nIntents > MaxStepIntents {
		return ""
	}
	want, ok := c.kinds[kind]
	if !ok {
		c.fail(&UsageError{Op: "Effect", Reason: "effect kind " + kind + " is not registered (EffectKind)"})
		return ""
	}
	if got := reflect.TypeOf(params); got != want {
		c.fail(&UsageError{Op: "Effect", Reason: kind + " params must be " + want.String()})
		return ""
	}
	var err error
	switch p := params.(type) {
	case HTTPRequest:
		err = p.validate()
	case FabricSendParams:
		err = p.validate()
	}
	if err != nil {
		c.fail(&UsageError{Op: "Effect", Reason: "invalid " + kind + " params", Err: err})
		return ""
	}
	b, err := event.Marshal(params)
	if err != nil {
		c.fail(&UsageError{Op: "Effect", Reason: "params cannot be encoded", Err: err})
		return ""
	}
	if len(b) > MaxParamsBytes {
		c.fail(&LimitError{What: "params", Got: len(b), Max: MaxParamsBytes})
		return ""
	}
	var o effectOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var retry []byte
	if o.retry != nil {
		if retry, err = EncodeRetryPolicy(*o.retry); err != nil {
			c.fail(&UsageError{Op: "Effect", Reason: "invalid retry policy", Err: err})
			return ""
		}
		if len(retry) > MaxRetryPolicyBytes {
			c.fail(&LimitError{What: "retry policy", Got: len(retry), Max: MaxRetryPolicyBytes})
			return ""
		}
	}
	h := c.next(kind, b)
	c.intents = append(c.intents, vocab.Intent{IntentHash: h, Kind: kind, Params: b,
		Origin: vocab.Origin{World: c.world, Height: c.height}.String(), Retry: retry})
	return h
}

// Send sends msg to world dest (fabric.send, typed_event mode) and returns
// the intent hash, which is also the message id the destination
// deduplicates on. The correlation id of the current input travels with it.
func (c *Ctx) Send(dest string, msg any) string {
	if c.usable() != nil {
		return ""
	}
	name, value, err := encodeValue(msg)
	if err != nil {
		c.fail(&UsageError{Op: "Send", Reason: "message cannot be encoded", Err: err})
		return ""
	}
	return c.SendParams(FabricSendParams{DestWorld: dest, Mode: FabricTypedEvent, Schema: name, ValueCBOR: value})
}

// SendParams is Send with every field of sys/FabricSendParams@1 in reach
// (another universe, inbox mode, headers, an explicit correlation id). An
// empty CorrelationID takes the current input's.
func (c *Ctx) SendParams(p FabricSendParams) string {
	if p.CorrelationID == "" {
		p.CorrelationID = c.cause.CorrelationID
	}
	return c.Effect(KindFabricSend, p)
}

// SetTimer sets a durable timer that delivers msg, as an input of msg's
// type, at or after at; it returns the timer's intent hash. The type must
// have a handler.
func (c *Ctx) SetTimer(at time.Time, msg any) string {
	if c.usable() != nil {
		return ""
	}
	if c.nTimers++; c.nTimers > MaxStepTimers {
		return ""
	}
	name, value, err := encodeValue(msg)
	if err != nil {
		c.fail(&UsageError{Op: "SetTimer", Reason: "message cannot be encoded", Err: err})
		return ""
	}
	if !c.routes(name) {
		c.fail(&UsageError{Op: "SetTimer", Reason: "no handler for " + name + ": the timer could never be handled"})
		return ""
	}
	// Within the range every store keeps, not just what a Timestamp
	// encodes: a due time the store refuses would refuse the commit.
	ts := event.Timestamp{Time: at}
	atb, err := event.Marshal(ts)
	if err != nil || at.IsZero() || at.Before(event.MinTime) || at.After(event.MaxTime) {
		c.fail(&UsageError{Op: "SetTimer", Reason: "time out of range", Err: err})
		return ""
	}
	// The params hashed are the due time and the message, so the hash
	// covers everything the timer will do.
	params, err := event.Marshal(timerParams{At: atb, Type: name, Value: value})
	if err != nil {
		c.fail(&UsageError{Op: "SetTimer", Reason: "message cannot be encoded", Err: err})
		return ""
	}
	h := c.next(KindTimerSet, params)
	payload, err := event.Marshal(message{Type: name, Value: value, IntentHash: h})
	if err != nil {
		c.fail(&UsageError{Op: "SetTimer", Reason: "message cannot be encoded", Err: err})
		return ""
	}
	if len(payload) > MaxTimerBytes {
		c.fail(&LimitError{What: "timer payload", Got: len(payload), Max: MaxTimerBytes})
		return ""
	}
	c.timers = append(c.timers, vocab.TimerSet{IntentHash: h, DeliverAt: ts.Time, Payload: payload})
	return h
}

type timerParams struct {
	At    rawCBOR `cbor:"at"`
	Type  string  `cbor:"type"`
	Value rawCBOR `cbor:"value"`
}

// CancelTimer cancels the timer hash if it has not fired. A firing already
// in the inbox is then dropped (outcome stale); an unknown or fired timer
// is left alone.
func (c *Ctx) CancelTimer(hash string) {
	if c.usable() != nil {
		return
	}
	if i := slices.IndexFunc(c.timers, func(t vocab.TimerSet) bool { return t.IntentHash == hash }); i >= 0 {
		c.timers = slices.Delete(c.timers, i, i+1) // set and cancelled in one step: it never leaves
		return
	}
	if _, armed := c.pre.timers[hash]; armed && !slices.Contains(c.cancels, hash) {
		if c.nCancels++; c.nCancels <= MaxStepCancels {
			c.cancels = append(c.cancels, hash)
		}
	}
}

// Reply answers the call being handled with v. On an input that is not a
// call it does nothing (see IsCall); a second Reply is a misuse.
func (c *Ctx) Reply(v any) {
	if c.usable() != nil || c.callID == "" {
		return
	}
	if c.reply != nil {
		c.fail(&UsageError{Op: "Reply", Reason: "the call was already answered"})
		return
	}
	b, err := event.Marshal(v)
	if err != nil {
		c.fail(&UsageError{Op: "Reply", Reason: "reply cannot be encoded", Err: err})
		return
	}
	if len(b) > MaxReplyBytes {
		c.fail(&LimitError{What: "reply", Got: len(b), Max: MaxReplyBytes})
		return
	}
	c.reply = &Reply{CallID: c.callID, Value: b}
}

// Log records a message with key-value pairs in the step result; the plane
// decides where it goes. Nothing is printed from here. A step keeps at
// most MaxStepLogs entries (then one that counts the dropped ones), each
// message cut to MaxErrorBytes.
func (c *Ctx) Log(msg string, kv ...any) {
	if c.done {
		return
	}
	if len(c.logs) >= MaxStepLogs {
		c.droppedLogs++
		return
	}
	e := LogEntry{Msg: boundText(msg, MaxErrorBytes)}
	for i := 0; i < len(kv); i += 2 {
		if i+1 == len(kv) {
			e.Attrs = append(e.Attrs, Attr{Key: "!BADKEY", Value: kv[i]})
			break
		}
		k, ok := kv[i].(string)
		if !ok {
			k = "!BADKEY"
		}
		e.Attrs = append(e.Attrs, Attr{Key: k, Value: kv[i+1]})
	}
	c.logs = append(c.logs, e)
}

// LogEntry is one Ctx.Log call.
type LogEntry struct {
	Msg   string
	Attrs []Attr
}

// Attr is a key-value pair of a LogEntry.
type Attr struct {
	Key   string
	Value any
}

// Reply is the answer to a call. Err is set instead of Value when the call's
// step did not succeed, or when the handler returned without replying
// (ErrNoReply): a caller always gets an answer.
type Reply struct {
	CallID string
	Value  []byte // canonical CBOR
	Err    error
}

// ErrNoReply: a call's handler succeeded without calling Reply.
const ErrNoReply = sentinel("world: the handler did not reply to the call")

// next assigns the next intent index and returns the intent's hash.
func (c *Ctx) next(kind string, params []byte) string {
	h := IntentHash(c.world, c.height, c.index, kind, params)
	c.index++
	return h
}

func (c *Ctx) usable() error {
	if c.done {
		return errors.New("Ctx used after its handler returned")
	}
	return c.misuse
}

func (c *Ctx) fail(err error) {
	if c.misuse == nil {
		c.misuse = err
	}
}
