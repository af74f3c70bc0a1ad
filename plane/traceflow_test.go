package plane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/lab"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/plane/timer"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// okEcho answers test.echo at once with its key.
type okEcho struct{}

func (okEcho) Kinds() []string { return []string{kindEcho} }

func (okEcho) Execute(_ context.Context, it vocab.EffectItem) (effect.Result, error) {
	var p EchoParams
	if err := world.Decode(it.Params, &p); err != nil {
		return effect.Result{}, effect.Permanent(err)
	}
	return effect.OK(p.Key), nil
}

// commitSpy records the span each Commit runs under.
type commitSpy struct {
	store.Store
	spans []trace.SpanContext
}

func (s *commitSpy) Commit(ctx context.Context, id string, epoch uint64, b store.CommitBatch) (store.CommitResult, error) {
	s.spans = append(s.spans, trace.SpanContextFromContext(ctx))
	return s.Store.Commit(ctx, id, epoch, b)
}

// tracing is one process's tracer provider, recorder and links.
type tracing struct {
	rec   *tracetest.SpanRecorder
	tp    *sdktrace.TracerProvider
	links *plane.TraceLinks
}

func newTracing() *tracing {
	rec := tracetest.NewSpanRecorder()
	return &tracing{rec: rec, tp: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), links: plane.NewTraceLinks(0)}
}

// named returns the ended spans called name, in the order they ended.
func (tr *tracing) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// linksTo reports whether s links to exactly the span of to, and only to
// it.
func linksTo(s, to sdktrace.ReadOnlySpan) bool {
	l := s.Links()
	return len(l) == 1 && l[0].SpanContext.SpanID() == to.SpanContext().SpanID() &&
		l[0].SpanContext.TraceID() == to.SpanContext().TraceID()
}

// onLabClock reports whether s started and ended within [from, to] of the
// lab's virtual clock, which is far from the machine's.
func onLabClock(s sdktrace.ReadOnlySpan, from, to time.Time) bool {
	return !s.StartTime().Before(from) && !s.EndTime().After(to) && !s.EndTime().Before(s.StartTime())
}

