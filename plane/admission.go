package plane

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
)

// Limits bound a node's ingress: past one, Send, Call, the ops API's
// enqueues and a workflow run's signals are refused with ErrOverloaded and
// write nothing. A world's own effects, timers and fabric sends are not
// ingress and are never refused (their deliveries may wait, never drop).
type Limits struct {
	// MaxInbox bounds each world's undrained inbox (0: unbounded). The
	// store checks it in the transaction that would insert the item.
	MaxInbox int
	// MaxEffectQueue bounds the pending effects of every kind (0:
	// unbounded) and MaxEffectQueueKind a kind of its own (overriding
	// MaxEffectQueue; 0 there: that kind unbounded). The bound is global:
	// while any kind is past its bound every new ingress is refused,
	// because the store cannot tell which world's next step will ask for
	// that kind, and more input means more of that work.
	MaxEffectQueue     int
	MaxEffectQueueKind map[string]int
	// Refresh is how old the cached pending-effect counts may be before
	// an ingress reads them again (default 1s): one indexed count per
	// Refresh per node, never one per request.
	Refresh time.Duration
}

// Refusal reasons, the label of orrery_ingress_refused_total.
const (
	RefusedInbox       = "inbox"
	RefusedEffectQueue = "effect_queue"
)

// Overload details an ErrOverloaded refusal (errors.As).
type Overload struct {
	Reason     string        // RefusedInbox or RefusedEffectQueue
	Kind       string        // the effect kind past its bound (RefusedEffectQueue)
	RetryAfter time.Duration // a sensible wait before the same request again
	Err        error         // the store's refusal, when it refused
}

func (o *Overload) Error() string {
	msg := "ingress refused: " + o.Reason
	if o.Kind != "" {
		msg += " (effect kind " + o.Kind + ")"
	}
	msg += fmt.Sprintf(", retry after %s", o.RetryAfter)
	if o.Err != nil {
		msg += ": " + o.Err.Error()
	}
	return msg
}

// Is matches ErrOverloaded and store.ErrOverloaded.
func (o *Overload) Is(target error) bool {
	return target == ErrOverloaded || target == store.ErrOverloaded
}

// Unwrap returns the store's refusal.
func (o *Overload) Unwrap() error { return o.Err }

// RetryAfter is how long a refused caller should wait: the Overload's
// when err is an overload refusal, else 0.
func RetryAfter(err error) time.Duration {
	var o *Overload
	if errors.As(err, &o) {
		return o.RetryAfter
	}
	return 0
}

// Admission applies Limits to ingress. One serves a node (share it
// between its Client, Ops and workflow client); a nil *Admission admits
// everything.
type Admission struct {
	st  store.Store
	ex  actor.Executor
	lim Limits

	mu      sync.Mutex
	pending map[string]int64
	prev    map[string]int64
	readAt  time.Time
	prevAt  time.Time
	reading bool

	refusedInbox, refusedEffects atomic.Uint64

	// full is when the store last refused each world's input for its
	// inbox bound (see refuseFresh).
	fullMu sync.Mutex
	full   map[string]time.Time
}

// fullHold is how long a world the store found at its inbox bound is
// taken as still there by input that cannot be a duplicate. A world
// drains its inbox a batch per commit, and a commit takes about that long
// or longer, so little that would have fit is refused in the meantime.
const fullHold = time.Millisecond

// maxFull bounds the worlds full remembers; past it the expired marks go.
const maxFull = 4096

// refuseFresh answers the refusal of an input that cannot be a duplicate
// (a call under an id drawn for it) without asking the store, when the
// store refused the world's input for its bound less than fullHold ago,
// or while an effect queue is past its bound; nil: ask the store. Under
// overload most input is refused, and a refusal this cheap leaves the
// cores to the work admitted. An input that may be a duplicate always
// goes to the store, whose answer for a duplicate is the accepted item.
func (a *Admission) refuseFresh(ctx context.Context, op, world string) error {
	if a == nil {
		return nil
	}
	if o := a.effectsOver(ctx); o != nil {
		a.refusedEffects.Add(1)
		return errorf(op, ErrOverloaded, world, o)
	}
	if a.lim.MaxInbox == 0 {
		return nil
	}
	now := a.ex.Now()
	a.fullMu.Lock()
	at, ok := a.full[world]
	if ok && now.Sub(at) >= fullHold {
		delete(a.full, world)
		ok = false
	}
	a.fullMu.Unlock()
	if !ok {
		return nil
	}
	a.refusedInbox.Add(1)
	return errorf(op, ErrOverloaded, world, &Overload{Reason: RefusedInbox, RetryAfter: time.Second,
		Err: store.Errorf(op, store.ErrOverloaded, world, "at its inbox bound %d within the last %v", a.lim.MaxInbox, fullHold)})
}

// markFull records that the store refused world's input for its bound.
func (a *Admission) markFull(world string) {
	now := a.ex.Now()
	a.fullMu.Lock()
	defer a.fullMu.Unlock()
	if a.full == nil {
		a.full = map[string]time.Time{}
	}
	if len(a.full) >= maxFull {
		for w, at := range a.full {
			if now.Sub(at) >= fullHold {
				delete(a.full, w)
			}
		}
	}
	a.full[world] = now
}

