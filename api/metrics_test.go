package api_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/world"
)

// metricValue reads the value of the sample named exactly series (name
// with its labels as the text format writes them) from a scrape.
func metricValue(t *testing.T, text, series string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("sample %q: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}

func scrape(t *testing.T, r *rig, token string) string {
	t.Helper()
	status, body := r.Do(http.MethodGet, "/metrics", "", "", token)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	return string(body)
}

// TestMetrics: after some traffic /metrics has every named series, the
// commits the host made are counted, the gauges read the store and the
// hosts at scrape time, and a world fenced on its host (here by a pause,
// which revokes its lease) counts in orrery_fenced_total.
func TestMetrics(t *testing.T) {
	r := newRig(t, rigOptions{metrics: true, token: "m"})
	r.Create("m1", universe)
	must(r.Client.Send(r.Ctx, "m1", typeName(t, Add{}), Add{By: 1}, "k1"))(t)
	must(r.Client.Send(r.Ctx, "m1", typeName(t, Pay{}), nil, "k2"))(t)
	must(r.Client.Call(r.Ctx, "m1", typeName(t, Get{}), nil, api.CallOptions{}))(t)
	r.Metrics.ObserveLeaseRenew(3 * time.Millisecond)
	r.Metrics.ObserveInboxToJournal(7 * time.Millisecond)
	r.Metrics.ObserveDispatchToReceipt(time.Second)

	text := scrape(t, r, "m")
	for _, name := range []string{
		"orrery_lease_renew_seconds_bucket", "orrery_inbox_to_journal_seconds_count", "orrery_effect_dispatch_to_receipt_seconds_sum",
		"orrery_fenced_total", "orrery_incarnation_fenced_total", "orrery_replay_parity_failures_total", "orrery_commits_total",
		`orrery_queue_depth{queue="effects_pending"}`, `orrery_queue_depth{queue="inbox_backlog"}`,
		`orrery_worlds_hosted{state="held",worker="w1"}`, `orrery_worlds_hosted{state="active",worker="w1"}`,
	} {
		if !strings.Contains(text, name) {
			t.Fatalf("/metrics lacks %s:\n%s", name, text)
		}
	}
	if n, ok := metricValue(t, text, "orrery_commits_total"); !ok || n < 1 {
		t.Fatalf("commits: %v %v", n, ok)
	}
	if n, ok := metricValue(t, text, `orrery_queue_depth{queue="effects_pending"}`); !ok || n != 1 {
		t.Fatalf("effects pending: %v %v", n, ok)
	}
	if n, ok := metricValue(t, text, `orrery_worlds_hosted{state="held",worker="w1"}`); !ok || n != 1 {
		t.Fatalf("worlds held: %v %v", n, ok)
	}
	for series, want := range map[string]float64{
		"orrery_lease_renew_seconds_count": 1, "orrery_inbox_to_journal_seconds_count": 1,
		"orrery_effect_dispatch_to_receipt_seconds_sum": 1,
	} {
		// The rig's hosts feed ObserveHost too (renewals, commits), so
		// these are at least the direct observations above.
		if n, ok := metricValue(t, text, series); !ok || n < want {
			t.Fatalf("%s = %v (%v), want at least %v", series, n, ok, want)
		}
	}
	fenced, _ := metricValue(t, text, "orrery_fenced_total")
	if _, err := r.Client.Pause(r.Ctx, "m1", "fence it"); err != nil {
		t.Fatal(err)
	}
	r.WaitFor("the host to see its lease revoked", func() (bool, error) {
		n, _ := metricValue(t, scrape(t, r, "m"), "orrery_fenced_total")
		return n >= fenced+1, nil
	})
}

// TestObserveHost: a fence, a refused heartbeat (the incarnation
// superseded), a commit and a crash whose cause is a replay divergence
// each move their counter, other events none.
func TestObserveHost(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := api.NewMetrics(reg)
	for _, ev := range []plane.HostEvent{
		{Kind: plane.EvFenced, World: "a"},
		{Kind: plane.EvIncarnationFenced},
		{Kind: plane.EvCommit, World: "a", Height: 3, N: 2, Dur: 30 * time.Millisecond},
		{Kind: plane.EvCommit, World: "a", Height: 4, N: 1, Dur: 10 * time.Millisecond},
		{Kind: plane.EvRenewed, N: 5, Dur: 4 * time.Millisecond},
		{Kind: plane.EvTimerFired, World: "a", N: 1, Dur: 2 * time.Millisecond},
		{Kind: plane.EvDiverged, World: "a", Err: &world.DivergenceError{Height: 2, Reason: world.ReasonState}},
		// The crash that follows a divergence is not a second parity failure.
		{Kind: plane.EvCrash, World: "a", Err: &plane.Error{Op: "restore", Kind: plane.ErrInvalid, Err: &world.DivergenceError{Height: 2, Reason: world.ReasonState}}},
		{Kind: plane.EvCrash, World: "a", Err: errors.New("some other crash")},
		{Kind: plane.EvStep, World: "a"},
	} {
		m.ObserveHost(ev)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			if c := s.GetCounter(); c != nil {
				got[f.GetName()] = c.GetValue()
			}
			if h := s.GetHistogram(); h != nil {
				got[f.GetName()+"_count"] = float64(h.GetSampleCount())
				got[f.GetName()+"_sum"] = h.GetSampleSum()
			}
		}
	}
	want := map[string]float64{"orrery_fenced_total": 1, "orrery_incarnation_fenced_total": 1, "orrery_commits_total": 2, "orrery_replay_parity_failures_total": 1,
		"orrery_inbox_to_journal_seconds_count": 2, "orrery_inbox_to_journal_seconds_sum": 0.04,
		"orrery_lease_renew_seconds_count": 1, "orrery_lease_renew_seconds_sum": 0.004,
		"orrery_timer_lateness_seconds_count": 1, "orrery_timer_lateness_seconds_sum": 0.002}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	// A second Metrics on the same registry shares the series.
	m2 := api.NewMetrics(reg)
	if err := m2.Err(); err != nil {
		t.Fatal(err)
	}
	m2.ObserveHost(plane.HostEvent{Kind: plane.EvFenced})
	if fams, err = reg.Gather(); err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "orrery_fenced_total" && f.GetMetric()[0].GetCounter().GetValue() != 2 {
			t.Fatalf("the shared counter: %v", f.GetMetric()[0].GetCounter().GetValue())
		}
	}
}

