// Package leasing holds world leases for one worker: it takes them,
// renews them in batches, and decides on the local clock when each one
// must be considered lost. The plane's host and the workflow worker both
// hold their leases through it.
//
// A lease's expiry as the store records it (store.Lease.ExpiresAt) is an
// instant of the store's clock, and the machine running the holder may
// disagree with that clock by seconds. The holder never compares the two.
// Each lease instead has a local deadline on the executor's clock, measured
// from the moment just before the request that granted or renewed it was
// sent: the store starts its TTL no earlier than that moment, so the local
// deadline never falls after the store's expiry (clocks that run at the
// same rate; Config.Safety absorbs a difference in rate). A holder that
// stops writing at its deadline has stopped before the store would let
// anybody else take the lease. Renewal is planned from the same deadlines,
// so a lease never lapses in the store for want of a renewal however far
// the two clocks are apart.
//
// The package owns the lease calls to the store (Acquire, AcquireLeases,
// RenewLeases, Release, ReleaseLeases), the local deadlines, the fencing
// of a lease whose renewal failed, and the registration for the lease and
// assignment hints its owners act on. It never runs a world or a
// workflow, and never reads time except through the actor.Executor it is
// given, so the deterministic lab drives it in virtual time.
package leasing

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/store"
)

// Config configures a Holder. Zero durations and sizes take the defaults
// named on each field.
type Config struct {
	Worker string // the holder id the store records
	// Incarnation names this process's lifetime under Worker
	// (store.WithIncarnation): every Acquire and AcquireLeases passes it,
	// so a new incarnation takes an unexpired lease over at a new epoch.
	Incarnation string
	Store       Store          // where the leases live
	Executor    actor.Executor // the local clock

	TTL         time.Duration // default 10s
	RenewMargin time.Duration // renew at deadline − margin (default TTL/3)
	// Safety is taken off every local deadline (default TTL/100): the
	// executor's clock and the store's may run at slightly different
	// rates (a slewing NTP daemon), which the measurement from before the
	// request does not cover.
	Safety     time.Duration
	RetryAfter time.Duration // after a failed RenewLeases call (default 100ms)
	Page       int           // leases per RenewLeases/ReleaseLeases call (default and at most store.MaxBatch)

	// OnLost is told, from the goroutine that called Renew, of each held
	// lease Renew found lost: fenced by its owner (cause nil), refused by
	// the store (its error), or past its local deadline while the renewal
	// call failed (the call's error). The lease is fenced and forgotten
	// before the call.
	OnLost func(l *Lease, cause error)
	// Observe, when set, is told of every RenewLeases call: how many
	// leases, how long it took on the executor's clock, and its failure.
	Observe func(n int, took time.Duration, err error)
}

// Store is what a holder needs of the store: the lease calls, and the
// hints that say a lease may have been taken, released or revoked.
type Store interface {
	store.Leases
	Watch(ctx context.Context, w store.Waker, topics ...string) (stop func(), err error)
}

// Holder holds one worker's leases. Its methods are safe for concurrent
// use; Renew is meant for one controller goroutine.
type Holder struct {
	cfg    Config
	ex     actor.Executor
	origin time.Time // the local clock's zero for Stamps

	mu      sync.Mutex
	held    map[*Lease]struct{}
	renewAt Stamp // Renew looks at the leases no earlier (unless sooner); 0: at its next call
	// sooner is the earliest renewal due of the leases held since Renew
	// last collected them (0: none): maybe before renewAt.
	sooner Stamp
	// granted is the epoch of each world's last grant to this holder. An
	// acquire answered at that epoch again is the store keeping the lease
	// it granted earlier (a retried acquire, or one after the holder
	// fenced the lease locally): its expiry counts from that earlier
	// request, so the holder renews it before counting a deadline.
	granted map[string]uint64
}

// Stamp is an instant on the holder's local clock: nanoseconds since the
// holder started, on the executor's (monotonic, in production) clock. It
// never meets an instant of the store's clock.
type Stamp int64

