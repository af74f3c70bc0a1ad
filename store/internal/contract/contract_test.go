package contract

import (
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/internal/leaktest"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func live(holder string, epoch uint64) LeaseRow {
	return LeaseRow{Found: true, Holder: holder, Epoch: epoch, ExpiresAt: t0.Add(time.Minute)}
}

func is(t *testing.T, name string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", name, err, want)
	}
}

func TestFenceAdmitsOnlyTheLiveHeldCurrentEpoch(t *testing.T) {
	for _, c := range []struct {
		name  string
		found bool
		l     LeaseRow
		want  error
	}{
		{"live", true, live("a", 3), nil},
		{"no world", false, live("a", 3), store.ErrWorldNotFound},
		{"never leased", true, LeaseRow{}, store.ErrFenced},
		{"other epoch", true, live("a", 4), store.ErrFenced},
		{"released", true, LeaseRow{Found: true, Epoch: 3, ExpiresAt: t0.Add(time.Minute)}, store.ErrFenced},
		{"expired at the instant", true, LeaseRow{Found: true, Holder: "a", Epoch: 3, ExpiresAt: t0}, store.ErrFenced},
	} {
		is(t, c.name, Fence("op", "w", 3, c.found, c.l, t0), c.want)
	}
}

func TestAppendFenceMakesTheStreamKindExplicit(t *testing.T) {
	own := &store.Fence{World: "w", Epoch: 3}
	for _, c := range []struct {
		name  string
		opts  store.AppendOptions
		world bool
		want  error
	}{
		{"world stream, own fence", store.AppendOptions{Fence: own}, true, nil},
		{"world stream, no fence", store.AppendOptions{}, true, store.ErrFenced},
		{"world stream, other world's fence", store.AppendOptions{Fence: &store.Fence{World: "v", Epoch: 3}}, true, store.ErrFenced},
		{"world stream, stale epoch", store.AppendOptions{Fence: &store.Fence{World: "w", Epoch: 2}}, true, store.ErrFenced},
		{"world stream naming no world", store.AppendOptions{Fence: own}, false, store.ErrWorldNotFound},
		{"free stream", store.AppendOptions{Kind: store.FreeStream}, false, nil},
		{"free stream over a world", store.AppendOptions{Kind: store.FreeStream}, true, store.ErrFenced},
		{"free stream with a fence", store.AppendOptions{Kind: store.FreeStream, Fence: own}, false, store.ErrInvalid},
		{"unknown kind", store.AppendOptions{Kind: 9}, false, store.ErrInvalid},
	} {
		is(t, c.name, AppendFence("append", "w", c.opts, c.world, live("a", 3), t0), c.want)
	}
}

func TestAcquireTakesTheNextEpochOrKeepsTheHoldersLease(t *testing.T) {
	next, keep, err := Acquire("acquire", "w", "a", "", store.WorldActive, "", false, LeaseRow{Found: true, Epoch: 7}, t0, time.Minute)
	if err != nil || keep || next.Epoch != 8 || next.Holder != "a" || !next.ExpiresAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("released lease: %+v keep=%v %v", next, keep, err)
	}
	got, keep, err := Acquire("acquire", "w", "a", "", store.WorldActive, "", false, live("a", 7), t0, time.Hour)
	if err != nil || !keep || got.Epoch != 7 {
		t.Fatalf("own live lease: %+v keep=%v %v", got, keep, err)
	}
	_, _, err = Acquire("acquire", "w", "b", "", store.WorldActive, "", false, live("a", 7), t0, time.Minute)
	is(t, "held", err, store.ErrLeaseHeld)
	_, _, err = Acquire("acquire", "w", "b", "", store.WorldActive, "a", true, LeaseRow{}, t0, time.Minute)
	is(t, "assigned elsewhere", err, store.ErrNotAssigned)
	_, _, err = Acquire("acquire", "w", "a", "", store.WorldPaused, "", false, LeaseRow{}, t0, time.Minute)
	is(t, "paused", err, store.ErrWorldPaused)
	_, _, err = Acquire("acquire", "w", "a", "", store.WorldArchived, "", false, LeaseRow{}, t0, time.Minute)
	is(t, "archived", err, store.ErrWorldArchived)
}

