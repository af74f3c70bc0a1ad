package postgres

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Benchmarks of the operations whose cost the runtime feels. Each reports
// its own metrics (latency percentiles in ms, or operations per second);
// run them with
//
//	ORRERY_TEST_POSTGRES_DSN=... go test -run '^$' -bench . -benchtime 2000x ./store/postgres/
//
// Goals (bench/README.md, "The persistence plane"): a single durable append p99 ≤
// 5 ms; ≥ 20,000 appends/s into one world with group commit; lease renew
// p95 ≤ 5 ms; effect claim+complete ≥ 10,000/s batched; fork time
// independent of the source's history.

func benchStore(b *testing.B, opts ...Option) *Store {
	b.Helper()
	return openStore(b, "", nil, append([]Option{WithMaxConns(16)}, opts...)...)
}

// percentiles reports p50, p95 and p99 of ds in milliseconds.
func percentiles(b *testing.B, ds []time.Duration, which ...int) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	for _, p := range which {
		i := min(len(ds)-1, len(ds)*p/100)
		b.ReportMetric(float64(ds[i])/float64(time.Millisecond), fmt.Sprintf("p%d-ms", p))
	}
}

// parallel runs b.N calls of op spread over workers goroutines and reports
// the rate as unit/s.
func parallel(b *testing.B, workers int, unit string, op func(worker, i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(w, i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit+"/s")
}

// One writer, one event per append: each append is its own durable commit.
func BenchmarkAppendSingle(b *testing.B) {
	s := benchStore(b)
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := s.Append(bg, "run", []store.Record{rec(fmt.Sprint(i))}, store.AppendOptions{Kind: store.FreeStream}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, ds, 50, 99)
}

// Many concurrent writers into ONE stream (one world): group commit turns
// them into few transactions.
func BenchmarkGroupCommitOneStream(b *testing.B) {
	for _, writers := range []int{32, 128} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := benchStore(b)
			parallel(b, writers, "appends", func(w, i int) error {
				_, err := s.Append(bg, "world", []store.Record{rec(fmt.Sprint(i))}, store.AppendOptions{Kind: store.FreeStream})
				return err
			})
			st := s.Stats()
			b.ReportMetric(float64(st.AppendRequests)/float64(max(1, st.AppendTransactions)), "appends/tx")
			b.ReportMetric(float64(st.SpeculationMisses), "misses")
		})
	}
}

// 32 writers, each on its own stream, fenced by its world's lease: the
// common shape of one worker hosting many worlds.
func BenchmarkGroupCommit32Streams(b *testing.B) {
	s := benchStore(b)
	const writers = 32
	epochs := make([]uint64, writers)
	for w := range writers {
		epochs[w] = leased(b, s, fmt.Sprint("w", w), "host").Epoch
	}
	parallel(b, writers, "appends", func(w, i int) error {
		world := fmt.Sprint("w", w)
		_, err := s.Append(bg, world, []store.Record{rec(fmt.Sprint(i))}, store.AppendOptions{Fence: &store.Fence{World: world, Epoch: epochs[w]}})
		return err
	})
	st := s.Stats()
	b.ReportMetric(float64(st.AppendRequests)/float64(max(1, st.AppendTransactions)), "appends/tx")
}

// Lease renewal: a durable commit of one row.
func BenchmarkLeaseRenew(b *testing.B) {
	s := benchStore(b)
	l := leased(b, s, "w", "host")
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := s.Renew(bg, "w", "host", l.Epoch, time.Minute); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, ds, 50, 95, 99)
}

