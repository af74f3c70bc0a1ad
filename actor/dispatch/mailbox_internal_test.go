package dispatch

import (
	"slices"
	"testing"
)

// The ring is a FIFO through growth, wrap-around and shrinking, and it lets
// go of consumed payloads.
func TestMailboxFIFO(t *testing.T) {
	var m mailbox
	var model []int
	next := 0
	// A deterministic walk: bursts of pushes and pops of varying size.
	for round := range 200 {
		for range (round * 7) % 53 {
			m.push(Message{Type: "t", Payload: next})
			model = append(model, next)
			next++
		}
		for range (round * 11) % 61 {
			msg, ok := m.pop()
			if len(model) == 0 {
				if ok {
					t.Fatalf("pop from empty mailbox returned %v", msg)
				}
				continue
			}
			if !ok || msg.Payload != model[0] {
				t.Fatalf("round %d: pop = %v, %v; want %v", round, msg.Payload, ok, model[0])
			}
			model = model[1:]
		}
		if m.len() != len(model) {
			t.Fatalf("len %d, model %d", m.len(), len(model))
		}
		if len(m.ring) > minRing && m.n < len(m.ring)/4 {
			t.Fatalf("ring of %d holds %d: not shrunk", len(m.ring), m.n)
		}
		for i, msg := range m.ring {
			// Slots outside [head, head+n) must hold nothing.
			if (i-m.head+len(m.ring))%len(m.ring) >= m.n && msg != (Message{}) {
				t.Fatalf("slot %d retains %v after pop", i, msg)
			}
		}
	}
	for len(model) > 0 {
		msg, _ := m.pop()
		if msg.Payload != model[0] {
			t.Fatalf("drain: %v, want %v", msg.Payload, model[0])
		}
		model = model[1:]
	}
	if _, ok := m.pop(); ok || !slices.Equal(model, nil) {
		t.Fatal("mailbox not empty at the end")
	}
}
