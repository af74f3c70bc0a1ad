package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/store/storetest"
	"github.com/orrery-run/orrery/vocab"
)

// TestMain fails the package if a test leaves a goroutine behind: memstore
// starts none, and a watch holds none.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

var bg = context.Background()

var epoch0 = time.Date(2026, 2, 16, 0, 0, 0, 0, time.UTC)

func open(t *testing.T, opts ...memstore.Option) (*memstore.Store, *memstore.ManualClock) {
	clock := memstore.NewManualClock(epoch0)
	s := memstore.New(append([]memstore.Option{memstore.WithClock(clock.Now)}, opts...)...)
	t.Cleanup(func() { _ = s.Close() })
	return s, clock
}

// TestConformance runs the one conformance suite against the reference
// backend.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, clock := open(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// TestConformanceShortRetention runs the suite again with a one-hour dedupe
// retention, so that its retention tests do not depend on the default.
func TestConformanceShortRetention(t *testing.T) {
	if testing.Short() {
		t.Skip("the default-retention run covers it")
	}
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, clock := open(t, memstore.WithDedupeRetention(time.Hour))
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

func mustWorld(t *testing.T, s *memstore.Store, id string) uint64 {
	t.Helper()
	if _, err := s.CreateWorld(bg, "u", id, nil); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(bg, id, "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l.Epoch
}

func rec(key string) store.Record {
	return store.Record{EventID: "ev-" + key, IdempotencyKey: key, EventType: "E", LogicalAttemptID: 1, EngineAttemptID: 1}
}

func TestHookFailsTheCallAndChangesNothing(t *testing.T) {
	injected := errors.New("injected")
	var ops []string
	fail := ""
	s, _ := open(t, memstore.WithHook(func(op string) error {
		ops = append(ops, op)
		if op == fail {
			return injected
		}
		return nil
	}))
	e := mustWorld(t, s, "w")
	fail = "append"
	_, err := s.Append(bg, "w", []store.Record{rec("a")}, store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: e}})
	if !errors.Is(err, injected) {
		t.Fatalf("Append under a failing hook: %v", err)
	}
	if h, _ := s.Head(bg, "w"); h != 0 {
		t.Fatalf("a failed append changed the head to %d", h)
	}
	fail = "drain"
	if _, _, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DrainToJournal(bg, "w", e, 0, 0, 1, []store.Record{rec("a")}); !errors.Is(err, injected) {
		t.Fatalf("DrainToJournal under a failing hook: %v", err)
	}
	if c, _ := s.Cursor(bg, "w"); c != 0 {
		t.Fatalf("a failed drain moved the cursor to %d", c)
	}
	fail = ""
	if _, err := s.DrainToJournal(bg, "w", e, 0, 0, 1, []store.Record{rec("a")}); err != nil {
		t.Fatal(err)
	}
	want := []string{"create_world", "acquire_leases", "append", "head", "enqueue", "drain", "cursor", "drain"}
	if len(ops) != len(want) {
		t.Fatalf("hook saw %v, want %v", ops, want)
	}
	for i := range want {
		if ops[i] != want[i] {
			t.Fatalf("hook saw %v, want %v", ops, want)
		}
	}
}

