package orrerytest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orrery-run/orrery/orrerytest"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/world"
)

func paying(ref string) *orrerytest.Fake {
	return orrerytest.NewFake("pay.charge").Default(orrerytest.OK(Charged{Ref: ref}))
}

func TestCallDecodesTheReplyAndStateDecodesIntoTheDefinitionsType(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(paying("ch")), orrerytest.ID("tab-1"))
		if w.ID() != "tab-1" {
			t.Fatalf("ID = %q, want tab-1", w.ID())
		}
		w.Send(Order{Item: "tea", Cents: 1})
		w.Send(Order{Item: "jam", Cents: 2})
		w.Settle()
		if n := orrerytest.Call[int64](w, Total{}); n != 2 {
			t.Fatalf("Call[int64](Total) = %d, want 2", n)
		}
		if got := orrerytest.State[Tab](w); !slices.Equal(got.Paid, []string{"ch", "ch"}) {
			t.Fatalf("State = %+v, want two paid", got)
		}
		if h := w.Height(); h != 5 { // 2 orders, 2 receipts, 1 call
			t.Fatalf("Height = %d, want 5", h)
		}
	})
}

func TestSendKeyDeduplicatesAndSendDoesNot(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop())
		w.SendKey(Remind{After: time.Hour, Note: "a"}, "k")
		w.SendKey(Remind{After: time.Hour, Note: "a"}, "k")
		w.Send(Remind{After: time.Hour, Note: "b"})
		w.Send(Remind{After: time.Hour, Note: "b"})
		w.Settle()
		w.AssertTypes("Remind", "Remind", "Remind")
	})
}

func TestAdvanceFiresATimerAtItsVirtualInstant(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop())
		start := w.Node().Now()
		w.Send(Remind{After: 2 * time.Minute, Note: "n"})
		w.Settle()
		w.Advance(2*time.Minute - time.Second - w.Node().Now().Sub(start))
		if r := orrerytest.State[Tab](w).Reminders; len(r) != 0 {
			t.Fatalf("the timer fired a second early: %v", r)
		}
		w.Advance(time.Second)
		if r := orrerytest.State[Tab](w).Reminders; !slices.Equal(r, []string{"n at 00:02:00"}) {
			t.Fatalf("Reminders = %v, want the timer fired at 00:02:00", r)
		}
	})
}

func TestCrashAndRestartRestoreTheStateFromTheJournal(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(paying("ch")))
		w.Send(Order{Item: "tea"})
		w.Send(Remind{After: time.Hour, Note: "later"})
		w.Settle()
		before, height := orrerytest.State[Tab](w), w.Height()
		w.Crash()
		// While crashed, the state is read from the store.
		orrerytest.AssertState(w, before)
		w.Restart()
		orrerytest.AssertState(w, before)
		if w.Height() != height {
			t.Fatalf("height %d after the restart, %d before", w.Height(), height)
		}
		// The timer set before the crash still fires, and calls work.
		w.Advance(time.Hour)
		if r := orrerytest.State[Tab](w).Reminders; len(r) != 1 {
			t.Fatalf("Reminders = %v, want the timer set before the crash fired", r)
		}
		if n := orrerytest.Call[int64](w, Total{}); n != 1 {
			t.Fatalf("Total = %d after the restart, want 1", n)
		}
	})
}

func TestAnEffectInFlightAtACrashRunsAgainAfterItsClaimExpires(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").
			Script("", orrerytest.OK(Charged{Ref: "lost"}).After(time.Minute)).
			Default(orrerytest.OK(Charged{Ref: "again"}))
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		w.Send(Order{Item: "tea"})
		w.Settle()
		if n := len(pay.Asked()); n != 1 {
			t.Fatalf("%d executions before the crash, want 1 in flight", n)
		}
		w.Crash()
		w.Restart()
		w.Advance(time.Minute) // past the 30s claim TTL
		asked := pay.Asked()
		if len(asked) != 2 || asked[1].Claim != 2 || asked[1].IntentHash != asked[0].IntentHash {
			t.Fatalf("executions %+v, want the same intent again under a second claim", asked)
		}
		orrerytest.AssertState(w, Tab{Paid: []string{"again"}})
	})
}