// TestOneFlowIsLinkedAcrossTheStore: one event that makes an effect, in a
// process whose client, host and adapter pool share a TraceLinks, yields
// the spans ingress, cycle, effect, receipt, cycle: the ingress a child of
// the caller's span, each later hop linked to the one before it (the cycle
// to the ingress it journaled, the effect to the cycle that published it,
// the receipt a child of the effect, the second cycle to the receipt it
// consumed), all stamped on the lab's virtual clock. Each commit runs
// under its cycle's span.
func TestOneFlowIsLinkedAcrossTheStore(t *testing.T) {
	tr := newTracing()
	defer tr.tp.Shutdown(context.Background())
	testrig.Lab(t, lab.Config{Seed: 31, Name: "trace-flow"}, func(env *lab.Env) error {
		labStart := env.Lab.Now()
		st := newStore(env)
		if err := createAssigned(env.Ctx, st, "e", "A"); err != nil {
			return err
		}
		spy := &commitSpy{Store: st}
		cfg := hostConfig("A", spy, nil)
		cfg.Tracer, cfg.Links = tr.tp, tr.links
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		pool, err := adapter.NewPool(st, adapter.Config{Worker: "pool", Executor: env.Lab, Tracer: tr.tp, Links: tr.links},
			adapter.Register(okEcho{}, adapter.NoRetry()))
		if err != nil {
			return err
		}
		ps, err := env.Root.Sub("pool")
		if err != nil {
			return err
		}
		defer ps.CloseKilled(env.Ctx)
		if _, err := ps.Go("pool", pool.Run); err != nil {
			return err
		}
		c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Tracer: tr.tp, Links: tr.links})
		if err != nil {
			return err
		}
		ctx, request := tr.tp.Tracer("test").Start(env.Ctx, "request", trace.WithTimestamp(env.Lab.Now()))
		if _, err := c.Send(ctx, "e", Echo{Key: "k"}, "k"); err != nil {
			return err
		}
		request.End(trace.WithTimestamp(env.Lab.Now()))
		if err := testrig.WaitLab(env, "the receipt consumed", 5*time.Second, func() (bool, error) {
			s, ok := h.State("e")
			if !ok {
				return false, nil
			}
			v, err := value(s, "e")
			return len(v.Receipts) == 1, err
		}); err != nil {
			return err
		}
		labEnd := env.Lab.Now()

		ingress, cycles, effects, receipts := tr.named("orrery.ingress"), tr.named("orrery.cycle"), tr.named("orrery.effect"), tr.named("orrery.receipt")
		if len(ingress) != 1 || len(cycles) != 2 || len(effects) != 1 || len(receipts) != 1 {
			return fmt.Errorf("%d ingress, %d cycle, %d effect, %d receipt spans; want 1, 2, 1, 1",
				len(ingress), len(cycles), len(effects), len(receipts))
		}
		in, c1, ef, rc, c2 := ingress[0], cycles[0], effects[0], receipts[0], cycles[1]
		if in.Parent().SpanID() != request.SpanContext().SpanID() {
			return errors.New("the ingress span is not a child of the caller's span")
		}
		if a := attrs(in); a["orrery.world"].AsString() != "e" || a["orrery.kind"].AsString() != vocab.KindEvent ||
			a["orrery.seq"].AsInt64() != 1 || a["orrery.duplicate"].AsBool() {
			return fmt.Errorf("ingress attributes %v", a)
		}
		if !linksTo(c1, in) {
			return fmt.Errorf("the first cycle links %v, not the ingress", c1.Links())
		}
		if a := attrs(c1); a["orrery.world"].AsString() != "e" || a["orrery.epoch"].AsInt64() != 1 || a["orrery.steps"].AsInt64() != 1 ||
			a["orrery.height.from"].AsInt64() != 0 || a["orrery.height.to"].AsInt64() != 1 || a["orrery.intents"].AsInt64() != 1 {
			return fmt.Errorf("first cycle attributes %v", a)
		}
		if c1.Parent().IsValid() || ef.Parent().IsValid() {
			return errors.New("a cycle or an effect span has a parent: the store's hops are links, not parents")
		}
		if !linksTo(ef, c1) {
			return fmt.Errorf("the effect links %v, not the cycle that published it", ef.Links())
		}
		if a := attrs(ef); a["orrery.world"].AsString() != "e" || a["orrery.kind"].AsString() != kindEcho ||
			a["orrery.attempt"].AsInt64() != 1 || a["orrery.status"].AsString() != "ok" || len(a["orrery.intent_hash"].AsString()) == 0 {
			return fmt.Errorf("effect attributes %v", a)
		}
		if rc.Parent().SpanID() != ef.SpanContext().SpanID() {
			return errors.New("the receipt span is not a child of the effect span")
		}
		if a := attrs(rc); a["orrery.seq"].AsInt64() != 2 || a["orrery.status"].AsString() != "ok" ||
			a["orrery.intent_hash"] != attrs(ef)["orrery.intent_hash"] {
			return fmt.Errorf("receipt attributes %v", a)
		}
		if !linksTo(c2, rc) {
			return fmt.Errorf("the second cycle links %v, not the receipt", c2.Links())
		}
		if a := attrs(c2); a["orrery.height.from"].AsInt64() != 1 || a["orrery.height.to"].AsInt64() != 2 || a["orrery.intents"].AsInt64() != 0 {
			return fmt.Errorf("second cycle attributes %v", a)
		}
		if len(spy.spans) != 2 || spy.spans[0].SpanID() != c1.SpanContext().SpanID() || spy.spans[1].SpanID() != c2.SpanContext().SpanID() {
			return errors.New("the commits did not run under their cycles' spans")
		}
		for _, s := range []sdktrace.ReadOnlySpan{in, c1, ef, rc, c2} {
			if !onLabClock(s, labStart, labEnd) {
				return fmt.Errorf("%s ran %v..%v, outside the lab's clock %v..%v", s.Name(), s.StartTime(), s.EndTime(), labStart, labEnd)
			}
			if s.Status().Code == codes.Error {
				return fmt.Errorf("%s ended in error: %v", s.Name(), s.Status())
			}
		}
		return nil
	})
}

