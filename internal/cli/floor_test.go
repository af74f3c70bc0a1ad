package cli_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/store"
)

// TestJournalBelowTheCompactionFloor: reading a journal from below its
// compaction floor exits 4 naming the compaction; tail starts at the floor
// and says that the records below it are compacted.
func TestJournalBelowTheCompactionFloor(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	st := f.st
	// A universe no node runs, written straight to the store.
	if _, err := st.CreateWorld(f.ctx, "elsewhere", "cw", nil); err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(f.ctx, "cw", "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		e := event.Envelope{EventType: "Noted", StepID: fmt.Sprint("s", i), LogicalAttemptID: 1, PlanID: "p", PlanVersion: 1,
			EmittedAt: time.Unix(1, 0), Payload: event.EmptyPayload()}
		e.Normalize()
		e.EventID = e.IdempotencyKey
		if _, err := st.Append(f.ctx, "cw", []event.Envelope{e}, store.AppendOptions{Fence: &store.Fence{World: "cw", Epoch: l.Epoch}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutSnapshot(f.ctx, "cw", l.Epoch, store.Snapshot{Height: 8, State: []byte{0xa0}, StateHash: "h8"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Compact(f.ctx, "cw", l.Epoch, 0); err != nil {
		t.Fatal(err)
	}

	r := f.fail(cli.ExitConflict, "journal", "read", "cw")
	if !strings.Contains(r.err, "compacted") || !strings.Contains(r.err, "8") {
		t.Fatalf("journal read below the floor: %q, want the compaction and its floor named", r.err)
	}
	r = f.run("journal", "tail", "cw", "-n", "5")
	if r.code != cli.ExitOK || !strings.Contains(r.err, "records up to height 8 are compacted") {
		t.Fatalf("journal tail -n 5: %s", r)
	}
	if rs := rows(r.out); len(rs) != 3 || !hasPrefix(rs[1], "9") || !hasPrefix(rs[2], "10") {
		t.Fatalf("journal tail -n 5 printed:\n%s\nwant the header and heights 9 and 10", r.out)
	}
}
