package postgres

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/store/sqlite"
	"github.com/orrery-run/orrery/store/storetest"
)

func sqliteHarness(t *testing.T) storetest.Harness {
	clock := memstore.NewManualClock(time.Now().Round(0))
	s, err := sqlite.Open(bg, filepath.Join(t.TempDir(), "orrery.db"), sqlite.WithClock(clock.Now), sqlite.WithSynchronous(sqlite.SyncOff))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return storetest.Harness{Store: s, Advance: clock.Advance}
}

func memHarness(t *testing.T) storetest.Harness {
	clock := memstore.NewManualClock(time.Now().Round(0))
	s := memstore.New(memstore.WithClock(clock.Now))
	t.Cleanup(func() { s.Close() })
	return storetest.Harness{Store: s, Advance: clock.Advance}
}

// TestPort runs the port suite for every pair with PostgreSQL on one side
// (only with ORRERY_TEST_POSTGRES_DSN).
func TestPort(t *testing.T) {
	testDSN(t)
	pg := factory
	t.Run("sqlite-to-postgres", func(t *testing.T) { storetest.RunPort(t, sqliteHarness, pg) })
	t.Run("postgres-to-sqlite", func(t *testing.T) { storetest.RunPort(t, pg, sqliteHarness) })
	t.Run("memstore-to-postgres", func(t *testing.T) { storetest.RunPort(t, memHarness, pg) })
	t.Run("postgres-to-postgres", func(t *testing.T) { storetest.RunPort(t, pg, pg) })
}
