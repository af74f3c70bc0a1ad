package adapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/effect"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/plane/internal/otrace"
	"github.com/orrery-run/orrery/plane/internal/seam"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/world"
)

// Store is what a Pool needs of the persistence plane (store.Store has it).
type Store interface {
	Claim(ctx context.Context, worker string, kinds []string, n int, claimTTL time.Duration, opts ...store.ClaimOption) ([]vocab.EffectItem, error)
	Complete(ctx context.Context, intentHash string, c vocab.Claim, r vocab.Receipt) (inboxSeq uint64, dup bool, err error)
	ReleaseEffect(ctx context.Context, intentHash string, c vocab.Claim) error
	RetryLater(ctx context.Context, intentHash string, c vocab.Claim, delay time.Duration, lastError string) error
	NextRetry(ctx context.Context, kinds []string) (wait time.Duration, ok bool, err error)
	Watch(ctx context.Context, w store.Waker, topics ...string) (stop func(), err error)
}

// Config configures a Pool. Worker and Executor are required.
type Config struct {
	// Worker is the claimant id the pool claims under; two pools that run
	// at once must not share it.
	Worker string
	// Executor is the clock, timer, randomness and goroutine source.
	Executor actor.Executor
	// Concurrency bounds the effects executing at once (default 16).
	Concurrency int
	// Batch bounds the effects one Claim takes (default Concurrency).
	Batch int
	// Kinds, when set, are the only kinds the pool claims, of those its
	// registrations serve (a process of a worker class that executes some
	// kinds and leaves the rest to other pools); a kind no registration
	// serves is a ConfigError. Nil: every kind served.
	Kinds []string
	// Node and Incarnation, when Node is set, name the worker incarnation
	// whose liveness the pool's claims ride on (store.ClaimFor): the
	// store requeues them as soon as it knows that incarnation dead (its
	// heartbeats stopped, it retired, a restart superseded it), without
	// waiting for ClaimTTL; while it lives they last their TTL as any.
	Node, Incarnation string
	// ClaimTTL is how long a claim lasts before the reaper may requeue it
	// (default 30s). An execution gets the claim's TTL less a tenth of it,
	// to finish before anyone else may claim it; an execution that
	// overruns that budget ends with a timeout receipt. So ClaimTTL must
	// exceed the slowest adapter call. A retry is a claim of its own, after
	// its backoff (RetryPolicy), so the backoff is not counted in it.
	ClaimTTL time.Duration
	// Liveness, when set, answers the node's liveness deadline on the
	// executor's clock: the moment, counted from before the last heartbeat
	// the store took, when the store may judge this incarnation dead and
	// requeue its claims (store.ReapOrphans) for another node to run. Zero:
	// no promise made yet, and the pool claims nothing until one is. No
	// execution outlives it: one still running at
	// the deadline is cancelled and its result dropped (no receipt, no
	// retry: the claim is presumed revoked), so an effect never runs here
	// and elsewhere at once, and no claim round starts with less than
	// LivenessMin of it left. Lapse cancels every execution at once (the
	// promise was refused: the incarnation was superseded or retired).
	Liveness    func() time.Time
	LivenessMin time.Duration
	// Policies replaces, by kind, the retry policy the kind's registration
	// gave (a binary's own policy for a built-in kind, say http.request's).
	// A kind no registration serves is a ConfigError.
	Policies map[string]RetryPolicy
	// Logger receives store failures and effects the pool gave up on at
	// Warn, dropped results at Info, retried attempts at Debug, each with
	// the worker, world, intent and kind (nil: discarded).
	Logger *slog.Logger
	// Observe, when set, is called synchronously after each completion
	// attempt (each Complete call); it must not block. Metrics read it.
	Observe func(EffectEvent)
	// Tracer writes an orrery.effect span per claimed effect, the adapter's
	// Execute calls under it, and an orrery.receipt span for its
	// completion (nil: the global provider, a no-op unless the binary
	// installs an SDK).
	Tracer trace.TracerProvider
	// Links connects each effect span to the span of the world cycle that
	// published the intent, and records each receipt span for the cycle
	// that consumes the receipt (optional; *plane.TraceLinks, shared by
	// the process's hosts).
	Links Links
}

// Links hands span contexts over the hops that pass through the durable
// store, within one process. *plane.TraceLinks implements it; this package
// names only what it uses, so it need not import the plane.
type Links interface {
	// Intent is the span of the cycle that published intent hash.
	Intent(hash string) (trace.SpanContext, bool)
	// PutInbox records sc as the writer of world's inbox item seq.
	PutInbox(world string, seq uint64, sc trace.SpanContext)
}

// EffectEvent is one completion attempt of a pool (Config.Observe).
type EffectEvent struct {
	World      string
	IntentHash string
	Kind       string
	Attempt    int                 // the claim's attempt (EffectItem.Attempt)
	Status     vocab.ReceiptStatus // of the receipt presented
	Dup        bool                // another claim's receipt was first
	Err        error               // the store's answer, nil when it took the receipt (or Dup)
	InboxSeq   uint64              // the receipt's inbox seq, when Err is nil
	// Dispatch runs from the intent's EnqueuedAt (the store's clock) to
	// this completion's answer (the executor's clock): the effect's whole
	// time in the plane, queueing, retries and store calls included.
	Dispatch time.Duration
	// Exec is the time spent in the adapter's Execute calls for this
	// claim, retries included and the backoff between them excluded.
	Exec time.Duration
}

