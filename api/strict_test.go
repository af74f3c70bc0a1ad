package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

// errorBody decodes a typed error body, failing t if it is not one.
func errorBody(t testing.TB, body []byte) api.Error {
	t.Helper()
	var e api.Error
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Code == "" || e.Message == "" || e.Details == nil {
		t.Fatalf("not a typed error body: %q (%v)", body, err)
	}
	if e.Code != strings.ToLower(e.Code) {
		t.Fatalf("code %q is not lowercase", e.Code)
	}
	for _, leak := range []string{"goroutine ", ".go:", "Go value", "Go struct", "api.", "plane.", "store.", "*"} {
		if strings.Contains(e.Message, leak) {
			t.Fatalf("message %q leaks %q", e.Message, leak)
		}
	}
	return e
}

// TestStrictRequests: an unknown field, trailing data, a wrong type,
// malformed JSON, invalid UTF-8, a huge body, a body that is not JSON by
// its content type, unknown or repeated query parameters, a wrong method
// and an unknown route are each refused with their typed error, and
// nothing is written.
func TestStrictRequests(t *testing.T) {
	r := newRig(t, rigOptions{workers: []string{}, cfg: func(c *api.Config) { c.MaxBody = 4096 }})
	r.Create("w", universe)
	const js = "application/json"
	addPayload := base64.StdEncoding.EncodeToString(must(world.EncodeEventNamed("a.B", nil))(t))
	huge := `{"id":"x","universe":"u","pad":"` + strings.Repeat("a", 5000) + `"}`
	for _, tc := range []struct {
		name, method, path, ct, body string
		status                       int
		code, mention                string
	}{
		{"unknown field", "POST", "/v1/worlds", js, `{"id":"x","universe":"u","extra":1}`, 400, api.CodeInvalidArgument, `"extra"`},
		{"trailing data", "POST", "/v1/worlds", js, `{"id":"x","universe":"u"} {}`, 400, api.CodeInvalidArgument, "more than one"},
		{"trailing garbage", "POST", "/v1/worlds", js, `{"id":"x","universe":"u"}x`, 400, api.CodeInvalidArgument, ""},
		{"wrong type", "POST", "/v1/worlds", js, `{"id":5,"universe":"u"}`, 400, api.CodeInvalidArgument, `"id" must be a string`},
		{"wrong type, nested", "POST", "/v1/worlds/w/fork", js, `{"id":"f","height":"high"}`, 400, api.CodeInvalidArgument, `"height"`},
		{"negative height", "POST", "/v1/worlds/w/fork", js, `{"id":"f","height":-1}`, 400, api.CodeInvalidArgument, `"height"`},
		{"not an object", "POST", "/v1/worlds", js, `["x"]`, 400, api.CodeInvalidArgument, "object"},
		{"malformed", "POST", "/v1/worlds", js, `{"id": "x",`, 400, api.CodeInvalidArgument, "malformed"},
		{"invalid UTF-8", "POST", "/v1/worlds", js, "{\"id\":\"\xff\",\"universe\":\"u\"}", 400, api.CodeInvalidArgument, "UTF-8"},
		{"empty body", "POST", "/v1/worlds", js, ``, 400, api.CodeInvalidArgument, "required"},
		{"huge body", "POST", "/v1/worlds", js, huge, 413, api.CodeTooLarge, "limit"},
		{"text/plain", "POST", "/v1/worlds", "text/plain", `{"id":"x","universe":"u"}`, 415, api.CodeUnsupportedMedia, "application/json"},
		{"no content type", "POST", "/v1/worlds", "", `{"id":"x","universe":"u"}`, 415, api.CodeUnsupportedMedia, ""},
		{"bad base64 payload", "POST", "/v1/worlds/w/events", js, `{"payload":"!!!"}`, 400, api.CodeInvalidArgument, "base64"},
		{"type and payload", "POST", "/v1/worlds/w/events", js, `{"type":"a.B","payload":"oA=="}`, 400, api.CodeInvalidArgument, "not both"},
		{"neither type nor payload", "POST", "/v1/worlds/w/events", js, `{"value":1}`, 400, api.CodeInvalidArgument, "required"},
		{"huge number", "POST", "/v1/worlds/w/events", js, `{"type":"a.B","value":1e999}`, 400, api.CodeInvalidArgument, "out of range"},
		{"key too long", "POST", "/v1/worlds/w/events", js, `{"type":"a.B","idempotency_key":"` + strings.Repeat("k", 513) + `"}`, 400, api.CodeInvalidArgument, ""},
		{"world id too long", "POST", "/v1/worlds/" + strings.Repeat("x", 300) + "/events", js, `{"type":"a.B","value":1}`, 400, api.CodeInvalidArgument, "world"},
		{"world id with NUL", "POST", "/v1/worlds/a%00b/events", js, `{"type":"a.B"}`, 400, api.CodeInvalidArgument, "NUL"},
		{"world id not UTF-8", "POST", "/v1/worlds/%ff/events", js, `{"payload":"` + addPayload + `"}`, 400, api.CodeInvalidArgument, "UTF-8"},
		{"negative timeout", "POST", "/v1/worlds/w/calls", js, `{"type":"a.B","timeout_ms":-5}`, 400, api.CodeInvalidArgument, "timeout_ms"},
		{"unknown query parameter", "GET", "/v1/worlds?universe=u&colour=red", "", "", 400, api.CodeInvalidArgument, "colour"},
		{"repeated query parameter", "GET", "/v1/worlds?universe=u&universe=v", "", "", 400, api.CodeInvalidArgument, "repeated"},
		{"bad limit", "GET", "/v1/worlds/w/journal?limit=0", "", "", 400, api.CodeInvalidArgument, "limit"},
		{"bad after", "GET", "/v1/worlds/w/journal?after=-1", "", "", 400, api.CodeInvalidArgument, "after"},
		{"wrong method", "DELETE", "/v1/worlds", "", "", 405, api.CodeMethodNotAllowed, ""},
		{"unknown route", "GET", "/v2/worlds", "", "", 404, api.CodeNotFound, "route"},
		{"unclean path", "GET", "/v1/../v1/worlds", "", "", 404, api.CodeNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := r.Do(tc.method, tc.path, tc.ct, tc.body, "")
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			e := errorBody(t, body)
			if e.Code != tc.code || !strings.Contains(e.Message, tc.mention) {
				t.Fatalf("%s %q, want %s mentioning %q", e.Code, e.Message, tc.code, tc.mention)
			}
		})
	}
	del, err := http.NewRequestWithContext(r.Ctx, "DELETE", r.HTTP.URL+"/v1/worlds", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.HTTP.Client().Do(del)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if allow := resp.Header.Get("Allow"); resp.StatusCode != 405 || !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("405 without its Allow header: %d %q", resp.StatusCode, allow)
	}
	// A body of unknown length past the limit is cut while it is read.
	req, err := http.NewRequestWithContext(r.Ctx, "POST", r.HTTP.URL+"/v1/worlds", io.MultiReader(strings.NewReader(huge)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	resp, err = r.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || errorBody(t, body).Code != api.CodeTooLarge {
		t.Fatalf("chunked huge body: %d %s", resp.StatusCode, body)
	}

	ws := must(r.Client.ListWorlds(r.Ctx, "", ""))(t)
	if got := worldIDs(ws); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("refused requests created worlds: %v", got)
	}
	if items, err := r.Store.ReadInbox(r.Ctx, "w", 0, 0); err != nil || len(items) != 0 {
		t.Fatalf("refused requests enqueued %d items (%v)", len(items), err)
	}
}

