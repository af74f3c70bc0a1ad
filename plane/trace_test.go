package plane_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/plane"
)

// spanCtx is a valid span context numbered n.
func spanCtx(n uint64) trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	binary.BigEndian.PutUint64(tid[8:], n+1)
	binary.BigEndian.PutUint64(sid[:], n+1)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
}

// TestTraceLinksEvictOldestFirst: each table keeps at most its size; a new
// key past it evicts the oldest key recorded, in insertion order, and a
// key recorded again keeps its age but takes the new span.
func TestTraceLinksEvictOldestFirst(t *testing.T) {
	l := plane.NewTraceLinks(3)
	for i := range 3 {
		l.PutInbox("w", uint64(i), spanCtx(uint64(i)))
		l.PutIntent(fmt.Sprint("h", i), spanCtx(uint64(i)))
	}
	// Recorded again: the newest span, still the oldest key.
	l.PutInbox("w", 0, spanCtx(10))
	l.PutIntent("h0", spanCtx(10))
	if sc, ok := l.Inbox("w", 0); !ok || !sc.Equal(spanCtx(10)) {
		t.Fatalf("re-recorded inbox link: %v %v", sc, ok)
	}
	l.PutInbox("w", 3, spanCtx(3))
	l.PutIntent("h3", spanCtx(3))
	if _, ok := l.Inbox("w", 0); ok {
		t.Fatal("the oldest inbox key survived an insertion past the bound")
	}
	if _, ok := l.Intent("h0"); ok {
		t.Fatal("the oldest intent key survived an insertion past the bound")
	}
	for i := 1; i <= 3; i++ {
		if sc, ok := l.Inbox("w", uint64(i)); !ok || !sc.Equal(spanCtx(uint64(i))) {
			t.Fatalf("inbox link %d: %v %v", i, sc, ok)
		}
		if sc, ok := l.Intent(fmt.Sprint("h", i)); !ok || !sc.Equal(spanCtx(uint64(i))) {
			t.Fatalf("intent link %d: %v %v", i, sc, ok)
		}
	}
	// Keys are (world, seq): another world's seq 1 is another key.
	if _, ok := l.Inbox("v", 1); ok {
		t.Fatal("an inbox link of world w answered for world v")
	}
	l.PutInbox("w", 4, spanCtx(4))
	if _, ok := l.Inbox("w", 1); ok {
		t.Fatal("the second-oldest inbox key survived the next eviction")
	}
}

// TestTraceLinksKeepOnlyValidAndNilIsEmpty: an invalid span context (what
// the no-op provider gives) is never recorded, and a nil *TraceLinks
// records and finds nothing without failing.
func TestTraceLinksKeepOnlyValidAndNilIsEmpty(t *testing.T) {
	l := plane.NewTraceLinks(0)
	l.PutInbox("w", 1, trace.SpanContext{})
	l.PutIntent("h", trace.SpanContext{})
	if _, ok := l.Inbox("w", 1); ok {
		t.Fatal("an invalid inbox span context was recorded")
	}
	if _, ok := l.Intent("h"); ok {
		t.Fatal("an invalid intent span context was recorded")
	}
	var none *plane.TraceLinks
	none.PutInbox("w", 1, spanCtx(1))
	none.PutIntent("h", spanCtx(1))
	if _, ok := none.Inbox("w", 1); ok {
		t.Fatal("a nil TraceLinks found an inbox link")
	}
	if _, ok := none.Intent("h"); ok {
		t.Fatal("a nil TraceLinks found an intent link")
	}
}

// TestTraceLinksDefaultSizeHoldsThatMany: NewTraceLinks(0) holds
// DefaultTraceLinks entries per table before it evicts.
func TestTraceLinksDefaultSizeHoldsThatMany(t *testing.T) {
	l := plane.NewTraceLinks(0)
	for i := range plane.DefaultTraceLinks {
		l.PutIntent(fmt.Sprint(i), spanCtx(uint64(i)))
	}
	if _, ok := l.Intent("0"); !ok {
		t.Fatal("evicted before the default size was reached")
	}
	l.PutIntent("one more", spanCtx(0))
	if _, ok := l.Intent("0"); ok {
		t.Fatal("nothing evicted past the default size")
	}
}