func TestFakeOutcomesBecomeTheReceiptsProductionGives(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		// The production default policy retries a Fail; a Permanent is
		// never retried.
		pay := orrerytest.NewFake("pay.charge").Script("",
			orrerytest.Fail("busy"), orrerytest.OK(Charged{Ref: "second try"}),
			orrerytest.Permanent("declined"),
			orrerytest.Refuse(nil),
		)
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		for _, item := range []string{"tea", "cake", "jam"} {
			w.Send(Order{Item: item})
			w.Advance(time.Hour)
		}
		s := orrerytest.State[Tab](w)
		if !slices.Equal(s.Paid, []string{"second try"}) || len(s.Failed) != 2 || len(s.Unknown) != 0 {
			t.Fatalf("state %+v, want tea paid on its retry, cake and jam failed", s)
		}
		var execs []string
		for _, a := range pay.Asked() {
			var c Charge
			if err := a.Decode(&c); err != nil {
				t.Fatal(err)
			}
			execs = append(execs, fmt.Sprintf("%s#%d", c.Item, a.Execution))
		}
		orrerytest.Equal(t, "executions", execs, []string{"tea#1", "tea#2", "cake#1", "jam#1"})
		// The receipts' statuses, as the journal holds them.
		w.AssertTypes("Order", "receipt pay.charge ok", "Order", "receipt pay.charge error", "Order", "receipt pay.charge error")
	})
}

func TestAnUnknownOutcomeIsATimeoutReceiptOnceRetriesGiveUp(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").Retry(adapter.NoRetry()).Default(orrerytest.Unknown("reset"))
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		w.Send(Order{Item: "tea"})
		w.Settle()
		if s := orrerytest.State[Tab](w); len(s.Unknown) != 1 || len(s.Failed) != 0 {
			t.Fatalf("state %+v, want the charge unknown", s)
		}
	})
}

func TestADelayedOutcomeIsInFlightForItsVirtualDelay(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").Default(orrerytest.OK(Charged{Ref: "slow"}).After(10 * time.Second))
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		w.Send(Order{Item: "tea"})
		w.Settle()
		w.Advance(9 * time.Second)
		if s := orrerytest.State[Tab](w); len(s.Paid) != 0 {
			t.Fatalf("paid before the delay ran out: %+v", s)
		}
		w.Advance(time.Second)
		orrerytest.AssertState(w, Tab{Paid: []string{"slow"}})
	})
}

func TestJournalRecordsInputsRepliesEffectsAndTimers(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(paying("ch")))
		w.Send(Order{Item: "tea", Cents: 350})
		w.Settle()
		w.Send(Remind{After: time.Hour, Note: "restock"})
		orrerytest.Call[int64](w, Total{})
		j := w.Journal()
		if len(j) != 4 {
			t.Fatalf("%d records, want 4: %+v", len(j), j)
		}
		var o Order
		if err := j[0].Decode(&o); err != nil || o != (Order{Item: "tea", Cents: 350}) || j[0].Kind != "event" || len(j[0].Effects) != 1 {
			t.Fatalf("record 1: %+v (%v), want the order with its charge", j[0], err)
		}
		var c Charge
		if err := j[0].Effects[0].Decode(&c); err != nil || c != (Charge{Item: "tea", Cents: 350}) || j[0].Effects[0].Kind != "pay.charge" {
			t.Fatalf("the effect asked for: %+v (%v)", j[0].Effects[0], err)
		}
		if r := j[1].Receipt; r == nil || r.Status != "ok" || r.IntentHash != j[0].Effects[0].IntentHash {
			t.Fatalf("record 2: %+v, want the charge's ok receipt", j[1])
		}
		var ring Ring
		if tm := j[2].Timers; len(tm) != 1 || tm[0].Type != "Ring" || tm[0].Decode(&ring) != nil || ring.Note != "restock" ||
			tm[0].DeliverAt.Sub(j[2].At) != time.Hour {
			t.Fatalf("record 3's timers: %+v", j[2].Timers)
		}
		var n int64
		if j[3].Kind != "call" || j[3].Type != "Total" || world.Decode(j[3].Reply, &n) != nil || n != 1 {
			t.Fatalf("record 4: %+v, want the call with its reply 1", j[3])
		}
		if e := w.Effects("http.request"); len(e) != 0 {
			t.Fatalf("Effects(http.request) = %+v, want none", e)
		}
		if e := w.Effects(); len(e) != 1 {
			t.Fatalf("Effects() = %+v, want the charge", e)
		}
	})
}

