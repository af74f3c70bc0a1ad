package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
)

// readBody reads a request body within limit. An empty body is nil; a
// non-empty one must say it is JSON. The limit is checked before reading
// when the request declares its length, and while reading otherwise.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, apiErr(http.StatusRequestEntityTooLarge, CodeTooLarge,
			fmt.Sprintf("the request body is %d bytes, the limit is %d", r.ContentLength, limit))
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, apiErr(http.StatusRequestEntityTooLarge, CodeTooLarge,
				fmt.Sprintf("the request body is larger than the limit of %d bytes", limit))
		}
		return nil, invalid("the request body could not be read")
	}
	if len(b) == 0 {
		return nil, nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, apiErr(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "a request body must be application/json")
	}
	return b, nil
}

// decodeStrict decodes body into v: exactly one JSON value, valid UTF-8,
// no unknown fields, every field of the right type. An empty body leaves
// v as it is when optional, and is an error otherwise.
func decodeStrict(body []byte, v any, optional bool) error {
	if len(body) == 0 {
		if optional {
			return nil
		}
		return invalid("a JSON request body is required")
	}
	if !utf8.Valid(body) {
		return invalid("the request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("the request body holds more than one JSON value")
	}
	return nil
}

// jsonError describes a decoding error in the request's terms: the field
// and what it should have been, never a Go type.
func jsonError(err error) *Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return invalid(fmt.Sprintf("malformed JSON at byte %d", syn.Offset))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return invalid("malformed JSON: the body ends early")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return invalid(fmt.Sprintf("the request body must be %s, not %s", jsonKind(typ.Type), typ.Value))
		}
		return invalid(fmt.Sprintf("field %q must be %s, not %s", field, jsonKind(typ.Type), typ.Value))
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return invalid("unknown field " + f)
	}
	if strings.Contains(msg, "base64") {
		return invalid("a byte string field is not valid standard base64")
	}
	return invalid("malformed JSON")
}

func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a value"
}

// jsonToCBOR turns a JSON value into the canonical CBOR a handler
// decodes: numbers written as integers become int64 (uint64 above
// MaxInt64), every other number float64, objects maps with string keys,
// arrays arrays; an absent value is null.
func jsonToCBOR(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, jsonError(err)
	}
	cv, err := cborValue(v)
	if err != nil {
		return nil, err
	}
	b, err := event.Marshal(cv)
	if err != nil {
		return nil, invalid("the value cannot be encoded as CBOR")
	}
	return b, nil
}

func cborValue(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		return numberValue(x)
	case []any:
		for i := range x {
			c, err := cborValue(x[i])
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	case map[string]any:
		for k, e := range x {
			c, err := cborValue(e)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	}
	return v, nil // string, bool, nil
}

func numberValue(n json.Number) (any, error) {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return nil, invalid(fmt.Sprintf("the number %s is out of range", truncate(s, 40)))
	}
	return f, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// stateDecoder reads state and replies for display: they may be as large
// as a snapshot, and hold as many elements as a handler put there.
var stateDecoder = mustStateDecoder()

func mustStateDecoder() *event.Decoder {
	d, err := event.NewDecoder(event.DecoderOptions{MaxSize: 64 << 20, MaxDepth: 1024, MaxElements: 1 << 24})
	if err != nil {
		panic(err) // only reachable if the constant options are invalid
	}
	return d
}

// cborToJSON renders canonical CBOR as JSON: maps become objects (keys
// that are not strings are written in their JSON form as the key), byte
// strings base64, infinities the strings "+Inf" and "-Inf".
func cborToJSON(b []byte) (json.RawMessage, error) {
	if len(b) == 0 {
		return json.RawMessage("null"), nil
	}
	var v any
	if err := stateDecoder.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	out, err := json.Marshal(jsonValue(v))
	if err != nil {
		return nil, err
	}
	return out, nil
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonValue(x[i])
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[keyString(k)] = jsonValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case float64:
		if math.IsInf(x, 1) {
			return "+Inf"
		}
		if math.IsInf(x, -1) {
			return "-Inf"
		}
		return x
	case float32:
		return jsonValue(float64(x))
	}
	return v // nil, bool, string, []byte (base64), int64, uint64
}

func keyString(k any) string {
	if s, ok := k.(string); ok {
		return s
	}
	b, err := json.Marshal(jsonValue(k))
	if err != nil {
		return fmt.Sprint(k)
	}
	return string(b)
}

// sortedKeys is used where a map must be shown in a stable order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
