package contract

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

func u64(v uint64) *uint64 { return &v }

func TestAppendHeadIsSkippedOnlyWhenNothingIsNew(t *testing.T) {
	for _, c := range []struct {
		name     string
		expected *uint64
		head     uint64
		fresh    bool
		want     error
	}{
		{"no compare asked", nil, 5, true, nil},
		{"head as expected", u64(5), 5, true, nil},
		{"head moved", u64(4), 5, true, store.ErrHeadMismatch},
		{"head moved, every record a duplicate", u64(4), 5, false, nil},
	} {
		is(t, c.name, AppendHead("append", "s", c.expected, c.head, c.fresh), c.want)
	}
}

func TestCycleHeadHoldsEvenForDuplicates(t *testing.T) {
	is(t, "as expected", CycleHead("commit", "w", 5, 5), nil)
	is(t, "moved", CycleHead("commit", "w", 4, 5), store.ErrHeadMismatch)
}

func TestCycleCursorComparesAndBoundsTheNewCursor(t *testing.T) {
	for _, c := range []struct {
		name                         string
		cursor, expected, next, last uint64
		want                         error
	}{
		{"drain to the last seq", 2, 2, 7, 7, nil},
		{"no move", 2, 2, 2, 7, nil},
		{"cursor moved", 3, 2, 7, 7, store.ErrCursorMismatch},
		{"past the last seq", 2, 2, 8, 7, store.ErrInvalid},
		{"cursor moved and past: the compare first", 3, 2, 8, 7, store.ErrCursorMismatch},
	} {
		is(t, c.name, CycleCursor("commit", "w", c.cursor, c.expected, c.next, c.last), c.want)
	}
}

