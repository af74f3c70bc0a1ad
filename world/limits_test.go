package world_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// The oversize world asks for as much as its inputs say, to push each of
// the kernel's limits; Jot is the ordinary input that must run after.
type (
	Hoard struct {
		Notes []string
		Blob  []byte
		Armed []string // the timers ArmMany set, for CancelAll
	}
	Jot       struct{ Text string }
	LongError struct{ Bytes int }
	BadUTF8   struct{}
	Spray     struct{ N int }
	SendMany  struct{ N int }
	ArmMany   struct{ N, From int }
	CancelAll struct{}
	Grow      struct{ Bytes, Effects int }
	BigReply  struct{ Bytes int }
	BigParams struct{ Bytes int }
	BigTimer  struct{ Bytes int }
	FarTimer  struct{}
	Chatty    struct{ N int }
	Tock      struct{ Pad []byte }
)

func oversizeDef() *world.Def[Hoard] {
	d := world.New[Hoard]("oversize", 1)
	world.On(d, func(c *world.Ctx, s *Hoard, n Jot) error {
		s.Notes = append(s.Notes, n.Text)
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, e LongError) error {
		s.Notes = append(s.Notes, "lost")
		return errors.New(strings.Repeat("é", e.Bytes/2))
	})
	world.On(d, func(c *world.Ctx, s *Hoard, _ BadUTF8) error {
		return errors.New("bad \xff\xfe bytes")
	})
	world.On(d, func(c *world.Ctx, s *Hoard, p Spray) error {
		s.Notes = append(s.Notes, "lost")
		for range p.N {
			c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "https://x.example/"})
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, p SendMany) error {
		s.Notes = append(s.Notes, "lost")
		for range p.N {
			c.Send("peer", Jot{Text: "hi"})
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, a ArmMany) error {
		for i := range a.N {
			s.Armed = append(s.Armed, c.SetTimer(c.Now().Add(time.Duration(a.From+i+1)*time.Second), Tock{}))
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, _ CancelAll) error {
		s.Notes = append(s.Notes, "lost")
		for _, h := range s.Armed {
			c.CancelTimer(h)
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, g Grow) error {
		s.Blob = make([]byte, g.Bytes)
		for range g.Effects {
			c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "https://x.example/"})
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, b BigReply) error {
		c.Reply(make([]byte, b.Bytes))
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, b BigParams) error {
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: "https://x.example/", Body: make([]byte, b.Bytes)})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, b BigTimer) error {
		c.SetTimer(c.Now().Add(time.Hour), Tock{Pad: make([]byte, b.Bytes)})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, _ FarTimer) error {
		// Encodable as a Timestamp, but past what the stores keep.
		c.SetTimer(time.Date(2262, 3, 1, 0, 0, 0, 0, time.UTC), Tock{})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, ch Chatty) error {
		for range ch.N {
			c.Log("line")
		}
		return nil
	})
	world.On(d, func(c *world.Ctx, s *Hoard, _ Tock) error { return nil })
	return d
}

// overLimit checks that res is an error outcome for exceeding limit what
// by asking got of at most max, with the state, what awaits and what
// leaves the world unchanged from before, and that the next input runs.
func overLimit(t *testing.T, f *feeder[Hoard], res world.StepResult, before []byte, what string, got, max int) {
	t.Helper()
	wantOutcome(t, res, world.OutcomeError)
	var le *world.LimitError
	if !errors.As(res.Err, &le) || !errors.Is(res.Err, world.ErrLimit) {
		t.Fatalf("err %v, want a *LimitError", res.Err)
	}
	if le.What != what || le.Got != got || le.Max != max {
		t.Fatalf("limit %+v, want %s %d of %d", *le, what, got, max)
	}
	if !strings.Contains(res.Err.Error(), what) || !strings.Contains(res.Err.Error(), "over)") {
		t.Fatalf("error text %q does not say which limit and by how much", res.Err)
	}
	if string(res.State) != string(before) {
		t.Fatal("the state changed in a step over a limit")
	}
	if len(res.Intents)+len(res.TimerSets)+len(res.TimerCancels) != 0 {
		t.Fatalf("a step over a limit kept %d intents, %d timers, %d cancels", len(res.Intents), len(res.TimerSets), len(res.TimerCancels))
	}
	if res.Height != f.w.Height() || res.Height != uint64(len(f.records)) {
		t.Fatalf("height %d: the input was not consumed", res.Height)
	}
	next := f.event(Jot{Text: "next"})
	wantOutcome(t, next, world.OutcomeOK)
	if n := f.value().Notes; len(n) == 0 || n[len(n)-1] != "next" {
		t.Fatalf("notes %v: the next input did not run", n)
	}
}