// Stats counts what a pool did (see Pool.Stats).
type Stats struct {
	Claimed    uint64 // effects claimed
	Attempts   uint64 // Execute calls, retries included
	Completed  uint64 // receipts this pool delivered
	Duplicates uint64 // completions answered dup=true: another claim's receipt was first
	ClaimLost  uint64 // completions refused (store.ErrClaimLost): another claim owns the effect
	Dropped    uint64 // results left undelivered because the pool stopped (the reaper requeues them)
	Released   uint64 // claims handed back without a receipt, claimable again at once (see Stop, RetryPolicy.UntilKnown)
	Retried    uint64 // failed executions handed back with a retry time (store RetryLater)
}

// Pool claims, executes and completes effects. Create it with NewPool;
// run it with Run.
type Pool struct {
	st     Store
	ex     actor.Executor
	cfg    Config
	budget time.Duration
	kinds  []string // sorted
	byKind map[string]Registration
	log    *slog.Logger
	tr     trace.Tracer

	running atomic.Bool

	mu       sync.Mutex
	wake     actor.Parker // the running loop's; nil when not running
	inflight int
	held     map[claimKey]time.Time // executing claims → their expiry (executor clock)
	// watch are the executing claims' liveness cancels (Config.Liveness).
	watch    map[claimKey]*liveWatch
	draining bool
	// releasing: Stop ran out of time, so what is abandoned now is handed
	// back at once rather than left to expire (a crash's Run cancel).
	releasing bool
	done      chan struct{}      // closed when the running Run returns; nil when not running
	abort     context.CancelFunc // ends the running Run's executions
	stats     Stats
}

type claimKey struct {
	hash    string
	attempt int
}