// TestTimerFiringIsLinked: a timer a cycle sets is fired under an
// orrery.timer.fire span linked to that cycle, and the cycle that consumes
// the firing links to the firing.
func TestTimerFiringIsLinked(t *testing.T) {
	tr := newTracing()
	defer tr.tp.Shutdown(context.Background())
	testrig.Lab(t, lab.Config{Seed: 32, Name: "trace-timer"}, func(env *lab.Env) error {
		st := newStore(env)
		if err := createAssigned(env.Ctx, st, "t", "A"); err != nil {
			return err
		}
		cfg := hostConfig("A", st, nil)
		cfg.Tracer, cfg.Links = tr.tp, tr.links
		cfg.TimersThroughInbox = true // a firing with a span of its own
		h, err := plane.StartHost(env.Ctx, env.Root, cfg)
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		w, err := timer.New(st, timer.Config{Worker: "timers", Executor: env.Lab, Tracer: tr.tp, Links: tr.links})
		if err != nil {
			return err
		}
		ws, err := env.Root.Sub("timers")
		if err != nil {
			return err
		}
		defer ws.CloseKilled(env.Ctx)
		if _, err := ws.Go("timers", w.Run); err != nil {
			return err
		}
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Tracer: tr.tp, Links: tr.links})
		if _, err := c.Send(env.Ctx, "t", Alarm{AfterMs: 200, Key: "x"}, "x"); err != nil {
			return err
		}
		if err := testrig.WaitLab(env, "the firing consumed", 5*time.Second, func() (bool, error) {
			s, ok := h.State("t")
			if !ok {
				return false, nil
			}
			v, err := value(s, "t")
			return len(v.Fired) == 1, err
		}); err != nil {
			return err
		}
		cycles, fires := tr.named("orrery.cycle"), tr.named("orrery.timer.fire")
		if len(cycles) != 2 || len(fires) != 1 {
			return fmt.Errorf("%d cycle and %d timer.fire spans; want 2 and 1", len(cycles), len(fires))
		}
		fire := fires[0]
		if !linksTo(fire, cycles[0]) {
			return fmt.Errorf("the firing links %v, not the cycle that set the timer", fire.Links())
		}
		if a := attrs(fire); a["orrery.world"].AsString() != "t" || a["orrery.seq"].AsInt64() != 2 || a["orrery.duplicate"].AsBool() {
			return fmt.Errorf("firing attributes %v", a)
		}
		if !linksTo(cycles[1], fire) {
			return fmt.Errorf("the consuming cycle links %v, not the firing", cycles[1].Links())
		}
		return nil
	})
}

