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

func BenchmarkPlane(b *testing.B) { storebench.Plane(b, planeStore) }
