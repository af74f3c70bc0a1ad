package plane_test

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// The integration tests run on every backend through the shared test rig
// (internal/testrig): memstore under the lab (virtual time), and the real
// stores under the production executor, where time is never waited for.
// rig adds the plane's own helpers to it.
type rig struct{ *testrig.Rig }

// forEachBackend runs body as a subtest per backend.
func forEachBackend(t *testing.T, seed uint64, name string, body func(r *rig) error) {
	testrig.ForEachBackend(t, lab.Config{Seed: seed, Name: name}, func(tr *testrig.Rig) error { return body(&rig{tr}) })
}

// runOn runs body on backend: under the lab with cfg for memstore, else
// once under the production executor seeded with cfg.Seed.
func runOn(t *testing.T, backend string, cfg lab.Config, body func(r *rig) error) {
	t.Helper()
	testrig.RunOn(t, backend, cfg, func(tr *testrig.Rig) error { return body(&rig{tr}) })
}

// drained waits until world id's inbox is drained.
func (r *rig) drained(id string) error {
	return r.WaitFor(id+" drained", 30*time.Second, func() (bool, error) {
		items, err := r.Store.ReadInbox(r.Ctx, id, 0, 0)
		if err != nil {
			return false, err
		}
		cur, err := r.Store.Cursor(r.Ctx, id)
		return len(items) == 0 || cur == items[len(items)-1].Seq, err
	})
}

type handle = testrig.Handle

func (r *rig) handle(hook func(op string) error) *handle { return testrig.NewHandle(r.Store, hook) }

// hostConfig is the tests' host configuration on this rig. On a real
// store the host runs on the machine's clock, so its lease is long enough
// that a loaded machine cannot make a renewal late by accident (only the
// store's clock, moved by the test, expires it), and the backstop scan is
// frequent, since moving the store's clock raises no hint.
func (r *rig) hostConfig(worker string, st store.Store, replies *plane.Replies) plane.HostConfig {
	cfg := hostConfig(worker, st, replies)
	if r.Real() {
		cfg.LeaseTTL, cfg.SyncEvery = 10*time.Second, 100*time.Millisecond
	}
	return cfg
}
