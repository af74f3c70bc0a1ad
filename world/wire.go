package world

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
)

// Input is one inbox item as the kernel sees it. The plane builds it from
// the store's inbox item field by field; the kernel needs nothing else.
type Input struct {
	Seq uint64 // the inbox seq: the step's identity (see Record); 0 for a direct timer firing (TimerStepID)
	// Kind is the item's inbox kind (vocab.KindEvent, KindCall,
	// KindReceipt, KindTimer, KindFabric), and Payload its wire form:
	// EncodeEvent, EncodeCall (the handler's Reply answers it),
	// EncodeReceipt (by an effect adapter), a vocab.TimerSet's Payload (as the
	// timer worker fires it), EncodeFabric (by the fabric adapter).
	Kind       string
	Payload    []byte
	EnqueuedAt time.Time // the store's time of enqueue: what Ctx.Now returns
	// ReceiptFor is, for a receipt, the intent hash the store delivered it
	// for (named by its inbox dedupe key; the plane sets it). The kernel
	// reads it only when the payload cannot be read (over MaxInputBytes,
	// not CBOR, not a valid receipt): an effect that is awaited must not
	// stay awaited for ever because its receipt is unreadable, so the
	// handler is given a timeout receipt for that intent instead (its body
	// {"error": why}, the shape of an adapter pool's failures), timeout
	// because the world cannot know what the unreadable receipt said. The
	// journal records that it did, so a replay does the same.
	ReceiptFor string
}

// rawCBOR embeds an already canonical CBOR item in a larger one, and keeps
// an embedded item's bytes when decoding.
type rawCBOR []byte

func (r rawCBOR) MarshalCBOR() ([]byte, error) {
	if len(r) == 0 {
		return []byte{0xf6}, nil // null
	}
	return r, nil
}

func (r *rawCBOR) UnmarshalCBOR(b []byte) error {
	*r = append(rawCBOR(nil), b...)
	return nil
}

// message is the wire form of event, call, timer and fabric inputs: a
// typed value plus whatever of the causal metadata its kind carries.
type message struct {
	Type          string            `cbor:"type"`
	Value         rawCBOR           `cbor:"value"`
	CallID        string            `cbor:"call_id,omitempty"`
	IntentHash    string            `cbor:"intent_hash,omitempty"` // the timer's
	FromWorld     string            `cbor:"from_world,omitempty"`
	FromHeight    uint64            `cbor:"from_height,omitempty"`
	CorrelationID string            `cbor:"correlation_id,omitempty"`
	MessageID     string            `cbor:"message_id,omitempty"`
	Headers       map[string]string `cbor:"headers,omitempty"`
}

func encodeValue(v any) (name string, value []byte, err error) {
	if name, err = TypeName(v); err != nil {
		return "", nil, err
	}
	if value, err = event.Marshal(v); err != nil {
		return "", nil, err
	}
	return name, value, nil
}

// EncodeEvent returns the payload of an event input carrying v, routed to
// the handler of v's type.
func EncodeEvent(v any) ([]byte, error) {
	name, value, err := encodeValue(v)
	if err != nil {
		return nil, err
	}
	return event.Marshal(message{Type: name, Value: value})
}

// EncodeCall returns the payload of a call input: an event whose handler's
// Reply goes back to the caller named callID (the plane's handle on the
// waiting client; it is also the call's correlation id).
func EncodeCall(callID string, v any) ([]byte, error) {
	if callID == "" {
		return nil, &InputError{Kind: vocab.KindCall, Reason: "a call needs a call id"}
	}
	name, value, err := encodeValue(v)
	if err != nil {
		return nil, err
	}
	return event.Marshal(message{Type: name, Value: value, CallID: callID, CorrelationID: callID})
}

// EncodeEventNamed is EncodeEvent for a value whose input type is named
// at run time rather than by a Go type: input that arrives from outside Go
// (JSON over the ops API, a command line) and names the handler it is for.
// typeName must be a name a handler can have: non-empty, valid UTF-8, and
// outside the reserved "sys/" names. value is encoded as canonical CBOR
// (a cbor.RawMessage must already be canonical); the handler decodes it
// into its own type.
func EncodeEventNamed(typeName string, value any) ([]byte, error) {
	raw, err := encodeNamed(vocab.KindEvent, typeName, value)
	if err != nil {
		return nil, err
	}
	return event.Marshal(message{Type: typeName, Value: raw})
}

// EncodeCallNamed is EncodeCall for a value whose input type is named at
// run time (see EncodeEventNamed).
func EncodeCallNamed(callID, typeName string, value any) ([]byte, error) {
	if callID == "" {
		return nil, &InputError{Kind: vocab.KindCall, Reason: "a call needs a call id"}
	}
	raw, err := encodeNamed(vocab.KindCall, typeName, value)
	if err != nil {
		return nil, err
	}
	return event.Marshal(message{Type: typeName, Value: raw, CallID: callID, CorrelationID: callID})
}