// NewPool returns a pool serving the kinds of regs. Each kind must be
// served by one adapter.
func NewPool(st Store, cfg Config, regs ...Registration) (*Pool, error) {
	if st == nil {
		return nil, &ConfigError{Field: "Store", Reason: "required"}
	}
	if err := store.CheckID("adapter", "worker", cfg.Worker); err != nil {
		return nil, &ConfigError{Field: "Worker", Reason: err.Error()}
	}
	if cfg.Executor == nil {
		return nil, &ConfigError{Field: "Executor", Reason: "required"}
	}
	switch {
	case cfg.Concurrency < 0 || cfg.Batch < 0 || cfg.ClaimTTL < 0:
		return nil, &ConfigError{Field: "Config", Reason: "Concurrency, Batch and ClaimTTL must not be negative"}
	case cfg.Batch > store.MaxBatch:
		return nil, &ConfigError{Field: "Batch", Reason: fmt.Sprintf("at most %d", store.MaxBatch)}
	case cfg.ClaimTTL > store.MaxTTL:
		return nil, &ConfigError{Field: "ClaimTTL", Reason: fmt.Sprintf("at most %v", store.MaxTTL)}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.Batch == 0 {
		cfg.Batch = min(cfg.Concurrency, store.MaxBatch)
	}
	if cfg.ClaimTTL == 0 {
		cfg.ClaimTTL = 30 * time.Second
	}
	if len(regs) == 0 {
		return nil, &ConfigError{Field: "Registration", Reason: "a pool needs at least one adapter"}
	}
	p := &Pool{
		st: st, ex: cfg.Executor, cfg: cfg, budget: cfg.ClaimTTL - cfg.ClaimTTL/10,
		byKind: map[string]Registration{}, held: map[claimKey]time.Time{}, watch: map[claimKey]*liveWatch{}, log: cfg.Logger,
		tr: otrace.Tracer(cfg.Tracer),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	for _, r := range regs {
		if r.Adapter == nil {
			return nil, &ConfigError{Field: "Registration", Reason: "nil adapter"}
		}
		if why := r.Policy.invalid(); why != "" {
			return nil, &ConfigError{Field: "RetryPolicy", Reason: why}
		}
		r.Policy = r.Policy.normal()
		ks := r.Adapter.Kinds()
		if len(ks) == 0 {
			return nil, &ConfigError{Field: "Registration", Reason: fmt.Sprintf("%T serves no kind", r.Adapter)}
		}
		for _, k := range ks {
			if err := store.CheckID("adapter", "kind", k); err != nil {
				return nil, &ConfigError{Field: "Kinds", Reason: err.Error()}
			}
			if _, dup := p.byKind[k]; dup {
				return nil, &ConfigError{Field: "Kinds", Reason: "kind " + k + " is served twice"}
			}
			p.byKind[k] = r
			p.kinds = append(p.kinds, k)
		}
	}
	for k, pol := range cfg.Policies {
		r, ok := p.byKind[k]
		if !ok {
			return nil, &ConfigError{Field: "Policies", Reason: "no adapter serves kind " + k}
		}
		if why := pol.invalid(); why != "" {
			return nil, &ConfigError{Field: "Policies", Reason: k + ": " + why}
		}
		r.Policy = pol.normal()
		p.byKind[k] = r
	}
	if cfg.Kinds != nil {
		var only []string
		for _, k := range cfg.Kinds {
			if _, ok := p.byKind[k]; !ok {
				return nil, &ConfigError{Field: "Kinds", Reason: "no adapter serves kind " + k}
			}
			only = append(only, k)
		}
		if len(only) == 0 {
			return nil, &ConfigError{Field: "Kinds", Reason: "a pool needs at least one kind to claim"}
		}
		p.kinds = only
	}
	slices.Sort(p.kinds)
	p.kinds = slices.Compact(p.kinds)
	return p, nil
}

// Kinds returns the effect kinds the pool claims, sorted.
func (p *Pool) Kinds() []string { return slices.Clone(p.kinds) }

// Stats returns the pool's counters so far.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Drain makes a running pool stop claiming, finish the effects it is
// executing (their receipts delivered), and return nil from Run: a planned
// stop that leaves nothing for the reaper. Cancelling Run's context
// instead abandons the executing effects, whose claims then expire (a
// crash, as far as the queue can tell); Stop bounds a Drain in time.
func (p *Pool) Drain() {
	p.mu.Lock()
	p.draining = true
	w := p.wake
	p.mu.Unlock()
	if w != nil {
		w.Unpark()
	}
}

// Stop is the planned stop (a deploy, SIGTERM): it drains the pool (no new
// claim; the effects executing finish and their receipts are delivered, so
// no call that completed is made again elsewhere) and waits for Run to
// return, until ctx is done. Then it cancels the executions still running
// and hands their claims back to the queue at once (store ReleaseEffect),
// so another pool claims them without waiting for the claim TTL, logging
// each; it returns once Run has returned, with ctx's error if it had to
// cut executions short. A pool that is not running stops at once, and its
// next Run returns nil without claiming.
func (p *Pool) Stop(ctx context.Context) error {
	p.Drain()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.releasing = true
	abort, n := p.abort, p.inflight
	p.mu.Unlock()
	p.log.Warn("adapter: stop timed out; releasing the effects still executing for another claim",
		"worker", p.cfg.Worker, "executing", n)
	if abort != nil {
		abort()
	}
	<-done
	return fmt.Errorf("adapter: stop: %d effects released unfinished: %w", n, ctx.Err())
}

// Run claims and executes effects until ctx is done (it returns ctx's
// error) or a Drain completes (it returns nil). Either way every execution
// it started has ended when it returns. It parks between claims, woken by
// a store.TopicEffects hint, by an execution that frees a slot, or at the
// nearest expiry of a claim it holds; it never polls. Store failures are
// retried with backoff, Watch included: a pool whose store cannot be
// watched yet waits and tries again until ctx is done.
func (p *Pool) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer p.running.Store(false)
	wake := p.ex.NewParker()
	stop, err := seam.Watch(ctx, p.st, p.ex, func(n int) time.Duration { return storeBackoff(n, p.ex.Uint64()) },
		func(err error, n int) {
			p.log.Warn("adapter: watch failed", "worker", p.cfg.Worker, "err", err, "failures", n)
		}, wake, store.TopicEffects)
	if err != nil {
		return err
	}
	defer stop()
	p.mu.Lock()
	p.wake = wake
	p.mu.Unlock()

	execCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	p.mu.Lock()
	p.done, p.abort = done, cancel
	p.mu.Unlock()
	var timer actor.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		cancel()
		p.waitIdle(wake)
		p.mu.Lock()
		p.wake, p.done, p.abort = nil, nil, nil
		p.mu.Unlock()
		close(done)
	}()
	arm := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer = p.ex.AfterFunc(max(d, 0), wake.Unpark)
	}

	failures := 0
	// The nearest retry time the store reported (NextRetry), as a wait
	// from retryFrom on the executor's clock.
	var (
		retryWait time.Duration
		retryOK   bool
		retryFrom time.Time
	)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.mu.Lock()
		free, draining, inflight := p.cfg.Concurrency-p.inflight, p.draining, p.inflight
		p.mu.Unlock()
		if draining && inflight == 0 {
			return nil
		}
		if wait, short := p.livenessShort(); !draining && free > 0 && short {
			// Too little of the liveness promise is left to claim on it:
			// wait for a heartbeat to renew it.
			arm(wait)
			if err := wake.Park(ctx); err != nil {
				return err
			}
			continue
		}
		if !draining && free > 0 {
			n := min(free, p.cfg.Batch)
			now := p.ex.Now()
			items, err := p.st.Claim(ctx, p.cfg.Worker, p.kinds, n, p.cfg.ClaimTTL, p.owner()...)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				failures++
				p.log.Warn("adapter: claim failed", "worker", p.cfg.Worker, "err", err, "failures", failures)
				arm(storeBackoff(failures, p.ex.Uint64()))
				if err := wake.Park(ctx); err != nil {
					return err
				}
				continue
			}
			failures = 0
			for _, it := range items {
				p.start(execCtx, wake, it, now)
			}
			if len(items) == n {
				continue // the queue may hold more
			}
			// Fewer than asked for: an effect may still wait for its
			// retry time, which no hint announces when it comes. Asked
			// after every such round, not only an empty one, so a retry
			// never waits for an unrelated execution's end.
			retryWait, retryOK = p.nextRetry(ctx)
			retryFrom = p.ex.Now()
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		now := p.ex.Now()
		at, ok := p.nearestExpiry(now)
		if due := retryFrom.Add(retryWait); retryOK && !due.After(now) {
			// Passed: the rounds since claimed it, or will (a freed slot
			// wakes the loop), and a round that finds nothing asks anew.
			retryOK = false
		} else if retryOK && !draining && (!ok || due.Before(at)) {
			at, ok = due, true
		}
		if ok {
			arm(at.Sub(now))
		}
		if err := wake.Park(ctx); err != nil {
			return err
		}
	}
}

