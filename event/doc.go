// Package event owns the durable record of the execution semantics contract (the Execution Semantics
// Contract v2.0.0) and the bytes that represent it:
//
//   - Envelope, its fields and Validate: the rules a producer must meet
//     before append (attempts start at 1, engineAttemptId present, emittedAt
//     set, payload canonical) and, with ValidatePersisted, the ones the
//     append authority adds (runSeq, persistedAt);
//   - the lifecycle event types and which of them are run-level;
//   - IdempotencyKey, whose exact preimage bytes are pinned here and
//     nowhere else;
//   - the package's canonical CBOR profile: Marshal, a limit-enforcing
//     Decoder for untrusted bytes, IsCanonical and Canonicalize;
//   - the canonical encoding of an envelope, DecodeEnvelope and EnvelopeHash;
//   - the sourceOccurredAt payload convention (source event-time lives in
//     the payload; occurredAt is not an envelope field);
//   - the persistence limits (MaxIDBytes, MaxPayloadBytes, MaxStateBytes,
//     MaxBatch, the stored time range): one set of constants that the store
//     checks and the world kernel bounds every step by, so the two cannot
//     drift apart.
//
// It never does I/O, never reads a clock (EmittedAt and PersistedAt are set
// by callers: the producer and the append authority), starts no goroutines
// and keeps no mutable package state: the encoding mode and the default
// Decoder are built once and never change, and every function is safe for
// concurrent use. Assigning runSeq, deduplicating on (streamId,
// idempotencyKey) and persisting belong to the store; this package only
// defines what they compare.
//
// # Canonical CBOR profile
//
// Encoding is RFC 8949 §4.2.1 Core Deterministic Encoding: shortest forms of
// integers, lengths and floats; map keys sorted by the bytewise order of
// their encodings (not length-first); definite lengths only. On top of that:
//
//   - no tags (major type 6): integers beyond the 64-bit CBOR range and NaN
//     are rejected, not tagged or rewritten;
//   - text strings must be valid UTF-8 (Marshal checks; the CBOR library
//     does not);
//   - a nil slice or map encodes as null, an empty one as an empty array or
//     map;
//   - instants are int64 Unix nanoseconds: the envelope's times, and
//     Timestamp in payloads (null when zero). The CBOR library has no
//     integer-nanosecond mode for a bare time.Time (its integer mode drops
//     sub-seconds); a bare time.Time is therefore written as RFC 3339 text
//     in UTC with nanoseconds, which is deterministic and lossless but is
//     text. Use Timestamp.
//
// Decoding accepts any well-formed CBOR within the Decoder's limits (size,
// depth, entries per array or map) except duplicate map keys (keys equal as
// Go values, so 0.0 and -0.0 count as duplicates), indefinite lengths, tags,
// NaN, invalid UTF-8 and trailing bytes. It does not itself demand canonical
// form: IsCanonical decodes, re-encodes and compares the bytes, and
// DecodeEnvelope and Validate (for payloads) do the same.
//
// # Envelope encoding
//
// Schema version 1. An envelope encodes as one CBOR map with small unsigned
// integer keys, in the profile above (so keys appear in numeric order):
//
//	key  field             CBOR type
//	 0   schema version    uint, always 1
//	 1   eventId           text
//	 2   streamId          text
//	 3   runSeq            uint
//	 4   idempotencyKey    text (64 lowercase hex digits)
//	 5   eventType         text
//	 6   emittedAt         int, Unix nanoseconds; ABSENT when the time is zero
//	 7   persistedAt       int, Unix nanoseconds; ABSENT when the time is zero
//	 8   stepId            text
//	 9   logicalAttemptId  uint
//	10   engineAttemptId   uint
//	11   planId            text
//	12   planVersion       uint
//	13   payload           bytes: the payload's own CBOR, wrapped
//
// Every key other than 6 and 7 is always present, even when empty or zero,
// so an envelope has exactly one encoding; DecodeEnvelope accepts nothing
// else. The payload is wrapped in a byte string rather than inlined so its
// bytes (and any hash of them) survive unchanged, and so an envelope encodes
// even before its payload is validated. Keys are never reused: a new field
// takes a new key and a new schema version. There is no occurredAt key.
// EnvelopeHash is the SHA-256 of this encoding.
package event
