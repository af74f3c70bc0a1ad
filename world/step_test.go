package world_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

func TestStepAppliesHandlerAndStateIsCanonicalWithSHA256Hash(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	res := f.event(Deposit{Amount: 42})
	wantOutcome(t, res, world.OutcomeOK)
	if err := event.IsCanonical(res.State); err != nil {
		t.Fatalf("state not canonical: %v", err)
	}
	sum := sha256.Sum256(res.State)
	if res.StateHash != hex.EncodeToString(sum[:]) || res.StateHash != f.w.StateHash() {
		t.Fatalf("state hash %s is not SHA-256 of the state", res.StateHash)
	}
	if got := f.value().Balance; got != 42 {
		t.Fatalf("balance %d, want 42", got)
	}
	if res.Height != 1 || f.w.Height() != 1 {
		t.Fatalf("height %d/%d, want 1", res.Height, f.w.Height())
	}
}

func TestPureStepEqualsWorldStep(t *testing.T) {
	def := effectsDef()
	f := newFeeder(t, def, "w1")
	f.event(Deposit{Amount: 5})
	snap := f.w.Snapshot()
	in := world.Input{Seq: 9, Kind: vocab.KindEvent, Payload: mustEvent(t, Withdraw{Amount: 2}), EnqueuedAt: t0}
	pure, err := def.Step("w1", snap, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	live, err := f.w.Step(in, t0)
	if err != nil {
		t.Fatal(err)
	}
	if string(pure.State) != string(live.State) || string(pure.Record.Payload) != string(live.Record.Payload) ||
		pure.Intents[0].IntentHash != live.Intents[0].IntentHash {
		t.Fatal("Def.Step and World.Step disagree")
	}
	if snap.Height != 1 || string(snap.State) == string(live.State) {
		t.Fatal("the snapshot was modified by the step")
	}
}

func TestHandlerErrorConsumesInputLeavesStateAndDiscardsIntents(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	f.event(Deposit{Amount: 10})
	before := f.w.State()
	res := f.event(Fail{})
	wantOutcome(t, res, world.OutcomeError)
	var he *world.HandlerError
	if !errors.As(res.Err, &he) || !errors.Is(res.Err, world.ErrHandler) || he.Err.Error() != "refused" {
		t.Fatalf("err %v, want a HandlerError wrapping the handler's", res.Err)
	}
	if string(res.State) != string(before) || f.value().Balance != 10 {
		t.Fatal("state changed by a failed handler")
	}
	if res.Intents != nil || res.TimerSets != nil || len(f.w.Awaiting()) != 0 || len(f.w.Timers()) != 0 {
		t.Fatalf("intents kept: %v %v", res.Intents, res.TimerSets)
	}
	if res.Height != 2 || f.w.Height() != 2 {
		t.Fatalf("height %d, want 2: the input is consumed", res.Height)
	}
	if len(res.Logs) != 1 || res.Logs[0].Msg != "about to fail" {
		t.Fatalf("logs %v: a failed step keeps its logs", res.Logs)
	}
	var rec struct {
		Outcome string `cbor:"outcome"`
		Error   string `cbor:"error"`
	}
	decodePayload(t, res.Record, &rec)
	if rec.Outcome != "error" || rec.Error == "" {
		t.Fatalf("record outcome %q error %q: the failure is journaled", rec.Outcome, rec.Error)
	}
}

func TestHandlerPanicIsContainedAsOutcomePanic(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	f.event(Deposit{Amount: 10})
	before := f.w.State()
	res := f.event(Boom{})
	wantOutcome(t, res, world.OutcomePanic)
	var pe *world.PanicError
	if !errors.As(res.Err, &pe) || !errors.Is(res.Err, world.ErrPanic) || pe.Type != "world_test.Boom" {
		t.Fatalf("err %v, want a PanicError", res.Err)
	}
	if string(res.State) != string(before) || res.Intents != nil {
		t.Fatal("a panicking handler changed the state or kept intents")
	}
	if res := f.event(Deposit{Amount: 1}); res.Outcome != world.OutcomeOK || f.value().Balance != 11 {
		t.Fatal("the world does not carry on after a panic")
	}
}

func TestUnknownInputTypeAndKindAreRecordedAndDropped(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	f.event(Deposit{Amount: 3})
	before := f.w.State()
	for _, res := range []world.StepResult{
		f.event(Nameless{}), // a type with no handler
		f.feed("gossip", mustEvent(t, Deposit{Amount: 9})), // a kind the kernel does not know
		f.feed("gossip", []byte{0xff, 0x00}),               // ... whatever its bytes
	} {
		wantOutcome(t, res, world.OutcomeUnknownInput)
		if !errors.Is(res.Err, world.ErrUnknownInput) || string(res.State) != string(before) {
			t.Fatalf("unknown input: err %v, state changed %v", res.Err, string(res.State) != string(before))
		}
		if err := res.Record.Validate(); err != nil {
			t.Fatalf("unknown input not recorded as a valid record: %v", err)
		}
	}
	if f.w.Height() != 4 {
		t.Fatalf("height %d, want 4: unknown inputs are consumed", f.w.Height())
	}
}

func TestMalformedInputIsATypedErrorOutcome(t *testing.T) {
	good := mustEvent(t, Deposit{Amount: 1})
	wrongShape, _ := event.Marshal(map[string]any{"type": "world_test.Deposit", "value": map[string]any{"Amount": "lots"}})
	unknownField, _ := event.Marshal(map[string]any{"type": "world_test.Deposit", "value": map[string]any{"Amount": 1, "Extra": 2}})
	notMessage, _ := event.Marshal([]int{1, 2})
	callOnEvent, _ := world.EncodeCall("c1", Deposit{Amount: 1})
	badReceipt, _ := event.Marshal(map[string]any{"intent_hash": "nope", "kind": "http.request", "status": "ok"})
	for name, in := range map[string]struct {
		kind    string
		payload []byte
	}{
		"not CBOR":            {vocab.KindEvent, []byte{0xff}},
		"empty":               {vocab.KindEvent, nil},
		"truncated":           {vocab.KindEvent, good[:len(good)-1]},
		"trailing":            {vocab.KindEvent, append(slices.Clone(good), 0x00)},
		"value of wrong type": {vocab.KindEvent, wrongShape},
		"unknown field":       {vocab.KindEvent, unknownField},
		"not a message":       {vocab.KindEvent, notMessage},
		"call id on an event": {vocab.KindEvent, callOnEvent},
		"event as a call":     {vocab.KindCall, good},
		"event as a timer":    {vocab.KindTimer, good},
		"invalid receipt":     {vocab.KindReceipt, badReceipt},
		"too large":           {vocab.KindEvent, make([]byte, event.DefaultMaxSize+1)},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFeeder(t, effectsDef(), "w1")
			f.event(Deposit{Amount: 7})
			before := f.w.State()
			res := f.feed(in.kind, in.payload)
			wantOutcome(t, res, world.OutcomeError)
			var ie *world.InputError
			if !errors.As(res.Err, &ie) || !errors.Is(res.Err, world.ErrMalformedInput) {
				t.Fatalf("err %v, want an InputError", res.Err)
			}
			if string(res.State) != string(before) {
				t.Fatal("malformed input changed the state")
			}
			if err := res.Record.Validate(); err != nil {
				t.Fatalf("record invalid: %v", err)
			}
		})
	}
}

