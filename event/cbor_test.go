package event

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"pgregory.net/rapid"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := Marshal(v)
	if err != nil {
		t.Fatalf("Marshal(%#v): %v", v, err)
	}
	return b
}

func wantKind(t testing.TB, err error, kind DecodeErrorKind) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
	}
	if de.Kind != kind {
		t.Fatalf("kind %v (%v), want %v", de.Kind, err, kind)
	}
	if !errors.Is(err, kindSentinels[kind]) {
		t.Fatalf("errors.Is(%v, %v) = false", err, kindSentinels[kind])
	}
}

// Core Deterministic Encoding: shortest integers, lengths and floats,
// bytewise-sorted map keys, definite lengths.
func TestMarshalCoreDeterministic(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"int 0", 0, "00"},
		{"int 23", 23, "17"},
		{"int 24", 24, "1818"},
		{"int 255", uint8(255), "18ff"},
		{"int 256", int64(256), "190100"},
		{"int 65536", 65536, "1a00010000"},
		{"int 2^32", uint64(1) << 32, "1b0000000100000000"},
		{"int -1", -1, "20"},
		{"int -25", -25, "3818"},
		{"min int64", int64(math.MinInt64), "3b7fffffffffffffff"},
		{"max uint64", uint64(math.MaxUint64), "1bffffffffffffffff"},
		{"float 1.5 -> half", 1.5, "f93e00"},
		{"float 100000 -> single", 100000.0, "fa47c35000"},
		{"float 1.1 -> double", 1.1, "fb3ff199999999999a"},
		{"float 0", 0.0, "f90000"},
		{"float -0", math.Copysign(0, -1), "f98000"},
		{"+Inf", math.Inf(1), "f97c00"},
		{"text", "a", "6161"},
		{"bytes", []byte{1, 2}, "420102"},
		{"empty bytes", []byte{}, "40"},
		{"nil slice is null", []int(nil), "f6"},
		{"empty slice", []int{}, "80"},
		{"map keys sorted", map[string]int{"b": 1, "a": 2}, "a2 6161 02 6162 01"},
		// Bytewise order of the encoded keys, not length-first: 24 is
		// 0x18 0x18 and sorts before -1, which is 0x20.
		{"bytewise not length-first", map[int]int{-1: 0, 24: 0}, "a2 1818 00 20 00"},
		{"struct fields sorted", struct {
			B int `cbor:"b"`
			A int `cbor:"a"`
		}{1, 2}, "a2 6161 02 6162 01"},
		{"bool, null", []any{true, false, nil}, "83 f5 f4 f6"},
		{"long text length 24", strings.Repeat("x", 24), "7818" + strings.Repeat("78", 24)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := mustMarshal(t, c.v)
			if want := unhex(t, c.want); !bytes.Equal(got, want) {
				t.Fatalf("Marshal = %x, want %x", got, want)
			}
			if err := IsCanonical(got); err != nil {
				t.Fatalf("IsCanonical(Marshal) = %v", err)
			}
		})
	}
}

