package storetest

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Effects after a long outage (issue 7 item 15): the dedupe record of an
// effect (or timer) lives until its world has consumed the delivery, so a
// world that stays offline past the retention and then re-publishes its
// intents runs no effect twice. Once consumed, the record goes after the
// retention like any other.
func retentionTests() []testCase {
	return []testCase{
		{"UnconsumedReceiptKeepsTheEffectRecordPastRetention", testUnconsumedEffect},
		{"UnconsumedFiringKeepsTheTimerRecordPastRetention", testUnconsumedTimer},
	}
}

func testUnconsumedEffect(t *testing.T, open Factory) {
	f := setup(t, open)
	ret := f.s.DedupeRetention()
	e := f.leased("w", "A")
	f.publish("w", e, "i1")
	c := f.claimOne("adapter", "i1").ClaimOf()
	seq, _ := f.complete("i1", c, vocab.Receipt{Status: vocab.ReceiptOK})
	// The world is offline far past the retention.
	f.advance(3*ret + time.Hour)
	f.sweep()
	if st := f.effectStatus("i1"); st.State != vocab.EffectDone || st.InboxSeq != seq {
		t.Fatalf("unconsumed effect record = %+v, want it kept", st)
	}
	// It comes back and replays its cycle: re-publishing queues nothing.
	e = f.acquire("w", "A").Epoch
	if n := f.publish("w", e, "i1"); n != 0 {
		t.Fatalf("re-publish after the outage queued %d: the effect would run twice", n)
	}
	if got := f.claim("adapter", 10); len(got) != 0 {
		t.Fatalf("claimable after the outage: %+v", got)
	}
	// It consumes the receipt; the record is kept for the retention after
	// that (counted from the completion), then swept.
	_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, seq, []store.Record{rec("receipt")})
	must(t, err, "DrainToJournal")
	if n := f.sweep(); n < 1 {
		t.Fatalf("swept %d after the receipt was consumed, past retention", n)
	}
	_, err = f.s.EffectStatus(bg, "i1")
	wantErr(t, err, store.ErrNotFound, "EffectStatus after the sweep")
}

func testUnconsumedTimer(t *testing.T, open Factory) {
	f := setup(t, open)
	ret := f.s.DedupeRetention()
	e := f.leased("w", "A")
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), []byte("tick")), "Schedule")
	f.advance(margin)
	c := f.claimTimer("tw", "t1").ClaimOf()
	seq, _ := f.fire("t1", c)
	f.advance(3*ret + time.Hour)
	f.sweep()
	if s, dup := f.fire("t1", c); !dup || s != seq {
		t.Fatalf("unconsumed timer record: Fire = %d dup %v, want %d true (kept)", s, dup, seq)
	}
	e = f.acquire("w", "A").Epoch
	must(t, f.s.Schedule(bg, "w", e, "t1", f.now(), nil), "re-Schedule after the outage")
	f.advance(margin)
	if got := f.claimDue("tw", 10); len(got) != 0 {
		t.Fatalf("re-scheduled timer claimable after the outage: %+v (it would fire twice)", got)
	}
	_, err := f.s.DrainToJournal(bg, "w", e, 0, 0, seq, []store.Record{rec("fired")})
	must(t, err, "DrainToJournal")
	if n := f.sweep(); n < 1 {
		t.Fatalf("swept %d after the firing was consumed", n)
	}
	_, _, err = f.s.Fire(bg, "t1", c)
	wantErr(t, err, store.ErrNotFound, "Fire after the sweep")
}
