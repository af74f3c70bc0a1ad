package testrig

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// CompactedWorld creates world id in universe straight on st (no host
// runs it), appends ten records, snapshots it at height 8 and compacts
// it: a journal whose floor is 8, with records left above it.
func CompactedWorld(t testing.TB, ctx context.Context, st store.Store, universe, id string) {
	t.Helper()
	if _, err := st.CreateWorld(ctx, universe, id, nil); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(ctx, id, "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		e := event.Envelope{EventType: "Noted", StepID: fmt.Sprint("s", i), LogicalAttemptID: 1, PlanID: "p", PlanVersion: 1,
			EmittedAt: time.Unix(1, 0), Payload: event.EmptyPayload()}
		e.Normalize()
		e.EventID = e.IdempotencyKey
		if _, err := st.Append(ctx, id, []event.Envelope{e}, store.AppendOptions{Fence: &store.Fence{World: id, Epoch: l.Epoch}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutSnapshot(ctx, id, l.Epoch, store.Snapshot{Height: 8, State: []byte{0xa0}, StateHash: "h8"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Compact(ctx, id, l.Epoch, 0); err != nil {
		t.Fatal(err)
	}
}
