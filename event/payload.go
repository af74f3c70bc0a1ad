package event

import (
	"errors"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// SourceOccurredAtKey is the payload map key that carries source event-time
// (the execution semantics contract §2.3). It is a payload convention, never an envelope field.
const SourceOccurredAtKey = "sourceOccurredAt"

// ErrPayloadNotMap: the payload is not a CBOR map.
var ErrPayloadNotMap = errors.New("event: payload is not a CBOR map")

// SourceOccurredAt reads sourceOccurredAt from a payload that is a CBOR map,
// where it is an integer of Unix nanoseconds. ok is false when the key is
// absent. The result is in UTC.
func SourceOccurredAt(payload []byte) (t time.Time, ok bool, err error) {
	m, err := payloadMap(payload)
	if err != nil {
		return time.Time{}, false, err
	}
	raw, found := m[SourceOccurredAtKey]
	if !found {
		return time.Time{}, false, nil
	}
	var n int64
	if err := Unmarshal(raw, &n); err != nil {
		return time.Time{}, false, err
	}
	return time.Unix(0, n).UTC(), true, nil
}

// WithSourceOccurredAt returns a new canonical payload: payload (a canonical
// CBOR map; empty means a new map) with sourceOccurredAt set to t as Unix
// nanoseconds, or removed when t is zero. Every other entry is kept byte for
// byte. payload itself is not modified.
func WithSourceOccurredAt(payload []byte, t time.Time) ([]byte, error) {
	var m map[any]cbor.RawMessage
	if len(payload) == 0 {
		m = map[any]cbor.RawMessage{}
	} else {
		if err := IsCanonical(payload); err != nil {
			return nil, err
		}
		var err error
		if m, err = payloadMap(payload); err != nil {
			return nil, err
		}
	}
	if t.IsZero() {
		delete(m, SourceOccurredAtKey)
	} else {
		n, err := unixNano(t)
		if err != nil {
			return nil, &EncodeError{Err: err}
		}
		m[SourceOccurredAtKey] = appendInt(nil, n)
	}
	return Marshal(m)
}

func payloadMap(payload []byte) (map[any]cbor.RawMessage, error) {
	if len(payload) == 0 || payload[0]>>5 != 5 {
		return nil, ErrPayloadNotMap
	}
	var m map[any]cbor.RawMessage
	if err := Unmarshal(payload, &m); err != nil {
		return nil, err
	}
	return m, nil
}
