package event

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// sampleEnvelope is the envelope of TestEnvelopeEncodingVector.
func sampleEnvelope() *Envelope {
	e := &Envelope{
		EventID:          "evt-1",
		StreamID:         "run-1",
		RunSeq:           7,
		EventType:        StepCompleted,
		EmittedAt:        time.Unix(1771243200, 123456789), // 2026-02-16T12:00:00.123456789Z
		PersistedAt:      time.Unix(1771243200, 124456789),
		StepID:           "step-a",
		LogicalAttemptID: 1,
		PlanID:           "plan-x",
		PlanVersion:      3,
		Payload:          []byte{0xa1, 0x62, 'o', 'k', 0xf5}, // {"ok": true}
	}
	e.Normalize()
	return e
}

// The envelope schema, pinned byte for byte.
const sampleEnvelopeHex = "ae" +
	"00 01" + // 0 version: 1
	"01 65 6576742d31" + // 1 eventId: "evt-1"
	"02 65 72756e2d31" + // 2 streamId: "run-1"
	"03 07" + // 3 runSeq: 7
	"04 7840 36633430393236626237656138633162376535613138366233326639386233313066323333623866353931663763346430373532346362346539653831386266" + // 4 idempotencyKey
	"05 6d 53746570436f6d706c65746564" + // 5 eventType: "StepCompleted"
	"06 1b 1894b84e5a2f4d15" + // 6 emittedAt: 1771243200123456789 ns
	"07 1b 1894b84e5a3e8f55" + // 7 persistedAt: 1771243200124456789 ns
	"08 66 737465702d61" + // 8 stepId: "step-a"
	"09 01" + // 9 logicalAttemptId: 1
	"0a 01" + // 10 engineAttemptId: 1
	"0b 66 706c616e2d78" + // 11 planId: "plan-x"
	"0c 03" + // 12 planVersion: 3
	"0d 45 a1626f6bf5" // 13 payload: bytes({"ok": true})

const sampleEnvelopeHash = "b66604394ac09da48dc1bd5703c5cf141c1f94afd3fbff2f0a51871ff6ddabb7"

func TestEnvelopeEncodingVector(t *testing.T) {
	e := sampleEnvelope()
	if e.IdempotencyKey != "6c40926bb7ea8c1b7e5a186b32f98b310f233b8f591f7c4d07524cb4e9e818bf" {
		t.Fatalf("key %s", e.IdempotencyKey)
	}
	want := unhex(t, sampleEnvelopeHex)
	got, err := e.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding\n got %x\nwant %x", got, want)
	}
	h, err := EnvelopeHash(e)
	if err != nil {
		t.Fatal(err)
	}
	if h.String() != sampleEnvelopeHash || h != sha256.Sum256(want) {
		t.Fatalf("hash %s, want %s", h, sampleEnvelopeHash)
	}
	back, err := DecodeEnvelope(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, e) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", back, e)
	}
	if err := IsCanonical(want); err != nil {
		t.Fatalf("envelope encoding is not canonical CBOR: %v", err)
	}
}

// Seed 001 §2.3: occurredAt is not an envelope field; source time lives in
// the payload as sourceOccurredAt.
func TestEnvelopeHasNoOccurredAt(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[Envelope](), reflect.TypeFor[wireEnvelope]()} {
		for f := range typ.Fields() {
			if strings.Contains(strings.ToLower(f.Name), "occurred") || strings.Contains(strings.ToLower(string(f.Tag)), "occurred") {
				t.Errorf("%s has field %s", typ, f.Name)
			}
		}
	}
	e := sampleEnvelope()
	var err error
	if e.Payload, err = WithSourceOccurredAt(EmptyPayload(), time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	b, err := e.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	var m map[any]any
	if err := Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 14 {
		t.Fatalf("envelope has %d keys, want 14", len(m))
	}
	for k := range m {
		n, ok := k.(uint64)
		if !ok || n > 13 {
			t.Errorf("unexpected envelope key %#v", k)
		}
	}
	// The envelope's own keys are 0..13 only; the source time is inside the
	// payload byte string.
	if _, ok := m["occurredAt"]; ok {
		t.Error("envelope has an occurredAt key")
	}
	if at, ok, err := SourceOccurredAt(m[uint64(13)].([]byte)); err != nil || !ok || !at.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("sourceOccurredAt in payload: %v %v %v", at, ok, err)
	}
	// An encoding that carries an occurredAt key is rejected.
	m["occurredAt"] = uint64(1)
	_, err = DecodeEnvelope(mustMarshal(t, m))
	wantKind(t, err, KindType)
}