// nextRetry asks the store how long until the nearest retry of the pool's
// kinds (ok=false: none waits). On a failure, which it logs, it answers a
// store backoff: the loop then claims again, and a round that finds
// nothing asks again, so a retry is never left waiting for a hint that
// never comes.
func (p *Pool) nextRetry(ctx context.Context) (time.Duration, bool) {
	wait, ok, err := p.st.NextRetry(ctx, p.kinds)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("adapter: next retry time unknown", "worker", p.cfg.Worker, "err", err)
		}
		return storeBackoff(1, p.ex.Uint64()), true
	}
	return wait, ok
}

// owner is the claim option of Config.Node (none without it).
func (p *Pool) owner() []store.ClaimOption {
	if p.cfg.Node == "" {
		return nil
	}
	return []store.ClaimOption{store.ClaimFor(p.cfg.Node, p.cfg.Incarnation)}
}

// storeBackoff is the wait after failures consecutive store failures:
// 50ms doubling to 5s, half jittered.
func storeBackoff(failures int, r uint64) time.Duration {
	return RetryPolicy{Base: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5}.Delay(failures, r)
}

// nearestExpiry is the earliest expiry after now of a claim the pool
// holds: the moment that claim may be reaped and the queue change under a
// hint the pool could miss. An expiry already passed was acted on.
func (p *Pool) nearestExpiry(now time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var at time.Time
	ok := false
	for _, exp := range p.held {
		if exp.After(now) && (!ok || exp.Before(at)) {
			at, ok = exp, true
		}
	}
	return at, ok
}

// waitIdle parks until every execution has ended; each one unparks wake
// as it ends.
func (p *Pool) waitIdle(wake actor.Parker) {
	seam.ParkUntil(wake, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.inflight == 0
	})
}

// start executes one claimed item on its own goroutine. claimedAt is the
// executor's time just before the claim: the claim's budget and expiry
// count from it, so they never end later than the store's.
func (p *Pool) start(ctx context.Context, wake actor.Parker, it vocab.EffectItem, claimedAt time.Time) {
	key := claimKey{it.IntentHash, it.Attempt}
	p.mu.Lock()
	p.inflight++
	p.stats.Claimed++
	p.held[key] = claimedAt.Add(p.cfg.ClaimTTL)
	ctx, w := p.watchLiveness(ctx, key)
	p.mu.Unlock()
	p.ex.Go(func() {
		defer func() {
			w.stop()
			p.mu.Lock()
			p.inflight--
			delete(p.held, key)
			delete(p.watch, key)
			p.mu.Unlock()
			wake.Unpark()
		}()
		p.execute(ctx, it, claimedAt.Add(p.budget), claimedAt.Add(p.cfg.ClaimTTL))
	})
}

// execute runs one claim: the attempts, then the receipt, under the
// claim's orrery.effect span. The span is a root linked to the cycle that
// published the intent: the claim was started by the durable queue, not
// by any caller's context.
func (p *Pool) execute(ctx context.Context, it vocab.EffectItem, deadline, expiry time.Time) {
	var links []trace.Link
	if p.cfg.Links != nil {
		links = otrace.Link(p.cfg.Links.Intent(it.IntentHash))
	}
	ctx, sp := p.tr.Start(ctx, otrace.Effect, trace.WithNewRoot(), trace.WithTimestamp(p.ex.Now()),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(otrace.World.String(it.World), otrace.IntentHash.String(it.IntentHash),
			otrace.Kind.String(it.Kind), otrace.Attempt.Int(it.Attempt), otrace.Worker.String(p.cfg.Worker)))
	reg, ok := p.byKind[it.Kind]
	var res effect.Result
	var attempts int
	var exec time.Duration
	var retry retryAfter
	if !ok {
		// Unreachable through Claim, which is by our kinds; a terminal
		// answer still beats an effect that circulates forever.
		res = effect.Result{Status: vocab.ReceiptError, Body: effect.Failure{Error: "no adapter serves kind " + it.Kind}}
	} else {
		var end ending
		res, attempts, exec, retry, end = p.attempt(ctx, reg, it, deadline)
		// The effect's executions so far, this one included (a retry is
		// a claim, and a span, of its own).
		sp.SetAttributes(otrace.Executions.Int(attempts))
		switch end {
		case later:
			otrace.End(sp, p.ex.Now(), p.retryLater(ctx, it, retry, expiry))
			return
		case stopped:
			if errors.Is(context.Cause(ctx), errLivenessLapsed) {
				// The store may already have handed the effect to another
				// node: nothing more is said for this claim.
				p.drop(it, "the node's liveness promise ran out during execution")
				otrace.End(sp, p.ex.Now(), errLivenessLapsed)
				return
			}
			otrace.End(sp, p.ex.Now(), p.abandon(ctx, it, "pool stopped during execution"))
			return
		case unknownYet:
			// Released, not completed: a guess would be a receipt, and
			// the effect is safe to run again until its outcome is known.
			p.release(ctx, it, "the outcome is still unknown and the claim's budget ran out; running it again under a new claim")
			otrace.End(sp, p.ex.Now(), errReleased)
			return
		}
	}
	r := p.receipt(it, res, attempts)
	if r.Status != vocab.ReceiptOK {
		kv := []any{"status", string(r.Status), "executions", attempts}
		if f, isFailure := res.Body.(effect.Failure); isFailure {
			kv = append(kv, "err", f.Error)
		}
		p.log.Warn("adapter: effect did not succeed; its receipt says so", p.attrs(it, kv...)...)
	}
	sp.SetAttributes(otrace.Status.String(string(r.Status)))
	p.complete(ctx, it, r, exec, expiry)
	otrace.End(sp, p.ex.Now(), nil)
}

