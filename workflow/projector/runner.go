package projector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// Store is what a Runner needs of a backend: the journal it reads and the
// durable watermarks. Every store.Store is one.
type Store interface {
	Read(ctx context.Context, stream string, afterSeq uint64, limit int) ([]store.Record, error)
	store.Watermarks
}

// Defaults of RunnerConfig.
const (
	DefaultBatch   = 256
	DefaultMinPoll = 5 * time.Millisecond
	DefaultMaxPoll = time.Second
	// giveBackTimeout bounds the CAS that returns a ClaimFirst claim after
	// a failed apply. It runs even when the pass's context has ended (an
	// apply often fails because it did), or the event would be lost for
	// no reason.
	giveBackTimeout = 5 * time.Second
)

// ErrAlreadyRunning: Run was called while another Run of the same Runner
// was still running.
var ErrAlreadyRunning = errors.New("projector: runner already running")

// ErrUnknownProjector: Watermark named no projector of the runner.
var ErrUnknownProjector = errors.New("projector: no such projector")

// RunnerConfig configures NewRunner.
type RunnerConfig struct {
	// Store is read for events and keeps the durable watermarks. Required.
	Store Store
	// Executor paces Run's polls on its clock. Required.
	Executor actor.Executor
	// Streams lists the streams to project, called at the start of every
	// pass; its order does not matter (a pass visits them sorted) and
	// repeats are ignored. Required. See UniverseStreams and Fixed.
	Streams func(ctx context.Context) ([]string, error)
	// Projectors are fed in this order, each event to each. At least one.
	Projectors []Projector
	// Delivery orders the watermark's move and the apply (ClaimFirst by
	// default).
	Delivery Delivery
	// Memory keeps the watermarks of InMemory projectors; nil gives the
	// runner its own. Share one only between runners that share the
	// projections too.
	Memory *MemWatermarks
	// Batch is how many events one journal read returns (0:
	// DefaultBatch; at most store.MaxBatch).
	Batch int
	// MinPoll and MaxPoll bound Run's wait between passes (0: DefaultMinPoll
	// and DefaultMaxPoll). A pass that moved nothing doubles the wait, up
	// to MaxPoll; a pass that moved anything resets it to MinPoll.
	MinPoll, MaxPoll time.Duration
	// Logger receives Run's failed passes and recovered panics (nil:
	// discarded).
	Logger *slog.Logger
	// OnError, when set, is called by Run with each failed pass's error.
	OnError func(error)
	// SkipCompacted decides what happens when a projector's watermark is
	// below its stream's compaction floor (the records between were
	// removed before it was handed them). False (the default): the stream
	// stops for that projector, and every pass reports the range as a
	// *GapError (logged at ERROR, returned by CatchUp, handed to OnError)
	// until an operator moves the watermark. True: the runner moves the
	// watermark to the floor, logs the skipped range at WARN and feeds the
	// projector on from there. Either way Gaps lists the range and OnGap is
	// called with it.
	SkipCompacted bool
	// OnGap, when set, is called with every unreadable range found: a
	// stopped one once (until it changes), a skipped one when it is
	// skipped. It runs inside the pass and must not call CatchUp.
	OnGap func(Gap)
}

// Runner feeds projectors the events of streams. CatchUp and Run may be
// called from any goroutine; passes of one Runner never overlap, so a
// projector sees one stream's events strictly in order.
type Runner struct {
	cfg     RunnerConfig
	binds   []binding
	batch   int
	log     *slog.Logger
	lock    chan struct{} // the pass lock: one pass at a time
	wake    actor.Parker
	running atomic.Bool
	// cache is the watermark each binding last read or wrote per stream,
	// so a pass reads the store's only once per pair. A CAS conflict or an
	// error drops the entry, and the next pass reads it again. It is only
	// touched under lock.
	cache map[markKey]uint64
	// stopped and skipped are the gaps Gaps reports, under gapMu (Gaps may
	// be called during a pass).
	gapMu   sync.Mutex
	stopped map[markKey]Gap
	skipped []Gap
}

type binding struct {
	p     Projector
	name  string
	marks store.Watermarks
}

