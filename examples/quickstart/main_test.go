package main

import (
	"os"
	"strings"
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

// The README's tutorial shows TestGuestbook as it is written above: the
// test a reader copies is the one that passes here.
func TestTheReadmeShowsThisTest(t *testing.T) {
	src, err := os.ReadFile("main_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func TestGuestbook(")
	if start < 0 {
		t.Fatal("main_test.go has no TestGuestbook")
	}
	end := start + strings.Index(s[start:], "\n}\n") + 3
	if !strings.Contains(string(readme), s[start:end]) {
		t.Fatalf("README.md does not show TestGuestbook as main_test.go has it:\n%s", s[start:end])
	}
}