func TestConflictComparesTypeAndPayloadHashWhenKept(t *testing.T) {
	a, b := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	for _, c := range []struct {
		name       string
		storedType string
		storedSum  []byte
		eventType  string
		sum        []byte
		want       bool
	}{
		{"same record", "T", a[:], "T", a[:], false},
		{"other payload", "T", a[:], "T", b[:], true},
		{"other type", "T", a[:], "U", a[:], true},
		{"no fingerprint kept", "", nil, "U", b[:], false},
	} {
		if got := Conflict(c.storedType, c.storedSum, c.eventType, c.sum); got != c.want {
			t.Errorf("%s: conflict %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCancelMissingIsSkippedInACycleOnly(t *testing.T) {
	is(t, "in a cycle", CancelMissing("commit", "w", "h", true), nil)
	is(t, "alone", CancelMissing("cancel_timer", "w", "h", false), store.ErrNotFound)
}

func TestWorldIDMustNameNoWorldAndNoHistory(t *testing.T) {
	is(t, "free", WorldID("create_world", "w", false, 0), nil)
	is(t, "a world's", WorldID("create_world", "w", true, 0), store.ErrWorldExists)
	is(t, "a free stream with events", WorldID("create_world", "w", false, 3), store.ErrWorldExists)
}

func TestCompactToKeepsRetainBelowTheBaseline(t *testing.T) {
	for _, c := range []struct {
		name              string
		baseline, retain  uint64
		hasBaseline, want bool
		upto              uint64
	}{
		{"no baseline", 0, 0, false, false, 0},
		{"retain reaches the baseline", 10, 10, true, false, 0},
		{"retain past the baseline", 10, 11, true, false, 0},
		{"some to remove", 10, 3, true, true, 7},
		{"retain nothing", 10, 0, true, true, 10},
	} {
		upto, ok := CompactTo(c.baseline, c.hasBaseline, c.retain)
		if ok != c.want || upto != c.upto {
			t.Errorf("%s: (%d, %v), want (%d, %v)", c.name, upto, ok, c.upto, c.want)
		}
	}
}

func TestWatermarkComparesTheCurrentValue(t *testing.T) {
	is(t, "unset, expected 0", Watermark("cas_watermark", "p", "s", 0, 0), nil)
	is(t, "as expected", Watermark("cas_watermark", "p", "s", 4, 4), nil)
	is(t, "moved", Watermark("cas_watermark", "p", "s", 5, 4), store.ErrWatermarkConflict)
}

func TestRetryEffectRefusesAnArchivedWorldsEffect(t *testing.T) {
	const op = "retry_effect"
	is(t, "failed, active world", RetryEffect(op, "h", "w", vocab.EffectDone, vocab.ReceiptError, store.WorldActive), nil)
	is(t, "failed, paused world", RetryEffect(op, "h", "w", vocab.EffectDone, vocab.ReceiptTimeout, store.WorldPaused), nil)
	is(t, "failed, archived world", RetryEffect(op, "h", "w", vocab.EffectDone, vocab.ReceiptError, store.WorldArchived), store.ErrWorldArchived)
	is(t, "not retryable wins over archived", RetryEffect(op, "h", "w", vocab.EffectPending, "", store.WorldArchived), store.ErrNotRetryable)
}

func TestWithdrawsPendingOnlyWhenArchiving(t *testing.T) {
	for _, to := range []store.WorldStatus{store.WorldActive, store.WorldPaused, store.WorldArchived} {
		if got, want := WithdrawsPending(to), to == store.WorldArchived; got != want {
			t.Errorf("to %s: withdraws %v, want %v", to, got, want)
		}
	}
}

func TestSendAnswersADeliveredMessageWhateverItsDestination(t *testing.T) {
	for _, c := range []struct {
		name             string
		delivered, found bool
		status           store.WorldStatus
		already          bool
		want             error
	}{
		{"new, active", false, true, store.WorldActive, false, nil},
		{"new, paused", false, true, store.WorldPaused, false, nil},
		{"new, archived", false, true, store.WorldArchived, false, store.ErrWorldArchived},
		{"new, no world", false, false, "", false, store.ErrWorldNotFound},
		{"delivered, archived since", true, true, store.WorldArchived, true, nil},
	} {
		already, err := Send("send", "w", c.delivered, c.found, c.status)
		is(t, c.name, err, c.want)
		if already != c.already {
			t.Errorf("%s: already %v, want %v", c.name, already, c.already)
		}
	}
}

func TestSweepCutoffAgreesWithSweepable(t *testing.T) {
	const retention = time.Hour
	cutoff := SweepCutoff(t0, retention)
	for _, completed := range []time.Time{cutoff.Add(-time.Nanosecond), cutoff, cutoff.Add(time.Nanosecond)} {
		byCutoff := !completed.After(cutoff)
		if bySweepable := Sweepable(completed, 1, 1, retention, t0); byCutoff != bySweepable {
			t.Errorf("completed %s: cutoff says %v, Sweepable %v", completed, byCutoff, bySweepable)
		}
	}
}

func TestIsDueAgreesWithDue(t *testing.T) {
	for _, at := range []time.Time{t0.Add(-time.Nanosecond), t0, t0.Add(time.Nanosecond)} {
		if want := Due("fire", "h", at, t0) == nil; IsDue(at, t0) != want {
			t.Errorf("deliverAt %s: IsDue %v, Due admits %v", at, !want, want)
		}
	}
	if !IsDue(t0, t0) {
		t.Errorf("a timer due exactly now is not due")
	}
	if IsDue(t0.Add(time.Nanosecond), t0) {
		t.Errorf("a timer due later is due")
	}
}

func TestServesEveryWorldButAnArchivedOne(t *testing.T) {
	for _, c := range []struct {
		status store.WorldStatus
		want   bool
	}{
		{store.WorldActive, true},
		{store.WorldPaused, true},
		{store.WorldArchived, false},
	} {
		if got := Serves(c.status); got != c.want {
			t.Errorf("%s: Serves %v, want %v", c.status, got, c.want)
		}
		if released := ReleaseTo(c.status) == vocab.EffectPending; released != c.want {
			t.Errorf("%s: Serves %v disagrees with ReleaseTo", c.status, c.want)
		}
	}
}

func TestRebaseKeepsTheHighestSnapshot(t *testing.T) {
	for _, c := range []struct {
		name             string
		baseline, height uint64
		has, want        bool
	}{
		{"no baseline yet", 0, 0, false, true},
		{"no baseline yet, any height", 0, 7, false, true},
		{"higher", 5, 6, true, true},
		{"same height again", 5, 5, true, false},
		{"lower", 5, 4, true, false},
	} {
		if got := Rebase(c.baseline, c.has, c.height); got != c.want {
			t.Errorf("%s: Rebase %v, want %v", c.name, got, c.want)
		}
	}
}

// TestReassignWritesOnlyOverWhatWasRead: CompareAndAssign's decision.
func TestReassignWritesOnlyOverWhatWasRead(t *testing.T) {
	a := &store.Assignment{DesiredWorker: "A", Reason: "rendezvous"}
	pin := &store.Assignment{DesiredWorker: "B", Priority: 1, Reason: "pin"}
	for _, c := range []struct {
		name            string
		cur, prev, next *store.Assignment
		write           bool
		err             error
	}{
		{"none as read", nil, nil, a, true, nil},
		{"already next (a retry)", a, nil, a, false, nil},
		{"a pin landed", pin, nil, a, false, store.ErrAssignmentChanged},
		{"a move as read", a, a, pin, true, nil},
		{"removed meanwhile", nil, a, pin, false, store.ErrAssignmentChanged},
		{"a removal as read", pin, pin, nil, true, nil},
		{"none over none", nil, nil, nil, false, nil},
	} {
		write, err := Reassign("op", "w", c.cur, c.prev, c.next)
		if write != c.write || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s: write=%v err=%v, want write=%v err=%v", c.name, write, err, c.write, c.err)
		}
	}
}
