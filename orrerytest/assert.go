package orrerytest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Equal fails t when got is not want (reflect.DeepEqual), with a
// line-by-line diff of the two, what naming the value compared.
func Equal[T any](t testing.TB, what string, got, want T) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	t.Errorf("%s differs (-want +got):\n%s", what, Diff(want, got))
}

// AssertState fails the test when w's state (decoded into S) is not want,
// with a diff.
func AssertState[S any](w *World, want S) {
	w.n.t.Helper()
	Equal(w.n.t, "the state of "+w.id, State[S](w), want)
}

// AssertTypes fails the test when w's journal's input types (Types) are
// not want, with a diff.
func (w *World) AssertTypes(want ...string) {
	w.n.t.Helper()
	Equal(w.n.t, "the journal of "+w.id, w.Types(), want)
}

// Diff renders a and b (as indented JSON, or in Go syntax when JSON
// cannot tell them apart) and returns their line diff: lines only in a prefixed "-", only
// in b "+", common ones " ".
func Diff(a, b any) string {
	la, lb := lines(a), lines(b)
	if slices.Equal(la, lb) {
		// JSON shows neither unexported fields nor types: Go syntax does.
		la, lb = []string{fmt.Sprintf("%#v", a)}, []string{fmt.Sprintf("%#v", b)}
	}
	// The longest common subsequence of the lines, by dynamic
	// programming: values under test are small.
	n, m := len(la), len(lb)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && la[i] == lb[j]:
			sb.WriteString("  " + la[i] + "\n")
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			sb.WriteString("- " + la[i] + "\n")
			i++
		default:
			sb.WriteString("+ " + lb[j] + "\n")
			j++
		}
	}
	return sb.String()
}

func lines(v any) []string {
	b, err := json.MarshalIndent(v, "", "  ")
	s := string(b)
	if err != nil {
		s = fmt.Sprintf("%#v", v)
	}
	return strings.Split(s, "\n")
}
