package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

func quiet(sig *store.Signal) bool {
	select {
	case <-sig.C:
		return false
	default:
		return true
	}
}

// Hints are sent after the commit (a caller that returns from a write finds
// its hint already sent), coalesce, go only to their topic's wakers, never
// for a failed request; stop and Close end a registration.
func TestWatchHints(t *testing.T) {
	s, _, _ := openTemp(t)
	if _, err := s.CreateWorld(bg, "u", "w1", nil); err != nil {
		t.Fatal(err)
	}
	inbox, effects, leases := store.NewSignal(), store.NewSignal(), store.NewSignal()
	stopInbox, err := s.Watch(bg, inbox, store.TopicInbox("w1"))
	if err != nil {
		t.Fatal(err)
	}
	stopEffects, err := s.Watch(bg, effects, store.TopicEffects)
	if err != nil {
		t.Fatal(err)
	}
	defer stopEffects()
	stopLeases, err := s.Watch(bg, leases, store.TopicLeases, store.TopicAssignments)
	if err != nil {
		t.Fatal(err)
	}
	defer stopLeases()
	for i := 0; i < 3; i++ {
		if _, _, err := s.Enqueue(bg, "w1", store.InboxItem{Kind: "event"}); err != nil {
			t.Fatal(err)
		}
	}
	if quiet(inbox) {
		t.Fatal("no inbox hint when Enqueue returned")
	}
	if !quiet(inbox) {
		t.Fatal("three enqueues left more than one hint")
	}
	if !quiet(effects) || !quiet(leases) {
		t.Fatal("an inbox change hinted another topic")
	}
	if _, err := s.Publish(bg, "w1", 9, []vocab.Intent{{IntentHash: "i", Kind: "k"}}); err == nil {
		t.Fatal("publish without a lease succeeded")
	}
	if !quiet(effects) {
		t.Fatal("a failed publish hinted")
	}
	l, err := s.Acquire(bg, "w1", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if quiet(leases) {
		t.Fatal("no leases hint after Acquire")
	}
	if _, err := s.Publish(bg, "w1", l.Epoch, []vocab.Intent{{IntentHash: "i", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	if quiet(effects) {
		t.Fatal("no effects hint after Publish")
	}
	if _, err := s.SetWorldStatus(bg, "w1", store.WorldPaused, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if quiet(leases) {
		t.Fatal("no hint after a status change revoked the lease")
	}
	stopInbox()
	stopInbox() // idempotent
	if _, _, err := s.Enqueue(bg, "w1", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	if !quiet(inbox) {
		t.Fatal("a stopped watch was hinted")
	}

	if _, err := s.Watch(bg, store.NewSignal()); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Watch without a topic: %v, want ErrInvalid", err)
	}
	if _, err := s.Watch(bg, store.NewSignal(), "nonsense"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Watch of an unknown topic: %v, want ErrInvalid", err)
	}
	last := store.NewSignal()
	if _, err := s.Watch(bg, last, store.TopicInbox("w1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch(bg, store.NewSignal(), store.TopicEffects); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch on a closed store: %v, want ErrClosed", err)
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
	got, err := s.Append(bg, "run-1", []store.Record{r}, free)
	if err != nil || !got[0].PersistedAt.Equal(clock.Now()) {
		t.Fatalf("persistedAt %v, want the store clock %v", got[0].PersistedAt, clock.Now())
	}
	clock.Advance(time.Hour)
	if _, err := s.Append(bg, "run-1", []store.Record{rec("b")}, free); err != nil {
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
	if _, err := s.Append(bg, "run-1", []store.Record{a, b}, free); err != nil {
		t.Fatal(err)
	}
	evs, _ := s.Read(bg, "run-1", 0, 0)
	if evs[0].Payload != nil || evs[1].Payload == nil || len(evs[1].Payload) != 0 {
		t.Fatalf("payloads %#v, %#v", evs[0].Payload, evs[1].Payload)
	}
}
