package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/plane/node"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

type tally struct {
	N     int64
	Beeps int64
	Paid  []string
}

type Add struct{ By int64 }
type Get struct{}
type Alarm struct{ AfterMs int64 }
type Beep struct{}
type Pay struct{ URL string }

const universe = "t"

func kernels() plane.Kernels {
	d := world.New[tally]("test.tally", 1)
	world.On(d, func(c *world.Ctx, s *tally, a Add) error { s.N += a.By; return nil })
	world.On(d, func(c *world.Ctx, s *tally, _ Get) error { c.Reply(s.N); return nil })
	world.On(d, func(c *world.Ctx, s *tally, a Alarm) error {
		c.SetTimer(c.Now().Add(time.Duration(a.AfterMs)*time.Millisecond), Beep{})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, _ Beep) error { s.Beeps++; return nil })
	world.On(d, func(c *world.Ctx, s *tally, p Pay) error {
		c.Effect(world.KindHTTPRequest, world.HTTPRequest{Method: "POST", URL: p.URL})
		return nil
	})
	world.On(d, func(c *world.Ctx, s *tally, r world.Receipt) error {
		s.Paid = append(s.Paid, string(r.Status))
		return nil
	})
	return plane.Kernels{universe: d.Kernel()}
}

const ttl = 2 * time.Second

func start(t *testing.T, ctx context.Context, st store.Store, worker string) *node.Node {
	t.Helper()
	n, err := node.Start(ctx, node.Config{Worker: worker, Store: st, Kernels: kernels(), LeaseTTL: ttl, ClaimTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop(context.Background()) }) // inside the bubble; a no-op after a Stop or Kill
	return n
}

func worldIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%02d", i)
	}
	return ids
}

// tallyOf reads world id's state through n's client.
func tallyOf(t *testing.T, ctx context.Context, n *node.Node, id string) tally {
	t.Helper()
	snap, err := n.Client().State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ State tally }
	if err := world.Decode(snap.State, &s); err != nil {
		t.Fatal(err)
	}
	return s.State
}

