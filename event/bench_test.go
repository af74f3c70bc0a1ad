package event

import "testing"

// The budget for encoding and hashing an envelope is about 2 µs.
func BenchmarkEnvelopeEncodeAndHash(b *testing.B) {
	e := sampleEnvelope()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EnvelopeHash(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnvelopeDecode(b *testing.B) {
	data, err := sampleEnvelope().MarshalCBOR()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeEnvelope(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnvelopeValidate(b *testing.B) {
	e := sampleEnvelope()
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIdempotencyKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = IdempotencyKey("run-01J9Z3K4W5X6Y7Z8", "charge-card", 3, StepCompleted, "checkout", 12)
	}
}

func BenchmarkIsCanonicalPayload(b *testing.B) {
	p, err := Marshal(map[string]any{"orderId": "o-123", "amount": 4200, "items": []any{"a", "b", "c"}, "express": true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if err := IsCanonical(p); err != nil {
			b.Fatal(err)
		}
	}
}
