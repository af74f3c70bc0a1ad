package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/orrery-run/orrery/workflow"
)

// WorkflowPayout is the name of the payout workflow.
const WorkflowPayout = "ledger.payout"

// Payout is the payout workflow's input: pay Amount to Account.
type Payout struct {
	Account string
	Amount  int64
}

// PayoutResult is the payout workflow's output.
type PayoutResult struct {
	Approved bool
	Notice   string
}

// ErrBadPayout is the validate step's failure: no account, or an amount
// that is not positive. It fails the run at once (no retry would fix it).
var ErrBadPayout = errors.New("ledger: a payout needs an account and a positive amount")

// PayoutDef is a durable workflow run beside the worlds: it validates the
// payout (step "validate"), waits for an operator's "approved" signal
// (true or false) for as long as it takes, crashes and restarts included,
// and then records the notice it would send (step "notify"). Each step is
// journaled, so a run taken over by another node skips what is done.
//
//	orrery run start ledger.payout p-1 '{"Account":"alice","Amount":50}'
//	orrery run signal p-1 approved true --key approve-p-1
//	orrery run show p-1
func PayoutDef() *workflow.Def[Payout, PayoutResult] {
	return workflow.New(WorkflowPayout, 1, func(c *workflow.Ctx, in Payout) (PayoutResult, error) {
		// `orrery run query ID stage` asks where the payout is: answered
		// from a replay of its journal, nothing written.
		stage := "validating"
		if err := workflow.OnQuery(c, "stage", func() (string, error) { return stage, nil }); err != nil {
			return PayoutResult{}, err
		}
		defer func() { stage = "ended" }()
		if _, err := workflow.Step(c, "validate", func(context.Context) (bool, error) {
			if in.Account == "" || in.Amount <= 0 {
				return false, workflow.Permanent(ErrBadPayout)
			}
			return true, nil
		}); err != nil {
			return PayoutResult{}, err
		}
		stage = "awaiting approval"
		ok, err := workflow.Await[bool](c, "approved")
		if err != nil {
			return PayoutResult{}, err
		}
		notice, err := workflow.Step(c, "notify", func(context.Context) (string, error) {
			if !ok {
				return fmt.Sprintf("payout of %d to %s refused", in.Amount, in.Account), nil
			}
			return fmt.Sprintf("paid %d to %s", in.Amount, in.Account), nil
		})
		if err != nil {
			return PayoutResult{}, err
		}
		return PayoutResult{Approved: ok, Notice: notice}, nil
	})
}

// Workflows returns the example's workflows, for a node.Config or
// orrery.MainWith.
func Workflows() (*workflow.Workflows, error) { return workflow.NewWorkflows(PayoutDef()) }
