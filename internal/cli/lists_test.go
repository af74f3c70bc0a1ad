package cli_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
)

// TestListsSearchFilterAndPage: world list searches by id and pages by
// --limit and --after, saying on stderr which --after reads the next page;
// workers list filters by status and shows it; a limit over the most is a
// usage error.
func TestListsSearchFilterAndPage(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, id := range []string{"alice", "malice", "bob"} {
		f.ok("world", "create", id, "--universe", ledger.UniverseAccount)
	}
	var ws []api.World
	f.okJSON(&ws, "world", "list", "--search", "ALI")
	if got := worldIDs(ws); !slices.Equal(got, []string{"alice", "malice"}) {
		t.Fatalf("world list --search ALI: %v", got)
	}
	f.okJSON(&ws, "world", "list", "--prefix", "b")
	if got := worldIDs(ws); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("world list --prefix b: %v", got)
	}
	var seen []string
	after := ""
	for range 5 {
		args := []string{"world", "list", "--limit", "2", "-o", "json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		r := f.run(args...)
		if r.code != cli.ExitOK {
			t.Fatalf("%v: %s", args, r)
		}
		var page []api.World
		if err := json.Unmarshal([]byte(r.out), &page); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, r.out)
		}
		seen = append(seen, worldIDs(page)...)
		next, more := strings.CutPrefix(strings.TrimSpace(r.err), "more: the next page is --after ")
		if !more {
			if r.err != "" {
				t.Fatalf("%v: stderr %q", args, r.err)
			}
			break
		}
		after = next
	}
	if !slices.Equal(seen, []string{"alice", "bob", "malice"}) {
		t.Fatalf("world list by pages of 2: %v", seen)
	}

	var workers []api.Worker
	f.okJSON(&workers, "workers", "list", "--status", "live")
	if len(workers) != 1 || workers[0].Status != api.WorkerLive {
		t.Fatalf("workers list --status live: %+v", workers)
	}
	f.okJSON(&workers, "worker", "list", "--status", "dead")
	if len(workers) != 0 {
		t.Fatalf("workers list --status dead: %+v", workers)
	}
	if r := row(t, f.ok("workers", "list"), workers0(t, f)); r[len(r)-1] != "live" {
		t.Fatalf("workers list's row ends %q, want its status live", r)
	}
	f.fail(cli.ExitUsage, "world", "list", "--limit", "1001")
	f.fail(cli.ExitUsage, "workers", "list", "--status", "sleepy")
}

func worldIDs(ws []api.World) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

// workers0 is the id of the fixture's one worker.
func workers0(t *testing.T, f *fixture) string {
	t.Helper()
	var ws []api.Worker
	f.okJSON(&ws, "workers", "list")
	if len(ws) != 1 {
		t.Fatalf("workers: %+v", ws)
	}
	return ws[0].ID
}