// recorder is a TracerProvider that keeps the spans it starts, built on
// the OpenTelemetry API alone.
type recorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*recSpan
}

func (p *recorder) Tracer(string, ...trace.TracerOption) trace.Tracer { return recTracer{p: p} }

type recTracer struct {
	embedded.Tracer
	p *recorder
}

func (t recTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	s := &recSpan{name: name, kind: cfg.SpanKind(), attrs: map[attribute.Key]attribute.Value{}}
	for _, a := range cfg.Attributes() {
		s.attrs[a.Key] = a.Value
	}
	t.p.mu.Lock()
	t.p.spans = append(t.p.spans, s)
	t.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

type recSpan struct {
	noop.Span
	mu     sync.Mutex
	name   string
	kind   trace.SpanKind
	attrs  map[attribute.Key]attribute.Value
	status codes.Code
	ended  bool
}

func (s *recSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range kv {
		s.attrs[a.Key] = a.Value
	}
}

func (s *recSpan) SetStatus(c codes.Code, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = c
}

func (s *recSpan) End(...trace.SpanEndOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
}

// TestOneServerSpanPerRequest: each request is one ended server span
// named by its route, with the world and the status code.
func TestOneServerSpanPerRequest(t *testing.T) {
	rec := &recorder{}
	r := newRig(t, rigOptions{workers: []string{}, cfg: func(c *api.Config) { c.Tracer = rec }})
	r.Create("traced", universe)
	must(r.Client.Send(r.Ctx, "traced", typeName(t, Add{}), Add{By: 1}, ""))(t)
	_, err := r.Client.GetWorld(r.Ctx, "nobody")
	apiError(t, err, http.StatusNotFound, api.CodeNotFound)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []struct {
		name, world string
		status      int64
	}{
		{"orrery.api POST /v1/worlds", "traced", 201},
		{"orrery.api POST /v1/worlds/{id}/events", "traced", 202},
		{"orrery.api GET /v1/worlds/{id}", "nobody", 404},
	}
	if len(rec.spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(rec.spans), len(want))
	}
	for i, w := range want {
		s := rec.spans[i]
		s.mu.Lock()
		if s.name != w.name || s.kind != trace.SpanKindServer || !s.ended || s.attrs["orrery.world"].AsString() != w.world ||
			s.attrs["http.response.status_code"].AsInt64() != w.status {
			t.Errorf("span %d: %s %v ended=%v %v", i, s.name, s.kind, s.ended, s.attrs)
		}
		s.mu.Unlock()
	}
}

// TestMetricsWorldsUnplaced: orrery_worlds_unplaced reads the function it
// was given at each scrape.
func TestMetricsWorldsUnplaced(t *testing.T) {
	r := newRig(t, rigOptions{metrics: true, token: "m"})
	var n atomic.Int64
	n.Store(3)
	r.Metrics.CollectWorldsUnplaced(func() int { return int(n.Load()) })
	if v, ok := metricValue(t, scrape(t, r, "m"), "orrery_worlds_unplaced"); !ok || v != 3 {
		t.Fatalf("orrery_worlds_unplaced = %v (%v), want 3", v, ok)
	}
	n.Store(0)
	if v, ok := metricValue(t, scrape(t, r, "m"), "orrery_worlds_unplaced"); !ok || v != 0 {
		t.Fatalf("orrery_worlds_unplaced = %v (%v), want 0", v, ok)
	}
}
