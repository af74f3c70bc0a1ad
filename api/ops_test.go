package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// Boom panics in its handler.
type Boom struct{}

// boomKernels are the counter with a handler that panics.
func boomKernels() plane.Kernels {
	d := testworlds.CounterDef()
	world.On(d, func(*world.Ctx, *testworlds.Counter, Boom) error { panic("boom") })
	return plane.Kernels{universe: d.Kernel()}
}

// lockedBuffer is a log sink the server's goroutines write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestMetricsRequestsAndHandlers: /metrics counts requests by route
// pattern (never the raw path) and status code with their latency, and
// the committed steps whose handler failed or panicked by world type.
func TestMetricsRequestsAndHandlers(t *testing.T) {
	r := &rig{testrig.NewNode(t, testrig.NodeOptions{Kernels: boomKernels(), Universes: []string{universe}, Metrics: true})}
	r.Create("m1", universe)
	must(r.Client.Send(r.Ctx, "m1", typeName(t, testworlds.Fail{}), testworlds.Fail{Why: "no"}, "f1"))(t)
	must(r.Client.Send(r.Ctx, "m1", typeName(t, Boom{}), nil, "b1"))(t)
	must(r.Client.Send(r.Ctx, "m1", typeName(t, Boom{}), nil, "b2"))(t)
	must(r.Client.Call(r.Ctx, "m1", typeName(t, testworlds.Get{}), nil, api.CallOptions{}))(t) // after the three
	if _, err := r.Client.GetWorld(r.Ctx, "no-such-world"); err == nil {
		t.Fatal("an unknown world was found")
	}
	if st, _ := r.Do(http.MethodGet, "/v1/nowhere/at-all", "", "", ""); st != http.StatusNotFound {
		t.Fatalf("unknown route: %d", st)
	}

	var text string
	r.WaitFor("the handler failures counted", func() (bool, error) {
		text = scrape(t, r, "")
		n, _ := metricValue(t, text, `orrery_handler_panics_total{world_type="test.counter"}`)
		return n == 2, nil
	})
	for series, want := range map[string]float64{
		`orrery_handler_errors_total{world_type="test.counter"}`:                         1,
		`orrery_handler_panics_total{world_type="test.counter"}`:                         2,
		`orrery_http_requests_total{code="201",route="POST /v1/worlds"}`:                 1,
		`orrery_http_requests_total{code="202",route="POST /v1/worlds/{id}/events"}`:     3,
		`orrery_http_requests_total{code="200",route="POST /v1/worlds/{id}/calls"}`:      1,
		`orrery_http_requests_total{code="404",route="GET /v1/worlds/{id}"}`:             1,
		`orrery_http_requests_total{code="404",route="unmatched"}`:                       1,
		`orrery_http_request_duration_seconds_count{code="201",route="POST /v1/worlds"}`: 1,
	} {
		if n, ok := metricValue(t, text, series); !ok || n != want {
			t.Errorf("%s = %v (present %v), want %v", series, n, ok, want)
		}
	}
	if !strings.Contains(text, `orrery_http_request_duration_seconds_bucket{code="200",route="POST /v1/worlds/{id}/calls",le=`) {
		t.Errorf("no latency buckets for the calls route")
	}
	for _, raw := range []string{"no-such-world", "nowhere", `"m1"`} {
		if strings.Contains(text, raw) {
			t.Errorf("a raw path or id (%s) is a label:\n%s", raw, text)
		}
	}
	// The scrapes count too, under their own route.
	before, _ := metricValue(t, text, `orrery_http_requests_total{code="200",route="GET /metrics"}`)
	after, _ := metricValue(t, scrape(t, r, ""), `orrery_http_requests_total{code="200",route="GET /metrics"}`)
	if after != before+1 {
		t.Fatalf("scrapes counted %v then %v", before, after)
	}
}

// TestObserveWorkflowAndRuns: a workflow worker's step ends count by
// outcome, other events not at all; the runs gauge reads its function at
// each scrape.
func TestObserveWorkflowAndRuns(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := api.NewMetrics(reg)
	for _, ev := range []workflow.Event{
		{Kind: workflow.EvStep, Outcome: workflow.StepCompleted},
		{Kind: workflow.EvStep, Outcome: workflow.StepCompleted},
		{Kind: workflow.EvStep, Outcome: workflow.StepRetried},
		{Kind: workflow.EvStep, Outcome: workflow.StepFailedForGood},
		{Kind: workflow.EvStarted},
		{Kind: workflow.EvFinished},
	} {
		m.ObserveWorkflow(ev)
	}
	counts := map[string]int{"running": 2, "completed": 5}
	m.CollectRuns(func() map[string]int { return counts })
	got := gathered(t, reg)
	for series, want := range map[string]float64{
		`orrery_workflow_steps_total{outcome="completed"}`: 2,
		`orrery_workflow_steps_total{outcome="retried"}`:   1,
		`orrery_workflow_steps_total{outcome="failed"}`:    1,
		`orrery_workflow_runs{status="running"}`:           2,
		`orrery_workflow_runs{status="completed"}`:         5,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v (all %v)", series, got[series], want, got)
		}
	}
	counts["completed"] = 6
	if got := gathered(t, reg); got[`orrery_workflow_runs{status="completed"}`] != 6 {
		t.Fatalf("the runs gauge did not read again: %v", got)
	}
}

