package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/migrate"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/store/postgres"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/web"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/workflow/projector"
)

// serveFlags are `orrery serve`'s settings.
type serveFlags struct {
	store       string
	worker      string
	listen      string
	tlsCert     string
	tlsKey      string
	leaseTTL    time.Duration
	claimTTL    time.Duration
	maxSkew     time.Duration
	idleAfter   time.Duration
	snapEvery   uint64
	noOrch      bool
	roles       string
	effectKinds string
	capacity    int
	effects     int
	maxBody     int64
	callTimeout time.Duration
	stopTimeout time.Duration
	logLevel    string
	logFormat   string
	// Backpressure (plane.Limits).
	maxInbox       int
	maxEffectQueue int
	maxEffectKind  []string // kind=N
}

func (e *env) serveCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a node: orchestrator, host, adapters, timers, reapers and the HTTP API",
		Long: `serve runs everything in one process: the orchestrator (one acts per cluster),
a host for the worlds placed on this worker, the effect adapters (http.request,
fabric.send and the binary's own), the durable timer worker, the reapers and
the HTTP API.

The default store is an embedded SQLite file, ./orrery.db. Point several
serve processes at one PostgreSQL (--store postgres://...) with distinct
--worker-id values and they form a cluster: a world runs on exactly one of
them, and moves when that one dies (after its lease TTL) or drains. For a
PostgreSQL that fails over to a standby, list both servers and ask for the
writable one: --store 'postgres://u:p@db1:5432,db2:5432/orrery?target_session_attrs=read-write'
(or the key/value form 'host=db1,db2 dbname=orrery target_session_attrs=read-write').

--roles splits a cluster into worker classes: a process runs only the parts
it names (host: worlds and workflow runs; effects: the adapter pool, of the
kinds --effect-kinds names, default all; timers: the timer worker; api: the
HTTP API; orchestrator: placement), and advertises them with the world
types and workflow versions it carries. Worlds are placed only on live
host processes that carry their type, at most --capacity on each. A process
without the api role still listens, for /healthz, /readyz and /metrics
only. docs/operations.md ("Worker classes") shows a split cluster.

On SIGTERM or SIGINT it stops gracefully, within --stop-timeout: it claims
no new effect and takes no new world; its worlds finish the step in flight
and their leases are released, so the others take them at once; the effects
executing finish and their receipts are delivered, so none of them is run
again elsewhere. It then exits 0. An effect still executing when
--stop-timeout runs out is cancelled and its claim released at once for
another node (a warning names it; that node runs it again, as after a
crash), and serve exits 1 with "graceful stop: ...".

If another process starts under the same --worker-id (or this process's
incarnation is retired), the store refuses this one's heartbeats: it stops
acting at once (effects cut short without receipts, worlds, timers and
placement stopped; the store has requeued its claims), logs why at ERROR,
and exits 1 without draining, since the worker id is the other process's
now. Give every process its own --worker-id.

A listener on anything but loopback requires a token (--token or
ORRERY_TOKEN); TLS is served when --tls-cert and --tls-key are given.
Traces are exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set.

Every flag has an environment variable, ORRERY_ and its name in upper case
with _ for - (--lease-ttl: ORRERY_LEASE_TTL), and a key of the same name in
the TOML file --config names (or ORRERY_CONFIG). A flag wins over the
variable, the variable over the file, the file over the default; an unknown
key or a bad value is a usage error naming it. docs/operations.md has the
table and docs/orrery.example.toml an example.

--log-format json makes every line JSON, the first one (where the API
listens, on stdout) included. Each API request's log lines carry its
request_id, which its answer returns in X-Request-Id; a client's mistake
(4xx) is logged at INFO.`,
		Example: `  orrery serve
  orrery serve --store ./data/orrery.db --listen 127.0.0.1:8080
  ORRERY_TOKEN=s3cret orrery serve --store postgres://orrery@db:5432/orrery --worker-id node-a --listen 0.0.0.0:7070
  ORRERY_STORE=memory ORRERY_LOG_FORMAT=json orrery serve
  orrery serve --config /etc/orrery/orrery.toml
  orrery serve --store postgres://orrery@db:5432/orrery --worker-id fx-1 --roles effects --effect-kinds http.request`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return e.serve(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.store, "store", "orrery.db", "a SQLite file path, a postgres:// URL or key/value DSN (several hosts for a cluster that fails over), or memory (nothing survives)")
	fl.StringVar(&f.worker, "worker-id", "", "this worker's id, unique in the cluster (default <hostname>-<pid>)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7070", "the HTTP API's address")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate file (PEM)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "TLS key file (PEM)")
	fl.DurationVar(&f.leaseTTL, "lease-ttl", 10*time.Second, "world lease TTL: a crashed worker's worlds move after at most this")
	fl.DurationVar(&f.claimTTL, "claim-ttl", 30*time.Second, "effect and timer claim TTL: must exceed the slowest adapter call")
	fl.DurationVar(&f.maxSkew, "max-clock-skew", 0, "the most the store servers' clocks may differ (a failover's new primary against the old): subtracted from the liveness promise each effect executes under (default 1s or a tenth of --lease-ttl, whichever is smaller; negative: none; must be below half --lease-ttl)")
	fl.DurationVar(&f.idleAfter, "idle-after", 30*time.Second, "passivate a world idle this long (negative: never)")
	fl.Uint64Var(&f.snapEvery, "snapshot-every", 1000, "snapshot a world every N journal heights (restore reads at most N records; forks start from a snapshot)")
	fl.BoolVar(&f.noOrch, "no-orchestrator", false, "host worlds but never place them")
	fl.StringVar(&f.roles, "roles", strings.Join(plane.Roles(), ","), "the parts this process runs, comma-separated: host (worlds and workflow runs), effects (the adapter pool), timers (the timer worker), api (the HTTP API), orchestrator (placement)")
	fl.StringVar(&f.effectKinds, "effect-kinds", "", "the effect kinds this process's pool executes, comma-separated, of those the binary serves (default all; needs the effects role)")
	fl.IntVar(&f.capacity, "capacity", 0, "the most worlds this process hosts (default no bound)")
	fl.IntVar(&f.effects, "effect-concurrency", 16, "effects executing at once")
	fl.Int64Var(&f.maxBody, "max-body", 1<<20, "largest request body the API accepts, in bytes")
	fl.DurationVar(&f.callTimeout, "call-timeout", 30*time.Second, "the longest a call waits for its reply")
	fl.DurationVar(&f.stopTimeout, "stop-timeout", 30*time.Second, "how long a graceful stop waits for the steps and effects in flight before it releases what is left")
	fl.IntVar(&f.maxInbox, "max-inbox", 10000, "refuse new input (429 overloaded) to a world whose inbox already holds this many undrained items (0: unbounded)")
	fl.IntVar(&f.maxEffectQueue, "max-effect-queue", 0, "refuse new input (429 overloaded) to every world while the pending effects of any one kind number this many (0: unbounded)")
	fl.StringSliceVar(&f.maxEffectKind, "max-effect-queue-kind", nil, "kind=N: the pending-effect bound of one kind, overriding --max-effect-queue (N=0: that kind unbounded); repeat or comma-separate")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	return cmd
}

