// Package registry maps names to processes, with each name held as a lease
// obligation (the OTP contract: Registry, Registry Lease, INV-3, INV-5, INV-8).
//
// A Registry is a value: create one with New and pass it explicitly to
// whoever may name processes (the capability of the OTP contract §6.3). There is no
// package-level registry and no ambient process table, so two registries
// never see each other's names.
//
// What it owns: the table of names, and for each registration a *Lease that
// reaches exactly one terminal state:
//   - Released: Lease.Release, Registry.Unregister or Registry.Close;
//   - Expired: a lease taken WithTTL was not renewed in time;
//   - HolderExited: the process completed. The name is released from the
//     process's exit hook (actor.PID.OnExit), which the actor runtime runs
//     before it notifies links and monitors, so a monitor handling the Down
//     already finds the name unbound.
//
// Every lease thus resolves, because every process completes (INV-3).
// A lease that has ended never touches a later registration of the same
// name: each registration is its own Lease, numbered by a generation that
// strictly increases within the registry, and its timer, exit hook and
// Release act only while that very lease is active and bound.
//
// Collisions resolve first-come under one mutex, and nothing observable
// depends on Go map iteration: Names is sorted and Close releases in name
// order, so a seeded schedule resolves collisions the same way every run
// (INV-8).
//
// What it never does: read the machine clock, sleep, start goroutines or use
// math/rand (TTL timers go through the actor.Executor seam), stop or signal
// the processes it names (an expired lease only unbinds the name), or
// distribute names beyond one OS process (the OTP contract NG-1).
//
// Server and Actor build name references that resolve at each use, so a call
// by name reaches whichever process holds the name now, and an unbound name
// fails with a typed NoProc error instead of reaching a stale process.
package registry

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// Registry is a table of names held as leases. Create it with New; the zero
// value is also ready to use and then takes TTL timers from each registered
// process's executor. A Registry is safe for concurrent use.
type Registry struct {
	ex actor.Executor

	mu     sync.Mutex
	names  map[string]*Lease // the current lease of each bound name
	gen    uint64            // last lease generation handed out; never reused
	closed bool
}

// New returns an empty registry whose TTL timers and expiry clock are ex.
// Pass the actor system's executor (System.Executor) so that the lab controls
// lease expiry. A nil ex uses the executor of each registered process.
func New(ex actor.Executor) *Registry {
	return &Registry{ex: ex}
}

// LeaseState is where a lease is in its life. Every state but LeaseActive is
// terminal.
type LeaseState uint8

const (
	// LeaseActive: the lease holds its name.
	LeaseActive LeaseState = iota
	// LeaseReleased: released explicitly (Lease.Release, Registry.Unregister
	// or Registry.Close).
	LeaseReleased
	// LeaseExpired: the TTL elapsed without a renewal.
	LeaseExpired
	// LeaseHolderExited: the holding process completed.
	LeaseHolderExited
)

func (s LeaseState) String() string {
	switch s {
	case LeaseActive:
		return "active"
	case LeaseReleased:
		return "released"
	case LeaseExpired:
		return "expired"
	case LeaseHolderExited:
		return "holder exited"
	}
	return "lease-state(" + strconv.Itoa(int(s)) + ")"
}

// Option configures one registration.
type Option func(*regOptions)

type regOptions struct {
	ttl    time.Duration
	ttlSet bool
}

// WithTTL makes the lease expire d after registration unless it is renewed
// (Lease.Renew extends it to d after the renewal). d must be positive.
// Without it a lease lasts until it is released or its process exits.
func WithTTL(d time.Duration) Option {
	return func(o *regOptions) { o.ttl, o.ttlSet = d, true }
}

// Lease is the obligation of holding one name. It is resolved by Release,
// by Registry.Unregister or Close, by TTL expiry, or by the holder's exit,
// whichever comes first; after that every operation on it is a no-op or a
// typed *LeaseError.
type Lease struct {
	reg  *Registry
	name string
	pid  actor.PID
	gen  uint64
	ttl  time.Duration
	ex   actor.Executor // the expiry clock; nil when there is no TTL

	// Guarded by reg.mu.
	state   LeaseState
	expires time.Time
	timer   actor.Timer
	arm     uint64 // which timer is current: a stale one that fires anyway does nothing
	unhook  func() // removes the exit hook
}

