package event

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

// Default limits of a Decoder.
const (
	DefaultMaxSize     = 1 << 20 // bytes
	DefaultMaxDepth    = 32      // nested arrays and maps
	DefaultMaxElements = 65536   // entries of one array, or pairs of one map
)

// Bounds on DecoderOptions, inherited from the CBOR library.
const (
	MinMaxDepth    = 4
	MaxMaxDepth    = 65535
	MinMaxElements = 16
	MaxMaxElements = math.MaxInt32
)

// DecoderOptions configures a Decoder. Zero fields take the defaults.
type DecoderOptions struct {
	// MaxSize bounds the input length in bytes. It is checked before any
	// parsing, so a hostile length prefix never causes an allocation.
	MaxSize int
	// MaxDepth bounds the nesting of arrays and maps, in [MinMaxDepth, MaxMaxDepth].
	MaxDepth int
	// MaxElements bounds the entries of any one array and the pairs of any
	// one map, in [MinMaxElements, MaxMaxElements].
	MaxElements int
	// DisallowUnknownFields makes Unmarshal into a struct fail with ErrType
	// when the input has a map key that matches no field.
	DisallowUnknownFields bool
}

// ErrInvalidOptions matches errors from NewDecoder.
var ErrInvalidOptions = errors.New("event: invalid decoder options")

// Decoder decodes untrusted CBOR within limits. A Decoder is immutable and
// safe for concurrent use. The zero Decoder, and a nil *Decoder, use the
// default options.
//
// The limits bound work and memory by the input: nothing is allocated for a
// declared length before the bytes behind it are seen. Decoding into any
// still costs a few times the input size (an interface per element), so
// MaxSize is the knob for memory.
type Decoder struct {
	opts    DecoderOptions
	strict  cbor.DecMode // Unmarshal, IsCanonical
	lenient cbor.DecMode // Canonicalize: indefinite lengths allowed
	env     cbor.DecMode // envelopes: unknown fields rejected
}

