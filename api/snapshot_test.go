package api_test

import (
	"errors"
	"testing"

	"github.com/orrery-run/orrery/api"
	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/internal/testworlds"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
)

// TestSnapshotOnDemand: with periodic snapshots a thousand heights apart,
// a world's latest snapshot is at its head only after POST …/snapshot
// (a fork at any height needs none: it replays), which the
// lease holder answers at a step boundary: the snapshot is at the head,
// adds no journal record, and a fork right after it starts from it (at
// that height, with that state). On every backend.
func TestSnapshotOnDemand(t *testing.T) {
	for _, backend := range testrig.Backends() {
		t.Run(backend, func(t *testing.T) {
			var st store.Store
			if backend != testrig.Memstore {
				st = testrig.Open(t, t.Context(), backend, &testrig.Clock{})
			}
			r := &rig{testrig.NewNode(t, testrig.NodeOptions{
				Store: st, Kernels: kernels(), Universes: []string{universe},
				Host: func(hc *plane.HostConfig) { hc.SnapshotEvery = 1000 },
			})}
			r.Create("s1", universe)
			for i, k := range []string{"a", "b", "c"} {
				must(r.Client.Send(r.Ctx, "s1", typeName(t, testworlds.Add{}), testworlds.Add{By: int64(i + 1), Key: k}, k))(t)
			}
			must(r.Client.Call(r.Ctx, "s1", typeName(t, testworlds.Get{}), nil, api.CallOptions{}))(t)
			const head = 4 // three adds and the get

			// No snapshot at the head yet: a fork at the latest snapshot
			// (height 0) starts below the head.
			early, _, err := r.Client.Fork(r.Ctx, "s1", "early", 0)
			if err != nil && !errors.Is(err, store.ErrSnapshotNotFound) {
				t.Fatalf("fork at the latest snapshot before the snapshot: %v", err)
			}
			if err == nil && (early.Lineage == nil || early.Lineage.ForkedAtHeight >= head) {
				t.Fatalf("fork at the latest snapshot before the snapshot: lineage %+v, want below %d", early.Lineage, head)
			}

			snap, err := r.Client.Snapshot(r.Ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			src, srcState := r.stateOf("s1")
			if snap.World != "s1" || snap.Height != head || snap.StateHash != src.Hash {
				t.Fatalf("snapshot %+v, want height %d and hash %s", snap, head, src.Hash)
			}
			v := must(r.Client.GetWorld(r.Ctx, "s1"))(t)
			if v.Head != head {
				t.Fatalf("the request left a journal record: head %d, want %d", v.Head, head)
			}
			// Asked again with nothing new, the same snapshot.
			if again := must(r.Client.Snapshot(r.Ctx, "s1"))(t); again.Height != head || again.StateHash != snap.StateHash {
				t.Fatalf("second snapshot %+v", again)
			}

			fork, created, err := r.Client.Fork(r.Ctx, "s1", "f1", 0) // 0: the active snapshot
			if err != nil || !created {
				t.Fatalf("fork: %v (created %v)", err, created)
			}
			if fork.Lineage == nil || fork.Lineage.ForkedAtHeight != head || fork.Lineage.ParentSnapshotHash != snap.StateHash {
				t.Fatalf("fork lineage %+v, want height %d from %s", fork.Lineage, head, snap.StateHash)
			}
			fs, fstate := r.stateOf("f1")
			if fs.Height != head || fstate.N != srcState.N || fstate.N != 6 {
				t.Fatalf("fork state at %d: N %d, source N %d", fs.Height, fstate.N, srcState.N)
			}
			// The source goes on after its snapshot.
			must(r.Client.Send(r.Ctx, "s1", typeName(t, testworlds.Add{}), testworlds.Add{By: 10, Key: "d"}, "d"))(t)
			if got := must(r.Client.Snapshot(r.Ctx, "s1"))(t); got.Height != head+1 {
				t.Fatalf("snapshot after one more step: height %d, want %d", got.Height, head+1)
			}
		})
	}
}

// TestSnapshotRefusals: an unknown world is not found (as a world); a
// paused world takes no input, a snapshot request included.
func TestSnapshotRefusals(t *testing.T) {
	r := newRig(t, rigOptions{})
	if _, err := r.Client.Snapshot(r.Ctx, "ghost"); !errors.Is(err, store.ErrWorldNotFound) {
		t.Fatalf("unknown world: %v", err)
	}
	r.Create("p1", universe)
	must(r.Client.Pause(r.Ctx, "p1", "hold"))(t)
	if _, err := r.Client.Snapshot(r.Ctx, "p1"); !errors.Is(err, store.ErrWorldPaused) {
		t.Fatalf("paused world: %v", err)
	}
}
