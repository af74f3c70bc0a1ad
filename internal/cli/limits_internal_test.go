package cli

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
)

// TestParseKindBounds: kind=N pairs parse; a missing '=', an empty or
// invalid kind, a negative or non-integer N and a kind given twice are
// refused.
func TestParseKindBounds(t *testing.T) {
	got, err := parseKindBounds([]string{"mail.send=5", " http.request = 0"})
	if err != nil || len(got) != 2 || got["mail.send"] != 5 || got["http.request"] != 0 {
		t.Fatalf("parseKindBounds = %v, %v", got, err)
	}
	for _, bad := range [][]string{{"mail.send"}, {"=3"}, {"k=-1"}, {"k=x"}, {"k=1", "k=2"}} {
		if got, err := parseKindBounds(bad); err == nil {
			t.Fatalf("parseKindBounds(%q) = %v, want an error", bad, got)
		}
	}
	if _, err := serveLimits(serveFlags{maxInbox: -1}); err == nil {
		t.Fatal("--max-inbox -1 accepted")
	}
	if _, err := serveLimits(serveFlags{maxEffectQueue: -1}); err == nil {
		t.Fatal("--max-effect-queue -1 accepted")
	}
}

// FuzzParseKindBounds: whatever the input, an accepted value maps each
// kind to the non-negative integer written after its '=' and never panics.
func FuzzParseKindBounds(f *testing.F) {
	for _, s := range []string{"mail.send=5", "k=0,j=1", "=", "k==1", "k=-1", "k=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		vals := strings.Split(s, ",")
		got, err := parseKindBounds(vals)
		if err != nil {
			return
		}
		if len(got) != len(vals) {
			t.Fatalf("%q: %d bounds from %d values", s, len(got), len(vals))
		}
		for _, v := range vals {
			k, n, _ := strings.Cut(v, "=")
			want, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil || want < 0 || got[strings.TrimSpace(k)] != want {
				t.Fatalf("%q: bound of %q = %d, want %s", s, k, got[strings.TrimSpace(k)], n)
			}
		}
	})
}

// TestOverloadedExitsEight: an overloaded answer (429) is exit 8, named
// overloaded under -o json, apart from unavailable (5): the server is up
// and asks for a later retry.
func TestOverloadedExitsEight(t *testing.T) {
	code, ok := apiExitCode(&api.Error{Status: http.StatusTooManyRequests, Code: api.CodeOverloaded})
	if !ok || code != ExitOverloaded || ExitOverloaded != 8 || codeName(code) != api.CodeOverloaded {
		t.Fatalf("overloaded: exit %d (%v), named %q", code, ok, codeName(code))
	}
}