// Times are int64 Unix nanoseconds (Timestamp); a bare time.Time falls back
// to lossless RFC 3339 text in UTC because the library has no integer mode.
func TestMarshalTimesAsUnixNanoseconds(t *testing.T) {
	ts := Timestamp{time.Unix(1, 5)}
	got := mustMarshal(t, ts)
	if want := appendInt(nil, 1_000_000_005); !bytes.Equal(got, want) {
		t.Fatalf("Timestamp encodes as %x, want %x (int 1000000005)", got, want)
	}
	if want := unhex(t, "1a3b9aca05"); !bytes.Equal(got, want) {
		t.Fatalf("Timestamp encodes as %x, want %x", got, want)
	}
	before := mustMarshal(t, Timestamp{time.Unix(0, -1)})
	if !bytes.Equal(before, unhex(t, "20")) {
		t.Fatalf("1ns before the epoch encodes as %x, want 20", before)
	}
	if got := mustMarshal(t, Timestamp{}); !bytes.Equal(got, []byte{0xf6}) {
		t.Fatalf("zero Timestamp encodes as %x, want f6", got)
	}
	type rec struct {
		At Timestamp `cbor:"at"`
	}
	at := time.Date(2026, 2, 16, 12, 0, 0, 123456789, time.FixedZone("X", 3600))
	b := mustMarshal(t, rec{Timestamp{at}})
	var back rec
	if err := Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.At.Equal(at) || back.At.Location() != time.UTC {
		t.Fatalf("round trip: %v, want %v in UTC", back.At, at)
	}
	var zero rec
	if err := Unmarshal(mustMarshal(t, rec{}), &zero); err != nil || !zero.At.IsZero() {
		t.Fatalf("zero round trip: %v %v", zero.At, err)
	}
	// Sub-second precision survives, unlike the library's default TimeUnix.
	if back.At.Nanosecond() != 123456789 {
		t.Fatalf("nanoseconds lost: %d", back.At.Nanosecond())
	}
	if _, err := Marshal(Timestamp{time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}); !errors.Is(err, ErrEncode) || !errors.Is(err, ErrTimeRange) {
		t.Fatalf("year 2300: %v, want ErrEncode and ErrTimeRange", err)
	}
	var bad rec
	if err := Unmarshal(unhex(t, "a1 626174 6161"), &bad); err == nil {
		t.Fatal("text decoded into a Timestamp")
	}
	if err := Unmarshal(unhex(t, "a1 626174 f93e00"), &bad); err == nil {
		t.Fatal("float decoded into a Timestamp")
	}

	bare := mustMarshal(t, time.Unix(1, 5))
	if want := append([]byte{0x78, 0x1e}, "1970-01-01T00:00:01.000000005Z"...); !bytes.Equal(bare, want) {
		t.Fatalf("bare time.Time encodes as %x, want %x", bare, want)
	}
}

func TestMarshalRejectsValuesOutsideProfile(t *testing.T) {
	huge := new(big.Int).Lsh(big.NewInt(1), 64)
	for name, v := range map[string]any{
		"invalid UTF-8":         "a\xffb",
		"invalid UTF-8 map key": map[string]int{"\xff": 1},
		"bignum needs a tag":    huge,
		"NaN":                   math.NaN(),
		"channel":               make(chan int),
		"cbor.Tag":              cbor.Tag{Number: 1, Content: 0},
		"indefinite RawMessage": cbor.RawMessage{0x9f, 0xff},
		"malformed RawMessage":  cbor.RawMessage{0x18},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := Marshal(v)
			if err == nil {
				t.Fatalf("Marshal = %x, want an error", b)
			}
			var ee *EncodeError
			if !errors.As(err, &ee) || !errors.Is(err, ErrEncode) {
				t.Fatalf("error %v (%T) is not an *EncodeError", err, err)
			}
		})
	}
	// A big.Int that fits the 64-bit CBOR range is an ordinary integer.
	neg := new(big.Int).Neg(huge) // -2^64, the most negative CBOR integer
	if got := mustMarshal(t, neg); !bytes.Equal(got, unhex(t, "3bffffffffffffffff")) {
		t.Fatalf("-2^64 encodes as %x", got)
	}
}