// Lease is one held lease: its world, its epoch, its local deadline and
// whether it was fenced. The zero Lease is not live; Hold makes it so.
type Lease struct {
	World string
	Epoch uint64

	h        atomic.Pointer[Holder]
	deadline atomic.Int64 // a Stamp
	fenced   atomic.Bool
}

// Grant is a lease the store granted, with the local instant just before
// the request that granted it was sent.
type Grant struct {
	Lease store.Lease // ExpiresAt is the store's clock: to show, never to compare
	Sent  Stamp
}

// New returns a holder.
func New(cfg Config) *Holder {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.TTL, 10*time.Second)
	def(&cfg.RenewMargin, cfg.TTL/3)
	def(&cfg.Safety, cfg.TTL/100)
	def(&cfg.RetryAfter, 100*time.Millisecond)
	if cfg.Page <= 0 || cfg.Page > store.MaxBatch {
		cfg.Page = store.MaxBatch
	}
	return &Holder{cfg: cfg, ex: cfg.Executor, origin: cfg.Executor.Now(), held: map[*Lease]struct{}{}, granted: map[string]uint64{}}
}

// Now is the local clock's reading as a Stamp.
func (h *Holder) Now() Stamp { return Stamp(h.ex.Now().Sub(h.origin)) }

// Time turns a Stamp into an instant of the executor's clock, for the
// executor's timers.
func (h *Holder) Time(s Stamp) time.Time { return h.origin.Add(time.Duration(s)) }

// TTL is the lease duration the holder asks for.
func (h *Holder) TTL() time.Duration { return h.cfg.TTL }

// Granted is the grant of a lease obtained by another call than the
// holder's own (store.Spawn), sent at sent.
func (h *Holder) Granted(l store.Lease, sent Stamp) Grant {
	h.kept([]store.AcquireResult{{World: l.World, Lease: l}})
	return Grant{Lease: l, Sent: sent}
}

// Acquire takes world's lease (store.Leases.Acquire).
func (h *Holder) Acquire(ctx context.Context, world string) (Grant, error) {
	sent := h.Now()
	l, err := h.cfg.Store.Acquire(ctx, world, h.cfg.Worker, h.cfg.TTL, store.WithIncarnation(h.cfg.Incarnation))
	if err != nil {
		return Grant{}, err
	}
	res := []store.AcquireResult{{World: world, Lease: l}}
	grants := []Grant{{Lease: l, Sent: sent}}
	if h.kept(res) != nil {
		if err := h.renewKept(ctx, res, grants, []int{0}); err != nil {
			return Grant{}, err
		}
		if res[0].Err != nil {
			return Grant{}, res[0].Err
		}
	}
	return grants[0], nil
}

// keptLocked records the epochs res grants and returns the indexes of the
// ones the store kept (granted this holder before at that epoch).
func (h *Holder) kept(res []store.AcquireResult) (kept []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range res {
		if r.Err != nil {
			continue
		}
		if e, ok := h.granted[r.Lease.World]; ok && e == r.Lease.Epoch {
			kept = append(kept, i)
		}
		h.granted[r.Lease.World] = r.Lease.Epoch
	}
	return kept
}

// AcquireMany takes many worlds' leases in one round trip
// (store.Leases.AcquireLeases): one result per world, in order, and the
// grant of each one taken (the zero Grant where res[i].Err is set).
func (h *Holder) AcquireMany(ctx context.Context, worlds []string) ([]store.AcquireResult, []Grant, error) {
	sent := h.Now()
	res, err := h.cfg.Store.AcquireLeases(ctx, h.cfg.Worker, worlds, h.cfg.TTL, store.WithIncarnation(h.cfg.Incarnation))
	if err != nil {
		return nil, nil, err
	}
	grants := make([]Grant, len(res))
	for i, r := range res {
		if r.Err == nil {
			grants[i] = Grant{Lease: r.Lease, Sent: sent}
		}
	}
	if kept := h.kept(res); len(kept) > 0 {
		if err := h.renewKept(ctx, res, grants, kept); err != nil {
			return nil, nil, err
		}
	}
	return res, grants, nil
}