func TestTryCallReturnsTheHandlersError(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		d := world.New[int]("fussy", 1)
		world.On(d, func(c *world.Ctx, s *int, _ Total) error { return errors.New("closed on Sundays") })
		w := orrerytest.NewWorld(t, d)
		_, err := orrerytest.TryCall[int](w, Total{})
		if !errors.Is(err, plane.ErrCallFailed) || !strings.Contains(err.Error(), "closed on Sundays") {
			t.Fatalf("TryCall = %v, want ErrCallFailed with the handler's error", err)
		}
	})
}

func TestAWorkflowRunsOnTheKitsNode(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		n := orrerytest.NewNode(t, orrerytest.Workflows(greeter()))
		def := greeter()
		if err := def.Start(n.Context(), n.Runs(), "r1", "Ada"); err != nil {
			t.Fatal(err)
		}
		got, err := def.Result(n.Context(), n.Runs(), "r1")
		if err != nil || got != "hello, Ada" {
			t.Fatalf("Result = %q, %v", got, err)
		}
	})
}

func TestSeveralWorldsOnOneNode(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		n := orrerytest.NewNode(t, orrerytest.Worlds(shop()), orrerytest.Fakes(paying("ch")))
		a, b := n.Create("shop", "a"), n.Create("shop", "b")
		a.Send(Order{Item: "tea"})
		n.Settle()
		if x, y := orrerytest.Call[int64](a, Total{}), orrerytest.Call[int64](n.World("b"), Total{}); x != 1 || y != 0 {
			t.Fatalf("totals %d and %d, want 1 and 0", x, y)
		}
		_ = b
	})
}

// recorder is a testing.TB that keeps failures instead of failing, so a
// test can check what the kit reports; Fatalf ends the goroutine as the
// real one does.
type recorder struct {
	testing.TB
	msgs  []string
	fatal bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(f string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(f, args...))
}
func (r *recorder) Fatalf(f string, args ...any) {
	r.Errorf(f, args...)
	r.fatal = true
	panic(r)
}

func catch(r *recorder, f func()) {
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	f()
}

func TestEqualFailsWithADiffOfWhatDiffers(t *testing.T) {
	r := &recorder{TB: t}
	orrerytest.Equal(r, "the tab", Tab{Paid: []string{"a", "b"}}, Tab{Paid: []string{"a", "c"}})
	if len(r.msgs) != 1 {
		t.Fatalf("%d failures, want 1", len(r.msgs))
	}
	m := r.msgs[0]
	for _, want := range []string{"the tab differs (-want +got)", `-     "c"`, `+     "b"`, `      "a",`} {
		if !strings.Contains(m, want) {
			t.Errorf("the failure lacks %q:\n%s", want, m)
		}
	}
	r.msgs = nil
	orrerytest.Equal(r, "same", Tab{Paid: []string{"a"}}, Tab{Paid: []string{"a"}})
	if len(r.msgs) != 0 {
		t.Fatalf("equal values failed: %v", r.msgs)
	}
}

func TestDiffShowsValuesJSONCannotTellApart(t *testing.T) {
	type secret struct{ n int }
	d := orrerytest.Diff(secret{1}, secret{2})
	if !strings.Contains(d, "-") || !strings.Contains(d, "+") {
		t.Fatalf("the diff of two different values shows no difference:\n%s", d)
	}
}

func TestTheKitRefusesToRunOutsideVirtualTime(t *testing.T) {
	r := &recorder{TB: t}
	catch(r, func() { orrerytest.NewWorld(r, shop()) })
	if !r.fatal || len(r.msgs) != 1 || !strings.Contains(r.msgs[0], "orrerytest.Test") {
		t.Fatalf("outside a bubble: %v, want a failure that names orrerytest.Test", r.msgs)
	}
}

func TestAssertReplaysCatchesANondeterministicHandler(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		calls := 0 // state outside the world: replay sees another value
		d := world.New[int]("flaky", 1)
		world.On(d, func(c *world.Ctx, s *int, _ Total) error {
			calls++
			*s = calls
			return nil
		})
		r := &recorder{TB: t}
		w := orrerytest.NewWorld(r, d)
		w.Send(Total{})
		w.Settle()
		catch(r, w.AssertReplays)
		if !r.fatal || len(r.msgs) == 0 || !strings.Contains(r.msgs[0], "flaky") {
			t.Fatalf("AssertReplays on a nondeterministic world: %v, want a failure naming it", r.msgs)
		}
	})
}

