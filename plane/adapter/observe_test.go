package adapter_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
)

// observed collects a pool's EffectEvents.
type observed struct {
	mu  sync.Mutex
	evs []adapter.EffectEvent
}

func (o *observed) observe(ev adapter.EffectEvent) {
	o.mu.Lock()
	o.evs = append(o.evs, ev)
	o.mu.Unlock()
}

func (o *observed) events() []adapter.EffectEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]adapter.EffectEvent(nil), o.evs...)
}

// TestPoolObservesCompletionWithLatencies: an intent waits 2s before any
// pool runs; its first Execute fails after 1s, the retry comes 5s later
// (a claim of its own, the second) and succeeds after 3s. The one
// completion is observed with the world, intent, kind, claim attempt, ok
// status and inbox seq, Exec the 3s its claim spent in Execute, and
// Dispatch the 11s from the intent's enqueue to its completion.
func TestPoolObservesCompletionWithLatencies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		f := &fake{do: func(_ context.Context, _ vocab.EffectItem, n int) (effect.Result, error) {
			if n == 1 {
				time.Sleep(time.Second)
				return effect.Result{}, errTransient
			}
			time.Sleep(3 * time.Second)
			return effect.OK("done"), nil
		}}
		var obs observed
		h := e.publish(kindTest, "x")
		time.Sleep(2 * time.Second)
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, Observe: obs.observe},
			adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: 5 * time.Second}))
		r := run(p)
		defer r.stop()
		time.Sleep(time.Minute)
		evs := obs.events()
		if len(evs) != 1 {
			t.Fatalf("%d completion events, want 1: %+v", len(evs), evs)
		}
		ev := evs[0]
		items, err := e.st.ReadInbox(e.ctx, e.world, 0, 0)
		if err != nil || len(items) != 1 {
			t.Fatalf("inbox %v (%v)", items, err)
		}
		want := adapter.EffectEvent{World: e.world, IntentHash: h, Kind: kindTest, Attempt: 2, Status: vocab.ReceiptOK,
			InboxSeq: items[0].Seq, Dispatch: 11 * time.Second, Exec: 3 * time.Second}
		if ev != want {
			t.Fatalf("event %+v\nwant  %+v", ev, want)
		}
	})
}

// TestPoolObservesEveryCompletionAttempt: a Complete the store fails is
// observed with its error, and the retry that lands is observed too; a
// completion another claim beat is observed as Dup with no error.
func TestPoolObservesEveryCompletionAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errDown := errors.New("store down")
		var mu sync.Mutex
		failNext := true
		e := newEnv(t, memstore.WithHook(func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == "complete_many" && failNext {
				failNext = false
				return errDown
			}
			return nil
		}))
		var obs observed
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, Observe: obs.observe}, adapter.Register(&fake{}, adapter.NoRetry()))
		r := run(p)
		defer r.stop()
		e.publish(kindTest, "a")
		time.Sleep(time.Minute)
		evs := obs.events()
		if len(evs) != 2 || !errors.Is(evs[0].Err, errDown) || evs[0].InboxSeq != 0 || evs[1].Err != nil || evs[1].Dup || evs[1].InboxSeq == 0 {
			t.Fatalf("events %+v, want a failed completion then one that landed", evs)
		}

		// The adapter completes its own claim first, as a faster claim
		// would have: the pool's completion is a duplicate.
		var dupObs observed
		beat := &fake{kinds: []string{"test.beaten"}, do: func(ctx context.Context, it vocab.EffectItem, _ int) (effect.Result, error) {
			if _, _, err := e.st.Complete(ctx, it.IntentHash, it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte{0xa0}}); err != nil {
				return effect.Result{}, effect.Permanent(err)
			}
			return effect.OK("late"), nil
		}}
		p2 := newPool(t, e.st, adapter.Config{Worker: "pool-2", Executor: e.ex, Observe: dupObs.observe}, adapter.Register(beat, adapter.NoRetry()))
		r2 := run(p2)
		defer r2.stop()
		e.publish("test.beaten", "b")
		time.Sleep(time.Minute)
		evs = dupObs.events()
		if len(evs) != 1 || !evs[0].Dup || evs[0].Err != nil || evs[0].Kind != "test.beaten" {
			t.Fatalf("events %+v, want one duplicate completion", evs)
		}
	})
}

