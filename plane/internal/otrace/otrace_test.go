package otrace_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/plane/internal/otrace"
)

// TestEndStampsTheCallersClockAndError: a span ended by End carries the
// given end time (not the machine's) and, with an error, an error status
// and the error as an event; without one, an unset status.
func TestEndStampsTheCallersClockAndError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	start := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	tr := otrace.Tracer(tp)
	_, ok := tr.Start(context.Background(), "ok", trace.WithTimestamp(start))
	otrace.End(ok, start.Add(time.Second), nil)
	_, bad := tr.Start(context.Background(), "bad", trace.WithTimestamp(start))
	otrace.End(bad, start.Add(2*time.Second), errors.New("boom"))
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want 2", len(spans))
	}
	if s := spans[0]; !s.EndTime().Equal(start.Add(time.Second)) || s.Status().Code != codes.Unset {
		t.Fatalf("ok span: end %v status %v", s.EndTime(), s.Status())
	}
	if s := spans[1]; !s.EndTime().Equal(start.Add(2*time.Second)) || s.Status().Code != codes.Error || s.Status().Description != "boom" || len(s.Events()) != 1 {
		t.Fatalf("bad span: end %v status %v events %d", s.EndTime(), s.Status(), len(s.Events()))
	}
	if s := spans[0]; s.InstrumentationScope().Name != otrace.Scope {
		t.Fatalf("scope %q", s.InstrumentationScope().Name)
	}
}

// TestNilProviderAndInvalidLinks: a nil provider gives the global one (a
// no-op here, so its spans are invalid), and Link drops invalid or absent
// span contexts.
func TestNilProviderAndInvalidLinks(t *testing.T) {
	_, sp := otrace.Tracer(nil).Start(context.Background(), "x")
	if sp.SpanContext().IsValid() {
		t.Fatal("the default provider recorded a span with no SDK installed")
	}
	otrace.End(sp, time.Time{}, nil)
	if l := otrace.Link(sp.SpanContext(), true); l != nil {
		t.Fatalf("an invalid span context gave links %v", l)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	_, real := otrace.Tracer(tp).Start(context.Background(), "y")
	defer real.End()
	if l := otrace.Link(real.SpanContext(), false); l != nil {
		t.Fatalf("an absent link gave %v", l)
	}
	if l := otrace.Link(real.SpanContext(), true); len(l) != 1 || !l[0].SpanContext.Equal(real.SpanContext()) {
		t.Fatalf("links %v", l)
	}
}