func TestAssertReplaysPassesOnADeterministicWorld(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		w := orrerytest.NewWorld(r, shop(), orrerytest.Fakes(paying("ch")))
		w.Send(Order{Item: "tea"})
		w.Send(Remind{After: time.Minute, Note: "n"})
		w.Advance(time.Minute)
		catch(r, w.AssertReplays)
		if r.fatal || len(r.msgs) != 0 {
			t.Fatalf("AssertReplays failed on a deterministic world: %v", r.msgs)
		}
	})
}

func TestEventuallyLetsVirtualTimePassUntilItsCondition(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop())
		w.Send(Remind{After: 3 * time.Hour, Note: "n"})
		n := w.Node()
		start := n.Now()
		n.Eventually("the reminder", 4*time.Hour, func() bool { return len(orrerytest.State[Tab](w).Reminders) == 1 })
		if d := n.Now().Sub(start); d < 3*time.Hour || d > 3*time.Hour+2*time.Second {
			t.Fatalf("Eventually let %s pass, want the 3h to the timer", d)
		}
		if !n.Idle() {
			t.Fatal("the node is not idle after the timer's step")
		}
		r := &recorder{TB: t}
		n2 := orrerytest.NewNode(r, orrerytest.Worlds(shop()))
		catch(r, func() { n2.Eventually("never", time.Minute, func() bool { return false }) })
		if !r.fatal || !strings.Contains(r.msgs[0], "never did not happen within 1m0s") {
			t.Fatalf("Eventually on a condition that never holds: %v", r.msgs)
		}
	})
}

func TestACallWithoutAReplyFailsAtTheCallLimitOfVirtualTime(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop(), orrerytest.CallLimit(time.Minute))
		w.Settle()
		if _, err := w.Node().Store().SetWorldStatus(w.Node().Context(), w.ID(), store.WorldPaused, "test"); err != nil {
			t.Fatal(err)
		}
		start := w.Node().Now()
		_, err := orrerytest.TryCall[int64](w, Total{})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1m0s of virtual time") {
			t.Fatalf("TryCall on a paused world = %v, want the call limit's error", err)
		}
		if d := w.Node().Now().Sub(start); d != time.Minute {
			t.Fatalf("the call waited %s of virtual time, want the 1m limit", d)
		}
	})
}

func TestAFakeReplacesTheBuiltInHTTPAdapter(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		d := world.New[int]("caller", 1)
		world.On(d, func(c *world.Ctx, s *int, _ Total) error {
			c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: "https://pay.example/charge", Body: []byte("{}")})
			return nil
		})
		world.On(d, func(c *world.Ctx, s *int, r world.Receipt) error {
			if r.Status == "ok" {
				*s = 1
			}
			return nil
		})
		web := orrerytest.NewFake(world.KindHTTPRequest)
		w := orrerytest.NewWorld(t, d, orrerytest.Fakes(web))
		w.Send(Total{})
		w.Settle()
		asked := web.Asked()
		var req world.HTTPRequest
		if len(asked) != 1 || asked[0].Decode(&req) != nil || req.URL != "https://pay.example/charge" || req.Method != "POST" {
			t.Fatalf("the fake was asked %+v, want the POST", asked)
		}
		if s := orrerytest.State[int](w); s != 1 {
			t.Fatalf("state %d, want the fake's ok receipt applied", s)
		}
	})
}

func TestSendsThroughTwoHandlesOfOneWorldAreTwoInputs(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		n := orrerytest.NewNode(t, orrerytest.Worlds(shop()))
		n.Create("shop", "a")
		n.World("a").Send(Remind{After: time.Hour, Note: "x"})
		n.World("a").Send(Remind{After: time.Hour, Note: "x"})
		n.Settle()
		n.World("a").AssertTypes("Remind", "Remind")
	})
}

func TestStopLetsAnEffectInFlightFinishUnlikeCrash(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		pay := orrerytest.NewFake("pay.charge").Default(orrerytest.OK(Charged{Ref: "once"}).After(5 * time.Second))
		w := orrerytest.NewWorld(t, shop(), orrerytest.Fakes(pay))
		w.Send(Order{Item: "tea"})
		w.Settle()
		w.Node().Stop()
		w.Restart()
		w.Advance(time.Minute)
		if n := len(pay.Asked()); n != 1 {
			t.Fatalf("%d executions, want the one in flight at the Stop, finished", n)
		}
		orrerytest.AssertState(w, Tab{Paid: []string{"once"}})
	})
}