// encodeNamed checks a run-time type name as On checks a Go type's, so a
// payload built here can reach a handler, and encodes the value.
func encodeNamed(kind, typeName string, value any) (rawCBOR, error) {
	switch {
	case typeName == "" || !utf8.ValidString(typeName):
		return nil, &InputError{Kind: kind, Reason: "the input type name is empty or not valid UTF-8"}
	case strings.HasPrefix(typeName, sysPrefix):
		return nil, &InputError{Kind: kind, Reason: "input type " + strconv.Quote(typeName) + ` uses the reserved "sys/" prefix`}
	}
	raw, err := event.Marshal(value)
	if err != nil {
		return nil, &InputError{Kind: kind, Reason: "the value cannot be encoded as canonical CBOR", Err: err}
	}
	return raw, nil
}

// EncodeTimerFired returns the payload of the firing of timer intentHash
// carrying v. Ctx.SetTimer builds it (vocab.TimerSet.Payload); the store hands it
// back unchanged when the timer fires.
func EncodeTimerFired(intentHash string, v any) ([]byte, error) {
	name, value, err := encodeValue(v)
	if err != nil {
		return nil, err
	}
	return event.Marshal(message{Type: name, Value: value, IntentHash: intentHash})
}

// FabricDelivery is what the fabric adapter does for one fabric.send
// intent: enqueue Payload into DestWorld's inbox (of DestUniverse, empty
// for the sender's), deduplicated by MessageID.
type FabricDelivery struct {
	DestUniverse string
	DestWorld    string
	MessageID    string
	Payload      []byte
}

// FabricMessage turns a fabric.send intent into its delivery, with
// message_id = intent_hash (the runtime plane contract §6; a policy that overrides it calls
// EncodeFabric itself). An intent whose Origin does not parse
// (vocab.ParseOrigin) is an error matching vocab.ErrOrigin.
func FabricMessage(it vocab.Intent) (FabricDelivery, error) {
	if it.Kind != KindFabricSend {
		return FabricDelivery{}, errors.New("world: not a fabric.send intent")
	}
	origin, err := vocab.ParseOrigin(it.Origin)
	if err != nil {
		return FabricDelivery{}, err
	}
	var p FabricSendParams
	if err := event.Unmarshal(it.Params, &p); err != nil {
		return FabricDelivery{}, err
	}
	payload, err := EncodeFabric(p, origin, it.IntentHash)
	if err != nil {
		return FabricDelivery{}, err
	}
	return FabricDelivery{DestUniverse: p.DestUniverse, DestWorld: p.DestWorld, MessageID: it.IntentHash, Payload: payload}, nil
}

// EncodeFabric returns the payload the fabric adapter enqueues into the
// destination world's inbox for a fabric.send with params p, sent from
// origin as messageID (the intent hash unless a policy says otherwise). A
// typed_event is routed by p.Schema; an inbox-mode message by p.Inbox, with
// p.PayloadCBOR as its value.
func EncodeFabric(p FabricSendParams, from vocab.Origin, messageID string) ([]byte, error) {
	if err := p.validate(); err != nil {
		return nil, &InputError{Kind: vocab.KindFabric, Reason: "invalid fabric.send params", Err: err}
	}
	m := message{
		FromWorld: from.World, FromHeight: from.Height,
		CorrelationID: p.CorrelationID, MessageID: messageID, Headers: p.Headers,
	}
	var raw []byte
	switch p.Mode {
	case FabricTypedEvent:
		m.Type, raw = p.Schema, p.ValueCBOR
	default:
		m.Type, raw = p.Inbox, p.PayloadCBOR
	}
	if len(raw) > 0 {
		canon, err := event.Canonicalize(raw)
		if err != nil {
			return nil, err
		}
		m.Value = canon
	}
	return event.Marshal(m)
}

// Cause is the causal metadata of an input, kept end to end: a fabric
// message names the world and height that sent it, and a correlation id
// travels from a call or a message into everything its handler sends.
type Cause struct {
	FromWorld     string `cbor:"from_world,omitempty"`
	FromHeight    uint64 `cbor:"from_height,omitempty"`
	CorrelationID string `cbor:"correlation_id,omitempty"`
}

// ReceiptType is the input type of receipts: On(def, func(c *Ctx, s *S, r
// world.Receipt) error) handles the receipts of every effect kind.
const ReceiptType = "sys/Receipt@1"

// Receipt is the result of an effect, delivered once per intent. Body is
// the kind's result as canonical CBOR (HTTPResponse for http.request,
// FabricSendReceipt for fabric.send); Decode reads it. Retry is the
// operator retry the receipt answers (0 for the first execution). It is
// the receipt as the world reads it: EncodeReceipt makes it the Payload of
// the vocab.Receipt an adapter pool completes, whose Status it repeats
// in-band.
//
// A receipt of a first execution (Retry 0) reaches the handler only while
// the world awaits its intent: the first one consumes it, and a later one
// (a duplicate) is dropped as stale. An operator retry's receipt (Retry >
// 0: an operator ran an effect that ended in a terminal error again, see
// store.RetryEffect) always reaches the handler: the store delivers one
// per retry, and it is the only way the world learns the retry's result.
type Receipt struct {
	IntentHash string              `cbor:"intent_hash"`
	Kind       string              `cbor:"kind"`
	Status     vocab.ReceiptStatus `cbor:"status"`
	Body       []byte              `cbor:"body,omitempty"`
	Retry      uint64              `cbor:"retry,omitempty"`
}

