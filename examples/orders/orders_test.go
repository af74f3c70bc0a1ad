package orders_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/examples/orders"
	"github.com/orrery-run/orrery/orrerytest"
	"github.com/orrery-run/orrery/workflow"
)

func order(id string) orders.Order {
	return orders.Order{ID: id, Customer: "ada", Amount: 120, Lines: []orders.Line{
		{SKU: "a", Qty: 1}, {SKU: "b", Qty: 2}, {SKU: "c", Qty: 3}, {SKU: "d", Qty: 4}, {SKU: "e", Qty: 5}}}
}

// shop is a node running the saga beside a fake payment service.
type shop struct {
	n    *orrerytest.Node
	pay  *orrerytest.Fake
	def  *workflow.Def[orders.Order, orders.Result]
	runs func() *workflow.Client
}

func newShop(t *testing.T, pay *orrerytest.Fake) *shop {
	if pay == nil {
		pay = orrerytest.NewFake(orders.KindCharge, orders.KindRefund).Default(orrerytest.OK(struct{}{}))
	}
	wfs := orders.Workflows(orders.PickAll)
	n := orrerytest.NewNode(t, orrerytest.Workflows(wfs...), orrerytest.Fakes(pay))
	return &shop{n: n, pay: pay, def: wfs[0].(*workflow.Def[orders.Order, orders.Result]), runs: n.Runs}
}

// keys counts the payment service's executions by idempotency key.
func (s *shop) keys(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, a := range s.pay.Asked() {
		var p orders.Payment
		if err := a.Decode(&p); err != nil {
			t.Fatal(err)
		}
		out[a.Kind+" "+p.Key]++
	}
	return out
}

func (s *shop) stage(t *testing.T, id string) string {
	t.Helper()
	v, ok, err := s.runs().GetEvent(s.n.Context(), id, "stage")
	if err != nil || !ok {
		return ""
	}
	var st string
	if err := event.Unmarshal(v, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (s *shop) awaitShipment(t *testing.T, id string) {
	t.Helper()
	s.n.Eventually(id+" awaits its shipment", time.Minute, func() bool { return s.stage(t, id) == "awaiting shipment" })
}

func TestAnOrderIsFulfilledWithItsLinesPickedSideBySide(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		s := newShop(t, nil)
		ctx := s.n.Context()
		began := time.Now()
		if err := s.def.Start(ctx, s.runs(), "o-1", order("o-1")); err != nil {
			t.Fatal(err)
		}
		s.awaitShipment(t, "o-1")
		raw, err := s.runs().Query(ctx, "o-1", "progress")
		if err != nil {
			t.Fatal(err)
		}
		var p orders.Progress
		if err := event.Unmarshal(raw, &p); err != nil || p.Stage != "awaiting shipment" || p.Picked != 15 {
			t.Fatalf("progress %+v, %v", p, err)
		}
		if err := s.runs().Signal(ctx, "o-1", "shipped", orders.Shipment{Carrier: "ups"}, "ship-o-1"); err != nil {
			t.Fatal(err)
		}
		got, err := s.def.Result(ctx, s.runs(), "o-1")
		if err != nil || got != (orders.Result{Picked: 15, Carrier: "ups"}) {
			t.Fatalf("result %+v, %v", got, err)
		}
		if k := s.keys(t); len(k) != 1 || k[orders.KindCharge+" o-1/charge"] != 1 {
			t.Fatalf("payments %v, want one charge", k)
		}
		// Five children of no delay each: well within one virtual minute.
		if took := time.Since(began); took > time.Minute {
			t.Fatalf("the order took %v of virtual time", took)
		}
	})
}