// Adapter workers: claim in batches of 64 (SKIP LOCKED, asynchronous
// commit) and complete each effect (receipt into the inbox, dedupe marked:
// durable, group-committed across the adapters).
func BenchmarkClaimComplete(b *testing.B) {
	s := benchStore(b)
	const worlds = 8
	epochs := make([]uint64, worlds)
	for w := range worlds {
		epochs[w] = leased(b, s, fmt.Sprint("w", w), "host").Epoch
	}
	// Publish b.N intents, spread over the worlds.
	for start := 0; start < b.N; start += 1000 {
		byWorld := map[int][]vocab.Intent{}
		for i := start; i < min(b.N, start+1000); i++ {
			byWorld[i%worlds] = append(byWorld[i%worlds], vocab.Intent{IntentHash: fmt.Sprintf("i-%08d", i), Kind: "http.request", Params: []byte("{}")})
		}
		for w, ins := range byWorld {
			if _, err := s.Publish(bg, fmt.Sprint("w", w), epochs[w], ins); err != nil {
				b.Fatal(err)
			}
		}
	}
	const adapters, batch = 4, 64
	var done atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for a := range adapters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprint("adapter-", a)
			for {
				items, err := s.Claim(bg, worker, []string{"http.request"}, batch, time.Minute)
				if err != nil {
					failed.Store(err)
					return
				}
				if len(items) == 0 {
					return
				}
				// Complete the batch concurrently, as an adapter pool does.
				var cw sync.WaitGroup
				for _, it := range items {
					cw.Add(1)
					go func() {
						defer cw.Done()
						if _, _, err := s.Complete(bg, it.IntentHash, it.ClaimOf(), vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte("ok")}); err != nil {
							failed.Store(err)
						}
					}()
				}
				cw.Wait()
				done.Add(int64(len(items)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	if done.Load() != int64(b.N) {
		b.Fatalf("%d of %d effects completed", done.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "effects/s")
	st := s.Stats()
	b.ReportMetric(float64(st.DeliveryRequests)/float64(max(1, st.DeliveryTransactions)), "completes/tx")
}

// Fabric sends from many senders to a few destinations (protocol F:
// destination dedupe plus inbox enqueue, group-committed).
func BenchmarkFabricSend(b *testing.B) {
	s := benchStore(b)
	const dests, senders = 8, 64
	for d := range dests {
		if _, err := s.CreateWorld(bg, "u", fmt.Sprint("dest", d), nil); err != nil {
			b.Fatal(err)
		}
	}
	parallel(b, senders, "sends", func(w, i int) error {
		_, err := s.Send(bg, fmt.Sprint("dest", i%dests), fmt.Sprint("m", i), store.InboxItem{Payload: []byte("hello")})
		return err
	})
	st := s.Stats()
	b.ReportMetric(float64(st.DeliveryRequests)/float64(max(1, st.DeliveryTransactions)), "sends/tx")
}

// Forking copies one snapshot row: its time must not grow with the
// source's history.
func BenchmarkForkTime(b *testing.B) {
	for _, history := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			s := benchStore(b)
			e := leased(b, s, "src", "host").Epoch
			const chunk = 2000
			for start := 0; start < history; start += chunk {
				evs := make([]store.Record, 0, chunk)
				for i := start; i < min(history, start+chunk); i++ {
					evs = append(evs, rec(fmt.Sprint(i)))
				}
				if _, err := s.Append(bg, "src", evs, store.AppendOptions{Fence: &store.Fence{World: "src", Epoch: e}}); err != nil {
					b.Fatal(err)
				}
			}
			state := make([]byte, 4096)
			if err := s.PutSnapshot(bg, "src", e, store.Snapshot{Height: uint64(history), State: state, StateHash: "h"}); err != nil {
				b.Fatal(err)
			}
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := s.ForkWorld(bg, "src", uint64(history), fmt.Sprint("fork", i)); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
			}
			b.StopTimer()
			percentiles(b, ds, 50, 99)
		})
	}
}