// The chaos matrix's "crash after append before cursor advance", as the lab
// injects it: a hook crashes the store at the start of the operation after
// the append, so the append is committed and nothing after it is; a restart
// finds exactly that.
func TestCrashBetweenCallsKeepsExactlyWhatWasCommitted(t *testing.T) {
	var s *memstore.Store
	s, clock := open(t, memstore.WithHook(func(op string) error {
		if op == "publish" {
			s.Crash()
		}
		return nil
	}))
	e := mustWorld(t, s, "w")
	fence := &store.Fence{World: "w", Epoch: e}
	if _, err := s.Append(bg, "w", []store.Record{rec("a")}, store.AppendOptions{Fence: fence}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "i1", Kind: "k"}})
	if !errors.Is(err, memstore.ErrCrashed) {
		t.Fatalf("Publish on crashing store: %v, want ErrCrashed", err)
	}
	var se *store.Error
	if !errors.As(err, &se) || se.Op != "publish" {
		t.Fatalf("crash error %v is not a *store.Error for publish", err)
	}
	// Every later call on the crashed handle fails too.
	if _, err := s.Head(bg, "w"); !errors.Is(err, memstore.ErrCrashed) {
		t.Fatalf("Head after crash: %v", err)
	}
	if _, err := s.Now(bg); !errors.Is(err, memstore.ErrCrashed) {
		t.Fatalf("Now after crash: %v", err)
	}
	r := s.Restart(memstore.WithHook(nil))
	if h, err := r.Head(bg, "w"); err != nil || h != 1 {
		t.Fatalf("Head after restart = %d, %v; the append was committed", h, err)
	}
	if _, err := r.EffectStatus(bg, "i1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the publish that crashed is visible after restart: %v", err)
	}
	// The lease survived too: the restarted worker still writes under it
	// until it expires, by the same clock.
	if _, err := r.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "i1", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if _, err := r.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "i2", Kind: "k"}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Publish after the lease expired: %v", err)
	}
	if _, err := s.Head(bg, "w"); !errors.Is(err, memstore.ErrCrashed) {
		t.Fatalf("the old handle came back: %v", err)
	}
}