// TestIngressSpans: Ops.EnqueueIngress and Client.Call write orrery.ingress
// spans, children of the caller's span, with world, kind, seq and
// duplicate; a repeated key is marked duplicate and not recorded as the
// item's writer; invalid ingress ends its span in error. Without an SDK
// (nil tracer, the global no-op) nothing is recorded and nothing fails.
func TestIngressSpans(t *testing.T) {
	tr := newTracing()
	defer tr.tp.Shutdown(context.Background())
	testrig.Lab(t, lab.Config{Seed: 33, Name: "trace-ingress"}, func(env *lab.Env) error {
		st := newStore(env)
		if err := createAssigned(env.Ctx, st, "i", "A"); err != nil {
			return err
		}
		ops, err := plane.NewOps(st, kernels(), plane.OpsTracing(tr.tp, tr.links, env.Lab))
		if err != nil {
			return err
		}
		ctx, parent := tr.tp.Tracer("test").Start(env.Ctx, "http")
		defer parent.End()
		ev, err := world.EncodeEvent(Add{By: 1, Key: "a"})
		if err != nil {
			return err
		}
		for range 2 {
			if _, err := ops.EnqueueIngress(ctx, "i", plane.Ingress{Kind: vocab.KindEvent, Payload: ev, DedupeKey: "a"}); err != nil {
				return err
			}
		}
		if _, err := ops.EnqueueIngress(ctx, "i", plane.Ingress{Kind: "receipt", Payload: ev}); !errors.Is(err, plane.ErrInvalidIngress) {
			return fmt.Errorf("invalid ingress: %v", err)
		}
		spans := tr.named("orrery.ingress")
		if len(spans) != 3 {
			return fmt.Errorf("%d ingress spans, want 3", len(spans))
		}
		for i, s := range spans {
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				return fmt.Errorf("ingress span %d is not a child of the caller's span", i)
			}
		}
		first, dup, bad := attrs(spans[0]), attrs(spans[1]), spans[2]
		if first["orrery.seq"].AsInt64() != 1 || first["orrery.duplicate"].AsBool() || first["orrery.kind"].AsString() != vocab.KindEvent {
			return fmt.Errorf("first enqueue attributes %v", first)
		}
		if dup["orrery.seq"].AsInt64() != 1 || !dup["orrery.duplicate"].AsBool() {
			return fmt.Errorf("repeated enqueue attributes %v", dup)
		}
		if sc, ok := tr.links.Inbox("i", 1); !ok || sc.SpanID() != spans[0].SpanContext().SpanID() {
			return errors.New("the item's recorded writer is not the first enqueue")
		}
		if bad.Status().Code != codes.Error {
			return fmt.Errorf("invalid ingress span status %v", bad.Status())
		}
		// Unvalidated input is clipped before it becomes an attribute.
		long := strings.Repeat("w", 5000)
		if _, err := ops.EnqueueIngress(ctx, long, plane.Ingress{Kind: strings.Repeat("k", 5000), Payload: ev}); !errors.Is(err, plane.ErrInvalidIngress) {
			return fmt.Errorf("ingress of an oversized kind: %v", err)
		}
		spans = tr.named("orrery.ingress")
		if a := attrs(spans[len(spans)-1]); len(a["orrery.world"].AsString()) != store.MaxIDBytes || len(a["orrery.kind"].AsString()) != store.MaxIDBytes {
			return fmt.Errorf("oversized input kept as attributes of %d and %d bytes", len(a["orrery.world"].AsString()), len(a["orrery.kind"].AsString()))
		}

		// Client.Call: an ingress span of kind call (the host answers it).
		h, err := plane.StartHost(env.Ctx, env.Root, hostConfig("A", st, nil))
		if err != nil {
			return err
		}
		defer h.Stop(env.Ctx)
		c, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Tracer: tr.tp, Links: tr.links})
		if n, err := plane.CallAs[int64](ctx, c, "i", Get{}); err != nil || n != 1 {
			return fmt.Errorf("Get = %d, %v", n, err)
		}
		spans = tr.named("orrery.ingress")
		if len(spans) != 5 {
			return fmt.Errorf("%d ingress spans after the call, want 5", len(spans))
		}
		if a := attrs(spans[4]); a["orrery.kind"].AsString() != vocab.KindCall || a["orrery.seq"].AsInt64() != 2 {
			return fmt.Errorf("call ingress attributes %v", a)
		}

		// No provider: the global no-op; the client works and records
		// nothing here.
		quiet, _ := plane.NewClient(plane.ClientConfig{Store: st, Kernels: kernels(), Executor: env.Lab, Links: tr.links})
		ack, err := quiet.Send(ctx, "i", Add{By: 1, Key: "q"}, "q")
		if err != nil {
			return err
		}
		if n := len(tr.named("orrery.ingress")); n != 5 {
			return fmt.Errorf("a client with no tracer recorded spans here (%d)", n)
		}
		if _, ok := tr.links.Inbox("i", ack.Seq); ok {
			return errors.New("a no-op span was recorded as a link")
		}
		return nil
	})
}
