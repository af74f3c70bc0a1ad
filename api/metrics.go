package api

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/workflow"
)

// Metrics are the plane's Prometheus series. The wiring feeds them: host
// events through ObserveHost, latencies through the Observe* methods, and
// the gauges through functions it gives (CollectQueueDepths,
// CollectWorldsHosted), which are called at scrape time, so a gauge is
// never stale and nothing polls between scrapes.
type Metrics struct {
	leaseRenew       prometheus.Histogram
	inboxToJournal   prometheus.Histogram
	dispatchReceipt  prometheus.Histogram
	timerLateness    prometheus.Histogram
	fenced           prometheus.Counter
	incFenced        prometheus.Counter
	parityFailures   prometheus.Counter
	commits          prometheus.Counter
	httpRequests     *prometheus.CounterVec
	httpDuration     *prometheus.HistogramVec
	workflowSteps    *prometheus.CounterVec
	handlerErrors    *prometheus.CounterVec
	handlerPanics    *prometheus.CounterVec
	upgrades         *prometheus.CounterVec
	gauges           *gaugeCollector
	gatherer         prometheus.Gatherer
	registrationErrs error
}

// Hosted is one worker's count of worlds, for orrery_worlds_hosted: Held
// leases, of which Active have a running process.
type Hosted struct {
	Worker string
	Held   int
	Active int
}

// HostedBy returns the function CollectWorldsHosted wants for the hosts
// of this process.
func HostedBy(hosts ...*plane.Host) func() []Hosted {
	return func() []Hosted {
		out := make([]Hosted, 0, len(hosts))
		for _, h := range hosts {
			held, active := h.Worlds()
			out = append(out, Hosted{Worker: h.Worker(), Held: len(held), Active: active})
		}
		return out
	}
}

// durationBuckets span half a millisecond to about 16 seconds.
func durationBuckets() []float64 { return prometheus.ExponentialBuckets(0.0005, 2, 16) }

// NewMetrics creates the series and registers them with reg (nil: a
// registry of their own). /metrics serves reg when it is also a
// prometheus.Gatherer (a *prometheus.Registry is), and the series alone
// otherwise. A series reg already has (another Metrics on the same
// registry) is shared, not an error; any other registration failure is
// kept in Err and that series is served from the Metrics' own registry
// only.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	own := prometheus.NewRegistry()
	m := &Metrics{gauges: &gaugeCollector{}}
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: durationBuckets()})
	}
	m.leaseRenew = hist("orrery_lease_renew_seconds", "Duration of a host's batched lease renewal round trip.")
	m.inboxToJournal = hist("orrery_inbox_to_journal_seconds", "Time from an input's enqueue to the commit that journaled it.")
	m.dispatchReceipt = hist("orrery_effect_dispatch_to_receipt_seconds", "Time from an effect's enqueue to its receipt's completion.")
	m.timerLateness = hist("orrery_timer_lateness_seconds", "Time from a durable timer's due time to its firing by the host that holds its world.")
	m.fenced = prometheus.NewCounter(prometheus.CounterOpts{Name: "orrery_fenced_total", Help: "Worlds stopped on a host because their lease was fenced."})
	m.incFenced = prometheus.NewCounter(prometheus.CounterOpts{Name: "orrery_incarnation_fenced_total", Help: "Heartbeats the store refused because this process's incarnation was superseded (another process under the same worker id) or retired; the node then stops acting."})
	m.parityFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "orrery_replay_parity_failures_total", Help: "Restores whose replay diverged from the journal."})
	m.commits = prometheus.NewCounter(prometheus.CounterOpts{Name: "orrery_commits_total", Help: "World cycles committed."})

	// The route is the pattern that matched ("GET /v1/worlds/{id}", or
	// "unmatched"), never the raw path: the series stay bounded whatever
	// the clients ask for.
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orrery_http_requests_total", Help: "HTTP API requests answered, by route pattern and status code."}, []string{"route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "orrery_http_request_duration_seconds", Help: "HTTP API request latency, by route pattern and status code.", Buckets: durationBuckets()}, []string{"route", "code"})
	m.workflowSteps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orrery_workflow_steps_total", Help: "Workflow step attempts recorded by this node's workers, by outcome: completed, retried (failed, to be tried again) or failed (for good)."}, []string{"outcome"})
	m.handlerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orrery_handler_errors_total", Help: "Committed world steps whose handler returned an error, by world type (definition name)."}, []string{"world_type"})
	m.handlerPanics = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orrery_handler_panics_total", Help: "Committed world steps whose handler panicked, by world type (definition name)."}, []string{"world_type"})
	m.httpRequests = register(m, own, reg, m.httpRequests)
	m.httpDuration = register(m, own, reg, m.httpDuration)
	m.workflowSteps = register(m, own, reg, m.workflowSteps)
	m.upgrades = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orrery_world_upgrades_total", Help: "Committed world upgrade records by world type and result: done (the world moved to another version) or failed (it stays on its version)."}, []string{"world_type", "result"})
	m.upgrades = register(m, own, reg, m.upgrades)
	m.handlerErrors = register(m, own, reg, m.handlerErrors)
	m.handlerPanics = register(m, own, reg, m.handlerPanics)

	m.leaseRenew = register(m, own, reg, m.leaseRenew)
	m.inboxToJournal = register(m, own, reg, m.inboxToJournal)
	m.dispatchReceipt = register(m, own, reg, m.dispatchReceipt)
	m.timerLateness = register(m, own, reg, m.timerLateness)
	m.fenced = register(m, own, reg, m.fenced)
	m.incFenced = register(m, own, reg, m.incFenced)
	m.parityFailures = register(m, own, reg, m.parityFailures)
	m.commits = register(m, own, reg, m.commits)
	_ = register[prometheus.Collector](m, own, reg, m.gauges)

	m.gatherer = own
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.gatherer = g
	}
	return m
}

