package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// Config configures a Server. Store, Ops, Client and Kernels are
// required.
type Config struct {
	Store  store.Store
	Ops    *plane.Ops
	Client *plane.Client // calls and state go through it (in-process replies)
	// Kernels are the universes worlds may be created in, and those a
	// list without a universe covers.
	Kernels plane.Kernels
	// Token is the bearer token every request but /healthz and /readyz
	// must present; "" disables authentication, which Listen allows on
	// a loopback address only.
	Token string
	// MaxBody bounds a request body (default 1 MiB).
	MaxBody int64
	// CallTimeout is the default and the longest wait of a call (default
	// 30s).
	CallTimeout time.Duration
	// JournalWaitMax bounds a journal long-poll's wait_ms (default and
	// at most 30s).
	JournalWaitMax time.Duration
	// WorkerLiveFor: a worker is shown live while its last heartbeat is
	// younger than this by the store's clock (default 10s, the hosts'
	// default lease TTL).
	WorkerLiveFor time.Duration
	// Ready, when set, is asked by /readyz after the store answered: a
	// non-nil error makes the server not ready.
	Ready func(context.Context) error
	// Metrics, when set, is what /metrics serves.
	Metrics *Metrics
	// Logger receives one Debug line per request, an Info line per answer
	// refusing a client's mistake (4xx), a Warn line per 501, 503 or 504
	// and an Error line per other 5xx, each with the request's request_id
	// (nil: discarded).
	Logger *slog.Logger
	// Runs serves the workflow run endpoints (/v1/runs); nil: the server
	// serves no workflows (the list and every run are not found, a start
	// is refused). The audit endpoint needs only the store.
	Runs *RunsBackend
	// Tracer starts one server span per request (nil:
	// otel.GetTracerProvider(), a no-op unless the binary installs an
	// SDK).
	Tracer trace.TracerProvider
	// Executor is the clock and goroutine source of the event streams'
	// poller (nil: the production executor). A node passes its own.
	Executor actor.Executor
	// MaxEventStreams bounds the event streams open at once (default
	// DefaultMaxEventStreams); one more is refused with 503.
	MaxEventStreams int
	// EventPoll is how often the event streams' poller reads the store
	// while a stream is open (default DefaultEventPoll).
	EventPoll time.Duration
	// UI, when set, is served under /ui/ (the path after it) without a
	// token, and / redirects to /ui/: the dashboard's static files, which
	// hold no data (the pages read the API with the token). See package
	// web.
	UI http.Handler
	// ProbesOnly makes a server of /healthz, /readyz and /metrics alone,
	// for a process whose roles leave the API to others (a worker class
	// without the api role): it keeps its probes and its metrics, and
	// every other path is not found.
	ProbesOnly bool
}

// Defaults of Config.
const (
	DefaultMaxBody       = 1 << 20
	DefaultCallTimeout   = 30 * time.Second
	DefaultWorkerLiveFor = 10 * time.Second
	// MaxJournalWait is the longest journal long-poll.
	MaxJournalWait = 30 * time.Second
)

// Server is the HTTP ops API: an http.Handler.
type Server struct {
	cfg       Config
	tokenHash [sha256.Size]byte
	mux       *http.ServeMux
	patterns  map[string]bool
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	log       *slog.Logger
	hub       *eventHub
}