func TestEnvelopeValidate(t *testing.T) {
	if err := sampleEnvelope().Validate(); err != nil {
		t.Fatalf("sample envelope: %v", err)
	}
	for _, c := range []struct {
		field  string
		mutate func(*Envelope)
	}{
		{"eventId", func(e *Envelope) { e.EventID = "" }},
		{"eventId", func(e *Envelope) { e.EventID = "\xff" }},
		{"streamId", func(e *Envelope) { e.StreamID = "" }},
		{"idempotencyKey", func(e *Envelope) { e.IdempotencyKey = "" }},
		{"idempotencyKey", func(e *Envelope) { e.IdempotencyKey = strings.ToUpper(e.IdempotencyKey) }},
		{"idempotencyKey", func(e *Envelope) { e.IdempotencyKey = "abc" }},
		{"eventType", func(e *Envelope) { e.EventType = "" }},
		{"stepId", func(e *Envelope) { e.StepID = "a\xc3" }},
		{"planId", func(e *Envelope) { e.PlanID = "\xfe" }},
		{"emittedAt", func(e *Envelope) { e.EmittedAt = time.Time{} }},
		{"emittedAt", func(e *Envelope) { e.EmittedAt = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"persistedAt", func(e *Envelope) { e.PersistedAt = time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"stepId", func(e *Envelope) { e.EventType = RunStarted }},                         // run-level with a stepId
		{"stepId", func(e *Envelope) { e.StepID = "" }},                                    // step-level without one
		{"logicalAttemptId", func(e *Envelope) { e.LogicalAttemptID = 0 }},                 // attempts start at 1
		{"engineAttemptId", func(e *Envelope) { e.EngineAttemptID = 0 }},                   // must be present
		{"payload", func(e *Envelope) { e.Payload = nil }},                                 // not CBOR
		{"payload", func(e *Envelope) { e.Payload = []byte{0x18, 0x01} }},                  // not canonical
		{"payload", func(e *Envelope) { e.Payload = []byte{0x01, 0x02} }},                  // two items
		{"payload", func(e *Envelope) { e.Payload = []byte{0xa2, 1, 1, 1, 2} }},            // duplicate key
		{"payload", func(e *Envelope) { e.Payload = []byte{0x9f, 0xff} }},                  // indefinite
		{"payload", func(e *Envelope) { e.Payload = append([]byte{0x62}, "\xff\xfe"...) }}, // bad UTF-8
	} {
		e := sampleEnvelope()
		c.mutate(e)
		err := e.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidEnvelope) {
			t.Errorf("%s: Validate = %v, want a *ValidationError", c.field, err)
			continue
		}
		if ve.Field != c.field {
			t.Errorf("Validate flags %s (%v), want %s", ve.Field, err, c.field)
		}
	}
	e := sampleEnvelope()
	e.Payload = []byte{0x18, 0x01}
	if err := e.Validate(); !errors.Is(err, ErrNotCanonical) {
		t.Errorf("non-canonical payload: %v does not match ErrNotCanonical", err)
	}
	// Unknown event types are legal, with or without a step (forward compatibility).
	for _, step := range []string{"", "s"} {
		e := sampleEnvelope()
		e.EventType, e.StepID, e.IdempotencyKey = "WorkflowSignalled", step, ""
		e.Normalize()
		if err := e.Validate(); err != nil {
			t.Errorf("unknown type, step %q: %v", step, err)
		}
	}
	// runSeq and persistedAt are the append authority's: zero before append.
	e = sampleEnvelope()
	e.RunSeq, e.PersistedAt = 0, time.Time{}
	if err := e.Validate(); err != nil {
		t.Errorf("pre-append envelope: %v", err)
	}
}

func TestLogicalAttemptIDStartsAtOne(t *testing.T) {
	e := sampleEnvelope()
	e.LogicalAttemptID = 0
	e.Normalize() // Normalize never invents a logical attempt.
	if err := e.Validate(); err == nil || err.(*ValidationError).Field != "logicalAttemptId" {
		t.Fatalf("logicalAttemptId 0: %v", err)
	}
	e.LogicalAttemptID = 1
	e.IdempotencyKey = ""
	e.Normalize()
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Seed 001 §3.3: engineAttemptId MUST be present; 1 when the provider has none.
func TestEngineAttemptIDDefaultsToOne(t *testing.T) {
	e := sampleEnvelope()
	e.EngineAttemptID = 0
	e.Normalize()
	if e.EngineAttemptID != 1 {
		t.Fatalf("Normalize left engineAttemptId %d", e.EngineAttemptID)
	}
	e.EngineAttemptID = 3
	e.Normalize()
	if e.EngineAttemptID != 3 {
		t.Fatalf("Normalize changed engineAttemptId 3 to %d", e.EngineAttemptID)
	}
	// A stored envelope with engineAttemptId 0 is invalid, not defaulted.
	e.EngineAttemptID = 0
	b, err := e.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeEnvelope(b)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Field != "engineAttemptId" {
		t.Fatalf("DecodeEnvelope(engineAttemptId 0) = %v", err)
	}
}

func TestNormalize(t *testing.T) {
	loc := time.FixedZone("X", -7*3600)
	e := &Envelope{StreamID: "r", StepID: "s", LogicalAttemptID: 2, EventType: StepStarted, PlanID: "p", PlanVersion: 9,
		EmittedAt: time.Now().In(loc)}
	e.Normalize()
	if e.IdempotencyKey != IdempotencyKey("r", "s", 2, StepStarted, "p", 9) {
		t.Fatalf("key %s", e.IdempotencyKey)
	}
	if e.EmittedAt.Location() != time.UTC || e.EmittedAt != e.EmittedAt.Round(0) {
		t.Fatalf("emittedAt not UTC without monotonic: %v", e.EmittedAt)
	}
	if !e.PersistedAt.IsZero() {
		t.Fatalf("Normalize set persistedAt")
	}
	e.IdempotencyKey = "kept"
	e.Normalize()
	if e.IdempotencyKey != "kept" {
		t.Fatal("Normalize overwrote a key")
	}
}

func TestVerifyKey(t *testing.T) {
	e := sampleEnvelope()
	if err := e.VerifyKey(); err != nil {
		t.Fatal(err)
	}
	e.PlanVersion++
	err := e.VerifyKey()
	if !errors.Is(err, ErrKeyMismatch) || !errors.Is(err, ErrInvalidEnvelope) {
		t.Fatalf("VerifyKey after changing planVersion: %v", err)
	}
	if e.Validate() != nil {
		t.Fatal("Validate recomputes the key; it should only check its format")
	}
}

func TestValidatePersisted(t *testing.T) {
	if err := sampleEnvelope().ValidatePersisted(); err != nil {
		t.Fatal(err)
	}
	e := sampleEnvelope()
	e.RunSeq = 0
	if err := e.ValidatePersisted(); err == nil || err.(*ValidationError).Field != "runSeq" {
		t.Fatalf("runSeq 0: %v", err)
	}
	e = sampleEnvelope()
	e.PersistedAt = time.Time{}
	if err := e.ValidatePersisted(); err == nil || err.(*ValidationError).Field != "persistedAt" {
		t.Fatalf("no persistedAt: %v", err)
	}
}

func envelopeGen() *rapid.Generator[*Envelope] {
	return rapid.Custom(func(t *rapid.T) *Envelope {
		text := rapid.StringN(1, 24, -1)
		et := rapid.OneOf(
			rapid.SampledFrom([]string{RunQueued, RunStarted, RunFailed, StepStarted, StepSkipped}),
			text,
		).Draw(t, "eventType")
		var step string
		switch {
		case IsRunLevel(et):
		case IsStepLevel(et):
			step = text.Draw(t, "stepId")
		default:
			step = rapid.StringN(0, 24, -1).Draw(t, "stepId")
		}
		e := &Envelope{
			EventID:          text.Draw(t, "eventId"),
			StreamID:         text.Draw(t, "streamId"),
			RunSeq:           rapid.Uint64().Draw(t, "runSeq"),
			EventType:        et,
			EmittedAt:        time.Unix(0, rapid.Int64().Draw(t, "emittedAt")),
			StepID:           step,
			LogicalAttemptID: rapid.Uint64Min(1).Draw(t, "logicalAttemptId"),
			EngineAttemptID:  rapid.Uint64().Draw(t, "engineAttemptId"),
			PlanID:           rapid.StringN(0, 24, -1).Draw(t, "planId"),
			PlanVersion:      rapid.Uint64().Draw(t, "planVersion"),
		}
		if rapid.Bool().Draw(t, "persisted") {
			e.PersistedAt = time.Unix(0, rapid.Int64().Draw(t, "persistedAt"))
		}
		var err error
		if e.Payload, err = Marshal(cborValue().Draw(t, "payload")); err != nil {
			t.Fatal(err)
		}
		e.Normalize()
		return e
	})
}

func TestEnvelopeRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := envelopeGen().Draw(t, "e")
		if err := e.Validate(); err != nil {
			t.Fatalf("generated envelope invalid: %v", err)
		}
		b, err := e.MarshalCBOR()
		if err != nil {
			t.Fatal(err)
		}
		if err := IsCanonical(b); err != nil {
			t.Fatalf("encoding not canonical CBOR: %v", err)
		}
		back, err := DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("DecodeEnvelope: %v", err)
		}
		if !reflect.DeepEqual(back, e) {
			t.Fatalf("round trip\n got %+v\nwant %+v", back, e)
		}
		b2, _ := back.MarshalCBOR()
		h1, _ := EnvelopeHash(e)
		h2, _ := EnvelopeHash(back)
		if !bytes.Equal(b, b2) || h1 != h2 || h1 != sha256.Sum256(b) {
			t.Fatal("re-encoding or hash differs")
		}
	})
}

