package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

func hinted(ch <-chan struct{}) bool {
	select {
	case _, ok := <-ch:
		return ok
	case <-time.After(5 * time.Second):
		return false
	}
}

func quiet(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// Hints fire after the commit, coalesce into one, only for changes of their
// topic, never for a failed request; the channel closes on stop, on ctx and
// on Close.
func TestWatchHints(t *testing.T) {
	s, _, _ := openTemp(t)
	if _, err := s.CreateWorld(bg, "u", "w1", nil); err != nil {
		t.Fatal(err)
	}
	inbox, stopInbox := s.Watch(bg, store.TopicInbox("w1"))
	effects, stopEffects := s.Watch(bg, store.TopicEffects)
	defer stopEffects()
	for i := 0; i < 3; i++ {
		if _, _, err := s.Enqueue(bg, "w1", store.InboxItem{Kind: "event"}); err != nil {
			t.Fatal(err)
		}
	}
	if !hinted(inbox) {
		t.Fatal("no inbox hint after Enqueue")
	}
	if !quiet(inbox) {
		t.Fatal("three enqueues left more than one hint")
	}
	if !quiet(effects) {
		t.Fatal("an inbox change hinted the effects topic")
	}
	if _, err := s.Publish(bg, "w1", 9, []store.Intent{{IntentHash: "i", Kind: "k"}}); err == nil {
		t.Fatal("publish without a lease succeeded")
	}
	if !quiet(effects) {
		t.Fatal("a failed publish hinted")
	}
	stopInbox()
	if _, ok := <-inbox; ok {
		t.Fatal("stopped watch still open")
	}
	stopInbox() // idempotent

	ctx, cancel := context.WithCancel(bg)
	timers, _ := s.Watch(ctx, store.TopicTimers)
	cancel()
	select {
	case _, ok := <-timers:
		if ok {
			t.Fatal("hint instead of close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch not closed by its context")
	}

	last, _ := s.Watch(bg, store.TopicInbox("w1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-last; ok {
		t.Fatal("watch open after Close")
	}
	if after, _ := s.Watch(bg, "x"); !func() bool { _, ok := <-after; return !ok }() {
		t.Fatal("Watch on a closed store returned an open channel")
	}
}

// The store clock, not the caller's, stamps persistedAt, enqueue times and
// expiries; Now reads it.
func TestStoreClockDecides(t *testing.T) {
	s, clock, _ := openTemp(t)
	now, err := s.Now(bg)
	if err != nil || !now.Equal(clock.Now()) {
		t.Fatalf("Now = %v, %v; want %v", now, err, clock.Now())
	}
	r := rec("a")
	r.EmittedAt = time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)
	r.PersistedAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // ignored
	got, err := s.Append(bg, "run-1", []store.Record{r}, store.AppendOptions{})
	if err != nil || !got[0].PersistedAt.Equal(clock.Now()) {
		t.Fatalf("persistedAt %v, want the store clock %v", got[0].PersistedAt, clock.Now())
	}
	clock.Advance(time.Hour)
	if _, err := s.Append(bg, "run-1", []store.Record{rec("b")}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	evs, _ := s.Read(bg, "run-1", 0, 0)
	if !evs[0].EmittedAt.Equal(r.EmittedAt) || !evs[1].PersistedAt.Equal(clock.Now()) {
		t.Fatalf("emittedAt %v, persistedAt %v", evs[0].EmittedAt, evs[1].PersistedAt)
	}
	win, err := s.ReadWindow(bg, "run-1", clock.Now(), clock.Now().Add(time.Nanosecond), 0)
	if err != nil || len(win) != 1 || win[0].EventID != "ev-b" {
		t.Fatalf("window = %+v, %v", win, err)
	}
	var zero []store.Record
	if zero, err = s.ReadWindow(bg, "run-1", time.Time{}, time.Time{}, 0); err != nil || len(zero) != 0 {
		t.Fatalf("empty window = %+v, %v", zero, err)
	}
}

// Empty and nil byte slices both round-trip.
func TestEmptyAndNilPayloadsRoundTrip(t *testing.T) {
	s, _, _ := openTemp(t)
	a, b := rec("a"), rec("b")
	a.Payload, b.Payload = nil, []byte{}
	if _, err := s.Append(bg, "run-1", []store.Record{a, b}, store.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	evs, _ := s.Read(bg, "run-1", 0, 0)
	if evs[0].Payload != nil || evs[1].Payload == nil || len(evs[1].Payload) != 0 {
		t.Fatalf("payloads %#v, %#v", evs[0].Payload, evs[1].Payload)
	}
}
