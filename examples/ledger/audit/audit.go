// Package audit is an effect adapter as an application writes one: it
// serves the ledger accounts' audit reports (http.request) in process,
// keeping each report it is handed and answering 204 No Content, so the
// ledger runs without an audit service.
//
// It is written against the effect vocabulary (package vocab: the
// EffectItem it is handed, the Result it answers, Permanent for a request
// it can never serve) and the kernel's params and bodies (package world),
// and nothing else of Orrery: an adapter needs nothing of the store, and
// this package's dependencies do not include it. Register it on a node
// like any adapter:
//
//	rec := &audit.Recorder{}
//	n, err := node.Start(ctx, node.Config{ ...,
//		Adapters: []adapter.Registration{adapter.Register(rec, adapter.NoRetry())},
//	})
package audit

import (
	"context"
	"errors"
	"sync"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Recorder is the in-process audit service: an adapter of http.request
// that keeps the requests it executes. Safe for concurrent use, as a pool
// requires.
type Recorder struct {
	mu  sync.Mutex
	got []world.HTTPRequest
}

var _ effect.Adapter = (*Recorder)(nil)

// ErrNoRequest: the params of an http.request have no method or URL.
var ErrNoRequest = errors.New("audit: http.request without a method or URL")

// Kinds implements effect.Adapter: it serves http.request.
func (*Recorder) Kinds() []string { return []string{world.KindHTTPRequest} }

// Execute implements effect.Adapter. A request whose params do not decode,
// or name no method or URL, can never be served: a Permanent error, which
// the pool delivers as an error receipt at once.
func (r *Recorder) Execute(_ context.Context, it vocab.EffectItem) (effect.Result, error) {
	var req world.HTTPRequest
	if err := world.Decode(it.Params, &req); err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	if req.Method == "" || req.URL == "" {
		return effect.Result{}, effect.Permanent(ErrNoRequest)
	}
	r.mu.Lock()
	r.got = append(r.got, req)
	r.mu.Unlock()
	return effect.OK(world.HTTPResponse{Status: 204}), nil
}

// Requests returns the requests executed so far, in order.
func (r *Recorder) Requests() []world.HTTPRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]world.HTTPRequest(nil), r.got...)
}