// errDropped is the status of an effect span whose result was dropped.
var errDropped = errors.New("adapter: result dropped; the claim will expire and be reaped")

// errRetrying is the status of an effect span whose execution failed and
// whose next attempt is scheduled.
var errRetrying = errors.New("adapter: attempt failed; retrying after a backoff")

// errReleased is the status of an effect span whose claim was handed back.
var errReleased = errors.New("adapter: claim released without a receipt; the effect runs again")

// ending is how a claim's attempts ended.
type ending int

const (
	resulted   ending = iota // a result to deliver
	stopped                  // the pool stopped first: no result
	unknownYet               // an until-known effect ran out of budget: no result, the claim goes back
	later                    // a failure the policy retries: the claim goes back with a retry time
)

// retryAfter is a failed execution the policy runs again after delay.
type retryAfter struct {
	delay time.Duration
	err   error
	n     int // the attempt that failed
}

// attrs are the log attributes of one claim, then kv.
func (p *Pool) attrs(it vocab.EffectItem, kv ...any) []any {
	return append([]any{"worker", p.cfg.Worker, "world", it.World, "intent", it.IntentHash, "kind", it.Kind, "attempt", it.Attempt}, kv...)
}

// attempt runs one execution of the claim, attempt number Failures+1 by
// the effect's policy (its kind's, or the intent's own), and measures the
// time spent in Execute. A failure the policy retries ends in later, with
// the backoff before the next attempt: the retry is another claim, made
// after the store has held the effect that long, no sooner than an answer
// carried by the error asks (effect.RetryAnswer). An execution that runs
// out of its claim's budget is retried the same way. Giving up on an
// Unknown error (or an overrun) is a timeout receipt, never an error one:
// the effect may have happened; giving up on an error that carries an
// answer delivers that answer. Under an UntilKnown policy it does not give
// up: a budget that runs out ends in unknownYet.
func (p *Pool) attempt(ctx context.Context, reg Registration, it vocab.EffectItem, deadline time.Time) (res effect.Result, attempts int, exec time.Duration, retry retryAfter, end ending) {
	bctx, cancel := actor.WithDeadline(ctx, p.ex, deadline)
	defer cancel()
	pol, perr := reg.Policy.forIntent(it.Retry)
	if perr != nil {
		p.log.Warn("adapter: the intent's own retry policy is unusable; its kind's applies", p.attrs(it, "err", perr)...)
	}
	n := it.Failures + 1
	p.mu.Lock()
	p.stats.Attempts++
	p.mu.Unlock()
	t0 := p.ex.Now()
	res, err := call(bctx, reg.Adapter, it)
	exec = p.ex.Now().Sub(t0)
	switch {
	case ctx.Err() != nil:
		return effect.Result{}, n, exec, retry, stopped
	case err == nil:
		return res, n, exec, retry, resulted
	case effect.IsPermanent(err):
		return failure(vocab.ReceiptError, err.Error(), n), n, exec, retry, resulted
	case pol.nonRetryable(err):
		return lastWord(err, givenUp(err), "", n), n, exec, retry, resulted
	case bctx.Err() != nil && pol.UntilKnown:
		return effect.Result{}, n, exec, retry, unknownYet
	case pol.limit(it.Kind) > 0 && n >= pol.limit(it.Kind):
		if bctx.Err() != nil {
			return lastWord(err, vocab.ReceiptTimeout, "the claim's execution budget ran out: ", n), n, exec, retry, resulted
		}
		if pol.Attempts == 0 && n > 1 && givenUp(err) == vocab.ReceiptError {
			// The default bound, not one the effect chose: this attempt
			// surely did nothing, but an earlier one may have (sent, its
			// answer lost), and nothing records which. So the receipt
			// says unknown, never "it did not happen".
			return lastWord(err, vocab.ReceiptTimeout, fmt.Sprintf("gave up after %d attempts (an earlier one may have taken effect); the last: ", n), n), n, exec, retry, resulted
		}
		return lastWord(err, givenUp(err), "", n), n, exec, retry, resulted
	}
	// A failed attempt the policy allows again is retried, one that ran
	// out of its claim's budget included (it may have happened: a later
	// attempt, or the timeout receipt once retries are spent, says so).
	d := pol.Delay(n, p.ex.Uint64())
	if _, after, ok := effect.AnswerOf(err); ok {
		d = max(d, after)
	}
	p.log.Debug("adapter: attempt failed; retrying", p.attrs(it, "err", err, "execution", n, "backoff", d)...)
	return effect.Result{}, n, exec, retryAfter{delay: d, err: err, n: n}, later
}