// NewServer returns the server of cfg.
func NewServer(cfg Config) (*Server, error) {
	switch {
	case cfg.Store == nil:
		return nil, &ConfigError{Field: "Store", Reason: "required"}
	case cfg.Ops == nil:
		return nil, &ConfigError{Field: "Ops", Reason: "required"}
	case cfg.Client == nil:
		return nil, &ConfigError{Field: "Client", Reason: "required"}
	case len(cfg.Kernels) == 0 && cfg.Runs == nil:
		return nil, &ConfigError{Field: "Kernels", Reason: "at least one universe is required (or Runs, for a server of workflows only)"}
	case cfg.MaxBody < 0 || cfg.CallTimeout < 0 || cfg.WorkerLiveFor < 0 || cfg.JournalWaitMax < 0 ||
		cfg.MaxEventStreams < 0 || cfg.EventPoll < 0:
		return nil, &ConfigError{Field: "Config", Reason: "MaxBody, CallTimeout, JournalWaitMax, WorkerLiveFor, MaxEventStreams and EventPoll must not be negative"}
	}
	if cfg.MaxEventStreams == 0 {
		cfg.MaxEventStreams = DefaultMaxEventStreams
	}
	if cfg.EventPoll == 0 {
		cfg.EventPoll = DefaultEventPoll
	}
	if cfg.Executor == nil {
		cfg.Executor = actor.NewEntropyExecutor()
	}
	if cfg.Runs != nil {
		if err := cfg.Runs.check(); err != nil {
			return nil, err
		}
	}
	if cfg.JournalWaitMax == 0 || cfg.JournalWaitMax > MaxJournalWait {
		cfg.JournalWaitMax = MaxJournalWait
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.WorkerLiveFor == 0 {
		cfg.WorkerLiveFor = DefaultWorkerLiveFor
	}
	tp := cfg.Tracer
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	s := &Server{
		cfg: cfg, mux: http.NewServeMux(), patterns: map[string]bool{},
		tracer: tp.Tracer("github.com/orrery-run/orrery/api"),
		prop:   otel.GetTextMapPropagator(),
		log:    cfg.Logger,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.hub = &eventHub{s: s, ex: cfg.Executor, max: cfg.MaxEventStreams, every: cfg.EventPoll}
	if cfg.Token != "" {
		s.tokenHash = sha256.Sum256([]byte(cfg.Token))
	}
	s.routes()
	return s, nil
}

// ConfigError is a Config that cannot work.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "api: config " + e.Field + ": " + e.Reason }

// Is matches ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// ErrConfig matches every *ConfigError.
var ErrConfig = errors.New("api: invalid configuration")

// Handler returns the server as an http.Handler.
func (s *Server) Handler() http.Handler { return s }

// handlerFunc is a route's handler: it returns the status and body of a
// success, or an error that becomes the error body.
type handlerFunc func(r *http.Request, rc *reqCtx) (int, any, error)

// reqCtx is what the middleware learns about a request for its span and
// log line.
type reqCtx struct {
	w     http.ResponseWriter
	world string       // the world the request is about, once known
	log   *slog.Logger // the server's, with the request id
}

// RequestIDHeader carries a request's id: the caller's, when it sent a
// sane one, else one the server makes. The answer always carries it, as
// does every log line of the request and every error body (request_id),
// so that a client's report finds the server's lines.
const RequestIDHeader = "X-Request-Id"

// maxRequestID bounds a caller's request id.
const maxRequestID = 128

// requestID is the caller's id when it is 1 to 128 characters of
// letters, digits and -_.:/+=, which keep a log line and a header
// unambiguous; else a new random one.
func requestID(given string) string {
	if given != "" && len(given) <= maxRequestID && strings.IndexFunc(given, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:/+=", c))
	}) < 0 {
		return given
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// route registers pattern ("METHOD /path") with auth unless open.
func (s *Server) route(pattern string, open bool, h handlerFunc) {
	s.patterns[pattern] = true
	s.mux.Handle(pattern, s.wrap(pattern, open, h))
}

func (s *Server) routes() {
	s.route("GET /healthz", true, s.healthz)
	s.route("GET /readyz", true, s.readyz)
	s.route("GET /metrics", false, s.metrics)
	if s.cfg.ProbesOnly {
		return
	}

	s.route("POST /v1/worlds", false, s.createWorld)
	s.route("GET /v1/worlds", false, s.listWorlds)
	s.route("GET /v1/worlds/{id}", false, s.getWorld)
	s.route("POST /v1/worlds/{id}/events", false, s.sendEvent)
	s.route("POST /v1/worlds/{id}/calls", false, s.call)
	s.route("GET /v1/worlds/{id}/state", false, s.state)
	s.route("POST /v1/worlds/{id}/fork", false, s.fork)
	s.route("POST /v1/worlds/{id}/snapshot", false, s.snapshot)
	s.route("POST /v1/worlds/{id}/pause", false, s.setStatus(store.WorldPaused))
	s.route("POST /v1/worlds/{id}/resume", false, s.setStatus(store.WorldActive))
	s.route("POST /v1/worlds/{id}/archive", false, s.setStatus(store.WorldArchived))
	s.route("GET /v1/worlds/{id}/journal", false, s.journal)
	s.route("GET /v1/worlds/{id}/forks", false, s.forks)
	s.route("POST /v1/worlds/{id}/upgrade", false, s.upgradeWorld)
	s.route("POST /v1/universes/{universe}/upgrade", false, s.upgradeUniverse)

	s.route("GET /v1/leases", false, s.leases)
	s.route("GET /v1/effects", false, s.effects)
	s.route("POST /v1/effects/{hash}/retry", false, s.retryEffect)
	s.route("POST /v1/effects/{hash}/receipt", false, s.injectReceipt)
	s.route("POST /v1/effects/{hash}/hold", false, s.holdEffect)
	s.route("POST /v1/effects/{hash}/release", false, s.releaseHeld)
	s.route("POST /v1/effects/held/release", false, s.releaseAllHeld)
	s.route("GET /v1/timers", false, s.timers)
	s.route("GET /v1/workers", false, s.workers)
	s.route("GET /v1/queues", false, s.queues)
	s.workflowQueueRoutes()
	s.route("GET /v1/events", false, s.events)
	s.route("GET /v1/openapi.json", false, s.openAPISpec) // api/openapi.json: describe every route there

	if s.cfg.UI != nil {
		ui := http.StripPrefix("/ui", s.cfg.UI)
		s.route("GET /ui/", true, func(*http.Request, *reqCtx) (int, any, error) {
			return 0, passthrough{h: ui}, nil
		})
		home := http.RedirectHandler("/ui/", http.StatusFound)
		s.route("GET /{$}", true, func(*http.Request, *reqCtx) (int, any, error) {
			return 0, passthrough{h: home}, nil
		})
	}
	s.route("POST /v1/workers/{id}/drain", false, s.drain)

	s.runRoutes()      // workflow runs and stream audit: api/runs.go
	s.scheduleRoutes() // api/schedules.go
}

// ServeHTTP routes r. What the mux would answer by itself (an unknown
// path, a wrong method, a redirect to a cleaned path) is answered as a
// typed error instead, after authentication, so an unauthenticated
// caller learns nothing of the routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	// The mux redirects an unclean path (and handles CONNECT apart): the
	// API answers such a request as unknown instead.
	canonical := r.Method != http.MethodConnect && cleanPath(r.URL.EscapedPath()) == r.URL.EscapedPath()
	if canonical && s.patterns[pattern] {
		s.mux.ServeHTTP(w, r) // sets the path's values, which Handler does not
		return
	}
	s.wrap("unmatched", false, func(r *http.Request, _ *reqCtx) (int, any, error) {
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			if allow := rec.header.Get("Allow"); allow != "" {
				w.Header().Set("Allow", allow)
			}
			return 0, nil, apiErr(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "the method is not allowed on this path")
		}
		return 0, nil, apiErr(http.StatusNotFound, CodeNotFound, "no such route")
	}).ServeHTTP(w, r)
}

// cleanPath is the mux's canonical form of a path.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// statusRecorder catches what the mux answers by itself.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return len(b), nil
}
func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