func TestCtxNowIsTheInputsEnqueueTime(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	at := time.Date(2031, 7, 4, 1, 2, 3, 456, time.UTC)
	res, err := f.w.Step(world.Input{Seq: 1, Kind: vocab.KindEvent, Payload: mustEvent(t, Stamp{}), EnqueuedAt: at}, t0)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, res, world.OutcomeOK)
	if got := f.value().NowNs; got != at.UnixNano() {
		t.Fatalf("Now() = %d, want the enqueue time %d", got, at.UnixNano())
	}
	var rec struct {
		Input struct {
			EnqueuedAt int64 `cbor:"enqueued_at"`
		} `cbor:"input"`
	}
	decodePayload(t, res.Record, &rec)
	if rec.Input.EnqueuedAt != at.UnixNano() {
		t.Fatalf("journal keeps enqueued_at %d, want %d", rec.Input.EnqueuedAt, at.UnixNano())
	}
}

func TestCtxRandIsSeededByWorldIdAndHeight(t *testing.T) {
	rolls := func(id string, pad int) []uint64 {
		f := newFeeder(t, effectsDef(), id)
		for range pad {
			f.event(Deposit{Amount: 1})
		}
		wantOutcome(t, f.event(Roll{}), world.OutcomeOK)
		return f.value().Rolls
	}
	a, b := rolls("w1", 2), rolls("w1", 2)
	if len(a) != 2 || !slices.Equal(a, b) {
		t.Fatalf("same world and height drew %v and %v", a, b)
	}
	if a[0] == a[1] {
		t.Fatal("Rand returned a fresh generator on each call")
	}
	if slices.Equal(a, rolls("w2", 2)) || slices.Equal(a, rolls("w1", 3)) {
		t.Fatal("another world or height drew the same numbers")
	}
}