// TestHandlerErrorTextIsBoundedInTheJournal: a handler's 5 MiB error is an
// error outcome whose journaled text is cut to MaxErrorBytes with a marker
// saying how long it was; the error still matches ErrHandler, and the
// next input runs.
func TestHandlerErrorTextIsBoundedInTheJournal(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	f.event(Jot{Text: "first"})
	before := f.w.State()
	res := f.event(LongError{Bytes: 5 << 20})
	wantOutcome(t, res, world.OutcomeError)
	if !errors.Is(res.Err, world.ErrHandler) {
		t.Fatalf("err does not match ErrHandler: %T", res.Err)
	}
	var he *world.HandlerError
	if !errors.As(res.Err, &he) || len(he.Err.Error()) != 5<<20 {
		t.Fatal("the handler's own error is not reachable through the bounded one")
	}
	text := res.Err.Error()
	full := strconv.Itoa(len(he.Error())) + " bytes"
	if len(text) > world.MaxErrorBytes || !utf8.ValidString(text) || !strings.HasSuffix(text, "kept]") || !strings.Contains(text, full) {
		t.Fatalf("error text of %d bytes ends %q: want at most %d with a marker naming the full length",
			len(text), text[max(0, len(text)-60):], world.MaxErrorBytes)
	}
	var rec struct {
		Error string `cbor:"error"`
	}
	if err := event.Unmarshal(res.Record.Payload, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Error != text {
		t.Fatalf("journaled error (%d bytes) is not the bounded text", len(rec.Error))
	}
	if string(res.State) != string(before) {
		t.Fatal("state changed")
	}
	if res.Reply != nil {
		t.Fatal("an event got a reply")
	}
	wantOutcome(t, f.event(Jot{Text: "next"}), world.OutcomeOK)
}

// TestErrorTextThatIsNotUTF8IsJournaled: an error text with invalid bytes
// could not be encoded into the record at all, failing the step for ever;
// it is journaled with the bytes replaced.
func TestErrorTextThatIsNotUTF8IsJournaled(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	res := f.event(BadUTF8{})
	wantOutcome(t, res, world.OutcomeError)
	if got := res.Err.Error(); !strings.Contains(got, "bad \uFFFD") || !errors.Is(res.Err, world.ErrHandler) {
		t.Fatalf("err %q", got)
	}
	wantOutcome(t, f.event(Jot{Text: "next"}), world.OutcomeOK)
}

func TestTenThousandAndOneEffectsAreAnErrorOutcome(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	before := f.w.State()
	res := f.event(Spray{N: 10_001})
	overLimit(t, f, res, before, "intents", 10_001, world.MaxStepIntents)
	if len(f.w.Awaiting()) != 0 {
		t.Fatalf("the world awaits %d intents of a failed step", len(f.w.Awaiting()))
	}
	// At the limit it is a step like any other.
	if res := f.event(Spray{N: world.MaxStepIntents}); res.Outcome != world.OutcomeOK || len(res.Intents) != world.MaxStepIntents {
		t.Fatalf("at the limit: %s with %d intents (%v)", res.Outcome, len(res.Intents), res.Err)
	}
}

func TestTooManySendsAreAnErrorOutcome(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	before := f.w.State()
	overLimit(t, f, f.event(SendMany{N: world.MaxStepIntents + 1}), before, "intents", world.MaxStepIntents+1, world.MaxStepIntents)
}

func TestTooManyTimersAreAnErrorOutcome(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	before := f.w.State()
	overLimit(t, f, f.event(ArmMany{N: world.MaxStepTimers + 5}), before, "timers", world.MaxStepTimers+5, world.MaxStepTimers)
	if len(f.w.Timers()) != 0 {
		t.Fatalf("%d timers armed by a failed step", len(f.w.Timers()))
	}
}

func TestTooManyCancelsAreAnErrorOutcome(t *testing.T) {
	def := oversizeDef()
	f := newFeeder(t, def, "w")
	wantOutcome(t, f.event(ArmMany{N: world.MaxStepTimers}), world.OutcomeOK)
	wantOutcome(t, f.event(ArmMany{N: 2, From: world.MaxStepTimers}), world.OutcomeOK)
	before := f.w.State()
	overLimit(t, f, f.event(CancelAll{}), before, "cancels", world.MaxStepTimers+2, world.MaxStepCancels)
	if len(f.w.Timers()) != world.MaxStepTimers+2 {
		t.Fatalf("%d timers armed: a failed step cancelled some", len(f.w.Timers()))
	}
}

func TestStateOverTheBoundIsAnErrorOutcomeAndTheStateIsUnchanged(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	f.event(Jot{Text: "kept"})
	before := f.w.State()
	res := f.event(Grow{Bytes: world.MaxStateBytes})
	// The image around the blob makes the state a little larger than it.
	var le *world.LimitError
	if !errors.As(res.Err, &le) || le.Got <= world.MaxStateBytes {
		t.Fatalf("err %v, want the state limit", res.Err)
	}
	overLimit(t, f, res, before, "state", le.Got, world.MaxStateBytes)
	if v := f.value(); len(v.Blob) != 0 || v.Notes[0] != "kept" {
		t.Fatal("the state of the failed step was kept")
	}

	// S within the bound, but not with the intents the step leaves
	// awaited: the bound is on the state as it is snapshotted.
	before = f.w.State()
	res = f.event(Grow{Bytes: world.MaxStateBytes - 50_000, Effects: world.MaxStepIntents})
	if !errors.As(res.Err, &le) || le.Got <= world.MaxStateBytes {
		t.Fatalf("err %v, want the state limit", res.Err)
	}
	overLimit(t, f, res, before, "state", le.Got, world.MaxStateBytes)
	if len(f.w.Awaiting()) != 0 {
		t.Fatal("the failed step's intents are awaited")
	}
}

func TestReplyParamsAndTimerPayloadOverTheirBoundsAreErrorOutcomes(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	before := f.w.State()
	res := f.call("c1", BigReply{Bytes: world.MaxReplyBytes})
	if res.Reply == nil || !errors.Is(res.Reply.Err, world.ErrLimit) || res.Reply.Value != nil {
		t.Fatalf("reply %+v: the caller must get the limit error", res.Reply)
	}
	overLimit(t, f, res, before, "reply", world.MaxReplyBytes+5, world.MaxReplyBytes)

	before = f.w.State()
	res = f.event(BigParams{Bytes: world.MaxParamsBytes})
	var le *world.LimitError
	if !errors.As(res.Err, &le) {
		t.Fatalf("err %v", res.Err)
	}
	overLimit(t, f, res, before, "params", le.Got, world.MaxParamsBytes)

	before = f.w.State()
	res = f.event(BigTimer{Bytes: world.MaxTimerBytes})
	if !errors.As(res.Err, &le) {
		t.Fatalf("err %v", res.Err)
	}
	overLimit(t, f, res, before, "timer payload", le.Got, world.MaxTimerBytes)

	res = f.event(FarTimer{})
	if !errors.Is(res.Err, world.ErrUsage) || len(f.w.Timers()) != 0 {
		t.Fatalf("a timer past the stores' range: %v, %d armed", res.Err, len(f.w.Timers()))
	}
}

// TestLogsPastTheBoundAreDroppedAndCounted: logs are not journaled, so too
// many is no failure; the step keeps MaxStepLogs and says how many it
// dropped.
func TestLogsPastTheBoundAreDroppedAndCounted(t *testing.T) {
	f := newFeeder(t, oversizeDef(), "w")
	res := f.event(Chatty{N: world.MaxStepLogs + 7})
	wantOutcome(t, res, world.OutcomeOK)
	if len(res.Logs) != world.MaxStepLogs+1 {
		t.Fatalf("%d log entries, want %d and one that counts the rest", len(res.Logs), world.MaxStepLogs)
	}
	last := res.Logs[len(res.Logs)-1]
	if len(last.Attrs) == 0 || last.Attrs[0].Key != "dropped" || last.Attrs[0].Value != 7 {
		t.Fatalf("last entry %+v, want the 7 dropped counted", last)
	}
}

// TestDefinitionNamesTheStoreWouldRefuseAreInvalid: the world's name is
// every record's planId and an effect kind every intent's kind; a name no
// store keeps would make every commit fail.
func TestDefinitionNamesTheStoreWouldRefuseAreInvalid(t *testing.T) {
	long := strings.Repeat("n", event.MaxIDBytes+1)
	if err := world.New[Hoard](long, 1).Err(); !errors.Is(err, world.ErrInvalidDef) {
		t.Fatalf("a %d-byte world name: %v", len(long), err)
	}
	if err := world.New[Hoard]("a\x00b", 1).Err(); !errors.Is(err, world.ErrInvalidDef) {
		t.Fatalf("a world name with NUL: %v", err)
	}
	d := world.New[Hoard]("ok", 1)
	world.EffectKind[world.HTTPRequest](d, long)
	if err := d.Err(); !errors.Is(err, world.ErrInvalidDef) {
		t.Fatalf("a %d-byte effect kind: %v", len(long), err)
	}
}

// TestReplayOfBoundedStepsIsByteIdentical: a journal of steps over every
// limit (and of the largest input the kernel reads) replays to the same
// state, byte for byte, and every record reads back.
func TestReplayOfBoundedStepsIsByteIdentical(t *testing.T) {
	def := oversizeDef()
	f := newFeeder(t, def, "w")
	f.event(Jot{Text: "a"})
	f.event(LongError{Bytes: 5 << 20})
	f.event(Spray{N: 10_001})
	f.event(SendMany{N: world.MaxStepIntents + 1})
	f.event(ArmMany{N: world.MaxStepTimers + 1})
	f.call("c1", BigReply{Bytes: world.MaxReplyBytes})
	f.event(Chatty{N: world.MaxStepLogs + 1})
	f.event(BadUTF8{})
	// The largest input the kernel reads: its record holds it whole, and
	// more, so it is over an input's limit and must still read back.
	big := mustEvent(t, Jot{Text: strings.Repeat("b", world.MaxInputBytes-64)})
	if len(big) > world.MaxInputBytes {
		t.Fatalf("test input of %d bytes is over the input limit", len(big))
	}
	wantOutcome(t, f.feed(vocab.KindEvent, big), world.OutcomeOK)
	if n := len(f.records[len(f.records)-1].Payload); n <= world.MaxInputBytes {
		t.Fatalf("the big input's record is %d bytes: not the case this test is for", n)
	}
	f.event(Jot{Text: "z"})
	w, err := world.Replay(def, "w", world.Snapshot{}, f.records)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if string(w.State()) != string(f.w.State()) || w.Height() != f.w.Height() {
		t.Fatal("the replayed state is not byte-identical")
	}
	for i, e := range f.records {
		if _, err := world.RecordInput(e); err != nil {
			t.Fatalf("record %d does not read back: %v", i+1, err)
		}
	}
}

// TestRefusedStepIsConsumedAndReplaysWithoutItsHandler: a step the store
// refused, recorded with Refuse, is an error outcome that consumes its
// input and leaves the state; replay re-derives it without running the
// handler (which would do what the store refused), and the next input
// runs.
func TestRefusedStepIsConsumedAndReplaysWithoutItsHandler(t *testing.T) {
	def := oversizeDef()
	f := newFeeder(t, def, "w")
	f.event(Jot{Text: "a"})
	before := f.w.State()
	f.seq++
	in := world.Input{Seq: f.seq, Kind: vocab.KindEvent, Payload: mustEvent(t, Jot{Text: "refused"}), EnqueuedAt: t0}
	cause := errors.New("store: invalid argument: too large")
	res, err := f.w.Refuse(in, t0, cause)
	if err != nil {
		t.Fatal(err)
	}
	f.records = append(f.records, res.Record)
	wantOutcome(t, res, world.OutcomeError)
	if !errors.Is(res.Err, world.ErrRefused) || !errors.Is(res.Err, cause) {
		t.Fatalf("err %v, want ErrRefused wrapping the store's", res.Err)
	}
	if string(res.State) != string(before) || res.Height != 2 {
		t.Fatal("a refused step changed the state or did not consume its input")
	}
	f.event(Jot{Text: "b"})
	w, err := world.Replay(def, "w", world.Snapshot{}, f.records)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if string(w.State()) != string(f.w.State()) {
		t.Fatal("replay of a refused step is not byte-identical")
	}
	if v, _ := w.Value(); strings.Join(v.Notes, ",") != "a,b" {
		t.Fatalf("notes %v: replay ran the refused step's handler", v.Notes)
	}
}
