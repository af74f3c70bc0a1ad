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
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
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
	ra := newRunsRigWith(t, rigOptions{token: tok, metrics: true, cfg: func(cfg *api.Config) { cfg.MaxBody = 8 << 10 }})
	a := c.on(ra, tok)
	rb := newRig(t, rigOptions{token: tok, workers: []string{}, cfg: func(cfg *api.Config) {
		cfg.MaxEventStreams = 1
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
	a.do(exchange{method: "GET", path: "/v1/worlds/oa", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/nobody", want: 404})
	a.do(exchange{method: "GET", path: "/v1/worlds/" + long, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/state", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/nobody/state", want: 404})
	a.do(exchange{method: "GET", path: "/v1/worlds/" + long + "/state", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?after=0&limit=10", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?after=100&wait_ms=1", want: 200})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa/journal?limit=0", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/nobody/journal", want: 404})
	// A world of a universe no orchestrator places, compacted in the store.
	testrig.CompactedWorld(t, rb.Ctx, rb.Store, "elsewhere", "cw")
	b.do(exchange{method: "GET", path: "/v1/worlds/cw/journal?after=0", want: 410})

	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-fork"}`, want: 201})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-fork"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"id":"oa-arch"}`, want: 409})
	a.do(exchange{method: "POST", path: "/v1/worlds/nobody/fork", body: `{"id":"oa-f2"}`, want: 404})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa/fork", body: `{"height":1}`, want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/worlds/oa-fork", want: 200}) // a lineage

	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/pause", body: `{"reason":"maintenance"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/worlds/oa-p/pause", body: `{"reason":5}`, want: 400, specRefuses: true})
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

	// Operations.
	a.do(exchange{method: "GET", path: "/v1/leases", want: 200})
	a.do(exchange{method: "GET", path: "/v1/leases?worker=w1", want: 200})
	a.do(exchange{method: "GET", path: "/v1/leases?holder=w1", want: 400})
	a.do(exchange{method: "GET", path: "/v1/workers", want: 200})
	a.do(exchange{method: "GET", path: "/v1/workers?live=true", want: 400})
	a.do(exchange{method: "GET", path: "/v1/queues", want: 200})
	a.do(exchange{method: "GET", path: "/v1/queues?x=1", want: 400})
	a.do(exchange{method: "POST", path: "/v1/workers/w1/drain", body: `{"draining":false}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/workers/nobody/drain", want: 404})
	a.do(exchange{method: "POST", path: "/v1/workers/w1/drain", body: `{"draining":"no"}`, want: 400, specRefuses: true})

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
	a.do(exchange{method: "GET", path: "/v1/effects", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/effects?world=nobody", want: 404})
	a.do(exchange{method: "GET", path: "/v1/timers?world=oa", want: 200})
	a.do(exchange{method: "GET", path: "/v1/timers?limit=5", want: 400, specRefuses: true})
	a.do(exchange{method: "GET", path: "/v1/timers?world=nobody", want: 404})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/retry", want: 409})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/receipt", body: `{"status":"maybe"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/" + strings.Repeat("0", 64) + "/receipt", body: `{"status":"ok"}`, want: 404})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/receipt", body: `{"status":"error","body":{"why":"down"},"reason":"by phone"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/receipt", body: `{"status":"ok"}`, want: 200}) // a duplicate
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/retry", body: `{"reason":"the payee is back"}`, want: 200})
	a.do(exchange{method: "POST", path: "/v1/effects/" + hash + "/retry", body: `{"reason":false}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/effects/" + strings.Repeat("0", 64) + "/retry", want: 404})

	// Workflow runs and the audit.
	start := func(id string, amount int) string {
		return fmt.Sprintf(`{"workflow":"payout","id":%q,"input":{"Account":"alice","Amount":%d}}`, id, amount)
	}
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r1", 5), want: 201})
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r1", 5), want: 200})
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r1", 6), want: 409})
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"workflow":"refund","id":"r9"}`, want: 400})
	a.do(exchange{method: "POST", path: "/v1/runs", body: `{"id":"r9"}`, want: 400, specRefuses: true})
	a.do(exchange{method: "POST", path: "/v1/runs", body: start("r2", 5), want: 201})
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
	a.do(exchange{method: "GET", path: "/v1/runs/r1", want: 200}) // with its output
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
	a.do(exchange{method: "POST", path: "/v1/runs/r2/pause", want: 409})  // cancelled
	a.do(exchange{method: "POST", path: "/v1/runs/r2/resume", want: 409}) // cancelled

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
