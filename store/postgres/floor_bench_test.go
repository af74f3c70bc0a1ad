package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

// BenchmarkFloor sets the store's writes beside the server's floor, paced
// as the e2e scenario paces runs (one every 5ms, the machine idle between):
//
//   - insert: one single-row INSERT in its own transaction, what each of
//     DBOS's three writes per one-step workflow is;
//   - spawn: a run's first write (world, lease, start item, two events);
//   - end: a run's last write (the start item drained, two events, the
//     world archived).
//
// A run costs spawn + end; the gap to 2 × insert is what the store's
// statements cost on the server beyond the commit's flush.
func BenchmarkFloor(b *testing.B) {
	const gap = 5 * time.Millisecond
	s := benchStore(b)
	if _, err := s.b.pool.Exec(bg, `CREATE TABLE IF NOT EXISTS floor_probe (id text PRIMARY KEY, v bytea, at timestamptz DEFAULT now())`); err != nil {
		b.Fatal(err)
	}
	events := []store.Record{rec("run-started"), rec("step-started")}
	end := []store.Record{rec("step-completed"), rec("run-completed")}
	pace := func(b *testing.B, op func(i int) error) {
		ds := make([]time.Duration, 0, b.N)
		next := time.Now()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			next = next.Add(gap)
			time.Sleep(time.Until(next))
			t0 := time.Now()
			if err := op(i); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		b.StopTimer()
		percentiles(b, ds, 50, 99)
	}
	// Every id is new: b.Run calls each body more than once.
	run, n := time.Now().UnixNano(), 0
	id := func() string { n++; return fmt.Sprint("floor-", run, "-", n) }
	b.Run("insert", func(b *testing.B) {
		pace(b, func(int) error {
			_, err := s.b.pool.Exec(bg, `INSERT INTO floor_probe (id, v) VALUES ($1, $2)`, id(), []byte("input"))
			return err
		})
	})
	var spawned []store.Lease // spawned and not yet ended
	b.Run("spawn", func(b *testing.B) {
		pace(b, func(int) error {
			sp, err := s.Spawn(bg, store.SpawnSpec{Universe: "u", World: id(), Holder: "host", TTL: time.Minute,
				Items: []store.InboxItem{{Kind: "start", Payload: []byte("input"), DedupeKey: "start"}}, Events: events})
			spawned = append(spawned, sp.Lease)
			return err
		})
	})
	b.Run("end", func(b *testing.B) {
		if b.N > len(spawned) {
			b.Skipf("%d spawned worlds for %d iterations: run with -benchtime Nx", len(spawned), b.N)
		}
		before := s.Stats()
		defer func() {
			after := s.Stats()
			b.ReportMetric(float64(after.SpeculationMisses-before.SpeculationMisses)/float64(b.N), "misses/op")
			b.ReportMetric(float64(after.RoundTrips-before.RoundTrips)/float64(b.N), "trips/op")
		}()
		pace(b, func(int) error {
			l := spawned[0]
			spawned = spawned[1:]
			_, err := s.Commit(bg, l.World, l.Epoch, store.CommitBatch{
				ExpectedCursor: 0, NewCursor: 1, ExpectedHead: 2, Entries: end,
				Status: &store.StatusChange{Status: store.WorldArchived, Reason: "completed"}})
			return err
		})
	})
}
