package projector_test

import (
	"context"
	"strconv"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

var (
	bg = context.Background()
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// spec is a lifecycle event before it has a stream position.
type spec struct {
	typ     string
	step    string
	attempt uint64
	err     string // the payload's "error" entry, when set
}

// errPayload is the payload of a failure that reports msg (or an empty
// map when msg is empty).
func errPayload(tb fataler, msg string) []byte {
	tb.Helper()
	if msg == "" {
		return event.EmptyPayload()
	}
	b, err := event.Marshal(map[string]any{"error": msg})
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return b
}

// envelope builds the valid, normalised envelope of s in run (stream)
// id, executing plan at version ver.
func envelope(tb fataler, id, plan string, ver uint64, s spec) event.Envelope {
	tb.Helper()
	e := event.Envelope{
		StreamID: id, EventType: s.typ, StepID: s.step, LogicalAttemptID: s.attempt,
		PlanID: plan, PlanVersion: ver, EmittedAt: t0, Payload: errPayload(tb, s.err),
	}
	e.Normalize()
	e.EventID = e.IdempotencyKey
	if err := e.Validate(); err != nil {
		tb.Fatalf("envelope %+v: %v", s, err)
	}
	return e
}

// appendFree appends specs to a free stream (a run no world owns).
func appendFree(tb fataler, st store.Journal, id string, specs ...spec) []store.Appended {
	tb.Helper()
	evs := make([]event.Envelope, len(specs))
	for i, s := range specs {
		evs[i] = envelope(tb, id, "wf", 1, s)
	}
	got, err := st.Append(bg, id, evs, store.AppendOptions{Kind: store.FreeStream})
	if err != nil {
		tb.Fatalf("append to %s: %v", id, err)
	}
	return got
}

// steps returns n distinct completed single-attempt steps, each a
// StepStarted and a StepCompleted: 2n events.
func steps(from, n int) []spec {
	var out []spec
	for i := from; i < from+n; i++ {
		id := "s" + strconv.Itoa(i)
		out = append(out, spec{typ: event.StepStarted, step: id, attempt: 1}, spec{typ: event.StepCompleted, step: id, attempt: 1})
	}
	return out
}

// cancelled returns a context that has ended.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(bg)
	cancel()
	return ctx
}
