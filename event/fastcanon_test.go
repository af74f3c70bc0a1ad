package event

import (
	"bytes"
	"testing"
)

// TestFastCanonicalAcceptsOurEncodingsAndRefusesTheRest: the fast path
// says yes to what the encoder writes for the common values, and no (take
// the decoder's path) to everything that is not canonical or that it does
// not follow, so Canonicalize and IsCanonical answer as before.
func TestFastCanonicalAcceptsOurEncodingsAndRefusesTheRest(t *testing.T) {
	type inner struct {
		N    int64             `cbor:"n"`
		Tags map[string]string `cbor:"tags"`
	}
	type value struct {
		Name  string         `cbor:"name"`
		Count int64          `cbor:"count"`
		Neg   int64          `cbor:"neg"`
		Blob  []byte         `cbor:"blob"`
		List  []inner        `cbor:"list"`
		ByInt map[int64]bool `cbor:"byInt"`
		Nil   *int           `cbor:"nil"`
		Deep  [][]any        `cbor:"deep"`
	}
	for _, v := range []any{
		0, 23, 24, 255, 256, 65535, 65536, 1 << 32, int64(-1), int64(-25), int64(-1 << 40), "", "héllo", []byte{}, []byte{1, 2},
		true, false, nil, []any{}, map[string]any{},
		value{Name: "a", Count: 1 << 20, Neg: -300, Blob: []byte("x"), List: []inner{{N: 2, Tags: map[string]string{"b": "1", "a": "2", "aa": "3"}}},
			ByInt: map[int64]bool{-2: true, 0: false, 24: true, 1000: false}, Deep: [][]any{{1, "x", []any{nil}}}},
	} {
		b, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !fastCanonical(b, DefaultMaxDepth, DefaultMaxElements) {
			t.Errorf("fast path refused the canonical encoding %x of %#v", b, v)
		}
		if c, err := Canonicalize(b); err != nil || !bytes.Equal(c, b) {
			t.Errorf("Canonicalize(%x) = %x, %v", b, c, err)
		}
		if err := IsCanonical(b); err != nil {
			t.Errorf("IsCanonical(%x) = %v", b, err)
		}
	}
	for _, c := range []struct{ name, hex string }{
		{"empty input", ""},
		{"non-shortest integer", "1817"},
		{"non-shortest length", "780161"},
		{"unsorted keys", "a2616201616101"},
		{"duplicate keys", "a2616101616102"},
		{"byte string key", "a1416101"},
		{"bool key", "a1f501"},
		{"float", "f93c00"},
		{"tag", "c11a514b67b0"},
		{"undefined", "f7"},
		{"indefinite array", "9f01ff"},
		{"invalid UTF-8", "62c328"},
		{"trailing bytes", "0101"},
		{"truncated map", "a26161"},
		{"integer past int64", "1bffffffffffffffff"},
	} {
		b := unhex(t, c.hex)
		if fastCanonical(b, DefaultMaxDepth, DefaultMaxElements) {
			t.Errorf("%s: fast path accepted %x", c.name, b)
		}
	}
	deep := append(bytes.Repeat([]byte{0x81}, DefaultMaxDepth+1), 0x01)
	if fastCanonical(deep, DefaultMaxDepth, DefaultMaxElements) {
		t.Error("fast path accepted nesting past the depth limit")
	}
	if _, err := Canonicalize(deep); err == nil {
		t.Error("Canonicalize accepted nesting past the depth limit")
	}
	wide := append([]byte{0x90}, bytes.Repeat([]byte{0x01}, 16)...)
	if fastCanonical(wide, DefaultMaxDepth, 16) {
		t.Error("fast path accepted an array at the element limit")
	}
}

// FuzzFastCanonical: whatever the fast path accepts, the decoder's path
// accepts too and returns unchanged, so taking it changes no answer.
func FuzzFastCanonical(f *testing.F) {
	cborFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if !fastCanonical(data, DefaultMaxDepth, DefaultMaxElements) {
			return
		}
		d := defaultDecoder
		canon, err := d.canonical(d.strict, data)
		if err != nil || !bytes.Equal(canon, data) {
			t.Fatalf("fast path accepted %x; the decoder gives %x, %v", data, canon, err)
		}
		var v any
		if err := Unmarshal(data, &v); err != nil {
			t.Fatalf("fast path accepted %x, which does not decode: %v", data, err)
		}
		if b, err := Marshal(v); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("fast path accepted %x; its value encodes to %x, %v", data, b, err)
		}
	})
}
