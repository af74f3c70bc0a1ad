package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/internal/cli"
)

// TestWorldJournalAndStateAt: `world journal` shows each record's input
// value and a call's reply; `world state --at` shows the state after the
// step at that height; a height above the head is a usage error (exit 2).
func TestWorldJournalAndStateAt(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.ok("world", "create", "alice", "--universe", ledger.UniverseAccount)
	f.ok("world", "call", "alice", "ledger/Open", `{"Owner":"alice"}`)
	f.ok("world", "send", "alice", "ledger/Deposit", `{"Amount":100,"Ref":"dep-1"}`, "--key", "dep-1")
	if got := f.ok("world", "call", "alice", "ledger/Balance"); got != "100\n" {
		t.Fatalf("Balance replied %q", got)
	}

	out := f.ok("world", "journal", "alice")
	for _, want := range []string{
		"#1 ", "ledger/Open", `input    {"Owner":"alice"}`,
		"#2 ", `input    {"Amount":100,"Ref":"dep-1"}`,
		"#3 ", "ledger/Balance", "reply    100",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("world journal lacks %q:\n%s", want, out)
		}
	}
	var rec api.Record
	f.okJSON(&rec, "world", "journal", "alice", "--height", "3")
	if rec.Height != 3 || rec.Reply == nil || string(rec.Reply.Value) != "100" || !rec.Derived {
		t.Fatalf("world journal --height 3 -o json: %+v", rec)
	}

	var s api.State
	f.okJSON(&s, "world", "state", "alice", "--at", "1")
	var a ledger.Account
	if err := json.Unmarshal(s.State, &a); err != nil || s.Height != 1 || a.Balance != 0 {
		t.Fatalf("state --at 1: %+v %+v %v", s, a, err)
	}
	f.okJSON(&s, "world", "state", "alice", "--at", "2")
	if err := json.Unmarshal(s.State, &a); err != nil || s.Height != 2 || a.Balance != 100 {
		t.Fatalf("state --at 2: %+v %+v %v", s, a, err)
	}
	if out := f.ok("world", "state", "alice", "--at", "2"); !strings.HasPrefix(out, "# height 2, state hash "+s.Hash) {
		t.Fatalf("state --at 2 printed %q", out)
	}
	f.okJSON(&s, "world", "state", "alice", "--at", "0")
	var initial ledger.Account
	if err := json.Unmarshal(s.State, &initial); err != nil || s.Height != 0 || initial.Owner != "" || initial.Balance != 0 {
		t.Fatalf("state --at 0: %+v %+v %v", s, initial, err)
	}
	f.fail(cli.ExitUsage, "world", "state", "alice", "--at", "-1")
	r := f.fail(cli.ExitUsage, "world", "state", "alice", "--at", "99")
	if !strings.Contains(r.err, "above the journal head") {
		t.Fatalf("state --at 99: %q", r.err)
	}
}