func TestAnOrderNotShippedInTwoMinutesIsRefunded(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		s := newShop(t, nil)
		ctx := s.n.Context()
		if err := s.def.Start(ctx, s.runs(), "o-2", order("o-2")); err != nil {
			t.Fatal(err)
		}
		s.awaitShipment(t, "o-2")
		began := time.Now()
		s.n.Advance(orders.ShipWithin)
		_, err := s.def.Result(ctx, s.runs(), "o-2")
		if !errors.Is(err, workflow.ErrFailed) || !strings.Contains(err.Error(), "not shipped in time") {
			t.Fatalf("result %v, want failed: not shipped", err)
		}
		if took := time.Since(began); took < orders.ShipWithin {
			t.Fatalf("refunded after %v, before the two minutes", took)
		}
		if k := s.keys(t); k[orders.KindCharge+" o-2/charge"] != 1 || k[orders.KindRefund+" o-2/refund"] != 1 || len(k) != 2 {
			t.Fatalf("payments %v, want one charge and one refund", k)
		}
		// A shipment that comes late finds the order ended.
		if err := s.runs().Signal(ctx, "o-2", "shipped", orders.Shipment{Carrier: "ups"}, "late"); !errors.Is(err, workflow.ErrFinished) {
			t.Fatalf("a late shipment: %v", err)
		}
	})
}

func TestACancelledOrderIsRefunded(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		s := newShop(t, nil)
		ctx := s.n.Context()
		if err := s.def.Start(ctx, s.runs(), "o-3", order("o-3")); err != nil {
			t.Fatal(err)
		}
		s.awaitShipment(t, "o-3")
		if err := s.runs().Cancel(ctx, "o-3", "the customer changed their mind"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.def.Result(ctx, s.runs(), "o-3"); !errors.Is(err, workflow.ErrCancelled) {
			t.Fatalf("result %v, want cancelled", err)
		}
		if k := s.keys(t); k[orders.KindCharge+" o-3/charge"] != 1 || k[orders.KindRefund+" o-3/refund"] != 1 || len(k) != 2 {
			t.Fatalf("payments %v, want one charge and one refund", k)
		}
		if st := s.stage(t, "o-3"); st != "compensated" {
			t.Fatalf("stage %q", st)
		}
	})
}

func TestARefusedPaymentReleasesTheStockAndChargesNothing(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		pay := orrerytest.NewFake(orders.KindCharge, orders.KindRefund).
			Script(orders.KindCharge, orrerytest.Permanent("card declined")).Default(orrerytest.OK(struct{}{}))
		s := newShop(t, pay)
		ctx := s.n.Context()
		if err := s.def.Start(ctx, s.runs(), "o-4", order("o-4")); err != nil {
			t.Fatal(err)
		}
		_, err := s.def.Result(ctx, s.runs(), "o-4")
		if !errors.Is(err, workflow.ErrFailed) || !strings.Contains(err.Error(), "card declined") {
			t.Fatalf("result %v, want failed: card declined", err)
		}
		if k := s.keys(t); k[orders.KindRefund+" o-4/refund"] != 0 {
			t.Fatalf("payments %v: a refund of a declined charge", k)
		}
		if st := s.stage(t, "o-4"); st != "compensated" {
			t.Fatalf("stage %q", st)
		}
	})
}

func TestAnOrderSurvivesACrashAndChargesOnce(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		s := newShop(t, nil)
		ctx := s.n.Context()
		if err := s.def.Start(ctx, s.runs(), "o-5", order("o-5")); err != nil {
			t.Fatal(err)
		}
		s.awaitShipment(t, "o-5")
		s.n.Crash()
		s.n.Restart()
		if err := s.runs().Signal(ctx, "o-5", "shipped", orders.Shipment{Carrier: "dhl"}, "ship-o-5"); err != nil {
			t.Fatal(err)
		}
		got, err := s.def.Result(ctx, s.runs(), "o-5")
		if err != nil || got != (orders.Result{Picked: 15, Carrier: "dhl"}) {
			t.Fatalf("result %+v, %v", got, err)
		}
		if k := s.keys(t); len(k) != 1 || k[orders.KindCharge+" o-5/charge"] != 1 {
			t.Fatalf("payments %v, want one charge", k)
		}
	})
}
