package vocab_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestVocabIsALeaf: the vocabulary imports the standard library alone, so
// every layer (the pure kernel included) and every application's adapter
// can import it without taking anything else in.
func TestVocabIsALeaf(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Imports) == 0 {
		t.Fatal("no imports read: the check sees nothing")
	}
	for _, imp := range p.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("vocab imports %s, outside the standard library", imp)
		}
	}
}