// TestAcquireByAnotherIncarnationTakesOverAtTheNextEpoch: a live lease
// of worker a passes to a's other incarnation at epoch+1, recording whom
// it displaced; that displaced incarnation is refused while the lease is
// live, any further incarnation takes over again, and an expired lease is
// free for anyone (an incarnation of the same worker taking it displaces
// the last one).
func TestAcquireByAnotherIncarnationTakesOverAtTheNextEpoch(t *testing.T) {
	held := live("a", 7)
	held.Incarnation = "i1"
	next, keep, err := Acquire("acquire", "w", "a", "i2", store.WorldActive, "", false, held, t0, time.Minute)
	if err != nil || keep || next.Epoch != 8 || next.Incarnation != "i2" || !next.TookOver || next.Displaced != "i1" {
		t.Fatalf("takeover by i2: %+v keep=%v %v", next, keep, err)
	}
	_, _, err = Acquire("acquire", "w", "a", "i1", store.WorldActive, "", false, next, t0, time.Minute)
	is(t, "the displaced incarnation", err, store.ErrLeaseHeld)
	again, keep, err := Acquire("acquire", "w", "a", "i2", store.WorldActive, "", false, next, t0, time.Minute)
	if err != nil || !keep || again != next {
		t.Fatalf("retry by i2: %+v keep=%v %v", again, keep, err)
	}
	third, keep, err := Acquire("acquire", "w", "a", "", store.WorldActive, "", false, next, t0, time.Minute)
	if err != nil || keep || third.Epoch != 9 || third.Displaced != "i2" {
		t.Fatalf("takeover by the empty incarnation: %+v keep=%v %v", third, keep, err)
	}
	free, keep, err := Acquire("acquire", "w", "a", "i1", store.WorldActive, "", false, next, next.ExpiresAt, time.Minute)
	if err != nil || keep || free.Epoch != 9 || !free.TookOver || free.Displaced != "i2" {
		t.Fatalf("i1 after the lease expired: %+v keep=%v %v (i2 held it last: displaced)", free, keep, err)
	}
	// Taken after a release, or from another worker: nobody displaced.
	released := LeaseRow{Found: true, Epoch: 9, ExpiresAt: t0, Incarnation: "i1"}
	if n, _, err := Acquire("acquire", "w", "a", "i2", store.WorldActive, "", false, released, t0, time.Minute); err != nil || n.TookOver {
		t.Fatalf("after a release: %+v %v", n, err)
	}
	other := LeaseRow{Found: true, Holder: "b", Epoch: 9, ExpiresAt: t0, Incarnation: "i1"}
	if n, _, err := Acquire("acquire", "w", "a", "i2", store.WorldActive, "", false, other, t0, time.Minute); err != nil || n.TookOver {
		t.Fatalf("from another worker's expired lease: %+v %v", n, err)
	}
	// A lease taken free displaced nobody: the empty incarnation is not
	// refused as if it had been.
	freeRow := live("a", 3)
	freeRow.Incarnation = "i1"
	if n, _, err := Acquire("acquire", "w", "a", "", store.WorldActive, "", false, freeRow, t0, time.Minute); err != nil || n.Epoch != 4 {
		t.Fatalf("empty incarnation over a lease taken free: %+v %v", n, err)
	}
}

func TestTransitionTable(t *testing.T) {
	for _, c := range []struct {
		from, to       store.WorldStatus
		noop, endLease bool
		want           error
	}{
		{store.WorldActive, store.WorldPaused, false, true, nil},
		{store.WorldPaused, store.WorldActive, false, false, nil},
		{store.WorldActive, store.WorldArchived, false, true, nil},
		{store.WorldPaused, store.WorldArchived, false, false, nil},
		{store.WorldPaused, store.WorldPaused, true, false, nil},
		{store.WorldArchived, store.WorldArchived, true, false, nil},
		{store.WorldArchived, store.WorldActive, false, false, store.ErrWorldArchived},
		{store.WorldActive, "fenced", false, false, store.ErrInvalid},
	} {
		noop, end, err := Transition("set_world_status", "w", c.from, c.to)
		is(t, string(c.from)+"->"+string(c.to), err, c.want)
		if noop != c.noop || end != c.endLease {
			t.Errorf("%s->%s: noop=%v endLease=%v, want %v %v", c.from, c.to, noop, end, c.noop, c.endLease)
		}
	}
}

