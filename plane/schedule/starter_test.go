package schedule_test

import (
	"context"
	"errors"
	"testing"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/schedule"
	"github.com/orrery-run/orrery/store/memstore"
)

// TestANodeThatCannotStartATickLeavesItForOneThatCan: every orchestrating
// node runs a scheduler and any of them may win a tick, so a node whose
// binary lacks the tick's workflow (or runs no workflows at all), or the
// target world's definition, must answer with a retryable error — the
// tick stays pending for a node that carries it — never ErrPermanent,
// which would count the tick failed and drop it for the whole cluster.
func TestANodeThatCannotStartATickLeavesItForOneThatCan(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	if _, err := st.CreateWorld(ctx, "elsewhere.world", "w1", nil); err != nil {
		t.Fatal(err)
	}
	ops, err := plane.NewOps(st, plane.Kernels{})
	if err != nil {
		t.Fatal(err)
	}
	n := schedule.NodeStarter{Ops: ops}
	if err := n.StartRun(ctx, "payout", "sched.s.1", nil); err == nil || errors.Is(err, schedule.ErrPermanent) {
		t.Errorf("a node with no workflows: StartRun = %v, want a retryable error", err)
	}
	if err := n.SendEvent(ctx, "w1", "T", nil, "schedule:s:1"); err == nil || errors.Is(err, schedule.ErrPermanent) {
		t.Errorf("a node without the world's definition: SendEvent = %v, want a retryable error", err)
	}
}
