// Package storebench holds the persistence plane's benchmarks that every
// durable backend runs the same way, so that the figures in bench/README.md
// compare backends on identical work:
//
//   - CommitCycle: a world cycle that moves 8 inbox items into 8 journal
//     entries, publishes 2 intents and sets 1 timer, as one Commit or as
//     today's three separate calls (DrainToJournal, Publish, Schedule), on
//     one world with one committer and on 100 worlds under 32 committers;
//   - RenewLeases: one worker renews every lease it holds (10,000) in one
//     call;
//   - ClaimComplete: adapters claim effects by kind and complete each
//     claimed batch with one CompleteMany (ClaimCompleteOneByOne: one
//     Complete per effect).
//
// Each reports its throughput and p50/p99 latencies as custom metrics
// (cycles/s, p50-ms, p99-ms, …). It imports testing and is meant only for
// benchmark files.
package storebench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

var bg = context.Background()

// Open returns a fresh, empty store; the benchmark closes nothing itself
// (register cleanup in Open).
type Open func(b *testing.B) store.Store

const (
	leaseTTL = 10 * time.Minute
	claimTTL = time.Minute
)

func record(stream string, h uint64, i int) store.Record {
	return store.Record{
		EventID:          fmt.Sprintf("%s-e%d-%d", stream, h, i),
		IdempotencyKey:   fmt.Sprintf("%s-k%d-%d", stream, h, i),
		EventType:        "Applied",
		StepID:           "step",
		LogicalAttemptID: 1, EngineAttemptID: 1,
		PlanID: "bench", PlanVersion: 1,
		Payload: []byte{0xa1, 0x61, 0x76, 0x01},
	}
}

// worldState is one benchmark world as its single committer sees it.
type worldState struct {
	id             string
	epoch          uint64
	cursor, head   uint64
	cycles, enqSeq int
}

func setupWorlds(b *testing.B, s store.Store, n int, prefix string) []*worldState {
	b.Helper()
	ws := make([]*worldState, n)
	for i := range ws {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		if _, err := s.CreateWorld(bg, "bench", id, nil); err != nil {
			b.Fatal(err)
		}
		l, err := s.Acquire(bg, id, "bench-worker", leaseTTL)
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = &worldState{id: id, epoch: l.Epoch}
	}
	return ws
}