func TestClaimCheckAndDue(t *testing.T) {
	row := ClaimRow{Attempt: 2, ClaimedBy: "b"}
	is(t, "latest", ClaimCheck("complete", "h", row, vocab.Claim{Worker: "b", Attempt: 2}), nil)
	is(t, "older attempt", ClaimCheck("complete", "h", row, vocab.Claim{Worker: "b", Attempt: 1}), store.ErrClaimLost)
	is(t, "other worker", ClaimCheck("complete", "h", row, vocab.Claim{Worker: "a", Attempt: 2}), store.ErrClaimLost)
	is(t, "due now", Due("fire", "h", t0, t0), nil)
	is(t, "due later", Due("fire", "h", t0.Add(time.Nanosecond), t0), store.ErrNotDue)
}

func TestSnapshotDecision(t *testing.T) {
	s := store.Snapshot{Height: 5, StateHash: "x"}
	if w, err := Snapshot("put", "w", s, 5, ""); !w || err != nil {
		t.Errorf("new at head: write=%v %v", w, err)
	}
	if w, err := Snapshot("put", "w", s, 5, "x"); w || err != nil {
		t.Errorf("same again: write=%v %v", w, err)
	}
	_, err := Snapshot("put", "w", s, 5, "y")
	is(t, "other state", err, store.ErrSnapshotConflict)
	_, err = Snapshot("put", "w", s, 4, "")
	is(t, "above head", err, store.ErrInvalid)
}

func TestSweepableNeedsConsumptionAndRetention(t *testing.T) {
	done := t0
	if Sweepable(done, 10, 9, time.Hour, t0.Add(2*time.Hour)) {
		t.Error("swept a record whose inbox item is unconsumed")
	}
	if Sweepable(done, 10, 10, time.Hour, t0.Add(time.Hour-1)) {
		t.Error("swept a record inside its retention")
	}
	if !Sweepable(done, 10, 10, time.Hour, t0.Add(time.Hour)) {
		t.Error("kept a consumed record past its retention")
	}
}

func TestRetryableOnlyAfterErrorOrTimeout(t *testing.T) {
	is(t, "error", Retryable("retry", "h", vocab.EffectDone, vocab.ReceiptError), nil)
	is(t, "timeout", Retryable("retry", "h", vocab.EffectDone, vocab.ReceiptTimeout), nil)
	is(t, "ok", Retryable("retry", "h", vocab.EffectDone, vocab.ReceiptOK), store.ErrNotRetryable)
	is(t, "pending", Retryable("retry", "h", vocab.EffectPending, ""), store.ErrNotRetryable)
}

func TestSettleOrder(t *testing.T) {
	c := vocab.Claim{Worker: "a", Attempt: 2}
	mine := ClaimRow{Attempt: 2, ClaimedBy: "a"}
	later := t0.Add(time.Second)
	for _, tc := range []struct {
		name string
		row  SettleRow
		dup  bool
		want error
	}{
		{"unknown", SettleRow{}, false, store.ErrNotFound},
		{"done, another's claim", SettleRow{Found: true, Done: true, Claim: ClaimRow{Attempt: 3, ClaimedBy: "b"}}, true, nil},
		{"effect, latest claim", SettleRow{Found: true, Claim: mine}, false, nil},
		{"effect, lost claim", SettleRow{Found: true, Claim: ClaimRow{Attempt: 3, ClaimedBy: "b"}}, false, store.ErrClaimLost},
		{"timer, due", SettleRow{Found: true, DueAt: &t0, Claim: mine}, false, nil},
		{"timer, not due before the claim", SettleRow{Found: true, DueAt: &later, Claim: ClaimRow{Attempt: 3}}, false, store.ErrNotDue},
	} {
		dup, err := Settle("s", "timer", "h", tc.row, Claimant(c), t0)
		if dup != tc.dup {
			t.Errorf("%s: dup %v, want %v", tc.name, dup, tc.dup)
		}
		is(t, tc.name, err, tc.want)
	}
}

