package adapter_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/internal/testrig"
	"github.com/orrery-run/orrery/plane/adapter"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

type Greeting struct{ Text string }

func sendParams(t *testing.T, dest string) world.FabricSendParams {
	t.Helper()
	v, err := eventMarshal(Greeting{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	return world.FabricSendParams{DestWorld: dest, Mode: world.FabricTypedEvent, Schema: "Greeting", ValueCBOR: v, CorrelationID: "c-1"}
}

func fabricReceipt(t *testing.T, r world.Receipt) world.FabricSendReceipt {
	t.Helper()
	var b world.FabricSendReceipt
	if err := r.Decode(&b); err != nil {
		t.Fatalf("receipt body is not a FabricSendReceipt: %v", err)
	}
	return b
}

func fabricItems(t *testing.T, st store.Store, w string) []store.InboxItem {
	t.Helper()
	items, err := st.ReadInbox(context.Background(), w, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.InboxItem
	for _, it := range items {
		if it.Kind == vocab.KindFabric {
			out = append(out, it)
		}
	}
	return out
}

func TestFabricSendDeliversOnceAndReceiptReturnsToSender(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.createWorld("w2")
		p := newPool(t, e.st, adapter.Config{Worker: "fabric", Executor: e.ex}, adapter.Register(adapter.NewFabric(e.st), adapter.RetryPolicy{}))
		r := run(p)
		defer r.stop()
		h := e.publish(adapter.KindFabric, sendParams(t, "w2"))
		synctest.Wait()
		got := oneReceiptEach(t, e.st, e.world, h)[h]
		b := fabricReceipt(t, got)
		delivered := fabricItems(t, e.st, "w2")
		if len(delivered) != 1 {
			t.Fatalf("%d deliveries", len(delivered))
		}
		if got.Status != vocab.ReceiptOK || b.Status != world.FabricStatusOK || b.MessageID != h || b.DestWorld != "w2" ||
			binary.BigEndian.Uint64(b.EnqueuedSeq) != delivered[0].Seq {
			t.Fatalf("receipt %s %+v", got.Status, b)
		}
		var m struct {
			Type       string `cbor:"type"`
			FromWorld  string `cbor:"from_world"`
			FromHeight uint64 `cbor:"from_height"`
			MessageID  string `cbor:"message_id"`
			Corr       string `cbor:"correlation_id"`
		}
		if err := world.Decode(delivered[0].Payload, &m); err != nil {
			t.Fatal(err)
		}
		if m.Type != "Greeting" || m.FromWorld != "w1" || m.FromHeight != 1 || m.MessageID != h || m.Corr != "c-1" {
			t.Fatalf("delivered %+v", m)
		}
	})
}

// TestFabricDedupeRetryEnqueuesOnceSenderGetsAlreadyEnqueued: the fabric
// pool's process dies after the send and before the sender's receipt;
// after a restart and a reap the retried send enqueues nothing new, and
// the sender's one receipt says already_enqueued with the first seq.
func TestFabricDedupeRetryEnqueuesOnceSenderGetsAlreadyEnqueued(t *testing.T) {
	onBackends(t, func(t *testing.T, k *kit) {
		var st *testrig.Handle
		var mu sync.Mutex
		crashed := false
		hook := func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == "complete_many" && !crashed {
				crashed = true
				st.Crash()
				return errors.New("process died")
			}
			return nil
		}
		st = k.handle(hook)
		k.createWorld("w2")
		const ttl = 10 * time.Second
		h := k.publish(adapter.KindFabric, sendParams(t, "w2"))
		p1 := newPool(t, st, adapter.Config{Worker: "fabric-1", Executor: k.ex, ClaimTTL: ttl}, adapter.Register(adapter.NewFabric(st), adapter.RetryPolicy{}))
		r1 := run(p1)
		k.waitFor("the crash after the send", time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return crashed
		})
		r1.stop()
		st2 := k.handle(nil)
		if n := len(fabricItems(t, st2, "w2")); n != 1 {
			t.Fatalf("%d deliveries before the crash's retry", n)
		}
		p2 := newPool(t, st2, adapter.Config{Worker: "fabric-2", Executor: k.ex, ClaimTTL: ttl}, adapter.Register(adapter.NewFabric(st2), adapter.RetryPolicy{}))
		r2 := run(p2)
		stopReaper := k.reaper(st2, ttl)
		k.advance(ttl) // the dead pool's claim expires; the reaper requeues it
		k.waitFor("the sender's receipt", 2*ttl, func() bool { return len(receipts(t, st2, k.world)) > 0 })
		stopReaper()
		r2.stop()
		delivered := fabricItems(t, st2, "w2")
		if len(delivered) != 1 {
			t.Fatalf("%d deliveries after the retry, want 1", len(delivered))
		}
		got := oneReceiptEach(t, st2, k.world, h)[h]
		b := fabricReceipt(t, got)
		if got.Status != vocab.ReceiptOK || b.Status != world.FabricStatusAlreadyEnqueued || binary.BigEndian.Uint64(b.EnqueuedSeq) != delivered[0].Seq {
			t.Fatalf("receipt %s %+v", got.Status, b)
		}
	})
}

// TestFabricUnknownOrArchivedDestinationIsTerminalError: no retry loop: a
// single attempt, an error receipt whose body says "error".
func TestFabricUnknownOrArchivedDestinationIsTerminalError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		e.createWorld("gone")
		if _, err := e.st.SetWorldStatus(e.ctx, "gone", store.WorldArchived, "test"); err != nil {
			t.Fatal(err)
		}
		p := newPool(t, e.st, adapter.Config{Worker: "fabric", Executor: e.ex}, adapter.Register(adapter.NewFabric(e.st), adapter.RetryPolicy{Attempts: 5, Base: time.Second}))
		r := run(p)
		defer r.stop()
		unknown := e.publish(adapter.KindFabric, sendParams(t, "nobody"))
		archived := e.publish(adapter.KindFabric, sendParams(t, "gone"))
		p2 := sendParams(t, "gone")
		p2.DestUniverse = "other-universe"
		wrongU := e.publish(adapter.KindFabric, p2)
		synctest.Wait()
		got := oneReceiptEach(t, e.st, e.world, unknown, archived, wrongU)
		for _, h := range []string{unknown, archived, wrongU} {
			b := fabricReceipt(t, got[h])
			if got[h].Status != vocab.ReceiptError || b.Status != world.FabricStatusError || b.MessageID != h {
				t.Fatalf("receipt %s %+v", got[h].Status, b)
			}
		}
		if s := p.Stats(); s.Attempts != 3 {
			t.Fatalf("%d attempts for 3 sends, want no retries", s.Attempts)
		}
	})
}