func TestDecodeEnvelopeRejects(t *testing.T) {
	good := unhex(t, sampleEnvelopeHex)
	var generic map[any]any
	if err := Unmarshal(good, &generic); err != nil {
		t.Fatal(err)
	}
	// with returns the canonical encoding of the sample with key k set to v
	// (or deleted when v is deleteKey), so each case breaks one rule only.
	type deleteKey struct{}
	with := func(k, v any) []byte {
		m := make(map[any]any, len(generic))
		for kk, vv := range generic {
			m[kk] = vv
		}
		if _, del := v.(deleteKey); del {
			delete(m, k)
		} else {
			m[k] = v
		}
		return mustMarshal(t, m)
	}
	replace := func(old, new string) []byte {
		s := strings.ReplaceAll(sampleEnvelopeHex, " ", "")
		if !strings.Contains(s, old) {
			t.Fatalf("%s not in sample", old)
		}
		return unhex(t, strings.Replace(s, old, new, 1))
	}
	for _, c := range []struct {
		name string
		in   []byte
		kind DecodeErrorKind
		// field, when set, expects a *ValidationError on it instead.
		field string
	}{
		{"empty", nil, KindMalformed, ""},
		{"truncated", good[:len(good)-1], KindMalformed, ""},
		{"trailing byte", append(bytes.Clone(good), 0), KindTrailing, ""},
		{"not a map", unhex(t, "80"), KindType, ""},
		{"unknown key 14", with(uint64(14), uint64(0)), KindType, ""},
		{"schema version 2", with(uint64(0), uint64(2)), KindUnsupported, ""},
		{"no version", with(uint64(0), deleteKey{}), KindUnsupported, ""},
		{"missing stepId key", with(uint64(8), deleteKey{}), KindNotCanonical, ""},
		{"missing payload key", with(uint64(13), deleteKey{}), KindNotCanonical, ""},
		{"null emittedAt", with(uint64(6), nil), KindNotCanonical, ""},
		{"float emittedAt", with(uint64(6), 1.5), KindType, ""},
		{"negative runSeq", with(uint64(3), int64(-1)), KindType, ""},
		{"text runSeq", with(uint64(3), "7"), KindType, ""},
		{"bytes eventId", with(uint64(1), []byte("evt-1")), KindType, ""},
		{"inline payload map", with(uint64(13), map[any]any{"ok": true}), KindType, ""},
		{"runSeq not shortest", replace("0307", "031807"), KindNotCanonical, ""},
		{"keys out of order", replace("0b66706c616e2d780c03", "0c030b66706c616e2d78"), KindNotCanonical, ""},
		{"duplicate key", replace("ae0001", "af00010001"), KindDuplicateKey, ""},
		{"indefinite map", append(replace("ae0001", "bf0001"), 0xff), KindIndefiniteLength, ""},
		{"tag", append([]byte{0xd8, 0x37}, good...), KindUnsupported, ""},
		{"empty eventId", with(uint64(1), ""), 0, "eventId"},
		{"logicalAttemptId 0", with(uint64(9), uint64(0)), 0, "logicalAttemptId"},
		{"payload not canonical", with(uint64(13), []byte{0x18, 0x01}), 0, "payload"},
		{"payload empty", with(uint64(13), []byte{}), 0, "payload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := DecodeEnvelope(c.in)
			if e != nil {
				t.Fatalf("returned an envelope with error %v", err)
			}
			if c.field != "" {
				var ve *ValidationError
				if !errors.As(err, &ve) || ve.Field != c.field {
					t.Fatalf("err %v, want a ValidationError on %s", err, c.field)
				}
				return
			}
			wantKind(t, err, c.kind)
		})
	}

	// The payload is held to the decoder's own limits.
	deep := append(bytes.Repeat([]byte{0x81}, 10), 0)
	d, err := NewDecoder(DecoderOptions{MaxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	in := with(uint64(13), deep)
	if _, err := DecodeEnvelope(in); err != nil {
		t.Fatalf("default decoder: %v", err)
	}
	_, err = d.DecodeEnvelope(in)
	if !errors.Is(err, ErrTooDeep) || !errors.Is(err, ErrInvalidEnvelope) {
		t.Fatalf("deep payload with MaxDepth 4: %v", err)
	}
}

func TestDecodeEnvelopeSharesNoMemory(t *testing.T) {
	in := unhex(t, sampleEnvelopeHex)
	e, err := DecodeEnvelope(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 0
	}
	if !bytes.Equal(e.Payload, []byte{0xa1, 0x62, 'o', 'k', 0xf5}) || e.EventID != "evt-1" {
		t.Fatalf("decoded envelope aliases its input: %+v", e)
	}
}

func TestEnvelopeThroughGenericCodec(t *testing.T) {
	e := sampleEnvelope()
	want := unhex(t, sampleEnvelopeHex)
	if got := mustMarshal(t, e); !bytes.Equal(got, want) {
		t.Fatalf("Marshal(*Envelope) = %x", got)
	}
	if got := mustMarshal(t, *e); !bytes.Equal(got, want) {
		t.Fatalf("Marshal(Envelope) = %x", got)
	}
	type record struct {
		Env *Envelope `cbor:"e"`
		N   int       `cbor:"n"`
	}
	b := mustMarshal(t, record{Env: e, N: 1})
	var r record
	if err := Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Env, e) || r.N != 1 {
		t.Fatalf("embedded round trip: %+v", r)
	}
	// An invalid embedded envelope fails the outer decode and leaves it alone.
	bad := *e
	bad.LogicalAttemptID = 0
	b = mustMarshal(t, record{Env: &bad, N: 2})
	r2 := record{N: 5}
	err := Unmarshal(b, &r2)
	if !errors.Is(err, ErrInvalidEnvelope) || r2.N != 5 || r2.Env != nil {
		t.Fatalf("invalid embedded envelope: %v %+v", err, r2)
	}
	var direct Envelope
	if err := direct.UnmarshalCBOR(want); err != nil || !reflect.DeepEqual(&direct, e) {
		t.Fatalf("UnmarshalCBOR: %v", err)
	}
	untouched := Envelope{EventID: "x"}
	if err := untouched.UnmarshalCBOR(want[:10]); err == nil || untouched.EventID != "x" {
		t.Fatalf("UnmarshalCBOR on error changed e: %v %+v", err, untouched)
	}
}

