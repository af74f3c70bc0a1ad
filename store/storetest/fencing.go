package storetest

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// Fencing (the runtime plane contract, "Leases and fencing"):
// every mutation of a world's durable state carries the lease epoch and the
// store checks it in the same transaction as the write.
//
// Reading pinned here: a write passes the fence only while its epoch is the
// world's current lease epoch AND that lease is held (not released) and
// unexpired by the store's clock. An expired lease fences its holder at
// once, before anyone takes it over: "a paused or partitioned stale holder
// can never write", and Acquire treats an expired lease as free, so nothing
// may still write under it.
func fencingTests() []testCase {
	return []testCase{
		{"StaleEpochWriteRacingTakeoverIsRejected", testStaleEpochRacingTakeover},
		{"ExpiredLeaseFencesWritesBeforeTakeover", testExpiredLeaseFences},
		{"ReleasedLeaseFencesWrites", testReleasedLeaseFences},
	}
}

// worldState is what a fenced write must not change, rendered comparably.
func (f *fx) worldState(world string) string {
	f.t.Helper()
	w, err := f.s.GetWorld(bg, world)
	must(f.t, err, "GetWorld")
	snap, ok, err := f.s.ActiveSnapshot(bg, world)
	must(f.t, err, "ActiveSnapshot")
	return fmt.Sprintf("status=%s head=%d events=%v cursor=%d inbox=%v snapshot=%v/%d/%s",
		w.Status, f.head(world), eventIDs(f.read(world)), f.cursor(world), itemSeqs(f.inbox(world)),
		ok, snap.Height, snap.StateHash)
}

