package event

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// RunStepID is the stepIdNormalized that the execution semantics contract §3.1 writes into the key of
// run-level events.
const RunStepID = "RUN"

// IdempotencyKey returns the idempotency key of the execution semantics contract §3.1:
//
//	SHA256(runId | stepIdNormalized | logicalAttemptId | eventType | planId | planVersion)
//
// The byte layout below is the contract. It is pinned by test vectors
// (TestIdempotencyKeyVectors); changing any of it changes every stored key and
// needs a major version of the contract.
//
// # Preimage
//
// The SHA-256 input P is the concatenation
//
//	F(runId) "|" S "|" D(logicalAttemptId) "|" F(eventType) "|" F(planId) "|" D(planVersion)
//
// where "|" is the single byte 0x7C and:
//
//   - F(s) is the bytes of s (Go strings are taken as they are: UTF-8 is
//     expected but neither checked nor normalised, so precomposed and
//     decomposed "é" give different keys) with every 0x5C '\' replaced by the
//     two bytes `\\` and every 0x7C '|' replaced by the two bytes `\|`. Every
//     other byte is copied unchanged. An empty field contributes no bytes.
//     Neither 0x5C nor 0x7C can occur inside a multi-byte UTF-8 sequence, so
//     escaping never splits a character.
//   - D(n) is n in base 10 with ASCII digits, no sign, no leading zeros, no
//     separators; zero is "0".
//   - S, the normalised step id, is
//     "RUN" (RunStepID) when IsRunLevel(eventType) or stepId is empty;
//     otherwise `\RUN` (the four bytes 5C 52 55 4E) when stepId is exactly "RUN";
//     otherwise F(stepId).
//
// The key is the SHA-256 digest of P written as 64 lowercase hexadecimal
// digits (0-9, a-f), most significant nibble of the first byte first.
//
// # Normalisation
//
// For run-level events the stepId argument is ignored: every run-level event
// of a run, attempt and plan has one key per type. An empty stepId is also
// written RUN whatever the type, so that a run-level type added by a later
// contract (and emitted, as run-level events are, with an empty stepId)
// keeps the key it had before IsRunLevel knew it. A step literally named
// "RUN" is written `\RUN`, so it never shares a preimage with the normalised
// marker: with every other field equal, (stepId "RUN", type X) and
// (stepId "", type X) get different keys.
//
// # Injectivity
//
// Call two argument tuples equivalent when they agree on runId,
// logicalAttemptId, eventType, planId and planVersion, and either both
// normalise the step (S = RUN) or neither does and their stepIds are equal.
// Non-equivalent tuples have different preimages:
//
//  1. Read P left to right. A 0x5C byte and the byte after it form one token;
//     a 0x7C byte not consumed that way is a separator; any other byte is a
//     token on its own. F emits only `\\`, `\|` and bytes other than 0x5C
//     and 0x7C, D emits digits, and S is RUN, `\RUN` or an F output, so no
//     field contains a separator and none ends inside a two-byte token. The
//     separators of P are therefore exactly the five that join the fields,
//     and P splits into its six fields in one way only.
//  2. F is inverted by replacing `\\` with '\' and `\|` with '|'.
//  3. D is injective: a number has one canonical decimal form.
//  4. S is read back unambiguously: "RUN" means normalised; `\RUN` means the
//     literal step "RUN"; anything else is F(stepId). F(stepId) is "RUN" only
//     for stepId "RUN", which takes the `\RUN` branch instead, and F never
//     emits the token `\R`.
//
// So equal preimages come only from equivalent tuples, and two different
// keys for the same logical event are impossible; a shared key between
// non-equivalent tuples would be a SHA-256 collision.
func IdempotencyKey(runID, stepID string, logicalAttemptID uint64, eventType, planID string, planVersion uint64) string {
	var buf [192]byte
	p := appendKeyPreimage(buf[:0], runID, stepID, logicalAttemptID, eventType, planID, planVersion)
	sum := sha256.Sum256(p)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// KeyPreimage returns the bytes IdempotencyKey hashes, for audit tools and
// for implementations of the key in other languages.
func KeyPreimage(runID, stepID string, logicalAttemptID uint64, eventType, planID string, planVersion uint64) []byte {
	return appendKeyPreimage(nil, runID, stepID, logicalAttemptID, eventType, planID, planVersion)
}

func appendKeyPreimage(dst []byte, runID, stepID string, logicalAttemptID uint64, eventType, planID string, planVersion uint64) []byte {
	dst = appendKeyField(dst, runID)
	dst = append(dst, '|')
	switch {
	case stepID == "" || IsRunLevel(eventType):
		dst = append(dst, RunStepID...)
	case stepID == RunStepID:
		dst = append(dst, '\\')
		dst = append(dst, RunStepID...)
	default:
		dst = appendKeyField(dst, stepID)
	}
	dst = append(dst, '|')
	dst = strconv.AppendUint(dst, logicalAttemptID, 10)
	dst = append(dst, '|')
	dst = appendKeyField(dst, eventType)
	dst = append(dst, '|')
	dst = appendKeyField(dst, planID)
	dst = append(dst, '|')
	dst = strconv.AppendUint(dst, planVersion, 10)
	return dst
}

// appendKeyField appends F(s) (see IdempotencyKey).
func appendKeyField(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '|' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', c)
			start = i + 1
		}
	}
	return append(dst, s[start:]...)
}

// isKeyFormat reports whether k looks like an IdempotencyKey output: 64
// lowercase hexadecimal digits.
func isKeyFormat(k string) bool {
	if len(k) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
