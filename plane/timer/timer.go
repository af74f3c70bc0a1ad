// Package timer is the durable timer worker (the runtime plane contract protocol E): it
// claims due timers from the store (ClaimDue), fires each into its
// world's inbox (Fire, deduplicated by the timer's intent hash), and
// sleeps until the next due time (NextDue) or until a store.TopicTimers
// hint says the timer set changed.
//
// Beside a plane.Host it is the fallback. The host that holds a world's
// lease fires that world's timers itself at their due times (store.FireHeld,
// one write, no claim), so in the normal case a timer's firing never waits
// for this worker. Config.Lag makes the worker treat a timer as due only
// Lag after its due time: it sleeps until NextDue+Lag and claims only
// then, so while the holders keep up it claims nothing. A timer whose
// world no live host fires (its holder died, or nobody holds it) is fired
// by the worker at most Lag after its due time, into the world's inbox,
// where the world's next holder (after the dead one's lease TTL) finds it.
// Should the worker and a holder both reach a timer, the store delivers it
// once: a Fire after a FireHeld answers dup, and a FireHeld after a Fire
// too. Lag 0 (the default) is a worker that fires everything itself at
// the due time, as when no host fires timers.
//
// Each firing is an orrery.timer.fire span (Config.Tracer, the
// OpenTelemetry API only), linked through Config.Links within one process
// to the cycle that set the timer and to the cycle that consumes the
// firing; store failures log at Warn with the worker, world and intent.
//
// What it never does: poll on an interval (an idle worker with no timers
// makes no store call until a hint), read the machine's clock, sleep or
// start goroutines outside the actor.Executor it is given, or requeue
// expired claims (that is the timer reaper's, plane/reaper).
package timer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/plane/internal/otrace"
	"github.com/orrery-run/orrery/plane/internal/seam"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
)

// Store is what the timer worker needs of the persistence plane.
type Store interface {
	ClaimDue(ctx context.Context, worker string, n int, ttl time.Duration, opts ...store.ClaimOption) ([]store.TimerItem, error)
	Fire(ctx context.Context, intentHash string, c vocab.Claim) (inboxSeq uint64, dup bool, err error)
	NextDue(ctx context.Context) (at time.Time, ok bool, err error)
	Now(ctx context.Context) (time.Time, error)
	Watch(ctx context.Context, w store.Waker, topics ...string) (stop func(), err error)
}

// Config configures a Worker. Worker and Executor are required.
type Config struct {
	Worker   string         // the claimant id; unique among running workers
	Executor actor.Executor // clock, timers and randomness
	Batch    int            // timers per ClaimDue (default 128)
	// ClaimTTL is how long a claim lasts before the reaper may requeue it
	// (default 30s): a worker that dies between claim and fire delays its
	// timers by at most this plus the reaper's period.
	ClaimTTL time.Duration
	// Node and Incarnation, when Node is set, name the worker incarnation
	// whose liveness the worker's claims ride on (store.ClaimFor): the
	// store requeues them as soon as it knows that incarnation dead, so a
	// dead worker's timers wait for the orphan reaper, not for ClaimTTL.
	Node, Incarnation string
	// Lag delays the worker's view of every timer (default 0): a timer
	// counts as due here only Lag after its due time, and the worker
	// claims nothing before the earliest unclaimed timer is due by Lag.
	// Set it when hosts fire their own worlds' timers (plane.Host does),
	// above the time a live holder may take to fire one (its retries
	// included), so that the worker fires only what no holder did.
	Lag time.Duration
	// Concurrency is how many firings may be in flight at once (default
	// 16). A claimed batch is split by world into that many lanes: the
	// firings of one world stay in claim order, those of different worlds
	// overlap, so a burst of due timers shares the store's group commits
	// instead of paying one commit after another.
	Concurrency int
	// Logger receives store failures and refused firings at Warn, lost
	// claims at Info, each with the worker and the timer's world and
	// intent (nil: discarded).
	Logger *slog.Logger
	// Tracer writes an orrery.timer.fire span per firing (nil: the global
	// provider, a no-op unless the binary installs an SDK).
	Tracer trace.TracerProvider
	// Links connects each firing's span to the span of the world cycle
	// that set the timer, and records it for the cycle that consumes the
	// firing (optional; *plane.TraceLinks, shared by the process's hosts).
	Links Links
}

// Links hands span contexts over the hops that pass through the durable
// store, within one process. *plane.TraceLinks implements it; this package
// names only what it uses, so it need not import the plane.
type Links interface {
	// Intent is the span of the cycle that set the timer of intent hash.
	Intent(hash string) (trace.SpanContext, bool)
	// PutInbox records sc as the writer of world's inbox item seq.
	PutInbox(world string, seq uint64, sc trace.SpanContext)
}

// Stats counts what a worker did.
type Stats struct {
	Claimed    uint64 // timers claimed
	Fired      uint64 // firings this worker delivered
	Duplicates uint64 // firings answered dup=true (already delivered)
	ClaimLost  uint64 // firings refused: another claim owns the timer
	NotDue     uint64 // firings refused as not yet due (a clock skew): left to the reaper
}

