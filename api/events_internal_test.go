package api

import (
	"slices"
	"testing"
)

// TestDiffEvents: a diff lists the new and changed rows in the new
// round's order, judged by their comparison bytes when they have them
// (a lease renewal alone is no change), then the removal of the rows
// that are gone, in the old round's order; signals without a kind are
// never removed.
func TestDiffEvents(t *testing.T) {
	row := func(key, kind, id, data, cmp string) sseEvent {
		e := sseEvent{key: key, kind: kind, id: id, name: "x", data: []byte(data)}
		if cmp != "" {
			e.cmp = []byte(cmp)
		}
		return e
	}
	prev := []sseEvent{
		row("queues", "", "", "q1", ""),
		row("world/a", "world", "a", "a-expires-1", "a"),
		row("world/b", "world", "b", "b1", ""),
		row("world/c", "world", "c", "c1", ""),
		row("worker/w", "worker", "w", "w1", ""),
		row("summary", "", "", "s1", ""),
	}
	next := []sseEvent{
		row("queues", "", "", "q1", ""),
		row("world/a", "world", "a", "a-expires-2", "a"), // renewed only
		row("world/b", "world", "b", "b2", ""),           // changed
		row("world/d", "world", "d", "d1", ""),           // new
		row("summary", "", "", "s1", ""),
	}
	var got []string
	for _, e := range diffEvents(prev, next) {
		got = append(got, e.name+" "+e.key+" "+string(e.data))
	}
	want := []string{
		"x world/b b2",
		"x world/d d1",
		`removed world/c {"kind":"world","id":"c"}`,
		`removed worker/w {"kind":"worker","id":"w"}`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("diff:\n got %q\nwant %q", got, want)
	}
	if d := diffEvents(next, next); len(d) != 0 {
		t.Fatalf("no change: %v", d)
	}
}

// TestSubscriberCoalesces: a row queued twice before the stream takes it
// is sent once, with the later data, at the place it was first queued.
func TestSubscriberCoalesces(t *testing.T) {
	h := &eventHub{}
	sub := &eventSub{pending: map[string]sseEvent{}, wake: make(chan struct{}, 1)}
	sub.queue(sseEvent{key: "a", data: []byte("1")})
	sub.queue(sseEvent{key: "b", data: []byte("1")})
	sub.queue(sseEvent{key: "a", data: []byte("2")})
	var got []string
	for _, e := range h.take(sub) {
		got = append(got, e.key+string(e.data))
	}
	if !slices.Equal(got, []string{"a2", "b1"}) {
		t.Fatalf("taken: %v", got)
	}
	if len(h.take(sub)) != 0 {
		t.Fatal("taken twice")
	}
}