// TestCallTimeoutAndRetryByCallID: a call no host answers within its
// timeout is 504 timeout naming its call id; calling again with that id
// once a host runs the world waits for the same call (the inbox holds it
// once) and gets its reply.
func TestCallTimeoutAndRetryByCallID(t *testing.T) {
	r := newRig(t, rigOptions{workers: []string{}})
	r.Create("slow", universe)
	must(r.Client.Send(r.Ctx, "slow", typeName(t, Add{}), Add{By: 2}, "k"))(t)
	_, err := r.Client.Call(r.Ctx, "slow", typeName(t, Get{}), nil, api.CallOptions{Timeout: 50 * time.Millisecond})
	e := apiError(t, err, http.StatusGatewayTimeout, api.CodeTimeout)
	id, _ := e.Details["call_id"].(string)
	if id == "" {
		t.Fatalf("a timeout without its call id: %+v", e)
	}
	r.StartHost("late")
	res, err := r.Client.Call(r.Ctx, "slow", typeName(t, Get{}), nil, api.CallOptions{CallID: id})
	if err != nil || string(res.Reply) != "2" || res.CallID != id {
		t.Fatalf("the retried call: %+v %v", res, err)
	}
	items, err := r.Store.ReadInbox(r.Ctx, "slow", 0, 0)
	if err != nil || len(items) != 2 {
		t.Fatalf("the call is in the inbox %d times (%v)", len(items)-1, err)
	}
}