func TestEnvelopeMarshalErrors(t *testing.T) {
	for name, mutate := range map[string]func(*Envelope){
		"invalid UTF-8":       func(e *Envelope) { e.StreamID = "\xff" },
		"emittedAt too early": func(e *Envelope) { e.EmittedAt = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"persistedAt too late": func(e *Envelope) {
			e.PersistedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
		},
	} {
		e := sampleEnvelope()
		mutate(e)
		if _, err := e.MarshalCBOR(); !errors.Is(err, ErrEncode) {
			t.Errorf("%s: MarshalCBOR = %v, want ErrEncode", name, err)
		}
		if _, err := EnvelopeHash(e); !errors.Is(err, ErrEncode) {
			t.Errorf("%s: EnvelopeHash = %v, want ErrEncode", name, err)
		}
	}
	// Encoding does not validate: an invalid envelope still has bytes (and a hash).
	var empty Envelope
	b, err := empty.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "ac 0001 0160 0260 0300 0460 0560 0860 0900 0a00 0b60 0c00 0d40"); !bytes.Equal(b, want) {
		t.Fatalf("zero envelope = %x, want %x", b, want)
	}
	// The Unix epoch itself is a time, distinct from the zero time.
	e := sampleEnvelope()
	e.EmittedAt = time.Unix(0, 0).UTC()
	b, _ = e.MarshalCBOR()
	back, err := DecodeEnvelope(b)
	if err != nil || back.EmittedAt.IsZero() || !back.EmittedAt.Equal(time.Unix(0, 0)) {
		t.Fatalf("epoch emittedAt: %v %v", back, err)
	}
}

