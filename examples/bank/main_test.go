package main

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// TestBankRestartsCrashedAuditorAndKeepsLedgerState runs the example in
// virtual time and checks the story it tells: the auditor crashes on the
// suspicious transfer, the supervisor restarts it (a new instance), the
// ledger keeps its balances, and the tree shuts down cleanly.
func TestBankRestartsCrashedAuditorAndKeepsLedgerState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		o, err := run(&out)
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		text := out.String()
		for _, want := range []string{
			"withdraw: bob -> error: insufficient funds (balance 50)",
			"stopped with err(auditor: cannot explain a transfer of 5000000 to mallory)",
			"supervisor: restart    auditor",
			"balance: alice -> balance 71",
			"supervisor outcome: ok",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("output lacks %q:\n%s", want, text)
			}
		}
		if strings.Count(text, ": started") != 2 {
			t.Errorf("want two auditor instances started (original and restart):\n%s", text)
		}
		if !o.IsOk() {
			t.Errorf("system outcome %v, want ok", o)
		}
	})
}
