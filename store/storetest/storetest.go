// Package storetest is the one conformance suite every store backend runs
// unchanged: memstore (the reference), sqlite and postgres. A backend's test
// calls Run with a factory that opens a fresh, isolated store.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Harness is one fresh store under test and the control of its clock.
type Harness struct {
	Store store.Store
	// Advance moves the store's clock forward by d. Backends with a real
	// clock (postgres: the server's) add d to an offset they apply to every
	// clock read, so expiries can be tested without waiting.
	Advance func(d time.Duration)
}

// Factory opens a fresh, isolated store (its own database, schema or file)
// and registers its cleanup with t.
type Factory func(t *testing.T) Harness

// Run runs the whole suite against the backend factory opens.
func Run(t *testing.T, open Factory) {
	for _, tc := range suite() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, open Factory)
}

// suite lists every conformance test, in a stable order. Each file of this
// package contributes one group function; add new groups here.
func suite() []testCase {
	var all []testCase
	for _, group := range []func() []testCase{
		journalTests,
	} {
		all = append(all, group()...)
	}
	return all
}

var bg = context.Background()
