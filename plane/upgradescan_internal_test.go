package plane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// countingInbox counts the inbox items a store hands out.
type countingInbox struct {
	store.Store
	read int
}

func (c *countingInbox) ReadInbox(ctx context.Context, id string, after uint64, limit int) ([]store.InboxItem, error) {
	items, err := c.Store.ReadInbox(ctx, id, after, limit)
	c.read += len(items)
	return items, err
}

// deepInbox is a store with world "w" holding n event inputs, none
// drained.
func deepInbox(tb testing.TB, n int) (*countingInbox, context.Context) {
	tb.Helper()
	ctx := context.Background()
	st := &countingInbox{Store: memstore.New()}
	if _, err := st.CreateWorld(ctx, "u", "w", nil); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		enqueueTest(tb, st, store.InboxItem{Kind: vocab.KindEvent, Payload: []byte{0xa0}, DedupeKey: fmt.Sprint("e", i)})
	}
	return st, ctx
}

func enqueueTest(tb testing.TB, st store.Store, it store.InboxItem) uint64 {
	tb.Helper()
	seq, _, err := st.Enqueue(context.Background(), "w", it)
	if err != nil {
		tb.Fatal(err)
	}
	return seq
}

func upgradeItem(tb testing.TB, to uint64) store.InboxItem {
	tb.Helper()
	b, err := world.EncodeUpgrade(to)
	if err != nil {
		tb.Fatal(err)
	}
	return store.InboxItem{Kind: vocab.KindUpgrade, Payload: b, DedupeKey: store.UpgradeKeyPrefix + fmt.Sprint(to)}
}

// The orchestrator's remembered scan gives PendingUpgrade's answer as
// the inbox and its cursor move (an upgrade after the cursor counts, a
// consumed one does not, a later one is found), while reading each item
// once rather than every inbox whole on every pass.
func TestRememberedUpgradeScanAnswersAsPendingUpgrade(t *testing.T) {
	st, ctx := deepInbox(t, 600)
	var scans upgradeScans
	check := func(step string, want uint64) {
		t.Helper()
		scans.begin()
		got, err := scans.pending(ctx, st, "w")
		if err != nil {
			t.Fatal(err)
		}
		plain, _, err := PendingUpgrade(ctx, st, "w")
		if err != nil {
			t.Fatal(err)
		}
		if got != want || plain != want {
			t.Fatalf("%s: remembered %d, PendingUpgrade %d; want %d", step, got, plain, want)
		}
	}
	st.read = 0
	check("no upgrade", 0)
	st.read = 0
	scans.begin()
	if _, err := scans.pending(ctx, st, "w"); err != nil || st.read != 0 {
		t.Fatalf("a pass with nothing new read %d items (%v), want 0", st.read, err)
	}
	up := enqueueTest(t, st, upgradeItem(t, 2))
	enqueueTest(t, st, store.InboxItem{Kind: vocab.KindEvent, Payload: []byte{0xa0}, DedupeKey: "after"})
	check("an upgrade after the cursor", 2)
	st.read = 0
	scans.begin()
	if to, err := scans.pending(ctx, st, "w"); err != nil || to != 2 || st.read != 0 {
		t.Fatalf("a pass with the upgrade still waiting = %d, read %d items (%v); want 2 and 0", to, st.read, err)
	}
	l, err := st.Acquire(ctx, "w", "t", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DrainToJournal(ctx, "w", l.Epoch, 0, 0, up, nil); err != nil {
		t.Fatal(err)
	}
	check("the upgrade consumed", 0)
	enqueueTest(t, st, upgradeItem(t, 3))
	check("a later upgrade", 3)
	// A world a pass did not look at is forgotten.
	scans.begin()
	scans.sweep()
	if len(scans.m) != 0 {
		t.Fatalf("after a pass that did not look at w: %v", scans.m)
	}
}

// BenchmarkVersionsNeededDeepInbox is one orchestrator pass's look at a
// world with a deep inbox during a rollout: read from the cursor every
// pass (scan), or on from where the last pass stopped (remembered).
func BenchmarkVersionsNeededDeepInbox(b *testing.B) {
	for _, depth := range []int{100, 10000} {
		st, ctx := deepInbox(b, depth)
		live := []store.WorkerInfo{{ID: "a"}}
		for _, mode := range []string{"scan", "remembered"} {
			b.Run(fmt.Sprintf("%s/inbox=%d", mode, depth), func(b *testing.B) {
				var scans *upgradeScans
				if mode == "remembered" {
					scans = &upgradeScans{}
				}
				st.read = 0
				for b.Loop() {
					if scans != nil {
						scans.begin()
					}
					if _, err := versionsNeeded(ctx, st, scans, "w", "u", live); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(st.read)/float64(b.N), "items/op")
			})
		}
	}
}

// After a failover to an asynchronous standby that lost the primary's
// last inbox items, the standby hands their seqs out again; an upgrade
// at a reused seq is below what the remembered scan read on the primary.
// The scan is read afresh from the cursor every rescanEvery passes, so it
// finds the upgrade within that many passes, not never.
func TestRememberedScanFindsAnUpgradeAtAReusedSeq(t *testing.T) {
	primary, ctx := deepInbox(t, 600)
	standby, _ := deepInbox(t, 500) // the same first 500 items; 501..600 lost
	var scans upgradeScans
	scans.begin()
	if got, err := scans.pending(ctx, primary, "w"); err != nil || got != 0 {
		t.Fatalf("primary: %d, %v", got, err)
	}
	enqueueTest(t, standby, upgradeItem(t, 2))
	for pass := 1; ; pass++ {
		scans.begin()
		got, err := scans.pending(ctx, standby, "w")
		if err != nil {
			t.Fatal(err)
		}
		if got == 2 {
			break
		}
		if pass >= rescanEvery {
			t.Fatalf("the upgrade at a reused seq unseen after %d passes", pass)
		}
	}
}