// NewRunner checks cfg and returns a Runner. A configuration error matches
// ErrConfig.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	bad := func(format string, args ...any) (*Runner, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case cfg.Store == nil:
		return bad("Store is required")
	case cfg.Executor == nil:
		return bad("Executor is required")
	case cfg.Streams == nil:
		return bad("Streams is required")
	case len(cfg.Projectors) == 0:
		return bad("no Projectors")
	case cfg.Delivery != ClaimFirst && cfg.Delivery != ApplyFirst:
		return bad("unknown Delivery %d", cfg.Delivery)
	case cfg.Batch < 0 || cfg.Batch > store.MaxBatch:
		return bad("Batch %d outside [0, %d]", cfg.Batch, store.MaxBatch)
	case cfg.MinPoll < 0 || cfg.MaxPoll < 0:
		return bad("negative poll interval")
	}
	r := &Runner{cfg: cfg, batch: cfg.Batch, log: cfg.Logger, lock: make(chan struct{}, 1),
		wake: cfg.Executor.NewParker(), cache: map[markKey]uint64{}, stopped: map[markKey]Gap{}}
	if r.batch == 0 {
		r.batch = DefaultBatch
	}
	if r.cfg.MinPoll == 0 {
		r.cfg.MinPoll = DefaultMinPoll
	}
	if r.cfg.MaxPoll == 0 {
		r.cfg.MaxPoll = max(DefaultMaxPoll, r.cfg.MinPoll)
	}
	if r.cfg.MaxPoll < r.cfg.MinPoll {
		return bad("MaxPoll %v below MinPoll %v", r.cfg.MaxPoll, r.cfg.MinPoll)
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	mem := cfg.Memory
	if mem == nil {
		mem = NewMemWatermarks()
	}
	seen := map[string]bool{}
	for i, p := range cfg.Projectors {
		if p == nil {
			return bad("projector %d is nil", i)
		}
		name := p.Name()
		if err := store.CheckID("projector", "projector name", name); err != nil {
			return bad("projector %d: %v", i, err)
		}
		if seen[name] {
			return bad("two projectors named %q would share watermarks", name)
		}
		seen[name] = true
		b := binding{p: p, name: name, marks: cfg.Store}
		if m, ok := p.(InMemory); ok && m.InMemory() {
			b.marks = mem
		}
		r.binds = append(r.binds, b)
	}
	return r, nil
}

// Notify wakes a waiting Run for a pass now, as when the caller knows it
// has just appended. It never blocks, and a Notify without a Run is kept
// for the next wait.
func (r *Runner) Notify() { r.wake.Unpark() }

// Watermark returns the projector's watermark on stream, where the runner
// keeps it (the store, or memory for an InMemory projector).
func (r *Runner) Watermark(ctx context.Context, projector, stream string) (uint64, error) {
	for _, b := range r.binds {
		if b.name == projector {
			return b.marks.GetWatermark(ctx, b.name, stream)
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownProjector, projector)
}

// CatchUp makes one pass: every projector is fed every event of every
// stream above its watermark, up to each stream's head at the time it is
// read. A stream's or projector's failure does not stop the others; the
// errors are joined (each an *ApplyError, a *GapError, a store error, or
// ErrOutOfOrder).
func (r *Runner) CatchUp(ctx context.Context) error {
	_, err := r.pass(ctx)
	return err
}

// Run catches up from the stored watermarks, then follows the streams
// until ctx ends, and returns ctx's error. There is no journal
// notification to wait on, so it polls, waiting on the executor's clock
// between passes (see RunnerConfig.MinPoll) or until Notify. A failed
// pass is logged, handed to OnError, and retried at the next poll.
func (r *Runner) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer r.running.Store(false)
	wait := r.cfg.MinPoll
	for {
		progress, err := r.pass(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.log.Warn("projector: pass failed", "err", err)
			if r.cfg.OnError != nil {
				r.cfg.OnError(err)
			}
		}
		if progress {
			wait = r.cfg.MinPoll
		}
		t := r.cfg.Executor.AfterFunc(wait, r.wake.Unpark)
		err = r.wake.Park(ctx)
		t.Stop()
		if err != nil {
			return err
		}
		if !progress {
			wait = min(2*wait, r.cfg.MaxPoll)
		}
	}
}

// pass is one CatchUp under the pass lock. progress reports whether any
// watermark moved.
func (r *Runner) pass(ctx context.Context) (progress bool, err error) {
	select {
	case r.lock <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-r.lock }()
	streams, err := r.cfg.Streams(ctx)
	if err != nil {
		return false, fmt.Errorf("projector: listing streams: %w", err)
	}
	streams = slices.Clone(streams)
	slices.Sort(streams)
	streams = slices.Compact(streams)
	var errs []error
	for _, s := range streams {
		if err := ctx.Err(); err != nil {
			return progress, err
		}
		p, err := r.stream(ctx, s)
		progress = progress || p
		if err != nil {
			errs = append(errs, err)
		}
	}
	return progress, errors.Join(errs...)
}

// cursor is one binding's position in the stream a pass is reading.
type cursor struct {
	mark   uint64
	active bool // false once the binding stopped for this pass
}

