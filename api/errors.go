package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// ErrOverloaded matches an overloaded answer (429) of the Go client, as
// do plane.ErrOverloaded and store.ErrOverloaded: the request was refused
// past a bound and wrote nothing; retry it, same key, after RetryAfter.
var ErrOverloaded = errors.New("api: overloaded")

// RetryAfter is how long an overloaded answer asks the client to wait
// (its details.retry_after_seconds), 0 for any other error.
func RetryAfter(err error) time.Duration {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeOverloaded {
		return 0
	}
	switch v := e.Details["retry_after_seconds"].(type) {
	case float64:
		return time.Duration(v * float64(time.Second))
	case int:
		return time.Duration(v) * time.Second
	}
	return time.Second
}

// Error codes: the stable, lowercase "code" of every error body. A client
// branches on the code (or on errors.Is, see Error.Is), never on the
// message, whose wording may change.
const (
	CodeInvalidArgument   = "invalid_argument"       // 400: malformed JSON, unknown fields, wrong types, bad values
	CodeUnauthenticated   = "unauthenticated"        // 401: no token, or the wrong one
	CodeNotFound          = "not_found"              // 404: unknown world, effect, worker, snapshot or route
	CodeMethodNotAllowed  = "method_not_allowed"     // 405
	CodeAlreadyExists     = "already_exists"         // 409: the id is taken (by another universe)
	CodeConflict          = "conflict"               // 409: a repeat with other arguments, a lost race
	CodePaused            = "paused"                 // 409: the world is paused
	CodeArchived          = "archived"               // 409: the world is archived
	CodeFenced            = "fenced"                 // 409: a lease or fence refused the write
	CodeNotRetryable      = "not_retryable"          // 409: the effect is not in a retryable state
	CodeEffectEnded       = "effect_ended"           // 409: the effect is done or withdrawn (no hold or release)
	CodeFinished          = "finished"               // 409: the workflow run has ended
	CodeVersionNotCarried = "version_not_carried"    // 409: no live worker carries the workflow version asked for
	CodeReplyUnavailable  = "reply_unavailable"      // 409: a call's reply can no longer be derived
	CodeCompacted         = "compacted"              // 410: the journal records asked for are compacted (details.floor)
	CodeTooLarge          = "too_large"              // 413
	CodeUnsupportedMedia  = "unsupported_media_type" // 415
	CodeCallFailed        = "call_failed"            // 422: the world's handler failed or did not reply
	CodeOverloaded        = "overloaded"             // 429: ingress refused past a bound, nothing written (Retry-After; details.retry_after_seconds, reason, kind)
	CodeDowngrade         = "downgrade"              // 409: an upgrade to an older version than the world's
	CodeInternal          = "internal"               // 500: a genuine internal failure
	CodeUnavailable       = "unavailable"            // 503: the store is closed, the request was cancelled
	CodeNotReady          = "not_ready"              // 503: readiness failed
	CodeTimeout           = "timeout"                // 504: a call's wait ran out
)

// Error is every error the API answers, on the wire
// ({"code","message","details"}) and in the Go client, which adds the
// HTTP status. errors.Is matches the store or plane sentinel the code
// stands for (see Is), so a client written against the plane keeps its
// checks: errors.Is(err, store.ErrWorldNotFound) holds for a 404 on a
// world.
type Error struct {
	Status  int            `json:"-"`
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
	// RequestID is the request's X-Request-Id, to find the server's log
	// lines of it.
	RequestID string `json:"request_id,omitempty"`
}