func TestEffectNeedsARegisteredKindWithItsParamsType(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	res := f.event(SendEmail{To: "a@b.example"})
	wantOutcome(t, res, world.OutcomeOK)
	if len(res.Intents) != 1 || res.Intents[0].Kind != "email.send" {
		t.Fatalf("intents %v, want one email.send", res.Intents)
	}
	var p Email
	if err := world.Decode(res.Intents[0].Params, &p); err != nil || p.To != "a@b.example" {
		t.Fatalf("params %+v %v", p, err)
	}
	res = f.event(Bogus{})
	wantOutcome(t, res, world.OutcomeError)
	var ue *world.UsageError
	if !errors.As(res.Err, &ue) || !errors.Is(res.Err, world.ErrUsage) {
		t.Fatalf("err %v, want a UsageError for an unregistered kind", res.Err)
	}
}

func TestTimersSetFireAndCancel(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	set := f.event(Remind{Name: "a", AfterSec: 60})
	wantOutcome(t, set, world.OutcomeOK)
	if len(set.TimerSets) != 1 || set.Intents != nil {
		t.Fatalf("timers %v intents %v, want one timer and no effect", set.TimerSets, set.Intents)
	}
	ts := set.TimerSets[0]
	if want := t0.Add(time.Second + time.Minute); !ts.DeliverAt.Equal(want) {
		t.Fatalf("timer at %v, want %v", ts.DeliverAt, want)
	}
	if got := f.w.Timers(); !slices.Equal(got, []string{ts.IntentHash}) {
		t.Fatalf("armed timers %v", got)
	}
	fired := f.feed(vocab.KindTimer, ts.Payload) // the store hands the payload back unchanged
	wantOutcome(t, fired, world.OutcomeOK)
	if got := f.value().Fired; !slices.Equal(got, []string{"a"}) {
		t.Fatalf("fired %v, want [a]: a firing is routed by its message type", got)
	}
	wantOutcome(t, f.feed(vocab.KindTimer, ts.Payload), world.OutcomeStale) // a duplicate firing

	b := f.event(Remind{Name: "b", AfterSec: 5}).TimerSets[0]
	cancel := f.event(Forget{Name: "b"})
	if !slices.Equal(cancel.TimerCancels, []string{b.IntentHash}) || len(f.w.Timers()) != 0 {
		t.Fatalf("cancels %v, armed %v", cancel.TimerCancels, f.w.Timers())
	}
	late := f.feed(vocab.KindTimer, b.Payload) // fired before the cancel reached the store
	wantOutcome(t, late, world.OutcomeStale)
	if !errors.Is(late.Err, world.ErrStale) || slices.Contains(f.value().Fired, "b") {
		t.Fatal("a cancelled timer's firing reached the handler")
	}
}

