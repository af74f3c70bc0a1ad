package adapter

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// KindHTTP is the effect kind of HTTP, the built-in http.request adapter.
const KindHTTP = world.KindHTTPRequest

// HTTPConfig configures the http.request adapter.
type HTTPConfig struct {
	// Client sends the requests (nil: a client of its own with no
	// timeout, which the per-request timeout bounds instead, that follows
	// up to 10 redirects as net/http does).
	Client *http.Client
	// Timeout bounds a request whose params set no timeout_ms (default 30s).
	Timeout time.Duration
	// MaxResponseBytes bounds a response body whose params set no
	// max_response_bytes (default and most: MaxBodyBytes); a longer body
	// is truncated to it.
	MaxResponseBytes uint64
}

// IdempotencyKeyHeader is the header in which http.request sends the
// intent's hash, the same on every attempt, after a crash and after an
// operator's retry, so that the receiving service can recognise a request
// it has already acted on (as Stripe's and the IETF draft's
// Idempotency-Key). A request whose params set the header keeps its own.
const IdempotencyKeyHeader = "Idempotency-Key"

// The error classes of http.request's failed attempts (effect.ClassOf), for
// a retry policy's NonRetryable.
const (
	// ClassHTTPTransport: nothing was sent (a refused connection, DNS, a
	// TLS certificate refused).
	ClassHTTPTransport = "http.transport"
	// ClassHTTPUnknown: the exchange failed once the request may have
	// reached the server.
	ClassHTTPUnknown = "http.unknown"
)

// MaxBodyBytes is the largest response body an http.request receipt can
// carry: the receipt limit (MaxReceiptBytes, what a world's kernel reads)
// less room for the receipt and the response's headers around it.
const MaxBodyBytes = MaxReceiptBytes - 64<<10

// HTTP is the http.request adapter. Its receipts follow what a user of
// Restate or Temporal expects of an HTTP call made durable:
//
//   - an HTTP response is an ok receipt whose body (world.HTTPResponse)
//     carries the status, headers and body: the request was delivered and
//     answered, and what a status means is the world's decision (it may
//     send the request again as a new intent). A 4xx is that receipt at
//     once; a 5xx, and a 429 with Retry-After, are first retried by the
//     pool's policy (class ClassHTTPStatus), no sooner than the server's
//     Retry-After, and the last answer is the receipt once it gives up:
//     after DefaultHTTPAttempts executions when the policy sets no
//     attempt limit (AttemptsUnlimited retries without end);
//   - a response body over the limit (max_response_bytes, else
//     HTTPConfig.MaxResponseBytes, never over MaxBodyBytes) is cut to it,
//     with Truncated set, in an ok receipt all the same: the server acted
//     and answered;
//   - every request carries the Idempotency-Key header (unless the params
//     set one): the intent hash, the same on every attempt, so the server
//     can deduplicate the executions that at-least-once delivery makes;
//   - a failure before any of the request was written (a refused
//     connection, DNS, a TLS certificate the client refused) is an attempt
//     error, retried by the pool's policy, and an error receipt (body
//     Failure) once retries are exhausted: the server never saw it;
//   - any other failure (once the request was written, while its response
//     was read, or one a custom transport does not place) is an Unknown
//     attempt error, retried by the policy too, and a timeout receipt once
//     retries are exhausted, never an error one: the server may have acted
//     on it;
//   - the request's timeout (timeout_ms, else HTTPConfig.Timeout) is a
//     timeout receipt, never retried: the server may have acted on it;
//   - params that do not decode, an unusable method or URL, or a scheme
//     other than http and https are error receipts: nothing was sent, and
//     retrying cannot fix them.
type HTTP struct {
	ex  actor.Executor
	cfg HTTPConfig
}

// NewHTTP returns the http.request adapter, timing requests on ex.
func NewHTTP(ex actor.Executor, cfg HTTPConfig) *HTTP {
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = MaxBodyBytes
	}
	cfg.MaxResponseBytes = min(cfg.MaxResponseBytes, MaxBodyBytes)
	return &HTTP{ex: ex, cfg: cfg}
}

// Kinds implements Adapter.
func (*HTTP) Kinds() []string { return []string{KindHTTP} }

// httpRequest is a decoded, checked http.request.
type httpRequest struct {
	method  string
	url     *url.URL
	headers http.Header
	body    []byte
	timeout time.Duration
	limit   uint64
}

// DecodeHTTPRequest decodes and checks the params of an http.request: the
// bytes a world wrote, which the adapter trusts no more than any input.
func DecodeHTTPRequest(params []byte) (world.HTTPRequest, error) {
	var p world.HTTPRequest
	if err := world.Decode(params, &p); err != nil {
		return world.HTTPRequest{}, fmt.Errorf("http.request params do not decode: %w", err)
	}
	if _, err := parseHTTPRequest(p, time.Second, 1); err != nil {
		return world.HTTPRequest{}, err
	}
	return p, nil
}

