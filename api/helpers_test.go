package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// counter is the test world: it adds, answers Get, fails on Fail, asks
// for an http.request on Pay, arms a timer on Arm, and records the
// receipts it consumes.
type counter struct {
	N        int64
	Seen     []string
	Receipts []string
	Statuses []string
	Ticks    int64
}

type (
	Add struct {
		By  int64
		Key string
	}
	Get  struct{}
	Fail struct{ Why string }
	Pay  struct{}
	Arm  struct{ AfterMs int64 }
	Tick struct{}
)

func counterDef() *world.Def[counter] {
	d := world.New[counter]("api.counter", 1)
	world.On(d, func(c *world.Ctx, s *counter, a Add) error {
		s.N += a.By
		s.Seen = append(s.Seen, a.Key)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counter, _ Get) error {
		c.Reply(s.N)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counter, f Fail) error {
		return errors.New("refused: " + f.Why)
	})
	world.On(d, func(c *world.Ctx, s *counter, _ Pay) error {
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: "https://pay.example"})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counter, a Arm) error {
		c.SetTimer(c.Now().Add(time.Duration(a.AfterMs)*time.Millisecond), Tick{})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counter, _ Tick) error {
		s.Ticks++
		return nil
	})
	world.On(d, func(c *world.Ctx, s *counter, r world.Receipt) error {
		s.Receipts = append(s.Receipts, r.IntentHash)
		s.Statuses = append(s.Statuses, string(r.Status))
		return nil
	})
	return d
}

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
}

// rig is a plane (hosts, an orchestrator, a client) over one store, with
// the API served by an httptest server and an api.Client on it.
type rig struct {
	t       testing.TB
	ctx     context.Context
	st      store.Store
	ops     *plane.Ops
	pc      *plane.Client
	hosts   []*plane.Host
	srv     *api.Server
	http    *httptest.Server
	c       *api.Client
	metrics *api.Metrics
	reg     *prometheus.Registry
	root    *actor.Scope
	replies *plane.Replies
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	st := o.store
	if st == nil {
		st = memstore.New()
	}
	r := &rig{t: t, ctx: ctx, st: st}
	if o.metrics {
		r.reg = prometheus.NewRegistry()
		r.metrics = api.NewMetrics(r.reg)
		if err := r.metrics.Err(); err != nil {
			t.Fatal(err)
		}
		r.metrics.CollectQueueDepths(st.QueueDepths)
	}
	ex := actor.NewExecutor(1)
	sys := actor.NewSystem(actor.WithExecutor(ex))
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if _, err := sys.Close(cctx); err != nil {
			t.Errorf("closing the actor system: %v", err)
		}
	})
	r.root, r.replies = sys.Root(), plane.NewReplies()
	workers := o.workers
	if workers == nil {
		workers = []string{"w1"}
	}
	for _, w := range workers {
		r.startHost(w)
	}
	if r.metrics != nil {
		r.metrics.CollectWorldsHosted(api.HostedBy(r.hosts...))
	}
	orchID := o.orchID
	if orchID == "" {
		orchID = "orch"
	}
	if _, err := plane.StartOrchestrator(ctx, sys.Root(), plane.OrchestratorConfig{
		ID: orchID, Store: st, Universes: []string{universe, other},
		LeaseTTL: 10 * time.Second, Every: 50 * time.Millisecond,
	}); err != nil {
		t.Fatal(err)
	}
	var err error
	if r.ops, err = plane.NewOps(st, kernels()); err != nil {
		t.Fatal(err)
	}
	if r.pc, err = plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: ex, Replies: r.replies, Hosts: r.hosts}); err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Store: st, Ops: r.ops, Client: r.pc, Kernels: kernels(), Token: o.token, Metrics: r.metrics, CallTimeout: 30 * time.Second}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	if r.srv, err = api.NewServer(cfg); err != nil {
		t.Fatal(err)
	}
	r.http = httptest.NewServer(r.srv)
	t.Cleanup(r.http.Close)
	if r.c, err = api.NewClient(r.http.URL, o.token, api.WithHTTPClient(r.http.Client())); err != nil {
		t.Fatal(err)
	}
	return r
}

// startHost starts a host for worker on the rig's store.
func (r *rig) startHost(worker string) *plane.Host {
	r.t.Helper()
	cfg := plane.HostConfig{
		Worker: worker, Store: r.st, Kernels: kernels(), Replies: r.replies,
		LeaseTTL: 10 * time.Second, SyncEvery: 50 * time.Millisecond, SnapshotEvery: 2,
	}
	if r.metrics != nil {
		cfg.Observe = r.metrics.ObserveHost
	}
	h, err := plane.StartHost(r.ctx, r.root, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.hosts = append(r.hosts, h)
	return h
}

// waitFor re-checks cond until it holds: a bounded loop on a condition,
// never a timing assertion.
func (r *rig) waitFor(what string, cond func() (bool, error)) {
	r.t.Helper()
	waitFor(r.t, what, cond)
}

// waitFor is rig.waitFor failing t (a fuzz target's own). Its bound is
// only a hang guard: two minutes of the machine's clock, far above the
// milliseconds a condition takes, even on PostgreSQL beside other
// packages' tests.
func waitFor(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stateOf decodes a world's state as the API shows it.
func (r *rig) stateOf(id string) (api.State, counter) {
	r.t.Helper()
	s, err := r.c.State(r.ctx, id)
	if err != nil {
		r.t.Fatalf("State(%s): %v", id, err)
	}
	w, err := world.Load(counterDef(), id, world.Snapshot{Height: s.Height, State: s.StateCBOR})
	if err != nil {
		r.t.Fatalf("state of %s does not load: %v", id, err)
	}
	v, err := w.Value()
	if err != nil {
		r.t.Fatal(err)
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

// do sends a raw request to the rig's server and returns the status and
// body.
func (r *rig) do(method, path, contentType, body, token string) (int, []byte) {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.ctx, method, r.http.URL+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.http.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.StatusCode, b
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

// create creates a world through the API.
func (r *rig) create(id, universe string) api.World {
	r.t.Helper()
	w, _, err := r.c.CreateWorld(r.ctx, id, universe)
	if err != nil {
		r.t.Fatalf("create %s: %v", id, err)
	}
	return w
}
