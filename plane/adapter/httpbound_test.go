package adapter_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// These tests run the real http.request adapter in virtual time
// (testing/synctest): its client's transport is a script in memory, so no
// socket freezes the bubble's clock and days of retries pass at once.

// target is an http.RoundTripper that never gets better: each request is
// answered by answer (given the request's 1-based number), and recorded.
type target struct {
	answer func(r *http.Request, n int) (*http.Response, error)

	mu   sync.Mutex
	hits []time.Time
}

func (t *target) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.hits = append(t.hits, time.Now())
	n := len(t.hits)
	t.mu.Unlock()
	return t.answer(r, n)
}

func (t *target) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.hits)
}

// statusForever answers every request with status (and Retry-After, when
// set), its body naming the request's number, so the receipt shows which
// answer it carries.
func statusForever(status int, retryAfter string) func(*http.Request, int) (*http.Response, error) {
	return func(r *http.Request, n int) (*http.Response, error) {
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		body := fmt.Sprintf("down #%d", n)
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: r}, nil
	}
}

// httpLab is an env in a synctest bubble whose pool serves http.request
// with the real adapter over t, registered with pol.
func httpLab(t *testing.T, tg *target, pol adapter.RetryPolicy) (*env, func()) {
	e := newEnv(t)
	a := adapter.NewHTTP(e.ex, adapter.HTTPConfig{Client: &http.Client{Transport: tg}})
	p := newPool(t, e.st, adapter.Config{Worker: "http-pool", Executor: e.ex}, adapter.Register(a, pol))
	r := run(p)
	return e, func() { _ = r.stop() }
}

// TestHTTPRequestGivesUpAfterItsDefaultAttempts: under a policy that sets
// no attempt limit (the zero policy, DefaultRetry as the node registers
// http.request with, a kind policy that sets only its intervals, an
// intent's own policy that sets none) a target that answers 503 for ever
// gets exactly DefaultHTTPAttempts requests, after which the world gets
// one receipt carrying the last 503, and no request follows it, however
// long the pool runs on. (Before, the effect was retried every ~100s for
// ever and the world never heard back.)
func TestHTTPRequestGivesUpAfterItsDefaultAttempts(t *testing.T) {
	intentOwn, err := world.EncodeRetryPolicy(world.RetryPolicy{InitialInterval: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		kind   adapter.RetryPolicy
		intent []byte
	}{
		{"zero policy", adapter.RetryPolicy{}, nil},
		{"DefaultRetry", adapter.DefaultRetry(), nil},
		{"a kind policy without Attempts", adapter.RetryPolicy{Base: 500 * time.Millisecond, Max: time.Minute}, nil},
		{"an intent policy without MaximumAttempts", adapter.RetryPolicy{Attempts: adapter.AttemptsUnlimited}, intentOwn},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tg := &target{answer: statusForever(http.StatusServiceUnavailable, "")}
				e, stop := httpLab(t, tg, c.kind)
				defer stop()
				h := e.publishWith(adapter.KindHTTP, world.HTTPRequest{Method: "POST", URL: "https://pay.example/charge"}, c.intent)
				time.Sleep(24 * time.Hour)
				synctest.Wait()
				if n := tg.count(); n != adapter.DefaultHTTPAttempts {
					t.Fatalf("%d requests in a day, want exactly %d", n, adapter.DefaultHTTPAttempts)
				}
				rc := oneReceiptEach(t, e.st, e.world, h)[h]
				var resp world.HTTPResponse
				if err := rc.Decode(&resp); err != nil || rc.Status != vocab.ReceiptOK || resp.Status != http.StatusServiceUnavailable ||
					string(resp.Body) != fmt.Sprintf("down #%d", adapter.DefaultHTTPAttempts) {
					t.Fatalf("receipt %s %+v (%v), want the last answer: ok carrying 503 \"down #%d\"", rc.Status, resp, err, adapter.DefaultHTTPAttempts)
				}
				st, err := e.st.EffectStatus(e.ctx, h)
				if err != nil || st.State != vocab.EffectDone {
					t.Fatalf("effect %+v (%v), want done", st, err)
				}
				time.Sleep(7 * 24 * time.Hour)
				synctest.Wait()
				if n := tg.count(); n != adapter.DefaultHTTPAttempts {
					t.Fatalf("%d requests a week after the receipt, want no more than the %d before it", n, adapter.DefaultHTTPAttempts)
				}
				oneReceiptEach(t, e.st, e.world, h)
			})
		})
	}
}