func (e *Error) Error() string {
	msg := "api: " + e.Code
	if e.Status != 0 {
		msg += " (" + http.StatusText(e.Status) + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Is matches the sentinels of e's code: invalid_argument matches
// store.ErrInvalid, plane.ErrInvalid, plane.ErrInvalidIngress and
// workflow.ErrInvalid; not_found matches store.ErrNotFound, and
// store.ErrWorldNotFound, store.ErrSnapshotNotFound or workflow.ErrNotFound
// when details.resource is "world", "snapshot" or "run"; already_exists
// store.ErrWorldExists (store.ErrScheduleExists when details.resource is
// "schedule"); conflict plane.ErrConflict, workflow.ErrConflict and
// store.ErrScheduleConflict; invalid_argument schedule.ErrInvalid too;
// finished workflow.ErrFinished; version_not_carried
// workflow.ErrVersionNotCarried; paused store.ErrWorldPaused; archived
// store.ErrWorldArchived; fenced store.ErrFenced and plane.ErrFenced;
// not_retryable store.ErrNotRetryable; effect_ended store.ErrEffectEnded;
// reply_unavailable
// plane.ErrReplyUnavailable; call_failed plane.ErrCallFailed; timeout
// context.DeadlineExceeded; unavailable store.ErrClosed; compacted
// store.ErrCompacted; downgrade plane.ErrDowngrade and world.ErrDowngrade;
// overloaded ErrOverloaded, plane.ErrOverloaded and store.ErrOverloaded.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeInvalidArgument:
		return target == store.ErrInvalid || target == plane.ErrInvalid || target == plane.ErrInvalidIngress ||
			target == workflow.ErrInvalid || target == schedule.ErrInvalid
	case CodeNotFound:
		switch e.Details["resource"] {
		case "world":
			if target == store.ErrWorldNotFound {
				return true
			}
		case "snapshot":
			if target == store.ErrSnapshotNotFound {
				return true
			}
		case "run":
			if target == workflow.ErrNotFound {
				return true
			}
		}
		return target == store.ErrNotFound
	case CodeAlreadyExists:
		if e.Details["resource"] == "schedule" {
			return target == store.ErrScheduleExists
		}
		return target == store.ErrWorldExists
	case CodeConflict:
		return target == plane.ErrConflict || target == workflow.ErrConflict || target == store.ErrScheduleConflict
	case CodeFinished:
		return target == workflow.ErrFinished
	case CodeVersionNotCarried:
		return target == workflow.ErrVersionNotCarried
	case CodePaused:
		return target == store.ErrWorldPaused
	case CodeArchived:
		return target == store.ErrWorldArchived
	case CodeFenced:
		return target == store.ErrFenced || target == plane.ErrFenced
	case CodeNotRetryable:
		return target == store.ErrNotRetryable
	case CodeEffectEnded:
		return target == store.ErrEffectEnded
	case CodeReplyUnavailable:
		return target == plane.ErrReplyUnavailable
	case CodeCallFailed:
		return target == plane.ErrCallFailed
	case CodeDowngrade:
		return target == plane.ErrDowngrade || target == world.ErrDowngrade
	case CodeTimeout:
		return target == context.DeadlineExceeded
	case CodeUnavailable:
		return target == store.ErrClosed || target == store.ErrUnavailable
	case CodeCompacted:
		return target == store.ErrCompacted
	case CodeOverloaded:
		return target == ErrOverloaded || target == plane.ErrOverloaded || target == store.ErrOverloaded
	}
	return false
}

// errorRule maps one sentinel to its answer.
type errorRule struct {
	err      error
	status   int
	code     string
	resource string // details.resource, for not_found
}

