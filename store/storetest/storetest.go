// Package storetest is the one conformance suite every store backend runs
// unchanged: memstore (the reference), sqlite and postgres. A backend's test
// calls Run with a factory that opens a fresh, isolated store.
//
// The suite uses only the store.Store API and Harness.Advance. Where the
// contract in store/store.go leaves a choice open, the suite pins the
// reading that matches the seeds, and says so next to the test:
//
//   - Fencing: a write passes only while its epoch is the world's current
//     lease epoch and that lease is held and unexpired by the store's clock;
//     an expired or released lease fences at once (fencing.go).
//   - Leases: epoch = previous + 1, starting at >= 1; an expired lease is
//     held by nobody, so renewing it is ErrNotHolder; the assignment is
//     checked before the lease (protocol A), so a non-assigned worker gets
//     ErrNotAssigned even when the lease is held; Release follows Renew's
//     errors, and releasing a released epoch again is a no-op (leases.go).
//   - Journal: persistedAt reads back exactly as Append returned it, and
//     emittedAt at full nanosecond precision (journal.go).
//   - Intent hashes (effects and timers) are global: Complete, Fire and
//     EffectStatus name them alone. A fork therefore "inherits no effects"
//     in the sense that nothing queued belongs to it (worlds.go).
//   - A reaped effect keeps its queue Seq; Complete and Fire need no live
//     claim (a late adapter's result counts, once) (effects.go, timers.go).
//   - Dedupe retention: an inbox key completes when the cursor passes its
//     item and is pending before; effect, timer and fabric records complete
//     at Complete, Fire and Send (dedupe.go).
//   - Watch hints may be lost: the suite tolerates a missing hint and checks
//     the durable state instead (watch.go).
//
// Orders between several simultaneous failures (which error wins) are not
// pinned, and the model tests (model.go) never generate them.
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
	// clock read, so expiries can be tested without waiting. It must be safe
	// to call while other goroutines use Store (the fencing race test does).
	// The suite assumes nothing else of the clock: it never reads an
	// absolute value it did not get from the store, and keeps every expiry
	// and due time at least half a second away from the instants it checks.
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
		leaseTests,
		fencingTests,
		inboxTests,
		effectTests,
		timerTests,
		fabricTests,
		snapshotTests,
		worldTests,
		dedupeTests,
		watchTests,
		modelTests,
	} {
		all = append(all, group()...)
	}
	return all
}

var bg = context.Background()