// serveLimits reads the backpressure flags; a bad value is a usage error.
func serveLimits(f serveFlags) (plane.Limits, error) {
	if f.maxInbox < 0 {
		return plane.Limits{}, usagef("--max-inbox %d is negative (0: unbounded)", f.maxInbox)
	}
	if f.maxEffectQueue < 0 {
		return plane.Limits{}, usagef("--max-effect-queue %d is negative (0: unbounded)", f.maxEffectQueue)
	}
	kinds, err := parseKindBounds(f.maxEffectKind)
	if err != nil {
		return plane.Limits{}, usageError{err}
	}
	return plane.Limits{MaxInbox: f.maxInbox, MaxEffectQueue: f.maxEffectQueue, MaxEffectQueueKind: kinds}, nil
}

// parseKindBounds reads --max-effect-queue-kind values, each kind=N with N
// a non-negative integer; a kind named twice is an error, not a silent
// override.
func parseKindBounds(vals []string) (map[string]int, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]int, len(vals))
	for _, v := range vals {
		kind, num, ok := strings.Cut(v, "=")
		kind = strings.TrimSpace(kind)
		if !ok || kind == "" {
			return nil, fmt.Errorf("--max-effect-queue-kind %q: want kind=N", v)
		}
		if err := store.CheckID("serve", "kind", kind); err != nil {
			return nil, fmt.Errorf("--max-effect-queue-kind %q: %w", v, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--max-effect-queue-kind %q: N must be a non-negative integer", v)
		}
		if _, dup := out[kind]; dup {
			return nil, fmt.Errorf("--max-effect-queue-kind: kind %q given twice", kind)
		}
		out[kind] = n
	}
	return out, nil
}

