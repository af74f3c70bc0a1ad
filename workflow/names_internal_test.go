package workflow

import (
	"errors"
	"testing"

	"github.com/orrery-run/orrery/store"
)

// FuzzStepNames checks the naming rules of step, signal and effect names
// (API input): a name is refused with ErrInvalid, or every step id made
// from it, whatever its occurrence number, is an identifier the store
// accepts, and a repeat's id never equals another name's.
func FuzzStepNames(f *testing.F) {
	for _, s := range []string{"pay", "", "a#2", "sys:sleep", "RUN", "naïve", "\x00", "\xff", string(make([]byte, 300))} {
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, name string, n int) {
		n = max(1, n%1_000_000)
		err := checkName("fuzz", name)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v, want ErrInvalid", name, err)
			}
			return
		}
		for _, id := range []string{stepID(name, n), stepID(awaitBase+name, n)} {
			if err := store.CheckID("fuzz", "step", id); err != nil {
				t.Fatalf("%q: step id %q is refused by the store: %v", name, id, err)
			}
		}
		// A repeat's id is never a legal name itself, so it cannot be the
		// first occurrence of another name.
		if n > 1 && checkName("fuzz", stepID(name, n)) == nil {
			t.Fatalf("%q: occurrence %d's id %q is a legal name", name, n, stepID(name, n))
		}
	})
}
