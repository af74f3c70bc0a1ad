package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"reflect"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/world"
)

// TestJSONToCBORNumbersAndShapes: integers become int64 (uint64 past its
// range), everything else float64, objects string-keyed maps; a number
// no float64 holds is a 400.
func TestJSONToCBORNumbersAndShapes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
	}{
		{`1`, uint64(1)}, // CBOR has one unsigned integer: decoded into any it is uint64
		{`-5`, int64(-5)},
		{`9223372036854775807`, uint64(math.MaxInt64)},
		{`18446744073709551615`, uint64(math.MaxUint64)},
		{`-99999999999999999999`, float64(-99999999999999999999)},
		{`1.5`, 1.5},
		{`1e3`, float64(1000)},
		{`"x"`, "x"},
		{`true`, true},
		{`null`, nil},
		{``, nil},
		{`{"b":[1,"x",null],"a":{}}`, map[any]any{"a": map[any]any{}, "b": []any{uint64(1), "x", nil}}},
	} {
		b, err := jsonToCBOR(json.RawMessage(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if err := event.IsCanonical(b); err != nil {
			t.Fatalf("%s: not canonical: %v", tc.in, err)
		}
		var got any
		if err := event.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%s: %#v, want %#v", tc.in, got, tc.want)
		}
	}
	// The Go types a handler would declare decode what the JSON said.
	b, err := jsonToCBOR(json.RawMessage(`{"I":-3,"U":18446744073709551615,"F":2.25,"S":"s"}`))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		I int64
		U uint64
		F float64
		S string
	}
	if err := event.Unmarshal(b, &v); err != nil || v.I != -3 || v.U != math.MaxUint64 || v.F != 2.25 || v.S != "s" {
		t.Fatalf("typed: %+v %v", v, err)
	}
	for _, bad := range []string{`1e400`, `-1e400`, `{"a":`} {
		_, err := jsonToCBOR(json.RawMessage(bad))
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Fatalf("%s: %v, want a 400", bad, err)
		}
	}
}

// TestCBORToJSON: maps become objects (non-string keys in their JSON
// form), byte strings base64, infinities strings.
func TestCBORToJSON(t *testing.T) {
	b, err := event.Marshal(map[any]any{"a": []byte{1, 2}, uint64(7): math.Inf(1), "n": nil, "l": []any{int64(-1), "x"}})
	if err != nil {
		t.Fatal(err)
	}
	js, err := cborToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"7":"+Inf","a":"AQI=","l":[-1,"x"],"n":null}`; string(js) != want {
		t.Fatalf("%s, want %s", js, want)
	}
	if js, err := cborToJSON(nil); err != nil || string(js) != "null" {
		t.Fatalf("no bytes: %s %v", js, err)
	}
	if _, err := cborToJSON([]byte{0xff}); err == nil {
		t.Fatal("not CBOR rendered")
	}
}

// TestNamedValueIsEncodeCallNamed: the value the server hands to
// plane.Client.CallWithID makes exactly the payload world.EncodeCallNamed
// makes, which is what the server validated.
func TestNamedValueIsEncodeCallNamed(t *testing.T) {
	value, err := jsonToCBOR(json.RawMessage(`{"By":3,"Key":"k"}`))
	if err != nil {
		t.Fatal(err)
	}
	viaClient, err := world.EncodeCall("c-1", namedValue{typ: "shop.Add", value: value})
	if err != nil {
		t.Fatal(err)
	}
	validated, err := world.EncodeCallNamed("c-1", "shop.Add", cbor.RawMessage(value))
	if err != nil {
		t.Fatal(err)
	}
	if string(viaClient) != string(validated) {
		t.Fatalf("%x != %x", viaClient, validated)
	}
}

// TestCleanMessageDropsGoTypes: the phrases the CBOR and JSON libraries
// use to name Go types do not reach a client.
func TestCleanMessageDropsGoTypes(t *testing.T) {
	for _, in := range []string{
		"cbor: cannot unmarshal UTF-8 text string into Go value of type uint64",
		"cbor: cannot unmarshal array into Go struct field plane.ingressMessage.call_id of type string",
		"json: cannot unmarshal string into Go struct field createWorldReq.id of type uint64",
	} {
		out := cleanMessage(in)
		for _, leak := range []string{"Go value", "Go struct", "ingressMessage", "createWorldReq", "uint64"} {
			if contains(out, leak) {
				t.Fatalf("%q -> %q still has %q", in, out, leak)
			}
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// FuzzJSONValue: any JSON value either converts to canonical CBOR, which
// renders back as JSON, or is a typed 400; never a panic.
func FuzzJSONValue(f *testing.F) {
	for _, s := range []string{`0`, `-0`, `1.0`, `1e308`, `1e309`, `"\u0000"`, `"\ud800"`, `[[[[[]]]]]`, `{"a":{"a":{"a":1}}}`,
		`{"":null}`, `18446744073709551616`, `-9223372036854775809`, `[1,2,`, `{}`, `true false`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		b, err := jsonToCBOR(json.RawMessage(in))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != CodeInvalidArgument {
				t.Fatalf("%q: %v", in, err)
			}
			return
		}
		if err := event.IsCanonical(b); err != nil {
			t.Fatalf("%q: not canonical: %v", in, err)
		}
		if _, err := cborToJSON(b); err != nil {
			t.Fatalf("%q: does not render back: %v", in, err)
		}
	})
}