// stream feeds every binding the events of s above its watermark.
func (r *Runner) stream(ctx context.Context, s string) (progress bool, err error) {
	var errs []error
	cur := make([]cursor, len(r.binds))
	after, live := uint64(0), false
	for i, b := range r.binds {
		k := markKey{b.name, s}
		m, ok := r.cache[k]
		if !ok {
			if m, err = b.marks.GetWatermark(ctx, b.name, s); err != nil {
				errs = append(errs, err)
				continue
			}
			r.cache[k] = m
		}
		cur[i] = cursor{mark: m, active: true}
		if !live || m < after {
			after, live = m, true
		}
	}
	for live {
		evs, err := r.cfg.Store.Read(ctx, s, after, r.batch)
		var ce *store.CompactedError
		if errors.As(err, &ce) && ce.Floor > after {
			// The bindings below the floor stop or skip to it; the others
			// read on from the lowest watermark left.
			moved, gerrs := r.belowFloor(ctx, s, cur, ce)
			progress = progress || moved
			errs = append(errs, gerrs...)
			after, live = lowest(cur)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			break
		}
		r.readable(s, cur)
		for _, e := range evs {
			if e.RunSeq <= after {
				errs = append(errs, fmt.Errorf("%w: %s@%d after %d", ErrOutOfOrder, s, e.RunSeq, after))
				continue
			}
			after = e.RunSeq
			live = false
			for i := range r.binds {
				c := &cur[i]
				if !c.active {
					continue
				}
				if e.RunSeq > c.mark {
					moved, err := r.deliver(ctx, &r.binds[i], s, c, e)
					progress = progress || moved
					if err != nil {
						errs = append(errs, err)
					}
				}
				live = live || c.active
			}
			if !live {
				break // every binding stopped: the rest waits for the next pass
			}
		}
		if len(evs) < r.batch {
			break
		}
	}
	return progress, errors.Join(errs...)
}

// lowest returns the lowest watermark among the active cursors, and
// whether there is one.
func lowest(cur []cursor) (after uint64, live bool) {
	for _, c := range cur {
		if c.active && (!live || c.mark < after) {
			after, live = c.mark, true
		}
	}
	return after, live
}

// deliver hands e to one binding under the runner's Delivery, moving c.
// moved reports whether the watermark moved (and stayed moved).
func (r *Runner) deliver(ctx context.Context, b *binding, s string, c *cursor, e event.Envelope) (moved bool, err error) {
	k := markKey{b.name, s}
	old := c.mark
	// stop ends the binding's part of this pass; the next pass reads the
	// watermark afresh.
	stop := func() {
		c.active = false
		delete(r.cache, k)
	}
	// cas moves the watermark from old to next. Losing it to another
	// runner is not a failure: that runner has the event.
	cas := func(from, to uint64) (ok bool, err error) {
		err = b.marks.CASWatermark(ctx, b.name, s, from, to)
		if err == nil {
			return true, nil
		}
		stop()
		if errors.Is(err, store.ErrWatermarkConflict) {
			return false, nil
		}
		return false, err
	}
	advance := func() {
		c.mark = e.RunSeq
		r.cache[k] = e.RunSeq
	}
	if r.cfg.Delivery == ApplyFirst {
		if aerr := r.apply(ctx, b, s, e); aerr != nil {
			stop()
			return false, aerr
		}
		ok, err := cas(old, e.RunSeq)
		if ok {
			advance()
		}
		return ok, err
	}
	// ClaimFirst.
	if ok, err := cas(old, e.RunSeq); !ok {
		return false, err
	}
	advance()
	aerr := r.apply(ctx, b, s, e)
	if aerr == nil {
		return true, nil
	}
	stop()
	gctx, cancel := actor.WithTimeout(context.WithoutCancel(ctx), r.cfg.Executor, giveBackTimeout)
	defer cancel()
	if gerr := b.marks.CASWatermark(gctx, b.name, s, e.RunSeq, old); gerr != nil {
		aerr.Lost = true
		aerr.Err = errors.Join(aerr.Err, fmt.Errorf("giving the claim back: %w", gerr))
		return true, aerr
	}
	return false, aerr
}

// apply calls the projector with its own copy of the payload (projectors
// share the event) and turns a panic into an error.
func (r *Runner) apply(ctx context.Context, b *binding, s string, e event.Envelope) (aerr *ApplyError) {
	e.Payload = bytes.Clone(e.Payload)
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("projector: apply panicked", "projector", b.name, "stream", s, "runSeq", e.RunSeq,
				"panic", v, "stack", string(debug.Stack()))
			aerr = &ApplyError{Projector: b.name, Stream: s, RunSeq: e.RunSeq, Panicked: true, Err: fmt.Errorf("panic: %v", v)}
		}
	}()
	if err := b.p.Apply(ctx, s, e); err != nil {
		return &ApplyError{Projector: b.name, Stream: s, RunSeq: e.RunSeq, Err: err}
	}
	return nil
}