// renewKept renews the leases the store kept (answered at the epoch it had
// granted this holder before): their expiry counts from the earlier
// request, so their deadlines count from this renewal's. One the store
// will not renew is that world's error, as an acquire's refusal would be.
func (h *Holder) renewKept(ctx context.Context, res []store.AcquireResult, grants []Grant, kept []int) error {
	refs := make([]store.LeaseRef, len(kept))
	for j, i := range kept {
		refs[j] = store.LeaseRef{World: res[i].Lease.World, Epoch: res[i].Lease.Epoch}
	}
	sent := h.Now()
	out, err := h.cfg.Store.RenewLeases(ctx, h.cfg.Worker, refs, h.cfg.TTL)
	if err != nil {
		return err
	}
	for j, i := range kept {
		if out[j].Err != nil {
			res[i].Err, grants[i] = out[j].Err, Grant{}
			continue
		}
		res[i].Lease, grants[i] = out[j].Lease, Grant{Lease: out[j].Lease, Sent: sent}
	}
	return nil
}

// Track makes l the live lease g granted, until its deadline, without
// renewing it: for a lease held only for a moment.
func (h *Holder) Track(l *Lease, g Grant) {
	l.World, l.Epoch = g.Lease.World, g.Lease.Epoch
	l.fenced.Store(false)
	l.deadline.Store(int64(h.deadline(g.Sent)))
	l.h.Store(h)
}

// Hold makes l the live lease g granted and keeps it renewed until it is
// fenced, lost or forgotten.
func (h *Holder) Hold(l *Lease, g Grant) {
	h.Track(l, g)
	dl := l.Deadline()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[l] = struct{}{}
	// Its renewal may be due before the look Renew has planned.
	if due := dl - Stamp(h.cfg.RenewMargin); h.sooner == 0 || due < h.sooner {
		h.sooner = due
	}
}

// Forget stops renewing l (the caller released it, or stopped its world);
// it does not fence l.
func (h *Holder) Forget(l *Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, l)
}

// Held counts the leases being renewed.
func (h *Holder) Held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

func (h *Holder) deadline(sent Stamp) Stamp {
	return sent + Stamp(h.cfg.TTL-h.cfg.Safety)
}

// Live is the check before every write under l: not fenced, and its local
// deadline not reached. A lease found past its deadline is fenced: it is
// never live again (a successor may hold the world by now), and only a
// fresh acquisition, at a new epoch, brings the world back.
func (l *Lease) Live() bool {
	if l.fenced.Load() {
		return false
	}
	h := l.h.Load()
	if h == nil {
		return false
	}
	if h.Now() >= Stamp(l.deadline.Load()) {
		l.fenced.Store(true)
		return false
	}
	return true
}

// Fence marks l lost: Live reports false from now on.
func (l *Lease) Fence() { l.fenced.Store(true) }

// Fenced reports whether l was fenced (by Fence, or by Live past its
// deadline).
func (l *Lease) Fenced() bool { return l.fenced.Load() }

// Deadline is l's local deadline (meaningful once held).
func (l *Lease) Deadline() Stamp { return Stamp(l.deadline.Load()) }

// Ref is l's reference for the store's bulk calls.
func (l *Lease) Ref() store.LeaseRef { return store.LeaseRef{World: l.World, Epoch: l.Epoch} }