// An operator's settle is a claimant's without the claim check: whatever
// the latest claim (none, another worker's), it goes ahead; an unknown item
// is still ErrNotFound, a done one still answers dup, and a timer must
// still be due.
func TestSettleByAnOperatorSkipsOnlyTheClaimCheck(t *testing.T) {
	op := Operator("manual step finished")
	later := t0.Add(time.Second)
	for _, tc := range []struct {
		name string
		row  SettleRow
		dup  bool
		want error
	}{
		{"unknown", SettleRow{}, false, store.ErrNotFound},
		{"done", SettleRow{Found: true, Done: true, Claim: ClaimRow{Attempt: 3, ClaimedBy: "b"}}, true, nil},
		{"pending, never claimed", SettleRow{Found: true}, false, nil},
		{"inflight, another's claim", SettleRow{Found: true, Claim: ClaimRow{Attempt: 3, ClaimedBy: "b"}}, false, nil},
		{"timer, not due", SettleRow{Found: true, DueAt: &later}, false, store.ErrNotDue},
	} {
		dup, err := Settle("resolve", "intent", "h", tc.row, op, t0)
		if dup != tc.dup {
			t.Errorf("%s: dup %v, want %v", tc.name, dup, tc.dup)
		}
		is(t, tc.name, err, tc.want)
	}
	if r := Claimant(vocab.Claim{Worker: "a", Attempt: 1}).OperatorReason(); r != nil {
		t.Errorf("a claimant's settle records an operator's reason %q", *r)
	}
	if r := Operator("").OperatorReason(); r == nil || *r != "" {
		t.Errorf("an operator's empty reason recorded as %v", r)
	}
	if r := op.OperatorReason(); r == nil || *r != "manual step finished" {
		t.Errorf("an operator's reason recorded as %v", r)
	}
}

// A lease holder's settle (FireHeld) is a claimant's without the claim
// check, for its own world's items only: another world's item is answered
// as an unknown one (ErrNotFound), before anything else is said of it; a
// done item of its world answers dup, and a timer must still be due.
func TestSettleByALeaseHolderSkipsTheClaimForItsOwnWorld(t *testing.T) {
	by := LeaseHolder("w")
	later := t0.Add(time.Second)
	for _, tc := range []struct {
		name string
		row  SettleRow
		dup  bool
		want error
	}{
		{"unknown", SettleRow{}, false, store.ErrNotFound},
		{"another world's, due", SettleRow{Found: true, World: "v", DueAt: &t0}, false, store.ErrNotFound},
		{"another world's, delivered", SettleRow{Found: true, World: "v", Done: true, DueAt: &t0}, false, store.ErrNotFound},
		{"delivered", SettleRow{Found: true, World: "w", Done: true, DueAt: &t0}, true, nil},
		{"scheduled, due", SettleRow{Found: true, World: "w", DueAt: &t0}, false, nil},
		{"claimed by a timer worker, due", SettleRow{Found: true, World: "w", DueAt: &t0, Claim: ClaimRow{Attempt: 1, ClaimedBy: "tw"}}, false, nil},
		{"not due", SettleRow{Found: true, World: "w", DueAt: &later}, false, store.ErrNotDue},
	} {
		dup, err := Settle("fire_held", "timer", "h", tc.row, by, t0)
		if dup != tc.dup {
			t.Errorf("%s: dup %v, want %v", tc.name, dup, tc.dup)
		}
		is(t, tc.name, err, tc.want)
	}
	if r := by.OperatorReason(); r != nil {
		t.Errorf("a lease holder's settle records an operator's reason %q", *r)
	}
}
