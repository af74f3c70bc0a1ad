package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClipMarksCutValues: a step's input or output too long for its cell
// is cut to 60 characters ending in "…"; a short one is shown whole, an
// absent one as "-", and only a value's first line is shown.
func TestClipMarksCutValues(t *testing.T) {
	huge := json.RawMessage(`"` + strings.Repeat("é", 500) + `"`)
	got := clip(huge)
	if utf8.RuneCountInString(got) != 60 || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, `"éé`) {
		t.Fatalf("clip of a huge value: %q (%d runes)", got, utf8.RuneCountInString(got))
	}
	if got := clip(json.RawMessage(`{"a":1}`)); got != `{"a":1}` {
		t.Fatalf("clip of a short value: %q", got)
	}
	if got := clip(nil); got != "-" {
		t.Fatalf("clip of no value: %q", got)
	}
	if got := clip(json.RawMessage("[1,\n2]")); got != "[1," {
		t.Fatalf("clip of two lines: %q", got)
	}
}