// WorldType routes receipts to the Receipt handler.
func (Receipt) WorldType() string { return ReceiptType }

// Decode decodes the receipt's body into v.
func (r Receipt) Decode(v any) error { return event.Unmarshal(r.Body, v) }

func (r Receipt) validate() error {
	switch {
	case !isHash(r.IntentHash):
		return errors.New("intent_hash is not 64 lowercase hex digits")
	case r.Kind == "":
		return errors.New("kind is empty")
	case !r.Status.Valid():
		return errors.New("status is not ok, error or timeout")
	}
	if len(r.Body) > 0 {
		if err := event.IsCanonical(r.Body); err != nil {
			return err
		}
	}
	return nil
}

// EncodeReceipt returns the payload of a receipt input, what an adapter
// completes an effect with. The body must be canonical CBOR (or empty).
func EncodeReceipt(r Receipt) ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, &InputError{Kind: vocab.KindReceipt, Reason: "invalid receipt", Err: err}
	}
	return event.Marshal(r)
}

// HTTPRequest is the params of an http.request effect.
type HTTPRequest struct {
	Method           string              `cbor:"method"`
	URL              string              `cbor:"url"`
	Headers          map[string][]string `cbor:"headers,omitempty"`
	Body             []byte              `cbor:"body,omitempty"`
	TimeoutMs        uint64              `cbor:"timeout_ms,omitempty"`
	MaxResponseBytes uint64              `cbor:"max_response_bytes,omitempty"`
}

func (p HTTPRequest) validate() error {
	if p.Method == "" || p.URL == "" {
		return errors.New("an http.request needs a method and a URL")
	}
	return nil
}

// HTTPResponse is the body of an ok http.request receipt. Truncated says
// that Body holds only the first max_response_bytes of a longer response
// body: the request was made and answered all the same.
type HTTPResponse struct {
	Status    int                 `cbor:"status"`
	Headers   map[string][]string `cbor:"headers,omitempty"`
	Body      []byte              `cbor:"body,omitempty"`
	Truncated bool                `cbor:"truncated,omitempty"`
}

// Fabric send modes (sys/FabricSendParams@1 "mode").
const (
	FabricTypedEvent = "typed_event"
	FabricInbox      = "inbox"
)

// FabricSendParams is sys/FabricSendParams@1, the params of fabric.send,
// with exactly the seed's fields.
type FabricSendParams struct {
	DestUniverse  string            `cbor:"dest_universe,omitempty"`
	DestWorld     string            `cbor:"dest_world"`
	Mode          string            `cbor:"mode"`
	Schema        string            `cbor:"schema,omitempty"`
	ValueCBOR     []byte            `cbor:"value_cbor,omitempty"`
	Inbox         string            `cbor:"inbox,omitempty"`
	PayloadCBOR   []byte            `cbor:"payload_cbor,omitempty"`
	Headers       map[string]string `cbor:"headers,omitempty"`
	CorrelationID string            `cbor:"correlation_id,omitempty"`
}

// WorldType names the params' schema.
func (FabricSendParams) WorldType() string { return "sys/FabricSendParams@1" }

func (p FabricSendParams) validate() error {
	switch {
	case p.DestWorld == "":
		return errors.New("fabric.send needs dest_world")
	case p.Mode == FabricTypedEvent && p.Schema == "":
		return errors.New("typed_event needs a schema")
	case p.Mode == FabricInbox && p.Inbox == "":
		return errors.New("inbox mode needs an inbox")
	case p.Mode != FabricTypedEvent && p.Mode != FabricInbox:
		return errors.New(`mode is not "typed_event" or "inbox"`)
	}
	return nil
}

// Fabric receipt statuses (sys/FabricSendReceipt@1 "status").
const (
	FabricStatusOK              = "ok"
	FabricStatusAlreadyEnqueued = "already_enqueued"
	FabricStatusError           = "error"
)

// FabricSendReceipt is sys/FabricSendReceipt@1, the body of a fabric.send
// receipt, with exactly the seed's fields.
type FabricSendReceipt struct {
	Status      string `cbor:"status"`
	MessageID   string `cbor:"message_id"`
	DestWorld   string `cbor:"dest_world"`
	EnqueuedSeq []byte `cbor:"enqueued_seq,omitempty"`
}

// WorldType names the receipt body's schema.
func (FabricSendReceipt) WorldType() string { return "sys/FabricSendReceipt@1" }

// SeqBytes is the enqueued_seq form of an inbox seq: 8 bytes, big-endian.
func SeqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Decode decodes canonical CBOR the kernel produced (a reply value, a
// receipt body, an intent's params) into v.
func Decode(b []byte, v any) error { return event.Unmarshal(b, v) }
