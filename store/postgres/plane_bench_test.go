package postgres

import (
	"testing"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/storebench"
)

// The persistence plane's shared benchmarks (store/storebench), each in a
// fresh schema of the database ORRERY_TEST_POSTGRES_DSN names:
//
//	go test -run '^$' -bench 'Plane' -benchtime 2000x ./store/postgres/

func planeStore(b *testing.B) store.Store { return benchStore(b) }

func BenchmarkPlane(b *testing.B) { storebench.Plane(b, planeStore) }