// register adds c to the Metrics' own registry and to reg. If reg has an
// equal collector already, that one is used everywhere instead.
func register[C prometheus.Collector](m *Metrics, own *prometheus.Registry, reg prometheus.Registerer, c C) C {
	if reg != nil {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if prev, ok := are.ExistingCollector.(C); ok {
					c = prev
				}
			} else {
				m.registrationErrs = errors.Join(m.registrationErrs, err)
			}
		}
	}
	if err := own.Register(c); err != nil {
		m.registrationErrs = errors.Join(m.registrationErrs, err)
	}
	return c
}

// Err reports the registrations that failed in NewMetrics (nil: none).
func (m *Metrics) Err() error { return m.registrationErrs }

// Gatherer is what /metrics serves.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.gatherer }

// ObserveHost feeds a host event (plane.HostConfig.Observe): a fence
// counts in orrery_fenced_total, a heartbeat the store refused (the
// incarnation superseded or retired) in orrery_incarnation_fenced_total, a
// commit in orrery_commits_total, a timer
// the host fired in orrery_timer_lateness_seconds, and a world that
// crashed because its replay diverged from its journal in
// orrery_replay_parity_failures_total, and an upgrade record in
// orrery_world_upgrades_total{world_type,result}. It never blocks.
func (m *Metrics) ObserveHost(ev plane.HostEvent) {
	switch ev.Kind {
	case plane.EvFenced:
		m.fenced.Inc()
	case plane.EvIncarnationFenced:
		m.incFenced.Inc()
	case plane.EvCommit:
		m.commits.Inc()
		if ev.N > 0 { // a cycle that journaled inputs: Dur is the oldest's wait
			m.inboxToJournal.Observe(ev.Dur.Seconds())
		}
	case plane.EvRenewed:
		m.leaseRenew.Observe(ev.Dur.Seconds())
	case plane.EvTimerFired:
		m.timerLateness.Observe(ev.Dur.Seconds())
	case plane.EvDiverged:
		m.parityFailures.Inc()
	case plane.EvHandlerError:
		m.handlerErrors.WithLabelValues(ev.WorldType).Inc()
	case plane.EvHandlerPanic:
		m.handlerPanics.WithLabelValues(ev.WorldType).Inc()
	case plane.EvUpgraded:
		m.upgrades.WithLabelValues(ev.WorldType, "done").Inc()
	case plane.EvUpgradeFailed:
		m.upgrades.WithLabelValues(ev.WorldType, "failed").Inc()
	}
}

// observeRequest records one answered request of route (the pattern).
func (m *Metrics) observeRequest(route string, status int, d time.Duration) {
	code := strconv.Itoa(status)
	m.httpRequests.WithLabelValues(route, code).Inc()
	m.httpDuration.WithLabelValues(route, code).Observe(d.Seconds())
}

// ObserveWorkflow feeds a workflow worker's event
// (workflow.WorkerConfig.Observe): a step's recorded attempt counts in
// orrery_workflow_steps_total by its outcome. It never blocks.
func (m *Metrics) ObserveWorkflow(ev workflow.Event) {
	if ev.Kind == workflow.EvStep {
		m.workflowSteps.WithLabelValues(ev.Outcome).Inc()
	}
}

