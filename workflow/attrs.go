package workflow

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
)

// Search attributes: short text labels on a run ("customer" = "c-42",
// "region" = "eu") that lists filter by. A start may set them
// (WithAttributes) and the run's function may change them as it goes
// (SetAttributes). They are written to the run's own journal (the start's
// RunQueued or RunStarted, and steps of kind "attrs"), so a backup, a
// migration to another store, a fork and a replay carry them with the
// run; the runs projection (workflow/projector.Runs) keeps an index of
// them from which `GET /v1/runs?attr=key:value` and `orrery run list
// --attr key=value` answer.

const (
	kindAttrs = "attrs"
	// AttrsStep is the base step id of SetAttributes steps ("sys:attrs",
	// then "sys:attrs#2", ...).
	AttrsStep = "sys:attrs"

	// MaxAttributes bounds the attributes a run carries at once.
	MaxAttributes = 32
	// MaxAttributeKeyBytes and MaxAttributeValueBytes bound one attribute.
	MaxAttributeKeyBytes   = 64
	MaxAttributeValueBytes = 256
)

// CheckAttributes validates attributes as a start or SetAttributes takes
// them: at most MaxAttributes; each key 1 to MaxAttributeKeyBytes bytes of
// ASCII letters, digits, '_', '-' and '.'; each value valid UTF-8 of at
// most MaxAttributeValueBytes bytes without NUL. An empty value (in
// SetAttributes) removes the key. A failure matches ErrInvalid.
func CheckAttributes(attrs map[string]string) error {
	if len(attrs) > MaxAttributes {
		return errorf("attributes", ErrInvalid, "", detail(fmt.Sprintf("%d attributes, limit %d", len(attrs), MaxAttributes)))
	}
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if err := checkAttrKey(k); err != nil {
			return err
		}
		v := attrs[k]
		switch {
		case len(v) > MaxAttributeValueBytes:
			return errorf("attributes", ErrInvalid, "", detail(fmt.Sprintf("attribute %q: the value is %d bytes, limit %d", k, len(v), MaxAttributeValueBytes)))
		case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
			return errorf("attributes", ErrInvalid, "", detail(fmt.Sprintf("attribute %q: the value must be UTF-8 without NUL", k)))
		}
	}
	return nil
}

// checkAttrKey validates one attribute key.
func checkAttrKey(k string) error {
	if k == "" || len(k) > MaxAttributeKeyBytes {
		return errorf("attributes", ErrInvalid, "", detail(fmt.Sprintf("attribute key %q must be 1 to %d bytes", k, MaxAttributeKeyBytes)))
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return errorf("attributes", ErrInvalid, "", detail(fmt.Sprintf("attribute key %q may hold only ASCII letters, digits, '_', '-' and '.'", k)))
		}
	}
	return nil
}

// WithAttributes sets the run's search attributes at its start (see
// CheckAttributes; an empty value is dropped). They are not part of the
// run's identity: a repeated start with other attributes is the same run,
// which keeps the first start's.
func WithAttributes(attrs map[string]string) StartOption {
	return func(o *startOptions) {
		o.attrs = maps.Clone(attrs)
		maps.DeleteFunc(o.attrs, func(_, v string) bool { return v == "" })
		if len(o.attrs) == 0 {
			o.attrs = nil
		}
	}
}

// SetAttributes changes the run's search attributes: each key of attrs
// takes its value, and a key whose value is empty is removed; the others
// stay. It is a durable step written at once (its StepStarted and
// StepCompleted in one append); a re-run replays it without writing. The
// attributes outlive ContinueAsNew and an operator's Reset (a list says
// what the run last set).
func SetAttributes(c *Ctx, attrs map[string]string) error {
	if err := CheckAttributes(attrs); err != nil {
		return err
	}
	b, err := event.Marshal(attrs)
	if err != nil {
		return errorf("set attributes", ErrInvalid, "", err)
	}
	id, h, err := c.begin(kindAttrs, AttrsStep)
	if err != nil {
		return err
	}
	if h != nil && h.completed != nil {
		return nil
	}
	return c.writeAtOnce(kindAttrs, id, h, b)
}

// applyAttrs merges set into cur (created if nil): an empty value removes
// its key.
func applyAttrs(cur, set map[string]string) map[string]string {
	if len(set) == 0 {
		return cur
	}
	if cur == nil {
		cur = map[string]string{}
	}
	for k, v := range set {
		if v == "" {
			delete(cur, k)
		} else {
			cur[k] = v
		}
	}
	return cur
}

// runQueued is the payload of RunQueued: the start's attributes, so that
// the runs projection indexes a run waiting in its queue.
type runQueued struct {
	Attrs map[string]string `cbor:"attrs,omitempty"`
}

// queuedPayload is RunQueued's payload for start.
func queuedPayload(start *startItem) []byte {
	if len(start.Attrs) == 0 {
		return event.EmptyPayload()
	}
	b, err := event.Marshal(runQueued{Attrs: start.Attrs})
	if err != nil {
		return event.EmptyPayload()
	}
	return b
}