func TestEnvelopeHashCoversEveryField(t *testing.T) {
	base, _ := EnvelopeHash(sampleEnvelope())
	seen := map[Hash]string{base: "base"}
	for name, mutate := range map[string]func(*Envelope){
		"eventId":          func(e *Envelope) { e.EventID += "x" },
		"streamId":         func(e *Envelope) { e.StreamID += "x" },
		"runSeq":           func(e *Envelope) { e.RunSeq++ },
		"idempotencyKey":   func(e *Envelope) { e.IdempotencyKey = strings.Repeat("0", 64) },
		"eventType":        func(e *Envelope) { e.EventType += "x" },
		"emittedAt":        func(e *Envelope) { e.EmittedAt = e.EmittedAt.Add(1) },
		"persistedAt":      func(e *Envelope) { e.PersistedAt = e.PersistedAt.Add(1) },
		"persistedAt zero": func(e *Envelope) { e.PersistedAt = time.Time{} },
		"stepId":           func(e *Envelope) { e.StepID += "x" },
		"logicalAttemptId": func(e *Envelope) { e.LogicalAttemptID++ },
		"engineAttemptId":  func(e *Envelope) { e.EngineAttemptID++ },
		"planId":           func(e *Envelope) { e.PlanID += "x" },
		"planVersion":      func(e *Envelope) { e.PlanVersion++ },
		"payload":          func(e *Envelope) { e.Payload = []byte{0xa0} },
	} {
		e := sampleEnvelope()
		mutate(e)
		h, err := EnvelopeHash(e)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[h]; dup {
			t.Errorf("changing %s leaves the hash equal to %s", name, prev)
		}
		seen[h] = name
	}
}

