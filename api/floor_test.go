package api_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
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
	testrig.CompactedWorld(t, r.Ctx, st, "elsewhere", "cw")

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
