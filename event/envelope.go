package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Envelope is one durable record of the execution semantics contract. The Go field names follow the
// contract's wire names (eventId, streamId, ...). There is deliberately no
// occurredAt: source event-time, when a domain has one, lives in the payload
// as sourceOccurredAt (see SourceOccurredAt).
type Envelope struct {
	// EventID identifies the record. Producers choose it; the append
	// authority returns the existing one on a duplicate key.
	EventID string
	// StreamID is the runId (or worldId) the record belongs to. It is the
	// runId of the idempotency key.
	StreamID string
	// RunSeq orders the stream. The append authority assigns it (monotonic
	// per stream, gaps allowed); it is 0 before append. Readers order by it,
	// never by a timestamp.
	RunSeq uint64
	// IdempotencyKey is IdempotencyKey(StreamID, StepID, LogicalAttemptID,
	// EventType, PlanID, PlanVersion). Dedup is on (StreamID, IdempotencyKey).
	IdempotencyKey string
	// EventType names the event; see the constants and IsRunLevel. Unknown
	// types are allowed (forward compatibility).
	EventType string
	// EmittedAt is the producer's clock at emission. This package never
	// reads a clock: callers set it.
	EmittedAt time.Time
	// PersistedAt is the append authority's clock at write time; zero before
	// append. Audit and time-window queries use it.
	PersistedAt time.Time
	// StepID names the step of a step-level event; empty for run-level ones.
	StepID string
	// LogicalAttemptID counts the producer's attempts, starting at 1.
	LogicalAttemptID uint64
	// EngineAttemptID is the execution provider's attempt number, 1 when
	// the provider exposes none (Normalize sets it). Never incremented
	// artificially.
	EngineAttemptID uint64
	// PlanID and PlanVersion identify the plan the run executes.
	PlanID      string
	PlanVersion uint64
	// Payload is one canonical CBOR data item.
	Payload []byte
}

// Hash is a SHA-256 digest.
type Hash [sha256.Size]byte

// String returns the digest as 64 lowercase hexadecimal digits.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// EnvelopeVersion is the envelope schema version written under key 0 (see
// "Envelope encoding" in the package documentation).
const EnvelopeVersion = 1

// wireEnvelope is the schema of the package doc's "Envelope encoding".
type wireEnvelope struct {
	Version          uint64 `cbor:"0,keyasint"`
	EventID          string `cbor:"1,keyasint"`
	StreamID         string `cbor:"2,keyasint"`
	RunSeq           uint64 `cbor:"3,keyasint"`
	IdempotencyKey   string `cbor:"4,keyasint"`
	EventType        string `cbor:"5,keyasint"`
	EmittedAt        *int64 `cbor:"6,keyasint,omitempty"`
	PersistedAt      *int64 `cbor:"7,keyasint,omitempty"`
	StepID           string `cbor:"8,keyasint"`
	LogicalAttemptID uint64 `cbor:"9,keyasint"`
	EngineAttemptID  uint64 `cbor:"10,keyasint"`
	PlanID           string `cbor:"11,keyasint"`
	PlanVersion      uint64 `cbor:"12,keyasint"`
	Payload          []byte `cbor:"13,keyasint"`
}

