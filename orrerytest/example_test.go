package orrerytest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/orrerytest"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// A world on its own node: send it inputs, call it for a typed reply, and
// read its state as the definition's Go type. In a test file this is
//
//	func TestTab(t *testing.T) {
//		orrerytest.Test(t, func(t *testing.T) { ... })
//	}
func ExampleNewWorld() {
	inTest(func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").Default(orrerytest.OK(Charged{Ref: "ch_1"}))
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		w.Send(Order{Item: "tea", Cents: 350})
		w.Settle() // the order, its charge and the charge's receipt
		n := orrerytest.Call[int64](w, Total{})
		fmt.Println("paid:", n)
		fmt.Println("state:", orrerytest.State[Tab](w).Paid)
	})
	// Output:
	// paid: 1
	// state: [ch_1]
}

// Advance moves virtual time: a timer two minutes away fires at its
// instant, and the test takes milliseconds.
func ExampleNode_Advance() {
	inTest(func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop())
		w.Send(Remind{After: 2 * time.Minute, Note: "close the till"})
		w.Settle()
		w.Advance(time.Minute)
		fmt.Println("after 1m:", orrerytest.State[Tab](w).Reminders)
		w.Advance(time.Minute)
		fmt.Println("after 2m:", orrerytest.State[Tab](w).Reminders)
	})
	// Output:
	// after 1m: []
	// after 2m: [close the till at 00:02:00]
}

// Crash kills the node as kill -9 would; Restart starts it again on the
// same store, and the world's state comes back from its journal. An
// effect in flight at the crash runs again once its claim expires.
func ExampleNode_Crash() {
	inTest(func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").
			Script("", orrerytest.OK(Charged{Ref: "slow"}).After(10*time.Second)).
			Default(orrerytest.OK(Charged{Ref: "again"}))
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		w.Send(Order{Item: "tea", Cents: 350})
		w.Settle() // the charge is in flight, for 10s
		w.Crash()
		w.Restart()
		w.Advance(30 * time.Second) // the crashed claim's TTL
		for _, a := range pay.Asked() {
			fmt.Printf("execution %d, claim %d\n", a.Execution, a.Claim)
		}
		fmt.Println("paid:", orrerytest.State[Tab](w).Paid)
	})
	// Output:
	// execution 1, claim 1
	// execution 2, claim 2
	// paid: [again]
}

// A Fake answers effects as scripted and records what it was asked. Its
// retry policy is a real adapter's (production's default unless Retry
// says otherwise); without retries, each outcome is the receipt.
func ExampleFake() {
	inTest(func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").Retry(adapter.NoRetry()).Script("pay.charge",
			orrerytest.OK(Charged{Ref: "ch_1"}).After(time.Second), // ok, a second later
			orrerytest.Fail("card reader busy"),                    // error: nothing happened
			orrerytest.Permanent("card declined"),                  // error, never retried
			orrerytest.Unknown("connection reset"),                 // timeout: it may have happened
		)
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		for _, item := range []string{"tea", "cake", "jam", "bun"} {
			w.Send(Order{Item: item, Cents: 350})
			w.Advance(time.Minute)
		}
		for _, a := range pay.Asked() {
			var c Charge
			_ = a.Decode(&c)
			fmt.Printf("asked to charge %s, execution %d\n", c.Item, a.Execution)
		}
		s := orrerytest.State[Tab](w)
		fmt.Println(s.Paid, len(s.Failed), "failed,", len(s.Unknown), "unknown")
	})
	// Output:
	// asked to charge tea, execution 1
	// asked to charge cake, execution 1
	// asked to charge jam, execution 1
	// asked to charge bun, execution 1
	// [ch_1] 2 failed, 1 unknown
}