// openStore opens the store a --store value names; leaseTTL is the
// world leases' (see withIdleTxTimeout).
func openStore(ctx context.Context, spec string, leaseTTL time.Duration) (store.Store, string, error) {
	switch {
	case spec == "memory":
		return memstore.New(), "memory", nil
	case isPostgresDSN(spec):
		// ?schema= names the store's schema (migrate.SchemaParam): two
		// stores can share one database.
		dsn, schema, err := migrate.SplitSchema(spec)
		if err != nil {
			return nil, "", usageError{err}
		}
		if dsn, err = withIdleTxTimeout(dsn, leaseTTL); err != nil {
			return nil, "", err
		}
		var opts []postgres.Option
		desc := "postgres"
		if schema != "" {
			opts = append(opts, postgres.WithSchema(schema))
			desc += " schema " + schema
		}
		st, err := postgres.Open(ctx, dsn, opts...)
		return st, desc, err
	case spec == "":
		return nil, "", usagef("--store is empty")
	default:
		st, err := sqlite.Open(ctx, spec)
		return st, "sqlite " + spec, err
	}
}

// isPostgresDSN tells a --store value that names PostgreSQL: a URL
// (postgres:// or postgresql://) or a key/value DSN. Either may list
// several hosts, the standby after the primary, for a cluster that fails
// over; target_session_attrs=read-write then makes every connection find
// the primary.
func isPostgresDSN(spec string) bool { return migrate.IsPostgres(spec) }

// idleTxParam is PostgreSQL's limit on how long a session may wait for
// its client in the middle of a transaction before the server aborts it.
const idleTxParam = "idle_in_transaction_session_timeout"

// idleTxKeyword finds the limit in a key/value DSN.
var idleTxKeyword = regexp.MustCompile(`(^|\s)` + idleTxParam + `\s*=`)

// withIdleTxTimeout sets that limit to half the lease TTL, unless the DSN
// sets it. A process that stalls inside a transaction (stopped, starved,
// cut off by the network) keeps the row locks the transaction took, its
// worlds' lease rows among them, and a takeover of those worlds would wait
// on them for as long as the stall lasts, long after the leases expired,
// stalling in turn the hosts that wait. With the limit the locks go half a
// TTL into the stall; a held lease then had a third of the TTL or more
// left (it is renewed a third of the TTL before it expires), so a takeover
// waits at most a sixth of the TTL past its expiry. A merely slow process
// that hits the limit sees its store call fail as on a dropped connection,
// which the plane recovers from.
func withIdleTxTimeout(dsn string, leaseTTL time.Duration) (string, error) {
	limit := strconv.FormatInt(max(leaseTTL/2, time.Millisecond).Milliseconds(), 10)
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		// A key/value DSN: a later keyword would override, so the DSN's
		// own setting, if any, is kept by not adding one.
		if idleTxKeyword.MatchString(dsn) {
			return dsn, nil
		}
		return strings.TrimSpace(dsn) + " " + idleTxParam + "=" + limit, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", usagef("--store is not a valid URL: %v", err)
	}
	q := u.Query()
	if q.Has(idleTxParam) {
		return dsn, nil
	}
	q.Set(idleTxParam, limit)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format must be text or json, not %q", format)
}

// tracerProvider installs the OpenTelemetry SDK with an OTLP/HTTP exporter
// when the standard OTEL_EXPORTER_OTLP_* variables name an endpoint; the
// libraries below only ever see the API.
func tracerProvider(ctx context.Context, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	return tp, tp.Shutdown, nil
}