// Normalize applies the producer defaults: EngineAttemptID becomes 1 when it
// is 0 (the execution semantics contract §3.3: the provider exposes no engine attempts), an empty
// IdempotencyKey is computed from the key fields, and both times are
// converted to UTC without a monotonic reading, which is the form
// DecodeEnvelope returns. It never reads a clock and touches nothing else.
func (e *Envelope) Normalize() {
	if e.EngineAttemptID == 0 {
		e.EngineAttemptID = 1
	}
	if e.IdempotencyKey == "" {
		e.IdempotencyKey = e.ComputeIdempotencyKey()
	}
	e.EmittedAt = normTime(e.EmittedAt)
	e.PersistedAt = normTime(e.PersistedAt)
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

// ComputeIdempotencyKey returns the key the envelope's fields determine,
// with StreamID as the runId.
func (e *Envelope) ComputeIdempotencyKey() string {
	return IdempotencyKey(e.StreamID, e.StepID, e.LogicalAttemptID, e.EventType, e.PlanID, e.PlanVersion)
}

// ErrKeyMismatch is the cause of the ValidationError VerifyKey returns.
var ErrKeyMismatch = errors.New("event: idempotency key does not match its fields")

// VerifyKey returns a *ValidationError (matching ErrInvalidEnvelope and
// ErrKeyMismatch) when IdempotencyKey is not the key recomputed from the
// envelope's fields. Validate does not do this itself: the check is what an
// append authority or auditor asks for, not every reader.
func (e *Envelope) VerifyKey() error {
	if want := e.ComputeIdempotencyKey(); e.IdempotencyKey != want {
		return &ValidationError{Field: "idempotencyKey",
			Reason: "got " + e.IdempotencyKey + ", fields give " + want, Err: ErrKeyMismatch}
	}
	return nil
}

// Validate checks the envelope against the execution semantics contract as a producer must before
// append, and returns the first violation, in schema order, as a
// *ValidationError matching ErrInvalidEnvelope:
//
//   - eventId, streamId, eventType non-empty; every text field valid UTF-8;
//   - idempotencyKey non-empty and 64 lowercase hex digits (VerifyKey
//     recomputes it);
//   - emittedAt set (producers MUST set it) and, like persistedAt when set,
//     within the int64 Unix-nanosecond range;
//   - stepId empty for run-level types and non-empty for step-level types;
//   - logicalAttemptId ≥ 1 and engineAttemptId ≥ 1;
//   - payload exactly one canonical CBOR data item within the default
//     Decoder's limits (an empty payload is not CBOR; use EmptyPayload).
//
// runSeq and persistedAt belong to the append authority and may be zero;
// ValidatePersisted checks a stored record.
func (e *Envelope) Validate() error { return e.validate(defaultDecoder) }

// ValidatePersisted is Validate plus what the append authority adds: runSeq
// ≥ 1 and persistedAt set.
func (e *Envelope) ValidatePersisted() error {
	if err := e.Validate(); err != nil {
		return err
	}
	if e.RunSeq < 1 {
		return invalid("runSeq", "is 0; the append authority assigns runSeq ≥ 1")
	}
	if e.PersistedAt.IsZero() {
		return invalid("persistedAt", "is not set; the append authority sets it at write time")
	}
	return nil
}

// EmptyPayload returns the canonical payload of an event with nothing to
// say: an empty CBOR map (a new slice each call).
func EmptyPayload() []byte { return []byte{0xa0} }

func (e *Envelope) validate(d *Decoder) error {
	for _, f := range [...]struct {
		name, value string
		required    bool
	}{
		{"eventId", e.EventID, true},
		{"streamId", e.StreamID, true},
		{"idempotencyKey", e.IdempotencyKey, true},
		{"eventType", e.EventType, true},
		{"stepId", e.StepID, false},
		{"planId", e.PlanID, false},
	} {
		if f.required && f.value == "" {
			return invalid(f.name, "is empty")
		}
		if !utf8.ValidString(f.value) {
			return invalid(f.name, "is not valid UTF-8")
		}
	}
	if !isKeyFormat(e.IdempotencyKey) {
		return invalid("idempotencyKey", "is not 64 lowercase hex digits")
	}
	if e.EmittedAt.IsZero() {
		return invalid("emittedAt", "is not set; producers must set it")
	}
	if _, err := unixNano(e.EmittedAt); err != nil {
		return &ValidationError{Field: "emittedAt", Reason: "out of range", Err: err}
	}
	if !e.PersistedAt.IsZero() {
		if _, err := unixNano(e.PersistedAt); err != nil {
			return &ValidationError{Field: "persistedAt", Reason: "out of range", Err: err}
		}
	}
	switch {
	case IsRunLevel(e.EventType) && e.StepID != "":
		return invalid("stepId", "is %q on run-level event %s; run-level events carry no stepId", e.StepID, e.EventType)
	case IsStepLevel(e.EventType) && e.StepID == "":
		return invalid("stepId", "is empty on step-level event %s", e.EventType)
	}
	if e.LogicalAttemptID < 1 {
		return invalid("logicalAttemptId", "is 0; attempts start at 1")
	}
	if e.EngineAttemptID < 1 {
		return invalid("engineAttemptId", "is 0; it must be present, 1 when the provider has no attempts")
	}
	if err := d.IsCanonical(e.Payload); err != nil {
		return &ValidationError{Field: "payload", Reason: "is not one canonical CBOR data item", Err: err}
	}
	return nil
}

// MarshalCBOR returns the canonical encoding of the envelope (see "Envelope
// encoding" in the package documentation).
// It does not validate: it fails only when a field has no encoding (a text
// field that is not valid UTF-8, a time outside the int64 nanosecond range),
// with an *EncodeError. A nil Payload encodes as an empty byte string.
func (e *Envelope) MarshalCBOR() ([]byte, error) {
	w := wireEnvelope{
		Version:          EnvelopeVersion,
		EventID:          e.EventID,
		StreamID:         e.StreamID,
		RunSeq:           e.RunSeq,
		IdempotencyKey:   e.IdempotencyKey,
		EventType:        e.EventType,
		StepID:           e.StepID,
		LogicalAttemptID: e.LogicalAttemptID,
		EngineAttemptID:  e.EngineAttemptID,
		PlanID:           e.PlanID,
		PlanVersion:      e.PlanVersion,
		Payload:          e.Payload,
	}
	if w.Payload == nil {
		w.Payload = []byte{}
	}
	for _, s := range [...]string{e.EventID, e.StreamID, e.IdempotencyKey, e.EventType, e.StepID, e.PlanID} {
		if !utf8.ValidString(s) {
			return nil, &EncodeError{Err: fmt.Errorf("text field %q is not valid UTF-8", s)}
		}
	}
	var emitted, persisted int64
	var err error
	if !e.EmittedAt.IsZero() {
		if emitted, err = unixNano(e.EmittedAt); err != nil {
			return nil, &EncodeError{Err: fmt.Errorf("emittedAt: %w", err)}
		}
		w.EmittedAt = &emitted
	}
	if !e.PersistedAt.IsZero() {
		if persisted, err = unixNano(e.PersistedAt); err != nil {
			return nil, &EncodeError{Err: fmt.Errorf("persistedAt: %w", err)}
		}
		w.PersistedAt = &persisted
	}
	b, err := encMode.Marshal(&w)
	if err != nil {
		return nil, &EncodeError{Err: err}
	}
	return b, nil
}

// UnmarshalCBOR implements cbor.Unmarshaler with DecodeEnvelope and the
// default Decoder; on error e is untouched.
func (e *Envelope) UnmarshalCBOR(data []byte) error {
	dec, err := defaultDecoder.DecodeEnvelope(data)
	if err != nil {
		return err
	}
	*e = *dec
	return nil
}

// EnvelopeHash returns the SHA-256 of the envelope's canonical encoding, the
// integrity hash of a record. It covers every field, runSeq and persistedAt
// included, so a record's hash is fixed once it is persisted.
func EnvelopeHash(e *Envelope) (Hash, error) {
	b, err := e.MarshalCBOR()
	if err != nil {
		return Hash{}, err
	}
	return sha256.Sum256(b), nil
}

// DecodeEnvelope decodes an envelope with the default Decoder.
func DecodeEnvelope(data []byte) (*Envelope, error) { return defaultDecoder.DecodeEnvelope(data) }

// DecodeEnvelope decodes untrusted bytes that must be exactly the canonical
// encoding of a valid envelope. It returns a *DecodeError when the bytes are
// over the limits, malformed, of another schema version (ErrUnsupported),
// carry an unknown key or a wrongly typed value (ErrType), or are not the
// canonical encoding (ErrNotCanonical: for example a missing key, a null
// time, keys out of order); and a *ValidationError when the envelope decodes
// but fails Validate (the payload is checked with this decoder's limits).
// Times come back in UTC. The result shares no memory with data.
func (d *Decoder) DecodeEnvelope(data []byte) (*Envelope, error) {
	d = d.get()
	if err := d.checkSize(data); err != nil {
		return nil, err
	}
	var w wireEnvelope
	if err := d.env.Unmarshal(data, &w); err != nil {
		return nil, d.decodeErr(d.env, data, err)
	}
	if w.Version != EnvelopeVersion {
		return nil, &DecodeError{Kind: KindUnsupported, Err: fmt.Errorf("envelope schema version %d, want %d", w.Version, EnvelopeVersion)}
	}
	e := &Envelope{
		EventID:          w.EventID,
		StreamID:         w.StreamID,
		RunSeq:           w.RunSeq,
		IdempotencyKey:   w.IdempotencyKey,
		EventType:        w.EventType,
		StepID:           w.StepID,
		LogicalAttemptID: w.LogicalAttemptID,
		EngineAttemptID:  w.EngineAttemptID,
		PlanID:           w.PlanID,
		PlanVersion:      w.PlanVersion,
		Payload:          w.Payload,
	}
	if w.EmittedAt != nil {
		e.EmittedAt = time.Unix(0, *w.EmittedAt).UTC()
	}
	if w.PersistedAt != nil {
		e.PersistedAt = time.Unix(0, *w.PersistedAt).UTC()
	}
	canon, err := e.MarshalCBOR()
	if err != nil {
		return nil, &DecodeError{Kind: KindType, Err: err}
	}
	if !bytes.Equal(canon, data) {
		return nil, &DecodeError{Kind: KindNotCanonical, Offset: firstDiff(canon, data)}
	}
	if err := e.validate(d); err != nil {
		return nil, err
	}
	return e, nil
}
