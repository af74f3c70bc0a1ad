package dispatch_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/actor/dispatch"
)

// fuzzOp is the payload of a fuzzed message: its position in the script and
// what its handler does with it.
type fuzzOp struct {
	seq  int
	mode byte // 0 ok, 1 error, 2 panic, 3 runtime.Goexit
}

// FuzzDeliverOrder (the dispatcher contract §§5, 6, 9, 12) delivers a random script of
// messages over registered and unregistered types, with handlers that
// succeed, fail, panic or Goexit, starting the runtime at a random point.
// It asserts that registered messages execute exactly once each, in delivery
// order, that unregistered ones never execute, and that the counters balance
// after every Deliver and add up at the end.
func FuzzDeliverOrder(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add([]byte{0, 1, 2, 3, 4}, uint8(2))
	f.Add([]byte{0, 8, 16, 24, 1, 9, 17, 25, 3, 4, 2, 10}, uint8(255))
	f.Add([]byte("the quick brown fox jumps over the lazy dog"), uint8(7))
	f.Fuzz(func(t *testing.T, script []byte, startAt uint8) {
		if len(script) > 1024 {
			script = script[:1024]
		}
		synctest.Test(t, func(t *testing.T) {
			r := dispatch.New(actor.NewExecutor(1), dispatch.WithLogger(nil))
			var mu sync.Mutex
			var got []int
			h := func(_ context.Context, m dispatch.Message) error {
				op := m.Payload.(fuzzOp)
				mu.Lock()
				got = append(got, op.seq)
				mu.Unlock()
				switch op.mode {
				case 1:
					return errors.New("fuzz")
				case 2:
					panic("fuzz")
				case 3:
					runtime.Goexit()
				}
				return nil
			}
			types := []string{"a", "b", "c", "unregistered", ""}
			for _, typ := range types[:3] {
				if err := r.Register(typ, h); err != nil {
					t.Fatal(err)
				}
			}
			var want []int
			var wantStats dispatch.Stats
			for i, b := range script {
				if i == int(startAt) {
					r.Start()
				}
				typ := types[int(b)%len(types)]
				op := fuzzOp{seq: i, mode: (b / 8) % 5}
				if op.mode == 4 {
					op.mode = 0
				}
				if err := r.Deliver(dispatch.Message{Type: typ, Payload: op}); err != nil {
					t.Fatalf("Deliver #%d: %v", i, err)
				}
				checkInvariant(t, r.Stats())
				wantStats.Delivered++
				if int(b)%len(types) >= 3 {
					wantStats.Dropped++
					continue
				}
				want = append(want, i)
				wantStats.Executed++
				switch op.mode {
				case 1:
					wantStats.Failed++
				case 2, 3:
					wantStats.Panicked++
				}
			}
			r.Start()
			synctest.Wait()
			if got := r.Stats(); got != wantStats {
				t.Fatalf("Stats:\n got %+v\nwant %+v", got, wantStats)
			}
			mu.Lock()
			if !slices.Equal(got, want) {
				t.Fatalf("execution order\n got %v\nwant %v", got, want)
			}
			mu.Unlock()
			if err := r.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	})
}