// givenUp is the status of the receipt for an attempt error retries did
// not fix: timeout (unknown) when the effect may have happened.
func givenUp(err error) vocab.ReceiptStatus {
	if effect.IsUnknown(err) {
		return vocab.ReceiptTimeout
	}
	return vocab.ReceiptError
}

// lastWord is the result of an attempt error the policy does not retry:
// the answer it carries (effect.RetryAnswer), or a failure of status s.
func lastWord(err error, s vocab.ReceiptStatus, prefix string, attempts int) effect.Result {
	if last, _, ok := effect.AnswerOf(err); ok {
		return last
	}
	return failure(s, prefix+err.Error(), attempts)
}

func failure(s vocab.ReceiptStatus, msg string, attempts int) effect.Result {
	return effect.Result{Status: s, Body: effect.Failure{Error: msg, Attempts: attempts}}
}

// call runs Execute, turning a panic or an invalid status into a
// permanent error: nothing an adapter does crosses the pool's boundary.
func call(ctx context.Context, a effect.Adapter, it vocab.EffectItem) (res effect.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = effect.Result{}, effect.Permanent(fmt.Errorf("adapter panicked: %v", r))
		}
	}()
	res, err = a.Execute(ctx, it)
	if err == nil {
		if !res.Status.Valid() {
			return effect.Result{}, effect.Permanent(fmt.Errorf("adapter answered status %q, not ok, error or timeout", res.Status))
		}
	}
	return res, err
}

// MaxReceiptBytes is the largest receipt payload a pool completes: the
// largest input a world's kernel reads, which is also the store's receipt
// limit. A result whose receipt would be larger is delivered as a short
// receipt that says so (see Pool).
const MaxReceiptBytes = world.MaxInputBytes

// receipt encodes res as the item's receipt (world.EncodeReceipt), so the
// world reads the status in-band. A body that cannot be encoded, or a
// receipt over MaxReceiptBytes, becomes a short receipt saying so, of the
// status undeliverable gives.
func (p *Pool) receipt(it vocab.EffectItem, res effect.Result, attempts int) vocab.Receipt {
	var body []byte
	if res.Body != nil {
		b, err := event.Marshal(res.Body)
		if err != nil {
			res = failure(undeliverable(res.Status), "the adapter's "+string(res.Status)+" result cannot be encoded: "+err.Error(), attempts)
			b, _ = event.Marshal(res.Body)
		}
		body = b
	}
	r := world.Receipt{IntentHash: it.IntentHash, Kind: it.Kind, Status: res.Status, Body: body, Retry: uint64(it.Retries)}
	payload, err := world.EncodeReceipt(r)
	if len(body) > MaxReceiptBytes || err == nil && len(payload) > MaxReceiptBytes {
		// The kernel could not read it: a short receipt instead, whose
		// status keeps its promise (an effect that happened is unknown to
		// the world, not failed) and whose body says what happened.
		s := undeliverable(res.Status)
		size := max(len(payload), len(body))
		p.log.Warn("adapter: the result is too large for a receipt; completing a short one instead",
			p.attrs(it, "status", string(res.Status), "bytes", size, "limit", MaxReceiptBytes, "receipt", string(s))...)
		r.Status = s
		r.Body, _ = event.Marshal(effect.Failure{Attempts: attempts, Error: fmt.Sprintf(
			"the adapter's %s result is %d bytes or more as a receipt, over the %d-byte limit of what a world can read; its body is lost",
			res.Status, size, MaxReceiptBytes)})
		res.Status = s
		payload, err = world.EncodeReceipt(r)
	}
	if err != nil {
		// Not an intent the kernel made (its hash is not one): the world
		// cannot read any receipt for it, but a terminal one still ends it.
		p.log.Error("adapter: receipt cannot be encoded", p.attrs(it, "err", err)...)
		payload = body
		if payload == nil {
			payload, _ = event.Marshal(effect.Failure{Error: err.Error()})
		}
	}
	return vocab.Receipt{Status: res.Status, Payload: payload}
}

