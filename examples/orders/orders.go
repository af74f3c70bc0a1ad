// Package orders is an order-fulfilment saga written with the workflow
// package and no tricks: reserve the stock, charge the payment (an effect
// with an idempotency key), pick every line item in a child run of its
// own, all side by side, wait for "shipped" up to two minutes, confirm;
// and compensate (refund, release) when a step fails, when the shipment
// does not come in time, or when the order is cancelled. A progress query
// and a published stage say how the order is doing.
package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/workflow"
)

// Effect kinds the payment service serves.
const (
	KindCharge = "payment.charge"
	KindRefund = "payment.refund"
)

// Workflow names.
const (
	WorkflowFulfil = "orders.fulfil"
	WorkflowPick   = "orders.pick"
)

// ShipWithin is how long an order waits for its "shipped" signal.
const ShipWithin = 2 * time.Minute

// Line is one line item of an order.
type Line struct {
	SKU string
	Qty int
}

// Order is the saga's input.
type Order struct {
	ID       string
	Customer string
	Amount   int
	Lines    []Line
}

// Payment is the params of a charge or a refund: Key is the idempotency
// key the payment service applies once.
type Payment struct {
	Key      string
	Customer string
	Amount   int
}

// Shipment is the "shipped" signal's value.
type Shipment struct {
	Carrier string
}

// Result is a fulfilled order.
type Result struct {
	Picked  int
	Carrier string
}

// Progress is the answer of the "progress" query.
type Progress struct {
	Stage  string
	Picked int
}

// ErrNotShipped fails an order whose shipment did not come in time (it is
// refunded first).
var ErrNotShipped = errors.New("orders: not shipped in time")

// PickDef is the child run of one line item: it picks the line's
// quantity in the warehouse.
func PickDef(pick func(ctx context.Context, l Line) (int, error)) *workflow.Def[Line, int] {
	return workflow.New(WorkflowPick, 1, func(c *workflow.Ctx, l Line) (int, error) {
		return workflow.Step(c, "pick", func(ctx context.Context) (int, error) { return pick(ctx, l) },
			workflow.WithRetry(workflow.RetryPolicy{MaxAttempts: 3}))
	})
}

// FulfilDef is the saga.
func FulfilDef(pick *workflow.Def[Line, int]) *workflow.Def[Order, Result] {
	return workflow.New(WorkflowFulfil, 1, func(c *workflow.Ctx, o Order) (Result, error) {
		p := Progress{Stage: "reserving"}
		if err := workflow.OnQuery(c, "progress", func() (Progress, error) { return p, nil }); err != nil {
			return Result{}, err
		}
		stage := func(s string) error {
			p.Stage = s
			return workflow.SetEvent(c, "stage", s)
		}
		if _, err := workflow.Step(c, "reserve", func(context.Context) (int, error) { return len(o.Lines), nil }); err != nil {
			return Result{}, err
		}
		charged := false
		// compensate undoes what was done, on a detached context so that
		// it runs after a cancel too.
		compensate := func(cause error) (Result, error) {
			d := workflow.Detached(c)
			p.Stage = "compensating"
			if charged {
				if _, err := workflow.Effect[struct{}](d, "refund", KindRefund,
					Payment{Key: o.ID + "/refund", Customer: o.Customer, Amount: o.Amount}); err != nil {
					return Result{}, errors.Join(cause, err)
				}
			}
			if _, err := workflow.Step(d, "release", func(context.Context) (bool, error) { return true, nil }); err != nil {
				return Result{}, errors.Join(cause, err)
			}
			p.Stage = "compensated"
			if err := workflow.SetEvent(d, "stage", p.Stage); err != nil {
				return Result{}, errors.Join(cause, err)
			}
			return Result{}, cause
		}
		if err := stage("charging"); err != nil {
			return compensate(err)
		}
		if _, err := workflow.Effect[struct{}](c, "charge", KindCharge,
			Payment{Key: o.ID + "/charge", Customer: o.Customer, Amount: o.Amount}); err != nil {
			return compensate(err)
		}
		charged = true
		if err := stage("picking"); err != nil {
			return compensate(err)
		}
		// One child per line item, all side by side.
		fs := make([]*workflow.Future[int], len(o.Lines))
		for i, l := range o.Lines {
			fs[i] = workflow.ChildAsync(c, pick, fmt.Sprintf("%s/line-%d", o.ID, i), l)
		}
		for _, f := range fs {
			n, err := f.Get(c)
			if err != nil {
				return compensate(err)
			}
			p.Picked += n
		}
		if err := stage("awaiting shipment"); err != nil {
			return compensate(err)
		}
		ship, ok, err := workflow.AwaitWithTimeout[Shipment](c, "shipped", ShipWithin)
		switch {
		case err != nil:
			return compensate(err)
		case !ok:
			return compensate(ErrNotShipped)
		}
		if _, err := workflow.Step(c, "confirm", func(context.Context) (bool, error) { return true, nil }); err != nil {
			return compensate(err)
		}
		if err := stage("done"); err != nil {
			return Result{}, err
		}
		return Result{Picked: p.Picked, Carrier: ship.Carrier}, nil
	})
}

// Workflows are the example's definitions, for orrery.MainWith or a node.
func Workflows(pick func(ctx context.Context, l Line) (int, error)) []workflow.Workflow {
	p := PickDef(pick)
	return []workflow.Workflow{FulfilDef(p), p}
}

// PickAll is a warehouse that always has the stock.
func PickAll(_ context.Context, l Line) (int, error) { return l.Qty, nil }
