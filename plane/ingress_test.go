package plane_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// callLog is a store that records which of the ingress path's calls
// reached it.
type callLog struct {
	store.Store
	getWorld, enqueue int
}

func (c *callLog) GetWorld(ctx context.Context, id string) (store.World, error) {
	c.getWorld++
	return c.Store.GetWorld(ctx, id)
}

func (c *callLog) Enqueue(ctx context.Context, world string, item store.InboxItem) (uint64, bool, error) {
	c.enqueue++
	return c.Store.Enqueue(ctx, world, item)
}

// checkLog is a kernel that counts the values it checks.
type checkLog struct {
	world.Kernel
	checks int
	last   []byte
}

func (k *checkLog) CheckInput(typeName string, value []byte) error {
	k.checks++
	k.last = value
	return k.Kernel.CheckInput(typeName, value)
}

// The ingress tests' own world: one event type, so that what they count is
// theirs alone.
type (
	tally    struct{ N int64 }
	tallyAdd struct{ By int64 }
)

const tallyUniverse = "ingress"

func tallyKernel() world.Kernel {
	d := world.New[tally]("test.ingress", 1)
	world.On(d, func(_ *world.Ctx, s *tally, a tallyAdd) error {
		s.N += a.By
		return nil
	})
	return d.Kernel()
}

func ingressFixture(t *testing.T) (*plane.Ops, *callLog, *checkLog, *plane.DecodeCount) {
	t.Helper()
	st := &callLog{Store: memstore.New()}
	if _, err := st.CreateWorld(context.Background(), tallyUniverse, "w", nil); err != nil {
		t.Fatal(err)
	}
	k := &checkLog{Kernel: tallyKernel()}
	ops, err := plane.NewOps(st, plane.Kernels{tallyUniverse: k})
	if err != nil {
		t.Fatal(err)
	}
	return ops, st, k, plane.CountDecodes(ops)
}