func TestDecoderLimits(t *testing.T) {
	d, err := NewDecoder(DecoderOptions{MaxSize: 64, MaxDepth: 4, MaxElements: 16})
	if err != nil {
		t.Fatal(err)
	}
	if o := d.Options(); o.MaxSize != 64 || o.MaxDepth != 4 || o.MaxElements != 16 {
		t.Fatalf("Options = %+v", o)
	}
	nest := func(n int) []byte { return append(bytes.Repeat([]byte{0x81}, n), 0x00) }
	var v any
	if err := d.Unmarshal(nest(4), &v); err != nil {
		t.Fatalf("depth 4: %v", err)
	}
	err = d.Unmarshal(nest(5), &v)
	wantKind(t, err, KindTooDeep)
	if err.(*DecodeError).Limit != 4 {
		t.Fatalf("Limit = %d", err.(*DecodeError).Limit)
	}
	mapNest := func(n int) []byte { return append(bytes.Repeat([]byte{0xa1, 0x00}, n), 0x00) }
	wantKind(t, d.Unmarshal(mapNest(5), &v), KindTooDeep)

	arr := func(n int) []byte { return append([]byte{0x80 | 24, byte(n)}, make([]byte, n)...) }
	if err := d.Unmarshal(arr(16), &v); err != nil {
		t.Fatalf("16 elements: %v", err)
	}
	wantKind(t, d.Unmarshal(arr(17), &v), KindTooManyElements)
	m := []byte{0xb8, 17}
	for i := range 17 {
		m = append(m, byte(i), 0)
	}
	wantKind(t, d.Unmarshal(m, &v), KindTooManyElements)

	err = d.Unmarshal(make([]byte, 65), &v)
	wantKind(t, err, KindTooLarge)
	if de := err.(*DecodeError); de.Limit != 64 || de.Size != 65 {
		t.Fatalf("TooLarge fields: %+v", de)
	}
	wantKind(t, d.IsCanonical(make([]byte, 65)), KindTooLarge)
	_, err = d.DecodeEnvelope(make([]byte, 65))
	wantKind(t, err, KindTooLarge)
	_, err = d.Canonicalize(make([]byte, 65))
	wantKind(t, err, KindTooLarge)

	// Defaults.
	var zero Decoder
	if o := zero.Options(); o.MaxSize != DefaultMaxSize || o.MaxDepth != DefaultMaxDepth || o.MaxElements != DefaultMaxElements {
		t.Fatalf("zero Decoder options = %+v", o)
	}
	var nilDec *Decoder
	wantKind(t, nilDec.Unmarshal(make([]byte, DefaultMaxSize+1), &v), KindTooLarge)
	wantKind(t, zero.Unmarshal(nest(DefaultMaxDepth+1), &v), KindTooDeep)
	if err := zero.Unmarshal(nest(DefaultMaxDepth), &v); err != nil {
		t.Fatalf("default depth %d: %v", DefaultMaxDepth, err)
	}
}