// complete delivers the receipt, under an orrery.receipt span (a child of
// ctx's effect span) that the cycle consuming the receipt links to. A
// store failure is retried with backoff until it succeeds, the pool stops,
// or the store says the effect is no longer this claim's: both
// ErrClaimLost and dup=true mean another claim's receipt is (or will be)
// the one the world reads. exec is the claim's time in Execute, for
// Observe.
//
// Nothing is completed once the claim's expiry has passed (a process
// paused or starved past it, a store outage that outlasted it): the
// result is dropped and the reaper requeues the effect for a new claim,
// as a world's holder does nothing after its lease's expiry. The store
// would still accept the claim until someone claims again, but a result
// made after the claim ran out (a timeout counted across a pause, say) is
// not one the claim vouches for.
func (p *Pool) complete(ctx context.Context, it vocab.EffectItem, r vocab.Receipt, exec time.Duration, expiry time.Time) {
	ctx, sp := p.tr.Start(ctx, otrace.Receipt, trace.WithTimestamp(p.ex.Now()), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(otrace.World.String(it.World), otrace.IntentHash.String(it.IntentHash),
			otrace.Status.String(string(r.Status))))
	var spanErr error
	defer func() { otrace.End(sp, p.ex.Now(), spanErr) }()
	replaced := false
	for failures := 1; ; failures++ {
		if !p.ex.Now().Before(expiry) {
			p.drop(it, "the claim expired before its receipt was delivered")
			spanErr = errDropped
			return
		}
		seq, dup, err := p.st.Complete(ctx, it.IntentHash, it.ClaimOf(), r)
		p.observe(it, r, seq, dup, err, exec)
		switch {
		case err == nil:
			p.mu.Lock()
			if dup {
				p.stats.Duplicates++
			} else {
				p.stats.Completed++
			}
			p.mu.Unlock()
			sp.SetAttributes(otrace.Seq.Int64(int64(seq)), otrace.Duplicate.Bool(dup))
			if !dup && p.cfg.Links != nil && sp.IsRecording() {
				p.cfg.Links.PutInbox(it.World, seq, sp.SpanContext())
			}
			return
		case errors.Is(err, store.ErrClaimLost):
			p.mu.Lock()
			p.stats.ClaimLost++
			p.mu.Unlock()
			p.log.Info("adapter: claim lost; another claim's receipt counts", p.attrs(it)...)
			spanErr = err
			return
		case errors.Is(err, store.ErrNotFound):
			p.drop(it, "the effect's record is gone")
			spanErr = err
			return
		case errors.Is(err, store.ErrInvalid) && !replaced:
			// The store refuses this receipt: say so in a receipt it
			// accepts rather than retrying forever, keeping the promise
			// of the status (an effect that happened is not an error).
			replaced = true
			s := undeliverable(r.Status)
			p.log.Warn("adapter: the store refused the receipt; completing a short one instead", p.attrs(it, "err", err, "status", string(s))...)
			r = p.receipt(it, failure(s, "the store refused the adapter's "+string(r.Status)+" receipt: "+err.Error(), 0), 0)
			sp.SetAttributes(otrace.Status.String(string(r.Status)))
			continue
		}
		// Any other failure may be transient, and may even have been
		// written (an answer lost): retried until the claim expires, and a
		// retry of a written completion answers dup=true.
		if ctx.Err() != nil {
			spanErr = p.abandon(ctx, it, "pool stopped before the receipt was delivered")
			return
		}
		p.log.Warn("adapter: complete failed", p.attrs(it, "err", err, "failures", failures)...)
		if actor.Sleep(ctx, p.ex, storeBackoff(failures, p.ex.Uint64())) != nil {
			spanErr = p.abandon(ctx, it, "pool stopped before the receipt was delivered")
			return
		}
	}
}

// observe reports one completion attempt to Config.Observe.
func (p *Pool) observe(it vocab.EffectItem, r vocab.Receipt, seq uint64, dup bool, err error, exec time.Duration) {
	if p.cfg.Observe == nil {
		return
	}
	ev := EffectEvent{World: it.World, IntentHash: it.IntentHash, Kind: it.Kind, Attempt: it.Attempt,
		Status: r.Status, Dup: dup, Err: err, Dispatch: p.ex.Now().Sub(it.EnqueuedAt), Exec: exec}
	if err == nil {
		ev.InboxSeq = seq
	}
	p.cfg.Observe(ev)
}

// undeliverable is the status of the short receipt that replaces one of
// status s that cannot be delivered: an effect that happened (ok) but
// whose result the world cannot be given is unknown to the world, never
// failed.
func undeliverable(s vocab.ReceiptStatus) vocab.ReceiptStatus {
	if s == vocab.ReceiptOK {
		return vocab.ReceiptTimeout
	}
	return s
}

// abandon ends a claim the pool stopped before its receipt: released at
// once when a Stop ran out of time (a planned stop hands its work over),
// else dropped for the reaper (a cancelled Run: a crash, as far as the
// queue can tell). It returns the effect span's status.
func (p *Pool) abandon(ctx context.Context, it vocab.EffectItem, why string) error {
	p.mu.Lock()
	releasing := p.releasing
	p.mu.Unlock()
	if releasing {
		p.release(ctx, it, why+"; the stop timed out")
		return errReleased
	}
	p.drop(it, why)
	return errDropped
}

