package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane/adapter"
)

// loadSpec loads api/openapi.json as kin-openapi reads it, with servers
// pointed at base (a running server's URL) when given, and validates it.
func loadSpec(t testing.TB, data []byte, base string) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		t.Fatalf("api/openapi.json does not load: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("api/openapi.json is not a valid OpenAPI document: %v", err)
	}
	if base != "" {
		doc.Servers = openapi3.Servers{{URL: base}}
	}
	return doc
}

// operations are the spec's operations as "METHOD /path".
func operations(doc *openapi3.T) map[string]*openapi3.Operation {
	out := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[method+" "+path] = op
		}
	}
	return out
}

// TestOpenAPIIsValid31: api/openapi.json is a valid OpenAPI 3.1 document
// by kin-openapi (which validates 3.1 documents' schemas as JSON Schema
// 2020-12), and keeps the house rules a generated client relies on: each
// operation has a unique operationId, says 401 unless it is open, 400, 413
// and 415 when it takes a body, 500 always, and every response it
// describes is JSON with an Error body when it is an error. A document
// broken on purpose fails the same validation, so the check can fail.
func TestOpenAPIIsValid31(t *testing.T) {
	doc := loadSpec(t, api.OpenAPI(), "")
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q: want 3.1.0", doc.OpenAPI)
	}
	if doc.Components.SecuritySchemes["bearer"] == nil || doc.Components.SecuritySchemes["bearer"].Value.Scheme != "bearer" {
		t.Fatal("no bearer security scheme")
	}
	ids := map[string]string{}
	for name, op := range operations(doc) {
		if op.OperationID == "" {
			t.Errorf("%s has no operationId", name)
		} else if prev, dup := ids[op.OperationID]; dup {
			t.Errorf("%s and %s share operationId %q", prev, name, op.OperationID)
		}
		ids[op.OperationID] = name
		open := op.Security != nil && len(*op.Security) == 0
		want := []int{500}
		if !open {
			want = append(want, 401)
		}
		if op.RequestBody != nil {
			want = append(want, 400, 413, 415)
		}
		for _, st := range want {
			if op.Responses.Status(st) == nil {
				t.Errorf("%s does not describe its %d", name, st)
			}
		}
		for code, resp := range op.Responses.Map() {
			if h := resp.Value.Headers[api.RequestIDHeader]; h == nil || h.Ref != "#/components/headers/RequestID" || !h.Value.Required {
				t.Errorf("%s: its %s does not describe the %s header every answer carries", name, code, api.RequestIDHeader)
			}
			if code < "400" {
				continue
			}
			mt := resp.Value.Content.Get("application/json")
			if mt == nil || mt.Schema == nil || mt.Schema.Ref != "#/components/schemas/Error" {
				t.Errorf("%s: its %s is not an application/json Error", name, code)
			}
		}
	}

	// Every component schema is a JSON Schema 2020-12 schema by a
	// validator of its own, which checks it against the 2020-12
	// metaschema.
	c := newConformance(t)
	for name := range doc.Components.Schemas {
		if _, err := c.strict.Compile(specURL + "#/components/schemas/" + name); err != nil {
			t.Errorf("schema %s is not valid JSON Schema 2020-12: %v", name, err)
		}
	}

	// The same checks refuse a broken document: a dangling $ref, and a
	// 3.0-only form in a 3.1 document.
	for what, broken := range map[string]func(string) string{
		"dangling $ref": func(s string) string {
			return strings.Replace(s, `"#/components/schemas/WorldView"}`, `"#/components/schemas/NoSuchView"}`, 1)
		},
		"boolean exclusiveMinimum": func(s string) string {
			return strings.Replace(s, `"minimum": 1, "maximum": 1000`, `"minimum": 1, "exclusiveMinimum": true, "maximum": 1000`, 1)
		},
	} {
		b := broken(string(api.OpenAPI()))
		if b == string(api.OpenAPI()) {
			t.Fatalf("%s: the document no longer holds what this check breaks", what)
		}
		loader := openapi3.NewLoader()
		d, err := loader.LoadFromData([]byte(b))
		if err == nil {
			err = d.Validate(loader.Context)
		}
		if err == nil {
			t.Errorf("%s: a broken document passes", what)
		}
	}
}

// undescribed are the routes the description leaves out, with why: they
// are not the API (no JSON, no client to generate), and OpenAPI cannot
// name their paths (a subtree, an exact root).
var undescribed = map[string]string{
	"GET /ui/": "the dashboard's static files",
	"GET /{$}": "a redirect to the dashboard",
}

// TestOpenAPIDescribesEveryRoute: every route the server registers has
// its operation in api/openapi.json, and every operation there is a route
// the server serves, so an endpoint cannot be added (or removed) without
// its description. The server is built with every optional part (the
// dashboard, metrics, runs) so that each route it can serve is there.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	r := newRunsRigWith(t, rigOptions{metrics: true, cfg: func(c *api.Config) { c.UI = http.NotFoundHandler() }})
	doc := loadSpec(t, api.OpenAPI(), "")
	ops := operations(doc)
	routes := r.Server.Routes()
	if len(routes) < 30 {
		t.Fatalf("the server lists %d routes: %v", len(routes), routes)
	}
	served := map[string]bool{}
	for _, route := range routes {
		served[route] = true
		if _, ok := undescribed[route]; ok {
			continue
		}
		method, path, _ := strings.Cut(route, " ")
		if ops[route] == nil {
			t.Errorf("route %q is served but not described: add paths[%q].%s to api/openapi.json (see docs/api.md)",
				route, path, strings.ToLower(method))
		}
	}
	for name := range undescribed {
		if !served[name] {
			t.Errorf("undescribed names %q, which the server does not serve", name)
		}
	}
	for name := range ops {
		if !served[name] {
			t.Errorf("api/openapi.json describes %q, which the server does not serve", name)
		}
	}
}

// conformance checks real exchanges with servers against the
// description, and remembers which statuses each operation was seen with.
type conformance struct {
	t    *testing.T
	spec *openapi3.T // the unbound document, for its components
	seen map[string]map[int]bool
	// strict compiles the description's component schemas with a JSON
	// Schema 2020-12 validator of its own: kin-openapi validates a 3.1
	// schema that has $refs and no 2020-only keyword with its OpenAPI 3.0
	// validator instead, so every JSON body is checked by both.
	strict *jsonschema.Compiler
	byName map[string]*jsonschema.Schema
}