// A workflow run's start, one at a time: Spawn of a world with its start
// item and its first lease, without and with its first journal records
// (RunStarted and the first StepStarted), and, for comparison, the same
// start as two writes (Spawn, then a fenced Append of the records).
func BenchmarkSpawn(b *testing.B) {
	events := []store.Record{rec("run-started"), rec("step-started")}
	for _, c := range []struct {
		name     string
		events   []store.Record
		separate bool
	}{
		{"events=0", nil, false},
		{"events=2", events, false},
		{"events=2,append-after", events, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := benchStore(b)
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				world := fmt.Sprint("run-", i)
				spec := store.SpawnSpec{Universe: "u", World: world, Holder: "host", TTL: time.Minute,
					Items: []store.InboxItem{{Kind: "start", Payload: []byte("input"), DedupeKey: "start"}}}
				if !c.separate {
					spec.Events = c.events
				}
				t0 := time.Now()
				sp, err := s.Spawn(bg, spec)
				if err != nil {
					b.Fatal(err)
				}
				if c.separate {
					_, err = s.Append(bg, world, c.events, store.AppendOptions{
						Fence: &store.Fence{World: world, Epoch: sp.Lease.Epoch}, ExpectedHead: store.Head(0)})
					if err != nil {
						b.Fatal(err)
					}
				} else if len(sp.Appended) != len(c.events) {
					b.Fatalf("Spawn answered %d appends for %d events", len(sp.Appended), len(c.events))
				}
				ds = append(ds, time.Since(t0))
			}
			b.StopTimer()
			percentiles(b, ds, 50, 99)
		})
	}
}

// World cycles, one at a time: each is a Commit, on the critical path of
// every workflow step and every cycle of the runtime plane.
//
//   - entries+cursor: sequential cycles of one world, each draining one
//     inbox item into two journal entries;
//   - cycle: the same with an intent, a timer and the cancellation of the
//     previous cycle's timer;
//   - status=archived: a run's last cycle (its start item drained, one
//     entry, the world archived), each on a freshly spawned world.
func BenchmarkCommit(b *testing.B) {
	at := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name         string
		cycle, final bool
	}{
		{"entries+cursor", false, false},
		{"cycle", true, false},
		{"status=archived", false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := benchStore(b)
			var epoch, trips uint64
			if !c.final {
				epoch = leased(b, s, "w", "host").Epoch
				for i := range b.N {
					if _, _, err := s.Enqueue(bg, "w", store.InboxItem{Kind: "event", DedupeKey: fmt.Sprint("in-", i)}); err != nil {
						b.Fatal(err)
					}
				}
			}
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				world, batch := "w", store.CommitBatch{ExpectedCursor: uint64(i), NewCursor: uint64(i + 1), ExpectedHead: uint64(2 * i),
					Entries: []store.Record{rec(fmt.Sprintf("%d-a", i)), rec(fmt.Sprintf("%d-b", i))}}
				if c.cycle {
					batch.Intents = []vocab.Intent{{IntentHash: fmt.Sprint("i", i), Kind: "http.request", Params: []byte("{}")}}
					batch.Timers = []vocab.TimerSet{{IntentHash: fmt.Sprint("t", i), DeliverAt: at}}
					if i > 0 {
						batch.CancelTimers = []string{fmt.Sprint("t", i-1)}
					}
				}
				if c.final {
					b.StopTimer()
					world = fmt.Sprint("run-", i)
					sp, err := s.Spawn(bg, store.SpawnSpec{Universe: "u", World: world, Holder: "host", TTL: time.Minute,
						Items: []store.InboxItem{{Kind: "start", DedupeKey: "start"}}})
					if err != nil {
						b.Fatal(err)
					}
					epoch = sp.Lease.Epoch
					batch = store.CommitBatch{ExpectedCursor: 0, NewCursor: 1, ExpectedHead: 0, Entries: []store.Record{rec("run-completed")},
						Status: &store.StatusChange{Status: store.WorldArchived, Reason: "run completed"}}
					b.StartTimer()
				}
				trips0, t0 := s.Stats().RoundTrips, time.Now()
				res, err := s.Commit(bg, world, epoch, batch)
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				trips += s.Stats().RoundTrips - trips0
				if res.Head != batch.ExpectedHead+uint64(len(batch.Entries)) {
					b.Fatalf("cycle %d: head %d", i, res.Head)
				}
			}
			b.StopTimer()
			percentiles(b, ds, 50, 99)
			b.ReportMetric(float64(trips)/float64(b.N), "trips/op")
			b.ReportMetric(float64(s.Stats().SpeculationMisses), "misses")
		})
	}
}