// holders waits (in the bubble's virtual time) until every world is leased,
// unexpired, by one of want, and returns each world's lease.
func holders(t *testing.T, ctx context.Context, st store.Store, ids []string, want ...string) map[string]store.Lease {
	t.Helper()
	ok := map[string]bool{}
	for _, w := range want {
		ok[w] = true
	}
	for range 2000 {
		now, err := st.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.Lease{}
		for _, id := range ids {
			l, found, err := st.GetLease(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if found && ok[l.Holder] && l.ExpiresAt.After(now) {
				out[id] = l
			}
		}
		if len(out) == len(ids) {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("worlds never all held by %v", want)
	return nil
}

func create(t *testing.T, ctx context.Context, st store.Store, ids []string) {
	t.Helper()
	for _, id := range ids {
		if _, err := st.CreateWorld(ctx, universe, id, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// newWorlds makes a store holding n fresh worlds, and returns their ids.
func newWorlds(t *testing.T, ctx context.Context, n int) (*memstore.Store, []string) {
	t.Helper()
	st := memstore.New()
	ids := worldIDs(n)
	create(t, ctx, st, ids)
	return st, ids
}

func TestStartRefusesAnIncompleteConfig(t *testing.T) {
	_, err := node.Start(context.Background(), node.Config{Worker: "w"})
	if !errors.Is(err, node.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

// Two nodes share the worlds the orchestrator places; Stop hands the
// stopping node's worlds to the other at once (released leases, higher
// epochs, well inside one TTL of virtual time), with their state intact.
func TestStopHandsWorldsOverWithoutWaitingForTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, ids := newWorlds(t, ctx, 8)
		// a acts as the orchestrator, so its Stop must also hand placement
		// over (reconcile, then release the orchestrator lease) for the
		// worlds to move inside one TTL.
		a := start(t, ctx, st, "a")
		for !a.Leader() {
			time.Sleep(10 * time.Millisecond)
		}
		b := start(t, ctx, st, "b")
		before := holders(t, ctx, st, ids, "a", "b")
		onA := 0
		for _, l := range before {
			if l.Holder == "a" {
				onA++
			}
		}
		if onA == 0 || onA == len(ids) {
			t.Fatalf("placement put %d of %d worlds on a; want them spread", onA, len(ids))
		}
		for i, id := range ids {
			if _, err := a.Client().Send(ctx, id, Add{By: int64(i + 1)}, "k"); err != nil {
				t.Fatal(err)
			}
		}
		orchLease, _, err := st.GetLease(ctx, plane.OrchestratorWorld)
		if err != nil || orchLease.Holder != "a" {
			t.Fatalf("orchestrator lease %+v, %v; want a's", orchLease, err)
		}
		stopAt := time.Now()
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		after := holders(t, ctx, st, ids, "b")
		if took := time.Since(stopAt); took >= ttl {
			t.Fatalf("handoff took %v of virtual time, not less than the TTL %v", took, ttl)
		}
		for i, id := range ids {
			if before[id].Holder == "a" && after[id].Epoch <= before[id].Epoch {
				t.Fatalf("%s: epoch %d after handoff, was %d", id, after[id].Epoch, before[id].Epoch)
			}
			got, err := plane.CallAs[int64](ctx, b.Client(), id, Get{})
			if err != nil || got != int64(i+1) {
				t.Fatalf("%s: Get = %d, %v; want %d", id, got, err, i+1)
			}
		}
		if err := a.Ready(ctx); !errors.Is(err, node.ErrStopped) {
			t.Fatalf("a stopped node is ready: %v", err)
		}
		if err := b.Ready(ctx); err != nil {
			t.Fatalf("b not ready: %v", err)
		}
		for !b.Leader() {
			time.Sleep(10 * time.Millisecond)
		}
		if now := time.Now(); !now.Before(orchLease.ExpiresAt) {
			t.Fatalf("b became the orchestrator only %v after a's orchestrator lease would have expired", now.Sub(orchLease.ExpiresAt))
		}
		_ = b.Stop(ctx)
	})
}

// A killed node releases nothing: its worlds move only once their leases
// have expired, and then within half a TTL more; a timer armed before the
// crash fires on the survivor exactly once.
func TestKillMovesWorldsAfterTheTTLAndTimersSurvive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, ids := newWorlds(t, ctx, 6)
		a := start(t, ctx, st, "a")
		holders(t, ctx, st, ids, "a")
		b := start(t, ctx, st, "b")
		for _, id := range ids {
			if _, err := a.Client().Send(ctx, id, Alarm{AfterMs: 3000}, "alarm"); err != nil {
				t.Fatal(err)
			}
		}
		// The alarms are journaled (and the timers armed) before the crash.
		for _, id := range ids {
			for h, _ := st.Head(ctx, id); h < 1; h, _ = st.Head(ctx, id) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		moved := holders(t, ctx, st, ids, "a", "b")
		var firstExpiry time.Time
		for _, l := range moved {
			if l.Holder == "a" && (firstExpiry.IsZero() || l.ExpiresAt.Before(firstExpiry)) {
				firstExpiry = l.ExpiresAt
			}
		}
		killAt := time.Now()
		a.Kill(ctx)
		if !firstExpiry.IsZero() {
			// Just before a's first lease expires nobody else holds its worlds.
			time.Sleep(time.Until(firstExpiry) - time.Millisecond)
			for id, l := range moved {
				if now, found, _ := st.GetLease(ctx, id); l.Holder == "a" && found && now.Holder != "a" {
					t.Fatalf("%s moved to %q before a's lease expired", id, now.Holder)
				}
			}
		}
		after := holders(t, ctx, st, ids, "b")
		// The failover's bound, in virtual time, where it is exact whatever
		// the machine's load (the cluster tests, on real processes, only
		// print theirs): a's leases run out at most one TTL after the kill,
		// and a's liveness and orchestrator lease within the same TTL; the
		// acting orchestrator then moves a's worlds at its next reconcile,
		// at worst the half-TTL backstop later, and b acquires them at once.
		if took, bound := time.Since(killAt), ttl+ttl/2; took > bound {
			t.Fatalf("failover took %v of virtual time, more than the TTL plus the half-TTL backstop (%v)", took, bound)
		}
		for _, id := range ids {
			if moved[id].Holder == "a" && after[id].Epoch <= moved[id].Epoch {
				t.Fatalf("%s: epoch %d after the crash, was %d", id, after[id].Epoch, moved[id].Epoch)
			}
		}
		time.Sleep(5 * time.Second)
		for _, id := range ids {
			if beeps := tallyOf(t, ctx, b, id).Beeps; beeps != 1 {
				t.Fatalf("%s: timer fired %d times, want 1", id, beeps)
			}
		}
		_ = b.Stop(ctx)
	})
}

// The built-in http.request adapter runs: an effect reaches a real server
// once and its receipt reaches the world. Real I/O, so no bubble: the wait
// is bounded by the context.
func TestBuiltinHTTPAdapterDeliversAReceipt(t *testing.T) {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := memstore.New()
	create(t, ctx, st, []string{"p"})
	n := start(t, ctx, st, "a")
	defer func() { _ = n.Stop(context.Background()) }()
	if _, err := n.Client().Send(ctx, "p", Pay{URL: srv.URL}, "pay"); err != nil {
		t.Fatal(err)
	}
	for {
		if paid := tallyOf(t, ctx, n, "p").Paid; len(paid) == 1 {
			if paid[0] != string(vocab.ReceiptOK) || posts.Load() != 1 {
				t.Fatalf("receipt %v after %d posts", paid, posts.Load())
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no receipt: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A node's host fires its worlds' timers at their due times, and its
// timer worker, lagging DefaultTimerLag behind, is left nothing to claim
// or fire: every world's timer is fired once, by the host, on time.
func TestNodeHostFiresTimersAndItsTimerWorkerOnlyStandsBy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var claims, fires atomic.Int64
		st := memstore.New(memstore.WithHook(func(op string) error {
			switch op {
			case "claim_due":
				claims.Add(1)
			case "fire":
				fires.Add(1)
			}
			return nil
		}))
		ids := worldIDs(4)
		create(t, ctx, st, ids)
		var late atomic.Int64
		var firedByHost atomic.Int64
		n, err := node.Start(ctx, node.Config{Worker: "a", Store: st, Kernels: kernels(), LeaseTTL: ttl,
			Observe: func(ev plane.HostEvent) {
				if ev.Kind == plane.EvTimerFired {
					firedByHost.Add(1)
					late.Add(int64(ev.Dur))
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Stop(ctx)
		holders(t, ctx, st, ids, "a")
		for _, id := range ids {
			if _, err := n.Client().Send(ctx, id, Alarm{AfterMs: 3000}, "alarm"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(3*time.Second + node.DefaultTimerLag + time.Second)
		synctest.Wait()
		for _, id := range ids {
			if beeps := tallyOf(t, ctx, n, id).Beeps; beeps != 1 {
				t.Fatalf("%s: timer fired %d times, want 1", id, beeps)
			}
		}
		if got := firedByHost.Load(); got != int64(len(ids)) || late.Load() != 0 {
			t.Fatalf("the host fired %d timers, %v late in all; want %d on time", got, time.Duration(late.Load()), len(ids))
		}
		if c, f := claims.Load(), fires.Load(); c != 0 || f != 0 {
			t.Fatalf("the lagging timer worker claimed %d times and fired %d timers; want none", c, f)
		}
	})
}

// TestRestartUnderTheSameWorkerGetsNewEpochsAtOnce: a node's process dies
// and is started again under the same worker id before its leases expire
// (an orchestrator restarting it under its name). The new process draws
// its own incarnation, so it takes every world over at once at a higher
// epoch, never at the old process's (which, were it only frozen, would
// otherwise share its epochs).
func TestRestartUnderTheSameWorkerGetsNewEpochsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, ids := newWorlds(t, ctx, 6)
		a := start(t, ctx, st, "a")
		before := holders(t, ctx, st, ids, "a")
		a.Kill(ctx)
		var firstExpiry time.Time
		for _, l := range before {
			if firstExpiry.IsZero() || l.ExpiresAt.Before(firstExpiry) {
				firstExpiry = l.ExpiresAt
			}
		}
		again := start(t, ctx, st, "a")
		if again.Incarnation() == "" || again.Incarnation() == a.Incarnation() {
			t.Fatalf("incarnations %q then %q: a restart must draw a new one", a.Incarnation(), again.Incarnation())
		}
		for {
			taken := 0
			for _, id := range ids {
				if l, _, _ := st.GetLease(ctx, id); l.Incarnation == again.Incarnation() {
					taken++
					if l.Epoch <= before[id].Epoch {
						t.Fatalf("%s: epoch %d after the restart, was %d", id, l.Epoch, before[id].Epoch)
					}
				}
			}
			if taken == len(ids) {
				break
			}
			if !time.Now().Before(firstExpiry) {
				t.Fatalf("%d of %d worlds taken over before the old leases expired", taken, len(ids))
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = again.Stop(ctx)
	})
}

// TestANewWorldsFirstInputIsAnsweredWithoutWaitingForAReconcile: a node
// takes the first input of a world created after its orchestrator's last
// reconcile, through its client (a call) and through its ops API (an
// event, as the HTTP API enqueues it), and each world answers within
// milliseconds of virtual time, where waiting for the next reconcile
// round (every LeaseTTL/2) and the host's sync would take most of a
// second.
func TestANewWorldsFirstInputIsAnsweredWithoutWaitingForAReconcile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		t.Cleanup(func() { _ = st.Close() })
		n := start(t, ctx, st, "a")
		for !n.Leader() {
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait() // its first reconcile is done; the next is LeaseTTL/2 away
		const limit = 100 * time.Millisecond

		create(t, ctx, st, []string{"by-call"})
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := n.Client().Call(cctx, "by-call", Get{}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took > limit {
			t.Errorf("first call answered after %v of virtual time, want within %v", took, limit)
		}

		create(t, ctx, st, []string{"by-ops"})
		payload, err := world.EncodeEvent(Add{By: 3})
		if err != nil {
			t.Fatal(err)
		}
		t0 = time.Now()
		if _, err := n.Ops().EnqueueIngress(ctx, "by-ops", plane.Ingress{Kind: vocab.KindEvent, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		for {
			head, err := st.Head(ctx, "by-ops")
			if err != nil {
				t.Fatal(err)
			}
			if head == 1 {
				break
			}
			if time.Since(t0) > time.Minute {
				t.Fatal("the event was never journaled")
			}
			time.Sleep(time.Millisecond)
		}
		if took := time.Since(t0); took > limit {
			t.Errorf("first event journaled after %v of virtual time, want within %v", took, limit)
		}
	})
}