func newConformance(t *testing.T) *conformance {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	strict := jsonschema.NewCompiler()
	strict.DefaultDraft(jsonschema.Draft2020)
	strict.AssertFormat()
	if err := strict.AddResource(specURL, doc); err != nil {
		t.Fatal(err)
	}
	return &conformance{t: t, spec: loadSpec(t, api.OpenAPI(), ""), seen: map[string]map[int]bool{},
		strict: strict, byName: map[string]*jsonschema.Schema{}}
}

// specURL names the description for the JSON Schema validator.
const specURL = "urn:orrery:openapi.json"

// validateStrict checks a JSON body against the named component schema
// with the JSON Schema 2020-12 validator.
func (c *conformance) validateStrict(what, name string, body []byte) {
	c.t.Helper()
	sch := c.byName[name]
	if sch == nil {
		var err error
		if sch, err = c.strict.Compile(specURL + "#/components/schemas/" + name); err != nil {
			c.t.Fatalf("schema %s does not compile as JSON Schema 2020-12: %v", name, err)
		}
		c.byName[name] = sch
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		c.t.Fatalf("%s: not JSON: %v: %s", what, err, body)
	}
	if err := sch.Validate(v); err != nil {
		c.t.Errorf("%s does not match %s (JSON Schema 2020-12): %#v\n%s", what, name, err, body)
	}
}

// target is one running server the exchanges go to.
type target struct {
	c      *conformance
	r      *rig
	doc    *openapi3.T
	router routers.Router
	token  string
}

func (c *conformance) on(r *rig, token string) *target {
	c.t.Helper()
	doc := loadSpec(c.t, api.OpenAPI(), r.HTTP.URL)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		c.t.Fatal(err)
	}
	return &target{c: c, r: r, doc: doc, router: router, token: token}
}

// exchange is one request and the status the server must answer it with.
// specRefuses says the description itself refuses the request (by its
// schemas, required parameters, content types or security); when false,
// the description must accept it, whatever the server answers.
type exchange struct {
	method, path string // path with its query
	body         string
	ctype        string // default application/json when there is a body
	noToken      bool
	want         int
	specRefuses  bool
	requestID    string // sent as X-Request-Id; the answer must carry it back
}

func (tg *target) newRequest(ctx context.Context, x exchange) *http.Request {
	tg.c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, x.method, tg.r.HTTP.URL+x.path, strings.NewReader(x.body))
	if err != nil {
		tg.c.t.Fatal(err)
	}
	if x.body != "" {
		ct := x.ctype
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if !x.noToken {
		req.Header.Set("Authorization", "Bearer "+tg.token)
	}
	if x.requestID != "" {
		req.Header.Set(api.RequestIDHeader, x.requestID)
	}
	return req
}

func (tg *target) authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.RequestValidationInput.Request.Header.Get("Authorization") != "Bearer "+tg.token {
		return errors.New("no valid bearer token")
	}
	return nil
}

// validateRequest finds x's route in the description and validates the
// request against it as specRefuses says.
func (tg *target) validateRequest(x exchange) *openapi3filter.RequestValidationInput {
	t := tg.c.t
	t.Helper()
	req := tg.newRequest(tg.r.Ctx, x)
	route, params, err := tg.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s: not in the description: %v", x.method, x.path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: tg.authenticate}}
	err = openapi3filter.ValidateRequest(tg.r.Ctx, in)
	switch {
	case x.specRefuses && err == nil:
		t.Errorf("%s %s %s: the description accepts a request the server refuses with %d", x.method, x.path, x.body, x.want)
	case !x.specRefuses && err != nil:
		t.Errorf("%s %s %s: the description refuses the request: %v", x.method, x.path, x.body, err)
	}
	return in
}

// do sends x, checks its status, and validates the request and the real
// response against the description; it returns the response body.
func (tg *target) do(x exchange) []byte {
	t := tg.c.t
	t.Helper()
	resp, err := tg.r.HTTP.Client().Do(tg.newRequest(tg.r.Ctx, x))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != x.want {
		t.Fatalf("%s %s %s: %d %s, want %d", x.method, x.path, x.body, resp.StatusCode, body, x.want)
	}
	if got := resp.Header.Get(api.RequestIDHeader); x.requestID != "" && got != x.requestID {
		t.Errorf("%s %s: X-Request-Id %q, want the caller's %q", x.method, x.path, got, x.requestID)
	}
	in := tg.validateRequest(x)
	tg.validateResponse(x, in, resp, body, false)
	return body
}

func (tg *target) validateResponse(x exchange, in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte, excludeBody bool) {
	t := tg.c.t
	t.Helper()
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: excludeBody}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(tg.r.Ctx, out); err != nil {
		t.Errorf("%s %s %s: the %d response does not match the description: %v\n%s", x.method, x.path, x.body, resp.StatusCode, err, body)
	}
	if !excludeBody {
		if r := in.Route.Operation.Responses.Status(resp.StatusCode); r != nil {
			if mt := r.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil && mt.Schema.Ref != "" {
				name := strings.TrimPrefix(mt.Schema.Ref, "#/components/schemas/")
				tg.c.validateStrict(fmt.Sprintf("%s %s %s: the %d response", x.method, x.path, x.body, resp.StatusCode), name, body)
			}
		}
	}
	op := in.Route.Operation.OperationID
	if tg.c.seen[op] == nil {
		tg.c.seen[op] = map[int]bool{}
	}
	tg.c.seen[op][resp.StatusCode] = true
}

// schema is a component schema of the description.
func (c *conformance) schema(name string) *openapi3.Schema {
	c.t.Helper()
	s := c.spec.Components.Schemas[name]
	if s == nil {
		c.t.Fatalf("no schema %s", name)
	}
	return s.Value
}

// validateValue checks a JSON value against a component schema.
func (c *conformance) validateValue(what, schema string, data []byte) {
	c.t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		c.t.Fatalf("%s: not JSON: %v: %s", what, err, data)
	}
	if err := c.spec.ValidateSchemaJSON(c.schema(schema), v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%s does not match %s: %v\n%s", what, schema, err, data)
	}
	c.validateStrict(what, schema, data)
}

