package actor

// This file is the only place in actor/, supervisor/ and registry/ that
// touches the machine's clock and starts goroutines directly: it is the
// production side of the Executor seam. TestNoAmbientTimeOrRandomness
// enforces that.

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// NewExecutor returns the production executor: goroutines, the runtime's
// real clock, and a SplitMix64 random source seeded with seed.
func NewExecutor(seed uint64) Executor {
	e := &realExecutor{}
	e.rng.Store(seed)
	return e
}

type realExecutor struct {
	rng atomic.Uint64
}

func (*realExecutor) Now() time.Time { return time.Now() }

func (*realExecutor) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func (*realExecutor) Go(f func()) { go f() }

// withDeadline is the standard library's own deadline context: the clock is
// the same, so everything derived from it behaves as the standard library
// says (DeadlineExceeded, Deadline, Cause).
func (*realExecutor) withDeadline(parent context.Context, at time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, at)
}

func (*realExecutor) NewParker() Parker { return newChanParker() }

// Uint64 is SplitMix64: the state advances by a fixed odd constant (an
// atomic add, so concurrent callers never share a value) and is then mixed.
func (e *realExecutor) Uint64() uint64 {
	z := e.rng.Add(0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// chanParker is a Parker over a one-slot channel. A goroutine parked on a
// channel is woken by the runtime with a direct hand-off (runnext), which is
// the cheapest wake-up Go offers; no goroutine is created per wake-up. The
// channel itself is the Parker, so a Parker costs one allocation.
type chanParker chan struct{}

func newChanParker() chanParker { return make(chanParker, 1) }

func (p chanParker) Park(ctx context.Context) error {
	done := ctx.Done()
	if done == nil {
		<-p
		return nil
	}
	select {
	case <-p:
		return nil
	case <-done:
		// A permit that raced with cancellation stays available for the next
		// Park: wake-ups are never lost.
		return ctx.Err()
	}
}

func (p chanParker) Unpark() {
	select {
	case p <- struct{}{}:
	default:
	}
}

// timerSlack is how early a precise timer (PreciseAfterFunc) wakes before
// its deadline, to wait out the rest by yielding. The runtime's timers
// sleep in the network poller with millisecond resolution, so an idle
// process's timer fires up to a millisecond late (about 0.6 ms at the
// median on the benchmark VM: BenchmarkTimerLateness); the last stretch
// is covered by a yielding loop instead, at most this long per firing.
const timerSlack = time.Millisecond

// preciseAfterFunc is PreciseAfterFunc on the machine's clock.
func (*realExecutor) preciseAfterFunc(d time.Duration, f func()) Timer {
	p := &preciseTimer{f: f}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm(d)
	return p
}

// preciseTimer is a runtime timer armed timerSlack early, then a yielding
// wait for the deadline. Stop and Reset start a new generation; a wait of
// an older one gives up.
type preciseTimer struct {
	mu      sync.Mutex
	f       func()
	t       *time.Timer
	gen     atomic.Uint64
	pending bool // armed and not yet fired or stopped
}

// arm starts a new generation due after d (mu held).
func (p *preciseTimer) arm(d time.Duration) {
	g := p.gen.Add(1)
	deadline := time.Now().Add(d)
	p.pending = true
	p.t = time.AfterFunc(max(d-timerSlack, 0), func() { p.fire(g, deadline) })
}

func (p *preciseTimer) fire(g uint64, deadline time.Time) {
	for time.Until(deadline) > 0 {
		if p.gen.Load() != g {
			return
		}
		runtime.Gosched()
	}
	p.mu.Lock()
	if p.gen.Load() != g || !p.pending {
		p.mu.Unlock()
		return
	}
	p.pending = false
	p.mu.Unlock()
	p.f()
}

func (p *preciseTimer) Stop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.pending
	p.pending = false
	p.gen.Add(1)
	p.t.Stop()
	return was
}

func (p *preciseTimer) Reset(d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.pending
	p.t.Stop()
	p.arm(d)
	return was
}