// fakeLinks is a Links that answers one intent's span and records the
// inbox writers.
type fakeLinks struct {
	intent string
	cycle  trace.SpanContext

	mu    sync.Mutex
	inbox map[uint64]trace.SpanContext
}

func (l *fakeLinks) Intent(hash string) (trace.SpanContext, bool) {
	return l.cycle, hash == l.intent
}

func (l *fakeLinks) PutInbox(_ string, seq uint64, sc trace.SpanContext) {
	l.mu.Lock()
	l.inbox[seq] = sc
	l.mu.Unlock()
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// spyStore records the span each Complete runs under.
type spyStore struct {
	adapter.Store
	mu       sync.Mutex
	complete []trace.SpanContext
}

func (s *spyStore) Complete(ctx context.Context, h string, c vocab.Claim, r vocab.Receipt) (uint64, bool, error) {
	s.mu.Lock()
	s.complete = append(s.complete, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	return s.Store.Complete(ctx, h, c, r)
}

// TestPoolTracesEffectAndReceipt: each claim runs under one orrery.effect
// span linked to the publishing cycle's span (from Links), with the
// adapter's Execute call inside it (its context carries it) and its
// attributes (attempt, executions, status): a failed execution's span ends
// as retrying, and the retry, a claim of its own after the backoff, has a
// span of its own. The completion is an orrery.receipt span, child of the
// last effect span, under which the store's Complete runs, and which the
// pool records as the writer of the receipt's inbox item.
func TestPoolTracesEffectAndReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		defer tp.Shutdown(context.Background())
		e := newEnv(t)
		var seen []trace.SpanContext
		var mu sync.Mutex
		f := &fake{do: func(ctx context.Context, _ vocab.EffectItem, n int) (effect.Result, error) {
			mu.Lock()
			seen = append(seen, trace.SpanContextFromContext(ctx))
			mu.Unlock()
			if n == 1 {
				return effect.Result{}, errTransient
			}
			return effect.OK("done"), nil
		}}
		_, cycle := tp.Tracer("test").Start(context.Background(), "cycle")
		cycle.End()
		h := e.publish(kindTest, "x")
		links := &fakeLinks{intent: h, cycle: cycle.SpanContext(), inbox: map[uint64]trace.SpanContext{}}
		spy := &spyStore{Store: e.st}
		p := newPool(t, spy, adapter.Config{Worker: "pool-1", Executor: e.ex, Tracer: tp, Links: links},
			adapter.Register(f, adapter.RetryPolicy{Attempts: 2, Base: time.Second}))
		r := run(p)
		defer r.stop()
		time.Sleep(time.Minute)
		var effects []sdktrace.ReadOnlySpan
		var effect, receipt sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "orrery.effect":
				effects = append(effects, s)
				effect = s
			case "orrery.receipt":
				receipt = s
			}
		}
		if len(effects) != 2 || receipt == nil {
			t.Fatalf("%d effect spans and receipt %v, want 2 and one", len(effects), receipt)
		}
		first := spanAttrs(effects[0])
		if l := effects[0].Links(); len(l) != 1 || !l[0].SpanContext.Equal(cycle.SpanContext()) ||
			first["orrery.attempt"].AsInt64() != 1 || first["orrery.executions"].AsInt64() != 1 || effects[0].Status().Code != codes.Error {
			t.Fatalf("the failed claim's span: attributes %v, status %v", first, effects[0].Status())
		}
		if l := effect.Links(); len(l) != 1 || !l[0].SpanContext.Equal(cycle.SpanContext()) {
			t.Fatalf("effect links %v, want the cycle's span", l)
		}
		a := spanAttrs(effect)
		if a["orrery.world"].AsString() != e.world || a["orrery.intent_hash"].AsString() != h || a["orrery.kind"].AsString() != kindTest ||
			a["orrery.attempt"].AsInt64() != 2 || a["orrery.executions"].AsInt64() != 2 || a["orrery.status"].AsString() != "ok" {
			t.Fatalf("effect attributes %v", a)
		}
		mu.Lock()
		if len(seen) != 2 {
			t.Fatalf("%d Execute calls, want 2", len(seen))
		}
		for i, sc := range seen {
			if sc.SpanID() != effects[i].SpanContext().SpanID() {
				t.Fatalf("Execute call %d did not run under its claim's effect span", i+1)
			}
		}
		mu.Unlock()
		if receipt.Parent().SpanID() != effect.SpanContext().SpanID() || receipt.Status().Code == codes.Error {
			t.Fatalf("receipt span parent %v status %v", receipt.Parent(), receipt.Status())
		}
		spy.mu.Lock()
		if len(spy.complete) != 1 || spy.complete[0].SpanID() != receipt.SpanContext().SpanID() {
			t.Fatalf("Complete ran under %v, not the receipt span", spy.complete)
		}
		spy.mu.Unlock()
		seq := spanAttrs(receipt)["orrery.seq"].AsInt64()
		links.mu.Lock()
		got, ok := links.inbox[uint64(seq)]
		links.mu.Unlock()
		if seq == 0 || !ok || !got.Equal(receipt.SpanContext()) {
			t.Fatalf("the receipt (seq %d) was not recorded as its inbox item's writer", seq)
		}
		// Spans follow the executor's clock, here synctest's: the retry's
		// span starts after the 1s backoff the store held it for.
		if d := effects[1].StartTime().Sub(effects[0].StartTime()); d != time.Second {
			t.Fatalf("the retry's span started %v after the first, want 1s", d)
		}
	})
}