// stream opens the event stream and validates each event's data, by its
// name, against the schema the description names for it, up to synced.
// It returns the names seen; the stream stays open until close is called.
func (tg *target) stream(x exchange) (names []string, close func()) {
	t := tg.c.t
	t.Helper()
	ctx, cancel := context.WithCancel(tg.r.Ctx)
	resp, err := tg.r.HTTP.Client().Do(tg.newRequest(ctx, x))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	closeAll := func() { cancel(); _ = resp.Body.Close() }
	if resp.StatusCode != http.StatusOK {
		closeAll()
		t.Fatalf("GET %s: %d", x.path, resp.StatusCode)
	}
	in := tg.validateRequest(x)
	tg.validateResponse(x, in, resp, nil, true)
	mt := in.Route.Operation.Responses.Status(200).Value.Content.Get("text/event-stream")
	schemas, _ := mt.Extensions["x-orrery-events"].(map[string]any)
	if len(schemas) == 0 {
		closeAll()
		t.Fatal("the event stream's description names no event schemas (x-orrery-events)")
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<22)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ref, _ := schemas[name].(map[string]any)["$ref"].(string)
			schema, ok := strings.CutPrefix(ref, "#/components/schemas/")
			if !ok {
				closeAll()
				t.Fatalf("event %q: the description names no schema for it", name)
			}
			tg.c.validateValue("event "+name, schema, []byte(strings.TrimPrefix(line, "data: ")))
			names = append(names, name)
			if name == "synced" {
				return names, closeAll
			}
		}
	}
	closeAll()
	t.Fatalf("the stream ended before synced: %v (%v)", names, sc.Err())
	return nil, nil
}