// NewDecoder returns a Decoder with the given limits.
func NewDecoder(opts DecoderOptions) (*Decoder, error) {
	if opts.MaxSize == 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.MaxDepth == 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	if opts.MaxElements == 0 {
		opts.MaxElements = DefaultMaxElements
	}
	switch {
	case opts.MaxSize < 0:
		return nil, fmt.Errorf("%w: MaxSize %d < 0", ErrInvalidOptions, opts.MaxSize)
	case opts.MaxDepth < MinMaxDepth || opts.MaxDepth > MaxMaxDepth:
		return nil, fmt.Errorf("%w: MaxDepth %d outside [%d, %d]", ErrInvalidOptions, opts.MaxDepth, MinMaxDepth, MaxMaxDepth)
	case opts.MaxElements < MinMaxElements || opts.MaxElements > MaxMaxElements:
		return nil, fmt.Errorf("%w: MaxElements %d outside [%d, %d]", ErrInvalidOptions, opts.MaxElements, MinMaxElements, MaxMaxElements)
	}
	base := cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:  opts.MaxDepth,
		MaxArrayElements: opts.MaxElements,
		MaxMapPairs:      opts.MaxElements,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		IntDec:           cbor.IntDecConvertNone,
		UTF8:             cbor.UTF8RejectInvalid,
		NaN:              cbor.NaNDecodeForbidden,
	}
	d := &Decoder{opts: opts}
	var err error
	strict := base
	if opts.DisallowUnknownFields {
		strict.ExtraReturnErrors = cbor.ExtraDecErrorUnknownField
	}
	if d.strict, err = strict.DecMode(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	lenient := base
	lenient.IndefLength = cbor.IndefLengthAllowed
	if d.lenient, err = lenient.DecMode(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	env := base
	env.ExtraReturnErrors = cbor.ExtraDecErrorUnknownField
	if d.env, err = env.DecMode(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	return d, nil
}

// Options returns the decoder's effective options (defaults filled in).
func (d *Decoder) Options() DecoderOptions { return d.get().opts }

// defaultDecoder and encMode are built once and never mutated.
var (
	defaultDecoder = mustDecoder(NewDecoder(DecoderOptions{}))
	encMode        = mustEncMode()
)

func mustDecoder(d *Decoder, err error) *Decoder {
	if err != nil {
		panic(err) // only reachable if the constant defaults are invalid
	}
	return d
}

func mustEncMode() cbor.EncMode {
	opts := cbor.CoreDetEncOptions()
	opts.TagsMd = cbor.TagsForbidden
	opts.NaNConvert = cbor.NaNConvertReject
	opts.Time = cbor.TimeRFC3339NanoUTC
	em, err := opts.EncMode()
	if err != nil {
		panic(err) // only reachable if the constant options are invalid
	}
	return em
}

func (d *Decoder) get() *Decoder {
	if d == nil || d.strict == nil {
		return defaultDecoder
	}
	return d
}

// Marshal returns the canonical CBOR encoding of v (see "Canonical CBOR
// profile" in the package documentation), or an *EncodeError.
//
// Values that implement cbor.Marshaler, cbor.RawMessage included, are
// trusted to return canonical CBOR: Marshal checks that their output is
// well-formed and in profile but does not re-canonicalise it. Pass such
// bytes through Canonicalize first if they come from elsewhere.
func Marshal(v any) ([]byte, error) {
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, &EncodeError{Err: err}
	}
	if err := checkProfile(b); err != nil {
		return nil, &EncodeError{Err: err}
	}
	return b, nil
}

// Unmarshal decodes data into v with the default Decoder.
func Unmarshal(data []byte, v any) error { return defaultDecoder.Unmarshal(data, v) }

// IsCanonical reports, with the default Decoder, whether data is exactly the
// canonical encoding of the value it denotes.
func IsCanonical(data []byte) error { return defaultDecoder.IsCanonical(data) }

// Canonicalize returns, with the default Decoder, the canonical encoding of
// the value data denotes.
func Canonicalize(data []byte) ([]byte, error) { return defaultDecoder.Canonicalize(data) }

// Unmarshal decodes one CBOR data item from untrusted data into v, which must
// be a non-nil pointer. It enforces the decoder's limits and rejects
// duplicate keys, indefinite lengths, tags, NaN, invalid UTF-8 and trailing
// bytes. It does not require canonical input (see IsCanonical).
//
// On error *v is untouched: decoding goes into a fresh value that replaces *v
// only on success. So the result never merges with what *v held before
// (unlike encoding/json): maps and structs are replaced, not updated.
//
// Every error is a *DecodeError. Unmarshal does not panic on any input; a
// panic from a destination's own UnmarshalCBOR method is not recovered.
func (d *Decoder) Unmarshal(data []byte, v any) error {
	d = d.get()
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return &DecodeError{Kind: KindInvalidTarget, Err: fmt.Errorf("need a non-nil pointer, got %T", v)}
	}
	if err := d.checkSize(data); err != nil {
		return err
	}
	fresh := reflect.New(rv.Type().Elem())
	if err := d.strict.Unmarshal(data, fresh.Interface()); err != nil {
		return d.decodeErr(d.strict, data, err)
	}
	rv.Elem().Set(fresh.Elem())
	return nil
}

// IsCanonical returns nil if data is exactly the canonical encoding of the
// value it denotes, and a *DecodeError otherwise: any Unmarshal error, or
// ErrNotCanonical (with Offset at the first byte that differs) for
// well-formed input with a non-shortest integer, length or float, unsorted
// map keys, or the simple value undefined.
func (d *Decoder) IsCanonical(data []byte) error {
	d = d.get()
	if d.canonicalAlready(data) {
		return nil
	}
	canon, err := d.canonical(d.strict, data)
	if err != nil {
		return err
	}
	if !bytes.Equal(canon, data) {
		return &DecodeError{Kind: KindNotCanonical, Offset: firstDiff(canon, data)}
	}
	return nil
}

// Canonicalize decodes data and returns the canonical encoding of its value.
// It is IsCanonical's repair: it accepts indefinite-length items (and
// everything else IsCanonical would call ErrNotCanonical) but still rejects
// duplicate keys, since which duplicate wins is not defined. The input is
// never modified; the result is a new slice.
func (d *Decoder) Canonicalize(data []byte) ([]byte, error) {
	d = d.get()
	if d.canonicalAlready(data) {
		// Canonical already (the common case: our own encoder wrote it):
		// a copy, without decoding and encoding it again.
		return bytes.Clone(data), nil
	}
	return d.canonical(d.lenient, data)
}

func (d *Decoder) canonical(dm cbor.DecMode, data []byte) ([]byte, error) {
	if err := d.checkSize(data); err != nil {
		return nil, err
	}
	var v any
	if err := dm.Unmarshal(data, &v); err != nil {
		return nil, d.decodeErr(dm, data, err)
	}
	canon, err := encMode.Marshal(v)
	if err != nil {
		// Decoded values always re-encode; keep the error typed regardless.
		return nil, &DecodeError{Kind: KindUnsupported, Err: err}
	}
	return canon, nil
}