func TestAFakeScriptsEachKindItServes(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		type Ship struct{ Item string }
		d := world.New[[]string]("two", 1)
		world.EffectKind[Charge](d, "pay.charge")
		world.EffectKind[Ship](d, "ship")
		world.On(d, func(c *world.Ctx, s *[]string, o Order) error {
			c.Effect("pay.charge", Charge(o))
			c.Effect("ship", Ship{Item: o.Item})
			return nil
		})
		world.On(d, func(c *world.Ctx, s *[]string, r world.Receipt) error {
			*s = append(*s, string(r.Status))
			return nil
		})
		f := orrerytest.NewFake("pay.charge", "ship").Retry(adapter.NoRetry()).
			Script("ship", orrerytest.Permanent("no stock")).
			Script("", orrerytest.Refuse(nil), orrerytest.Refuse(nil))
		w := orrerytest.NewWorld(t, d, orrerytest.Fakes(f))
		// Four executions: ship's own queue answers one, the "" queue two
		// (whichever kinds run first: the pool runs a step's effects at
		// once), the default the last.
		w.Send(Order{Item: "tea"})
		w.Send(Order{Item: "jam"})
		w.Settle()
		got := orrerytest.State[[]string](w)
		slices.Sort(got)
		orrerytest.Equal(t, "receipts", got, []string{"error", "error", "error", "ok"})
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), `not "pay.chrage"`) {
				t.Fatalf("Script of a kind not served: %v, want a panic naming it", p)
			}
		}()
		f.Script("pay.chrage", orrerytest.OK(nil))
	})
}

func TestKernelStepsAHandlerWithoutANode(t *testing.T) {
	k := orrerytest.NewKernel(t, shop(), "tab")
	if !k.Now().Equal(orrerytest.Epoch()) {
		t.Fatalf("a kernel starts at %v, want the epoch", k.Now())
	}
	res := k.Event(Order{Item: "tea", Cents: 1})
	if len(res.Intents) != 1 || res.Intents[0].Kind != "pay.charge" {
		t.Fatalf("intents %+v, want the charge", res.Intents)
	}
	k.Receipt(res.Intents[0], "error", nil)
	if s := k.State(); len(s.Failed) != 1 || k.Height() != 2 {
		t.Fatalf("state %+v at %d, want the charge failed at height 2", s, k.Height())
	}
	res = k.At(orrerytest.Epoch().Add(time.Hour)).Event(Remind{After: time.Minute, Note: "n"})
	k.Fire(res.TimerSets[0])
	if r := k.State().Reminders; !slices.Equal(r, []string{"n at 01:01:00"}) || !k.Now().Equal(orrerytest.Epoch().Add(61*time.Minute)) {
		t.Fatalf("reminders %v at %v, want the timer fired at its due time", r, k.Now())
	}
	res = k.Call(Total{})
	var n int64
	if res.Reply == nil || world.Decode(res.Reply.Value, &n) != nil || n != 0 {
		t.Fatalf("the call's reply %+v, want 0", res.Reply)
	}
}

func TestPendingTimersListsWhatHasNotFiredYet(t *testing.T) {
	orrerytest.Test(t, func(t *testing.T) {
		w := orrerytest.NewWorld(t, shop())
		w.Send(Remind{After: time.Hour, Note: "late"})
		w.Send(Remind{After: time.Minute, Note: "soon"})
		w.Settle()
		var notes []string
		for _, tm := range w.PendingTimers() {
			var r Ring
			if err := tm.Decode(&r); err != nil || tm.Type != "Ring" || tm.Height == 0 {
				t.Fatalf("timer %+v (%v)", tm, err)
			}
			notes = append(notes, r.Note)
		}
		orrerytest.Equal(t, "pending timers", notes, []string{"soon", "late"})
		w.Advance(time.Minute)
		if p := w.PendingTimers(); len(p) != 1 {
			t.Fatalf("%d timers pending after the first fired, want 1", len(p))
		}
		w.Advance(time.Hour)
		if p := w.PendingTimers(); len(p) != 0 {
			t.Fatalf("%d timers pending after both fired: %+v", len(p), p)
		}
	})
}
