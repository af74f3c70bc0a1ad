package event

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinels for decode failures. Every error returned by the decoding
// functions of this package is a *DecodeError whose Is method matches exactly
// one of these, chosen by its Kind.
var (
	// ErrMalformed: the input is not well-formed CBOR (truncated, reserved
	// additional information, invalid UTF-8 in a text string, empty input).
	ErrMalformed = errors.New("event: malformed CBOR")
	// ErrTooLarge: the input is longer than the decoder's MaxSize.
	ErrTooLarge = errors.New("event: CBOR input too large")
	// ErrTooDeep: arrays and maps nest deeper than the decoder's MaxDepth.
	ErrTooDeep = errors.New("event: CBOR nested too deep")
	// ErrTooManyElements: an array or map has more entries than MaxElements.
	ErrTooManyElements = errors.New("event: CBOR array or map has too many elements")
	// ErrDuplicateKey: a map repeats a key.
	ErrDuplicateKey = errors.New("event: CBOR map has a duplicate key")
	// ErrIndefiniteLength: the input uses an indefinite-length item, which
	// Core Deterministic Encoding forbids.
	ErrIndefiniteLength = errors.New("event: CBOR indefinite-length item")
	// ErrTrailing: bytes follow the single data item.
	ErrTrailing = errors.New("event: trailing bytes after CBOR data item")
	// ErrUnsupported: well-formed CBOR outside this package's profile: tags,
	// NaN, or a map key that cannot be a Go map key (array, map, big integer).
	ErrUnsupported = errors.New("event: CBOR outside the supported profile")
	// ErrType: well-formed CBOR that does not fit the destination Go value
	// (wrong type, overflow, unknown struct field when those are disallowed).
	ErrType = errors.New("event: CBOR does not fit the destination type")
	// ErrNotCanonical: well-formed CBOR that is not the Core Deterministic
	// encoding of the value it denotes.
	ErrNotCanonical = errors.New("event: CBOR is not canonical")
	// ErrInvalidTarget: the destination is not a non-nil pointer.
	ErrInvalidTarget = errors.New("event: invalid decode destination")
)

// DecodeErrorKind classifies a *DecodeError.
type DecodeErrorKind uint8

// The kinds of decode failure. Each matches the sentinel of the same name.
const (
	KindMalformed DecodeErrorKind = iota + 1
	KindTooLarge
	KindTooDeep
	KindTooManyElements
	KindDuplicateKey
	KindIndefiniteLength
	KindTrailing
	KindUnsupported
	KindType
	KindNotCanonical
	KindInvalidTarget
)

var kindNames = [...]string{
	KindMalformed:        "malformed",
	KindTooLarge:         "too large",
	KindTooDeep:          "too deep",
	KindTooManyElements:  "too many elements",
	KindDuplicateKey:     "duplicate key",
	KindIndefiniteLength: "indefinite length",
	KindTrailing:         "trailing bytes",
	KindUnsupported:      "unsupported",
	KindType:             "type mismatch",
	KindNotCanonical:     "not canonical",
	KindInvalidTarget:    "invalid target",
}

var kindSentinels = [...]error{
	KindMalformed:        ErrMalformed,
	KindTooLarge:         ErrTooLarge,
	KindTooDeep:          ErrTooDeep,
	KindTooManyElements:  ErrTooManyElements,
	KindDuplicateKey:     ErrDuplicateKey,
	KindIndefiniteLength: ErrIndefiniteLength,
	KindTrailing:         ErrTrailing,
	KindUnsupported:      ErrUnsupported,
	KindType:             ErrType,
	KindNotCanonical:     ErrNotCanonical,
	KindInvalidTarget:    ErrInvalidTarget,
}

func (k DecodeErrorKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "DecodeErrorKind(" + strconv.Itoa(int(k)) + ")"
}

// DecodeError reports why bytes were rejected. Limit is the configured limit
// for KindTooLarge, KindTooDeep and KindTooManyElements (0 otherwise); Size is
// the input length for KindTooLarge; Offset is, for KindNotCanonical, the
// index of the first byte that differs from the canonical encoding. Err, when
// non-nil, is the underlying error from the CBOR library or from a
// destination's UnmarshalCBOR.
type DecodeError struct {
	Kind   DecodeErrorKind
	Limit  int
	Size   int
	Offset int
	Err    error
}

func (e *DecodeError) Error() string {
	msg := "event: cbor " + e.Kind.String()
	switch e.Kind {
	case KindTooLarge:
		msg += ": " + strconv.Itoa(e.Size) + " bytes, limit " + strconv.Itoa(e.Limit)
	case KindTooDeep, KindTooManyElements:
		msg += ": limit " + strconv.Itoa(e.Limit)
	case KindNotCanonical:
		msg += ": first difference at byte " + strconv.Itoa(e.Offset)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches the sentinel of the error's kind.
func (e *DecodeError) Is(target error) bool {
	return int(e.Kind) < len(kindSentinels) && kindSentinels[e.Kind] != nil && target == kindSentinels[e.Kind]
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrEncode matches every *EncodeError.
var ErrEncode = errors.New("event: cannot encode as canonical CBOR")

// EncodeError reports a value that has no encoding in this package's CBOR
// profile: an unsupported Go type, NaN, a time outside the int64 nanosecond
// range, a text string that is not valid UTF-8, an integer that would need a
// bignum tag.
type EncodeError struct {
	Err error
}

func (e *EncodeError) Error() string { return "event: cbor encode: " + e.Err.Error() }

// Is matches ErrEncode.
func (e *EncodeError) Is(target error) bool { return target == ErrEncode }

func (e *EncodeError) Unwrap() error { return e.Err }

// ErrInvalidEnvelope matches every *ValidationError.
var ErrInvalidEnvelope = errors.New("event: invalid envelope")

// ValidationError names the first envelope field that breaks the contract.
// Field is the field's wire name (for example "logicalAttemptId"). Err, when
// non-nil, is the cause (a *DecodeError for a payload that is not canonical
// CBOR), so errors.Is(err, ErrNotCanonical) also works through it.
type ValidationError struct {
	Field  string
	Reason string
	Err    error
}

func (e *ValidationError) Error() string {
	msg := "event: invalid envelope: " + e.Field + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrInvalidEnvelope.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidEnvelope }

func (e *ValidationError) Unwrap() error { return e.Err }

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