func testStaleEpochRacingTakeover(t *testing.T, open Factory) {
	f := setup(t, open)

	// Sequential: every kind of world mutation A can make with its old epoch
	// after B took over fails with ErrFenced and changes nothing.
	eA := f.leased("w", "A")
	ab := f.append("w", fenced("w", eA), "a", "b")
	seqIn, _ := f.enqueue("w", "event", "", []byte("in-1"))
	f.publish("w", eA, "i-1")
	due := f.now().Add(10 * time.Second)
	must(t, f.s.Schedule(bg, "w", eA, "t-1", due, []byte("tick")), "Schedule")
	must(t, f.s.PutSnapshot(bg, "w", eA, store.Snapshot{Height: ab[0].RunSeq, State: []byte("s-a"), StateHash: "h-a"}), "PutSnapshot")
	f.advance(leaseTTL + margin)
	eB := f.acquire("w", "B").Epoch
	before := f.worldState("w")
	head := f.head("w")
	writes := map[string]func() error{
		"Append": func() error {
			_, err := f.s.Append(bg, "w", []store.Record{rec("x")}, fenced("w", eA))
			return err
		},
		"DrainToJournal": func() error {
			_, err := f.s.DrainToJournal(bg, "w", eA, 0, head, seqIn, []store.Record{rec("x")})
			return err
		},
		"Publish": func() error {
			_, err := f.s.Publish(bg, "w", eA, intents("i-2"))
			return err
		},
		"Schedule":    func() error { return f.s.Schedule(bg, "w", eA, "t-2", due, nil) },
		"CancelTimer": func() error { return f.s.CancelTimer(bg, "w", eA, "t-1") },
		"PutSnapshot": func() error {
			return f.s.PutSnapshot(bg, "w", eA, store.Snapshot{Height: ab[1].RunSeq, State: []byte("s-b"), StateHash: "h-b"})
		},
		"Compact": func() error {
			_, err := f.s.Compact(bg, "w", eA, 0)
			return err
		},
	}
	names := make([]string, 0, len(writes))
	for name := range writes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		wantErr(t, writes[name](), store.ErrFenced, name+" with the epoch before the takeover")
	}
	if after := f.worldState("w"); after != before {
		t.Fatalf("fenced writes changed the world:\nbefore %s\nafter  %s", before, after)
	}
	_, err := f.s.EffectStatus(bg, "i-2")
	wantErr(t, err, store.ErrNotFound, "EffectStatus of the fenced publish")
	f.advance(15 * time.Second)
	if got := f.claimDue("timer-worker", 10); len(got) != 1 || got[0].IntentHash != "t-1" {
		t.Fatalf("ClaimDue = %+v, want t-1 alone (not cancelled, t-2 never scheduled)", got)
	}
	// B's epoch writes.
	f.append("w", fenced("w", eB), "x")
	if n := f.publish("w", eB, "i-2"); n != 1 {
		t.Fatalf("B's Publish queued %d", n)
	}

	// Concurrent: A keeps writing (appends and publishes) while the test
	// expires its lease and B takes over. A write that started after the
	// clock moved past A's expiry, and so every write that started after
	// B's Acquire returned, must fail with ErrFenced; every write that
	// succeeded is stored, every one that failed is not, and all of A's
	// events precede B's.
	eA2 := f.leased("w2", "A")
	type attempt struct {
		append        bool
		key           string
		afterExpiry   bool
		afterTakeover bool
		err           error
	}
	var expired, takenOver atomic.Bool
	var log []attempt
	// progress only paces the test; the goroutine's own log is the record.
	// Buffered, so that A keeps writing while the test expires the lease
	// and B acquires (the window the race is about).
	progress := make(chan attempt, 4096)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			a := attempt{append: i%2 == 0, key: fmt.Sprintf("race-%d", i), afterExpiry: expired.Load(), afterTakeover: takenOver.Load()}
			if a.append {
				_, a.err = f.s.Append(bg, "w2", []store.Record{rec(a.key)}, fenced("w2", eA2))
			} else {
				_, a.err = f.s.Publish(bg, "w2", eA2, intents(a.key))
			}
			log = append(log, a)
			select {
			case <-stop:
				return
			default:
			}
			select {
			case progress <- a:
			default: // the test is busy; it paces itself by later attempts
			}
		}
	}()
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	for ok := 0; ok < 6; {
		if a := <-progress; a.err == nil {
			ok++
		} else {
			t.Fatalf("A's write under a live lease failed: %v", a.err)
		}
	}
	f.advance(leaseTTL + margin)
	expired.Store(true)
	lB, err := f.s.Acquire(bg, "w2", "B", leaseTTL)
	must(t, err, "B's Acquire after A's expiry")
	takenOver.Store(true)
	for n := 0; n < 6; {
		if a := <-progress; a.afterTakeover {
			n++
		}
	}
	halt()

	var lastA uint64
	stored := map[string]uint64{}
	for _, e := range f.read("w2") {
		stored[e.IdempotencyKey] = e.RunSeq
	}
	published := map[string]bool{}
	for {
		items := f.claim("verifier", 1000)
		if len(items) == 0 {
			break
		}
		for _, it := range items {
			published[it.IntentHash] = true
		}
	}
	for _, a := range log {
		switch {
		case a.err != nil && !errors.Is(a.err, store.ErrFenced):
			t.Fatalf("write %s failed with %v, want ErrFenced", a.key, a.err)
		case a.err == nil && a.afterTakeover:
			t.Fatalf("write %s with epoch %d succeeded after B acquired epoch %d", a.key, eA2, lB.Epoch)
		case a.err == nil && a.afterExpiry:
			t.Fatalf("write %s with epoch %d succeeded after its lease expired", a.key, eA2)
		}
		if a.append {
			seq, ok := stored["key-"+a.key]
			if ok != (a.err == nil) {
				t.Fatalf("append %s: err %v, stored %v", a.key, a.err, ok)
			}
			lastA = max(lastA, seq)
			continue
		}
		if published[a.key] != (a.err == nil) {
			t.Fatalf("publish %s: err %v, queued %v", a.key, a.err, published[a.key])
		}
	}
	if b := f.append("w2", fenced("w2", lB.Epoch), "by-B"); b[0].RunSeq <= lastA {
		t.Fatalf("B's first event at runSeq %d, not after A's last at %d", b[0].RunSeq, lastA)
	}
}

func testExpiredLeaseFences(t *testing.T, open Factory) {
	f := setup(t, open)
	e1 := f.leased("w", "A")
	f.append("w", fenced("w", e1), "a")
	f.advance(leaseTTL + margin)
	_, err := f.s.Append(bg, "w", []store.Record{rec("b")}, fenced("w", e1))
	wantErr(t, err, store.ErrFenced, "append under an expired lease nobody took over")
	_, err = f.s.Publish(bg, "w", e1, intents("i-1"))
	wantErr(t, err, store.ErrFenced, "publish under an expired lease")
	if evs := f.read("w"); len(evs) != 1 {
		t.Fatalf("fenced append inserted: %v", eventIDs(evs))
	}
	e2 := f.acquire("w", "A").Epoch
	f.append("w", fenced("w", e2), "b")
	_, err = f.s.Append(bg, "w", []store.Record{rec("c")}, fenced("w", e1))
	wantErr(t, err, store.ErrFenced, "append with the epoch before the holder's own re-acquire")
}

func testReleasedLeaseFences(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	must(t, f.s.Release(bg, "w", "A", e), "Release")
	_, err := f.s.Append(bg, "w", []store.Record{rec("a")}, fenced("w", e))
	wantErr(t, err, store.ErrFenced, "append after release")
	_, err = f.s.Publish(bg, "w", e, intents("i1"))
	wantErr(t, err, store.ErrFenced, "publish after release")
	if evs := f.read("w"); len(evs) != 0 {
		t.Fatalf("append after release inserted %v", eventIDs(evs))
	}
}
