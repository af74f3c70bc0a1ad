package node_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
)

// TestASupersededNodeStopsAndSaysSo: a node runs; another process starts
// under the same worker id (its heartbeat names a new incarnation), so the
// store refuses the node's next heartbeat. The node must stop acting of
// its own accord: Done closes, Err is ErrSuperseded (and store.ErrFenced
// through it), Ready reports it, its orchestrator gave the lease up, and
// its Stop afterwards does not mark the worker id, now the successor's,
// draining. Before, only the host failed: the node, its orchestrator and
// its timer worker ran on as a zombie nothing restarted, and a Stop
// drained the successor.
func TestASupersededNodeStopsAndSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		defer st.Close()
		n := start(t, ctx, st, "w1")
		for n.Host().AliveUntil().IsZero() || !n.Leader() {
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case <-n.Done():
			t.Fatal("Done closed while the node's incarnation is current")
		default:
		}
		if n.Err() != nil {
			t.Fatalf("Err %v before any refusal", n.Err())
		}

		// The successor's heartbeat supersedes the node's incarnation.
		if _, err := st.Heartbeat(ctx, "w1", 10, store.AliveAs("successor", ttl)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-n.Done():
		case <-time.After(2 * ttl):
			t.Fatal("the superseded node did not stop acting within two TTLs")
		}
		if err := n.Err(); !errors.Is(err, node.ErrSuperseded) || !errors.Is(err, store.ErrFenced) {
			t.Fatalf("Err %v, want ErrSuperseded wrapping store.ErrFenced", err)
		}
		if err := n.Ready(ctx); !errors.Is(err, node.ErrSuperseded) {
			t.Fatalf("Ready %v, want ErrSuperseded", err)
		}
		if n.Leader() {
			t.Fatal("the superseded node still acts as the orchestrator")
		}
		if err := n.Stop(ctx); err != nil {
			t.Fatalf("Stop after supersession: %v", err)
		}
		ws, err := st.ListWorkers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == "w1" && (w.Draining || w.Incarnation != "successor") {
				t.Fatalf("worker record %+v after the old node's Stop, want the successor's, not draining", w)
			}
		}
	})
}