// gathered flattens reg's counters and gauges as name{label="v",...}.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name := f.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case s.GetCounter() != nil:
				out[name] = s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				out[name] = s.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestRequestIDs: every answer carries X-Request-Id (the caller's when it
// is sane, else a new one), every error body carries it as request_id,
// and every log line of the request names it.
func TestRequestIDs(t *testing.T) {
	logs := &lockedBuffer{}
	r := newRig(t, rigOptions{cfg: func(c *api.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	do := func(id, method, path, body string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(r.Ctx, method, r.HTTP.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if id != "" {
			req.Header.Set(api.RequestIDHeader, id)
		}
		resp, err := r.HTTP.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp, m
	}
	resp, body := do("trace-42.a", http.MethodGet, "/v1/worlds/ghost", "")
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get(api.RequestIDHeader) != "trace-42.a" || body["request_id"] != "trace-42.a" {
		t.Fatalf("caller's id: %d %q %v", resp.StatusCode, resp.Header.Get(api.RequestIDHeader), body)
	}
	resp, body = do("bad id\twith spaces", http.MethodPost, "/v1/worlds", `{"id":"x","universe":"nope"}`)
	gen := resp.Header.Get(api.RequestIDHeader)
	if gen == "" || gen == "bad id\twith spaces" || body["request_id"] != gen {
		t.Fatalf("an insane id was kept or none made: %q, body %v", gen, body)
	}
	resp, _ = do("", http.MethodGet, "/healthz", "")
	ok := resp.Header.Get(api.RequestIDHeader)
	if ok == "" || ok == gen {
		t.Fatalf("a success has request id %q (the previous was %q)", ok, gen)
	}
	// Through the Go client, an error keeps the id.
	_, err := r.Client.GetWorld(r.Ctx, "ghost")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.RequestID == "" {
		t.Fatalf("client error %#v has no request id", err)
	}

	// A request's line is written after its answer: waited for.
	seen := map[string]string{}
	r.WaitFor("every request's log line", func() (bool, error) {
		clear(seen)
		for _, l := range logs.lines(t) {
			if strings.HasPrefix(l["msg"].(string), "api: request") {
				id, _ := l["request_id"].(string)
				if id == "" {
					t.Fatalf("a request's log line has no request_id: %v", l)
				}
				seen[id], _ = l["level"].(string)
			}
		}
		return seen["trace-42.a"] != "" && seen[gen] != "" && seen[ok] != "" && seen[ae.RequestID] != "", nil
	})
	// A client's mistakes (404, 400) are INFO, not WARN.
	for _, id := range []string{"trace-42.a", gen, ae.RequestID} {
		if seen[id] != "INFO" {
			t.Errorf("the refusal of request %s was logged at %q, want INFO (all %v)", id, seen[id], seen)
		}
	}
	if seen[ok] != "DEBUG" {
		t.Errorf("a success was logged at %q, want DEBUG", seen[ok])
	}
}

// TestInputMismatchInJSONTerms: a value that does not fit its handler's
// type is refused, for a send and a call alike, by the field, the JSON
// type expected and the one given, never in CBOR's or Go's words; an
// unknown field is named.
func TestInputMismatchInJSONTerms(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.Create("p", universe)
	add := typeName(t, testworlds.Add{})
	for _, tc := range []struct {
		value   string
		message string
		details map[string]any
	}{
		{`{"By":"two"}`, `field "By" must be an integer, not a string ("two")`, map[string]any{"field": "By", "expected": "integer", "got": "string"}},
		{`{"By":true}`, `field "By" must be an integer, not a boolean (true)`, map[string]any{"field": "By", "expected": "integer", "got": "boolean"}},
		{`{"By":2.5}`, `field "By" must be an integer, not a number with a fraction or exponent (2.5)`, map[string]any{"expected": "integer"}},
		{`{"By":18446744073709551615}`, `field "By" is out of range for a 64-bit integer (18446744073709551615)`, map[string]any{"field": "By", "got": "integer out of range"}},
		{`{"By":1,"Kye":"x"}`, `it has no field "Kye"`, map[string]any{"field": "Kye"}},
		{`[1,2]`, `the value must be an object, not an array`, map[string]any{"expected": "object", "got": "array"}},
		{`{"By":1,"Key":7}`, `field "Key" must be a string, not an integer (7)`, map[string]any{"field": "Key", "expected": "string", "got": "integer"}},
	} {
		for _, path := range []string{"/v1/worlds/p/events", "/v1/worlds/p/calls"} {
			st, body := r.Do(http.MethodPost, path, "application/json", `{"type":"`+add+`","value":`+tc.value+`}`, "")
			var e api.Error
			if err := json.Unmarshal(body, &e); err != nil || st != http.StatusBadRequest || e.Code != api.CodeInvalidArgument {
				t.Fatalf("%s %s: %d %s", path, tc.value, st, body)
			}
			if !strings.Contains(e.Message, tc.message) || strings.Contains(strings.ToLower(e.Message), "cbor") || strings.Contains(e.Message, "int64") {
				t.Errorf("%s %s: message %q, want %q in JSON's words", path, tc.value, e.Message, tc.message)
			}
			for k, v := range tc.details {
				if e.Details[k] != v {
					t.Errorf("%s %s: details[%s] = %v, want %v", path, tc.value, k, e.Details[k], v)
				}
			}
		}
	}
	// Nothing refused reached the journal.
	if v := must(r.Client.GetWorld(r.Ctx, "p"))(t); v.Head != 0 || v.InboxDepth != 0 {
		t.Fatalf("refused inputs were enqueued: head %d, inbox %d", v.Head, v.InboxDepth)
	}
}