// NewAdmission returns the admission of limits over st, on ex's clock.
func NewAdmission(st store.Store, ex actor.Executor, limits Limits) (*Admission, error) {
	if st == nil || ex == nil {
		return nil, errorf("admission", ErrInvalid, "", detail("an admission needs a store and an executor"))
	}
	if limits.MaxInbox < 0 || limits.MaxEffectQueue < 0 || limits.Refresh < 0 {
		return nil, errorf("admission", ErrInvalid, "", detail("limits must not be negative"))
	}
	for k, n := range limits.MaxEffectQueueKind {
		if n < 0 || k == "" {
			return nil, errorf("admission", ErrInvalid, "", detail("effect queue bound %q=%d", k, n))
		}
	}
	if limits.Refresh == 0 {
		limits.Refresh = time.Second
	}
	return &Admission{st: st, ex: ex, lim: limits}, nil
}

// Limits returns the limits in force.
func (a *Admission) Limits() Limits {
	if a == nil {
		return Limits{}
	}
	return a.lim
}

// Refused returns how many requests each reason refused since start.
func (a *Admission) Refused() map[string]uint64 {
	if a == nil {
		return map[string]uint64{RefusedInbox: 0, RefusedEffectQueue: 0}
	}
	return map[string]uint64{RefusedInbox: a.refusedInbox.Load(), RefusedEffectQueue: a.refusedEffects.Load()}
}

// bounded returns item with the bound this admission puts on it: the
// world's inbox bound, or store.RefuseNew while an effect queue is past
// its bound (so a duplicate of accepted work still answers as one).
func (a *Admission) bounded(ctx context.Context, item store.InboxItem) (store.InboxItem, *Overload) {
	if a == nil {
		return item, nil
	}
	item.MaxBacklog = a.lim.MaxInbox
	if o := a.effectsOver(ctx); o != nil {
		item.MaxBacklog = store.RefuseNew
		return item, o
	}
	return item, nil
}

// refused turns the store's ErrOverloaded for an item bounded by bounded
// into the plane's error, and counts it.
func (a *Admission) refused(op, world string, over *Overload, err error) error {
	if over != nil {
		a.refusedEffects.Add(1)
		o := *over
		o.Err = err
		return errorf(op, ErrOverloaded, world, &o)
	}
	a.refusedInbox.Add(1)
	a.markFull(world)
	// A world drains its inbox a batch per cycle, usually well within a
	// second: the next second is the first worth trying.
	return errorf(op, ErrOverloaded, world, &Overload{Reason: RefusedInbox, RetryAfter: time.Second, Err: err})
}

// bound is kind's effect queue bound (0: none).
func (a *Admission) bound(kind string) int {
	if n, ok := a.lim.MaxEffectQueueKind[kind]; ok {
		return n
	}
	return a.lim.MaxEffectQueue
}

// effectsOver answers the first kind (in name order) whose pending count
// is past its bound, from counts at most Refresh old. One caller reads
// them when they are stale; the others use the old ones meanwhile. A
// failed read keeps the old counts (admission fails open: the bounds are
// protection, the store's own errors answer the enqueue itself).
func (a *Admission) effectsOver(ctx context.Context) *Overload {
	if a.lim.MaxEffectQueue == 0 && len(a.lim.MaxEffectQueueKind) == 0 {
		return nil
	}
	now := a.ex.Now()
	a.mu.Lock()
	if !a.reading && (a.readAt.IsZero() || now.Sub(a.readAt) >= a.lim.Refresh) {
		a.reading = true
		a.mu.Unlock()
		counts, err := a.st.PendingEffects(ctx)
		a.mu.Lock()
		a.reading = false
		if err == nil {
			a.prev, a.prevAt = a.pending, a.readAt
			a.pending, a.readAt = counts, now
		}
	}
	defer a.mu.Unlock()
	kinds := make([]string, 0, len(a.pending))
	for k := range a.pending {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		n, b := a.pending[k], a.bound(k)
		if b > 0 && n >= int64(b) {
			return &Overload{Reason: RefusedEffectQueue, Kind: k, RetryAfter: a.drainTime(k, n-int64(b)+1)}
		}
	}
	return nil
}

// drainTime estimates how long kind's queue takes to shed excess effects
// at the rate it fell between the last two reads, clamped to [1s, 60s];
// without a falling queue to go by, the refresh interval (at least 1s).
func (a *Admission) drainTime(kind string, excess int64) time.Duration {
	d := max(a.lim.Refresh, time.Second)
	if before, ok := a.prev[kind]; ok && !a.prevAt.IsZero() {
		if fell, span := before-a.pending[kind], a.readAt.Sub(a.prevAt); fell > 0 && span > 0 {
			d = time.Duration(float64(span) * float64(excess) / float64(fell))
		}
	}
	return min(max(d, time.Second), time.Minute)
}