// CollectRuns makes orrery_workflow_runs{status} read f at each scrape:
// the number of runs in each status (a node gives its runs projection's
// count).
func (m *Metrics) CollectRuns(f func() map[string]int) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.runs = f
}

// CollectIngressRefused makes orrery_ingress_refused_total{reason} read f
// at each scrape (plane.Admission.Refused gives the node's counts).
func (m *Metrics) CollectIngressRefused(f func() map[string]uint64) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.refused = f
}

// ObserveLeaseRenew records one batched renewal's round trip.
func (m *Metrics) ObserveLeaseRenew(d time.Duration) { m.leaseRenew.Observe(d.Seconds()) }

// ObserveInboxToJournal records an input's time from enqueue to journal.
func (m *Metrics) ObserveInboxToJournal(d time.Duration) { m.inboxToJournal.Observe(d.Seconds()) }

// ObserveDispatchToReceipt records an effect's time from enqueue to
// receipt.
func (m *Metrics) ObserveDispatchToReceipt(d time.Duration) {
	m.dispatchReceipt.Observe(d.Seconds())
}

// CollectQueueDepths makes orrery_queue_depth{queue} read f at each
// scrape (typically store.Store.QueueDepths). A scrape bounds f with
// ScrapeTimeout; when f fails, the gauge is left out of that scrape.
func (m *Metrics) CollectQueueDepths(f func(context.Context) (store.QueueDepths, error)) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.depths = f
}

// CollectWorkflowQueues makes orrery_queue_depth{queue} (waiting runs)
// and orrery_queue_running{queue} (admitted runs, each holding a slot)
// read the named queues of workflow runs from q at each scrape, bounded
// like CollectQueueDepths. A queue's label is its name, beside the plane's
// own queues (effects_pending, …).
func (m *Metrics) CollectWorkflowQueues(q store.Queues) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.queues = q
}

// CollectWorldsHosted makes orrery_worlds_hosted{worker,state} read f at
// each scrape (HostedBy gives one for in-process hosts).
func (m *Metrics) CollectWorldsHosted(f func() []Hosted) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.hosted = f
}

// CollectWorldsUnplaced makes orrery_worlds_unplaced read f at each
// scrape: the active worlds the acting orchestrator could place nowhere
// (plane.Orchestrator.Unplaced; 0 on a process whose orchestrator does
// not act, so the cluster's figure is the sum, or the max, over nodes).
func (m *Metrics) CollectWorldsUnplaced(f func() int) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.unplaced = f
}

// CollectSchedules makes orrery_schedule_ticks_total{schedule,outcome}
// read st's schedules at each scrape: the cluster-wide counters each
// schedule keeps in the store (fired, missed by the catch-up policy,
// skipped by the overlap policy, failed to start), so every node exports
// the same values, whichever scheduler fired the ticks.
func (m *Metrics) CollectSchedules(st store.Store) {
	m.gauges.mu.Lock()
	defer m.gauges.mu.Unlock()
	m.gauges.schedules = func(ctx context.Context) ([]schedule.Schedule, error) {
		return schedule.List(ctx, st, "", store.MaxListLimit)
	}
}

// ScrapeTimeout bounds the store read of a scrape's queue depths.
const ScrapeTimeout = 5 * time.Second

var (
	queueDepthDesc = prometheus.NewDesc("orrery_queue_depth", "Items in each of the plane's queues.", []string{"queue"}, nil)
	hostedDesc     = prometheus.NewDesc("orrery_worlds_hosted", "Worlds a worker holds (held) and runs a process for (active).", []string{"worker", "state"}, nil)
	unplacedDesc   = prometheus.NewDesc("orrery_worlds_unplaced", "Active worlds the acting orchestrator could place on no live host that carries their type and has room (0 where the orchestrator does not act).", nil, nil)
	queueRunDesc   = prometheus.NewDesc("orrery_queue_running", "Admitted runs of each named workflow queue: each holds a slot until it ends.", []string{"queue"}, nil)
	refusedDesc    = prometheus.NewDesc("orrery_ingress_refused_total", "Ingress requests refused with overloaded (429), by reason: inbox (a world's inbox at its bound) or effect_queue (an effect kind's pending queue at its bound).", []string{"reason"}, nil)
	scheduleDesc   = prometheus.NewDesc("orrery_schedule_ticks_total", "Ticks of each schedule by outcome: fired (started), missed (dropped by the catch-up policy), skipped (by the overlap policy), failed (could not start).", []string{"schedule", "outcome"}, nil)
	runsDesc       = prometheus.NewDesc("orrery_workflow_runs", "Workflow runs in each status (queued, running, paused, blocked, unrunnable, completed, failed, cancelled), as this node's runs projection has them; unrunnable: not ended while no live worker carries their version.", []string{"status"}, nil)
)

