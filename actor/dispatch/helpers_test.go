package dispatch_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/actor/dispatch"
	"github.com/orrery-run/orrery/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// bubble runs body inside a testing/synctest bubble with the production
// executor, which then runs on the bubble's fake clock. synctest.Wait is how
// a test waits for the loop to go idle: no real sleeps anywhere.
func bubble(t *testing.T, body func(t *testing.T, ex *countingExecutor)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		body(t, &countingExecutor{Executor: actor.NewExecutor(1)})
	})
}

// newRuntime returns a runtime that is stopped when the test ends. Unless the
// caller sets a logger, handler failures are discarded.
func newRuntime(t *testing.T, ex actor.Executor, opts ...dispatch.Option) *dispatch.Runtime {
	t.Helper()
	opts = append([]dispatch.Option{dispatch.WithLogger(nil)}, opts...)
	r := dispatch.New(ex, opts...)
	t.Cleanup(func() {
		if err := r.Stop(context.Background()); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return r
}

func mustRegister(t *testing.T, r *dispatch.Runtime, typ string, h dispatch.Handler) {
	t.Helper()
	if err := r.Register(typ, h); err != nil {
		t.Fatalf("Register(%q): %v", typ, err)
	}
}

func mustDeliver(t *testing.T, r *dispatch.Runtime, typ string, payload any) {
	t.Helper()
	// Errorf, not Fatalf: producers and handlers call this off the test goroutine.
	if err := r.Deliver(dispatch.Message{Type: typ, Payload: payload}); err != nil {
		t.Errorf("Deliver(%q, %v): %v", typ, payload, err)
	}
}

func wantStats(t *testing.T, r *dispatch.Runtime, want dispatch.Stats) {
	t.Helper()
	if got := r.Stats(); got != want {
		t.Fatalf("Stats:\n got %+v\nwant %+v", got, want)
	}
}

// checkInvariant asserts the conservation law every Stats snapshot obeys.
// It reports with Errorf so pollers off the test goroutine may call it.
func checkInvariant(t *testing.T, s dispatch.Stats) {
	t.Helper()
	if s.Delivered != s.Executed+s.Dropped+uint64(s.Pending)+uint64(s.InFlight) {
		t.Errorf("Delivered != Executed+Dropped+Pending+InFlight: %+v", s)
	}
	if s.Failed+s.Panicked > s.Executed || s.InFlight > 1 || s.InFlight < 0 || s.Pending < 0 {
		t.Errorf("impossible Stats: %+v", s)
	}
}

// trace is an ordered, goroutine-safe event log.
type trace struct {
	mu sync.Mutex
	ev []string
}

func (tr *trace) add(format string, args ...any) {
	tr.mu.Lock()
	tr.ev = append(tr.ev, fmt.Sprintf(format, args...))
	tr.mu.Unlock()
}

func (tr *trace) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.ev...)
}

func (tr *trace) want(t *testing.T, want ...string) {
	t.Helper()
	got := tr.get()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("trace:\n got %q\nwant %q", got, want)
	}
}

// recordTo is a handler that appends "type:payload" to tr.
func recordTo(tr *trace) dispatch.Handler {
	return func(_ context.Context, m dispatch.Message) error {
		tr.add("%s:%v", m.Type, m.Payload)
		return nil
	}
}

// countingExecutor wraps the production executor to count goroutines started
// (and still running) and parkers made through the seam.
type countingExecutor struct {
	actor.Executor
	started atomic.Int64
	live    atomic.Int64
	parkers atomic.Int64
}

func (c *countingExecutor) Go(f func()) {
	c.started.Add(1)
	c.live.Add(1)
	c.Executor.Go(func() {
		defer c.live.Add(-1) // also runs on runtime.Goexit
		f()
	})
}

func (c *countingExecutor) NewParker() actor.Parker {
	c.parkers.Add(1)
	return c.Executor.NewParker()
}

// logSink collects JSON log lines.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (s *logSink) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out
}

// panickingLogHandler is a broken slog.Handler.
type panickingLogHandler struct{}

func (panickingLogHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panickingLogHandler) Handle(context.Context, slog.Record) error { panic("log handler broke") }
func (h panickingLogHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h panickingLogHandler) WithGroup(string) slog.Handler           { return h }

// goid returns the current goroutine's id, parsed from its stack header
// ("goroutine 12 [running]:"). Tests only: it proves which goroutine ran what.
func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(string(buf[:n]))
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}
