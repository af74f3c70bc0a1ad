package storetest

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Dedupe retention (store.Dedupe): a completed record is kept at least
// until completedAt + retention; pending records are never swept.
//
// The contract (store.Dedupe): an effect record completes when its world
// has consumed the receipt (the cursor passed its inbox seq), a timer
// record when the world consumed its firing, a fabric record at delivery
// (Send), and an inbox dedupe key when the inbox cursor passes its item: an
// undrained item's key is pending, because sweeping it would let a retried
// producer enqueue the same input twice. The tests drain at once, so that
// "delivered" and "consumed" are the same instant; dedupeConsumed pins the
// difference (retention.go).
func dedupeTests() []testCase {
	return []testCase{
		{"DedupeNotSweptBeforeRetention", func(t *testing.T, open Factory) { testRetention(t, open, false) }},
		{"DedupeSweptAfterRetention", func(t *testing.T, open Factory) { testRetention(t, open, true) }},
		{"PendingDedupeRecordsAreNeverSwept", testPendingNeverSwept},
		{"InboxKeyRetentionStartsAtItsOwnDrain", testInboxKeyRetentionPerDrain},
	}
}

// dedupeKind sets up one completed dedupe record, then reports whether a
// retry of the same logical operation is still deduplicated.
type dedupeKind struct {
	name     string
	complete func(f *fx)
	deduped  func(f *fx) bool
}

var dedupeKinds = []dedupeKind{
	{
		name: "inbox key",
		complete: func(f *fx) {
			e := f.leased("w", "A")
			seq, _ := f.enqueue("w", "event", "k", nil)
			_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, seq, []store.Record{rec("k")})
			must(f.t, err, "DrainToJournal")
		},
		deduped: func(f *fx) bool {
			_, dup := f.enqueue("w", "event", "k", nil)
			return dup
		},
	},
	{
		name: "effect",
		complete: func(f *fx) {
			e := f.leased("w", "A")
			f.publish("w", e, "i1")
			it := f.claimOne("adapter", "i1")
			seq, _ := f.complete("i1", it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK})
			// The world consumes the receipt: only then does the record complete.
			_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, seq, []store.Record{rec("r1")})
			must(f.t, err, "DrainToJournal")
		},
		deduped: func(f *fx) bool {
			e := f.acquire("w", "A").Epoch
			return f.publish("w", e, "i1") == 0
		},
	},
	{
		name: "timer",
		complete: func(f *fx) {
			e := f.leased("w", "A")
			must(f.t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule")
			f.advance(time.Second)
			it := f.claimTimer("tw", "t1")
			seq, _ := f.fire("t1", it.ClaimOf())
			_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, seq, []store.Record{rec("t1")})
			must(f.t, err, "DrainToJournal")
		},
		deduped: func(f *fx) bool {
			e := f.acquire("w", "A").Epoch
			must(f.t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "Schedule")
			f.advance(time.Second)
			return len(f.claimDue("tw", 1)) == 0
		},
	},
	{
		name: "fabric",
		complete: func(f *fx) {
			e := f.leased("w", "A")
			r, err := f.s.Send(bg, "w", "m1", store.InboxItem{})
			must(f.t, err, "Send")
			_, err = f.s.DrainToJournal(bg, "w", e, 0, 0, r.Seq, []store.Record{rec("m1")})
			must(f.t, err, "DrainToJournal")
		},
		deduped: func(f *fx) bool {
			r, err := f.s.Send(bg, "w", "m1", store.InboxItem{})
			must(f.t, err, "Send")
			return r.Status == store.FabricAlreadyEnqueued
		},
	},
}

func testRetention(t *testing.T, open Factory, past bool) {
	for _, k := range dedupeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, open)
			ret := f.s.DedupeRetention()
			if ret <= 0 {
				t.Fatalf("DedupeRetention = %v", ret)
			}
			k.complete(f)
			if !past {
				f.advance(ret - time.Minute)
				if n := f.sweep(); n != 0 {
					t.Fatalf("swept %d records a minute before retention", n)
				}
				if !k.deduped(f) {
					t.Fatalf("%s record swept before its retention", k.name)
				}
				return
			}
			f.advance(ret + time.Minute)
			if n := f.sweep(); n < 1 {
				t.Fatalf("swept %d records after retention", n)
			}
			if k.deduped(f) {
				t.Fatalf("%s record still deduplicates after retention and a sweep", k.name)
			}
		})
	}
}

func testPendingNeverSwept(t *testing.T, open Factory) {
	f := setup(t, open)
	e := f.leased("w", "A")
	f.enqueue("w", "event", "undrained", nil)
	f.publish("w", e, "inflight")
	f.publish("w", e, "pending")
	if got := f.claim("adapter", 1); len(got) != 1 || got[0].IntentHash != "inflight" {
		t.Fatalf("Claim = %+v", got)
	}
	must(t, f.s.Schedule(bg, "w", e, "unfired", f.now().Add(100*24*time.Hour), nil), "Schedule")
	f.advance(3*f.s.DedupeRetention() + time.Hour)
	f.sweep()
	for _, h := range []string{"pending", "inflight"} {
		if st := f.effectStatus(h); st.State == vocab.EffectDone {
			t.Fatalf("open intent %s = %+v", h, st)
		}
	}
	e = f.acquire("w", "A").Epoch
	if n := f.publish("w", e, "pending", "inflight"); n != 0 {
		t.Fatalf("re-publish after the sweep queued %d: an open intent's record was swept", n)
	}
	if _, dup := f.enqueue("w", "event", "undrained", nil); !dup {
		t.Fatal("an undrained item's dedupe key was swept")
	}
	must(t, f.s.Schedule(bg, "w", e, "unfired", f.now(), nil), "Schedule")
	f.advance(100 * 24 * time.Hour)
	got := f.claimDue("tw", 10)
	if len(got) != 1 || got[0].IntentHash != "unfired" {
		t.Fatalf("ClaimDue = %+v, want the one unfired timer (its record kept, not duplicated)", got)
	}
}

// An inbox key's retention starts when the cursor passes its item, not when
// it was enqueued, and each key counts from the drain that passed it: of
// two keys enqueued together and drained a retention apart, a sweep between
// their expiries removes the first only, and an undrained key stays.
func testInboxKeyRetentionPerDrain(t *testing.T, open Factory) {
	f := setup(t, open)
	ret := f.s.DedupeRetention()
	f.leased("w", "A")
	s1, _ := f.enqueue("w", "event", "k1", nil)
	s2, _ := f.enqueue("w", "event", "k2", nil)
	f.enqueue("w", "event", "k3", nil)
	f.advance(ret)
	e := f.acquire("w", "A").Epoch
	_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, s1, []store.Record{rec("k1")})
	must(t, err, "DrainToJournal k1")
	f.advance(ret - time.Minute)
	e = f.acquire("w", "A").Epoch
	_, err = f.s.DrainToJournal(bg, "w", e, s1, 1, s2, []store.Record{rec("k2")})
	must(t, err, "DrainToJournal k2")
	f.advance(2 * time.Minute)
	if n := f.sweep(); n != 1 {
		t.Fatalf("swept %d records, want 1 (k1 only)", n)
	}
	if _, dup := f.enqueue("w", "event", "k1", nil); dup {
		t.Fatal("k1 still deduplicates a retention after its drain and a sweep")
	}
	for _, k := range []string{"k2", "k3"} {
		if _, dup := f.enqueue("w", "event", k, nil); !dup {
			t.Fatalf("%s swept early: a retry would enqueue the same input twice", k)
		}
	}
}