// retryLater hands the claim back to the store with its retry time
// (store RetryLater): the store holds the effect for r.delay by its own
// clock, counts the failure and keeps its message, so the schedule
// survives this pool. A store failure is retried until the claim's expiry;
// past it, or once another claim owns the effect, the result is dropped
// (the reaper requeues an expired claim, and the effect then runs again
// sooner than its schedule said, which at-least-once allows). It returns
// the effect span's status.
func (p *Pool) retryLater(ctx context.Context, it vocab.EffectItem, r retryAfter, expiry time.Time) error {
	msg := r.err.Error()
	if len(msg) > store.MaxReasonBytes {
		msg = msg[:store.MaxReasonBytes]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	delay := min(r.delay, store.MaxTTL)
	rctx := context.WithoutCancel(ctx)
	for failures := 1; ; failures++ {
		if !p.ex.Now().Before(expiry) {
			p.drop(it, "the claim expired before its retry was scheduled")
			return errDropped
		}
		cctx, cancel := actor.WithTimeout(rctx, p.ex, releaseTimeout)
		err := p.st.RetryLater(cctx, it.IntentHash, it.ClaimOf(), delay, msg)
		cancel()
		switch {
		case err == nil:
			p.mu.Lock()
			p.stats.Retried++
			p.mu.Unlock()
			return errRetrying
		case errors.Is(err, store.ErrClaimLost), errors.Is(err, store.ErrNotFound):
			p.drop(it, "the effect is no longer this claim's: "+err.Error())
			return err
		}
		p.log.Warn("adapter: scheduling a retry failed", p.attrs(it, "err", err, "failures", failures)...)
		// The pool stopping ends the tries: the claim then expires.
		if actor.Sleep(ctx, p.ex, storeBackoff(failures, p.ex.Uint64())) != nil {
			p.drop(it, "pool stopped before its retry was scheduled")
			return errDropped
		}
	}
}

// releaseTimeout bounds the one store call that hands a claim back; the
// claim's expiry is the fallback.
const releaseTimeout = 5 * time.Second

// release hands the claim of it back to the queue without a receipt, so
// that it is claimed again at once rather than after its TTL. It runs
// after ctx (the execution's) may have ended.
func (p *Pool) release(ctx context.Context, it vocab.EffectItem, why string) {
	rctx, cancel := actor.WithTimeout(context.WithoutCancel(ctx), p.ex, releaseTimeout)
	defer cancel()
	if err := p.st.ReleaseEffect(rctx, it.IntentHash, it.ClaimOf()); err != nil {
		p.drop(it, why+"; releasing the claim failed: "+err.Error())
		return
	}
	p.mu.Lock()
	p.stats.Released++
	p.mu.Unlock()
	p.log.Warn("adapter: claim released without a receipt; the effect will run again under a new claim", p.attrs(it, "why", why)...)
}

func (p *Pool) drop(it vocab.EffectItem, why string) {
	p.mu.Lock()
	p.stats.Dropped++
	p.mu.Unlock()
	p.log.Info("adapter: result dropped; the claim will expire and be reaped", p.attrs(it, "why", why)...)
}

// ---- the liveness bound (Config.Liveness) ----

// errLivenessLapsed is the cause of an execution cancelled because the
// node's liveness promise ran out (or was refused) before it ended.
var errLivenessLapsed = errors.New("adapter: the node's liveness promise ran out; the store may hand the effect to another node")

// liveWatch cancels one execution when the liveness deadline passes: a
// timer on the executor's clock, armed for the deadline known and armed
// again for a later one while heartbeats move it forward.
type liveWatch struct {
	p      *Pool
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  actor.Timer
	done   bool
}

// watchLiveness returns the execution's context, cancelled (cause
// errLivenessLapsed) at the liveness deadline. Called under p.mu.
func (p *Pool) watchLiveness(ctx context.Context, key claimKey) (context.Context, *liveWatch) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &liveWatch{p: p, cancel: cancel}
	if p.cfg.Liveness == nil {
		return ctx, w
	}
	p.watch[key] = w
	w.check()
	return ctx, w
}

// check cancels the execution if the deadline has passed, and otherwise
// arms the timer for it.
func (w *liveWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	dl := w.p.cfg.Liveness()
	if dl.IsZero() {
		return // no promise made: the claim lasts its TTL, as without one
	}
	left := dl.Sub(w.p.ex.Now())
	if left <= 0 {
		w.done = true
		w.cancel(errLivenessLapsed)
		return
	}
	w.timer = w.p.ex.AfterFunc(left, w.check)
}

// lapse cancels the execution at once.
func (w *liveWatch) lapse() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.cancel(errLivenessLapsed)
}

func (w *liveWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.cancel(nil)
}

// Lapse cancels every execution in progress as if the liveness deadline
// had passed: no receipt and no retry for any of them. A node calls it
// when the store refuses its heartbeat (ErrFenced: its incarnation was
// superseded or retired), whose claims the store has requeued already.
func (p *Pool) Lapse() {
	p.mu.Lock()
	ws := make([]*liveWatch, 0, len(p.watch))
	for _, w := range p.watch {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	for _, w := range ws {
		w.lapse()
	}
}

// livenessShort reports whether no liveness promise is known yet, or less
// than LivenessMin of it is left (a claim round would start on a promise about to run
// out), and how long to wait before looking again.
func (p *Pool) livenessShort() (time.Duration, bool) {
	if p.cfg.Liveness == nil {
		return 0, false
	}
	dl := p.cfg.Liveness()
	// No promise yet (the first heartbeat has not landed): no claim
	// either, or its execution would run unbounded by one.
	if !dl.IsZero() && dl.Sub(p.ex.Now()) >= max(p.cfg.LivenessMin, time.Nanosecond) {
		return 0, false
	}
	return max(p.cfg.LivenessMin/4, 10*time.Millisecond), true
}
