package plane_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/world"
)

func opsFixture(t testing.TB) (*plane.Ops, *memstore.Store) {
	clock := memstore.NewManualClock(time.Unix(1_700_000_000, 0))
	st := memstore.New(memstore.WithClock(clock.Now))
	ops, err := plane.NewOps(st, kernels())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateWorld(context.Background(), universe, "w", nil); err != nil {
		t.Fatal(err)
	}
	return ops, st
}

// TestOpsAreIdempotentWithTypedErrors: every ops call repeated answers as
// the first did, and failures match typed sentinels.
func TestOpsAreIdempotentWithTypedErrors(t *testing.T) {
	ctx := context.Background()
	ops, st := opsFixture(t)
	for range 2 {
		if err := ops.AssignWorld(ctx, "w", "A", "test"); err != nil {
			t.Fatal(err)
		}
	}
	l1, err := ops.AcquireLease(ctx, "w", "A", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := ops.AcquireLease(ctx, "w", "A", time.Second); err != nil || l2.Epoch != l1.Epoch {
		t.Fatalf("re-acquire: %+v %v", l2, err)
	}
	if _, err := ops.AcquireLease(ctx, "w", "B", time.Second); !errors.Is(err, store.ErrNotAssigned) {
		t.Fatalf("acquire by another worker: %v", err)
	}
	if _, err := ops.RenewLease(ctx, "w", "A", l1.Epoch, time.Second); err != nil {
		t.Fatal(err)
	}
	rows, err := ops.ListWorkerWorlds(ctx, "A", "", 10)
	if err != nil || len(rows) != 1 || rows[0].World != "w" {
		t.Fatalf("list: %+v %v", rows, err)
	}
	for range 2 {
		if err := ops.ReleaseLease(ctx, "w", "A", l1.Epoch); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	if _, err := ops.RenewLease(ctx, "w", "A", l1.Epoch, time.Second); !errors.Is(err, store.ErrNotHolder) {
		t.Fatalf("renew after release: %v", err)
	}
	for range 2 {
		if err := ops.UnassignWorld(ctx, "w"); err != nil {
			t.Fatal(err)
		}
	}
	payload, _ := world.EncodeEvent(Add{By: 1})
	a1, err := ops.EnqueueIngress(ctx, "w", plane.Ingress{Kind: world.InputEvent, Payload: payload, DedupeKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := ops.EnqueueIngress(ctx, "w", plane.Ingress{Kind: world.InputEvent, Payload: payload, DedupeKey: "k"})
	if err != nil || !a2.Duplicate || a2.Seq != a1.Seq {
		t.Fatalf("repeated enqueue %+v %v", a2, err)
	}
	if _, err := ops.EnqueueIngress(ctx, "nope", plane.Ingress{Kind: world.InputEvent, Payload: payload}); !errors.Is(err, store.ErrWorldNotFound) {
		t.Fatalf("unknown world: %v", err)
	}
	seed := world.Snapshot{Height: 7}
	r1, err := ops.WorldCreateFromSeed(ctx, universe, "seeded", seed)
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := ops.WorldCreateFromSeed(ctx, universe, "seeded", seed); err != nil || r2.ID != r1.ID {
		t.Fatalf("repeated seed: %v", err)
	}
	if _, err := ops.WorldCreateFromSeed(ctx, universe, "seeded", world.Snapshot{Height: 9}); !errors.Is(err, plane.ErrConflict) {
		t.Fatalf("another seed under the same id: %v", err)
	}
	if _, err := ops.WorldCreateFromSeed(ctx, "nouniverse", "x", seed); !errors.Is(err, plane.ErrNoKernel) {
		t.Fatalf("unknown universe: %v", err)
	}
	if _, err := ops.WorldCreateFromSeed(ctx, universe, "bad", world.Snapshot{State: []byte{0x01}}); !errors.Is(err, plane.ErrInvalid) || !errors.Is(err, world.ErrState) {
		t.Fatalf("a seed the kernel rejects: %v", err)
	}
	if h, _ := st.Head(ctx, "seeded"); h != 7 {
		t.Fatalf("seeded head %d, want 7", h)
	}
	if _, err := ops.WorldFork(ctx, "w", 0, "f"); !errors.Is(err, store.ErrSnapshotNotFound) {
		t.Fatalf("fork without a snapshot: %v", err)
	}
}

// TestIngressIsValidatedBeforeEnqueue: bad external input is a typed
// error and leaves the inbox untouched.
func TestIngressIsValidatedBeforeEnqueue(t *testing.T) {
	ctx := context.Background()
	ops, st := opsFixture(t)
	good, _ := world.EncodeEvent(Add{By: 1})
	call, _ := world.EncodeCall("c", Get{})
	sys, _ := event.Marshal(map[string]any{"type": "sys/Receipt@1", "value": nil})
	extra, _ := event.Marshal(map[string]any{"type": "x.T", "value": nil, "from_world": "evil"})
	bad := []plane.Ingress{
		{Kind: "receipt", Payload: good},
		{Kind: "timer", Payload: good},
		{Kind: world.InputEvent, Payload: []byte{0xff}},
		{Kind: world.InputEvent, Payload: call},
		{Kind: world.InputCall, Payload: good},
		{Kind: world.InputEvent, Payload: sys},
		{Kind: world.InputEvent, Payload: extra},
		{Kind: world.InputEvent, Payload: good, DedupeKey: store.ReceiptKeyPrefix + "x"},
	}
	for i, in := range bad {
		if _, err := ops.EnqueueIngress(ctx, "w", in); !errors.Is(err, plane.ErrInvalidIngress) {
			t.Fatalf("bad input %d: %v", i, err)
		}
	}
	if items, _ := st.ReadInbox(ctx, "w", 0, 100); len(items) != 0 {
		t.Fatalf("%d items enqueued by bad input", len(items))
	}
	if _, err := ops.EnqueueIngress(ctx, "w", plane.Ingress{Kind: world.InputCall, Payload: call}); err != nil {
		t.Fatal(err)
	}
}

// FuzzIngressDecoding: whatever bytes arrive, validation never panics, and
// input it accepts never reaches the kernel as malformed: the kernel steps
// it to a handler outcome or drops it as an unknown type.
func FuzzIngressDecoding(f *testing.F) {
	good, _ := world.EncodeEvent(Add{By: 1})
	call, _ := world.EncodeCall("c", Get{})
	f.Add(world.InputEvent, good)
	f.Add(world.InputCall, call)
	f.Add(world.InputEvent, []byte{0xa1, 0x64, 't', 'y', 'p', 'e', 0x61, 'x'})
	f.Add("receipt", []byte{0xf6})
	ops, _ := opsFixture(f)
	def := counterDef()
	f.Fuzz(func(t *testing.T, kind string, payload []byte) {
		if err := ops.ValidateIngress(kind, payload); err != nil {
			return
		}
		res, err := def.Step("w", world.Snapshot{}, world.Input{Seq: 1, Kind: kind, Payload: payload, EnqueuedAt: time.Unix(1, 0)}, time.Unix(1, 0))
		if err != nil {
			t.Fatalf("accepted input made the kernel fail: %v", err)
		}
		// A value that does not fit the handler's type is the one thing
		// only the world can judge (the plane does not know its types).
		var ie *world.InputError
		if errors.As(res.Err, &ie) && ie.Kind != "value" {
			t.Fatalf("accepted input is malformed to the kernel: %v", res.Err)
		}
	})
}