// SetAndCancel sets a timer and cancels it in the same step.
type SetAndCancel struct{}

func TestTimerSetAndCancelledInOneStepNeverLeaves(t *testing.T) {
	def := world.New[Ledger]("t", 1)
	world.On(def, func(c *world.Ctx, s *Ledger, p Ping) error { return nil })
	world.On(def, func(c *world.Ctx, s *Ledger, _ SetAndCancel) error {
		keep := c.SetTimer(c.Now().Add(time.Hour), Ping{Name: "keep"})
		c.CancelTimer(c.SetTimer(c.Now().Add(time.Hour), Ping{Name: "drop"}))
		c.CancelTimer("0000000000000000000000000000000000000000000000000000000000000000") // unknown: ignored
		_ = keep
		return nil
	})
	f := newFeeder(t, def, "w")
	res := f.event(SetAndCancel{})
	wantOutcome(t, res, world.OutcomeOK)
	if len(res.TimerSets) != 1 || len(res.TimerCancels) != 0 || len(f.w.Timers()) != 1 {
		t.Fatalf("sets %d cancels %v armed %v", len(res.TimerSets), res.TimerCancels, f.w.Timers())
	}
}

func TestSetTimerForATypeWithoutHandlerFailsTheStep(t *testing.T) {
	def := world.New[Ledger]("t", 1)
	world.On(def, func(c *world.Ctx, s *Ledger, _ Remind) error {
		c.SetTimer(c.Now(), Nameless{})
		return nil
	})
	res := newFeeder(t, def, "w").event(Remind{})
	if res.Outcome != world.OutcomeError || !errors.Is(res.Err, world.ErrUsage) {
		t.Fatalf("outcome %s err %v", res.Outcome, res.Err)
	}
}

func TestReplyAnswersTheCallAndEveryCallGetsAnAnswer(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	f.event(Deposit{Amount: 12})
	ask := f.call("c-1", Ask{})
	var bal int64
	if ask.Reply == nil || ask.Reply.CallID != "c-1" || ask.Reply.Err != nil || world.Decode(ask.Reply.Value, &bal) != nil || bal != 12 {
		t.Fatalf("reply %+v", ask.Reply)
	}
	var rec struct {
		ReplyHash string `cbor:"reply_hash"`
	}
	decodePayload(t, ask.Record, &rec)
	if rec.ReplyHash != world.Hash(ask.Reply.Value) {
		t.Fatal("the record does not carry the reply's hash")
	}
	if r := f.call("c-2", Silent{}).Reply; r == nil || !errors.Is(r.Err, world.ErrNoReply) {
		t.Fatalf("no-reply call answered %+v", r)
	}
	if r := f.call("c-3", Fail{}).Reply; r == nil || !errors.Is(r.Err, world.ErrHandler) {
		t.Fatalf("failed call answered %+v", r)
	}
	if r := f.call("c-4", Nameless{}).Reply; r == nil || !errors.Is(r.Err, world.ErrUnknownInput) {
		t.Fatalf("unrouted call answered %+v", r)
	}
	twice := f.call("c-5", Twice{})
	if twice.Outcome != world.OutcomeError || !errors.Is(twice.Reply.Err, world.ErrUsage) {
		t.Fatalf("second Reply: outcome %s reply %+v", twice.Outcome, twice.Reply)
	}
	if r := f.event(Ask{}).Reply; r != nil {
		t.Fatalf("an event got a reply %+v", r)
	}
}

func TestLogIsRecordedInTheStepResult(t *testing.T) {
	def := world.New[Ledger]("t", 1)
	world.On(def, func(c *world.Ctx, s *Ledger, _ Roll) error {
		c.Log("rolled", "n", 3, "odd")
		return nil
	})
	res := newFeeder(t, def, "w").event(Roll{})
	want := world.LogEntry{Msg: "rolled", Attrs: []world.Attr{{Key: "n", Value: 3}, {Key: "!BADKEY", Value: "odd"}}}
	if len(res.Logs) != 1 || res.Logs[0].Msg != want.Msg || !slices.Equal(res.Logs[0].Attrs, want.Attrs) {
		t.Fatalf("logs %+v, want %+v", res.Logs, want)
	}
}

