package sqlite

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Benchmarks of the durable store (synchronous=FULL, a real file in the
// test's temporary directory). Run them with, for example:
//
//	go test -run '^$' -bench . -benchtime 2000x ./store/sqlite/
//
// Custom metrics: p50-ms/p95-ms/p99-ms latencies, appends/s (and the like)
// throughputs, and reqs/tx, the mean group size of the group commit.

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return float64(sorted[i]) / float64(time.Millisecond)
}

func reportLatencies(b *testing.B, lat []time.Duration, ps ...float64) {
	slices.Sort(lat)
	for _, p := range ps {
		b.ReportMetric(percentile(lat, p), fmt.Sprintf("p%d-ms", int(p*100)))
	}
}

func reportGroups(b *testing.B, s *Store, before Stats) {
	after := s.Stats()
	if tx := after.Transactions - before.Transactions; tx > 0 {
		b.ReportMetric(float64(after.Requests-before.Requests)/float64(tx), "reqs/tx")
	}
}

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(bg, b.TempDir()+"/bench.db")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// One durable append at a time: the latency of a single commit (one fsync).
func BenchmarkAppendSequential(b *testing.B) {
	s := benchStore(b)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := s.Append(bg, "run-1", []store.Record{rec(fmt.Sprint(i))}, free); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	reportLatencies(b, lat, 0.50, 0.99)
}

// 32 concurrent writers, one event per append, on one stream and on 32
// streams: the group commit's throughput.
func BenchmarkAppendConcurrent32(b *testing.B) {
	for _, streams := range []int{1, 32} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			s := benchStore(b)
			const writers = 32
			var next atomic.Int64
			var wg sync.WaitGroup
			lat := make([][]time.Duration, writers)
			before := s.Stats()
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					stream := fmt.Sprintf("run-%d", w%streams)
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						t0 := time.Now()
						if _, err := s.Append(bg, stream, []store.Record{rec(fmt.Sprint(i))}, free); err != nil {
							b.Error(err)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
			reportGroups(b, s, before)
			reportLatencies(b, slices.Concat(lat...), 0.50, 0.99)
		})
	}
}

// Sequential lease renewals of one world (each a durable commit).
func BenchmarkLeaseRenew(b *testing.B) {
	s := benchStore(b)
	if _, err := s.CreateWorld(bg, "u", "w1", nil); err != nil {
		b.Fatal(err)
	}
	l, err := s.Acquire(bg, "w1", "worker", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := s.Renew(bg, "w1", "worker", l.Epoch, time.Hour); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportLatencies(b, lat, 0.50, 0.95, 0.99)
}

// Adapter workers claim effects by kind, 64 at a time, and complete each
// claimed effect concurrently (so the completions share group commits);
// every completion also enqueues the receipt into the world's inbox. The
// queue holds four kinds interleaved, and each adapter serves one: a claim
// walks its kind's range of the pending index, never the others'.
func BenchmarkEffectClaimComplete(b *testing.B) {
	s := benchStore(b)
	if _, err := s.CreateWorld(bg, "u", "w1", nil); err != nil {
		b.Fatal(err)
	}
	l, err := s.Acquire(bg, "w1", "worker", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	const adapters, batch = 4, 64
	kind := func(i int) string { return fmt.Sprintf("kind-%d", i%adapters) }
	for i := 0; i < b.N; i += 512 {
		var intents []vocab.Intent
		for j := i; j < min(i+512, b.N); j++ {
			intents = append(intents, vocab.Intent{IntentHash: fmt.Sprintf("intent-%d", j), Kind: kind(j), Params: []byte{1, 2, 3}})
		}
		if _, err := s.Publish(bg, "w1", l.Epoch, intents); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	before := s.Stats()
	b.ResetTimer()
	start := time.Now()
	for a := 0; a < adapters; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				items, err := s.Claim(bg, fmt.Sprintf("adapter-%d", a), []string{kind(a)}, batch, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				if len(items) == 0 {
					return
				}
				var cwg sync.WaitGroup
				for _, it := range items {
					cwg.Add(1)
					go func() {
						defer cwg.Done()
						if _, _, err := s.Complete(bg, it.IntentHash, it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte{0xa0}}); err != nil {
							b.Error(err)
						}
						done.Add(1)
					}()
				}
				cwg.Wait()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if done.Load() != int64(b.N) {
		b.Fatalf("completed %d of %d", done.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "effects/s")
	reportGroups(b, s, before)
}

// 32 concurrent senders deliver fabric messages (unique ids) to 8
// destination worlds.
func BenchmarkFabricSend(b *testing.B) {
	s := benchStore(b)
	const dests, senders = 8, 32
	for d := 0; d < dests; d++ {
		if _, err := s.CreateWorld(bg, "u", fmt.Sprintf("dest-%d", d), nil); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	before := s.Stats()
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < senders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				r, err := s.Send(bg, fmt.Sprintf("dest-%d", i%dests), fmt.Sprintf("msg-%d", i), store.InboxItem{Payload: []byte("hello")})
				if err != nil || r.Status != store.FabricOK {
					b.Error(r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sends/s")
	reportGroups(b, s, before)
}

// Fork time against the source's history length: constant, since a fork
// copies one snapshot row and never the journal.
func BenchmarkFork(b *testing.B) {
	for _, history := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			s := benchStore(b)
			if _, err := s.CreateWorld(bg, "u", "src", nil); err != nil {
				b.Fatal(err)
			}
			l, err := s.Acquire(bg, "src", "worker", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			fence := &store.Fence{World: "src", Epoch: l.Epoch}
			for i := 0; i < history; i += 1000 {
				evs := make([]store.Record, 0, 1000)
				for j := i; j < i+1000; j++ {
					evs = append(evs, rec(fmt.Sprint(j)))
				}
				if _, err := s.Append(bg, "src", evs, store.AppendOptions{Fence: fence}); err != nil {
					b.Fatal(err)
				}
			}
			state := make([]byte, 4096)
			if err := s.PutSnapshot(bg, "src", l.Epoch, store.Snapshot{Height: uint64(history), State: state, StateHash: "h"}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w, err := s.ForkWorld(bg, "src", uint64(history), fmt.Sprintf("fork-%d", i))
				if err != nil || w.ForkedAtHeight != uint64(history) {
					b.Fatal(w, err)
				}
			}
			b.StopTimer()
			if h, _ := s.Head(bg, "fork-0"); h != uint64(history) {
				b.Fatalf("fork head %d", h)
			}
		})
	}
}

// The disk's own floor, for ratios: append 128 bytes to a plain file and
// fsync it, one at a time.
func BenchmarkFsyncBaseline(b *testing.B) {
	f, err := os.Create(b.TempDir() + "/raw")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 128)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "fsyncs/s")
	reportLatencies(b, lat, 0.50, 0.99)
}
