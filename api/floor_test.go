package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// TestJournalBelowTheCompactionFloorIsGone: a journal page asked from below
// the compaction floor is 410 compacted naming the floor (errors.Is
// store.ErrCompacted on the client), never the records left above it; a
// page from the floor on is whole, and the world's view shows the floor.
func TestJournalBelowTheCompactionFloorIsGone(t *testing.T) {
	st := memstore.New()
	r := newRig(t, rigOptions{store: st, workers: []string{}})
	// A universe no orchestrator places, written straight to the store.
	if _, err := st.CreateWorld(r.Ctx, "elsewhere", "cw", nil); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(r.Ctx, "cw", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		e := event.Envelope{EventType: "Noted", StepID: fmt.Sprint("s", i), LogicalAttemptID: 1, PlanID: "p", PlanVersion: 1,
			EmittedAt: time.Unix(1, 0), Payload: event.EmptyPayload()}
		e.Normalize()
		e.EventID = e.IdempotencyKey
		if _, err := st.Append(r.Ctx, "cw", []event.Envelope{e}, store.AppendOptions{Fence: &store.Fence{World: "cw", Epoch: l.Epoch}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutSnapshot(r.Ctx, "cw", l.Epoch, store.Snapshot{Height: 8, State: []byte{0xa0}, StateHash: "h8"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Compact(r.Ctx, "cw", l.Epoch, 0); err != nil {
		t.Fatal(err)
	}

	for _, after := range []uint64{0, 3, 7} {
		_, err := r.Client.Journal(r.Ctx, "cw", after, 0, 0)
		e := apiError(t, err, http.StatusGone, api.CodeCompacted)
		if !errors.Is(err, store.ErrCompacted) || e.Details["floor"] != float64(8) {
			t.Fatalf("journal after %d: %v details %v; want ErrCompacted with floor 8", after, err, e.Details)
		}
	}
	page, err := r.Client.Journal(r.Ctx, "cw", 8, 0, 0)
	if err != nil || len(page.Records) != 2 || page.Records[0].Height != 9 || page.Next != 10 {
		t.Fatalf("journal from the floor: %+v, %v", page, err)
	}
	if v, err := r.Client.GetWorld(r.Ctx, "cw"); err != nil || v.JournalFloor != 8 || v.Head != 10 {
		t.Fatalf("view: floor %d head %d, %v; want 8 and 10", v.JournalFloor, v.Head, err)
	}
}
