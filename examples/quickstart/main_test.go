package main

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/orrerytest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// The README's tutorial test, as written there: sign, remind, count, and
// the reminder fires once even though the node is killed before it is
// due; two minutes of virtual time take milliseconds.
func TestGuestbook(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, Guestbook(), orrerytest.ID("lobby"))
		w.SendKey(Sign{Name: "Ada"}, "ada")
		w.SendKey(Sign{Name: "Ada"}, "ada") // the same key: enqueued once
		w.Send(Remind{AfterMs: 120_000, Note: "close the book"})
		if n := orrerytest.Call[int](w, Count{}); n != 1 {
			t.Fatalf("Count = %d, want 1", n)
		}
		w.Crash() // kill -9, before the reminder is due
		w.Restart()
		w.Advance(2 * time.Minute)
		orrerytest.AssertState(w, Book{Names: []string{"Ada"}, Reminders: []string{"close the book"}})
		w.AssertTypes("Sign", "Remind", "Count", "Ring")
	})
}
