package workflow

import (
	"runtime"
	"strconv"
	"strings"
)

// goid returns the calling goroutine's id, read from the header of its
// stack trace ("goroutine 18 [running]:"). Go hides goroutine ids on
// purpose; a Ctx needs one only to refuse being used from a goroutine
// other than its workflow function's, and a step costs a store write, so
// the microsecond this takes does not show.
func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	s, ok := strings.CutPrefix(string(buf[:n]), "goroutine ")
	if !ok {
		return 0
	}
	if i := strings.IndexByte(s, ' '); i > 0 {
		s = s[:i]
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return id
}
