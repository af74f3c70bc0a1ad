package event

import (
	"bytes"
	"math"
	"unicode/utf8"
)

// canonFrame is an open array or map while fastCanonical walks its items.
type canonFrame struct {
	left    uint64 // items (an array) or pairs (a map) not yet complete
	isMap   bool
	wantKey bool   // a map's next item is a key
	prev    []byte // a map's previous key, encoded
}

// canonStack bounds the nesting fastCanonical follows without allocating;
// deeper input takes the decoder's path.
const canonStack = 32

// fastCanonical reports whether b is, for certain, the canonical encoding
// of the value it denotes within the limits: what Canonicalize would
// return unchanged and IsCanonical accept. It walks the bytes once and
// allocates nothing. It says yes only for the common case: shortest-form
// integers within int64, definite-length byte and text strings (valid
// UTF-8), arrays, maps whose keys are integers or text strings in
// strictly ascending bytewise order of their encodings (so no duplicates),
// false, true and null. Anything else (floats, tags, undefined and other
// simple values, indefinite lengths, non-shortest heads, other map keys,
// input near a limit) gets "not sure", and the caller decodes it as
// before: a false answer is never an error.
func fastCanonical(b []byte, maxDepth, maxElements int) bool {
	var arr [canonStack]canonFrame
	stack := arr[:0]
	pos := 0
	for {
		isKey := len(stack) > 0 && stack[len(stack)-1].isMap && stack[len(stack)-1].wantKey
		start := pos
		if pos >= len(b) {
			return false
		}
		major, ai := b[pos]>>5, b[pos]&0x1f
		pos++
		var arg uint64
		switch {
		case ai < 24:
			arg = uint64(ai)
		case ai <= 27:
			size := 1 << (ai - 24)
			if len(b)-pos < size {
				return false
			}
			for _, c := range b[pos : pos+size] {
				arg = arg<<8 | uint64(c)
			}
			pos += size
			// Shortest form: the argument needs every byte of its size.
			if major != 7 && (ai == 24 && arg < 24 || ai == 25 && arg <= math.MaxUint8 ||
				ai == 26 && arg <= math.MaxUint16 || ai == 27 && arg <= math.MaxUint32) {
				return false
			}
		default:
			return false // reserved or indefinite length
		}
		switch major {
		case 0, 1:
			if arg > math.MaxInt64 {
				return false
			}
		case 2, 3:
			if isKey && major == 2 || arg > uint64(len(b)-pos) {
				return false
			}
			if major == 3 && !utf8.Valid(b[pos:pos+int(arg)]) {
				return false
			}
			pos += int(arg)
		case 4, 5:
			if isKey || arg >= uint64(maxElements) || len(stack)+1 >= maxDepth || len(stack) == canonStack {
				return false
			}
			if arg > 0 {
				stack = append(stack, canonFrame{left: arg, isMap: major == 5, wantKey: major == 5})
				continue
			}
		case 7:
			if isKey || ai < 20 || ai > 22 {
				return false // floats, undefined, other simple values
			}
		default:
			return false // tags
		}
		if isKey {
			top := &stack[len(stack)-1]
			key := b[start:pos]
			if top.prev != nil && bytes.Compare(top.prev, key) >= 0 {
				return false
			}
			top.prev = key
		}
		// An item is complete: so may be the containers it closes.
		for {
			if len(stack) == 0 {
				return pos == len(b)
			}
			top := &stack[len(stack)-1]
			if top.wantKey {
				top.wantKey = false
				break
			}
			top.wantKey = top.isMap
			top.left--
			if top.left > 0 {
				break
			}
			stack = stack[:len(stack)-1]
		}
	}
}
