package world_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// journal runs a workload touching every kind of input and outcome on the
// ledger world defined by def, and returns the feeder.
func journal(t *testing.T, def *world.Def[Ledger]) *feeder[Ledger] {
	t.Helper()
	f := newFeeder(t, def, "acct")
	f.event(Deposit{Amount: 10})
	f.event(Deposit{Amount: 60})
	pay := f.event(Withdraw{Amount: 5})
	f.event(Fail{})
	f.event(Boom{})
	f.event(Nameless{})
	f.feed(vocab.KindEvent, []byte{0xff})
	f.event(Roll{})
	set := f.event(Remind{Name: "r", AfterSec: 30})
	f.feed(vocab.KindTimer, set.TimerSets[0].Payload)
	f.receipt(world.Receipt{IntentHash: pay.Intents[0].IntentHash, Kind: world.KindHTTPRequest, Status: vocab.ReceiptError, Body: []byte{0xa0}})
	f.receipt(world.Receipt{IntentHash: pay.Intents[0].IntentHash, Kind: world.KindHTTPRequest, Status: vocab.ReceiptOK})
	f.call("c1", Ask{})
	f.call("c2", Tell{Dest: "other", Text: "x"})
	f.event(Deposit{Amount: 100})
	f.event(Remind{Name: "s", AfterSec: 1})
	f.event(Forget{Name: "s"})
	return f
}

func TestReplayReproducesTheStateByteForByteAndReDerivesTheIntents(t *testing.T) {
	f := journal(t, effectsDef())
	for _, base := range []int{0, 1, 7, len(f.records) - 1, len(f.records)} {
		snap := world.Snapshot{}
		if base > 0 {
			snap = world.Snapshot{Height: uint64(base), State: f.results[base-1].State}
		}
		w, err := world.Replay(effectsDef(), "acct", snap, f.records[base:])
		if err != nil {
			t.Fatalf("replay from height %d: %v", base, err)
		}
		if string(w.State()) != string(f.w.State()) || w.Height() != f.w.Height() || w.StateHash() != f.w.StateHash() {
			t.Fatalf("replay from height %d: state differs", base)
		}
		if !slices.Equal(w.Awaiting(), f.w.Awaiting()) || !slices.Equal(w.Timers(), f.w.Timers()) {
			t.Fatalf("replay from height %d: awaited intents or timers differ", base)
		}
	}
	// Replay re-derives intents: each record names the hashes of its
	// step's intents, and a replay that derived others would have failed
	// (see TestReplayNamesChangedIntents); here, check one directly.
	var rec struct {
		Intents []string `cbor:"intents"`
	}
	decodePayload(t, f.records[2], &rec)
	if len(rec.Intents) != 1 || rec.Intents[0] != f.results[2].Intents[0].IntentHash {
		t.Fatalf("record intents %v", rec.Intents)
	}
}

func TestReplayNamesTheFirstDivergentHeightOfAChangedHandler(t *testing.T) {
	f := journal(t, effectsDef())
	// The changed handler doubles deposits: the first deposit (height 1)
	// is where the journal and the definition part.
	_, err := world.Replay(ledgerDef("ledger", 1, 2), "acct", world.Snapshot{}, f.records)
	var de *world.DivergenceError
	if !errors.As(err, &de) || !errors.Is(err, world.ErrDivergence) {
		t.Fatalf("err %v, want a DivergenceError", err)
	}
	if de.Height != 1 || de.Reason != world.ReasonState {
		t.Fatalf("diverged at %d (%s), want 1 (state)", de.Height, de.Reason)
	}
	if de.Want.StateHash != f.results[0].StateHash || de.Got.StateHash == de.Want.StateHash || de.Got.StateHash == "" {
		t.Fatalf("want %s got %s: both hashes must be reported", de.Want.StateHash, de.Got.StateHash)
	}
	// From a snapshot after every deposit but the last, the first
	// divergence is that deposit.
	base := 14
	_, err = world.Replay(ledgerDef("ledger", 1, 2), "acct", world.Snapshot{Height: uint64(base), State: f.results[base-1].State}, f.records[base:])
	if !errors.As(err, &de) || de.Height != 15 {
		t.Fatalf("err %v, want divergence at height 15", err)
	}
}

// PayTwice is a handler whose effect changes between versions.
type PayTwice struct{}

