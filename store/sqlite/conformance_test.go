package sqlite

import (
	"testing"

	"github.com/orrery-run/orrery/store/storetest"
)

// TestConformance runs the one conformance suite against a fresh database
// file per test, with a manual clock that Advance moves.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, clock, _ := openTemp(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzAppend fuzzes the append authority's inputs on a real database file.
func FuzzAppend(f *testing.F) {
	storetest.FuzzAppend(f, func(t *testing.T) storetest.Harness {
		s, clock, _ := openTemp(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzResolve fuzzes an operator's Resolve on a real database file.
func FuzzResolve(f *testing.F) {
	storetest.FuzzResolve(f, func(t *testing.T) storetest.Harness {
		s, clock, _ := openTemp(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzSpawn fuzzes Spawn's spec on a real database file.
func FuzzSpawn(f *testing.F) {
	storetest.FuzzSpawn(f, func(t *testing.T) storetest.Harness {
		s, clock, _ := openTemp(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzFireHeld fuzzes a lease holder's firing on a real database file.
func FuzzFireHeld(f *testing.F) {
	storetest.FuzzFireHeld(f, func(t *testing.T) storetest.Harness {
		s, clock, _ := openTemp(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzAcquireLeases fuzzes AcquireLeases's arguments on a real database
// file.
func FuzzAcquireLeases(f *testing.F) {
	storetest.FuzzAcquireLeases(f, func(t *testing.T) storetest.Harness {
		s, clock, _ := openTemp(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}