// errorTable is the one mapping of workflow, store, plane, world and event
// sentinels to answers, searched in order with errors.Is: workflow and
// plane errors wrap store errors, so their kinds come first, and the more
// specific of two store sentinels comes before the general one. It is
// never written.
var errorTable = [...]errorRule{
	{workflow.ErrNotFound, http.StatusNotFound, CodeNotFound, "run"},
	{workflow.ErrConflict, http.StatusConflict, CodeConflict, ""},
	{workflow.ErrFinished, http.StatusConflict, CodeFinished, ""},
	{workflow.ErrVersionNotCarried, http.StatusConflict, CodeVersionNotCarried, ""},
	{workflow.ErrInvalid, http.StatusBadRequest, CodeInvalidArgument, ""},
	{workflow.ErrStopped, http.StatusServiceUnavailable, CodeUnavailable, ""},
	{plane.ErrOverloaded, http.StatusTooManyRequests, CodeOverloaded, ""},
	{store.ErrOverloaded, http.StatusTooManyRequests, CodeOverloaded, ""},
	{plane.ErrCallFailed, http.StatusUnprocessableEntity, CodeCallFailed, ""},
	{plane.ErrReplyUnavailable, http.StatusConflict, CodeReplyUnavailable, ""},
	{plane.ErrInvalidIngress, http.StatusBadRequest, CodeInvalidArgument, ""},
	{plane.ErrInvalid, http.StatusBadRequest, CodeInvalidArgument, ""},
	{plane.ErrNoKernel, http.StatusBadRequest, CodeInvalidArgument, ""},
	{plane.ErrConflict, http.StatusConflict, CodeConflict, ""},
	{plane.ErrDowngrade, http.StatusConflict, CodeDowngrade, ""},
	{plane.ErrFenced, http.StatusConflict, CodeFenced, ""},
	{plane.ErrSnapshotPending, http.StatusGatewayTimeout, CodeTimeout, ""},
	{plane.ErrStopped, http.StatusServiceUnavailable, CodeUnavailable, ""},
	{plane.ErrHostFailed, http.StatusServiceUnavailable, CodeUnavailable, ""},
	{store.ErrWorldNotFound, http.StatusNotFound, CodeNotFound, "world"},
	{store.ErrSnapshotNotFound, http.StatusNotFound, CodeNotFound, "snapshot"},
	{store.ErrNotFound, http.StatusNotFound, CodeNotFound, ""},
	{store.ErrWorldExists, http.StatusConflict, CodeAlreadyExists, ""},
	{store.ErrScheduleExists, http.StatusConflict, CodeAlreadyExists, "schedule"},
	{store.ErrScheduleConflict, http.StatusConflict, CodeConflict, ""},
	{schedule.ErrInvalid, http.StatusBadRequest, CodeInvalidArgument, ""},
	{store.ErrWorldPaused, http.StatusConflict, CodePaused, ""},
	{store.ErrWorldArchived, http.StatusConflict, CodeArchived, ""},
	{store.ErrFenced, http.StatusConflict, CodeFenced, ""},
	{store.ErrLeaseHeld, http.StatusConflict, CodeFenced, ""},
	{store.ErrNotHolder, http.StatusConflict, CodeFenced, ""},
	{store.ErrStaleEpoch, http.StatusConflict, CodeFenced, ""},
	{store.ErrNotAssigned, http.StatusConflict, CodeFenced, ""},
	{store.ErrNotRetryable, http.StatusConflict, CodeNotRetryable, ""},
	{store.ErrEffectEnded, http.StatusConflict, CodeEffectEnded, ""},
	{store.ErrHeadMismatch, http.StatusConflict, CodeConflict, ""},
	{store.ErrCursorMismatch, http.StatusConflict, CodeConflict, ""},
	{store.ErrSnapshotConflict, http.StatusConflict, CodeConflict, ""},
	{store.ErrWatermarkConflict, http.StatusConflict, CodeConflict, ""},
	{store.ErrAssignmentChanged, http.StatusConflict, CodeConflict, ""},
	{store.ErrClaimLost, http.StatusConflict, CodeConflict, ""},
	{store.ErrNotDue, http.StatusConflict, CodeConflict, ""},
	{store.ErrCompacted, http.StatusGone, CodeCompacted, ""},
	{store.ErrInvalid, http.StatusBadRequest, CodeInvalidArgument, ""},
	{store.ErrClosed, http.StatusServiceUnavailable, CodeUnavailable, ""},
	{store.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable, ""},
	{world.ErrMalformedInput, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrEncode, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrMalformed, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrTooLarge, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrTooDeep, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrTooManyElements, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrDuplicateKey, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrIndefiniteLength, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrTrailing, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrUnsupported, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrType, http.StatusBadRequest, CodeInvalidArgument, ""},
	{event.ErrNotCanonical, http.StatusBadRequest, CodeInvalidArgument, ""},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, CodeTimeout, ""},
	{context.Canceled, http.StatusServiceUnavailable, CodeUnavailable, ""},
}