// Register binds name to pid and returns the lease that holds it.
//
// It fails with a *NameTakenError (errors.Is ErrNameTaken) carrying the
// current holder if the name is bound, with a *NoProcError (errors.Is
// actor.ErrNoProc) if pid is zero or has completed, with ErrInvalidName for
// an empty name, ErrInvalidTTL for a non-positive TTL, and ErrClosed once the
// registry is closed. Registration is first-come: of concurrent registrations
// of one name exactly one wins.
func (r *Registry) Register(name string, pid actor.PID, opts ...Option) (*Lease, error) {
	var o regOptions
	for _, f := range opts {
		f(&o)
	}
	if name == "" {
		return nil, ErrInvalidName
	}
	if o.ttlSet && o.ttl <= 0 {
		return nil, ErrInvalidTTL
	}
	if !pid.Alive() {
		return nil, &NoProcError{Name: name, PID: pid}
	}
	l := &Lease{reg: r, name: name, pid: pid, ttl: o.ttl}
	if o.ttl > 0 {
		l.ex = r.ex
		if l.ex == nil {
			l.ex = pid.Executor()
		}
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	var undo []func()
	if cur := r.current(name, &undo); cur != nil {
		r.mu.Unlock()
		runAll(undo)
		return nil, &NameTakenError{Name: name, Holder: cur.pid}
	}
	// The exit hook is installed under r.mu: if the process exits right now,
	// its hook waits for r.mu and then finds this lease bound, so the name
	// can never outlive its holder.
	unhook, alive := pid.OnExit(func(actor.Outcome) { l.end(LeaseHolderExited) })
	if !alive {
		r.mu.Unlock()
		runAll(undo)
		return nil, &NoProcError{Name: name, PID: pid}
	}
	r.gen++
	l.gen = r.gen
	l.unhook = unhook
	if l.ttl > 0 {
		l.armLocked()
	}
	if r.names == nil {
		r.names = make(map[string]*Lease)
	}
	r.names[name] = l
	traceLease(l, "register")
	r.mu.Unlock()
	runAll(undo)
	return l, nil
}

// traceLease records a lease event in the holder's system trace (the lab
// checks every register has its release).
func traceLease(l *Lease, what string) {
	if sys := l.pid.System(); sys != nil && sys.Tracing() {
		sys.Emit(actor.TraceEvent{Kind: actor.TraceRegistry, PID: l.pid, Seq: l.gen, Detail: what + " " + l.name})
	}
}

// Whereis returns the process bound to name.
func (r *Registry) Whereis(name string) (actor.PID, bool) {
	var undo []func()
	r.mu.Lock()
	l := r.current(name, &undo)
	r.mu.Unlock()
	runAll(undo)
	if l == nil {
		return actor.PID{}, false
	}
	return l.pid, true
}

// Lease returns the active lease of name: how a name bound at start (see
// WithName) is renewed, or released before its holder exits.
func (r *Registry) Lease(name string) (*Lease, bool) {
	var undo []func()
	r.mu.Lock()
	l := r.current(name, &undo)
	r.mu.Unlock()
	runAll(undo)
	return l, l != nil
}

// Unregister releases name whoever holds it, and reports whether it was
// bound. The holder's lease ends as LeaseReleased.
func (r *Registry) Unregister(name string) bool {
	var undo []func()
	r.mu.Lock()
	l := r.current(name, &undo)
	if l != nil {
		undo = append(undo, r.endLocked(l, LeaseReleased))
	}
	r.mu.Unlock()
	runAll(undo)
	return l != nil
}

// Names returns the bound names in ascending order.
func (r *Registry) Names() []string {
	var undo []func()
	r.mu.Lock()
	// Sort first so that lazy expiry below runs in a stable order too.
	keys := make([]string, 0, len(r.names))
	for k := range r.names {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := keys[:0]
	for _, k := range keys {
		if r.current(k, &undo) != nil {
			out = append(out, k)
		}
	}
	r.mu.Unlock()
	runAll(undo)
	return out
}

// Close releases every name, in name order, and makes later registrations
// fail with ErrClosed. Lookups keep working and find nothing. It is
// idempotent, and has the shape of a Scope finalizer: scope.Defer(reg.Close)
// ties the names to the scope's lifetime.
func (r *Registry) Close() {
	var undo []func()
	r.mu.Lock()
	r.closed = true
	keys := make([]string, 0, len(r.names))
	for k := range r.names {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		undo = append(undo, r.endLocked(r.names[k], LeaseReleased))
	}
	r.mu.Unlock()
	runAll(undo)
}

// current returns the active lease of name, first ending it if it is already
// over without its timer or exit hook having run yet: a lease whose TTL has
// elapsed on its executor's clock, or whose holder has completed. Holding
// r.mu; clean-ups to run after unlocking are appended to undo.
func (r *Registry) current(name string, undo *[]func()) *Lease {
	l := r.names[name]
	if l == nil {
		return nil
	}
	l.refreshLocked(undo)
	if l.state != LeaseActive {
		return nil
	}
	return l
}

// endLocked moves an active lease to terminal state st and unbinds its name
// if, and only if, the name is still bound to this very lease. It returns
// the clean-up to run once r.mu is released (removing the exit hook, which
// takes the process's lock).
func (r *Registry) endLocked(l *Lease, st LeaseState) func() {
	if l.state != LeaseActive {
		return nil
	}
	l.state = st
	if r.names[l.name] == l {
		delete(r.names, l.name)
	}
	traceLease(l, "release "+st.String())
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.arm++
	unhook := l.unhook
	l.unhook = nil
	if st == LeaseHolderExited {
		// The process is completing and has already taken its hooks.
		return nil
	}
	return unhook
}

func runAll(fs []func()) {
	for _, f := range fs {
		if f != nil {
			f()
		}
	}
}

// armLocked (re)starts the expiry timer: the lease now ends ttl from the
// executor's current time. Holding r.mu.
func (l *Lease) armLocked() {
	if l.timer != nil {
		l.timer.Stop()
	}
	l.arm++
	arm := l.arm
	l.expires = l.ex.Now().Add(l.ttl)
	l.timer = l.ex.AfterFunc(l.ttl, func() { l.expire(arm) })
}

// expire is the TTL timer. A timer that was superseded by a renewal, or
// whose lease already ended, finds another arm number and does nothing.
func (l *Lease) expire(arm uint64) {
	r := l.reg
	r.mu.Lock()
	var undo func()
	if l.arm == arm {
		undo = r.endLocked(l, LeaseExpired)
	}
	r.mu.Unlock()
	if undo != nil {
		undo()
	}
}

// end resolves the lease with st (the exit hook's path).
func (l *Lease) end(st LeaseState) {
	r := l.reg
	r.mu.Lock()
	undo := r.endLocked(l, st)
	r.mu.Unlock()
	if undo != nil {
		undo()
	}
}

// Name returns the leased name.
func (l *Lease) Name() string { return l.name }

// PID returns the process the lease binds the name to.
func (l *Lease) PID() actor.PID { return l.pid }

// Generation identifies this registration: generations strictly increase
// within a registry and are never reused, so of two leases on one name the
// later registration has the larger generation (a fencing token).
func (l *Lease) Generation() uint64 { return l.gen }

// TTL returns the lease's time to live, zero if it has none.
func (l *Lease) TTL() time.Duration { return l.ttl }

// State returns the lease's state. A lease whose TTL has elapsed, or whose
// holder has completed, reports its terminal state even if its timer or
// exit hook has not run yet.
func (l *Lease) State() LeaseState {
	r := l.reg
	var undo []func()
	r.mu.Lock()
	l.refreshLocked(&undo)
	st := l.state
	r.mu.Unlock()
	runAll(undo)
	return st
}

// ExpiresAt returns when the lease expires unless renewed, on the registry
// executor's clock. It reports false for a lease without TTL or one that has
// ended.
func (l *Lease) ExpiresAt() (time.Time, bool) {
	r := l.reg
	var undo []func()
	r.mu.Lock()
	l.refreshLocked(&undo)
	at, ok := l.expires, l.ttl > 0 && l.state == LeaseActive
	r.mu.Unlock()
	runAll(undo)
	if !ok {
		return time.Time{}, false
	}
	return at, true
}

// Err returns nil while the lease is active and, once it has ended, the
// *LeaseError that Renew returns.
func (l *Lease) Err() error {
	if st := l.State(); st != LeaseActive {
		return &LeaseError{Name: l.name, Holder: l.pid, State: st}
	}
	return nil
}

// Renew extends an active lease so that it expires its TTL from now. A lease
// without TTL has nothing to extend and Renew only confirms it is active.
// Renewing a lease that has ended returns a *LeaseError: errors.Is
// ErrLeaseExpired after expiry, ErrLeaseReleased after release or the
// holder's exit. Renewal never rebinds a name.
func (l *Lease) Renew() error {
	r := l.reg
	var undo []func()
	r.mu.Lock()
	l.refreshLocked(&undo)
	st := l.state
	if st == LeaseActive && l.ttl > 0 {
		l.armLocked()
	}
	r.mu.Unlock()
	runAll(undo)
	if st != LeaseActive {
		return &LeaseError{Name: l.name, Holder: l.pid, State: st}
	}
	return nil
}

// Release resolves the lease: the name is unbound if this lease still holds
// it. It is idempotent, safe on a nil lease, and never affects a later
// registration of the name.
func (l *Lease) Release() {
	if l != nil {
		l.end(LeaseReleased)
	}
}

// refreshLocked applies lazy expiry and exit detection to this lease, so its
// state never lags the clock or the process. Holding r.mu.
func (l *Lease) refreshLocked(undo *[]func()) {
	if l.state != LeaseActive {
		return
	}
	r := l.reg
	if l.ttl > 0 && !l.ex.Now().Before(l.expires) {
		*undo = append(*undo, r.endLocked(l, LeaseExpired))
		return
	}
	if !l.pid.Alive() {
		*undo = append(*undo, r.endLocked(l, LeaseHolderExited))
	}
}
