package world_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

type Account struct{ Balance int64 }
type Deposit struct{ Amount int64 }
type Withdraw struct{ Amount int64 }
type Balance struct{}

func accountDef() *world.Def[Account] {
	def := world.New[Account]("bank.account", 1)
	world.On(def, func(c *world.Ctx, s *Account, d Deposit) error {
		s.Balance += d.Amount
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Account, w Withdraw) error {
		if w.Amount > s.Balance {
			return errors.New("insufficient funds") // state unchanged
		}
		s.Balance -= w.Amount
		c.Effect("http.request", world.HTTPRequest{Method: "POST", URL: "https://bank.example/payout"})
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Account, _ Balance) error {
		c.Reply(s.Balance)
		return nil
	})
	world.On(def, func(c *world.Ctx, s *Account, r world.Receipt) error {
		c.Log("payout", "status", r.Status)
		return nil
	})
	return def
}

func Example() {
	w, _ := world.Load(accountDef(), "acct-1", world.Snapshot{})
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(kind string, payload []byte) world.StepResult {
		res, err := w.Step(world.Input{Seq: w.Height() + 1, Kind: kind, Payload: payload, EnqueuedAt: at}, at)
		if err != nil {
			panic(err)
		}
		return res
	}
	deposit, _ := world.EncodeEvent(Deposit{Amount: 100})
	step(vocab.KindEvent, deposit)
	tooMuch, _ := world.EncodeEvent(Withdraw{Amount: 500})
	fmt.Println(step(vocab.KindEvent, tooMuch).Outcome)
	some, _ := world.EncodeEvent(Withdraw{Amount: 30})
	res := step(vocab.KindEvent, some)
	fmt.Println(res.Outcome, len(res.Intents), res.Intents[0].Kind)
	receipt, _ := world.EncodeReceipt(world.Receipt{IntentHash: res.Intents[0].IntentHash, Kind: "http.request", Status: vocab.ReceiptOK})
	fmt.Println(step(vocab.KindReceipt, receipt).Logs[0].Msg)
	fmt.Println(step(vocab.KindReceipt, receipt).Outcome) // a second receipt for it is stale
	call, _ := world.EncodeCall("call-1", Balance{})
	var balance int64
	_ = world.Decode(step(vocab.KindCall, call).Reply.Value, &balance)
	fmt.Println("balance", balance, "at height", w.Height())
	// Output:
	// error
	// ok 1 http.request
	// payout
	// stale
	// balance 70 at height 6
}
