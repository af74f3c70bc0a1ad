package ledger_test

import (
	"errors"
	"testing"

	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/orrerytest"
	"github.com/orrery-run/orrery/workflow"
)

// An approved payout completes with its notice; a refused one completes
// unapproved; an invalid one fails at validate without waiting for a
// signal.
func TestPayoutWorkflow(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		n := orrerytest.NewNode(t, orrerytest.Workflows(ledger.PayoutDef()))
		ctx, def, c := n.Context(), ledger.PayoutDef(), n.Runs()
		for _, tc := range []struct {
			id       string
			in       ledger.Payout
			approved bool
			want     ledger.PayoutResult
		}{
			{"p-yes", ledger.Payout{Account: "alice", Amount: 50}, true, ledger.PayoutResult{Approved: true, Notice: "paid 50 to alice"}},
			{"p-no", ledger.Payout{Account: "bob", Amount: 7}, false, ledger.PayoutResult{Notice: "payout of 7 to bob refused"}},
		} {
			if err := def.Start(ctx, c, tc.id, tc.in); err != nil {
				t.Fatal(err)
			}
			if err := c.Signal(ctx, tc.id, "approved", tc.approved, "k-"+tc.id); err != nil {
				t.Fatal(err)
			}
			got, err := def.Result(ctx, c, tc.id)
			if err != nil || got != tc.want {
				t.Fatalf("%s: %+v, %v; want %+v", tc.id, got, err, tc.want)
			}
		}
		if err := def.Start(ctx, c, "p-bad", ledger.Payout{Account: "carol"}); err != nil {
			t.Fatal(err)
		}
		_, err := def.Result(ctx, c, "p-bad")
		var re *workflow.RunError
		if !errors.As(err, &re) || !errors.Is(err, workflow.ErrFailed) {
			t.Fatalf("an invalid payout: %v, want a failed run", err)
		}
		sum, err := c.Get(ctx, "p-bad")
		if err != nil || sum.Steps != 1 {
			t.Fatalf("the invalid payout ran %d steps (%v); want validate only", sum.Steps, err)
		}
	})
}