// canonicalAlready reports whether data is, for certain, canonical within
// the decoder's limits (fastCanonical): no decoding needed to say so.
func (d *Decoder) canonicalAlready(data []byte) bool {
	return d.checkSize(data) == nil && fastCanonical(data, d.opts.MaxDepth, d.opts.MaxElements)
}

func (d *Decoder) checkSize(data []byte) error {
	if len(data) > d.opts.MaxSize {
		return &DecodeError{Kind: KindTooLarge, Limit: d.opts.MaxSize, Size: len(data)}
	}
	return nil
}

// decodeErr classifies an error of dm.Unmarshal(data, ...). The library
// checks well-formedness and limits before it decodes, but some of those
// errors are untyped; re-running the check (only on the error path) tells a
// structural failure from one found while filling the destination.
func (d *Decoder) decodeErr(dm cbor.DecMode, data []byte, err error) *DecodeError {
	if werr := dm.Wellformed(data); werr != nil {
		return d.classify(werr, KindMalformed)
	}
	return d.classify(err, KindType)
}

// classify maps the CBOR library's errors onto DecodeError kinds; errors it
// does not recognise get fallback.
func (d *Decoder) classify(err error, fallback DecodeErrorKind) *DecodeError {
	var (
		syntaxErr    *cbor.SyntaxError
		semanticErr  *cbor.SemanticError
		depthErr     *cbor.MaxNestedLevelError
		arrayErr     *cbor.MaxArrayElementsError
		mapErr       *cbor.MaxMapPairsError
		indefErr     *cbor.IndefiniteLengthError
		tagsErr      *cbor.TagsMdError
		extraErr     *cbor.ExtraneousDataError
		dupErr       *cbor.DupMapKeyError
		keyTypeErr   *cbor.InvalidMapKeyTypeError
		unaccept     cbor.UnacceptableDataItemError
		unacceptPtr  *cbor.UnacceptableDataItemError
		typeErr      *cbor.UnmarshalTypeError
		unknownErr   *cbor.UnknownFieldError
		invalidTgt   *cbor.InvalidUnmarshalError
		alreadyTyped *DecodeError
	)
	switch {
	case errors.As(err, &alreadyTyped):
		// A nested Timestamp or Envelope UnmarshalCBOR already classified it.
		return alreadyTyped
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &syntaxErr), errors.As(err, &semanticErr):
		return &DecodeError{Kind: KindMalformed, Err: err}
	case errors.As(err, &depthErr):
		return &DecodeError{Kind: KindTooDeep, Limit: d.opts.MaxDepth, Err: err}
	case errors.As(err, &arrayErr), errors.As(err, &mapErr):
		return &DecodeError{Kind: KindTooManyElements, Limit: d.opts.MaxElements, Err: err}
	case errors.As(err, &indefErr):
		return &DecodeError{Kind: KindIndefiniteLength, Err: err}
	case errors.As(err, &extraErr):
		return &DecodeError{Kind: KindTrailing, Err: err}
	case errors.As(err, &dupErr):
		return &DecodeError{Kind: KindDuplicateKey, Err: err}
	case errors.As(err, &tagsErr), errors.As(err, &keyTypeErr),
		errors.As(err, &unaccept), errors.As(err, &unacceptPtr):
		return &DecodeError{Kind: KindUnsupported, Err: err}
	case errors.As(err, &invalidTgt):
		return &DecodeError{Kind: KindInvalidTarget, Err: err}
	case errors.As(err, &typeErr), errors.As(err, &unknownErr):
		return &DecodeError{Kind: KindType, Err: err}
	default:
		// An untyped structural error from the library (fallback
		// KindMalformed), or an error from a destination's UnmarshalCBOR
		// (fallback KindType).
		return &DecodeError{Kind: fallback, Err: err}
	}
}

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// checkProfile walks encoder output and rejects what the CBOR library's
// encoder lets through but this profile and the decoder refuse: tags (the
// library tags big integers even with tags forbidden) and text strings that
// are not valid UTF-8 (the library does not check Go strings). It is
// iterative, so depth costs nothing, and bounds-checked, so it cannot panic.
func checkProfile(b []byte) error {
	pending := 1
	for pending > 0 {
		major, arg, n, err := readHead(b)
		if err != nil {
			return err
		}
		b = b[n:]
		pending--
		switch major {
		case 2, 3:
			if arg > uint64(len(b)) {
				return errors.New("truncated string")
			}
			if major == 3 && !utf8.Valid(b[:arg]) {
				return errors.New("text string is not valid UTF-8")
			}
			b = b[arg:]
		case 4, 5:
			if major == 5 {
				if arg > uint64(len(b))/2 {
					return errors.New("truncated map")
				}
				arg *= 2
			}
			if arg > uint64(len(b)) {
				return errors.New("truncated array")
			}
			pending += int(arg)
		case 6:
			return errors.New("tags are not allowed (integer out of the 64-bit CBOR range?)")
		}
	}
	if len(b) != 0 {
		return errors.New("trailing bytes")
	}
	return nil
}

