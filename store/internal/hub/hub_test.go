package hub

import (
	"errors"
	"slices"
	"testing"

	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/store"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// log is a Waker that records its wake-ups under a name.
type log struct {
	name string
	got  *[]string
}

func (l log) Unpark() { *l.got = append(*l.got, l.name) }

func TestNotifyWakesSubscribersOfTheTopicInRegistrationOrder(t *testing.T) {
	var h Hub
	var got []string
	for _, name := range []string{"a", "b", "c"} {
		if _, err := h.Add("watch", log{name, &got}, []string{store.TopicEffects}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Add("watch", log{"timers-only", &got}, []string{store.TopicTimers}); err != nil {
		t.Fatal(err)
	}
	for range 5 { // map order would shuffle at least one of five rounds
		got = nil
		h.Notify(store.TopicEffects)
		if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
			t.Fatalf("woke %v, want %v", got, want)
		}
	}
}

func TestStopRemovesOnlyItsOwnRegistrationEvenIfTheCallerReusesTopics(t *testing.T) {
	var h Hub
	var got []string
	topics := []string{store.TopicEffects}
	stopA, err := h.Add("watch", log{"a", &got}, topics)
	if err != nil {
		t.Fatal(err)
	}
	topics[0] = store.TopicTimers // the caller reuses its slice
	if _, err := h.Add("watch", log{"b", &got}, topics); err != nil {
		t.Fatal(err)
	}
	stopA()
	stopA() // idempotent
	h.Notify(store.TopicEffects, store.TopicTimers)
	if want := []string{"b"}; !slices.Equal(got, want) {
		t.Fatalf("woke %v, want %v", got, want)
	}
}

func TestAddRefusesBadArgumentsAndAClosedHub(t *testing.T) {
	var h Hub
	var got []string
	w := log{"a", &got}
	for name, c := range map[string]struct {
		w      store.Waker
		topics []string
	}{
		"nil waker":     {nil, []string{store.TopicEffects}},
		"no topic":      {w, nil},
		"unknown topic": {w, []string{"bogus"}},
		"empty inbox":   {w, []string{store.TopicInbox("")}},
	} {
		if _, err := h.Add("watch", c.w, c.topics); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := h.Add("watch", w, []string{store.TopicInbox("w1")}); err != nil {
		t.Fatal(err)
	}
	h.Close()
	h.Notify(store.TopicInbox("w1"))
	if len(got) != 0 {
		t.Fatalf("a closed hub woke %v", got)
	}
	if _, err := h.Add("watch", w, []string{store.TopicEffects}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Add after Close: %v, want ErrClosed", err)
	}
}