// ConfigError reports an unusable Config.
type ConfigError struct{ Field, Reason string }

func (e *ConfigError) Error() string { return fmt.Sprintf("timer: %s: %s", e.Field, e.Reason) }

// ErrRunning is returned by Run on a worker that is already running.
var ErrRunning = errors.New("timer: worker already running")

// Worker fires due timers.
type Worker struct {
	st      Store
	ex      actor.Executor
	cfg     Config
	log     *slog.Logger
	tr      trace.Tracer
	running atomic.Bool

	mu    sync.Mutex
	stats Stats
}

// New returns a timer worker over st.
func New(st Store, cfg Config) (*Worker, error) {
	if st == nil {
		return nil, &ConfigError{Field: "Store", Reason: "required"}
	}
	if err := store.CheckID("timer", "worker", cfg.Worker); err != nil {
		return nil, &ConfigError{Field: "Worker", Reason: err.Error()}
	}
	if cfg.Executor == nil {
		return nil, &ConfigError{Field: "Executor", Reason: "required"}
	}
	switch {
	case cfg.Batch < 0 || cfg.Batch > store.MaxBatch:
		return nil, &ConfigError{Field: "Batch", Reason: fmt.Sprintf("must be in [0, %d]", store.MaxBatch)}
	case cfg.ClaimTTL < 0 || cfg.ClaimTTL > store.MaxTTL:
		return nil, &ConfigError{Field: "ClaimTTL", Reason: fmt.Sprintf("must be in [0, %v]", store.MaxTTL)}
	case cfg.Concurrency < 0 || cfg.Concurrency > store.MaxBatch:
		return nil, &ConfigError{Field: "Concurrency", Reason: fmt.Sprintf("must be in [0, %d]", store.MaxBatch)}
	case cfg.Lag < 0 || cfg.Lag > store.MaxTTL:
		return nil, &ConfigError{Field: "Lag", Reason: fmt.Sprintf("must be in [0, %v]", store.MaxTTL)}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.Batch == 0 {
		cfg.Batch = 128
	}
	if cfg.ClaimTTL == 0 {
		cfg.ClaimTTL = 30 * time.Second
	}
	w := &Worker{st: st, ex: cfg.Executor, cfg: cfg, log: cfg.Logger, tr: otrace.Tracer(cfg.Tracer)}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	return w, nil
}

// Stats returns the worker's counters so far.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Run fires due timers until ctx is done, and returns ctx's error. Store
// failures are retried with backoff, Watch included: a worker whose store
// cannot be watched yet waits and tries again.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer w.running.Store(false)
	wake := w.ex.NewParker()
	stop, err := seam.Watch(ctx, w.st, w.ex, func(n int) time.Duration { return backoff(n, w.ex.Uint64()) },
		func(err error, n int) {
			w.log.Warn("timer: watch failed", "worker", w.cfg.Worker, "err", err, "failures", n)
		}, wake, store.TopicTimers)
	if err != nil {
		return err
	}
	defer stop()
	var timer actor.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer = w.ex.AfterFunc(d, wake.Unpark)
	}
	failures := 0
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		failures++
		w.log.Warn("timer: "+what+" failed", "worker", w.cfg.Worker, "err", err, "failures", failures)
		arm(backoff(failures, w.ex.Uint64()))
		return wake.Park(ctx)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if w.cfg.Lag > 0 {
			// Claim only once the earliest unclaimed timer is due by Lag:
			// a hint (any commit that schedules a timer raises one) must
			// not make the worker take the timers the holders are firing.
			wait, ok, err := w.untilLagged(ctx)
			if err != nil {
				if err := fail("next due", err); err != nil {
					return err
				}
				continue
			}
			if !ok || wait > 0 {
				if timer != nil {
					timer.Stop()
					timer = nil
				}
				if ok {
					arm(wait)
				}
				failures = 0
				if err := wake.Park(ctx); err != nil {
					return err
				}
				continue
			}
		}
		var owner []store.ClaimOption
		if w.cfg.Node != "" {
			owner = append(owner, store.ClaimFor(w.cfg.Node, w.cfg.Incarnation))
		}
		items, err := w.st.ClaimDue(ctx, w.cfg.Worker, w.cfg.Batch, w.cfg.ClaimTTL, owner...)
		if err != nil {
			if err := fail("claim", err); err != nil {
				return err
			}
			continue
		}
		w.count(func(s *Stats) { s.Claimed += uint64(len(items)) })
		if err := w.fireAll(ctx, items); err != nil {
			return err
		}
		if len(items) == w.cfg.Batch || w.cfg.Lag > 0 {
			continue // more may be due; with a Lag, untilLagged says when
		}
		at, ok, err := w.st.NextDue(ctx)
		if err != nil {
			if err := fail("next due", err); err != nil {
				return err
			}
			continue
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if ok {
			// The due time is on the store's clock: measure the wait on it
			// too, so a skewed executor clock cannot fire early or late.
			now, err := w.st.Now(ctx)
			if err != nil {
				if err := fail("now", err); err != nil {
					return err
				}
				continue
			}
			// Due already: it came due while we fired, or while a store
			// call of ours was slow (a paused process). NextDue names an
			// unclaimed timer only, so nobody else holds it: claim again,
			// or nothing would wake us for it.
			if d := at.Sub(now); d > 0 {
				arm(d)
			} else {
				continue
			}
		}
		failures = 0
		if err := wake.Park(ctx); err != nil {
			return err
		}
	}
}