// TestIngressDecodesThePayloadOnce: on the way to its inbox row an
// event's wire payload is decoded once (its canonical form is only scanned
// for), and an event given by its parts (the ops API's type and value) is
// encoded once and never decoded; either way the kernel checks the value
// once, and the store is called once to read the world and once to write.
func TestIngressDecodesThePayloadOnce(t *testing.T) {
	ctx := context.Background()
	t.Run("wire payload", func(t *testing.T) {
		ops, st, k, dec := ingressFixture(t)
		payload := inMust(world.EncodeEvent(tallyAdd{By: 1}))(t)
		if _, err := ops.EnqueueIngress(ctx, "w", plane.Ingress{Kind: vocab.KindEvent, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		if dec.Unmarshal != 1 || dec.Canonicalize != 1 || dec.IsCanonical != 0 {
			t.Fatalf("decoder calls %+v, want one Unmarshal and one canonical scan", *dec)
		}
		if k.checks != 1 || st.getWorld != 1 || st.enqueue != 1 {
			t.Fatalf("%d kernel checks, %d world reads, %d enqueues; want 1 each", k.checks, st.getWorld, st.enqueue)
		}
		items := inMust(st.ReadInbox(ctx, "w", 0, 0))(t)
		if len(items) != 1 || !bytes.Equal(items[0].Payload, payload) {
			t.Fatalf("inbox %+v, want the payload as sent", items)
		}
	})
	t.Run("type and value", func(t *testing.T) {
		ops, st, k, dec := ingressFixture(t)
		typ := inTypeName(t, tallyAdd{})
		value := inMust(event.Marshal(map[string]any{"By": int64(2)}))(t)
		if _, err := ops.EnqueueEvent(ctx, "w", typ, value, "k"); err != nil {
			t.Fatal(err)
		}
		if dec.Unmarshal != 0 || dec.Canonicalize != 0 || dec.IsCanonical != 1 {
			t.Fatalf("decoder calls %+v, want none but one canonical scan", *dec)
		}
		if k.checks != 1 || !bytes.Equal(k.last, value) || st.getWorld != 1 || st.enqueue != 1 {
			t.Fatalf("%d kernel checks (of %x), %d world reads, %d enqueues; want 1 each, of the value given", k.checks, k.last, st.getWorld, st.enqueue)
		}
		want := inMust(world.EncodeEventNamed(typ, cbor.RawMessage(value)))(t)
		items := inMust(st.ReadInbox(ctx, "w", 0, 0))(t)
		if len(items) != 1 || !bytes.Equal(items[0].Payload, want) || items[0].DedupeKey != "k" {
			t.Fatalf("inbox %+v, want the named event's payload under key k", items)
		}
		// The parts must be what they claim: a value that is not
		// canonical CBOR is refused before anything is read.
		if _, err := ops.EnqueueEvent(ctx, "w", typ, []byte{0x18, 0x01}, ""); !errors.Is(err, plane.ErrInvalidIngress) || st.getWorld != 1 {
			t.Fatalf("a non-canonical value: %v (after %d world reads)", err, st.getWorld)
		}
		for _, bad := range []string{"", "sys/Receipt@1"} {
			if _, err := ops.EnqueueEvent(ctx, "w", bad, value, ""); !errors.Is(err, plane.ErrInvalidIngress) {
				t.Fatalf("type %q: %v", bad, err)
			}
		}
	})
}

// TestIngressLeavesTheItemToTheStore: what the store checks of every
// producer's item (the kind, the key's namespace, the world id) is checked
// there alone: the plane hands such an item on and answers the store's
// refusal as ErrInvalidIngress, with nothing enqueued. A world id the store
// would refuse names no world: it is judged once its read finds none, and
// never reaches Enqueue.
func TestIngressLeavesTheItemToTheStore(t *testing.T) {
	ctx := context.Background()
	ops, st, _, _ := ingressFixture(t)
	payload := inMust(world.EncodeEvent(tallyAdd{By: 1}))(t)
	_, err := ops.EnqueueIngress(ctx, "w", plane.Ingress{Kind: vocab.KindEvent, Payload: payload, DedupeKey: store.ReceiptKeyPrefix + "x"})
	if !errors.Is(err, plane.ErrInvalidIngress) || !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a key in the receipts' namespace: %v, want ErrInvalidIngress from the store's ErrInvalid", err)
	}
	if st.enqueue != 1 {
		t.Fatalf("%d enqueues: the plane checked the item itself instead of the store", st.enqueue)
	}
	if items := inMust(st.ReadInbox(ctx, "w", 0, 0))(t); len(items) != 0 {
		t.Fatalf("a refused item was enqueued: %+v", items)
	}

	for _, id := range []string{"", strings.Repeat("w", store.MaxIDBytes+1), "a\x00b", "\xff"} {
		reads, writes := st.getWorld, st.enqueue
		_, err := ops.EnqueueIngress(ctx, id, plane.Ingress{Kind: vocab.KindEvent, Payload: payload})
		if !errors.Is(err, plane.ErrInvalidIngress) || !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("world id %q: %v, want ErrInvalidIngress", id, err)
		}
		if st.getWorld != reads+1 || st.enqueue != writes {
			t.Fatalf("world id %q: %d reads and %d enqueues, want one read and none", id, st.getWorld-reads, st.enqueue-writes)
		}
	}
	if _, err := ops.EnqueueIngress(ctx, "nope", plane.Ingress{Kind: vocab.KindEvent, Payload: payload}); !errors.Is(err, store.ErrWorldNotFound) || errors.Is(err, plane.ErrInvalidIngress) {
		t.Fatalf("a well-formed id of no world: %v, want ErrWorldNotFound", err)
	}
}

func inMust[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func inTypeName(t testing.TB, v any) string {
	t.Helper()
	return inMust(world.TypeName(v))(t)
}