// TestOpenAPIConformsToRealResponses runs real servers (a node serving
// worlds and workflow runs, and one with no hosts, no runs and no
// metrics) and sends every route valid and invalid requests: the request
// must be accepted or refused by the description as the server does, and
// each real answer (status, headers, body) must be one the description
// describes, validated by kin-openapi's openapi3filter with JSON Schema
// 2020-12. Every operation must have been seen succeeding and, when it
// describes a 4xx, refusing.
func TestOpenAPIConformsToRealResponses(t *testing.T) {
	const tok = "openapi-token"
	c := newConformance(t)
	// rb-r and rb-t are blocked (journaled by code that asked for another
	// step), for the operator's terminate and reset.
	ra := blockedRunsRig(t, rigOptions{token: tok, metrics: true, cfg: func(cfg *api.Config) { cfg.MaxBody = 8 << 10 }}, "rb-r", "rb-t")
	a := c.on(ra, tok)
	rb := newRig(t, rigOptions{token: tok, workers: []string{}, cfg: func(cfg *api.Config) {
		cfg.MaxEventStreams = 1
		// No host runs b's worlds: a snapshot request there waits out the
		// call timeout (504), which need not be long.
		cfg.CallTimeout = 100 * time.Millisecond
		cfg.Ready = func(context.Context) error { return errors.New("draining for the test") }
	}})
	b := c.on(rb, tok)
	long := strings.Repeat("x", 300)
	add := func(by int, key string) string {
		return fmt.Sprintf(`{"type":%q,"value":{"By":%d,"Key":%q},"idempotency_key":%q}`, typeName(t, Add{}), by, key, key)
	}
	get := fmt.Sprintf(`{"type":%q}`, typeName(t, Get{}))

	// Health, metrics, and this description.
	a.do(exchange{method: "GET", path: "/healthz", noToken: true, want: 200})
	a.do(exchange{method: "GET", path: "/readyz", noToken: true, want: 200})
	b.do(exchange{method: "GET", path: "/readyz", noToken: true, want: 503})
	a.do(exchange{method: "GET", path: "/metrics", want: 200})
	a.do(exchange{method: "GET", path: "/metrics", noToken: true, want: 401, specRefuses: true})
	b.do(exchange{method: "GET", path: "/metrics", want: 404})
	if got := a.do(exchange{method: "GET", path: "/v1/openapi.json", want: 200}); !bytes.Equal(got, api.OpenAPI()) {
		t.Fatal("GET /v1/openapi.json does not serve api/openapi.json as it is")
	}
	a.do(exchange{method: "GET", path: "/v1/openapi.json", noToken: true, want: 401, specRefuses: true})
	if got, err := ra.Client.OpenAPI(ra.Ctx); err != nil || !bytes.Equal(got, bytes.TrimSpace(api.OpenAPI())) {
		t.Fatalf("Client.OpenAPI: %d bytes, %v; want api/openapi.json", len(got), err)
	}

	// Worlds.
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa","universe":"u"}`, want: 201})
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa","universe":"u"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa","universe":"v"}`, want: 409})
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa2","universe":"nowhere"}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa2"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa2","universe":"u","size":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `id=oa2`, ctype: "text/plain", want: 415, specRefuses: true})
	// Valid JSON, padded past the server's limit: only the server refuses it.
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa2","universe":"u"}` + strings.Repeat(" ", 9<<10), want: 413})
	a.do(exchange{method: "POST", path: "/v1/worlds", body: `{"id":"oa2","universe":"u"}`, noToken: true, want: 401, specRefuses: true})
	ra.Create("oa-p", universe)
	ra.Create("oa-arch", universe)
	// The history worlds: oa-h asks for an effect, sends a message to
	// oa-r, and sets a timer that fires at once and one that waits; oa-c
	// is compacted below its snapshot.
	ra.Create("oa-h", universe)
	ra.Create("oa-r", universe)
	deliverMessages(t, ra)
	must(ra.Client.Send(ra.Ctx, "oa-h", typeName(t, Pay{}), nil, "h-pay"))(t)
	must(ra.Client.Send(ra.Ctx, "oa-h", typeName(t, testworlds.Relay{}), testworlds.Relay{To: "oa-r", Key: "hello"}, "h-relay"))(t)
	must(ra.Client.Send(ra.Ctx, "oa-h", typeName(t, testworlds.Alarm{}), testworlds.Alarm{AfterMs: 1, Key: "now"}, "h-now"))(t)
	must(ra.Client.Send(ra.Ctx, "oa-h", typeName(t, testworlds.Alarm{}), testworlds.Alarm{AfterMs: 3_600_000, Key: "later"}, "h-later"))(t)
	gone := compactedHeight(t, ra, "oa-c")

	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: add(1, "k1"), want: 202})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: add(1, "k1"), want: 202})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: `{}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: `{"type":"x","payload":"AA=="}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: `{"type":"x","idempotency_key":7}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/events", body: add(1, "k1"), want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: add(2, "k2"), want: 202})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: fmt.Sprintf(`{"type":%q}`, typeName(t, Pay{})), want: 202})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/events", body: fmt.Sprintf(`{"type":%q,"value":{"AfterMs":3600000}}`, typeName(t, Arm{})), want: 202})

	a.do(exchange{method: "POST", path: "/v1/worlds/oa/calls", body: get, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/calls", body: fmt.Sprintf(`{"type":%q,"value":{"Why":"no"},"call_id":"f-1"}`, typeName(t, Fail{})), want: 422})
	// A value that does not fit its handler's type is refused before it
	// is enqueued, naming the field; the error carries the caller's
	// request id.
	var mismatch api.Error
	if err := json.Unmarshal(a.do(exchange{method: "POST", path: "/v1/worlds/oa/calls", requestID: "conformance-1",
		body: fmt.Sprintf(`{"type":%q,"value":{"By":"five","Key":"k"}}`, typeName(t, Add{})), want: 400}), &mismatch); err != nil {
		t.Fatal(err)
	}
	if mismatch.Code != api.CodeInvalidArgument || mismatch.RequestID != "conformance-1" || mismatch.Details["type"] != typeName(t, Add{}) ||
		mismatch.Details["field"] != "By" || mismatch.Details["expected"] != "integer" || mismatch.Details["got"] != "string" {
		t.Errorf("a call whose value does not fit its type: %+v", mismatch)
	}
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/calls", body: fmt.Sprintf(`{"type":%q,"timeout_ms":-1}`, typeName(t, Get{})), want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/calls", body: get, want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/pause", want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/calls", body: get, want: 409})
	rb.Create("slow", universe)
	b.do(exchange{method: "POST", path: "/v1/worlds/slow/calls", body: fmt.Sprintf(`{"type":%q,"timeout_ms":20}`, typeName(t, Get{})), want: 504})

	ra.WaitFor("oa stepped, leased and snapshotted", func() (bool, error) {
		v, err := ra.Client.GetWorld(ra.Ctx, "oa")
		return err == nil && v.Head >= 5 && v.Lease != nil && v.Assignment != nil && v.InboxCursor != nil, err
	})
	a.do(exchange{method: "GET", path: "/v1/worlds", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds?detail=true&universe=u", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds?status=sleeping", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds?colour=red", want: 400})
	a.do(exchange{method: "GET", path: "/v1/worlds", noToken: true, want: 401, specRefuses: true})
	var worlds struct {
		Worlds []api.World
		Next   string
	}
	if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/worlds?q=OA&prefix=oa&limit=1", want: 200}), &worlds); err != nil {
		t.Fatal(err)
	}
	if len(worlds.Worlds) != 1 || worlds.Worlds[0].ID != "oa" || worlds.Next != "oa" {
		t.Fatalf("the first page of one world: %+v", worlds)
	}
	a.do(exchange{method: "GET", path: "/v1/worlds?detail=true&limit=2&after=" + url.QueryEscape(worlds.Next), want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds?limit=1001", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/nobody", want: 404})
	a.do(exchange{method: "GET", path: "/v1/worlds/" + long, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/nobody/state", want: 404})
	a.do(exchange{method: "GET", path: "/v1/worlds/" + long + "/state", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state?height=0", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state?height=3", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state?height=100000", want: 400}) // above the head
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state?height=-1", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state?at=3", want: 400})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state", noToken: true, want: 401, specRefuses: true})
	a.do(exchange{method: "GET", path: fmt.Sprintf("/v1/worlds/oa-c/state?height=%d", gone), want: 410})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?after=0&limit=10", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?after=100&wait_ms=1", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?limit=0", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/nobody/journal", want: 404})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?detail=maybe", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?detail=0", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal", noToken: true, want: 401, specRefuses: true})
	// A world of a universe no orchestrator places, compacted in the store.
	testrig.CompactedWorld(t, rb.Ctx, rb.Store, "elsewhere", "cw")
	b.do(exchange{method: "GET", path: "/v1/worlds/cw/journal?after=0", want: 410})
	// Above the floor the records are there, but b has no definition of
	// their universe: their detail says why they could not be derived.
	var underived api.JournalPage
	if err := json.Unmarshal(b.do(exchange{method: "GET", path: "/v1/worlds/cw/journal?after=8&detail=true", want: 200}), &underived); err != nil {
		t.Fatal(err)
	}
	if len(underived.Records) == 0 || underived.Records[0].DeriveError == "" || underived.Records[0].Derived {
		t.Fatalf("records of a universe the server has no definition for: %+v", underived.Records)
	}

	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-fork"}`, want: 201})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-fork"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-arch"}`, want: 409})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/fork", body: `{"id":"oa-f2"}`, want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"height":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa-fork", want: 200}) // a lineage
	// At any height: from the state derived there when no snapshot is.
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-f3","height":3}`, want: 201})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-f4","height":100000}`, want: 400}) // above the head
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-c/fork", body: fmt.Sprintf(`{"id":"oa-c-f","height":%d}`, gone), want: 410})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `id=oa-f5`, ctype: "text/plain", want: 415, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-f5"}` + strings.Repeat(" ", 9<<10), want: 413})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-f5"}`, noToken: true, want: 401, specRefuses: true})

	var forks struct{ Worlds []api.World }
	if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/worlds/oa/forks", want: 200}), &forks); err != nil {
		t.Fatal(err)
	}
	if ids := worldIDs(forks.Worlds); !slices.Equal(ids, []string{"oa-f3", "oa-fork"}) {
		t.Fatalf("oa's forks: %v", ids)
	}
	a.do(exchange{method: "GET", path: "/v1/worlds/oa-fork/forks", want: 200}) // none
	a.do(exchange{method: "GET", path: "/v1/worlds/nobody/forks", want: 404})
	a.do(exchange{method: "GET", path: "/v1/worlds/" + long + "/forks", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/forks?limit=1", want: 400})
	// Upgrades: oa is on its universe's only version already.
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/upgrade", body: `{"to":1}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/upgrade", body: `{"to":0}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/upgrade", body: `{"to":1}`, want: 404})
	a.do(exchange{method: "POST", path: "/v1/universes/u/upgrade", body: `{"to":1,"limit":2}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/universes/nowhere/upgrade", body: `{"to":1}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/universes/u/upgrade", body: `{}`, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/forks", noToken: true, want: 401, specRefuses: true})

	var snap api.Snapshot
	if err := json.Unmarshal(a.do(exchange{method: "POST", path: "/v1/worlds/oa/snapshot", want: 200}), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.World != "oa" || snap.Height < 5 || snap.StateHash == "" || snap.CreatedAt.IsZero() {
		t.Fatalf("oa's snapshot: %+v", snap)
	}
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/snapshot", body: `{}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/snapshot", body: `{"height":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/snapshot", body: `{}` + strings.Repeat(" ", 9<<10), want: 413})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/snapshot", body: `now`, ctype: "text/plain", want: 415, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/snapshot", noToken: true, want: 401, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/snapshot", want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/" + long + "/snapshot", want: 400, specRefuses: true})
	b.do(exchange{method: "POST", path: "/v1/worlds/cw/snapshot", want: 400}) // a universe b has no definition for
	b.do(exchange{method: "POST", path: "/v1/worlds/slow/snapshot", want: 504})

	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/pause", body: `{"reason":"maintenance"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/pause", body: `{"reason":5}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/snapshot", want: 409}) // paused
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/pause", want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/resume", want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/resume", body: `{"why":"x"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/resume", want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-arch/archive", body: `{"reason":"done"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-arch/archive", body: `{"reason":[]}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/archive", want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-arch/resume", want: 409})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-arch/events", body: add(1, "late"), want: 409})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-arch/calls", body: get, want: 409})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-arch/snapshot", want: 409})

	// Operations.
	a.do(exchange{method: "GET", path: "/v1/leases", want: 200})
	a.do(exchange{method: "GET", path: "/v1/leases?worker=w1", want: 200})
	a.do(exchange{method: "GET", path: "/v1/leases?holder=w1", want: 400})
	a.do(exchange{method: "GET", path: "/v1/workers", want: 200})
	a.do(exchange{method: "GET", path: "/v1/workers?live=true", want: 400})
	a.do(exchange{method: "GET", path: "/v1/workers?status=zombie", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/workers?limit=1001", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/workers", noToken: true, want: 401, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/queues", want: 200})
	a.do(exchange{method: "GET", path: "/v1/queues?x=1", want: 400})
	a.do(exchange{method: "PUT", path: "/v1/queues/oa-q", body: `{"concurrency":2,"rate_limit":5,"rate_period_ms":60000,"partitioned":true}`, want: 200})
	a.do(exchange{method: "PUT", path: "/v1/queues/oa-q", body: `{"rate_limit":5}`, want: 400})
	a.do(exchange{method: "PUT", path: "/v1/queues/oa-q", body: `{"concurrency":"two"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/queues/oa-q", want: 200})
	a.do(exchange{method: "GET", path: "/v1/queues/nobody", want: 404})
	a.do(exchange{method: "GET", path: "/v1/queues", want: 200})
	a.do(exchange{method: "POST", path: "/v1/workers/w1/drain", body: `{"draining":false}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/workers/nobody/drain", want: 404})
	a.do(exchange{method: "POST", path: "/v1/workers/w1/drain", body: `{"draining":"no"}`, want: 400, specRefuses: true})
	var workers struct{ Workers []api.Worker }
	if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/workers?status=live&q=W1&prefix=w&limit=1", want: 200}), &workers); err != nil {
		t.Fatal(err)
	}
	if len(workers.Workers) != 1 || workers.Workers[0].ID != "w1" || workers.Workers[0].Status != api.WorkerLive {
		t.Fatalf("the live worker w1: %+v", workers.Workers)
	}
	a.do(exchange{method: "GET", path: "/v1/workers?status=dead&after=w0", want: 200})

	var effects struct{ Effects []api.Effect }
	ra.WaitFor("oa's effect and timer", func() (bool, error) {
		if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/effects?world=oa", want: 200}), &effects); err != nil {
			return false, err
		}
		tm, err := ra.Client.Timers(ra.Ctx, "oa")
		return len(effects.Effects) == 1 && len(tm) == 1, err
	})
	hash := effects.Effects[0].IntentHash
	a.do(exchange{method: "GET", path: "/v1/effects?world=oa&after=0&limit=5", want: 200})
	a.do(exchange{method: "GET", path: "/v1/effects?world=nobody", want: 404})
	a.do(exchange{method: "GET", path: "/v1/timers?world=oa", want: 200})
	a.do(exchange{method: "GET", path: "/v1/timers?world=nobody", want: 404})
	// Across worlds, paged: oa's and oa-h's http.request effects, and
	// oa's and oa-h's waiting timers.
	var effectPage struct {
		Effects []api.Effect
		Next    string
	}
	ra.WaitFor("two open http.request effects", func() (bool, error) {
		err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/effects?kind=http.request&limit=1", want: 200}), &effectPage)
		return effectPage.Next != "", err
	})
	a.do(exchange{method: "GET", path: "/v1/effects?kind=http.request&status=pending&limit=1&after=" + url.QueryEscape(effectPage.Next), want: 200})
	// Their executions failed and wait for their retry: the lists show
	// the schedule.
	items, err := ra.Store.Claim(ra.Ctx, "adapter-1", []string{"http.request"}, 2, time.Minute)
	if err != nil || len(items) != 2 {
		t.Fatalf("claim: %+v %v", items, err)
	}
	for _, it := range items {
		if err := ra.Store.RetryLater(ra.Ctx, it.IntentHash, it.ClaimOf(), time.Hour, "connection refused"); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/effects?world=oa-h&kind=http.request", want: 200}), &effectPage); err != nil {
		t.Fatal(err)
	}
	if len(effectPage.Effects) != 1 || effectPage.Effects[0].Failures != 1 || effectPage.Effects[0].RetryAt.IsZero() {
		t.Fatalf("an effect waiting for its retry: %+v", effectPage.Effects)
	}
	a.do(exchange{method: "GET", path: "/v1/effects", want: 200})
	a.do(exchange{method: "GET", path: "/v1/effects?status=all&world=oa-h", want: 200})
	a.do(exchange{method: "GET", path: "/v1/effects?world=", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/effects?kind=", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/effects?status=sleeping", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/effects?limit=1001", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/effects?after=-1", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/effects", noToken: true, want: 401, specRefuses: true})
	var timerPage struct {
		Timers []api.Timer
		Next   string
	}
	ra.WaitFor("two waiting timers", func() (bool, error) {
		err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/timers?limit=1", want: 200}), &timerPage)
		return timerPage.Next != "", err
	})
	if len(timerPage.Timers) != 1 || timerPage.Next != api.TimerCursor(timerPage.Timers[0]) {
		t.Fatalf("the first page of one timer: %+v", timerPage)
	}
	a.do(exchange{method: "GET", path: "/v1/timers?status=all&limit=1&after=" + url.QueryEscape(timerPage.Next), want: 200})
	a.do(exchange{method: "GET", path: "/v1/timers", want: 200})
	a.do(exchange{method: "GET", path: "/v1/timers?world=oa-h&status=delivered", want: 200})
	a.do(exchange{method: "GET", path: "/v1/timers?after=yesterday", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/timers?status=fired", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/timers?world=", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/timers?limit=0", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/timers", noToken: true, want: 401, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/retry", want: 409})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/receipt", body: `{"status":"maybe"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/" + strings.Repeat("0", 64) + "/receipt", body: `{"status":"ok"}`, want: 404})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/receipt", body: `{"status":"error","body":{"why":"down"},"reason":"by phone"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/receipt", body: `{"status":"ok"}`, want: 200}) // a duplicate
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/hold", want: 409})                             // done: effect_ended
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/release", want: 409})                          // done: effect_ended
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/retry", body: `{"reason":"the payee is back"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/retry", body: `{"reason":false}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/" + strings.Repeat("0", 64) + "/retry", want: 404})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/hold", body: `{"reason":"restored"}`, want: 200})
	a.do(exchange{method: "GET", path: "/v1/effects?status=held", want: 200})
	a.do(exchange{method: "GET", path: "/v1/queues", want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/hold", body: `{"reason":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/" + strings.Repeat("0", 64) + "/hold", want: 404})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/release", body: `{"reason":"never charged"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/release", body: `{"reason":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/" + strings.Repeat("0", 64) + "/release", want: 404})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/hold", want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/held/release", body: `{"reason":"all checked"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/held/release", body: `{"reason":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/held/release", noToken: true, want: 401, specRefuses: true})

	// The journal's detail of every kind of step: oa's event, calls (a
	// reply and a failure), effect, timer and receipt, oa-h's send and
	// fired timer, and oa-r's message with its cause.
	ra.WaitFor("oa-h's timer fired and oa-r got its message", func() (bool, error) {
		_, h := ra.stateOf("oa-h")
		_, r := ra.stateOf("oa-r")
		return slices.Contains(h.Fired, "now") && slices.Contains(r.Got, "hello"), nil
	})
	var detail []api.Record
	for _, path := range []string{"/v1/worlds/oa/journal?detail=true", "/v1/worlds/oa-h/journal?after=0&limit=100&detail=1", "/v1/worlds/oa-r/journal?detail=true"} {
		var p api.JournalPage
		if err := json.Unmarshal(a.do(exchange{method: "GET", path: path, want: 200}), &p); err != nil {
			t.Fatal(err)
		}
		detail = append(detail, p.Records...)
	}
	shown := map[string]bool{}
	for _, r := range detail {
		in := r.Input
		for what, ok := range map[string]bool{
			"derived":       r.Derived,
			"input.value":   in != nil && in.Value != nil,
			"input.payload": in != nil && len(in.PayloadCBOR) > 0,
			"input.timer":   in != nil && in.Timer != "",
			"input.cause":   in != nil && in.Cause != nil && in.Cause.FromWorld == "oa-h",
			"receipt":       r.Receipt != nil && r.Receipt.Body != nil && len(r.Receipt.BodyCBOR) > 0,
			"reply":         r.Reply != nil && r.Reply.Value != nil && len(r.Reply.ValueCBOR) > 0,
			"reply.error":   r.Reply != nil && r.Reply.Error != "",
			"intents":       len(r.Intents) > 0,
			"sends":         len(r.Sends) > 0 && r.Sends[0].DestWorld == "oa-r",
			"timers":        len(r.Timers) > 0 && r.Timers[0].Type != "",
		} {
			shown[what] = shown[what] || ok
		}
	}
	for _, what := range slices.Sorted(maps.Keys(shown)) {
		if !shown[what] {
			t.Errorf("no record's detail shows %s: the description is not checked against it", what)
		}
	}

	// Workflow runs and the audit.
	start := func(id string, amount int) string {
		return fmt.Sprintf(`{"workflow":"payout","id":%q,"input":{"Account":"alice","Amount":%d}}`, id, amount)
	}
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r1", 5), want: 201})
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r1", 5), want: 200})
	// Signal-with-start: started and approved in one request; repeated,
	// the same run, signalled once.
	sws := `{"workflow":"payout","id":"rs","input":{"Account":"alice","Amount":3},"signal":{"name":"approved","value":true,"idempotency_key":"ok-rs"}}`
	a.do(exchange{method: "POST", path: "/v1/runs", body: sws, want: 201})
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"workflow":"payout","id":"rs2","input":{"Account":"alice","Amount":3},"signal":{"value":true}}`, want: 400, specRefuses: true})
	ra.runUntil("rs", "completed", func(v api.RunView) bool { return v.Status == "completed" })
	// The signal object's "key" is idempotency_key's short name; both
	// given, they must agree.
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"workflow":"payout","id":"rk","input":{"Account":"alice","Amount":3},"signal":{"name":"approved","value":true,"key":"ok-rk"}}`, want: 201})
	ra.runUntil("rk", "completed", func(v api.RunView) bool { return v.Status == "completed" })
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"workflow":"payout","id":"rk2","input":{"Account":"alice","Amount":3},"signal":{"name":"approved","value":true,"key":"a","idempotency_key":"b"}}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r1", 6), want: 409})
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"workflow":"refund","id":"r9"}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"id":"r9"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r2", 5), want: 201})
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r3", -1), want: 201}) // fails its validation
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"workflow":"payout","id":"ra","input":{"Account":"alice","Amount":4},"attributes":{"customer":"c-1","region":"eu"}}`, want: 201})
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"workflow":"payout","id":"rb","input":{"Account":"alice","Amount":4},"attributes":{"bad key":"x"}}`, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/runs?attr=customer:c-1&attr=region:eu", want: 200})
	a.do(exchange{method: "GET", path: "/v1/runs?attr=customer", want: 400, specRefuses: true})
	var runs struct {
		Runs []api.Run
		Next string
	}
	if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/runs?q=R&prefix=r&limit=1", want: 200}), &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs.Runs) != 1 || runs.Runs[0].ID != "r1" || runs.Next != "r1" {
		t.Fatalf("the first page of one run: %+v", runs)
	}
	a.do(exchange{method: "GET", path: "/v1/runs?q=payout&limit=1000&after=" + url.QueryEscape(runs.Next), want: 200})
	a.do(exchange{method: "GET", path: "/v1/runs?limit=0", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/runs?workflow=refund", want: 400})
	a.do(exchange{method: "GET", path: "/v1/runs", noToken: true, want: 401, specRefuses: true})
	// Schedules (recorded only: this rig runs no scheduler).
	sched := `{"id":"nightly","cron":"0 3 * * *","time_zone":"Europe/Paris","jitter":"5m","target":{"workflow":"payout","input":{"Account":"alice","Amount":1}}}`
	a.do(exchange{method: "POST", path: "/v1/schedules", body: sched, want: 201})
	a.do(exchange{method: "POST", path: "/v1/schedules", body: sched, want: 409})
	a.do(exchange{method: "POST", path: "/v1/schedules", body: `{"id":"s2","every":"1h","target":{"world":"oa","type":"T","value":{}}}`, want: 201})
	a.do(exchange{method: "POST", path: "/v1/schedules", body: `{"id":"s3","every":"often","target":{"workflow":"payout"}}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/schedules", body: `{"id":"s3","cron":"61 * * * *","target":{"workflow":"payout"}}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/schedules", body: `{"id":"s3","every":"1h","target":{"workflow":"refund"}}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/schedules", body: `{"id":"s3","every":"1h"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/schedules", want: 200})
	a.do(exchange{method: "GET", path: "/v1/schedules?limit=1", want: 200})
	a.do(exchange{method: "GET", path: "/v1/schedules?limit=0", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/schedules/nightly", want: 200})
	a.do(exchange{method: "GET", path: "/v1/schedules/nobody", want: 404})
	a.do(exchange{method: "POST", path: "/v1/schedules/nightly/pause", want: 200})
	a.do(exchange{method: "POST", path: "/v1/schedules/nobody/pause", want: 404})
	a.do(exchange{method: "POST", path: "/v1/schedules/nightly/resume", want: 200})
	a.do(exchange{method: "POST", path: "/v1/schedules/nobody/resume", want: 404})
	a.do(exchange{method: "POST", path: "/v1/schedules/nightly/trigger", want: 202})
	a.do(exchange{method: "POST", path: "/v1/schedules/nobody/trigger", want: 404})
	a.do(exchange{method: "DELETE", path: "/v1/schedules/s2", want: 200})
	a.do(exchange{method: "DELETE", path: "/v1/schedules/s2", want: 404})

	ra.runUntil("r1", "validated", func(v api.RunView) bool { return len(v.Timeline) > 0 && len(v.Timeline[0].Attempts) > 0 })
	a.do(exchange{method: "GET", path: "/v1/runs/r1", want: 200})
	a.do(exchange{method: "GET", path: "/v1/runs/nobody", want: 404})
	a.do(exchange{method: "GET", path: "/v1/runs", want: 200})
	a.do(exchange{method: "GET", path: "/v1/runs?workflow=payout&status=running", want: 200})
	a.do(exchange{method: "GET", path: "/v1/runs?status=sleeping", want: 400, specRefuses: true})
	b.do(exchange{method: "GET", path: "/v1/runs", want: 404})
	a.do(exchange{method: "POST", path: "/v1/runs/r1/signals", body: `{"name":"approved","value":true,"idempotency_key":"s1"}`, want: 202})
	a.do(exchange{method: "POST", path: "/v1/runs/r1/signals", body: `{"value":true}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs/nobody/signals", body: `{"name":"approved"}`, want: 404})
	ra.runUntil("r1", "completed", func(v api.RunView) bool { return v.Status == "completed" })
	var done api.RunView
	if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/runs/r1", want: 200}), &done); err != nil { // with its output
		t.Fatal(err)
	}
	if done.Input == nil || done.Actions == nil || len(done.Actions) != 0 || len(done.Timeline) == 0 ||
		done.Timeline[0].Attempts[0].Started == nil || done.Timeline[0].Attempts[0].Output == nil {
		t.Fatalf("the completed run's view: %+v", done)
	}
	ra.runUntil("r3", "failed", func(v api.RunView) bool { return v.Status == "failed" })
	var failed api.RunView
	if err := json.Unmarshal(a.do(exchange{method: "GET", path: "/v1/runs/r3", want: 200}), &failed); err != nil {
		t.Fatal(err)
	}
	if len(failed.Timeline) == 0 || len(failed.Timeline[0].Attempts) == 0 || failed.Timeline[0].Attempts[0].Failure == nil {
		t.Fatalf("the failed run's view: %+v", failed)
	}
	a.do(exchange{method: "POST", path: "/v1/runs/r2/pause", body: `{"reason":"hold"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/runs/r2/pause", body: `{"reason":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs/nobody/pause", want: 404})
	a.do(exchange{method: "POST", path: "/v1/runs/r2/resume", want: 200})
	a.do(exchange{method: "POST", path: "/v1/runs/r2/resume", body: `{"reason":{}}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs/nobody/resume", want: 404})
	a.do(exchange{method: "POST", path: "/v1/runs/r2/cancel", body: `{"reason":"not needed"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/runs/r2/cancel", body: `{"reason":true}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs/nobody/cancel", want: 404})
	a.do(exchange{method: "POST", path: "/v1/runs/r1/cancel", want: 409}) // completed
	a.do(exchange{method: "POST", path: "/v1/runs/r1/signals", body: `{"name":"approved","value":true}`, want: 409})
	a.do(exchange{method: "GET", path: "/v1/runs/r2/query/stage", want: 200})
	a.do(exchange{method: "GET", path: "/v1/runs/r2/query/nope", want: 404})
	a.do(exchange{method: "GET", path: "/v1/runs/r2/values", want: 200})
	a.do(exchange{method: "GET", path: "/v1/runs/nobody/values", want: 404})
	// The cancel is told to r2's function, which ends the run cancelled.
	ra.runUntil("r2", "cancelled", func(v api.RunView) bool { return v.Status == "cancelled" })
	a.do(exchange{method: "POST", path: "/v1/runs/r2/pause", want: 409})  // cancelled
	a.do(exchange{method: "POST", path: "/v1/runs/r2/resume", want: 409}) // cancelled
	// The operator's ways out of a blocked run.
	a.do(exchange{method: "POST", path: "/v1/runs/rb-t/terminate", body: `{"reason":"bad deploy"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/runs/rb-t/terminate", want: 409}) // ended
	a.do(exchange{method: "POST", path: "/v1/runs/rb-t/terminate", body: `{"reason":7}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs/nobody/terminate", want: 404})
	a.do(exchange{method: "POST", path: "/v1/runs/rb-r/reset", body: `{"step":9}`, want: 400}) // past its steps
	a.do(exchange{method: "POST", path: "/v1/runs/rb-r/reset", body: `{"step":1,"reason":"screen withdrawn"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/runs/rb-r/reset", body: `{"reason":"no step"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs/rb-r/reset", body: `{"step":-1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs/rb-t/reset", body: `{"step":0}`, want: 409}) // ended
	a.do(exchange{method: "POST", path: "/v1/runs/nobody/reset", body: `{"step":0}`, want: 404})

	const window = "from=2000-01-01T00:00:00Z&to=2200-01-01T00:00:00Z"
	a.do(exchange{method: "GET", path: "/v1/streams/oa/audit?" + window, want: 200})
	a.do(exchange{method: "GET", path: "/v1/streams/r1/audit?" + window, want: 200})
	a.do(exchange{method: "GET", path: "/v1/streams/oa/audit?from=2000-01-01T00:00:00Z", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/streams/oa/audit?from=yesterday&to=2200-01-01T00:00:00Z", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/streams/nobody/audit?" + window, want: 404})
	b.do(exchange{method: "GET", path: "/v1/streams/cw/audit?" + window, want: 410})

	// The event stream: every event of the first state matches its schema.
	names, closeA := a.stream(exchange{method: "GET", path: "/v1/events"})
	closeA()
	for _, want := range []string{"queues", "summary", "worker", "world", "run", "synced"} {
		if !slices.Contains(names, want) {
			t.Errorf("the stream's first state has no %q event: %v", want, names)
		}
	}
	a.do(exchange{method: "GET", path: "/v1/events?since=0", want: 400})
	_, closeB := b.stream(exchange{method: "GET", path: "/v1/events"})
	b.do(exchange{method: "GET", path: "/v1/events", want: 503}) // its one stream is open
	closeB()

	// What the description cannot route still answers its Error body.
	for _, x := range []exchange{
		{method: "GET", path: "/v1/nothing-here", want: 404},
		{method: "DELETE", path: "/v1/worlds/oa", want: 405},
		{method: "GET", path: "/v1/nothing-here", noToken: true, want: 401},
	} {
		st, body := ra.Do(x.method, x.path, "", "", map[bool]string{false: tok}[x.noToken])
		if st != x.want {
			t.Fatalf("%s %s: %d %s, want %d", x.method, x.path, st, body, x.want)
		}
		c.validateValue(fmt.Sprintf("%s %s's %d", x.method, x.path, st), "Error", body)
	}

	// The operations described since the history, operations and list
	// work were seen with every status they describe but 500 and 503 (a
	// healthy server gives neither on demand).
	for name, op := range operations(c.spec) {
		if !slices.Contains([]string{"listWorlds", "getState", "forkWorld", "snapshotWorld", "readJournal", "listForks",
			"listEffects", "listTimers", "listWorkers", "listRuns"}, op.OperationID) {
			continue
		}
		for code := range op.Responses.Map() {
			var st int
			if _, err := fmt.Sscan(code, &st); err != nil {
				t.Fatalf("%s: status %q", name, code)
			}
			if st != 500 && st != 503 && !c.seen[op.OperationID][st] {
				t.Errorf("%s (%s) describes %d but was not seen with it: exercise it in this test", name, op.OperationID, st)
			}
		}
	}

	// Every operation was seen succeeding and, when it describes a 4xx,
	// refusing.
	for name, op := range operations(c.spec) {
		seen := c.seen[op.OperationID]
		var ok2, ok4, has4 bool
		for st := range seen {
			ok2 = ok2 || st < 300
			ok4 = ok4 || (st >= 400 && st < 500)
		}
		for code := range op.Responses.Map() {
			has4 = has4 || strings.HasPrefix(code, "4")
		}
		if !ok2 || (has4 && !ok4) {
			t.Errorf("%s (%s) was seen only with %v: exercise its success and a refusal in this test", name, op.OperationID, slices.Sorted(maps.Keys(seen)))
		}
	}
}

// compactedHeight drives world id of r through five steps, compacts its
// journal below its active snapshot, and returns a height whose state can
// no longer be derived: no stored snapshot at it or between it and the
// compaction floor.
func compactedHeight(t *testing.T, r *rig, id string) uint64 {
	t.Helper()
	r.Create(id, universe)
	for i := range 5 {
		key := fmt.Sprint("c", i)
		must(r.Client.Send(r.Ctx, id, typeName(t, Add{}), Add{By: 1, Key: key}, key))(t)
	}
	var height uint64
	r.WaitFor(id+" at 5, snapshotted at 2 or above", func() (bool, error) {
		v, err := r.Client.GetWorld(r.Ctx, id)
		if err != nil || v.Head < 5 {
			return false, err
		}
		s, ok, err := r.Store.ActiveSnapshot(r.Ctx, id)
		height = s.Height
		return ok && s.Height >= 2, err
	})
	l, ok, err := r.Store.GetLease(r.Ctx, id)
	if err != nil || !ok {
		t.Fatalf("%s's lease: %v %v", id, ok, err)
	}
	if _, err := r.Store.Compact(r.Ctx, id, l.Epoch, 0); err != nil {
		t.Fatal(err)
	}
	for h := height - 1; h > 0; h-- {
		if b, ok, err := r.Store.SnapshotBelow(r.Ctx, id, h+1); err == nil && (!ok || b.Height < h) {
			return h
		}
	}
	t.Fatalf("every height of %s below its snapshot at %d has a snapshot", id, height)
	return 0
}

// deliverMessages runs the fabric.send adapter on r's store until the test
// ends, so that a message one world sends reaches another.
func deliverMessages(t *testing.T, r *rig) {
	t.Helper()
	p, err := adapter.NewPool(r.Store, adapter.Config{Worker: "fabric", Executor: actor.NewExecutor(1)},
		adapter.Register(adapter.NewFabric(r.Store), adapter.RetryPolicy{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.Ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
