package storetest

import (
	"testing"

	"github.com/orrery-run/orrery/store"
)

// Stream kinds (issue 7 item 2): a world's journal is written only under
// that world's own fence; a stream no world owns is a FreeStream, named as
// such, never implied by a missing option.
func streamKindTests() []testCase {
	return []testCase{
		{"AppendToAWorldStreamNeedsThatWorldsFence", testWorldStreamNeedsOwnFence},
		{"FreeStreamAppendsNeedNoLeaseAndNeverWriteAWorld", testFreeStreams},
	}
}

func testWorldStreamNeedsOwnFence(t *testing.T, open Factory) {
	f := setup(t, open)
	ea := f.leased("a", "A")
	eb := f.leased("b", "A")
	f.append("a", fenced("a", ea), "first")
	before := f.worldState("a")
	for _, c := range []struct {
		what string
		opts store.AppendOptions
	}{
		{"no fence", store.AppendOptions{}},
		{"no fence, with ExpectedHead", store.AppendOptions{ExpectedHead: store.Head(f.head("a"))}},
		{"another world's fence", fenced("b", eb)},
		{"another world's fence at this world's epoch", fenced("b", ea)},
		{"FreeStream on a world's stream", freeOpts},
	} {
		_, err := f.s.Append(bg, "a", []store.Record{rec("x")}, c.opts)
		wantErr(t, err, store.ErrFenced, c.what)
	}
	if after := f.worldState("a"); after != before {
		t.Fatalf("refused appends changed the world:\nbefore %s\nafter  %s", before, after)
	}
	// A fence on a stream that names no world: the stream is not a world's.
	_, err := f.s.Append(bg, "not-a-world", []store.Record{rec("x")}, fenced("not-a-world", 1))
	wantErr(t, err, store.ErrWorldNotFound, "WorldStream append to a stream no world owns")
	_, err = f.s.Append(bg, "not-a-world", []store.Record{rec("x")}, store.AppendOptions{})
	wantErr(t, err, store.ErrWorldNotFound, "unfenced WorldStream append to a stream no world owns")
	if h := f.head("not-a-world"); h != 0 {
		t.Fatalf("refused appends moved the head of not-a-world to %d", h)
	}
	// The world's own fence writes.
	if got := f.append("a", fenced("a", ea), "x"); got[0].Idempotent {
		t.Fatalf("fenced append = %+v", got[0])
	}
}

func testFreeStreams(t *testing.T, open Factory) {
	f := setup(t, open)
	got := f.append("run-1", freeOpts, "a", "b")
	if got[0].Idempotent || got[1].RunSeq != got[0].RunSeq+1 {
		t.Fatalf("free stream append = %+v", got)
	}
	// A free stream takes no fence.
	f.leased("w", "A")
	_, err := f.s.Append(bg, "run-1", []store.Record{rec("c")}, store.AppendOptions{Kind: store.FreeStream, Fence: &store.Fence{World: "w", Epoch: 1}})
	wantErr(t, err, store.ErrInvalid, "FreeStream append with a fence")
	if n := len(f.read("run-1")); n != 2 {
		t.Fatalf("%d events after a refused append, want 2", n)
	}
	// A world cannot be created over a free stream that has events, seeded
	// or not, nor forked onto one.
	_, err = f.s.CreateWorld(bg, universe, "run-1", nil)
	wantErr(t, err, store.ErrWorldExists, "CreateWorld over a free stream with events")
	_, err = f.s.CreateWorld(bg, universe, "run-1", &store.Snapshot{Height: 5, StateHash: "h"})
	wantErr(t, err, store.ErrWorldExists, "seeded CreateWorld over a free stream with events")
	e := f.acquire("w", "A").Epoch
	a := f.append("w", fenced("w", e), "s")
	must(t, f.s.PutSnapshot(bg, "w", e, snap(a[0].RunSeq, "s")), "PutSnapshot")
	_, err = f.s.ForkWorld(bg, "w", a[0].RunSeq, "run-1")
	wantErr(t, err, store.ErrWorldExists, "ForkWorld onto a free stream with events")
	if _, err := f.s.GetWorld(bg, "run-1"); err == nil {
		t.Fatal("a world was created over a free stream")
	}
}
