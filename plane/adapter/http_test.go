package adapter_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// These tests do real loopback I/O against httptest servers, on the real
// clock (synctest's fake clock freezes on network I/O). They wait for
// receipts by parking on the world's inbox topic, never by sleeping.

// awaitReceipt blocks until hash's receipt is in the world's inbox.
func awaitReceipt(t *testing.T, e *env, hash string) world.Receipt {
	t.Helper()
	sig := store.NewSignal()
	stop, err := e.st.Watch(e.ctx, sig, store.TopicInbox(e.world))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for {
		for _, r := range receipts(t, e.st, e.world) {
			if r.IntentHash == hash {
				return r
			}
		}
		<-sig.C // a missing receipt hangs until go test's -timeout, which names this test
	}
}

func httpEnv(t *testing.T, pol adapter.RetryPolicy, cfg adapter.HTTPConfig) (*env, func()) {
	e, _, stop := httpPoolEnv(t, pol, cfg)
	return e, stop
}

// httpPoolEnv is httpEnv with its running pool, for its stats.
func httpPoolEnv(t *testing.T, pol adapter.RetryPolicy, cfg adapter.HTTPConfig) (*env, *adapter.Pool, func()) {
	e := newEnv(t)
	e.ex = actor.NewExecutor(11)
	p := newPool(t, e.st, adapter.Config{Worker: "http-pool", Executor: e.ex}, adapter.Register(adapter.NewHTTP(e.ex, cfg), pol))
	r := run(p)
	return e, p, func() { r.stop() }
}

func TestHTTPRequestOkReceiptCarriesStatusHeadersBody(t *testing.T) {
	var got struct {
		method, body, header string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.method, got.body, got.header = r.Method, string(b), r.Header.Get("X-Idem")
		w.Header().Set("X-Answer", "42")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("created"))
	}))
	defer srv.Close()
	e, stop := httpEnv(t, adapter.RetryPolicy{}, adapter.HTTPConfig{})
	defer stop()
	h := e.publish(adapter.KindHTTP, world.HTTPRequest{
		Method: "POST", URL: srv.URL + "/pay", Headers: map[string][]string{"X-Idem": {"k1"}}, Body: []byte("amount=5"),
	})
	r := awaitReceipt(t, e, h)
	var resp world.HTTPResponse
	if err := r.Decode(&resp); err != nil || r.Status != vocab.ReceiptOK {
		t.Fatalf("receipt %s (%v)", r.Status, err)
	}
	if resp.Status != 201 || string(resp.Body) != "created" || resp.Headers["X-Answer"][0] != "42" {
		t.Fatalf("response %+v", resp)
	}
	if got.method != "POST" || got.body != "amount=5" || got.header != "k1" {
		t.Fatalf("server saw %+v", got)
	}
}

// TestHTTPServerErrorsAreRetriedAndClientErrorsAreNot: a 5xx, and a 429
// that says when to come back, are retried by the policy, and once it
// gives up the receipt is the last answer, an ok receipt carrying its
// status; a 4xx (a 429 without Retry-After included) is the receipt at
// once. (Before, a 503 was an ok receipt at once, never retried.)
func TestHTTPServerErrorsAreRetriedAndClientErrorsAreNot(t *testing.T) {
	for _, c := range []struct {
		name       string
		status     int
		retryAfter string
		hits       int64
	}{
		{"503", http.StatusServiceUnavailable, "", 3},
		{"500 with Retry-After", http.StatusInternalServerError, "0", 3},
		{"429 with Retry-After", http.StatusTooManyRequests, "0", 3},
		{"429 without Retry-After", http.StatusTooManyRequests, "", 1},
		{"404", http.StatusNotFound, "", 1},
		{"409", http.StatusConflict, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hits atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				http.Error(w, "no", c.status)
			}))
			defer srv.Close()
			e, stop := httpEnv(t, adapter.RetryPolicy{Attempts: 3, Base: time.Millisecond}, adapter.HTTPConfig{})
			defer stop()
			h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: srv.URL})
			r := awaitReceipt(t, e, h)
			var resp world.HTTPResponse
			if err := r.Decode(&resp); err != nil || r.Status != vocab.ReceiptOK || resp.Status != c.status {
				t.Fatalf("receipt %s %+v (%v), want ok carrying %d", r.Status, resp, err, c.status)
			}
			if n := hits.Load(); n != c.hits {
				t.Fatalf("%d requests, want %d", n, c.hits)
			}
		})
	}
}

// TestHTTPTransportFailureIsErrorAfterRetries: a refused connection is
// retried by the policy, then an error receipt counting the attempts.
func TestHTTPTransportFailureIsErrorAfterRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connections are refused
	e, stop := httpEnv(t, adapter.RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond}, adapter.HTTPConfig{})
	defer stop()
	h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: "http://" + addr + "/"})
	r := awaitReceipt(t, e, h)
	f := decodeFailure(t, r)
	if r.Status != vocab.ReceiptError || f.Attempts != 3 || !strings.Contains(f.Error, "transport") {
		t.Fatalf("receipt %s %+v", r.Status, f)
	}
}