// WatchHints registers w for the hints that a holder of world leases acts
// on: a lease taken, released or revoked elsewhere (store.TopicLeases) and
// an assignment that moved (store.TopicAssignments). Hints may be lost;
// they only make the owner look (scan, renew) sooner than its backstop. A
// refused registration is retried every RetryAfter on the executor's clock
// until ctx ends (whose error is then returned): an owner that gave up
// would never hear of a revocation before its next renewal.
func (h *Holder) WatchHints(ctx context.Context, w store.Waker) (stop func(), err error) {
	for {
		stop, err := h.cfg.Store.Watch(ctx, w, store.TopicLeases, store.TopicAssignments)
		if err == nil {
			return stop, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err := actor.Sleep(ctx, h.ex, h.cfg.RetryAfter); err != nil {
			return nil, err
		}
	}
}

// Release gives one lease back (store.Leases.Release). A failed release
// only means a successor waits for the TTL.
func (h *Holder) Release(ctx context.Context, world string, epoch uint64) error {
	return h.cfg.Store.Release(ctx, world, h.cfg.Worker, epoch)
}

// ReleaseAll gives leases back in pages (store.Leases.ReleaseLeases) and
// returns the first failed call's error.
func (h *Holder) ReleaseAll(ctx context.Context, refs []store.LeaseRef) error {
	for len(refs) > 0 {
		n := min(len(refs), h.cfg.Page)
		if _, err := h.cfg.Store.ReleaseLeases(ctx, h.cfg.Worker, refs[:n]); err != nil {
			return err
		}
		refs = refs[n:]
	}
	return nil
}

// Renew renews every held lease, in pages of one RenewLeases call each,
// once the earliest is due (its deadline less RenewMargin), or at once
// when force is set (a hint that a lease may have been revoked: renewing
// finds out). It hands the leases it finds lost to OnLost, and returns
// when it next needs to look, on the executor's clock: until then no lease
// can need a renewal, so a caller may skip calling it.
func (h *Holder) Renew(ctx context.Context, force bool) time.Time {
	now := h.Now()
	h.mu.Lock()
	if at := h.nextLocked(); !force && now < at {
		h.mu.Unlock()
		return h.Time(at)
	}
	all := make([]*Lease, 0, len(h.held))
	for l := range h.held {
		all = append(all, l)
	}
	h.sooner = 0
	h.mu.Unlock()
	// Sorted outside the lock: at a million leases the sort takes most of
	// a second, and the map's order must not decide which page goes first.
	slices.SortFunc(all, func(a, b *Lease) int { return strings.Compare(a.World, b.World) })
	var held []*Lease
	for _, l := range all {
		if l.Live() {
			held = append(held, l)
		} else {
			// Fenced by its owner, or past its deadline: never renewed,
			// since a successor may hold the world already.
			h.lose(l, nil)
		}
	}
	next := h.plan(held, now, force)
	if next == 0 {
		next = now + Stamp(h.cfg.TTL)
		for len(held) > 0 {
			batch := held[:min(len(held), h.cfg.Page)]
			held = held[len(batch):]
			refs := make([]store.LeaseRef, len(batch))
			for i, l := range batch {
				refs[i] = l.Ref()
			}
			sent := h.Now()
			res, err := h.cfg.Store.RenewLeases(ctx, h.cfg.Worker, refs, h.cfg.TTL)
			if h.cfg.Observe != nil {
				h.cfg.Observe(len(refs), time.Duration(h.Now()-sent), err)
			}
			if err != nil {
				// The call failed, not a lease: retry soon. The leases
				// keep their deadlines, and those past them are lost.
				for _, l := range batch {
					if !l.Live() {
						h.lose(l, err)
					}
				}
				next = min(next, h.Now()+Stamp(h.cfg.RetryAfter))
				continue
			}
			dl := h.deadline(sent)
			for i, r := range res {
				l := batch[i]
				if r.Err != nil {
					h.lose(l, r.Err)
					continue
				}
				l.deadline.Store(int64(dl))
				next = min(next, dl-Stamp(h.cfg.RenewMargin))
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewAt = next
	return h.Time(h.nextLocked()) // a lease held meanwhile may be due sooner
}

func (h *Holder) nextLocked() Stamp {
	if h.sooner != 0 && h.sooner < h.renewAt {
		return h.sooner
	}
	return h.renewAt
}

// plan returns when the earliest of held is due for renewal if that is
// later than now and nothing forces one, else 0: renew now.
func (h *Holder) plan(held []*Lease, now Stamp, force bool) Stamp {
	if len(held) == 0 {
		return now + Stamp(h.cfg.TTL)
	}
	if force {
		return 0
	}
	earliest := held[0].Deadline()
	for _, l := range held[1:] {
		earliest = min(earliest, l.Deadline())
	}
	if due := earliest - Stamp(h.cfg.RenewMargin); now < due {
		return due
	}
	return 0
}

func (h *Holder) lose(l *Lease, cause error) {
	l.Fence()
	h.Forget(l)
	if h.cfg.OnLost != nil {
		h.cfg.OnLost(l, cause)
	}
}