// logLine is one record a lineHandler kept.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// lineHandler keeps every record.
type lineHandler struct {
	mu    sync.Mutex
	lines []logLine
}

func (h *lineHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	l := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, l)
	h.mu.Unlock()
	return nil
}

func (h *lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lineHandler) WithGroup(string) slog.Handler      { return h }

func (h *lineHandler) find(level slog.Level, msg string) (logLine, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines {
		if l.level == level && l.msg == msg {
			return l, true
		}
	}
	return logLine{}, false
}

// TestPoolLogsFailuresAtWarn: a failed Complete and an effect the pool
// gave up on are logged at Warn, each with the worker, world, intent, kind
// and the error.
func TestPoolLogsFailuresAtWarn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		failNext := true
		e := newEnv(t, memstore.WithHook(func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == "complete_many" && failNext {
				failNext = false
				return errors.New("store down")
			}
			return nil
		}))
		lh := &lineHandler{}
		f := &fake{do: func(context.Context, vocab.EffectItem, int) (effect.Result, error) {
			return effect.Result{}, errTransient
		}}
		p := newPool(t, e.st, adapter.Config{Worker: "pool-1", Executor: e.ex, Logger: slog.New(lh)}, adapter.Register(f, adapter.NoRetry()))
		r := run(p)
		defer r.stop()
		h := e.publish(kindTest, "x")
		time.Sleep(time.Minute)
		for _, msg := range []string{"adapter: complete failed", "adapter: effect did not succeed; its receipt says so"} {
			l, ok := lh.find(slog.LevelWarn, msg)
			if !ok {
				t.Fatalf("no Warn line %q in %v", msg, lh.lines)
			}
			if l.attrs["worker"] != "pool-1" || l.attrs["world"] != e.world || l.attrs["intent"] != h || l.attrs["kind"] != kindTest || l.attrs["err"] == "" {
				t.Fatalf("%q attributes %v", msg, l.attrs)
			}
		}
	})
}
