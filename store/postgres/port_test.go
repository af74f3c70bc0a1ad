package postgres

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"

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

func importGen(tb testing.TB, s store.Importer, worlds, events, payload int) int {
	tb.Helper()
	buf := make([]store.PortRecord, 0, store.DefaultPortBatch)
	flush := func() {
		if err := s.Import(bg, buf); err != nil {
			tb.Fatalf("Import: %v", err)
		}
		buf = buf[:0]
	}
	n, err := storetest.PortGen(worlds, events, payload, time.Now(), func(r store.PortRecord) error {
		if buf = append(buf, r); len(buf) == cap(buf) {
			flush()
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	flush()
	if err := s.FinishImport(bg); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestExportOfTenThousandWorldsIsStreamed is the SQLite test of the same
// name on PostgreSQL: the rows of the export's one transaction reach emit
// as the server sends them, and the heap, sampled after a collection
// every 20,000 records, does not grow with the store.
func TestExportOfTenThousandWorldsIsStreamed(t *testing.T) {
	testDSN(t)
	if testing.Short() {
		t.Skip("imports 10,000 worlds")
	}
	s := openStore(t, "", nil)
	n := importGen(t, s, 10_000, 3, 1024)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	var peak uint64
	got, payloadBytes := 0, 0
	err := s.Export(bg, func(r store.PortRecord) error {
		got++
		if r.Kind == store.PortKindEvent {
			payloadBytes += len(r.Event.Payload)
		}
		if got%20_000 == 0 {
			peak = max(peak, heap())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if got != n {
		t.Fatalf("exported %d records, imported %d", got, n)
	}
	const bound = 16 << 20
	if peak > base+bound {
		t.Errorf("the heap grew by %d MiB during the export of %d MiB of payloads, want under %d MiB",
			(peak-base)>>20, payloadBytes>>20, bound>>20)
	}
	t.Logf("%d records, %d MiB of payloads, heap growth %d KiB", got, payloadBytes>>20, int64(peak-base)>>10)
}

// BenchmarkPortCopy copies a generated store of 1,000 worlds (10 records
// of 256 bytes each) from SQLite into a fresh PostgreSQL schema, and from
// that schema into another: export and import together, in records per
// second.
func BenchmarkPortCopy(b *testing.B) {
	testDSN(b)
	sq, err := sqlite.Open(bg, filepath.Join(b.TempDir(), "orrery.db"), sqlite.WithSynchronous(sqlite.SyncOff))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sq.Close() })
	n := importGen(b, sq, 1000, 10, 256)
	src := openStore(b, "", nil)
	if _, err := store.PortCopy(bg, sq, src, 0, nil); err != nil {
		b.Fatal(err)
	}
	for _, from := range []struct {
		name string
		s    store.Exporter
	}{{"sqlite-to-postgres", sq}, {"postgres-to-postgres", src}} {
		b.Run(from.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				dst := openStore(b, "", nil)
				b.StartTimer()
				if _, err := store.PortCopy(bg, from.s, dst, 0, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