// Crash ends the handle's watches (a write through another handle no
// longer wakes them); the restarted handle's watches see changes made
// through any handle.
func TestCrashEndsWatchesAndRestartWatchesSharedState(t *testing.T) {
	s, _ := open(t)
	mustWorld(t, s, "w")
	dead := store.NewSignal()
	if _, err := s.Watch(bg, dead, store.TopicInbox("w")); err != nil {
		t.Fatal(err)
	}
	s.Crash()
	if _, err := s.Watch(bg, store.NewSignal(), store.TopicInbox("w")); !errors.Is(err, memstore.ErrCrashed) {
		t.Fatalf("Watch on a crashed handle: %v", err)
	}
	r := s.Restart()
	other := r.Restart()
	live := store.NewSignal()
	stop, err := r.Watch(bg, live, store.TopicInbox("w"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, _, err := other.Enqueue(bg, "w", store.InboxItem{Kind: "event"}); err != nil {
		t.Fatal(err)
	}
	hinted(t, live, "an enqueue through another handle")
	quiet(t, dead, "an enqueue after the watch's handle crashed")
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Head(bg, "w"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Head on a closed handle: %v", err)
	}
	if _, err := other.Watch(bg, store.NewSignal(), store.TopicInbox("w")); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch on a closed handle: %v", err)
	}
	if err := other.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.Head(bg, "w"); err != nil {
		t.Fatalf("closing one handle closed another: %v", err)
	}
}

func hinted(t *testing.T, sig *store.Signal, what string) {
	t.Helper()
	select {
	case <-sig.C:
	default:
		t.Fatalf("no hint after %s", what)
	}
}

func quiet(t *testing.T, sig *store.Signal, what string) {
	t.Helper()
	select {
	case <-sig.C:
		t.Fatalf("hint after %s", what)
	default:
	}
}

// memstore delivers every hint of every topic (the suite tolerates lost
// ones), at once, after the commit and coalesced, and none for a call that
// changed nothing of its topic; stop ends them.
func TestWatchDeliversEveryHint(t *testing.T) {
	s, clock := open(t)
	e := mustWorld(t, s, "w")
	sig := map[string]*store.Signal{}
	for _, topic := range []string{store.TopicInbox("w"), store.TopicEffects, store.TopicTimers, store.TopicAssignments, store.TopicLeases, store.TopicWorkers} {
		sig[topic] = store.NewSignal()
		stop, err := s.Watch(bg, sig[topic], topic)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	inbox := sig[store.TopicInbox("w")]
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		_, _, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event"})
		must(err)
	}
	hinted(t, inbox, "Enqueue")
	quiet(t, inbox, "three enqueues (coalesced into one hint)")
	_, err := s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "i1", Kind: "k"}})
	must(err)
	hinted(t, sig[store.TopicEffects], "Publish")
	_, err = s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "i1", Kind: "k"}})
	must(err)
	quiet(t, sig[store.TopicEffects], "a Publish that queued nothing")
	items, err := s.Claim(bg, "ad", []string{"k"}, 1, time.Second)
	must(err)
	clock.Advance(2 * time.Second)
	_, err = s.ReapEffects(bg)
	must(err)
	hinted(t, sig[store.TopicEffects], "ReapEffects")
	_, _, err = s.Complete(bg, "i1", items[0].ClaimOf(), vocab.Receipt{Status: vocab.ReceiptError})
	must(err)
	hinted(t, inbox, "Complete")
	_, err = s.RetryEffect(bg, "i1", "operator")
	must(err)
	hinted(t, sig[store.TopicEffects], "RetryEffect")
	_, _, err = s.Resolve(bg, "i1", vocab.Receipt{Status: vocab.ReceiptOK}, "answered out of band")
	must(err)
	hinted(t, inbox, "Resolve")
	quiet(t, sig[store.TopicEffects], "Resolve (nothing became claimable)")
	must(s.Schedule(bg, "w", e, "t1", clock.Now(), nil))
	hinted(t, sig[store.TopicTimers], "Schedule")
	timers, err := s.ClaimDue(bg, "tw", 1, time.Minute)
	must(err)
	_, _, err = s.Fire(bg, "t1", timers[0].ClaimOf())
	must(err)
	hinted(t, inbox, "Fire")
	_, err = s.Send(bg, "w", "m1", store.InboxItem{})
	must(err)
	hinted(t, inbox, "Send")
	_, err = s.Commit(bg, "w", e, store.CommitBatch{Timers: []vocab.TimerSet{{IntentHash: "t2", DeliverAt: clock.Now().Add(time.Hour)}}})
	must(err)
	hinted(t, sig[store.TopicTimers], "a Commit that scheduled a timer")
	must(s.Assign(bg, "w", store.Assignment{DesiredWorker: "A"}, nil))
	hinted(t, sig[store.TopicAssignments], "Assign")
	_, err = s.Heartbeat(bg, "A", 10)
	must(err)
	hinted(t, sig[store.TopicWorkers], "Heartbeat")
	_, err = s.SetWorldStatus(bg, "w", store.WorldPaused, "maintenance")
	must(err)
	hinted(t, sig[store.TopicAssignments], "SetWorldStatus")
	hinted(t, sig[store.TopicLeases], "SetWorldStatus revoking the lease")
	_, err = s.SetWorldStatus(bg, "w", store.WorldActive, "back")
	must(err)
	hinted(t, sig[store.TopicAssignments], "SetWorldStatus resuming")
	quiet(t, sig[store.TopicLeases], "a resume (no lease to revoke)")
	l, err := s.Acquire(bg, "w", "A", time.Minute)
	must(err)
	hinted(t, sig[store.TopicLeases], "Acquire")
	spawned := store.NewSignal()
	stop, err := s.Watch(bg, spawned, store.TopicInbox("w2"))
	must(err)
	defer stop()
	_, err = s.Spawn(bg, store.SpawnSpec{Universe: "u", World: "w2", Items: []store.InboxItem{{Kind: "start"}}, Holder: "A", TTL: time.Minute})
	must(err)
	hinted(t, spawned, "Spawn with items")
	hinted(t, sig[store.TopicLeases], "Spawn with a holder")
	_, err = s.Spawn(bg, store.SpawnSpec{Universe: "u", World: "w3"})
	must(err)
	quiet(t, sig[store.TopicLeases], "Spawn without a holder")
	_, err = s.Commit(bg, "w", l.Epoch, store.CommitBatch{Status: &store.StatusChange{Status: store.WorldArchived, Reason: "done"}})
	must(err)
	hinted(t, sig[store.TopicAssignments], "a Commit that archived its world")
	hinted(t, sig[store.TopicLeases], "a Commit that ended its lease")
	for _, x := range sig {
		quiet(t, x, "the last hinted call")
	}
}