// The journal, record by record: each input's type and value, how the
// step ended, its reply, and the effects and timers it asked for.
func ExampleWorld_Journal() {
	inTest(func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").Default(orrerytest.OK(Charged{Ref: "ch_1"}))
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		w.Send(Order{Item: "tea", Cents: 350})
		w.Settle()
		w.Send(Remind{After: time.Hour, Note: "restock"})
		orrerytest.Call[int64](w, Total{})
		for _, r := range w.Journal() {
			fmt.Printf("%d %s %s %s effects=%d timers=%d\n", r.Height, r.Kind, r.Type, r.Outcome, len(r.Effects), len(r.Timers))
		}
		var c Charge
		_ = w.Effects("pay.charge")[0].Decode(&c)
		fmt.Printf("asked to charge %d for %s\n", c.Cents, c.Item)
		w.AssertTypes("Order", "receipt pay.charge ok", "Remind", "Total")
	})
	// Output:
	// 1 event Order ok effects=1 timers=0
	// 2 receipt receipt pay.charge ok ok effects=0 timers=0
	// 3 event Remind ok effects=0 timers=1
	// 4 call Total ok effects=0 timers=0
	// asked to charge 350 for tea
}

// Diff is what Equal, AssertState and AssertTypes print when they fail.
func ExampleDiff() {
	fmt.Print(orrerytest.Diff(Tab{Paid: []string{"a"}}, Tab{Paid: []string{"a", "b"}}))
	// Output:
	//   {
	//     "Paid": [
	// -     "a"
	// +     "a",
	// +     "b"
	//     ],
	//     "Failed": null,
	//     "Unknown": null,
	//     "Reminders": null
	//   }
}

// A durable workflow runs on the kit's node too: start it and wait for
// its result through the node's workflow client.
func ExampleWorkflows() {
	inTest(func(t *testing.T) {
		n := orrerytest.NewNode(t, orrerytest.Workflows(greeter()))
		def := greeter()
		if err := def.Start(n.Context(), n.Runs(), "run-1", "Ada"); err != nil {
			t.Fatal(err)
		}
		out, err := def.Result(n.Context(), n.Runs(), "run-1")
		fmt.Println(out, err)
	})
	// Output:
	// hello, Ada <nil>
}

// AssertReplays checks that the journal replays to the live state, from
// the latest snapshot and from the first step: that the handlers are
// deterministic. AssertState compares the state with a diff on failure.
func ExampleWorld_AssertReplays() {
	inTest(func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(orrerytest.NewFake("pay.charge").Default(orrerytest.OK(Charged{Ref: "ch_1"}))))
		w.Send(Order{Item: "tea", Cents: 350})
		w.Send(Remind{After: time.Hour, Note: "restock"})
		w.Advance(time.Hour)
		w.AssertReplays()
		orrerytest.AssertState(w, Tab{Paid: []string{"ch_1"}, Reminders: []string{"restock at 01:00:00"}})
		fmt.Println("height", w.Height(), "replays")
	})
	// Output:
	// height 4 replays
}

// Eventually lets virtual time pass until a condition across worlds
// holds; Idle says the node has nothing left in flight.
func ExampleNode_Eventually() {
	inTest(func(t *testing.T) {
		n := orrerytest.NewNode(t, orrerytest.Worlds(shop()))
		w := n.Create("shop", "corner")
		w.Send(Remind{After: 90 * time.Minute, Note: "close"})
		n.Eventually("the reminder", 2*time.Hour, func() bool { return len(orrerytest.State[Tab](w).Reminders) == 1 })
		fmt.Println(orrerytest.State[Tab](w).Reminders, n.Idle())
	})
	// Output:
	// [close at 01:30:00] true
}

// A Kernel steps a handler directly, with no node and no bubble: each
// step's result says what it asked for, and the test answers it.
func ExampleNewKernel() {
	inTest(func(t *testing.T) {
		k := orrerytest.NewKernel(t, shop(), "tab")
		res := k.Event(Order{Item: "tea", Cents: 350})
		var c Charge
		_ = world.Decode(res.Intents[0].Params, &c)
		fmt.Println("asked:", res.Intents[0].Kind, c.Item, c.Cents)
		k.Receipt(res.Intents[0], vocab.ReceiptOK, Charged{Ref: "ch_1"})
		res = k.Call(Total{})
		var n int64
		_ = world.Decode(res.Reply.Value, &n)
		fmt.Println("total:", n)
		res = k.Event(Remind{After: time.Hour, Note: "restock"})
		k.Fire(res.TimerSets[0])
		fmt.Println(k.State().Reminders)
	})
	// Output:
	// asked: pay.charge tea 350
	// total: 1
	// [restock at 01:00:00]
}
