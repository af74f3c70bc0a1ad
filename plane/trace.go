package plane

import (
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// DefaultTraceLinks is the size of each of a TraceLinks' two tables when
// NewTraceLinks is given none.
const DefaultTraceLinks = 4096

// TraceLinks connects the spans of one logical flow (ingress, the cycle
// that journals it, the effects that cycle publishes, their receipts, the
// cycle that consumes them) across the hops that pass through the durable
// store, where no context travels. A producer records the span of each
// inbox item it wrote, keyed by (world, inbox seq), and the cycle that
// journals the item links to it; a cycle records its span under each intent
// hash it published, and the effect or timer firing of that intent links
// to it.
//
// It is in-process only: share one between the hosts, adapter pools, timer
// workers, clients and ops of one process (HostConfig.Links,
// adapter.Config.Links, timer.Config.Links, ClientConfig.Links). A hop
// whose other end runs in another process simply has no link. Each table
// keeps its newest entries only, evicting the oldest first, so memory stays
// bounded however long the process runs; a link that was evicted is
// missing, never wrong. Links are best effort in one more way: an inbox
// item's writer is recorded once the store has answered it, so a cycle
// that reads the item before its writer got that answer misses the link.
// A nil *TraceLinks records and finds nothing.
type TraceLinks struct {
	mu     sync.Mutex
	inbox  linkTable[inboxKey]
	intent linkTable[string]
}

type inboxKey struct {
	world string
	seq   uint64
}

// NewTraceLinks returns empty tables holding at most size entries each
// (size <= 0: DefaultTraceLinks).
func NewTraceLinks(size int) *TraceLinks {
	if size <= 0 {
		size = DefaultTraceLinks
	}
	return &TraceLinks{inbox: newLinkTable[inboxKey](size), intent: newLinkTable[string](size)}
}

// PutInbox records sc as the span that wrote world's inbox item seq.
// Invalid span contexts are not kept; the plane records only the spans its
// tracer is recording (not a no-op's, which carry the caller's context).
func (t *TraceLinks) PutInbox(world string, seq uint64, sc trace.SpanContext) {
	if t == nil || !sc.IsValid() {
		return
	}
	t.mu.Lock()
	t.inbox.put(inboxKey{world, seq}, sc)
	t.mu.Unlock()
}

// Inbox returns the span that wrote world's inbox item seq, if recorded.
func (t *TraceLinks) Inbox(world string, seq uint64) (trace.SpanContext, bool) {
	if t == nil {
		return trace.SpanContext{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inbox.get(inboxKey{world, seq})
}

// PutIntent records sc as the span of the cycle that published intent
// hash (an effect or a timer).
func (t *TraceLinks) PutIntent(hash string, sc trace.SpanContext) {
	if t == nil || !sc.IsValid() {
		return
	}
	t.mu.Lock()
	t.intent.put(hash, sc)
	t.mu.Unlock()
}

// Intent returns the span of the cycle that published intent hash, if
// recorded.
func (t *TraceLinks) Intent(hash string) (trace.SpanContext, bool) {
	if t == nil {
		return trace.SpanContext{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.intent.get(hash)
}

// linkTable is a map bounded by a ring of its keys in insertion order: a
// new key past the bound evicts the oldest one, so eviction follows
// insertion order, never map iteration. A key recorded again keeps its
// age and takes the new span.
type linkTable[K comparable] struct {
	m    map[K]trace.SpanContext
	ring []K
	next int // the ring slot the next new key takes: the oldest key once full
}

func newLinkTable[K comparable](size int) linkTable[K] {
	return linkTable[K]{m: make(map[K]trace.SpanContext, size), ring: make([]K, size)}
}

func (t *linkTable[K]) put(k K, sc trace.SpanContext) {
	if _, ok := t.m[k]; ok {
		t.m[k] = sc
		return
	}
	if len(t.m) == len(t.ring) {
		delete(t.m, t.ring[t.next])
	}
	t.ring[t.next] = k
	t.next = (t.next + 1) % len(t.ring)
	t.m[k] = sc
}

func (t *linkTable[K]) get(k K) (trace.SpanContext, bool) {
	sc, ok := t.m[k]
	return sc, ok
}
