package sqlite

import (
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/storebench"
)

// The persistence plane's shared benchmarks (store/storebench), on a real
// file with synchronous=FULL:
//
//	go test -run '^$' -bench 'Plane' -benchtime 2000x ./store/sqlite/

func planeStore(b *testing.B) store.Store { return benchStore(b) }

func BenchmarkPlaneCommitCycle(b *testing.B) {
	for _, c := range []struct {
		name               string
		worlds, committers int
	}{{"worlds=1", 1, 1}, {"worlds=100/committers=32", 100, 32}} {
		b.Run(c.name+"/commit", func(b *testing.B) { storebench.CommitCycle(b, planeStore, c.worlds, c.committers, true) })
		b.Run(c.name+"/separate", func(b *testing.B) { storebench.CommitCycle(b, planeStore, c.worlds, c.committers, false) })
	}
}

func BenchmarkPlaneRenewLeases10k(b *testing.B) { storebench.RenewLeases(b, planeStore, 10_000) }

func BenchmarkPlaneClaimComplete(b *testing.B) {
	b.Run("complete_many", func(b *testing.B) { storebench.ClaimComplete(b, planeStore, 16) })
	b.Run("one_by_one", func(b *testing.B) { storebench.ClaimCompleteOneByOne(b, planeStore, 16) })
}
