package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// TestOverloadedIngressIs429WithRetryAfter: past a world's inbox bound an
// event and a call answer 429 overloaded with a Retry-After header (and
// details.retry_after_seconds), write nothing, match api.ErrOverloaded,
// plane.ErrOverloaded and store.ErrOverloaded on the Go client, count in
// orrery_ingress_refused_total{reason="inbox"}; a duplicate of accepted
// work is still acknowledged as one.
func TestOverloadedIngressIs429WithRetryAfter(t *testing.T) {
	// No host: nothing drains the inbox while the test fills it.
	r := newRig(t, rigOptions{workers: []string{}, metrics: true, token: "m", limits: plane.Limits{MaxInbox: 2}})
	if _, err := r.Store.CreateWorld(r.Ctx, universe, "o1", nil); err != nil {
		t.Fatal(err)
	}
	add := typeName(t, Add{})
	must(r.Client.Send(r.Ctx, "o1", add, Add{By: 1}, "k1"))(t)
	must(r.Client.Send(r.Ctx, "o1", add, Add{By: 1}, "k2"))(t)

	_, err := r.Client.Send(r.Ctx, "o1", add, Add{By: 1}, "k3")
	e := apiError(t, err, http.StatusTooManyRequests, api.CodeOverloaded)
	if !errors.Is(err, api.ErrOverloaded) || !errors.Is(err, plane.ErrOverloaded) || !errors.Is(err, store.ErrOverloaded) {
		t.Fatalf("overloaded answer %v does not match the overload sentinels", err)
	}
	if api.RetryAfter(err) < time.Second || e.Details["reason"] != plane.RefusedInbox {
		t.Fatalf("overloaded details %v (retry after %s)", e.Details, api.RetryAfter(err))
	}
	if ack, err := r.Client.Send(r.Ctx, "o1", add, Add{By: 1}, "k1"); err != nil || !ack.Duplicate {
		t.Fatalf("duplicate into a full inbox = %+v, %v", ack, err)
	}
	_, err = r.Client.Call(r.Ctx, "o1", typeName(t, Get{}), nil, api.CallOptions{})
	apiError(t, err, http.StatusTooManyRequests, api.CodeOverloaded)

	// The raw answer carries the header.
	body, _ := json.Marshal(map[string]any{"type": add, "value": map[string]any{"By": 1}, "idempotency_key": "k4"})
	req, _ := http.NewRequestWithContext(r.Ctx, http.MethodPost, r.HTTP.URL+"/v1/worlds/o1/events", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer m")
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != http.StatusTooManyRequests || err != nil || ra < 1 {
		t.Fatalf("raw answer %d with Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	if items := must(r.Store.ReadInbox(r.Ctx, "o1", 0, 0))(t); len(items) != 2 {
		t.Fatalf("inbox holds %d items after the refusals, want 2", len(items))
	}
	text := scrape(t, r, "m")
	if n, ok := metricValue(t, text, `orrery_ingress_refused_total{reason="inbox"}`); !ok || n != 3 {
		t.Fatalf("orrery_ingress_refused_total{reason=\"inbox\"} = %v %v, want 3", n, ok)
	}
}