// brokenStore is a store whose database is down (errDown on reads of a
// world and on the clock) or whose driver panics (GetWorld of "boom").
type brokenStore struct {
	store.Store
	down atomic.Bool
}

var errDown = errors.New("connection refused: 10.0.0.7:5432 (pq: password authentication failed for user admin)")

func (s *brokenStore) GetWorld(ctx context.Context, id string) (store.World, error) {
	if id == "boom" {
		panic("driver bug")
	}
	if s.down.Load() {
		return store.World{}, errDown
	}
	return s.Store.GetWorld(ctx, id)
}

func (s *brokenStore) Now(ctx context.Context) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errDown
	}
	return s.Store.Now(ctx)
}

// TestInternalFailures: a store failure is a 500 whose body says only
// that it is internal (the cause is logged, not sent); a panic in a
// handler is a 500 too, and the server keeps answering; readiness fails
// with 503 not_ready when the store does not answer or Ready says no.
func TestInternalFailures(t *testing.T) {
	st := &brokenStore{Store: memstore.New()}
	notReady := atomic.Bool{}
	r := newRig(t, rigOptions{store: st, workers: []string{}, cfg: func(c *api.Config) {
		c.Ready = func(context.Context) error {
			if notReady.Load() {
				return errors.New("draining for an upgrade")
			}
			return nil
		}
	}})
	r.Create("fine", universe)

	status, body := r.Do("GET", "/v1/worlds/boom", "", "", "")
	if e := errorBody(t, body); status != 500 || e.Code != api.CodeInternal || e.Message != "internal error" {
		t.Fatalf("a panicking handler: %d %+v", status, e)
	}
	if _, err := r.Client.GetWorld(r.Ctx, "fine"); err != nil {
		t.Fatalf("the server after a panic: %v", err)
	}

	st.down.Store(true)
	status, body = r.Do("GET", "/v1/worlds/fine", "", "", "")
	if e := errorBody(t, body); status != 500 || e.Code != api.CodeInternal || strings.Contains(string(body), "10.0.0.7") || strings.Contains(string(body), "password") {
		t.Fatalf("a store failure: %d %s", status, body)
	}
	err := r.Client.Ready(r.Ctx)
	apiError(t, err, http.StatusServiceUnavailable, api.CodeNotReady)
	if err := r.Client.Health(r.Ctx); err != nil {
		t.Fatalf("health while the store is down: %v", err)
	}
	st.down.Store(false)
	if err := r.Client.Ready(r.Ctx); err != nil {
		t.Fatal(err)
	}
	notReady.Store(true)
	err = r.Client.Ready(r.Ctx)
	if e := apiError(t, err, http.StatusServiceUnavailable, api.CodeNotReady); !strings.Contains(e.Message, "draining for an upgrade") {
		t.Fatalf("not ready: %+v", e)
	}
}

// TestNewServerRefusesIncompleteConfig: a server without its store, ops,
// client or kernels, or with a negative limit, is a *ConfigError.
func TestNewServerRefusesIncompleteConfig(t *testing.T) {
	r := newRig(t, rigOptions{workers: []string{}})
	full := api.Config{Store: r.Store, Ops: r.Ops, Client: r.PlaneClient, Kernels: kernels()}
	if _, err := api.NewServer(full); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*api.Config){
		"no store":         func(c *api.Config) { c.Store = nil },
		"no ops":           func(c *api.Config) { c.Ops = nil },
		"no client":        func(c *api.Config) { c.Client = nil },
		"no kernels":       func(c *api.Config) { c.Kernels = nil },
		"negative MaxBody": func(c *api.Config) { c.MaxBody = -1 },
		"negative timeout": func(c *api.Config) { c.CallTimeout = -time.Second },
	} {
		cfg := full
		mutate(&cfg)
		var ce *api.ConfigError
		if _, err := api.NewServer(cfg); !errors.As(err, &ce) || !errors.Is(err, api.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, base := range []string{"", "ftp://x", "localhost:8080", "http://"} {
		if _, err := api.NewClient(base, ""); !errors.Is(err, api.ErrConfig) {
			t.Errorf("NewClient(%q): %v", base, err)
		}
	}
}