// wrap is the middleware of every route: a server span, authentication,
// the handler, the answer, and the log line.
func (s *Server) wrap(pattern string, open bool, h handlerFunc) http.Handler {
	name := "orrery.api " + pattern
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx := s.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", pattern)))
		defer span.End()
		r = r.WithContext(ctx)
		rid := requestID(r.Header.Get(RequestIDHeader))
		w.Header().Set(RequestIDHeader, rid)
		span.SetAttributes(attribute.String("orrery.request_id", rid))
		rc := &reqCtx{w: w, log: s.log.With("request_id", rid)}
		if strings.HasPrefix(pattern, "GET /v1/worlds/") || strings.HasPrefix(pattern, "POST /v1/worlds/") {
			rc.world = r.PathValue("id")
		}

		var status int
		var body any
		var err error
		if !open && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orrery"`)
			err = apiErr(http.StatusUnauthorized, CodeUnauthenticated, "a valid bearer token is required")
		} else {
			status, body, err = s.run(r, rc, h)
		}
		// A JSON answer is counted before it is written, so that a client
		// that has it and then scrapes /metrics finds it there.
		observe := func() {
			if s.cfg.Metrics != nil {
				s.cfg.Metrics.observeRequest(pattern, status, time.Since(start))
			}
		}
		var e *Error
		if err != nil {
			e = toError(err)
			status = e.Status
			e.RequestID = rid
			observe()
			writeError(w, e)
		} else if p, ok := body.(passthrough); ok {
			sw := &statusWriter{ResponseWriter: w}
			p.h.ServeHTTP(sw, r)
			status = sw.status
			observe()
		} else {
			observe()
			writeJSON(w, status, body)
		}

		attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", status)}
		if rc.world != "" {
			attrs = append(attrs, attribute.String("orrery.world", rc.world))
		}
		span.SetAttributes(attrs...)
		logAttrs := []any{"method", r.Method, "route", pattern, "status", status, "duration", time.Since(start)}
		if rc.world != "" {
			logAttrs = append(logAttrs, "world", rc.world)
		}
		log := rc.log
		switch {
		case e == nil:
			log.Debug("api: request", logAttrs...)
		case r.Context().Err() != nil:
			log.Debug("api: request abandoned by its client", append(logAttrs, "code", e.Code)...)
		case status < 500:
			// The client's mistake (bad input, an unknown id, a conflict, a
			// wrong token): the answer tells the client; the server's log
			// keeps it at INFO, so that a typo never reads as trouble.
			log.Info("api: request refused", append(logAttrs, "code", e.Code, "message", e.Message)...)
		case status >= 500 && status != http.StatusGatewayTimeout && status != http.StatusNotImplemented &&
			status != http.StatusServiceUnavailable:
			// A 503 is the database or the node being unavailable for a
			// moment, answered with Retry-After: a WARN (default), not an
			// ERROR for every request that meets it.
			span.SetStatus(codes.Error, e.Code)
			logAttrs = append(logAttrs, "code", e.Code, "err", err)
			var p *internalPanic
			if errors.As(err, &p) {
				logAttrs = append(logAttrs, "stack", string(p.stack))
			}
			log.Error("api: request failed", logAttrs...)
		default:
			log.Warn("api: request refused", append(logAttrs, "code", e.Code, "message", e.Message)...)
		}
	})
}