func (e *env) serve(ctx context.Context, f serveFlags) error {
	if len(e.kernels) == 0 && e.workflows == nil {
		return usagef("this binary has no worlds and no workflows to serve")
	}
	if e.kernels == nil {
		// Workflows only: the plane runs with no world types (its host
		// hosts nothing; runs are the workflow worker's).
		e.kernels = plane.Kernels{}
	}
	log, err := newLogger(e.io.Err, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	// The node would refuse it too, but only after the listener and the
	// store are open; a setting that cannot work is a usage error.
	if f.maxSkew >= f.leaseTTL/2 {
		return usagef("--max-clock-skew %v must be below half --lease-ttl (%v)", f.maxSkew, f.leaseTTL)
	}
	roleList := splitList(f.roles)
	roles, err := node.ResolveRoles(roleList)
	if err != nil {
		return usagef("--roles: %v", err)
	}
	var kinds []string
	if f.effectKinds != "" {
		kinds = splitList(f.effectKinds)
	}
	if f.capacity < 0 {
		return usagef("--capacity %d is negative", f.capacity)
	}
	if err := node.CheckRoles(node.Config{Roles: roleList, EffectKinds: kinds, Capacity: f.capacity, Adapters: e.adapters}); err != nil {
		return usagef("--effect-kinds: %v", err)
	}
	limits, err := serveLimits(f)
	if err != nil {
		return err
	}
	token := e.token
	if token == "" {
		token = e.io.Getenv("ORRERY_TOKEN")
	}
	// The listener first: a bad address or a refused insecure listener
	// must fail before anything touches the store.
	ln, err := api.Listen(ctx, f.listen, token, f.tlsCert, f.tlsKey)
	if err != nil {
		// An address or TLS setting that cannot work is the caller's to
		// fix, like a bad flag.
		if errors.Is(err, api.ErrInsecure) || errors.Is(err, api.ErrConfig) {
			return usagef("%v", err)
		}
		return err
	}
	defer ln.Close()

	st, desc, err := openStore(ctx, f.store, f.leaseTTL)
	if err != nil {
		return err
	}
	defer st.Close()
	worker := f.worker
	if worker == "" {
		host, _ := os.Hostname()
		worker = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	tp, shutdownTracing, err := tracerProvider(ctx, e.io.Getenv)
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := api.NewMetrics(reg)

	n, err := node.Start(ctx, node.Config{
		Worker: worker, Store: st, Kernels: e.kernels, Workflows: e.workflows,
		Adapters: e.adapters, HTTP: e.httpConfig, Retry: e.retry, Projectors: e.projectors,
		LeaseTTL: f.leaseTTL, ClaimTTL: f.claimTTL, MaxSkew: f.maxSkew, IdleAfter: f.idleAfter,
		NoOrchestrator: f.noOrch, EffectConcurrency: f.effects, Logger: log, Limits: limits,
		Roles: roleList, EffectKinds: kinds, Capacity: f.capacity,
		Observe: metrics.ObserveHost,
		Host:    func(hc *plane.HostConfig) { hc.SnapshotEvery = f.snapEvery },
		ObserveEffect: func(ev adapter.EffectEvent) {
			if ev.Err == nil && !ev.Dup {
				metrics.ObserveDispatchToReceipt(ev.Dispatch)
			}
		},
		Tracer: tp,
		WorkflowWorker: func(wc *workflow.WorkerConfig) {
			prev := wc.Observe
			wc.Observe = func(ev workflow.Event) {
				if prev != nil {
					prev(ev)
				}
				metrics.ObserveWorkflow(ev)
			}
		},
	})
	if err != nil {
		return err
	}
	metrics.CollectQueueDepths(st.QueueDepths)
	metrics.CollectWorkflowQueues(st)
	metrics.CollectWorldsUnplaced(n.Unplaced)
	if roles[plane.RoleHost] {
		metrics.CollectWorldsHosted(api.HostedBy(n.Host()))
	}
	metrics.CollectIngressRefused(n.Admission().Refused)
	metrics.CollectSchedules(st)
	if v := n.RunsView(); v != nil {
		metrics.CollectRuns(func() map[string]int { return runCounts(v.Runs, n.Runs()) })
	}
	srv, err := api.NewServer(api.Config{
		Store: st, Ops: n.Ops(), Client: n.Client(), Kernels: e.kernels,
		Token: token, MaxBody: f.maxBody, CallTimeout: f.callTimeout,
		Ready: n.Ready, Metrics: metrics, Logger: log, Tracer: tp,
		Executor: n.Executor(), UI: web.Handler(), Runs: runsBackend(n, e.workflows),
		ProbesOnly: !roles[plane.RoleAPI],
	})
	if err != nil {
		_ = n.Stop(ctx)
		return err
	}
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHTTP()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(httpCtx, ln) }()

	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	// A process without the api role serves its probes and metrics only.
	what, key := "API", "api"
	if !roles[plane.RoleAPI] {
		what, key = "probes", "probes"
	}
	if f.logFormat == "json" {
		// Every line this process writes is JSON, its first included.
		slog.New(slog.NewJSONHandler(e.io.Out, nil)).Info("orrery serve", "worker", worker, "store", desc, key, scheme+"://"+addrOf(ln),
			"roles", n.Roles())
	} else {
		fmt.Fprintf(e.io.Out, "orrery serve: worker %s, store %s, %s %s://%s\n", worker, desc, what, scheme, addrOf(ln))
	}
	log.Info("serving", "worker", worker, "store", desc, "listen", addrOf(ln), "roles", n.Roles(), "dashboard", scheme+"://"+addrOf(ln)+"/ui/")

	sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var serveErr, fenced error
	select {
	case <-sig.Done():
	case serveErr = <-served:
	case <-n.Done():
		// Another process took this worker id (or the incarnation was
		// retired): this one stopped acting, and exits rather than come
		// back, which would take the id from its successor: exit 7, which
		// a supervisor is told not to restart on (a restart would take
		// the id back, and two processes sharing one would flap).
		fenced = n.Err()
		log.Error("exiting: another process took over this worker id, or this process was retired; give each process its own --worker-id",
			"worker", worker, "err", fenced)
	}
	// A planned handoff: stop taking work, finish the steps and effects
	// in flight, release every lease (and every effect claim that did not
	// finish in time), then let the API's requests in flight end.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.stopTimeout)
	defer cancel()
	if fenced == nil {
		log.Info("stopping: draining worlds and effects in flight, releasing leases", "worker", worker, "stop_timeout", f.stopTimeout)
	}
	stopErr := n.Stop(sctx)
	stopHTTP()
	if serveErr == nil {
		serveErr = <-served
	}
	if fenced != nil {
		return exitError{ExitSuperseded, fenced}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	if stopErr != nil {
		return fmt.Errorf("graceful stop: %w", stopErr)
	}
	log.Info("stopped", "worker", worker)
	return nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	out := []string{}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runsBackend is what the API's run endpoints need of a node that runs
// workflows (nil when it runs none).
// runCounts are the runs in each status for orrery_workflow_runs: the
// runs projection's, except that the runs whose version no live worker
// carries count as unrunnable (their projection status, if any, loses
// them; a blocked run stays blocked). The unrunnable look is bounded: a
// scrape that cannot make it in time counts the projection alone.
func runCounts(runs *projector.Runs, cl *workflow.Client) map[string]int {
	out := map[string]int{}
	for _, r := range runs.List() {
		s := string(r.Status)
		if s == "" {
			s = "unknown"
		}
		out[s]++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	un, err := cl.Unrunnable(ctx)
	if err != nil {
		return out
	}
	for _, u := range un {
		for _, id := range u.Runs {
			if r, ok := runs.Get(id); ok {
				if r.Status == projector.StatusBlocked || r.Status.Terminal() {
					continue
				}
				s := string(r.Status)
				if s == "" {
					s = "unknown"
				}
				out[s]--
			}
			out[string(workflow.StatusUnrunnable)]++
		}
	}
	return out
}

func runsBackend(n *node.Node, wfs *workflow.Workflows) *api.RunsBackend {
	v := n.RunsView()
	if v == nil {
		return nil
	}
	return &api.RunsBackend{Client: n.Runs(), Workflows: wfs, Runs: v.Runs, Timeline: v.Timeline, CatchUp: v.CatchUp}
}

func addrOf(ln net.Listener) string { return ln.Addr().String() }
