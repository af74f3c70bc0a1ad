// Package otrace holds what the plane's span writers share: the span and
// attribute names, so a trace reads the same whichever package (host,
// client, adapter pool, timer worker) wrote a span, and the two helpers
// every one of them needs. It imports the OpenTelemetry API only, never an
// SDK: a binary that installs none records nothing.
package otrace

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of every plane span.
const Scope = "github.com/orrery-run/orrery/plane"

// Span names.
const (
	Ingress   = "orrery.ingress"
	Cycle     = "orrery.cycle"
	Effect    = "orrery.effect"
	Receipt   = "orrery.receipt"
	TimerFire = "orrery.timer.fire"
)

// Attribute keys.
const (
	World      = attribute.Key("orrery.world")
	Kind       = attribute.Key("orrery.kind")
	Seq        = attribute.Key("orrery.seq")
	Duplicate  = attribute.Key("orrery.duplicate")
	Epoch      = attribute.Key("orrery.epoch")
	Steps      = attribute.Key("orrery.steps")
	FromHeight = attribute.Key("orrery.height.from")
	ToHeight   = attribute.Key("orrery.height.to")
	Intents    = attribute.Key("orrery.intents")
	IntentHash = attribute.Key("orrery.intent_hash")
	Attempt    = attribute.Key("orrery.attempt")
	Executions = attribute.Key("orrery.executions")
	Status     = attribute.Key("orrery.status")
	Worker     = attribute.Key("orrery.worker")
)

// Tracer is tp's tracer for the plane; nil takes the global provider,
// which is a no-op unless the binary installed an SDK.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Scope)
}

// End ends sp at the time at, with err as its status. The plane passes
// its executor's time, so spans follow virtual time in the lab; a zero at
// leaves the stamp to the SDK (Ops without a clock).
func End(sp trace.Span, at time.Time, err error) {
	// A span nobody records (no tracer configured) is not told the error:
	// formatting it is a refused input's largest cost under overload,
	// when refusals are most of the traffic.
	if err != nil && sp.IsRecording() {
		sp.RecordError(err, trace.WithTimestamp(at))
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End(trace.WithTimestamp(at))
}

// Link is the link to sc, or nothing when sc is invalid.
func Link(sc trace.SpanContext, ok bool) []trace.Link {
	if !ok || !sc.IsValid() {
		return nil
	}
	return []trace.Link{{SpanContext: sc}}
}