// readHead parses the initial byte and argument of a definite-length item.
// For major type 7 the argument is the simple value or float bits.
func readHead(b []byte) (major byte, arg uint64, n int, err error) {
	if len(b) == 0 {
		return 0, 0, 0, errors.New("truncated")
	}
	major, ai := b[0]>>5, b[0]&0x1f
	switch {
	case ai < 24:
		return major, uint64(ai), 1, nil
	case ai <= 27:
		size := 1 << (ai - 24)
		if len(b) < 1+size {
			return 0, 0, 0, errors.New("truncated head")
		}
		for _, c := range b[1 : 1+size] {
			arg = arg<<8 | uint64(c)
		}
		return major, arg, 1 + size, nil
	default:
		return 0, 0, 0, errors.New("reserved or indefinite-length head")
	}
}

// appendHead appends a shortest-form CBOR head.
func appendHead(dst []byte, major byte, arg uint64) []byte {
	m := major << 5
	switch {
	case arg < 24:
		return append(dst, m|byte(arg))
	case arg <= math.MaxUint8:
		return append(dst, m|24, byte(arg))
	case arg <= math.MaxUint16:
		return append(dst, m|25, byte(arg>>8), byte(arg))
	case arg <= math.MaxUint32:
		return append(dst, m|26, byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	default:
		return append(dst, m|27, byte(arg>>56), byte(arg>>48), byte(arg>>40), byte(arg>>32),
			byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	}
}

// appendInt appends n as a shortest-form CBOR integer.
func appendInt(dst []byte, n int64) []byte {
	if n >= 0 {
		return appendHead(dst, 0, uint64(n))
	}
	return appendHead(dst, 1, ^uint64(n)) // -1-n
}

// The instants an int64 of Unix nanoseconds can hold:
// 1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z.
var (
	minUnixNano = time.Unix(0, math.MinInt64)
	maxUnixNano = time.Unix(0, math.MaxInt64)
)

// MinTime and MaxTime bound every instant Orrery stores or schedules: a
// little inside what an int64 of Unix nanoseconds can hold, so a time in
// range stays in range after a clock offset of a few months. The store
// refuses anything outside (store.MinTime and MaxTime are these), and the
// kernel and workflows refuse it before they turn a duration into an
// instant.
var (
	MinTime = time.Unix(MinTimeUnix, 0).UTC()
	MaxTime = time.Unix(MaxTimeUnix, 0).UTC()
)

// ErrTimeRange matches encoding errors for a time outside the int64
// Unix-nanosecond range.
var ErrTimeRange = errors.New("event: time outside the int64 Unix-nanosecond range (1677-09-21 to 2262-04-11)")

func unixNano(t time.Time) (int64, error) {
	if t.Before(minUnixNano) || t.After(maxUnixNano) {
		return 0, ErrTimeRange
	}
	return t.UnixNano(), nil
}

// Timestamp is a time.Time that encodes as a CBOR integer of Unix
// nanoseconds, the form this package uses for every instant. The zero
// Timestamp encodes as null; null decodes to the zero Timestamp. Decoded
// Timestamps are in UTC with no monotonic reading. Instants outside
// 1677-09-21..2262-04-11 fail to encode with ErrTimeRange.
type Timestamp struct{ time.Time }

// MarshalCBOR implements cbor.Marshaler.
func (t Timestamp) MarshalCBOR() ([]byte, error) {
	if t.IsZero() {
		return []byte{0xf6}, nil
	}
	n, err := unixNano(t.Time)
	if err != nil {
		return nil, &EncodeError{Err: err}
	}
	return appendInt(make([]byte, 0, 9), n), nil
}

// UnmarshalCBOR implements cbor.Unmarshaler. It accepts null or an integer;
// on error t is untouched.
func (t *Timestamp) UnmarshalCBOR(data []byte) error {
	if len(data) == 1 && data[0] == 0xf6 {
		*t = Timestamp{}
		return nil
	}
	var n int64
	if err := defaultDecoder.Unmarshal(data, &n); err != nil {
		return err
	}
	*t = Timestamp{time.Unix(0, n).UTC()}
	return nil
}