func TestManualClock(t *testing.T) {
	c := memstore.NewManualClock(epoch0)
	if !c.Now().Equal(epoch0) {
		t.Fatal(c.Now())
	}
	c.Advance(time.Second)
	c.Advance(-time.Hour)
	if got := c.Now().Sub(epoch0); got != time.Second {
		t.Fatalf("advanced by %v", got)
	}
}

func TestContextCancelledFailsWithItsError(t *testing.T) {
	s, _ := open(t)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, err := s.Head(ctx, "w")
	var se *store.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &se) {
		t.Fatalf("Head with a cancelled context: %v", err)
	}
}

func TestDefaultRetentionAndClock(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	if s.DedupeRetention() != store.DefaultDedupeRetention {
		t.Fatal(s.DedupeRetention())
	}
	before := time.Now()
	now, err := s.Now(bg)
	if err != nil || now.Before(before.Add(-time.Second)) || now.After(time.Now().Add(time.Second)) {
		t.Fatalf("default clock reads %v, %v", now, err)
	}
}

// Every method reports its operation to the hook under a name Ops lists,
// and Ops lists nothing else: the lab can enumerate fault points from it.
// (Each call is valid: one the front refuses never reaches the backend,
// nor its hook.)
func TestOpsListsEveryHookedOperation(t *testing.T) {
	seen := map[string]bool{}
	s, _ := open(t, memstore.WithHook(func(op string) error { seen[op] = true; return nil }))
	e := mustWorld(t, s, "w")
	calls := []func(){
		func() { s.Append(bg, "w", []store.Record{rec("a")}, store.AppendOptions{}) },
		func() { s.Read(bg, "w", 0, 1) },
		func() { s.Head(bg, "w") },
		func() { s.ReadWindow(bg, "w", epoch0, epoch0, 1) },
		func() { s.Renew(bg, "w", "A", e, time.Minute) },
		func() { s.GetLease(bg, "w") },
		func() { s.Assign(bg, "w", store.Assignment{DesiredWorker: "A"}, nil) },
		func() { s.GetAssignment(bg, "w") },
		func() { s.Unassign(bg, "w", nil) },
		func() { s.RenewLeases(bg, "A", []store.LeaseRef{{World: "w", Epoch: e}}, time.Minute) },
		func() { s.ListWorkerWorlds(bg, "A", "", 10) },
		func() { s.Heartbeat(bg, "A", 1) },
		func() { s.SetDraining(bg, "A", true) },
		func() { s.ListWorkers(bg) },
		func() { s.RetireWorker(bg, "A", "i") },
		func() { s.ReapOrphans(bg) },
		func() { s.Enqueue(bg, "w", store.InboxItem{Kind: "event"}) },
		func() { s.ReadInbox(bg, "w", 0, 1) },
		func() { s.Cursor(bg, "w") },
		func() { s.DrainToJournal(bg, "w", e, 0, 1, 1, []store.Record{rec("b")}) },
		func() { s.Commit(bg, "w", e, store.CommitBatch{}) },
		func() { s.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "i", Kind: "k"}}) },
		func() { s.Claim(bg, "ad", []string{"k"}, 1, time.Second) },
		func() {
			s.Complete(bg, "i", vocab.Claim{Worker: "ad", Attempt: 1}, vocab.Receipt{Status: vocab.ReceiptOK})
		},
		func() { s.CompleteMany(bg, nil) },
		func() { s.RetryEffect(bg, "i", "r") },
		func() { s.Resolve(bg, "i", vocab.Receipt{Status: vocab.ReceiptOK}, "r") },
		func() { s.ListEffects(bg, "w", 0, 10) },
		func() { s.ListTimers(bg, "w", 10) },
		func() { s.QueueDepths(bg) },
		func() { s.PendingEffects(bg) },
		func() { s.NextDue(bg) },
		func() { s.ReapEffects(bg) },
		func() { s.ReleaseEffect(bg, "i", vocab.Claim{Worker: "ad", Attempt: 1}) },
		func() { s.EffectStatus(bg, "i") },
		func() { s.Schedule(bg, "w", e, "t", epoch0, nil) },
		func() { s.CancelTimer(bg, "w", e, "t") },
		func() { s.ClaimDue(bg, "tw", 1, time.Second) },
		func() { s.Fire(bg, "t", vocab.Claim{Worker: "tw", Attempt: 1}) },
		func() { s.FireHeld(bg, "w", e, "t") },
		func() { s.ReapTimers(bg) },
		func() { s.Send(bg, "w", "m", store.InboxItem{}) },
		func() { s.PutSnapshot(bg, "w", e, store.Snapshot{Height: 1, StateHash: "h"}) },
		func() { s.ActiveSnapshot(bg, "w") },
		func() { s.SnapshotBelow(bg, "w", 1) },
		func() { s.Compact(bg, "w", e, 0) },
		func() { s.Floor(bg, "w") },
		func() { s.ForkWorld(bg, "w", 1, "f") },
		func() { s.Spawn(bg, store.SpawnSpec{Universe: "u", World: "s"}) },
		func() { s.GetWorld(bg, "w") },
		func() { s.ListWorlds(bg, "u", "") },
		func() { s.SetWorldStatus(bg, "w", store.WorldActive, "") },
		func() { s.GetWatermark(bg, "p", "w") },
		func() { s.CASWatermark(bg, "p", "w", 0, 1) },
		func() { s.SweepDedupe(bg) },
		func() { s.Watch(bg, store.NewSignal(), store.TopicEffects) },
		func() { s.Now(bg) },
		func() { s.Release(bg, "w", "A", e) },
		func() { s.ReleaseLeases(bg, "A", []store.LeaseRef{{World: "w", Epoch: e}}) },
		func() { s.AcquireLeases(bg, "A", []string{"w"}, time.Second) },
		func() { s.PutQueue(bg, store.QueueSpec{Name: "q"}) },
		func() { s.GetQueue(bg, "q") },
		func() { s.ListQueues(bg) },
		func() { s.EnqueueRun(bg, store.QueuedRun{Queue: "q", Run: "w"}) },
		func() { s.AdmitRuns(bg, "q", "A", 1) },
		func() { s.ListQueuedRuns(bg, "q") },
		func() { s.QueueRunOf(bg, "w") },
		func() { s.RecentAdmissions(bg, "q") },
	}
	for _, c := range calls {
		c()
	}
	ops := memstore.Ops()
	for i, op := range ops {
		if !seen[op] {
			t.Errorf("Ops lists %q, which no call reported", op)
		}
		if i > 0 && ops[i-1] >= op {
			t.Errorf("Ops not sorted at %q", op)
		}
		delete(seen, op)
	}
	for op := range seen {
		t.Errorf("the hook saw %q, which Ops does not list", op)
	}
}

