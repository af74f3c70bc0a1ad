package projector

import (
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
)

// gate makes repeats no-ops for an in-memory projection: per stream, the
// last runSeq applied and the idempotency keys seen. The append authority
// already refuses a second (stream, key), but a projection can be fed from
// elsewhere, so it checks for itself. Not safe for concurrent use: its
// projection's lock covers it.
type gate struct {
	last map[string]uint64
	keys map[string]map[string]struct{}
}

// admit reports whether e is news for the projection on stream: above the
// last runSeq applied there, of a type it projects (wants), and with a key
// the stream has not delivered before. Every event above the last runSeq
// moves it, whatever the answer, as the runner's watermark would.
func (g *gate) admit(stream string, e event.Envelope, wants func(string) bool) bool {
	if g.last == nil {
		g.last, g.keys = map[string]uint64{}, map[string]map[string]struct{}{}
	}
	if e.RunSeq <= g.last[stream] {
		return false
	}
	g.last[stream] = e.RunSeq
	if !wants(e.EventType) {
		return false
	}
	key := e.IdempotencyKey
	if key == "" {
		// An envelope from elsewhere without its key: the fields decide it,
		// as the append authority's would have.
		key = event.IdempotencyKey(stream, e.StepID, e.LogicalAttemptID, e.EventType, e.PlanID, e.PlanVersion)
	}
	seen := g.keys[stream]
	if seen == nil {
		seen = map[string]struct{}{}
		g.keys[stream] = seen
	}
	if _, dup := seen[key]; dup {
		return false
	}
	seen[key] = struct{}{}
	return true
}

// MaxErrorBytes bounds the error text a projection keeps of one event.
const MaxErrorBytes = 4096

// payloadError reads the error a failure event's payload reports: the
// payload is a CBOR map whose "error" entry is text, or a map with a
// "message" text entry. Anything else reads as no error. The text is cut
// to MaxErrorBytes, at a character boundary.
func payloadError(payload []byte) string {
	var p struct {
		Error any `cbor:"error"`
	}
	if len(payload) == 0 || event.Unmarshal(payload, &p) != nil {
		return ""
	}
	var msg string
	switch v := p.Error.(type) {
	case string:
		msg = v
	case map[any]any:
		msg, _ = v["message"].(string)
	case map[string]any:
		msg, _ = v["message"].(string)
	}
	if len(msg) <= MaxErrorBytes {
		return msg
	}
	cut := MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}
