package orrerytest_test

import (
	"context"
	"time"

	"github.com/orrery-run/orrery/workflow"
	"github.com/orrery-run/orrery/world"
)

// The world the kit's tests and examples run: a shop's tab. An Order asks
// the payment service to charge it (the pay.charge effect) and the
// receipt books it as paid or failed; Total answers a call; Remind sets a
// durable timer that delivers Ring.

type Tab struct {
	Paid      []string
	Failed    []string
	Unknown   []string
	Reminders []string
}

type (
	Order struct {
		Item  string
		Cents int64
	}
	Total  struct{}
	Remind struct {
		After time.Duration
		Note  string
	}
	Ring   struct{ Note string }
	Charge struct {
		Item  string
		Cents int64
	}
	Charged struct{ Ref string }
)

func (Order) WorldType() string  { return "Order" }
func (Total) WorldType() string  { return "Total" }
func (Remind) WorldType() string { return "Remind" }
func (Ring) WorldType() string   { return "Ring" }

func shop() *world.Def[Tab] {
	d := world.New[Tab]("shop", 1)
	world.EffectKind[Charge](d, "pay.charge")
	world.On(d, func(c *world.Ctx, t *Tab, o Order) error {
		c.Effect("pay.charge", Charge(o))
		return nil
	})
	world.On(d, func(c *world.Ctx, t *Tab, r world.Receipt) error {
		var ch Charged
		switch r.Status {
		case "ok":
			if err := r.Decode(&ch); err != nil {
				return err
			}
			t.Paid = append(t.Paid, ch.Ref)
		case "error":
			t.Failed = append(t.Failed, r.IntentHash[:8])
		default:
			t.Unknown = append(t.Unknown, r.IntentHash[:8])
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, t *Tab, _ Total) error {
		c.Reply(int64(len(t.Paid)))
		return nil
	})
	world.On(d, func(c *world.Ctx, t *Tab, r Remind) error {
		c.SetTimer(c.Now().Add(r.After), Ring{Note: r.Note})
		return nil
	})
	world.On(d, func(c *world.Ctx, t *Tab, r Ring) error {
		t.Reminders = append(t.Reminders, r.Note+" at "+c.Now().UTC().Format(time.TimeOnly))
		return nil
	})
	return d
}

// greeter is the workflow the kit's tests run: one step.
func greeter() *workflow.Def[string, string] {
	return workflow.New("greeter", 1, func(c *workflow.Ctx, name string) (string, error) {
		return workflow.Step(c, "greet", func(ctx context.Context) (string, error) { return "hello, " + name, nil })
	})
}