func TestNewDecoderRejectsBadOptions(t *testing.T) {
	for _, o := range []DecoderOptions{
		{MaxSize: -1},
		{MaxDepth: 3},
		{MaxDepth: MaxMaxDepth + 1},
		{MaxElements: 15},
		{MaxElements: -5},
	} {
		if _, err := NewDecoder(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewDecoder(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestUnmarshalTypedErrors(t *testing.T) {
	var v any
	for _, c := range []struct {
		name string
		in   string
		kind DecodeErrorKind
	}{
		{"empty", "", KindMalformed},
		{"truncated head", "18", KindMalformed},
		{"truncated string", "6461", KindMalformed},
		{"reserved additional info", "1c", KindMalformed},
		{"lone break", "ff", KindMalformed},
		{"invalid UTF-8 text", "62c328", KindMalformed},
		{"huge byte string length", "5bffffffffffffffff", KindMalformed},
		{"huge text length", "7b7fffffffffffffff", KindMalformed},
		{"huge array count", "9bffffffffffffffff", KindMalformed},
		{"huge map count", "bb00000000ffffffff", KindTooManyElements},
		{"trailing bytes", "0000", KindTrailing},
		{"duplicate key", "a2 6161 01 6161 02", KindDuplicateKey},
		{"duplicate int key", "a2 01 01 01 02", KindDuplicateKey},
		{"duplicate key, nested", "81 a2 00 00 00 00", KindDuplicateKey},
		{"indefinite array", "9f 01 ff", KindIndefiniteLength},
		{"indefinite map", "bf 6161 01 ff", KindIndefiniteLength},
		{"indefinite text", "7f 6161 ff", KindIndefiniteLength},
		{"indefinite bytes", "5f 4101 ff", KindIndefiniteLength},
		{"tag", "c1 00", KindUnsupported},
		{"bignum tag", "c2 41 01", KindUnsupported},
		{"NaN half", "f97e00", KindUnsupported},
		{"NaN double", "fb7ff8000000000001", KindUnsupported},
		{"array as map key", "a1 80 00", KindUnsupported},
		{"bignum as map key", "a1 3bffffffffffffffff 00", KindUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := unhex(t, c.in)
			wantKind(t, Unmarshal(in, &v), c.kind)
			// IsCanonical reports the same failure.
			wantKind(t, IsCanonical(in), c.kind)
		})
	}

	var n uint8
	wantKind(t, Unmarshal(unhex(t, "190100"), &n), KindType) // 256 overflows uint8
	var s string
	wantKind(t, Unmarshal(unhex(t, "01"), &s), KindType)
	wantKind(t, Unmarshal(unhex(t, "4161"), &s), KindType) // bytes into string
	wantKind(t, Unmarshal(unhex(t, "00"), nil), KindInvalidTarget)
	wantKind(t, Unmarshal(unhex(t, "00"), n), KindInvalidTarget)
	var np *int
	wantKind(t, Unmarshal(unhex(t, "00"), np), KindInvalidTarget)

	type strictT struct {
		A int `cbor:"a"`
	}
	strict, err := NewDecoder(DecoderOptions{DisallowUnknownFields: true})
	if err != nil {
		t.Fatal(err)
	}
	var st strictT
	in := unhex(t, "a2 6161 01 6162 02")
	if err := Unmarshal(in, &st); err != nil || st.A != 1 {
		t.Fatalf("lenient decoder: %v %+v", err, st)
	}
	wantKind(t, strict.Unmarshal(in, &st), KindType)
}

// Bad input loses nothing: on error the destination keeps its old value,
// even for failures the library only finds halfway through decoding.
func TestUnmarshalLeavesDestinationUntouchedOnError(t *testing.T) {
	m := map[string]int{"keep": 1}
	if err := Unmarshal(unhex(t, "a2 6161 01 6161 02"), &m); err == nil {
		t.Fatal("duplicate key accepted")
	}
	if !reflect.DeepEqual(m, map[string]int{"keep": 1}) {
		t.Fatalf("map changed on error: %v", m)
	}
	type rec struct {
		A int    `cbor:"a"`
		B string `cbor:"b"`
	}
	r := rec{A: 7, B: "old"}
	// a decodes fine, then b has the wrong type.
	if err := Unmarshal(unhex(t, "a2 6161 01 6162 02"), &r); err == nil {
		t.Fatal("type mismatch accepted")
	}
	if r != (rec{A: 7, B: "old"}) {
		t.Fatalf("struct changed on error: %+v", r)
	}
	var ts Timestamp
	old := Timestamp{time.Unix(5, 0)}
	ts = old
	if err := Unmarshal(unhex(t, "6161"), &ts); err == nil || !ts.Equal(old.Time) {
		t.Fatalf("Timestamp changed on error: %v %v", ts, err)
	}
	// Success replaces rather than merges.
	if err := Unmarshal(unhex(t, "a1 6162 02"), &m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, map[string]int{"b": 2}) {
		t.Fatalf("success merged instead of replacing: %v", m)
	}
}

func TestIsCanonicalAndCanonicalize(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    string
		canon string // "" when in is canonical
		kind  DecodeErrorKind
	}{
		{"small int", "17", "", 0},
		{"int in two bytes", "1817", "17", KindNotCanonical},
		{"int in nine bytes", "1b0000000000000001", "01", KindNotCanonical},
		{"negative int padded", "3800", "20", KindNotCanonical},
		{"length padded", "5801ff", "41ff", KindNotCanonical},
		{"array length padded", "980100", "8100", KindNotCanonical},
		{"float 1.5 as double", "fb3ff8000000000000", "f93e00", KindNotCanonical},
		{"float 1.5 as single", "fa3fc00000", "f93e00", KindNotCanonical},
		{"float 1.1 double", "fb3ff199999999999a", "", 0},
		{"map keys unsorted", "a2 6162 01 6161 02", "a2 6161 02 6162 01", KindNotCanonical},
		{"map keys length-first order", "a2 20 00 1818 00", "a2 1818 00 20 00", KindNotCanonical},
		{"undefined becomes null", "f7", "f6", KindNotCanonical},
		{"most negative integer", "3bffffffffffffffff", "", 0},
		{"simple value 16", "f0", "", 0},
		{"simple value 255", "f8ff", "", 0},
		{"byte-string map key", "a1 4161 00", "", 0},
		{"nested", "a2 6161 82 01 f93e00 6162 a0", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := unhex(t, c.in)
			err := IsCanonical(in)
			if c.canon == "" {
				if err != nil {
					t.Fatalf("IsCanonical = %v, want nil", err)
				}
			} else {
				wantKind(t, err, c.kind)
				want := unhex(t, c.canon)
				if off := err.(*DecodeError).Offset; off != firstDiff(want, in) {
					t.Fatalf("Offset %d, want %d", off, firstDiff(want, in))
				}
			}
			got, err := Canonicalize(in)
			if err != nil {
				t.Fatal(err)
			}
			want := in
			if c.canon != "" {
				want = unhex(t, c.canon)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Canonicalize = %x, want %x", got, want)
			}
			if err := IsCanonical(got); err != nil {
				t.Fatalf("Canonicalize output not canonical: %v", err)
			}
		})
	}
	// Canonicalize repairs indefinite lengths but not duplicate keys.
	got, err := Canonicalize(unhex(t, "9f 7f 6161 6162 ff ff"))
	if err != nil || !bytes.Equal(got, unhex(t, "81 62 6162")) {
		t.Fatalf("Canonicalize(indefinite) = %x, %v", got, err)
	}
	_, err = Canonicalize(unhex(t, "a2 6161 01 6161 02"))
	wantKind(t, err, KindDuplicateKey)
	in := unhex(t, "1817")
	_, _ = Canonicalize(in)
	if !bytes.Equal(in, unhex(t, "1817")) {
		t.Fatal("Canonicalize modified its input")
	}
}

// cborValue generates values of the CBOR data model as Unmarshal into any
// returns them (so the round trip can be compared with reflect.DeepEqual).
func cborValue() *rapid.Generator[any] {
	return cborValueDepth(3)
}

func cborValueDepth(depth int) *rapid.Generator[any] {
	scalars := []*rapid.Generator[any]{
		rapid.Map(rapid.Uint64(), func(v uint64) any { return v }),
		rapid.Map(rapid.Int64Max(-1), func(v int64) any { return v }),
		rapid.Map(rapid.Float64(), func(v float64) any { return v }),
		rapid.Map(rapid.SampledFrom([]float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), 1.5, 65504, 1e300}), func(v float64) any { return v }),
		rapid.Map(rapid.String(), func(v string) any { return v }),
		rapid.Map(rapid.SliceOf(rapid.Byte()), func(v []byte) any { return v }),
		rapid.Map(rapid.Bool(), func(v bool) any { return v }),
		rapid.Just[any](nil),
	}
	if depth == 0 {
		return rapid.OneOf(scalars...)
	}
	inner := rapid.Deferred(func() *rapid.Generator[any] { return cborValueDepth(depth - 1) })
	key := rapid.OneOf(
		rapid.Map(rapid.String(), func(v string) any { return v }),
		rapid.Map(rapid.Uint64Range(0, 1000), func(v uint64) any { return v }),
		rapid.Map(rapid.Int64Range(-1000, -1), func(v int64) any { return v }),
	)
	return rapid.OneOf(append(scalars,
		rapid.Map(rapid.SliceOfN(inner, 0, 5), func(v []any) any { return v }),
		rapid.Map(rapid.MapOfN(key, inner, 0, 5), func(v map[any]any) any { return v }),
	)...)
}

func TestMarshalRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := cborValue().Draw(t, "v")
		b, err := Marshal(v)
		if err != nil {
			t.Fatalf("Marshal(%#v): %v", v, err)
		}
		if err := IsCanonical(b); err != nil {
			t.Fatalf("Marshal output %x not canonical: %v", b, err)
		}
		var back any
		if err := Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%x): %v", b, err)
		}
		if !reflect.DeepEqual(normaliseEmpty(v), normaliseEmpty(back)) {
			t.Fatalf("round trip\n got %#v\nwant %#v", back, v)
		}
		b2, err := Marshal(back)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding differs: %x vs %x (%v)", b, b2, err)
		}
	})
}

// normaliseEmpty maps the Go-side distinctions CBOR does not carry (nil vs
// empty byte slice from the generator) onto one form.
func normaliseEmpty(v any) any {
	switch x := v.(type) {
	case []byte:
		if x == nil {
			return []byte{}
		}
	case []any:
		if x == nil {
			return []any{}
		}
		out := make([]any, len(x))
		for i := range x {
			out[i] = normaliseEmpty(x[i])
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(x))
		for k, e := range x {
			out[k] = normaliseEmpty(e)
		}
		return out
	}
	return v
}

type fuzzStruct struct {
	A  uint64            `cbor:"a"`
	B  string            `cbor:"b"`
	C  []byte            `cbor:"c"`
	D  map[string]int64  `cbor:"d"`
	E  []fuzzStruct      `cbor:"e"`
	F  *float64          `cbor:"f"`
	T  Timestamp         `cbor:"t"`
	K  map[uint64]string `cbor:"1,keyasint"`
	Em *Envelope         `cbor:"env"`
}

