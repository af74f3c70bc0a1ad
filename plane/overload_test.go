package plane_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// stepClock is an executor whose clock moves only when the test says.
type stepClock struct {
	actor.Executor
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func overloadFixture(t *testing.T, lim plane.Limits) (*memstore.Store, *plane.Client, *plane.Ops, *plane.Admission, *stepClock) {
	t.Helper()
	ctx := context.Background()
	st := memstore.New()
	if _, err := st.CreateWorld(ctx, tallyUniverse, "w", nil); err != nil {
		t.Fatal(err)
	}
	ex := &stepClock{Executor: actor.NewExecutor(1), now: time.Unix(1e9, 0)}
	adm, err := plane.NewAdmission(st, ex, lim)
	if err != nil {
		t.Fatal(err)
	}
	ks := plane.Kernels{tallyUniverse: tallyKernel()}
	c, err := plane.NewClient(plane.ClientConfig{Store: st, Kernels: ks, Executor: ex, Admission: adm})
	if err != nil {
		t.Fatal(err)
	}
	ops, err := plane.NewOps(st, ks, plane.OpsAdmission(adm))
	if err != nil {
		t.Fatal(err)
	}
	return st, c, ops, adm, ex
}

// TestOverloadedInboxRefusesSendCallAndOpsLeavingNoTrace: past the inbox
// bound, Send, Call and the ops API's enqueue answer ErrOverloaded (also
// store.ErrOverloaded) with a Retry-After, write nothing (a call is not
// waited on), count the refusal, and a retry with the same key once room
// frees is accepted once.
func TestOverloadedInboxRefusesSendCallAndOpsLeavingNoTrace(t *testing.T) {
	ctx := context.Background()
	st, c, ops, adm, _ := overloadFixture(t, plane.Limits{MaxInbox: 2})
	for _, k := range []string{"a", "b"} {
		if _, err := c.Send(ctx, "w", tallyAdd{By: 1}, k); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Send(ctx, "w", tallyAdd{By: 1}, "c")
	if !errors.Is(err, plane.ErrOverloaded) || !errors.Is(err, store.ErrOverloaded) || plane.RetryAfter(err) < time.Second {
		t.Fatalf("Send into a full inbox: %v (retry after %s)", err, plane.RetryAfter(err))
	}
	// A duplicate of accepted work is a duplicate, not a refusal.
	if ack, err := c.Send(ctx, "w", tallyAdd{By: 1}, "a"); err != nil || !ack.Duplicate {
		t.Fatalf("duplicate Send into a full inbox = %+v, %v", ack, err)
	}
	if _, err := c.CallWithID(ctx, "w", "call-1", tallyAdd{By: 1}); !errors.Is(err, plane.ErrOverloaded) {
		t.Fatalf("Call into a full inbox: %v", err)
	}
	payload, _ := world.EncodeEvent(tallyAdd{By: 1})
	if _, err := ops.EnqueueIngress(ctx, "w", plane.Ingress{Kind: vocab.KindEvent, Payload: payload, DedupeKey: "d"}); !errors.Is(err, plane.ErrOverloaded) {
		t.Fatalf("ops enqueue into a full inbox: %v", err)
	}
	items, _ := st.ReadInbox(ctx, "w", 0, 0)
	if len(items) != 2 {
		t.Fatalf("inbox after refusals holds %d items, want 2", len(items))
	}
	if got := adm.Refused()[plane.RefusedInbox]; got != 3 {
		t.Fatalf("refused{inbox} = %d, want 3", got)
	}
	// Room frees (the world drains); the refused request, retried with
	// its key, is accepted once.
	e := mustLease(t, st, "w")
	if _, err := st.DrainToJournal(ctx, "w", e, 0, 0, items[1].Seq, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Send(ctx, "w", tallyAdd{By: 1}, "c"); err != nil {
			t.Fatalf("Send c after the drain: %v", err)
		}
	}
	items, _ = st.ReadInbox(ctx, "w", 0, 0)
	n := 0
	for _, it := range items {
		if it.DedupeKey == "c" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("inbox holds %d items keyed c, want 1", n)
	}
}

func mustLease(t *testing.T, st store.Store, world string) uint64 {
	t.Helper()
	l, err := st.Acquire(context.Background(), world, "host", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l.Epoch
}

// TestOverloadedEffectQueueRefusesIngressFromACachedCount: while a kind's
// pending effects are at its bound, new ingress to any world is refused
// (reason effect_queue, nothing written) and duplicates still answer;
// the count is read once per Refresh, not per request, and ingress passes
// again once a read after the queue drained sees room.
func TestOverloadedEffectQueueRefusesIngressFromACachedCount(t *testing.T) {
	ctx := context.Background()
	st, c, _, adm, clock := overloadFixture(t, plane.Limits{MaxEffectQueue: 100, MaxEffectQueueKind: map[string]int{"mail.send": 2}, Refresh: time.Second})
	if _, err := c.Send(ctx, "w", tallyAdd{By: 1}, "a"); err != nil {
		t.Fatal(err)
	}
	e := mustLease(t, st, "w")
	in := []vocab.Intent{
		{IntentHash: "m1", Kind: "mail.send", Params: []byte("p"), Origin: "test", PolicyContextHash: "pch"},
		{IntentHash: "m2", Kind: "mail.send", Params: []byte("p"), Origin: "test", PolicyContextHash: "pch"},
	}
	if _, err := st.Publish(ctx, "w", e, in); err != nil {
		t.Fatal(err)
	}
	// The first Send read the counts before the publish: still admitted
	// within Refresh.
	if _, err := c.Send(ctx, "w", tallyAdd{By: 1}, "b"); err != nil {
		t.Fatalf("Send within the refresh interval: %v", err)
	}
	clock.add(time.Second)
	_, err := c.Send(ctx, "w", tallyAdd{By: 1}, "c")
	var o *plane.Overload
	if !errors.As(err, &o) || o.Reason != plane.RefusedEffectQueue || o.Kind != "mail.send" || !errors.Is(err, plane.ErrOverloaded) {
		t.Fatalf("Send with mail.send at its bound: %v", err)
	}
	if ack, err := c.Send(ctx, "w", tallyAdd{By: 1}, "a"); err != nil || !ack.Duplicate {
		t.Fatalf("duplicate Send while shedding = %+v, %v", ack, err)
	}
	if items, _ := st.ReadInbox(ctx, "w", 0, 0); len(items) != 2 {
		t.Fatalf("inbox holds %d items, want the 2 admitted", len(items))
	}
	if got := adm.Refused()[plane.RefusedEffectQueue]; got != 1 {
		t.Fatalf("refused{effect_queue} = %d, want 1", got)
	}
	// The queue drains; the next read after Refresh admits again.
	items, err := st.Claim(ctx, "fx", []string{"mail.send"}, 2, time.Minute)
	if err != nil || len(items) != 2 {
		t.Fatalf("Claim = %v, %v", items, err)
	}
	if _, err := c.Send(ctx, "w", tallyAdd{By: 1}, "c"); !errors.Is(err, plane.ErrOverloaded) {
		t.Fatalf("Send before the next read: %v, want the cached refusal", err)
	}
	clock.add(time.Second)
	if _, err := c.Send(ctx, "w", tallyAdd{By: 1}, "c"); err != nil {
		t.Fatalf("Send after the queue drained: %v", err)
	}
}

// TestAdmissionRefusesNegativeLimits: a negative bound is a configuration
// error, not an unbounded queue.
func TestAdmissionRefusesNegativeLimits(t *testing.T) {
	st := memstore.New()
	ex := actor.NewExecutor(1)
	for _, lim := range []plane.Limits{{MaxInbox: -1}, {MaxEffectQueue: -1}, {MaxEffectQueueKind: map[string]int{"k": -1}}, {MaxEffectQueueKind: map[string]int{"": 1}}} {
		if _, err := plane.NewAdmission(st, ex, lim); !errors.Is(err, plane.ErrInvalid) {
			t.Fatalf("NewAdmission(%+v) = %v, want ErrInvalid", lim, err)
		}
	}
}