func TestReplayNamesChangedIntents(t *testing.T) {
	mk := func(url string) *world.Def[Ledger] {
		d := world.New[Ledger]("p", 1)
		world.On(d, func(c *world.Ctx, s *Ledger, d Deposit) error { s.Balance += d.Amount; return nil })
		world.On(d, func(c *world.Ctx, s *Ledger, _ PayTwice) error {
			c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: url})
			return nil
		})
		return d
	}
	f := newFeeder(t, mk("https://a.example"), "p1")
	f.event(Deposit{Amount: 1})
	f.event(PayTwice{})
	_, err := world.Replay(mk("https://b.example"), "p1", world.Snapshot{}, f.records)
	var de *world.DivergenceError
	if !errors.As(err, &de) || de.Height != 2 || de.Reason != world.ReasonIntents {
		t.Fatalf("err %v, want divergence of intents at height 2", err)
	}
	if slices.Equal(de.Want.Intents, de.Got.Intents) || len(de.Got.Intents) != 1 {
		t.Fatalf("want %v got %v", de.Want.Intents, de.Got.Intents)
	}
	if de.Want.StateHash == de.Got.StateHash {
		t.Fatal("awaited intents are part of the state, so its hash must differ too")
	}
}

func TestReplayNamesAChangedVersionAtTheFirstRecord(t *testing.T) {
	f := journal(t, effectsDef())
	base := 3
	_, err := world.Replay(ledgerDef("ledger", 2, 1), "acct", world.Snapshot{Height: uint64(base), State: f.results[base-1].State}, f.records[base:])
	var de *world.DivergenceError
	if !errors.As(err, &de) || de.Height != uint64(base+1) || de.Reason != world.ReasonVersion {
		t.Fatalf("err %v, want a version divergence at height %d", err, base+1)
	}
	if de.Want.Version != 1 || de.Got.Version != 2 || de.Want.StateHash != de.Got.StateHash {
		t.Fatalf("digests %+v %+v", de.Want, de.Got)
	}
	_, err = world.Replay(ledgerDef("other", 1, 1), "acct", world.Snapshot{}, f.records)
	if !errors.As(err, &de) || de.Height != 1 || de.Reason != world.ReasonPlan {
		t.Fatalf("err %v, want a plan divergence at height 1", err)
	}
}

func TestReplayRefusesAnUnusableTail(t *testing.T) {
	f := journal(t, effectsDef())
	gap := slices.Clone(f.records)
	gap = slices.Delete(gap, 3, 4)
	foreign := slices.Clone(f.records)
	foreign[2].StreamID = "someone-else"
	wrongType := slices.Clone(f.records)
	wrongType[2].EventType = event.StepCompleted
	badPayload := slices.Clone(f.records)
	badPayload[2].Payload = []byte{0xa0}
	badStep := slices.Clone(f.records)
	badStep[2].StepID = "inbox/999"
	for name, tail := range map[string][]event.Envelope{
		"gap": gap, "foreign stream": foreign, "event type": wrongType, "payload": badPayload, "step id": badStep,
	} {
		_, err := world.Replay(effectsDef(), "acct", world.Snapshot{}, tail)
		var te *world.TailError
		if !errors.As(err, &te) || !errors.Is(err, world.ErrTail) {
			t.Errorf("%s: err %v, want a TailError", name, err)
		}
	}
}

// TestOneDefinitionStepsManyWorldsConcurrently is the plane's use: one
// Def, many worlds on many goroutines (each replaying the same journal).
// Run with -race.
func TestOneDefinitionStepsManyWorldsConcurrently(t *testing.T) {
	f := journal(t, effectsDef())
	def := effectsDef()
	type result struct {
		hash string
		err  error
	}
	done := make(chan result)
	for range 4 {
		go func() {
			w, err := world.Replay(def, "acct", world.Snapshot{}, f.records)
			if err != nil {
				done <- result{err: err}
				return
			}
			done <- result{hash: w.StateHash()}
		}()
	}
	for range 4 {
		if r := <-done; r.err != nil || r.hash != f.w.StateHash() {
			t.Fatalf("a concurrent replay gave %s, %v; want %s", r.hash, r.err, f.w.StateHash())
		}
	}
}

// BenchmarkReplay replays a journal of 1,000 events from genesis: the
// kernel's part of a restore (decoding each record, re-stepping it and
// comparing the two), per event.
func BenchmarkReplay(b *testing.B) {
	def := world.New[Ledger]("bench.replay", 1)
	world.On(def, func(c *world.Ctx, s *Ledger, p Ping) error {
		s.Balance++
		return nil
	})
	w, err := world.Load(def, "acct", world.Snapshot{})
	if err != nil {
		b.Fatal(err)
	}
	var tail []event.Envelope
	for i := range 1000 {
		p, err := world.EncodeEvent(Ping{Name: "p"})
		if err != nil {
			b.Fatal(err)
		}
		at := t0.Add(time.Duration(i) * time.Millisecond)
		res, err := w.Step(world.Input{Seq: uint64(i + 1), Kind: vocab.KindEvent, Payload: p, EnqueuedAt: at}, at)
		if err != nil {
			b.Fatal(err)
		}
		tail = append(tail, res.Record)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := world.Replay(def, "acct", world.Snapshot{}, tail); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/event")
}
