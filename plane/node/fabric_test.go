package node_test

import (
	"context"
	"errors"
	"sync"
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

// transfer is the sender of a two-world transfer: it sends a deposit to
// another world and, as the ledger example does, releases its hold when
// the send's receipt says it failed.
type transfer struct {
	Held     bool
	Receipts []string
}

type (
	Start   struct{ To string }
	Deposit struct{ Amount int64 }
)

type account struct{ Balance int64 }

func transferKernels() plane.Kernels {
	s := world.New[transfer]("test.transfer", 1)
	world.On(s, func(c *world.Ctx, st *transfer, m Start) error {
		st.Held = true
		c.Send(m.To, Deposit{Amount: 10})
		return nil
	})
	world.On(s, func(c *world.Ctx, st *transfer, r world.Receipt) error {
		st.Receipts = append(st.Receipts, string(r.Status))
		if r.Status == vocab.ReceiptError {
			st.Held = false // the deposit did not happen: give the money back
		}
		return nil
	})
	a := world.New[account]("test.account", 1)
	world.On(a, func(c *world.Ctx, st *account, d Deposit) error {
		st.Balance += d.Amount
		return nil
	})
	return plane.Kernels{"senders": s.Kernel(), "accounts": a.Kernel()}
}

// lostSendAnswers is a store whose Send writes and then loses its answer
// (PostgreSQL terminating the connection after the commit) lose times.
type lostSendAnswers struct {
	store.Store
	mu   sync.Mutex
	lose int
}

func (s *lostSendAnswers) Send(ctx context.Context, dest, id string, item store.InboxItem) (store.FabricResult, error) {
	r, err := s.Store.Send(ctx, dest, id, item)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.lose > 0 {
		s.lose--
		return store.FabricResult{}, errors.New("FATAL: terminating connection due to administrator command")
	}
	return r, err
}

// TestNodeFabricSendWhoseAnswerIsLostIsNotAFailure: the store delivers a
// transfer's deposit and loses the answer twice. The node's fabric adapter
// sends again until the store answers: the sender's one receipt is ok, it
// keeps its hold, and the deposit is there once. (Before, the node's
// fabric adapter did not retry: the sender got an error receipt and
// released its hold while the deposit stayed, creating money.)
func TestNodeFabricSendWhoseAnswerIsLostIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memstore.New()
		st := &lostSendAnswers{Store: mem, lose: 2}
		if _, err := mem.CreateWorld(ctx, "senders", "s", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := mem.CreateWorld(ctx, "accounts", "acct", nil); err != nil {
			t.Fatal(err)
		}
		n, err := node.Start(ctx, node.Config{Worker: "a", Store: st, Kernels: transferKernels(), LeaseTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Stop(ctx)
		holders(t, ctx, mem, []string{"s", "acct"}, "a")
		if _, err := n.Client().Send(ctx, "s", Start{To: "acct"}, "start"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		var sender struct{ State transfer }
		snap, err := n.Client().State(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if err := world.Decode(snap.State, &sender); err != nil {
			t.Fatal(err)
		}
		if got := sender.State.Receipts; len(got) != 1 || got[0] != string(vocab.ReceiptOK) || !sender.State.Held {
			t.Fatalf("sender: receipts %v, held %v; want one ok receipt and the hold kept", got, sender.State.Held)
		}
		var acct struct{ State account }
		snap, err = n.Client().State(ctx, "acct")
		if err != nil {
			t.Fatal(err)
		}
		if err := world.Decode(snap.State, &acct); err != nil {
			t.Fatal(err)
		}
		if acct.State.Balance != 10 {
			t.Fatalf("balance %d, want the deposit once", acct.State.Balance)
		}
	})
}

// errNoReconcile fails the orchestrator's world lists: a reconcile reads
// them first, so no reconcile round ever completes and only an input's
// activation places a world (a node without workflows lists worlds for
// nothing else).
var errNoReconcile = errors.New("test: reconcile disabled")

// TestNodeFabricSendActivatesAnUnplacedDestination: a world sends to a
// world created after every reconcile the node will ever complete; the
// destination is placed and runs the message within moments of virtual
// time, as a client's first call to it would be. (Before, the fabric
// adapter only wrote the message to the store, and the destination waited
// for a reconcile round: here, forever.)
func TestNodeFabricSendActivatesAnUnplacedDestination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New(memstore.WithHook(func(op string) error {
			if op == "list_worlds" {
				return errNoReconcile
			}
			return nil
		}))
		t.Cleanup(func() { _ = st.Close() })
		n, err := node.Start(ctx, node.Config{Worker: "a", Store: st, Kernels: transferKernels(), LeaseTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Stop(ctx)
		for !n.Leader() {
			time.Sleep(10 * time.Millisecond)
		}
		for _, w := range [][2]string{{"senders", "s"}, {"accounts", "acct"}} {
			if _, err := st.CreateWorld(ctx, w[0], w[1], nil); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if _, ok, err := st.GetAssignment(ctx, "acct"); err != nil || ok {
			t.Fatalf("the destination is placed before any input (ok=%v err=%v): the test shows nothing", ok, err)
		}
		const limit = time.Second // a warm world answers within milliseconds of virtual time
		t0 := time.Now()
		if _, err := n.Client().Send(ctx, "s", Start{To: "acct"}, "start"); err != nil {
			t.Fatal(err)
		}
		for {
			head, err := st.Head(ctx, "acct")
			if err != nil {
				t.Fatal(err)
			}
			if head >= 1 {
				break
			}
			if time.Since(t0) > time.Hour {
				t.Fatal("the destination never ran the message: it was never placed")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if took := time.Since(t0); took > limit {
			t.Errorf("the destination ran the message after %v of virtual time, want within %v", took, limit)
		}
		a, ok, err := st.GetAssignment(ctx, "acct")
		if err != nil || !ok || a.DesiredWorker != "a" {
			t.Fatalf("assignment %+v ok=%v err=%v, want worker a", a, ok, err)
		}
	})
}
