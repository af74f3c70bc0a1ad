package api_test

import (
	"errors"
	"github.com/orrery-run/orrery/workflow"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

// The test world is the shared counter (internal/testworlds), by its
// short names.
type (
	Add     = testworlds.Add
	Arm     = testworlds.Arm
	counter = testworlds.Counter
	Fail    = testworlds.Fail
	Get     = testworlds.Get
	Pay     = testworlds.Pay
)

func counterDef() *world.Def[counter] { return testworlds.CounterDef() }

// Two universes of the same definition, so that a world id can be asked
// for in another universe than its own.
const (
	universe = "u"
	other    = "v"
)

func kernels() plane.Kernels {
	return plane.Kernels{universe: counterDef().Kernel(), other: counterDef().Kernel()}
}

func typeName(t testing.TB, v any) string {
	t.Helper()
	n, err := world.TypeName(v)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rigOptions shape a rig.
type rigOptions struct {
	store   store.Store // nil: a fresh memstore
	token   string
	workers []string // the hosts to run (nil: one, "w1")
	cfg     func(*api.Config)
	metrics bool
	orchID  string // the orchestrator's id (default "orch"; a node uses its worker's)
	// workflows a runs rig serves (nil: payoutDef alone).
	workflows []workflow.Workflow
	limits    plane.Limits
	// host adjusts each host's configuration (the capabilities it
	// advertises).
	host func(*plane.HostConfig)
}

// rig is the shared test node (internal/testrig) with the counter's
// universes and the API tests' own helpers.
type rig struct{ *testrig.Node }

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	return &rig{testrig.NewNode(t, testrig.NodeOptions{
		Store: o.store, Kernels: kernels(), Universes: []string{universe, other}, Token: o.token,
		Workers: o.workers, Config: o.cfg, Metrics: o.metrics, OrchID: o.orchID, Limits: o.limits, Host: o.host,
	})}
}

// stateOf decodes a world's state as the API shows it.
func (r *rig) stateOf(id string) (api.State, counter) {
	r.T.Helper()
	s, err := r.Client.State(r.Ctx, id)
	if err != nil {
		r.T.Fatalf("State(%s): %v", id, err)
	}
	w, err := world.Load(counterDef(), id, world.Snapshot{Height: s.Height, State: s.StateCBOR})
	if err != nil {
		r.T.Fatalf("state of %s does not load: %v", id, err)
	}
	v, err := w.Value()
	if err != nil {
		r.T.Fatal(err)
	}
	return s, v
}

// apiError asserts err is an *api.Error with status and code.
func apiError(t testing.TB, err error, status int, code string) *api.Error {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *api.Error %d %s, got %v", status, code, err)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("want %d %s, got %d %s: %s", status, code, e.Status, e.Code, e.Message)
	}
	return e
}

func worldIDs(ws []api.World) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

// must(f())(t) is f's value, failing t on f's error.
func must[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