// The package keeps no mutable state: concurrent use is race-free.
func TestConcurrentUse(t *testing.T) {
	in := unhex(t, sampleEnvelopeHex)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 200 {
				e, err := DecodeEnvelope(in)
				if err != nil {
					errs <- err
					return
				}
				if h, err := EnvelopeHash(e); err != nil || h.String() != sampleEnvelopeHash {
					errs <- errors.New("hash differs under concurrency")
					return
				}
				if IdempotencyKey(e.StreamID, e.StepID, e.LogicalAttemptID, e.EventType, e.PlanID, e.PlanVersion) != e.IdempotencyKey {
					errs <- errors.New("key differs under concurrency")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	good, _ := (sampleEnvelope()).MarshalCBOR()
	f.Add(good)
	var empty Envelope
	b, _ := empty.MarshalCBOR()
	f.Add(b)
	run := sampleEnvelope()
	run.EventType, run.StepID, run.PersistedAt, run.RunSeq, run.IdempotencyKey = RunStarted, "", time.Time{}, 0, ""
	run.Normalize()
	b, _ = run.MarshalCBOR()
	f.Add(b)
	s := strings.ReplaceAll(sampleEnvelopeHex, " ", "")
	for _, r := range [][2]string{
		{"ae0001", "af00010001"},                         // duplicate key
		{"ae0001", "bf0001"},                             // indefinite map (unterminated)
		{"0307", "031807"},                               // non-shortest runSeq
		{"0d45a1626f6bf5", "0d5f45a1626f6bf5ff"},         // indefinite payload bytes
		{"0d45a1626f6bf5", "0da1626f6bf5"},               // inline payload
		{"0d45a1626f6bf5", "0d5bffffffffffffffff"},       // huge length
		{"061b1894b84e5a2f4d15", "06f6"},                 // null time
		{"061b1894b84e5a2f4d15", "06fb43b894b84e5a2f4d"}, // float time
		{"0001", "0002"},                                 // version 2
	} {
		f.Add(unhex(f, strings.Replace(s, r[0], r[1], 1)))
	}
	cborFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		e, err := DecodeEnvelope(data)
		if !bytes.Equal(orig, data) {
			t.Fatal("DecodeEnvelope modified its input")
		}
		if err != nil {
			var de *DecodeError
			var ve *ValidationError
			if e != nil || (!errors.As(err, &de) && !errors.As(err, &ve)) {
				t.Fatalf("bad error result %v (%T), envelope %v", err, err, e)
			}
			return
		}
		// Accepted bytes are exactly the canonical encoding of a valid envelope.
		b, err := e.MarshalCBOR()
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("accepted %x but re-encodes to %x (%v)", data, b, err)
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("accepted an invalid envelope: %v", err)
		}
		if h, _ := EnvelopeHash(e); h != sha256.Sum256(data) {
			t.Fatal("hash is not SHA-256 of the accepted bytes")
		}
	})
}
