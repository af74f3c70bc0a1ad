package cli_test

import (
	"strings"
	"testing"

	"github.com/orrery-run/orrery/internal/cli"
	"github.com/orrery-run/orrery/internal/testrig"
)

// TestJournalBelowTheCompactionFloor: reading a journal from below its
// compaction floor exits 4 naming the compaction; tail starts at the floor
// and says that the records below it are compacted.
func TestJournalBelowTheCompactionFloor(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	st := f.st
	// A universe no node runs, written straight to the store.
	testrig.CompactedWorld(t, f.ctx, st, "elsewhere", "cw")

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
