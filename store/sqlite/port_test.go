package sqlite

import (
	"runtime"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"

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

// TestExportOfTenThousandWorldsIsStreamed imports a generated store of
// 10,000 worlds with their journals (1 KiB payloads: 40 MiB of them) and
// exports it, sampling the live heap after a collection every 20,000
// records: an export that gathered the store before emitting, or kept
// what it emitted, would grow the heap by tens of MiB.
func TestExportOfTenThousandWorldsIsStreamed(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 10,000 worlds")
	}
	s, _, _ := openTemp(t, WithSynchronous(SyncOff))
	const worlds, events, payload = 10_000, 4, 1024
	buf := make([]store.PortRecord, 0, 2000)
	flush := func() {
		if err := s.Import(bg, buf); err != nil {
			t.Fatalf("Import: %v", err)
		}
		buf = buf[:0]
	}
	n, err := storetest.PortGen(worlds, events, payload, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), func(r store.PortRecord) error {
		if buf = append(buf, r); len(buf) == cap(buf) {
			flush()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	flush()
	if err := s.FinishImport(bg); err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	var peak uint64
	got, payloadBytes := 0, 0
	err = s.Export(bg, func(r store.PortRecord) error {
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
// of 256 bytes each) from one SQLite file into a fresh one: export and
// import together, in records per second.
func BenchmarkPortCopy(b *testing.B) {
	src, _, _ := openTemp(b, WithSynchronous(SyncOff))
	n, err := storetest.PortGen(1000, 10, 256, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), func(r store.PortRecord) error {
		return src.Import(bg, []store.PortRecord{r})
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dst, _, _ := openTemp(b)
		b.StartTimer()
		if _, err := store.PortCopy(bg, src, dst, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
