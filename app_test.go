package orrery

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// A shop world asks for a charge (the binary's own effect kind) and an
// http.request, and keeps the status of each receipt.
type (
	shopState struct {
		Charge, HTTP string
	}
	Order       struct{ URL string }
	ShopStatus  struct{}
	ChargeOrder struct{ Amount int }
)

func shopDef() *world.Def[shopState] {
	d := world.New[shopState]("shop", 1)
	world.EffectKind[ChargeOrder](d, "shop.charge")
	world.On(d, func(c *world.Ctx, s *shopState, o Order) error {
		c.Effect("shop.charge", ChargeOrder{Amount: 5})
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: o.URL})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *shopState, r world.Receipt) error {
		if r.Kind == world.KindHTTPRequest {
			s.HTTP = string(r.Status)
		} else {
			s.Charge = string(r.Status)
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *shopState, _ ShopStatus) error {
		c.Reply(*s)
		return nil
	})
	return d
}

// charger declines every charge, counting its calls.
type charger struct{ calls atomic.Int64 }

func (*charger) Kinds() []string { return []string{"shop.charge"} }
func (c *charger) Execute(context.Context, vocab.EffectItem) (effect.Result, error) {
	c.calls.Add(1)
	return effect.Result{}, errors.New("the card network is down")
}

// via marks every request its client sends, so the server can tell the
// App's client from any other.
type via struct{ base http.RoundTripper }

func (v via) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Via", "app-client")
	return v.base.RoundTrip(r)
}

