package testrig

import (
	"context"
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
)

// NodeOptions shape a Node.
type NodeOptions struct {
	Store     store.Store // nil: a fresh memstore
	Kernels   plane.Kernels
	Universes []string // the universes the orchestrator places
	Token     string
	Workers   []string // the hosts to run (nil: one, "w1")
	Config    func(*api.Config)
	Metrics   bool
	OrchID    string // the orchestrator's id (default "orch")
	// Host adjusts each host's configuration (after the rig's defaults,
	// among them SnapshotEvery 2).
	Host func(*plane.HostConfig)
	// Limits bound the node's ingress (its Ops and plane client).
	Limits plane.Limits
	// Lifetime bounds the node's context, and so the test (default 3
	// minutes): a measurement that runs longer says so.
	Lifetime time.Duration
}

// Node is a plane on the production executor over one store: hosts, an
// orchestrator, a plane client and the ops service, with the API served
// by an httptest server and an api.Client on it. Everything it starts
// stops when the test ends.
type Node struct {
	T           testing.TB
	Ctx         context.Context
	Store       store.Store
	Kernels     plane.Kernels
	Ops         *plane.Ops
	PlaneClient *plane.Client
	Hosts       []*plane.Host
	Server      *api.Server
	HTTP        *httptest.Server
	Client      *api.Client
	Metrics     *api.Metrics
	Registry    *prometheus.Registry
	Root        *actor.Scope
	Replies     *plane.Replies
	Admission   *plane.Admission
	host        func(*plane.HostConfig)
}

// NewNode starts a Node as o says.
func NewNode(t testing.TB, o NodeOptions) *Node {
	t.Helper()
	life := o.Lifetime
	if life <= 0 {
		life = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), life)
	t.Cleanup(cancel)
	st := o.Store
	if st == nil {
		st = memstore.New()
	}
	n := &Node{T: t, Ctx: ctx, Store: st, Kernels: o.Kernels, host: o.Host}
	if o.Metrics {
		n.Registry = prometheus.NewRegistry()
		n.Metrics = api.NewMetrics(n.Registry)
		if err := n.Metrics.Err(); err != nil {
			t.Fatal(err)
		}
		n.Metrics.CollectQueueDepths(st.QueueDepths)
		n.Metrics.CollectWorkflowQueues(st)
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
	n.Root, n.Replies = sys.Root(), plane.NewReplies()
	workers := o.Workers
	if workers == nil {
		workers = []string{"w1"}
	}
	for _, w := range workers {
		n.StartHost(w)
	}
	if n.Metrics != nil {
		n.Metrics.CollectWorldsHosted(api.HostedBy(n.Hosts...))
	}
	orchID := o.OrchID
	if orchID == "" {
		orchID = "orch"
	}
	if _, err := plane.StartOrchestrator(ctx, sys.Root(), plane.OrchestratorConfig{
		ID: orchID, Store: st, Universes: o.Universes,
		LeaseTTL: 10 * time.Second, Every: 50 * time.Millisecond,
	}); err != nil {
		t.Fatal(err)
	}
	var err error
	if n.Admission, err = plane.NewAdmission(st, ex, o.Limits); err != nil {
		t.Fatal(err)
	}
	if n.Metrics != nil {
		n.Metrics.CollectIngressRefused(n.Admission.Refused)
	}
	if n.Ops, err = plane.NewOps(st, o.Kernels, plane.OpsAdmission(n.Admission)); err != nil {
		t.Fatal(err)
	}
	if n.PlaneClient, err = plane.NewClient(plane.ClientConfig{Store: st, Kernels: o.Kernels, Executor: ex, Replies: n.Replies, Hosts: n.Hosts, Admission: n.Admission}); err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Store: st, Ops: n.Ops, Client: n.PlaneClient, Kernels: o.Kernels, Token: o.Token, Metrics: n.Metrics, CallTimeout: 30 * time.Second}
	if o.Config != nil {
		o.Config(&cfg)
	}
	if n.Server, err = api.NewServer(cfg); err != nil {
		t.Fatal(err)
	}
	n.HTTP, n.Client = Serve(t, n.Server, o.Token)
	return n
}

// Serve serves h with an httptest server until t ends, and returns it
// with an api.Client on it that sends token.
func Serve(t testing.TB, h http.Handler, token string) (*httptest.Server, *api.Client) {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c, err := api.NewClient(hs.URL, token, api.WithHTTPClient(hs.Client()))
	if err != nil {
		t.Fatal(err)
	}
	return hs, c
}

// StartHost starts a host for worker on the node's store.
func (n *Node) StartHost(worker string) *plane.Host {
	n.T.Helper()
	cfg := plane.HostConfig{
		Worker: worker, Store: n.Store, Kernels: n.Kernels, Replies: n.Replies,
		LeaseTTL: 10 * time.Second, SyncEvery: 50 * time.Millisecond, SnapshotEvery: 2,
	}
	if n.Metrics != nil {
		cfg.Observe = n.Metrics.ObserveHost
	}
	if n.host != nil {
		n.host(&cfg)
	}
	h, err := plane.StartHost(n.Ctx, n.Root, cfg)
	if err != nil {
		n.T.Fatal(err)
	}
	n.Hosts = append(n.Hosts, h)
	return h
}

// WaitFor re-checks cond until it holds: a bounded loop on a condition,
// never a timing assertion. Its bound is only a hang guard: two minutes of
// the machine's clock, far above the milliseconds a condition takes, even
// on PostgreSQL beside other packages' tests.
func (n *Node) WaitFor(what string, cond func() (bool, error)) {
	n.T.Helper()
	WaitFor(n.T, what, 2*time.Minute, 5*time.Millisecond, cond)
}

// Do sends a raw request to the node's API server and returns the status
// and body.
func (n *Node) Do(method, path, contentType, body, token string) (int, []byte) {
	n.T.Helper()
	req, err := http.NewRequestWithContext(n.Ctx, method, n.HTTP.URL+path, strings.NewReader(body))
	if err != nil {
		n.T.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := n.HTTP.Client().Do(req)
	if err != nil {
		n.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		n.T.Fatal(err)
	}
	return resp.StatusCode, b
}

// Create creates a world through the API.
func (n *Node) Create(id, universe string) api.World {
	n.T.Helper()
	w, _, err := n.Client.CreateWorld(n.Ctx, id, universe)
	if err != nil {
		n.T.Fatalf("create %s: %v", id, err)
	}
	return w
}