// gaugeCollector reads the gauges at scrape time.
type gaugeCollector struct {
	mu       sync.Mutex
	depths   func(context.Context) (store.QueueDepths, error)
	hosted   func() []Hosted
	runs     func() map[string]int
	unplaced func() int
	queues   store.Queues
	refused  func() map[string]uint64

	schedules func(context.Context) ([]schedule.Schedule, error)
}

func (g *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- hostedDesc
	ch <- runsDesc
	ch <- unplacedDesc
	ch <- queueRunDesc
	ch <- refusedDesc
	ch <- scheduleDesc
}

func (g *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	depths, hosted, runs, unplaced, queues, refused, schedules := g.depths, g.hosted, g.runs, g.unplaced, g.queues, g.refused, g.schedules
	g.mu.Unlock()
	if unplaced != nil {
		ch <- prometheus.MustNewConstMetric(unplacedDesc, prometheus.GaugeValue, float64(unplaced()))
	}
	if queues != nil {
		collectWorkflowQueues(ch, queues)
	}
	if refused != nil {
		collectByLabel(ch, refusedDesc, prometheus.CounterValue, refused())
	}
	if schedules != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
		scs, err := schedules(ctx)
		cancel()
		if err == nil {
			for _, sc := range scs {
				for _, o := range []struct {
					name string
					v    uint64
				}{{"fired", sc.State.Fired}, {"missed", sc.State.Missed}, {"skipped", sc.State.Skipped}, {"failed", sc.State.Failed}} {
					ch <- prometheus.MustNewConstMetric(scheduleDesc, prometheus.CounterValue, float64(o.v), sc.ID, o.name)
				}
			}
		}
	}
	if runs != nil {
		collectByLabel(ch, runsDesc, prometheus.GaugeValue, runs())
	}
	if depths != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
		d, err := depths(ctx)
		cancel()
		if err == nil {
			for _, q := range []struct {
				name string
				v    int64
			}{
				{"effects_pending", d.EffectsPending}, {"effects_inflight", d.EffectsInflight}, {"effects_held", d.EffectsHeld},
				{"timers_scheduled", d.TimersScheduled}, {"timers_claimed", d.TimersClaimed},
				{"inbox_backlog", d.InboxBacklog},
			} {
				ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(q.v), q.name)
			}
		}
	}
	if hosted != nil {
		hs := hosted()
		slices.SortFunc(hs, func(a, b Hosted) int { return strings.Compare(a.Worker, b.Worker) })
		for _, h := range hs {
			ch <- prometheus.MustNewConstMetric(hostedDesc, prometheus.GaugeValue, float64(h.Held), h.Worker, "held")
			ch <- prometheus.MustNewConstMetric(hostedDesc, prometheus.GaugeValue, float64(h.Active), h.Worker, "active")
		}
	}
}

// collectByLabel emits one series of desc per key of counts, its one
// label, in key order so that a scrape reads the same way every time.
func collectByLabel[N ~int | ~int64 | ~uint64](ch chan<- prometheus.Metric, desc *prometheus.Desc, vt prometheus.ValueType, counts map[string]N) {
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		ch <- prometheus.MustNewConstMetric(desc, vt, float64(counts[k]), k)
	}
}

// collectWorkflowQueues emits each named queue's waiting and running
// runs; a failed read leaves the gauges out of the scrape.
func collectWorkflowQueues(ch chan<- prometheus.Metric, q store.Queues) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	qs, err := q.ListQueues(ctx)
	if err != nil {
		return
	}
	for _, spec := range qs {
		rs, err := q.ListQueuedRuns(ctx, spec.Name)
		if err != nil {
			return
		}
		running := 0
		for _, r := range rs {
			if r.Admitted() {
				running++
			}
		}
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(len(rs)-running), spec.Name)
		ch <- prometheus.MustNewConstMetric(queueRunDesc, prometheus.GaugeValue, float64(running), spec.Name)
	}
}

func (s *Server) metrics(*http.Request, *reqCtx) (int, any, error) {
	if s.cfg.Metrics == nil {
		return 0, nil, apiErr(http.StatusNotFound, CodeNotFound, "metrics are not configured on this server")
	}
	return 0, passthrough{promhttp.HandlerFor(s.cfg.Metrics.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})}, nil
}