func cborFuzzSeeds(f *testing.F) {
	deep := func(n int) []byte { return append(bytes.Repeat([]byte{0x81}, n), 0x00) }
	for _, s := range []string{
		"", "00", "17", "1817", "1b0000000000000001", "3bffffffffffffffff", "20",
		"f93e00", "fb3ff8000000000000", "f97e00", "f97c00", "f98000", "f7", "f6", "f0", "f818", "f8ff",
		"6161", "62c328", "4161", "5bffffffffffffffff", "7b7fffffffffffffff", "9bffffffffffffffff",
		"bb00000000ffffffff", "9f01ff", "bf616101ff", "7f6161ff", "5f4101ff", "9f9f9fffffff",
		"a2616101616102", "a2616201616102", "a2203018180", "a1800001", "a1a0a0", "a13bffffffffffffffff01",
		"c100", "c24101", "d9d9f700", "0000", "ff", "1c", "a2f90000 01 f98000 02",
		"a5 6161 01 6162 6178 6163 4101 6164 a1 6178 20 6174 1a3b9aca05",
	} {
		b, _ := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		f.Add(b)
	}
	f.Add(deep(DefaultMaxDepth))
	f.Add(deep(DefaultMaxDepth + 1))
	f.Add(deep(200))
	f.Add(bytes.Repeat([]byte{0xbf}, 100))
	f.Add(append([]byte{0x99, 0xff, 0xff}, make([]byte, 100)...))
}

func FuzzUnmarshal(f *testing.F) {
	cborFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		var v any
		err := Unmarshal(data, &v)
		canonErr := IsCanonical(data)
		canon, canonicalizeErr := Canonicalize(data)
		if !bytes.Equal(data, orig) {
			t.Fatal("decoding modified its input")
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Kind == KindNotCanonical || de.Kind == KindInvalidTarget || !errors.Is(err, kindSentinels[de.Kind]) {
				t.Fatalf("untyped or wrong error %v (%T)", err, err)
			}
			if v != nil {
				t.Fatalf("destination written on error: %#v", v)
			}
			if canonErr == nil {
				t.Fatalf("IsCanonical accepts what Unmarshal rejects (%v)", err)
			}
			if de.Kind != KindIndefiniteLength && canonicalizeErr == nil {
				t.Fatalf("Canonicalize accepts what Unmarshal rejects (%v)", err)
			}
		} else {
			b, err := Marshal(v)
			if err != nil {
				t.Fatalf("decoded value %#v does not re-encode: %v", v, err)
			}
			if err := IsCanonical(b); err != nil {
				t.Fatalf("re-encoding %x not canonical: %v", b, err)
			}
			var v2 any
			if err := Unmarshal(b, &v2); err != nil {
				t.Fatalf("re-encoding does not decode: %v", err)
			}
			if !reflect.DeepEqual(v, v2) {
				t.Fatalf("round trip changed the value:\n%#v\n%#v", v, v2)
			}
			if b2, _ := Marshal(v2); !bytes.Equal(b, b2) {
				t.Fatalf("second re-encoding differs")
			}
			if (canonErr == nil) != bytes.Equal(b, data) {
				t.Fatalf("IsCanonical = %v but canonical bytes %x vs input %x", canonErr, b, data)
			}
			if canonicalizeErr != nil || !bytes.Equal(canon, b) {
				t.Fatalf("Canonicalize = %x, %v; want %x", canon, canonicalizeErr, b)
			}
		}
		var s fuzzStruct
		if err := Unmarshal(data, &s); err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("struct decode: untyped error %v (%T)", err, err)
			}
			if !reflect.DeepEqual(s, fuzzStruct{}) {
				t.Fatalf("struct destination written on error")
			}
		}
	})
}
