package actor

// This file is the only place in actor/, supervisor/ and registry/ that
// touches the machine's clock and starts goroutines directly: it is the
// production side of the Executor seam. internal/archtest's
// TestHouseRules/NoAmbientTimeOrRandomness enforces that.

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"runtime"
	"sync/atomic"
	"time"
)

// NewExecutor returns the production executor: goroutines, the runtime's
// real clock, and a SplitMix64 random source seeded with seed. Two
// executors with one seed draw the same numbers in the same order, so a
// fixed seed is for tests that want that; a process that serves uses
// NewEntropyExecutor, whose draws differ from every other process's.
func NewExecutor(seed uint64) Executor {
	e := &realExecutor{}
	e.rng.Store(seed)
	return e
}

// NewEntropyExecutor is NewExecutor seeded from the operating system's
// entropy: what a process that serves uses, so that jitter and backoff are
// not drawn in lockstep by every node of a cluster. (Identities that must be
// unique across processes do not come from an executor at all: see
// UniqueID.)
func NewEntropyExecutor() Executor { return NewExecutor(EntropyUint64()) }

// EntropyUint64 draws 64 bits from the operating system's entropy.
func EntropyUint64() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails on supported platforms (crypto/rand says so)
	return binary.BigEndian.Uint64(b[:])
}

// UniqueID returns 128 bits as 32 hex digits for an identity that must be
// unique across processes (a call id, an incarnation): from the operating
// system's entropy, or, under a deterministic executor (the lab), from the
// executor's seeded randomness so that a run replays. Never from a
// production executor's seed: processes started with one seed would hand
// out one sequence of ids.
func UniqueID(ex Executor) string {
	var b [16]byte
	if ex != nil && isDeterministic(ex) {
		binary.BigEndian.PutUint64(b[:8], ex.Uint64())
		binary.BigEndian.PutUint64(b[8:], ex.Uint64())
	} else {
		_, _ = crand.Read(b[:])
	}
	return hex.EncodeToString(b[:])
}

// IsDeterministic reports whether ex is a deterministic executor (the
// lab's), whose randomness is seeded for replay. Code that needs an
// identity unique across processes draws it from ex only when ex is
// deterministic, and from the operating system's entropy otherwise.
func IsDeterministic(ex Executor) bool { return isDeterministic(ex) }

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

// timerSlack is the production executor's TimerSlack: the runtime's timers
// sleep in the network poller with millisecond resolution, so an idle
// process's timer fires up to a millisecond late (about 0.6 ms at the
// median on the benchmark VM: BenchmarkTimerLateness).
const timerSlack = time.Millisecond

func (*realExecutor) timerSlack() time.Duration { return timerSlack }

// spinUntil yields the processor until the machine's clock reaches t. A
// clock that stands still across a yield is a testing/synctest bubble's,
// which moves only once every goroutine in it blocks: then it sleeps.
func (*realExecutor) spinUntil(t time.Time) {
	last := time.Now()
	for last.Before(t) {
		runtime.Gosched()
		now := time.Now()
		if !now.After(last) {
			time.Sleep(t.Sub(now))
			return
		}
		last = now
	}
}
