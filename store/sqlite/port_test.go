package sqlite

import (
	"testing"
	"time"

	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/store/storetest"
)

func sqliteHarness(t *testing.T) storetest.Harness {
	s, clock, _ := openTemp(t)
	return storetest.Harness{Store: s, Advance: clock.Advance}
}

func memHarness(t *testing.T) storetest.Harness {
	clock := memstore.NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.WithClock(clock.Now))
	t.Cleanup(func() { s.Close() })
	return storetest.Harness{Store: s, Advance: clock.Advance}
}

// TestPort runs the port suite for every pair this package can build.
func TestPort(t *testing.T) {
	t.Run("memstore-to-sqlite", func(t *testing.T) { storetest.RunPort(t, memHarness, sqliteHarness) })
	t.Run("sqlite-to-sqlite", func(t *testing.T) { storetest.RunPort(t, sqliteHarness, sqliteHarness) })
	t.Run("sqlite-to-memstore", func(t *testing.T) { storetest.RunPort(t, sqliteHarness, memHarness) })
}