// untilLagged tells how long until the earliest unclaimed timer is due by
// Lag, on the store's clock (ok=false: no timer is waiting). At or below
// zero the worker claims.
func (w *Worker) untilLagged(ctx context.Context) (wait time.Duration, ok bool, err error) {
	at, ok, err := w.st.NextDue(ctx)
	if err != nil || !ok {
		return 0, false, err
	}
	now, err := w.st.Now(ctx)
	if err != nil {
		return 0, false, err
	}
	return at.Add(w.cfg.Lag).Sub(now), true, nil
}

// fireAll fires the claimed timers: in claim order within each world, in
// up to Concurrency lanes across worlds (a world's lane is a hash of its
// id). It returns once every lane has returned, with ctx's error if ctx
// ended first.
func (w *Worker) fireAll(ctx context.Context, items []store.TimerItem) error {
	n := min(w.cfg.Concurrency, len(items))
	if n <= 1 {
		return w.fireLane(ctx, items)
	}
	lanes := make([][]store.TimerItem, n)
	for _, it := range items {
		h := fnv.New32a()
		h.Write([]byte(it.World))
		i := h.Sum32() % uint32(n)
		lanes[i] = append(lanes[i], it)
	}
	return seam.Lanes(w.ex, n, func(i int) error { return w.fireLane(ctx, lanes[i]) })
}

// fireLane fires items in order. A store failure is retried with backoff
// (the claim stays ours until it expires, and after that until someone else
// claims); only ctx ends the retries.
func (w *Worker) fireLane(ctx context.Context, items []store.TimerItem) error {
	for _, it := range items {
		if err := w.fire(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// fire fires one claimed timer under its orrery.timer.fire span: a root
// linked to the cycle that set the timer, since the firing was started by
// the durable queue, not by any caller's context.
func (w *Worker) fire(ctx context.Context, it store.TimerItem) error {
	var links []trace.Link
	if w.cfg.Links != nil {
		links = otrace.Link(w.cfg.Links.Intent(it.IntentHash))
	}
	sctx, sp := w.tr.Start(ctx, otrace.TimerFire, trace.WithNewRoot(), trace.WithTimestamp(w.ex.Now()),
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(otrace.World.String(it.World), otrace.IntentHash.String(it.IntentHash),
			otrace.Attempt.Int(it.Attempt), otrace.Worker.String(w.cfg.Worker)))
	var spanErr error
	defer func() { otrace.End(sp, w.ex.Now(), spanErr) }()
	attrs := func(kv ...any) []any {
		return append([]any{"worker", w.cfg.Worker, "world", it.World, "intent", it.IntentHash, "attempt", it.Attempt}, kv...)
	}
	for failures := 1; ; failures++ {
		seq, dup, err := w.st.Fire(sctx, it.IntentHash, it.ClaimOf())
		if err == nil {
			w.count(func(s *Stats) {
				if dup {
					s.Duplicates++
				} else {
					s.Fired++
				}
			})
			sp.SetAttributes(otrace.Seq.Int64(int64(seq)), otrace.Duplicate.Bool(dup))
			if !dup && w.cfg.Links != nil && sp.IsRecording() {
				w.cfg.Links.PutInbox(it.World, seq, sp.SpanContext())
			}
			return nil
		}
		if errors.Is(err, store.ErrClaimLost) {
			w.count(func(s *Stats) { s.ClaimLost++ })
			w.log.Info("timer: claim lost; another claim fires the timer", attrs()...)
			spanErr = err
			return nil
		}
		if errors.Is(err, store.ErrNotDue) {
			w.count(func(s *Stats) { s.NotDue++ })
			w.log.Warn("timer: claimed a timer the store says is not due", attrs("err", err)...)
			spanErr = err
			return nil
		}
		if errors.Is(err, store.ErrNotFound) {
			spanErr = err
			return nil // cancelled after the claim
		}
		if ctx.Err() != nil {
			spanErr = ctx.Err()
			return ctx.Err()
		}
		w.log.Warn("timer: fire failed", attrs("err", err, "failures", failures)...)
		if err := actor.Sleep(ctx, w.ex, backoff(failures, w.ex.Uint64())); err != nil {
			spanErr = err
			return err
		}
	}
}

func (w *Worker) count(f func(*Stats)) {
	w.mu.Lock()
	f(&w.stats)
	w.mu.Unlock()
}

// backoff is the wait after failures consecutive store failures: 50ms
// doubling to 5s, up to half of it jittered with the executor's seed.
func backoff(failures int, r uint64) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < failures && d < 5*time.Second; i++ {
		d *= 2
	}
	d = min(d, 5*time.Second)
	frac := float64(r>>11) / float64(uint64(1)<<53)
	return d - time.Duration(float64(d)*0.5*frac)
}