func TestWorldTypeOverridesTheGoTypeName(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	b, _ := event.Marshal(map[string]any{"type": "ledger/Renamed@1", "value": map[string]any{"V": 5}})
	wantOutcome(t, f.feed(vocab.KindEvent, b), world.OutcomeOK)
	if f.value().Balance != 5 {
		t.Fatal("input routed by WorldType did not reach its handler")
	}
}

func TestStateThatCannotBeEncodedFailsTheStep(t *testing.T) {
	type bad struct{ F float64 }
	type Nan struct{}
	def := world.New[bad]("t", 1)
	world.On(def, func(c *world.Ctx, s *bad, _ Nan) error {
		s.F = nan()
		return nil
	})
	res := newFeeder(t, def, "w").event(Nan{})
	if res.Outcome != world.OutcomeError || !errors.Is(res.Err, world.ErrState) {
		t.Fatalf("outcome %s err %v", res.Outcome, res.Err)
	}
}

func nan() float64 { var z float64; return z / z }

func decodePayload(t *testing.T, e event.Envelope, v any) {
	t.Helper()
	if err := event.Unmarshal(e.Payload, v); err != nil {
		t.Fatalf("record payload: %v", err)
	}
}

// TestDirectTimerFiringIsNamedByItsTimer: a firing its holder steps
// without an inbox item (Seq 0) runs the handler as an inbox firing does,
// its record is named by the timer (TimerStepID, so firing the same timer
// again gives the same idempotency key, and the second is stale), and a
// replay of the journal reproduces it; a record whose stepId does not
// match its input is refused.
func TestDirectTimerFiringIsNamedByItsTimer(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	ts := f.event(Remind{Name: "a", AfterSec: 60}).TimerSets[0]
	at := ts.DeliverAt.Add(time.Millisecond)
	fired, err := f.w.Step(world.Input{Kind: vocab.KindTimer, Payload: ts.Payload, EnqueuedAt: at}, at)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, fired, world.OutcomeOK)
	if fired.Record.StepID != world.TimerStepID(ts.IntentHash) || fired.Record.StepID != "timer/"+ts.IntentHash {
		t.Fatalf("stepId %q, want timer/%s", fired.Record.StepID, ts.IntentHash)
	}
	if got := f.value().Fired; !slices.Equal(got, []string{"a"}) || len(f.w.Timers()) != 0 {
		t.Fatalf("fired %v, armed %v", got, f.w.Timers())
	}
	again, err := f.w.Step(world.Input{Kind: vocab.KindTimer, Payload: ts.Payload, EnqueuedAt: at}, at)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, again, world.OutcomeStale)
	if again.Record.IdempotencyKey != fired.Record.IdempotencyKey {
		t.Fatalf("a second firing of the same timer has key %q, the first %q", again.Record.IdempotencyKey, fired.Record.IdempotencyKey)
	}
	journal := append(slices.Clone(f.records), fired.Record)
	w, err := world.Replay(effectsDef(), "w1", world.Snapshot{}, journal)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if w.StateHash() != fired.StateHash {
		t.Fatalf("replayed state %s, want %s", w.StateHash(), fired.StateHash)
	}
	bad := fired.Record
	bad.StepID = world.StepID(7)
	bad.Normalize()
	var te *world.TailError
	if _, err := world.Replay(effectsDef(), "w1", world.Snapshot{}, append(slices.Clone(f.records), bad)); !errors.As(err, &te) {
		t.Fatalf("replay of a record whose stepId does not match its input: %v, want a TailError", err)
	}
}