func parseHTTPRequest(p world.HTTPRequest, defTimeout time.Duration, defLimit uint64) (httpRequest, error) {
	if p.Method == "" || !validToken(p.Method) {
		return httpRequest{}, fmt.Errorf("http.request method %q is not an HTTP method", p.Method)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		return httpRequest{}, fmt.Errorf("http.request url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return httpRequest{}, fmt.Errorf("http.request url %q is not an absolute http or https URL", p.URL)
	}
	h := make(http.Header, len(p.Headers))
	for k, vs := range p.Headers {
		if !validToken(k) {
			return httpRequest{}, fmt.Errorf("http.request header name %q is invalid", k)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return httpRequest{}, fmt.Errorf("http.request header %s has an invalid value", k)
			}
			h.Add(k, v)
		}
	}
	r := httpRequest{method: p.Method, url: u, headers: h, body: p.Body, timeout: defTimeout, limit: defLimit}
	if p.TimeoutMs > 0 {
		if p.TimeoutMs > uint64(store.MaxTTL/time.Millisecond) {
			return httpRequest{}, fmt.Errorf("http.request timeout_ms %d is too large", p.TimeoutMs)
		}
		r.timeout = time.Duration(p.TimeoutMs) * time.Millisecond
	}
	if p.MaxResponseBytes > 0 {
		r.limit = min(p.MaxResponseBytes, MaxBodyBytes)
	}
	return r, nil
}

// validToken reports whether s is an RFC 9110 token (a method or a header
// name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Execute implements Adapter.
func (a *HTTP) Execute(ctx context.Context, item vocab.EffectItem) (effect.Result, error) {
	var p world.HTTPRequest
	if err := world.Decode(item.Params, &p); err != nil {
		return effect.Result{}, effect.Permanent(fmt.Errorf("http.request params do not decode: %w", err))
	}
	req, err := parseHTTPRequest(p, a.cfg.Timeout, a.cfg.MaxResponseBytes)
	if err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	rctx, cancel := actor.WithTimeout(ctx, a.ex, req.timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(rctx, req.method, req.url.String(), bytes.NewReader(req.body))
	if err != nil {
		return effect.Result{}, effect.Permanent(fmt.Errorf("http.request: %w", err))
	}
	hr.Header = req.headers
	if hr.Header.Get(IdempotencyKeyHeader) == "" {
		hr.Header.Set(IdempotencyKeyHeader, item.IntentHash)
	}
	// Whether any of the request may have reached the server: from the
	// first header written on, its failure leaves the outcome unknown.
	var wrote atomic.Bool
	hr = hr.WithContext(httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		WroteHeaderField: func(string, []string) { wrote.Store(true) },
		WroteHeaders:     func() { wrote.Store(true) },
		WroteRequest:     func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}))
	resp, err := a.cfg.Client.Do(hr)
	if err != nil {
		// Sent unless it certainly was not: a transport that reports no
		// writes (a custom RoundTripper) and fails otherwise than before
		// connecting leaves the outcome unknown.
		return a.failed(ctx, rctx, req, err, wrote.Load() || !beforeSending(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(req.limit)+1))
	if err != nil {
		return a.failed(ctx, rctx, req, fmt.Errorf("reading the %d response: %w", resp.StatusCode, err), true)
	}
	out := world.HTTPResponse{Status: resp.StatusCode, Headers: resp.Header, Body: body}
	if uint64(len(body)) > req.limit {
		out.Body, out.Truncated = body[:req.limit], true
	}
	return answered(out, a.ex.Now())
}

// ClassHTTPStatus is the error class of an answer http.request retries (a
// 5xx, or a 429 with Retry-After): listed in a policy's NonRetryable, the
// first such answer is the receipt.
const ClassHTTPStatus = "http.status"

// answered is the outcome of an exchange that got a response: a 5xx, and
// a 429 that says when to come back (Retry-After), are attempt errors the
// policy retries, no sooner than the server asked, and whose receipt, once
// the policy gives up, is the last response, its status kept; any other
// response, 4xx included, is an ok receipt at once.
func answered(out world.HTTPResponse, now time.Time) (effect.Result, error) {
	var after time.Duration
	switch {
	case out.Status >= 500:
		after, _ = parseRetryAfter(http.Header(out.Headers).Get("Retry-After"), now)
	case out.Status == http.StatusTooManyRequests:
		var ok bool
		if after, ok = parseRetryAfter(http.Header(out.Headers).Get("Retry-After"), now); !ok {
			return effect.OK(out), nil
		}
	default:
		return effect.OK(out), nil
	}
	return effect.Result{}, effect.Classified(ClassHTTPStatus, effect.RetryAnswer(effect.OK(out), after,
		effect.Unknown(fmt.Errorf("http.request: the server answered %d", out.Status))))
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date (judged
// on the local clock, the only one there is to judge a server's by).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// maxRetryAfter bounds the wait a server's Retry-After imposes.
const maxRetryAfter = time.Hour

// beforeSending reports whether err certainly came before any byte of the
// request left: no connection (dial, proxy connect, DNS) or a TLS
// handshake the client refused.
func beforeSending(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		return true
	}
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	return errors.As(err, &dns) || errors.As(err, &cert) || errors.As(err, &rec)
}

// failed classifies a failed exchange: the request's own timeout is a
// timeout receipt; the pool's context ending is returned as is (the pool
// knows why); a failure once the request may have reached the server
// (sent) is Unknown; anything else is a transport error before sending,
// retried.
func (a *HTTP) failed(ctx, rctx context.Context, req httpRequest, err error, sent bool) (effect.Result, error) {
	if ctx.Err() != nil {
		return effect.Result{}, ctx.Err()
	}
	if rctx.Err() != nil {
		return effect.Result{Status: vocab.ReceiptTimeout, Body: effect.Failure{Error: fmt.Sprintf("http.request timed out after %v", req.timeout)}}, nil
	}
	if sent {
		return effect.Result{}, effect.Classified(ClassHTTPUnknown,
			effect.Unknown(fmt.Errorf("http.request: the exchange failed after the request was sent: %w", err)))
	}
	return effect.Result{}, effect.Classified(ClassHTTPTransport, fmt.Errorf("http.request transport (nothing sent): %w", err))
}