// TestHTTPRequestDefaultBoundEndsEveryRetriedFailure: what else
// http.request retries gives up at the same bound, with the receipt the
// adapter's promise gives the last failure: a 429 with Retry-After is the
// last answer, a connection refused before sending a timeout (unknown)
// receipt (an earlier attempt may have been sent), and
// an execution that overruns its claim's budget each time a timeout one.
func TestHTTPRequestDefaultBoundEndsEveryRetriedFailure(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer func(*http.Request, int) (*http.Response, error)
		check  func(t *testing.T, rc world.Receipt)
	}{
		{"429 with Retry-After", statusForever(http.StatusTooManyRequests, "30"), func(t *testing.T, rc world.Receipt) {
			var resp world.HTTPResponse
			if err := rc.Decode(&resp); err != nil || rc.Status != vocab.ReceiptOK || resp.Status != http.StatusTooManyRequests ||
				string(resp.Body) != fmt.Sprintf("down #%d", adapter.DefaultHTTPAttempts) {
				t.Fatalf("receipt %s %+v (%v), want ok carrying the last 429", rc.Status, resp, err)
			}
		}},
		{"connection refused", func(*http.Request, int) (*http.Response, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connection refused")}
		}, func(t *testing.T, rc world.Receipt) {
			// Unknown, not error: an earlier attempt of the ten may have
			// been sent (its answer lost), and nothing records which.
			if f := decodeFailure(t, rc); rc.Status != vocab.ReceiptTimeout || f.Attempts != adapter.DefaultHTTPAttempts ||
				!strings.Contains(f.Error, "connection refused") {
				t.Fatalf("receipt %s %+v, want a timeout (unknown) receipt after %d attempts carrying the last error", rc.Status, f, adapter.DefaultHTTPAttempts)
			}
		}},
		{"sent and lost, then refused", func(_ *http.Request, n int) (*http.Response, error) {
			// Nine attempts reach the server (a charge may have been
			// made) and lose their answers; the tenth is refused before
			// sending. The last error alone says "did not happen".
			if n < adapter.DefaultHTTPAttempts {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connection refused")}
		}, func(t *testing.T, rc world.Receipt) {
			if f := decodeFailure(t, rc); rc.Status != vocab.ReceiptTimeout || f.Attempts != adapter.DefaultHTTPAttempts {
				t.Fatalf("receipt %s %+v, want timeout (unknown): an earlier attempt may have taken effect", rc.Status, f)
			}
		}},
		{"overrun", func(r *http.Request, _ int) (*http.Response, error) {
			<-r.Context().Done() // a server that never answers: the claim's budget ends it
			return nil, r.Context().Err()
		}, func(t *testing.T, rc world.Receipt) {
			if f := decodeFailure(t, rc); rc.Status != vocab.ReceiptTimeout || f.Attempts != adapter.DefaultHTTPAttempts {
				t.Fatalf("receipt %s %+v, want a timeout receipt after %d attempts", rc.Status, f, adapter.DefaultHTTPAttempts)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tg := &target{answer: c.answer}
				e, stop := httpLab(t, tg, adapter.DefaultRetry())
				defer stop()
				h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: "https://api.example/"})
				time.Sleep(24 * time.Hour)
				synctest.Wait()
				if n := tg.count(); n != adapter.DefaultHTTPAttempts {
					t.Fatalf("%d requests in a day, want exactly %d", n, adapter.DefaultHTTPAttempts)
				}
				c.check(t, oneReceiptEach(t, e.st, e.world, h)[h])
			})
		})
	}
}