func TestHTTPTimeoutIsTimeoutReceiptNotRetried(t *testing.T) {
	var hits atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	e, p, stop := httpPoolEnv(t, adapter.RetryPolicy{Attempts: 3, Base: time.Millisecond}, adapter.HTTPConfig{})
	defer stop()
	h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: srv.URL, TimeoutMs: 50})
	r := awaitReceipt(t, e, h)
	if f := decodeFailure(t, r); r.Status != vocab.ReceiptTimeout || !strings.Contains(f.Error, "timed out") {
		t.Fatalf("receipt %s %+v", r.Status, f)
	}
	// Not retried: the pool executed the request once. The server's count
	// is only an upper bound: on a busy machine the 50ms can run out
	// before the request reaches the handler, or even leaves the client.
	if n := p.Stats().Attempts; n != 1 {
		t.Fatalf("%d executions, want 1 (a timeout is not retried)", n)
	}
	if n := hits.Load(); n > 1 {
		t.Fatalf("%d requests, want at most 1 (a timeout is not retried)", n)
	}
}

// TestHTTPResponseOverLimitIsTruncatedOkReceipt: the server acted and
// answered, so a body over max_response_bytes is no failure: the receipt
// is ok, with the status and the first max_response_bytes, Truncated set.
func TestHTTPResponseOverLimitIsTruncatedOkReceipt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(strings.Repeat("x", 101)))
	}))
	defer srv.Close()
	e, stop := httpEnv(t, adapter.RetryPolicy{}, adapter.HTTPConfig{})
	defer stop()
	over := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: srv.URL, MaxResponseBytes: 100})
	at := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: srv.URL, MaxResponseBytes: 101})
	r := awaitReceipt(t, e, over)
	var resp world.HTTPResponse
	if err := r.Decode(&resp); err != nil || r.Status != vocab.ReceiptOK || resp.Status != http.StatusAccepted || len(resp.Body) != 100 || !resp.Truncated {
		t.Fatalf("over the limit: receipt %s, %d %d bytes truncated=%v (%v)", r.Status, resp.Status, len(resp.Body), resp.Truncated, err)
	}
	r = awaitReceipt(t, e, at)
	resp = world.HTTPResponse{}
	if err := r.Decode(&resp); err != nil || r.Status != vocab.ReceiptOK || len(resp.Body) != 101 || resp.Truncated {
		t.Fatalf("at the limit: receipt %s, %d bytes truncated=%v (%v)", r.Status, len(resp.Body), resp.Truncated, err)
	}
}

// TestHTTPConnectionLostAfterSendingIsNeverAnErrorReceipt: the server reads
// the whole request, then the connection dies without an answer. The
// request may have been acted on, so once its retries are spent the
// receipt is a timeout (unknown), never an error. A connection refused
// before anything was sent is still an error receipt.
func TestHTTPConnectionLostAfterSendingIsNeverAnErrorReceipt(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		hits.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/"
	_ = ln.Close()
	e, stop := httpEnv(t, adapter.RetryPolicy{Attempts: 2, Base: time.Millisecond}, adapter.HTTPConfig{})
	defer stop()
	lost := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "POST", URL: srv.URL, Body: []byte("pay 10")})
	r := awaitReceipt(t, e, lost)
	if f := decodeFailure(t, r); r.Status != vocab.ReceiptTimeout || f.Attempts != 2 || !strings.Contains(f.Error, "after the request was sent") {
		t.Fatalf("lost after sending: receipt %s %+v, want timeout after 2 attempts", r.Status, f)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("the server saw %d requests, want 2", n)
	}
	never := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "POST", URL: refused})
	r = awaitReceipt(t, e, never)
	if f := decodeFailure(t, r); r.Status != vocab.ReceiptError || !strings.Contains(f.Error, "nothing sent") {
		t.Fatalf("refused: receipt %s %+v, want error", r.Status, f)
	}
}

// TestHTTPBadParamsAreErrorReceipts: params a world should never have
// written, and a scheme the adapter does not speak, end in an error
// receipt at once, with no request made.
func TestHTTPBadParamsAreErrorReceipts(t *testing.T) {
	e, stop := httpEnv(t, adapter.RetryPolicy{Attempts: 3, Base: time.Millisecond}, adapter.HTTPConfig{})
	defer stop()
	for _, p := range []any{
		world.HTTPRequest{Method: "GET", URL: "file:///etc/passwd"},
		world.HTTPRequest{Method: "G ET", URL: "http://example.invalid/"},
		world.HTTPRequest{Method: "GET", URL: "http://example.invalid/", Headers: map[string][]string{"X": {"a\nb"}}},
		"not a request",
	} {
		h := e.publish(adapter.KindHTTP, p)
		r := awaitReceipt(t, e, h)
		if f := decodeFailure(t, r); r.Status != vocab.ReceiptError || f.Attempts != 1 {
			t.Fatalf("%v: receipt %s %+v", p, r.Status, f)
		}
	}
}

func TestDecodeHTTPRequest(t *testing.T) {
	good, _ := eventMarshal(world.HTTPRequest{Method: "PUT", URL: "https://x.example/a?b=c", TimeoutMs: 5})
	if p, err := adapter.DecodeHTTPRequest(good); err != nil || p.Method != "PUT" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, b := range [][]byte{nil, {0xff}, {0xa0}} {
		if _, err := adapter.DecodeHTTPRequest(b); err == nil {
			t.Fatalf("%x decoded", b)
		}
	}
}
