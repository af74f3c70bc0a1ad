package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// downStore answers Enqueue as a database whose connection was lost does
// (store.ErrUnavailable) while down is set.
type downStore struct {
	store.Store
	down atomic.Bool
}

func (s *downStore) Enqueue(ctx context.Context, world string, item store.InboxItem) (uint64, bool, error) {
	if s.down.Load() {
		return 0, false, &store.Error{Op: "enqueue", Kind: store.Unavailable(io.ErrUnexpectedEOF), World: world, Detail: "postgres"}
	}
	return s.Store.Enqueue(ctx, world, item)
}

// levels records the level of every log record.
type levels struct {
	mu  sync.Mutex
	got []slog.Level
}

func (l *levels) Enabled(context.Context, slog.Level) bool { return true }
func (l *levels) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, r.Level)
	return nil
}
func (l *levels) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levels) WithGroup(string) slog.Handler      { return l }
func (l *levels) errors() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, lv := range l.got {
		if lv >= slog.LevelError {
			n++
		}
	}
	return n
}

// A database outage is 503 unavailable with Retry-After, not 500
// internal, and it is not logged at ERROR: the client retries with the
// same key, and the retry is applied once.
func TestStoreUnavailableIs503WithRetryAfter(t *testing.T) {
	st := &downStore{Store: memstore.New()}
	lv := &levels{}
	r := newRig(t, rigOptions{store: st, cfg: func(c *api.Config) { c.Logger = slog.New(lv) }})
	r.Create("u1", universe)
	st.down.Store(true)
	add := typeName(t, Add{})
	body := `{"type":"` + add + `","value":{"By":1},"idempotency_key":"k1"}`
	req, err := http.NewRequestWithContext(r.Ctx, "POST", r.HTTP.URL+"/v1/worlds/u1/events", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.HTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code != api.CodeUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d code %q Retry-After %q (%s), want 503 unavailable with Retry-After",
			resp.StatusCode, e.Code, resp.Header.Get("Retry-After"), b)
	}
	if strings.Contains(e.Message, "unexpected EOF") {
		t.Fatalf("message %q shows the driver's error to the client", e.Message)
	}
	if n := lv.errors(); n != 0 {
		t.Fatalf("%d ERROR records for a 503", n)
	}
	var ae *api.Error
	if _, err := r.Client.Send(r.Ctx, "u1", add, Add{By: 1}, "k1"); !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable ||
		!errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("client Send while down: %v, want a 503 *api.Error matching store.ErrUnavailable", err)
	}
	st.down.Store(false)
	ack, err := r.Client.Send(r.Ctx, "u1", add, Add{By: 1}, "k1")
	if err != nil || ack.Duplicate {
		t.Fatalf("retry after the outage: %+v %v, want applied once", ack, err)
	}
}