// TestAppServesItsAdaptersRetryPoliciesAndHTTPClient: `serve` of a binary
// built on App runs the App's own adapter under its registration's retry
// policy (two attempts, then an error receipt: the default would retry
// without end), sends http.request through the App's *http.Client with
// the Idempotency-Key, and follows the App's policy for the built-in kind
// (one attempt: a connection dropped after the request was sent is a
// timeout receipt at once).
func TestAppServesItsAdaptersRetryPoliciesAndHTTPClient(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	ch := &charger{}
	app := App{
		Worlds:   []world.Kernel{shopDef().Kernel()},
		Adapters: []adapter.Registration{adapter.Register(ch, adapter.RetryPolicy{Attempts: 2, Base: time.Millisecond})},
		HTTP:     adapter.HTTPConfig{Client: &http.Client{Transport: via{tr}}},
		Retry:    map[string]adapter.RetryPolicy{adapter.KindHTTP: {Attempts: 1}},
	}
	ca, err := app.cli()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srvd := serveApp(t, ctx, ca, "app-1", "--store", "memory")
	defer srvd.stop()
	run := srvd.run
	orderType, _ := world.TypeName(Order{})
	statusType, _ := world.TypeName(ShopStatus{})
	run("world", "create", "order-1", "--universe", "shop")
	body, _ := json.Marshal(Order{URL: srv.URL + "/pay"})
	run("world", "send", "order-1", orderType, string(body))
	var st shopState
	testrig.WaitFor(t, "both receipts", time.Minute, 10*time.Millisecond, func() (bool, error) {
		err := json.Unmarshal([]byte(run("world", "call", "order-1", statusType)), &st)
		return st.Charge != "" && st.HTTP != "", err
	})
	if st.Charge != string(vocab.ReceiptError) || ch.calls.Load() != 2 {
		t.Fatalf("charge receipt %q after %d calls, want error after the registration's 2 attempts", st.Charge, ch.calls.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if st.HTTP != string(vocab.ReceiptTimeout) || len(seen) != 1 {
		t.Fatalf("http.request receipt %q after %d requests, want timeout after the App's 1 attempt", st.HTTP, len(seen))
	}
	if seen[0].Get("X-Via") != "app-client" || len(seen[0].Get(adapter.IdempotencyKeyHeader)) != 64 {
		t.Fatalf("the request's headers %v: want the App's client's mark and an Idempotency-Key", seen[0])
	}
}

// TestAppRefusesAnUnusableRetryPolicy: a policy NewPool would refuse stops
// the binary at start, naming the policy, before serve opens anything.
func TestAppRefusesAnUnusableRetryPolicy(t *testing.T) {
	var ce *adapter.ConfigError
	_, err := App{Adapters: []adapter.Registration{adapter.Register(&charger{}, adapter.RetryPolicy{Attempts: -2})}}.cli() // -1 is AttemptsUnlimited
	if !errors.As(err, &ce) {
		t.Fatalf("a registration's negative Attempts: %v, want a *adapter.ConfigError", err)
	}
	_, err = App{Retry: map[string]adapter.RetryPolicy{adapter.KindHTTP: {Coefficient: 0.5}}}.cli()
	if !errors.As(err, &ce) {
		t.Fatalf("a kind's coefficient below 1: %v, want a *adapter.ConfigError", err)
	}
}

// servedApp is one `orrery serve` of an App, in this process.
type servedApp struct {
	t    *testing.T
	ctx  context.Context
	ca   cli.App
	url  string
	stop func()
	// want is the exit code stop expects: ExitOK, or ExitUnavailable for a
	// stop whose timeout cut an execution short.
	want int
}

// serveApp runs `orrery serve` of ca as worker until stop, which ends it
// as SIGTERM would and checks that it exited 0.
func serveApp(t *testing.T, ctx context.Context, ca cli.App, worker string, args ...string) *servedApp {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- cli.RunApp(sctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--worker-id", worker, "--lease-ttl", "2s"}, args...),
			cli.IO{Out: pw, Err: io.Discard}, ca)
		pw.Close()
	}()
	var once sync.Once
	s := &servedApp{t: t, ctx: ctx, ca: ca, want: cli.ExitOK}
	s.stop = func() {
		once.Do(func() {
			cancel()
			if code := <-done; code != s.want {
				t.Errorf("serve %s exited %d, want %d", worker, code, s.want)
			}
		})
	}
	line, err := bufio.NewReader(pr).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	m := regexp.MustCompile(`API (http://\S+)`).FindStringSubmatch(line)
	if err != nil || m == nil {
		s.stop()
		t.Fatalf("serve's first line %q (%v)", line, err)
	}
	s.url = m[1]
	return s
}

// run runs an API command of the command line against s.
func (s *servedApp) run(args ...string) string {
	s.t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.RunApp(s.ctx, append([]string{"--addr", s.url}, args...), cli.IO{Out: &out, Err: &errOut}, s.ca); code != cli.ExitOK {
		s.t.Fatalf("orrery %v: exit %d: %s", args, code, errOut.String())
	}
	return out.String()
}

// TestAppHTTPIdempotencyKeyOutlivesANodeRestart: a node's http.request
// reaches the server, which holds it; the node stops (its stop timeout
// runs out, so the request is cut and its claim handed back). A node
// started anew on the same store sends the request again, with the same
// Idempotency-Key, and the world gets the answer.
func TestAppHTTPIdempotencyKeyOutlivesANodeRestart(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(adapter.IdempotencyKeyHeader))
		first := len(keys) == 1
		mu.Unlock()
		if first {
			arrived <- struct{}{}
			<-r.Context().Done() // held until the node cuts it short
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ch := &charger{}
	ca, err := App{
		Worlds:   []world.Kernel{shopDef().Kernel()},
		Adapters: []adapter.Registration{adapter.Register(ch, adapter.NoRetry())},
	}.cli()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "o.db")
	first := serveApp(t, ctx, ca, "node-1", "--store", db, "--stop-timeout", "50ms")
	first.run("world", "create", "order-1", "--universe", "shop")
	orderType, _ := world.TypeName(Order{})
	statusType, _ := world.TypeName(ShopStatus{})
	body, _ := json.Marshal(Order{URL: srv.URL + "/pay"})
	first.run("world", "send", "order-1", orderType, string(body))
	<-arrived
	first.want = cli.ExitUnavailable // its stop timed out on the held request
	first.stop()
	second := serveApp(t, ctx, ca, "node-2", "--store", db)
	defer second.stop()
	var st shopState
	testrig.WaitFor(t, "the http.request's receipt", time.Minute, 10*time.Millisecond, func() (bool, error) {
		err := json.Unmarshal([]byte(second.run("world", "call", "order-1", statusType)), &st)
		return st.HTTP != "", err
	})
	mu.Lock()
	defer mu.Unlock()
	if st.HTTP != string(vocab.ReceiptOK) || len(keys) != 2 || keys[0] != keys[1] || len(keys[0]) != 64 {
		t.Fatalf("receipt %q, keys %q: want ok after two requests with one Idempotency-Key", st.HTTP, keys)
	}
}
