// Package seam holds the ways the plane's workers wait that go through the
// actor executor, so that they run unchanged under the lab: running a few
// lanes of work at once, parking until work they started has ended, and
// registering a Watch that the store may refuse for a while.
package seam

import (
	"context"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
)

// Lanes runs lane(0) … lane(n-1) at once, each on its own goroutine started
// by ex, and returns once every one has returned, with the first error to
// come back. One lane runs on the caller's goroutine; none is nil. The wait
// is on an executor parker, a blocking point the lab schedules; it ignores
// every context, so no lane outlives the call (a lane ends promptly when
// its own context does).
func Lanes(ex actor.Executor, n int, lane func(i int) error) error {
	switch {
	case n <= 0:
		return nil
	case n == 1:
		return lane(0)
	}
	done := ex.NewParker()
	var mu sync.Mutex
	running := n
	var first error
	for i := range n {
		ex.Go(func() {
			err := lane(i)
			mu.Lock()
			if err != nil && first == nil {
				first = err
			}
			running--
			mu.Unlock()
			done.Unpark()
		})
	}
	var err error
	ParkUntil(done, func() bool {
		mu.Lock()
		defer mu.Unlock()
		err = first
		return running == 0
	})
	return err
}

// ParkUntil parks on p until ended reports true, checking it first and
// after every wake-up; whatever ends must unpark p after the change that
// makes ended true. It ignores every context: what it waits for ends
// promptly once its own context does.
func ParkUntil(p actor.Parker, ended func() bool) {
	for !ended() {
		_ = p.Park(context.Background())
	}
}

// Watcher is the part of a store that Watch registers with.
type Watcher interface {
	Watch(ctx context.Context, w store.Waker, topics ...string) (stop func(), err error)
}

// Watch registers w for topics on st, retrying a refused registration
// until ctx ends (ctx's error is then returned): a worker that gave up on
// a transient store error would stop for good, and nothing else would act
// for it. After the n-th failure in a row it calls failed (if not nil) and
// waits delay(n) on ex's clock.
func Watch(ctx context.Context, st Watcher, ex actor.Executor, delay func(failures int) time.Duration,
	failed func(err error, failures int), w store.Waker, topics ...string) (stop func(), err error) {
	for failures := 1; ; failures++ {
		stop, err := st.Watch(ctx, w, topics...)
		if err == nil {
			return stop, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if failed != nil {
			failed(err, failures)
		}
		if err := actor.Sleep(ctx, ex, delay(failures)); err != nil {
			return nil, err
		}
	}
}
