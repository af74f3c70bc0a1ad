package adapter_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// keys records the Idempotency-Key of every request a server saw.
type keys struct {
	mu  sync.Mutex
	got []string
}

func (k *keys) add(r *http.Request) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.got = append(k.got, r.Header.Get(adapter.IdempotencyKeyHeader))
	return len(k.got)
}

func (k *keys) all() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.got...)
}

// TestHTTPIdempotencyKeyIsTheSameOnEveryAttempt: the server drops the
// connection after reading the first two requests (the outcome unknown to
// the pool, which retries) and answers the third. All three carry the
// same Idempotency-Key, the intent's hash, so the server can tell them one
// request.
func TestHTTPIdempotencyKeyIsTheSameOnEveryAttempt(t *testing.T) {
	var k keys
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.add(r) <= 2 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	e, stop := httpEnv(t, adapter.RetryPolicy{Base: time.Millisecond}, adapter.HTTPConfig{})
	defer stop()
	h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "POST", URL: srv.URL + "/charge", Body: []byte("amount=5")})
	r := awaitReceipt(t, e, h)
	var resp world.HTTPResponse
	if err := r.Decode(&resp); err != nil || r.Status != vocab.ReceiptOK || resp.Status != http.StatusCreated {
		t.Fatalf("receipt %s %+v (%v)", r.Status, resp, err)
	}
	got := k.all()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	for i, key := range got {
		if key != h {
			t.Fatalf("request %d: Idempotency-Key %q, want the intent hash %s", i+1, key, h)
		}
	}
}

// TestHTTPIdempotencyKeyOutlivesAPoolRestart: the first request reaches
// the server and its node dies before the answer (the pool's Run
// cancelled mid-request: a crash). Once the claim expires and is reaped, a
// new pool on another executor sends the request again with the same key.
func TestHTTPIdempotencyKeyOutlivesAPoolRestart(t *testing.T) {
	var k keys
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.add(r) == 1 {
			arrived <- struct{}{}
			<-r.Context().Done() // the crash cuts it short
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	clock := memstore.NewManualClock(time.Now())
	e := newEnv(t, memstore.WithClock(clock.Now))
	reg := func(ex actor.Executor) adapter.Registration {
		return adapter.Register(adapter.NewHTTP(ex, adapter.HTTPConfig{}), adapter.RetryPolicy{})
	}
	ex1 := actor.NewExecutor(3)
	r1 := run(newPool(t, e.st, adapter.Config{Worker: "node-1", Executor: ex1}, reg(ex1)))
	h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "POST", URL: srv.URL + "/charge"})
	<-arrived
	_ = r1.stop()
	clock.Advance(time.Hour)
	if n, err := e.st.ReapEffects(e.ctx); err != nil || n != 1 {
		t.Fatalf("ReapEffects = %d, %v; want the crashed claim requeued", n, err)
	}
	ex2 := actor.NewExecutor(4)
	r2 := run(newPool(t, e.st, adapter.Config{Worker: "node-2", Executor: ex2}, reg(ex2)))
	defer r2.stop()
	if r := awaitReceipt(t, e, h); r.Status != vocab.ReceiptOK {
		t.Fatalf("receipt %s", r.Status)
	}
	got := k.all()
	if len(got) != 2 || got[0] != h || got[1] != h {
		t.Fatalf("keys %q, want the intent hash %s on both requests", got, h)
	}
}

// TestHTTPIdempotencyKeyOfTheParamsIsKept: a request whose params set the
// header sends the world's own key.
func TestHTTPIdempotencyKeyOfTheParamsIsKept(t *testing.T) {
	var k keys
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { k.add(r) }))
	defer srv.Close()
	e, stop := httpEnv(t, adapter.RetryPolicy{}, adapter.HTTPConfig{})
	defer stop()
	h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "POST", URL: srv.URL,
		Headers: map[string][]string{"Idempotency-Key": {"order-17"}}})
	awaitReceipt(t, e, h)
	if got := k.all(); len(got) != 1 || got[0] != "order-17" {
		t.Fatalf("keys %q, want the params' order-17", got)
	}
}