// fill enqueues items inbox items to every world, 32 producers at a time
// (outside the timed region).
func fill(b *testing.B, s store.Store, ws []*worldState, items []int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(ws))
	sem := make(chan struct{}, 32)
	for i, w := range ws {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for j := 0; j < items[i]; j++ {
				w.enqSeq++
				if _, _, err := s.Enqueue(bg, w.id, store.InboxItem{Kind: "event", Payload: []byte{0x01}, DedupeKey: fmt.Sprintf("in-%d", w.enqSeq)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// cycle runs one world cycle on w: as one Commit, or as the three calls
// that did the same work before Commit existed.
func cycle(s store.Store, w *worldState, oneCommit bool) error {
	const items = 8
	entries := make([]store.Record, items)
	for i := range entries {
		entries[i] = record(w.id, w.head, i)
	}
	w.cycles++
	intents := []vocab.Intent{
		{IntentHash: fmt.Sprintf("%s-i%d-a", w.id, w.cycles), Kind: "http.request", Params: []byte{0xa0}},
		{IntentHash: fmt.Sprintf("%s-i%d-b", w.id, w.cycles), Kind: "email", Params: []byte{0xa0}},
	}
	timer := vocab.TimerSet{
		IntentHash: fmt.Sprintf("%s-t%d", w.id, w.cycles),
		DeliverAt:  time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), Payload: []byte{0xa0},
	}
	next := w.cursor + items
	if oneCommit {
		_, err := s.Commit(bg, w.id, w.epoch, store.CommitBatch{
			ExpectedCursor: w.cursor, NewCursor: next, ExpectedHead: w.head,
			Entries: entries, Intents: intents, Timers: []vocab.TimerSet{timer},
		})
		if err != nil {
			return err
		}
	} else {
		if _, err := s.DrainToJournal(bg, w.id, w.epoch, w.cursor, w.head, next, entries); err != nil {
			return err
		}
		if _, err := s.Publish(bg, w.id, w.epoch, intents); err != nil {
			return err
		}
		if err := s.Schedule(bg, w.id, w.epoch, timer.IntentHash, timer.DeliverAt, timer.Payload); err != nil {
			return err
		}
	}
	w.cursor, w.head = next, w.head+items
	return nil
}

// CommitCycle benchmarks b.N world cycles spread over worlds, run by
// committers goroutines (each world has exactly one committer, as under a
// lease). oneCommit selects Commit or the three separate calls.
func CommitCycle(b *testing.B, open Open, worlds, committers int, oneCommit bool) {
	s := open(b)
	ws := setupWorlds(b, s, worlds, "cyc")
	per := make([]int, worlds)
	for i := 0; i < b.N; i++ {
		per[i%worlds] += 8
	}
	fill(b, s, ws, per)
	// Committer c owns worlds c, c+committers, …; it runs their cycles
	// round-robin until each has had its share of b.N.
	lat := make([][]time.Duration, committers)
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := 0; c < committers && c < worlds; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			left := slices.Clone(per)
			for more := true; more; {
				more = false
				for i := c; i < worlds; i += committers {
					if left[i] == 0 {
						continue
					}
					t0 := time.Now()
					if err := cycle(s, ws[i], oneCommit); err != nil {
						failed.Store(err)
						return
					}
					lat[c] = append(lat[c], time.Since(t0))
					left[i] -= 8
					more = true
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "cycles/s")
	b.ReportMetric(float64(b.N*8)/elapsed.Seconds(), "inputs/s")
	ReportLatencies(b, slices.Concat(lat...), 0.50, 0.99)
}

// RenewLeases benchmarks one worker renewing the n leases it holds, in one
// call per iteration.
func RenewLeases(b *testing.B, open Open, n int) {
	s := open(b)
	refs := make([]store.LeaseRef, 0, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("lease-%05d", i)
		if _, err := s.CreateWorld(bg, "bench", id, nil); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("lease-%05d", i)
		l, err := s.Acquire(bg, id, "w1", leaseTTL)
		if err != nil {
			b.Fatal(err)
		}
		refs = append(refs, store.LeaseRef{World: id, Epoch: l.Epoch})
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		res, err := s.RenewLeases(bg, "w1", refs, leaseTTL)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if len(res) != n || res[0].Err != nil || res[n-1].Err != nil {
			b.Fatalf("renewed %d of %d: %v", len(res), n, res[0].Err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n), "leases/op")
	ReportLatencies(b, lat, 0.50, 0.95, 0.99)
}

// ClaimComplete benchmarks adapters claiming effects of their kind in
// batches of 64 and completing each batch with one CompleteMany: b.N
// effects of kind "a" are published (with as many of kind "b", which the
// adapters never claim), then adapters goroutines drain them.
func ClaimComplete(b *testing.B, open Open, adapters int) { claimComplete(b, open, adapters, true) }

// ClaimCompleteOneByOne is ClaimComplete with each claimed effect completed
// by its own Complete call, for comparison.
func ClaimCompleteOneByOne(b *testing.B, open Open, adapters int) {
	claimComplete(b, open, adapters, false)
}

func claimComplete(b *testing.B, open Open, adapters int, many bool) {
	s := open(b)
	ws := setupWorlds(b, s, 8, "fx")
	const chunk = 256
	for i := 0; i < b.N; i += chunk {
		w := ws[(i/chunk)%len(ws)]
		var batch []vocab.Intent
		for j := i; j < min(i+chunk, b.N); j++ {
			batch = append(batch,
				vocab.Intent{IntentHash: fmt.Sprintf("a-%d", j), Kind: "a", Params: []byte{0xa0}},
				vocab.Intent{IntentHash: fmt.Sprintf("b-%d", j), Kind: "b", Params: []byte{0xa0}})
		}
		if _, err := s.Publish(bg, w.id, w.epoch, batch); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	// Each adapter's call latencies: claims, and completions (one per
	// CompleteMany, or one per Complete).
	claimLat := make([][]time.Duration, adapters)
	completeLat := make([][]time.Duration, adapters)
	warmUp(b, s, adapters)
	b.ResetTimer()
	start := time.Now()
	for a := 0; a < adapters; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("adapter-%d", a)
			for done.Load() < int64(b.N) {
				t0 := time.Now()
				items, err := s.Claim(bg, worker, []string{"a"}, 64, claimTTL)
				claimLat[a] = append(claimLat[a], time.Since(t0))
				if err != nil {
					failed.Store(err)
					return
				}
				if len(items) == 0 {
					return
				}
				receipt := vocab.Receipt{Status: vocab.ReceiptOK, Payload: []byte{0xa0}}
				if !many {
					for _, it := range items {
						t0 := time.Now()
						_, _, err := s.Complete(bg, it.IntentHash, it.ClaimOf(), receipt)
						completeLat[a] = append(completeLat[a], time.Since(t0))
						if err != nil {
							failed.Store(err)
							return
						}
						done.Add(1)
					}
					continue
				}
				cs := make([]vocab.Completion, len(items))
				for i, it := range items {
					cs[i] = vocab.Completion{IntentHash: it.IntentHash, Claim: it.ClaimOf(), Receipt: receipt}
				}
				t0 = time.Now()
				res, err := s.CompleteMany(bg, cs)
				completeLat[a] = append(completeLat[a], time.Since(t0))
				if err != nil {
					failed.Store(err)
					return
				}
				for _, r := range res {
					if r.Err != nil || r.Dup {
						failed.Store(fmt.Errorf("completion: %+v", r))
						return
					}
				}
				done.Add(int64(len(res)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	if got := done.Load(); got != int64(b.N) {
		b.Fatalf("completed %d of %d", got, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "effects/s")
	for _, m := range []struct {
		name string
		lat  [][]time.Duration
	}{{"claim", claimLat}, {"complete", completeLat}} {
		all := slices.Concat(m.lat...)
		slices.Sort(all)
		b.ReportMetric(Percentile(all, 0.50), m.name+"-p50-ms")
		b.ReportMetric(Percentile(all, 0.99), m.name+"-p99-ms")
	}
}

// warmUp has adapters concurrent claimers claim a kind nobody published,
// so that the store's connections (a pool's, opened on first use) exist
// before the timed region: what is measured is the steady state, not
// connection setup.
func warmUp(b *testing.B, s store.Store, adapters int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, adapters)
	for a := 0; a < adapters; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Claim(bg, fmt.Sprintf("warm-%d", a), []string{"warm-up"}, 1, claimTTL); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// ReportLatencies reports the given percentiles of lat as pNN-ms metrics.
func ReportLatencies(b *testing.B, lat []time.Duration, ps ...float64) {
	slices.Sort(lat)
	for _, p := range ps {
		b.ReportMetric(Percentile(lat, p), fmt.Sprintf("p%d-ms", int(p*100)))
	}
}

// Percentile returns the p-th percentile of sorted, in milliseconds.
func Percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(float64(len(sorted)-1)*p)]) / float64(time.Millisecond)
}

// Plane runs every benchmark of this package as sub-benchmarks of b, on
// the stores open makes, so that each backend declares them in one line:
//
//	func BenchmarkPlane(b *testing.B) { storebench.Plane(b, open) }
func Plane(b *testing.B, open Open) {
	for _, c := range []struct {
		name               string
		worlds, committers int
	}{{"worlds=1", 1, 1}, {"worlds=100/committers=32", 100, 32}} {
		b.Run("CommitCycle/"+c.name+"/commit", func(b *testing.B) { CommitCycle(b, open, c.worlds, c.committers, true) })
		b.Run("CommitCycle/"+c.name+"/separate", func(b *testing.B) { CommitCycle(b, open, c.worlds, c.committers, false) })
	}
	b.Run("RenewLeases10k", func(b *testing.B) { RenewLeases(b, open, 10_000) })
	b.Run("ClaimComplete/complete_many", func(b *testing.B) { ClaimComplete(b, open, 16) })
	b.Run("ClaimComplete/one_by_one", func(b *testing.B) { ClaimCompleteOneByOne(b, open, 16) })
}
