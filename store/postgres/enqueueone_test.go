package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// An Enqueue alone in its delivery batch (an idle store) takes one round
// trip, and answers as the batch path does: the next seq, a live key's
// first seq as a duplicate, a paused world accepting, an archived or
// unknown one refusing with nothing written.
func TestEnqueueAloneTakesOneRoundTrip(t *testing.T) {
	t.Parallel()
	s := openStore(t, "", nil)
	spawnCached(t, s, "w", 2) // seqs 1 and 2, keys in-0 and in-1
	type answer struct {
		seq uint64
		dup bool
		err error
	}
	enqueue := func(world, key string) (answer, uint64) {
		var a answer
		rt, _ := trips(s, func() {
			a.seq, a.dup, a.err = s.Enqueue(bg, world, store.InboxItem{Kind: "event", Payload: []byte("p"), DedupeKey: key})
		})
		return a, rt
	}
	for _, c := range []struct {
		world, key string
		want       answer
	}{
		{"w", "", answer{seq: 3}},
		{"w", "k", answer{seq: 4}},
		{"w", "k", answer{seq: 4, dup: true}},
		{"w", "in-0", answer{seq: 1, dup: true}},
		{"nobody", "", answer{err: store.ErrWorldNotFound}},
	} {
		got, rt := enqueue(c.world, c.key)
		if got.seq != c.want.seq || got.dup != c.want.dup || !errors.Is(got.err, c.want.err) || (c.want.err == nil) != (got.err == nil) {
			t.Fatalf("Enqueue(%s, key %q) = %+v, want %+v", c.world, c.key, got, c.want)
		}
		if rt != 1 {
			t.Fatalf("Enqueue(%s, key %q) took %d round trips, want 1", c.world, c.key, rt)
		}
	}
	if _, err := s.SetWorldStatus(bg, "w", store.WorldPaused, "test"); err != nil {
		t.Fatal(err)
	}
	if got, _ := enqueue("w", ""); got.err != nil || got.seq != 5 {
		t.Fatalf("Enqueue to a paused world = %+v, want seq 5", got)
	}
	if _, err := s.SetWorldStatus(bg, "w", store.WorldArchived, "test"); err != nil {
		t.Fatal(err)
	}
	if got, _ := enqueue("w", ""); !errors.Is(got.err, store.ErrWorldArchived) {
		t.Fatalf("Enqueue to an archived world = %+v, want ErrWorldArchived", got)
	}
	items, err := s.ReadInbox(bg, "w", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 5 || items[3].DedupeKey != "k" || items[4].Seq != 5 || items[4].EnqueuedAt.Before(items[0].EnqueuedAt) ||
		time.Since(items[4].EnqueuedAt) > time.Hour {
		t.Fatalf("inbox after the Enqueues = %+v, want 5 items, the 4th keyed k", items)
	}
}