// TestPrepareRunsNoHandlerAndStepRunsItOnce: the host's two-phase step.
// Prepare decodes and runs nothing, so the host can wait between the two
// for a timer's due time; Prepared.Step runs the handler once and gives
// what Step gives. A Prepared that outlived its world's state (the world
// stepped since, or it stepped already) is refused with ErrStalePrepared
// and changes nothing.
func TestPrepareRunsNoHandlerAndStepRunsItOnce(t *testing.T) {
	calls := 0
	def := world.New[Ledger]("prepared", 1)
	world.On(def, func(c *world.Ctx, s *Ledger, d Deposit) error {
		calls++
		s.Balance += d.Amount
		return nil
	})
	f := newFeeder(t, def, "w1")
	f.event(Deposit{Amount: 1})
	calls = 0
	snap := f.w.Snapshot()
	in := world.Input{Seq: 9, Kind: vocab.KindEvent, Payload: mustEvent(t, Deposit{Amount: 5}), EnqueuedAt: t0}

	p := f.w.Prepare(in)
	if calls != 0 || f.w.Height() != snap.Height || f.w.StateHash() != world.Hash(snap.State) {
		t.Fatalf("after Prepare: %d handler calls, height %d (was %d): want no call and the world unchanged", calls, f.w.Height(), snap.Height)
	}
	res, err := p.Step(t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, res, world.OutcomeOK)
	if calls != 1 || f.w.Height() != snap.Height+1 || f.w.StateHash() != res.StateHash {
		t.Fatalf("after Step: %d handler calls, height %d: want one call and height %d", calls, f.w.Height(), snap.Height+1)
	}
	plain, err := def.Step("w1", snap, in, t0.Add(time.Second))
	if err != nil || plain.StateHash != res.StateHash || plain.Record.IdempotencyKey != res.Record.IdempotencyKey {
		t.Fatalf("Step gives %s / %s (%v), Prepare then Step %s / %s", plain.StateHash, plain.Record.IdempotencyKey, err, res.StateHash, res.Record.IdempotencyKey)
	}
	calls = 0

	if _, err := p.Step(t0); !errors.Is(err, world.ErrStalePrepared) {
		t.Errorf("a second Step of one Prepared: %v, want ErrStalePrepared", err)
	}
	stale := f.w.Prepare(world.Input{Seq: 10, Kind: vocab.KindEvent, Payload: mustEvent(t, Deposit{Amount: 7}), EnqueuedAt: t0})
	f.event(Deposit{Amount: 2})
	height, hash := f.w.Height(), f.w.StateHash()
	calls = 0
	if _, err := stale.Step(t0); !errors.Is(err, world.ErrStalePrepared) {
		t.Errorf("Step of a Prepared whose world stepped since: %v, want ErrStalePrepared", err)
	}
	if calls != 0 || f.w.Height() != height || f.w.StateHash() != hash {
		t.Fatalf("a refused Prepared ran %d handlers, world at %d/%s (want %d/%s)", calls, f.w.Height(), f.w.StateHash(), height, hash)
	}
}

// A timer past the latest instant the store holds is the handler's usage
// error, decided in the step: the store would refuse the commit that
// carries it, and the world would retry that step for ever.
func TestTimerPastTheStoresRangeIsAUsageError(t *testing.T) {
	f := newFeeder(t, effectsDef(), "w1")
	after := int64(event.MaxTime.Sub(t0)/time.Second) + 30*24*3600 // still encodable: a month past MaxTime
	res := f.event(Remind{Name: "far", AfterSec: after})
	wantOutcome(t, res, world.OutcomeError)
	var ue *world.UsageError
	if !errors.As(res.Err, &ue) || len(res.TimerSets) != 0 || len(f.w.Timers()) != 0 {
		t.Fatalf("err %v, timers %v armed %v: want a usage error and no timer", res.Err, res.TimerSets, f.w.Timers())
	}
	wantOutcome(t, f.event(Remind{Name: "near", AfterSec: 60}), world.OutcomeOK)
}