// TestHTTPRequestExplicitPolicyOutranksTheDefaultBound: a policy that says
// how many attempts, or that says unlimited (AttemptsUnlimited for the
// kind, UnlimitedAttempts for one intent), is followed: unlimited keeps
// retrying a 503 past the default bound with no receipt, and an explicit
// count above the bound runs that many.
func TestHTTPRequestExplicitPolicyOutranksTheDefaultBound(t *testing.T) {
	unlimited, err := world.EncodeRetryPolicy(world.RetryPolicy{MaximumAttempts: world.UnlimitedAttempts})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		kind   adapter.RetryPolicy
		intent []byte
	}{
		{"the kind's AttemptsUnlimited", adapter.RetryPolicy{Attempts: adapter.AttemptsUnlimited}, nil},
		{"the intent's UnlimitedAttempts", adapter.RetryPolicy{}, unlimited},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tg := &target{answer: statusForever(http.StatusServiceUnavailable, "")}
				e, stop := httpLab(t, tg, c.kind)
				defer stop()
				h := e.publishWith(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: "https://api.example/"}, c.intent)
				time.Sleep(24 * time.Hour)
				synctest.Wait()
				// A day of 100s intervals (less a fifth of jitter at most)
				// is over 800 requests.
				if n := tg.count(); n < 800 {
					t.Fatalf("%d requests in a day, want retries past the default bound of %d without end", n, adapter.DefaultHTTPAttempts)
				}
				if n := len(receipts(t, e.st, e.world)); n != 0 {
					t.Fatalf("%d receipts, want none while retries go on", n)
				}
				st, err := e.st.EffectStatus(e.ctx, h)
				if err != nil || st.State != vocab.EffectPending || st.Failures != tg.count() {
					t.Fatalf("effect %+v (%v), want pending with every failure counted", st, err)
				}
			})
		})
	}
	t.Run("an explicit count above the bound", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const attempts = adapter.DefaultHTTPAttempts + 5
			tg := &target{answer: statusForever(http.StatusBadGateway, "")}
			e, stop := httpLab(t, tg, adapter.RetryPolicy{Attempts: attempts})
			defer stop()
			h := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: "https://api.example/"})
			time.Sleep(24 * time.Hour)
			synctest.Wait()
			if n := tg.count(); n != attempts {
				t.Fatalf("%d requests, want the policy's %d", n, attempts)
			}
			var resp world.HTTPResponse
			if rc := oneReceiptEach(t, e.st, e.world, h)[h]; rc.Decode(&resp) != nil || resp.Status != http.StatusBadGateway ||
				string(resp.Body) != fmt.Sprintf("down #%d", attempts) {
				t.Fatalf("receipt %+v, want the last 502", resp)
			}
		})
	})
}

// TestAttemptsUnlimitedIsValidAndBelowItIsNot: AttemptsUnlimited
// is a valid policy, for a registration and for an intent; a count below
// it is refused.
func TestAttemptsUnlimitedIsValidAndBelowItIsNot(t *testing.T) {
	if err := (adapter.RetryPolicy{Attempts: adapter.AttemptsUnlimited}).Validate(); err != nil {
		t.Fatalf("AttemptsUnlimited: %v", err)
	}
	if err := (world.RetryPolicy{MaximumAttempts: world.UnlimitedAttempts}).Validate(); err != nil {
		t.Fatalf("UnlimitedAttempts: %v", err)
	}
	if err := (adapter.RetryPolicy{Attempts: adapter.AttemptsUnlimited - 1}).Validate(); err == nil {
		t.Fatal("Attempts below AttemptsUnlimited is valid, want a ConfigError")
	}
	if adapter.AttemptsUnlimited != world.UnlimitedAttempts {
		t.Fatal("the kind's and the intent's unlimited differ: an intent's would not decode to the pool's")
	}
}

// TestTheDefaultBoundGoesWithTheKindNotTheAdapter: an application's own
// adapter serving http.request (as a test's fake of it) gives up at the
// same bound under the zero policy, with an error receipt carrying the
// last error; the same adapter serving another kind keeps retrying (other
// kinds' defaults are unchanged).
func TestTheDefaultBoundGoesWithTheKindNotTheAdapter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := failing(errTransient)
		f.kinds = []string{adapter.KindHTTP, kindTest}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex}, adapter.Register(f, adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		hh := e.publish(adapter.KindHTTP, world.HTTPRequest{Method: "GET", URL: "https://api.example/"})
		ho := e.publish(kindTest, "x")
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		per := map[string]int{}
		for _, c := range f.snapshot() {
			per[c.hash]++
		}
		if per[hh] != adapter.DefaultHTTPAttempts || per[ho] < 800 {
			t.Fatalf("http.request executed %d times, want %d; %s %d times, want retries without end",
				per[hh], adapter.DefaultHTTPAttempts, kindTest, per[ho])
		}
		rc := oneReceiptEach(t, e.st, e.world, hh)[hh]
		if fl := decodeFailure(t, rc); rc.Status != vocab.ReceiptTimeout || fl.Attempts != adapter.DefaultHTTPAttempts || !strings.HasSuffix(fl.Error, errTransient.Error()) {
			t.Fatalf("receipt %s %+v, want timeout (unknown) after %d attempts carrying the last error", rc.Status, fl, adapter.DefaultHTTPAttempts)
		}
	})
}