// FuzzAppend fuzzes the append authority's inputs on the reference backend.
func FuzzAppend(f *testing.F) {
	storetest.FuzzAppend(f, func(t *testing.T) storetest.Harness {
		s, clock := open(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzResolve fuzzes an operator's Resolve on the reference backend.
func FuzzResolve(f *testing.F) {
	storetest.FuzzResolve(f, func(t *testing.T) storetest.Harness {
		s, clock := open(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzSpawn fuzzes Spawn's spec on the reference backend.
func FuzzSpawn(f *testing.F) {
	storetest.FuzzSpawn(f, func(t *testing.T) storetest.Harness {
		s, clock := open(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzFireHeld fuzzes a lease holder's firing on the reference backend.
func FuzzFireHeld(f *testing.F) {
	storetest.FuzzFireHeld(f, func(t *testing.T) storetest.Harness {
		s, clock := open(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// FuzzAcquireLeases fuzzes AcquireLeases's arguments on the reference
// backend.
func FuzzAcquireLeases(f *testing.F) {
	storetest.FuzzAcquireLeases(f, func(t *testing.T) storetest.Harness {
		s, clock := open(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	})
}

// TestPort copies a memstore into another.
func TestPort(t *testing.T) {
	h := func(t *testing.T) storetest.Harness {
		s, clock := open(t)
		return storetest.Harness{Store: s, Advance: clock.Advance}
	}
	storetest.RunPort(t, h, h)
}