// apiErr builds an answer of the API's own (auth, body, routing checks).
func apiErr(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

func invalid(msg string) *Error { return apiErr(http.StatusBadRequest, CodeInvalidArgument, msg) }

// toError turns any error a handler returns into its answer: an *Error
// as it is, a sentinel by the table, anything else a 500 whose message
// says nothing of the cause (which is logged).
func toError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apiErr(http.StatusRequestEntityTooLarge, CodeTooLarge, "the request body is larger than the limit")
	}
	for _, r := range errorTable {
		if errors.Is(err, r.err) {
			out := apiErr(r.status, r.code, cleanMessage(describe(err)))
			if r.resource != "" {
				out.Details = map[string]any{"resource": r.resource}
			}
			if r.code == CodeOverloaded {
				out.Details = overloadDetails(err)
			}
			var ce *store.CompactedError
			if r.code == CodeCompacted && errors.As(err, &ce) {
				// Where a reader that accepts the loss reads on from.
				out.Details = map[string]any{"floor": ce.Floor}
				if !ce.FloorAt.IsZero() {
					out.Details["floor_at"] = ce.FloorAt
				}
			}
			return out
		}
	}
	return apiErr(http.StatusInternalServerError, CodeInternal, "internal error")
}

// overloadDetails says why ingress was refused and when to retry: the
// plane's estimate in whole seconds, at least one.
func overloadDetails(err error) map[string]any {
	secs := int(math.Ceil(plane.RetryAfter(err).Seconds()))
	d := map[string]any{"retry_after_seconds": max(secs, 1)}
	var o *plane.Overload
	if errors.As(err, &o) {
		d["reason"] = o.Reason
		if o.Kind != "" {
			d["kind"] = o.Kind
		}
	}
	return d
}

// describe says what went wrong without the chain of operations an error
// passed through: the store's kind, world and detail when the store
// refused, else the plane's kind and its cause.
func describe(err error) string {
	if errors.Is(err, store.ErrUnavailable) {
		// The driver's words (hosts, addresses) are for the log, not for
		// a client, which needs only to know to retry.
		return "the store is unavailable (its database could not be reached or lost the connection); retry with the same key"
	}
	var ce *store.CompactedError
	if errors.As(err, &ce) {
		return strings.TrimPrefix(ce.Error(), ce.Op+": store: ")
	}
	var we *workflow.Error
	if errors.As(err, &we) && errors.Is(we.Kind, workflow.ErrNotFound) {
		// A run is a world underneath: the store's "world not found" would
		// name the wrong thing.
		msg := strings.TrimPrefix(we.Kind.Error(), "workflow: ")
		if we.Run != "" {
			msg += " (run " + we.Run + ")"
		}
		var se *store.Error
		if we.Err != nil && we.Err != we.Kind && !errors.As(we.Err, &se) {
			msg += ": " + we.Err.Error()
		}
		return msg
	}
	var se *store.Error
	if errors.As(err, &se) && se.Kind != nil {
		msg := strings.TrimPrefix(se.Kind.Error(), "store: ")
		if se.World != "" {
			msg += " (world " + se.World + ")"
		}
		if se.Detail != "" {
			msg += ": " + se.Detail
		}
		return msg
	}
	var pe *plane.Error
	if errors.As(err, &pe) && pe.Kind != nil {
		msg := strings.TrimPrefix(pe.Kind.Error(), "plane: ")
		if pe.World != "" {
			msg += " (world " + pe.World + ")"
		}
		if pe.Err != nil {
			msg += ": " + pe.Err.Error()
		}
		return msg
	}
	return err.Error()
}

// goField and goValue match the phrases the CBOR and JSON libraries use
// to name a Go type in their errors.
var (
	goField = regexp.MustCompile(`Go struct field (?:[^ ]*\.)?([^ .]+)(?: of type [^ ]+)?`)
	goValue = regexp.MustCompile(`Go value of type [^ ]+`)
)

// cleanMessage keeps an error message free of Go type names, which say
// nothing to an HTTP client and describe the server's insides, and
// bounds its length.
func cleanMessage(msg string) string {
	msg = goField.ReplaceAllString(msg, "field $1")
	msg = goValue.ReplaceAllString(msg, "a value of another type")
	if len(msg) > 2048 {
		msg = msg[:2048] + "…"
	}
	return strings.ToValidUTF8(msg, "\uFFFD")
}

