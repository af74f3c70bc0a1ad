package timer_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/plane/timer"
	"github.com/orrery-run/orrery/store/memstore"
)

// links is a timer.Links that answers one intent's span and records the
// inbox writers.
type links struct {
	intent string
	cycle  trace.SpanContext

	mu    sync.Mutex
	inbox map[uint64]trace.SpanContext
}

func (l *links) Intent(hash string) (trace.SpanContext, bool) { return l.cycle, hash == l.intent }

func (l *links) PutInbox(_ string, seq uint64, sc trace.SpanContext) {
	l.mu.Lock()
	l.inbox[seq] = sc
	l.mu.Unlock()
}

// TestFiringIsTraced: each firing is one orrery.timer.fire span, linked
// to the span of the cycle that set the timer (from Links), with the
// world, intent, claim attempt, inbox seq and duplicate flag, and recorded
// as the writer of the firing's inbox item.
func TestFiringIsTraced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		defer tp.Shutdown(context.Background())
		e := newEnv(t)
		_, cycle := tp.Tracer("test").Start(context.Background(), "cycle")
		cycle.End()
		h := e.schedule(time.Now().Add(time.Second))
		l := &links{intent: h, cycle: cycle.SpanContext(), inbox: map[uint64]trace.SpanContext{}}
		_, r := start(t, e.st, timer.Config{Worker: "t1", Executor: e.ex, Tracer: tp, Links: l})
		defer r.stop()
		time.Sleep(time.Minute)
		var fires []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.Name() == "orrery.timer.fire" {
				fires = append(fires, s)
			}
		}
		if len(fires) != 1 {
			t.Fatalf("%d firing spans, want 1", len(fires))
		}
		s := fires[0]
		if ls := s.Links(); len(ls) != 1 || !ls[0].SpanContext.Equal(cycle.SpanContext()) || s.Parent().IsValid() {
			t.Fatalf("firing links %v parent %v: want only a link to the cycle", ls, s.Parent())
		}
		a := map[string]any{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.AsInterface()
		}
		items := fired(t, e.st)
		if len(items) != 1 || a["orrery.world"] != "w1" || a["orrery.intent_hash"] != h || a["orrery.attempt"] != int64(1) ||
			a["orrery.seq"] != int64(items[0].Seq) || a["orrery.duplicate"] != false || s.Status().Code == codes.Error {
			t.Fatalf("firing attributes %v status %v (items %d)", a, s.Status(), len(items))
		}
		l.mu.Lock()
		got, ok := l.inbox[items[0].Seq]
		l.mu.Unlock()
		if !ok || !got.Equal(s.SpanContext()) {
			t.Fatal("the firing was not recorded as its inbox item's writer")
		}
	})
}

// warnings keeps the Warn records' messages and attributes.
type warnings struct {
	mu    sync.Mutex
	lines []map[string]string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	w.mu.Lock()
	w.lines = append(w.lines, m)
	w.mu.Unlock()
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// TestFireFailureLogsAtWarn: a Fire the store fails is logged at Warn
// with the worker, the timer's world and intent and the error, and the
// retry fires the timer.
func TestFireFailureLogsAtWarn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		failNext := true
		e := newEnv(t, memstore.WithHook(func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == "fire" && failNext {
				failNext = false
				return errors.New("store down")
			}
			return nil
		}))
		w := &warnings{}
		h := e.schedule(time.Now().Add(time.Second))
		_, r := start(t, e.st, timer.Config{Worker: "t1", Executor: e.ex, Logger: slog.New(w)})
		defer r.stop()
		time.Sleep(time.Minute)
		if n := len(fired(t, e.st)); n != 1 {
			t.Fatalf("%d firings after a failed Fire and its retry, want 1", n)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, l := range w.lines {
			if l["msg"] == "timer: fire failed" {
				if l["worker"] != "t1" || l["world"] != "w1" || l["intent"] != h || l["err"] != "store down" {
					t.Fatalf("fire failure attributes %v", l)
				}
				return
			}
		}
		t.Fatalf("no Warn line for the failed Fire in %v", w.lines)
	})
}
