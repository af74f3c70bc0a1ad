package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"slices"
)

// OpenAPI is the OpenAPI 3.1 description of the API, which GET
// /v1/openapi.json serves as it is. It is hand-written JSON rather than
// generated from the Go types or converted from YAML at build time: the
// file is the one source, served byte for byte, with no build step or
// YAML dependency to keep in step, and the tests hold it to the server
// (every route described, every description served, real responses
// valid against it).
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns a copy of the API's OpenAPI 3.1 description (JSON).
func OpenAPI() []byte { return slices.Clone(openAPI) }

// Routes are the patterns ("METHOD /path") the server serves, sorted:
// what its OpenAPI description must describe.
func (s *Server) Routes() []string {
	out := make([]string, 0, len(s.patterns))
	for p := range s.patterns {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// openAPISpec serves the description. It needs the token like every other
// /v1 path: it lists the routes, which an unauthenticated caller is not
// told.
func (s *Server) openAPISpec(*http.Request, *reqCtx) (int, any, error) {
	return 0, passthrough{h: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(openAPI)
	})}, nil
}

// OpenAPI fetches the server's OpenAPI description (GET /v1/openapi.json):
// the JSON document, without the whitespace around it.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var raw json.RawMessage
	if _, err := c.do(ctx, http.MethodGet, "/v1/openapi.json", nil, nil, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}