// retryAfter is the Retry-After of a 503 that did not set its own: a
// lost database connection is usually back within a second or two.
const retryAfter = "1"

// writeError writes e as the error body. A 503 always says when to retry.
func writeError(w http.ResponseWriter, e *Error) {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	if e.Status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	if e.Status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
		secs, _ := e.Details["retry_after_seconds"].(int)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	writeJSON(w, e.Status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Every answer is a struct of this package: only a value the
		// handler failed to convert gets here.
		status = http.StatusInternalServerError
		b = []byte(`{"code":"internal","message":"internal error","details":{}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// inputMismatch explains, in the terms of the JSON the client sent, an
// input the handler's type refused: which field, the JSON type it
// expects, and what the request had there (ok=false: err is not a type
// mismatch). The decoder's own words are CBOR's, the wire form the
// client never wrote. value is the request's JSON value (nil for a CBOR
// payload: what it had is then named by its CBOR kind).
func inputMismatch(err error, typ string, value json.RawMessage) (*Error, bool) {
	var te *cbor.UnmarshalTypeError
	var ue *cbor.UnknownFieldError
	switch {
	case errors.As(err, &te):
		// The decoder names the field as "pkg.Type.Field", Type being the
		// innermost struct: the request's JSON says where that field is.
		field := te.StructFieldName
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			field = field[i+1:]
		}
		got, sample, path := gotOf(value, field, te.CBORType)
		if path != "" {
			field = path
		}
		expected := expectedOf(te.GoType)
		where := "the value"
		if field != "" {
			where = fmt.Sprintf("field %q", field)
		}
		msg := fmt.Sprintf("the value does not fit %q: %s must be %s, not %s", typ, where, article(expected), article(got))
		if got == expected || strings.HasSuffix(expected, got) {
			// The right kind of number, too large for the field.
			msg = fmt.Sprintf("the value does not fit %q: %s is out of range for %s", typ, where, rangeOf(te.GoType))
			got = "integer out of range"
		}
		if sample != "" {
			msg += " (" + sample + ")"
		}
		d := map[string]any{"type": typ, "expected": expected, "got": got}
		if field != "" {
			d["field"] = field
		}
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Message: cleanMessage(msg), Details: d}, true
	case errors.As(err, &ue):
		// The decoder names the member by its index in the canonical CBOR
		// map, whose keys are ordered shortest first, then bytewise: the
		// same order over the request's top-level keys finds its name.
		d := map[string]any{"type": typ}
		msg := fmt.Sprintf("the value does not fit %q: it has a field the type does not have", typ)
		if name, ok := unknownKey(value, ue.Index); ok {
			d["field"] = name
			msg = fmt.Sprintf("the value does not fit %q: it has no field %q", typ, name)
		}
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Message: cleanMessage(msg), Details: d}, true
	}
	return nil, false
}

// expectedOf is the JSON type a Go type takes.
func expectedOf(goType string) string {
	t := strings.TrimLeft(goType, "*")
	switch {
	case t == "bool":
		return "boolean"
	case t == "string":
		return "string"
	case strings.HasPrefix(t, "int"):
		return "integer"
	case strings.HasPrefix(t, "uint"):
		return "non-negative integer"
	case strings.HasPrefix(t, "float"):
		return "number"
	case t == "[]uint8" || t == "[]byte":
		return "base64 string"
	case strings.HasPrefix(t, "[]") || strings.HasPrefix(t, "["):
		return "array"
	case t == "time.Time":
		return "string"
	}
	// A struct, a map: an object; an interface takes anything.
	return "object"
}

// gotOf names the JSON type of the value of the first field named field
// (depth first; "" the whole value), with a short sample of it and its
// dotted path; without JSON, or without that field, the CBOR kind the
// decoder saw.
func gotOf(value json.RawMessage, field, cborType string) (got, sample, path string) {
	if len(value) > 0 {
		var v any
		dec := json.NewDecoder(bytes.NewReader(value))
		dec.UseNumber()
		if dec.Decode(&v) == nil {
			if field == "" {
				got, sample = jsonTypeOf(v)
				return got, sample, ""
			}
			if at, p, ok := findField(v, field, ""); ok {
				got, sample = jsonTypeOf(at)
				return got, sample, p
			}
		}
	}
	switch cborType {
	case "UTF-8 text string":
		return "string", "", ""
	case "positive integer":
		return "integer", "", ""
	case "negative integer":
		return "negative integer", "", ""
	case "array":
		return "array", "", ""
	case "map":
		return "object", "", ""
	case "byte string":
		return "bytes", "", ""
	}
	return "number, boolean or null", "", ""
}

// findField finds the first member named name in v, depth first, with its
// dotted path (an array element's index is a part of it).
func findField(v any, name, prefix string) (any, string, bool) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		if at, ok := x[name]; ok {
			return at, join(name), true
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if at, p, ok := findField(x[k], name, join(k)); ok {
				return at, p, true
			}
		}
	case []any:
		for i, e := range x {
			if at, p, ok := findField(e, name, join(strconv.Itoa(i))); ok {
				return at, p, true
			}
		}
	}
	return nil, "", false
}

// jsonTypeOf names a decoded JSON value's type, with a sample of it.
func jsonTypeOf(v any) (string, string) {
	switch x := v.(type) {
	case nil:
		return "null", ""
	case bool:
		return "boolean", strconv.FormatBool(x)
	case string:
		s := x
		if len(s) > 32 {
			s = s[:32] + "…"
		}
		return "string", strconv.Quote(s)
	case json.Number:
		s := x.String()
		switch {
		case strings.ContainsAny(s, ".eE"):
			return "number with a fraction or exponent", s
		case strings.HasPrefix(s, "-"):
			return "negative integer", s
		}
		return "integer", s
	case []any:
		return "array", ""
	case map[string]any:
		return "object", ""
	}
	return "value", ""
}

// article puts "a" or "an" before a JSON type's name.
func article(name string) string {
	if name != "" && strings.ContainsRune("aeiou", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}

// checkCallInput refuses a call whose value does not fit its handler's
// type before it is enqueued, as a send is refused (400), rather than
// journaling it as a failed step (422): json is the request's JSON value
// (nil for a payload).
func (s *Server) checkCallInput(rec store.World, v namedValue, js json.RawMessage) error {
	k, ok := s.cfg.Kernels[rec.Universe]
	if !ok {
		return nil // the plane answers a world it has no definition for
	}
	err := k.CheckInput(v.typ, v.value)
	if err == nil {
		return nil
	}
	if e, ok := inputMismatch(err, v.typ, js); ok {
		return e
	}
	return invalid("invalid call: " + cleanMessage(describe(err)))
}

// unknownUniverse refuses a universe this server has no definition for,
// naming those it has (details.universes), so that a typo is fixed from
// the error alone.
func unknownUniverse(u string, kernels plane.Kernels) *Error {
	known := make([]string, 0, len(kernels))
	for k := range kernels {
		known = append(known, k)
	}
	slices.Sort(known)
	e := invalid(fmt.Sprintf("unknown universe %q (this server has %s)", u, strings.Join(known, ", ")))
	e.Details = map[string]any{"universes": known}
	return e
}

// unknownKey is the top-level key of the JSON object value at index i in
// canonical CBOR order (ok=false: no such key, or not an object).
func unknownKey(value json.RawMessage, i int) (string, bool) {
	var obj map[string]json.RawMessage
	if len(value) == 0 || json.Unmarshal(value, &obj) != nil || i < 0 || i >= len(obj) {
		return "", false
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	return keys[i], true
}

// rangeOf names the range of a Go number type in JSON's words.
func rangeOf(goType string) string {
	t := strings.TrimLeft(goType, "*")
	for _, p := range []struct{ prefix, kind string }{{"uint", "non-negative integer"}, {"int", "integer"}, {"float", "number"}} {
		if bits, ok := strings.CutPrefix(t, p.prefix); ok {
			if bits == "" {
				bits = "64"
			}
			return "a " + bits + "-bit " + p.kind
		}
	}
	return "its type"
}
