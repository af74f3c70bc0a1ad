package world_test

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

type kCounter struct{ N int64 }

type kAdd struct{ By int64 }

// TestKernelErasesTheStateType: a Kernel loads, steps and replays exactly
// as the generic functions do; RecordInput and RecordCallID read back what
// a record was stepped with, so re-stepping it gives the same reply; and
// ForkState keeps the user's state while clearing what the world awaited.
func TestKernelErasesTheStateType(t *testing.T) {
	d := world.New[kCounter]("k.counter", 1)
	world.On(d, func(c *world.Ctx, s *kCounter, e kAdd) error {
		s.N += e.By
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "GET", URL: "http://x"})
		if c.IsCall() {
			c.Reply(s.N)
		}
		return nil
	})
	k := d.Kernel()
	if k.Name() != "k.counter" || k.Version() != 1 || k.Err() != nil {
		t.Fatalf("identity %s v%d err %v", k.Name(), k.Version(), k.Err())
	}
	in, err := k.Load("w", world.Snapshot{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := world.EncodeCall("c1", kAdd{By: 3})
	res, err := in.Step(world.Input{Seq: 1, Kind: vocab.KindCall, Payload: p, EnqueuedAt: time.Unix(1, 0)}, time.Unix(1, 0))
	if err != nil || res.Outcome != world.OutcomeOK || len(in.Awaiting()) != 1 || res.Reply == nil {
		t.Fatalf("step %v %v awaiting %v", res.Outcome, err, in.Awaiting())
	}
	again, err := k.Replay("w", world.Snapshot{}, []event.Envelope{res.Record})
	if err != nil || again.StateHash() != in.StateHash() {
		t.Fatalf("replay: %v", err)
	}
	callID, replyHash, err := world.RecordCallID(res.Record)
	if err != nil || callID != "c1" || replyHash != world.Hash(res.Reply.Value) {
		t.Fatalf("call id %q reply hash %q: %v", callID, replyHash, err)
	}
	input, err := world.RecordInput(res.Record)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := k.Load("w", world.Snapshot{})
	re, err := base.Step(input, time.Unix(9, 0))
	if err != nil || string(re.Reply.Value) != string(res.Reply.Value) {
		t.Fatalf("re-stepped reply %v: %v", re.Reply, err)
	}
	forked, err := k.ForkState(in.State())
	if err != nil {
		t.Fatal(err)
	}
	fw, err := k.Load("f", world.Snapshot{Height: 1, State: forked})
	if err != nil || len(fw.Awaiting()) != 0 || len(fw.Timers()) != 0 {
		t.Fatalf("fork awaits %v: %v", fw.Awaiting(), err)
	}
	v, err := world.Load(d, "f", fw.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := v.Value(); s.N != 3 {
		t.Fatalf("fork state %+v, want N=3", s)
	}
	if _, err := world.RecordInput(event.Envelope{Payload: []byte{0x01}}); err == nil {
		t.Fatal("a foreign record was read as a step")
	}
}
