package postgres

import (
	"time"

	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// A world's last cycle on the speculative path (one round trip) withdraws
// its pending effects in that same transaction, the ones it publishes
// itself included, as the checked path does (the conformance suite's
// CommitArchiveWithdrawsInTheSameTransaction).
func TestSpeculativeArchivingCommitWithdrawsPendingEffects(t *testing.T) {
	t.Parallel()
	a, _, _ := twoMachines(t)
	e := spawnCached(t, a, "w", 1)
	if _, err := a.Publish(bg, "w", e, []vocab.Intent{{IntentHash: "early", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	var res store.CommitResult
	rt, misses := trips(a, func() {
		var err error
		res, err = a.Commit(bg, "w", e, store.CommitBatch{NewCursor: 1, Entries: []store.Record{rec("end")},
			Intents: []vocab.Intent{{IntentHash: "late", Kind: "k"}},
			Status:  &store.StatusChange{Status: store.WorldArchived, Reason: "done"}})
		if err != nil {
			t.Fatal(err)
		}
	})
	if rt != 1 || misses != 0 {
		t.Fatalf("the archiving Commit took %d round trips, %d misses; want the speculative path", rt, misses)
	}
	if res.Published != 1 || res.Withdrawn != 2 {
		t.Fatalf("CommitResult = %+v, want 1 published, 2 withdrawn", res)
	}
	for _, h := range []string{"early", "late"} {
		if st, err := a.EffectStatus(bg, h); err != nil || st.State != vocab.EffectWithdrawn {
			t.Fatalf("EffectStatus(%s) = %+v, %v; want withdrawn", h, st, err)
		}
	}
	if items, err := a.Claim(bg, "adapter", []string{"k"}, 10, 30*time.Second); err != nil || len(items) != 0 {
		t.Fatalf("Claim after the archiving commit = %+v, %v", items, err)
	}
}