// run runs a handler; a panic becomes a 500 instead of crossing the
// API's boundary (net/http would drop the connection).
func (s *Server) run(r *http.Request, rc *reqCtx, h handlerFunc) (status int, body any, err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			status, body, err = 0, nil, &internalPanic{value: p, stack: debug.Stack()}
		}
	}()
	return h(r, rc)
}

// passthrough is a body a handler of its own writes (the Prometheus
// exposition), still under the middleware's span, auth and log line.
type passthrough struct{ h http.Handler }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (a stream
// flushes and sets its own deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// internalPanic is a handler's panic, for the log; the client is told
// only that the failure was internal.
type internalPanic struct {
	value any
	stack []byte
}

func (p *internalPanic) Error() string { return fmt.Sprintf("api: handler panicked: %v", p.value) }

// authorized compares the presented token with the configured one in
// constant time, over SHA-256 digests so that not even the length leaks.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		tok = ""
	}
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1
}

func (s *Server) healthz(*http.Request, *reqCtx) (int, any, error) {
	return http.StatusOK, statusResp{Status: "ok"}, nil
}

// readyTimeout bounds a readiness check: a store that does not answer
// within it is not ready.
const readyTimeout = 5 * time.Second

func (s *Server) readyz(r *http.Request, rc *reqCtx) (int, any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if _, err := s.cfg.Store.Now(ctx); err != nil {
		rc.log.Warn("api: store not ready", "err", err)
		return 0, nil, apiErr(http.StatusServiceUnavailable, CodeNotReady, "the store does not answer")
	}
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(ctx); err != nil {
			rc.log.Warn("api: not ready", "err", err)
			return 0, nil, apiErr(http.StatusServiceUnavailable, CodeNotReady, "not ready: "+cleanMessage(err.Error()))
		}
	}
	return http.StatusOK, statusResp{Status: "ready"}, nil
}
