package actor

import (
	"context"
	"runtime"
	"sync"
)

// DefaultMailboxCapacity is the bound of a process mailbox unless
// WithMailbox says otherwise (the OTP contract: default capacity 64).
const DefaultMailboxCapacity = 64

// ErrMailboxFull is returned by TrySend (and TryCast) when the mailbox holds
// its capacity of committed and reserved messages. Nothing is dropped: the
// message was not enqueued and the caller still owns it.
const ErrMailboxFull sentinel = "actor: mailbox full"

// ErrMailboxClosed is returned when the receiving process has stopped (or is
// draining) and accepts no new messages.
const ErrMailboxClosed sentinel = "actor: mailbox closed"

// mailbox is a bounded MPSC queue with two-phase sends.
//
// The bound counts user messages committed plus permits reserved; system
// messages (Down, Exit, internal control) bypass it, because dropping or
// blocking them would break supervision, but they share the one FIFO ring so
// that a message sent before an exit is received before the exit's Down.
//
// The consumer takes everything queued in one lock acquisition (a batch) and
// parks only when the ring is empty; producers wake it only when it is
// parked. That keeps the steady-state send path to one uncontended lock and no
// allocation.
type mailbox[E any] struct {
	mu       sync.Mutex
	ring     []E // len is a power of two; grows on demand up to what is queued
	flags    []uint8
	head     int
	n        int // queued envelopes, user and system
	user     int // queued user envelopes (bounded)
	reserved int // outstanding permits (bounded together with user)
	capacity int
	closed   bool
	parked   bool // the consumer is parked (or about to park) on recv
	// dormant: the consumer goroutine has not been started. The first
	// activation (a message, a system message, an interrupt or close)
	// starts it through the executor; from then on it parks when idle. A
	// process nobody talks to therefore costs no goroutine.
	dormant bool
	intr    bool        // wake the consumer even though nothing is queued
	recv    Parker      // created by the consumer when it first parks
	waiters waiterQueue // reservers blocked on a full mailbox, FIFO
	ex      Executor
	// owner is the process the mailbox belongs to. It is an interface, not
	// func fields, so that a process costs no closure allocation: most
	// processes never park and are never launched.
	owner mailboxOwner[E]
	// traced: owner.pushed stamps each envelope as it is committed (only
	// while tracing).
	traced bool
}

// mailboxOwner is what a mailbox calls back into.
type mailboxOwner[E any] interface {
	// barrier is called, under mu, for a barrier envelope as the consumer
	// takes it. A batch ends at a barrier: calls are barriers, so at most
	// one call is ever outside the mailbox and a killer can always find it.
	barrier(e *E)
	// pushed stamps an envelope as it is committed, under mu, so stamps
	// follow the mailbox's real order (only while tracing).
	pushed(e *E)
	// launch starts the consumer goroutine (through the executor).
	launch()
}

const (
	flagSys uint8 = 1 << iota
	flagBarrier
)

// init prepares a mailbox in place. The ring is allocated on first use and
// grows by doubling, so an idle process costs no buffer.
func (m *mailbox[E]) init(ex Executor, capacity int, owner mailboxOwner[E], traced bool) {
	if capacity <= 0 {
		capacity = DefaultMailboxCapacity
	}
	m.capacity = capacity
	m.ex = ex
	m.owner = owner
	m.traced = traced
}

// push appends e; the caller holds mu and has checked the bound.
func (m *mailbox[E]) push(e E, flags uint8) {
	if m.n == len(m.ring) {
		m.grow()
	}
	i := (m.head + m.n) & (len(m.ring) - 1)
	m.ring[i] = e
	m.flags[i] = flags
	if m.traced {
		m.owner.pushed(&m.ring[i])
	}
	m.n++
	if flags&flagSys == 0 {
		m.user++
	}
}

func (m *mailbox[E]) grow() {
	size := 2 * len(m.ring)
	if size == 0 {
		size = 4
	}
	ring := make([]E, size)
	flags := make([]uint8, len(ring))
	for i := 0; i < m.n; i++ {
		j := (m.head + i) & (len(m.ring) - 1)
		ring[i] = m.ring[j]
		flags[i] = m.flags[j]
	}
	m.ring, m.flags, m.head = ring, flags, 0
}

type wakeAction uint8

const (
	wakeNone wakeAction = iota
	wakeUnpark
	wakeLaunch
)

// wakeLocked decides how to make the consumer runnable; the caller acts on
// it after releasing mu so the consumer never wakes into a held lock.
func (m *mailbox[E]) wakeLocked() wakeAction {
	switch {
	case m.parked:
		m.parked = false
		return wakeUnpark
	case m.dormant:
		m.dormant = false
		return wakeLaunch
	}
	return wakeNone
}

func (m *mailbox[E]) wake(a wakeAction) {
	switch a {
	case wakeUnpark:
		m.recv.Unpark()
	case wakeLaunch:
		m.owner.launch()
	}
}

// arm makes the consumer startable: at once if there is already work (or a
// cancel request), otherwise on first activation.
func (m *mailbox[E]) arm() {
	m.mu.Lock()
	m.dormant = true
	var a wakeAction
	if m.n > 0 || m.intr || m.closed {
		a = m.wakeLocked()
	}
	m.mu.Unlock()
	m.wake(a)
}

// trySend commits e if there is room. It never blocks and never drops.
func (m *mailbox[E]) trySend(e E, flags uint8) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrMailboxClosed
	}
	if m.user+m.reserved >= m.capacity || m.waiters.head != nil {
		// Blocked reservers queued first keep their turn.
		m.mu.Unlock()
		return ErrMailboxFull
	}
	m.push(e, flags)
	wake := m.wakeLocked()
	m.mu.Unlock()
	m.wake(wake)
	return nil
}

// send commits e, waiting for room while the mailbox is full.
func (m *mailbox[E]) send(ctx context.Context, e E, flags uint8) error {
	err := m.trySend(e, flags)
	if err != ErrMailboxFull {
		return err
	}
	if err := m.reserve(ctx); err != nil {
		return err
	}
	return m.commit(e, flags)
}

// pushSystem enqueues a system envelope regardless of the bound. It reports
// false if the mailbox is closed (the receiver is gone).
func (m *mailbox[E]) pushSystem(e E) bool {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	m.push(e, flagSys)
	wake := m.wakeLocked()
	m.mu.Unlock()
	m.wake(wake)
	return true
}

// reserve takes one slot of the bound, waiting in FIFO order while full.
// Cancel-safe: if ctx ends while waiting, no slot is held on return.
func (m *mailbox[E]) reserve(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrMailboxClosed
	}
	if m.user+m.reserved < m.capacity && m.waiters.head == nil {
		m.reserved++
		m.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		m.mu.Unlock()
		return err
	}
	w := &waiter{p: m.ex.NewParker()}
	m.waiters.push(w)
	m.mu.Unlock()

	err := w.p.Park(ctx)

	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case w.granted && err == nil:
		return nil
	case w.granted:
		// Granted while we were being cancelled: hand the slot on.
		m.reserved--
		m.grantLocked()
		return err
	case m.closed:
		m.waiters.remove(w)
		return ErrMailboxClosed
	default:
		m.waiters.remove(w)
		if err == nil { // spurious wake cannot happen; keep the invariant explicit
			err = ErrMailboxClosed
		}
		return err
	}
}

// commit turns a reserved slot into a queued message.
func (m *mailbox[E]) commit(e E, flags uint8) error {
	m.mu.Lock()
	m.reserved--
	if m.closed {
		m.grantLocked()
		m.mu.Unlock()
		return ErrMailboxClosed
	}
	m.push(e, flags)
	wake := m.wakeLocked()
	m.mu.Unlock()
	m.wake(wake)
	return nil
}

// release gives back a reserved slot without sending.
func (m *mailbox[E]) release() {
	m.mu.Lock()
	m.reserved--
	m.grantLocked()
	m.mu.Unlock()
}

// grantLocked hands free slots to blocked reservers in FIFO order.
func (m *mailbox[E]) grantLocked() {
	for m.waiters.head != nil && m.user+m.reserved < m.capacity && !m.closed {
		w := m.waiters.pop()
		w.granted = true
		m.reserved++
		w.p.Unpark()
	}
}

// take moves every queued envelope into buf and returns it. When nothing is
// queued it parks until a message arrives or interrupt is called; an
// interrupted take may return an empty batch. It returns ok=false once the
// mailbox is closed and empty.
func (m *mailbox[E]) take(buf []E) (batch []E, ok bool) {
	m.mu.Lock()
	yielded := false
	for m.n == 0 && !m.intr {
		if m.closed {
			m.mu.Unlock()
			return buf[:0], false
		}
		if !yielded {
			// In a conversation the peer is usually runnable right now; let
			// it run first so its reply finds us runnable, not parked.
			yielded = true
			m.mu.Unlock()
			runtime.Gosched()
			m.mu.Lock()
			continue
		}
		m.parked = true
		if m.recv == nil {
			// Producers unpark only a parked consumer, and see parked (and
			// so recv) under mu: creating it here, first, is safe.
			m.recv = m.ex.NewParker()
		}
		recv := m.recv
		m.mu.Unlock()
		_ = recv.Park(context.Background())
		m.mu.Lock()
	}
	m.intr = false
	batch = m.drainLocked(buf)
	m.mu.Unlock()
	return batch, true
}

// tryTake is take without parking.
func (m *mailbox[E]) tryTake(buf []E) []E {
	m.mu.Lock()
	batch := m.drainLocked(buf)
	m.mu.Unlock()
	return batch
}

// drainLocked moves queued envelopes into buf, up to and including the first
// barrier.
func (m *mailbox[E]) drainLocked(buf []E) []E {
	var zero E
	buf = buf[:0]
	mask := len(m.ring) - 1
	for m.n > 0 {
		j := m.head
		f := m.flags[j]
		buf = append(buf, m.ring[j])
		m.ring[j] = zero // let the GC have what we handed out
		m.head = (m.head + 1) & mask
		m.n--
		if f&flagSys == 0 {
			m.user--
		}
		if f&flagBarrier != 0 {
			m.owner.barrier(&buf[len(buf)-1])
			break
		}
	}
	m.head &= mask
	if m.n == 0 {
		m.head = 0
	}
	m.grantLocked()
	return buf
}

// interrupt wakes a parked consumer without a message (cancel requests).
func (m *mailbox[E]) interrupt() {
	m.mu.Lock()
	m.intr = true
	wake := m.wakeLocked()
	m.mu.Unlock()
	m.wake(wake)
}

// close refuses further sends and wakes every blocked reserver, which then
// returns ErrMailboxClosed. Queued envelopes stay for the drain.
func (m *mailbox[E]) close() {
	m.mu.Lock()
	m.closed = true
	for m.waiters.head != nil {
		m.waiters.pop().p.Unpark()
	}
	wake := m.wakeLocked()
	m.mu.Unlock()
	m.wake(wake)
}

// closeAndTake closes the mailbox and removes everything queued, calling
// visit for each envelope and then held, all under the lock; used by kill.
// It reports whether the consumer was idle: parked on an empty mailbox, or
// not started.
func (m *mailbox[E]) closeAndTake(visit func(*E), held func()) (idle bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	idle = m.parked || m.dormant
	m.closed = true
	for m.waiters.head != nil {
		m.waiters.pop().p.Unpark()
	}
	var zero E
	mask := len(m.ring) - 1
	for m.n > 0 {
		visit(&m.ring[m.head])
		m.ring[m.head] = zero
		m.head = (m.head + 1) & mask
		m.n--
	}
	m.head, m.user = 0, 0
	if held != nil {
		held()
	}
	m.wake(m.wakeLocked())
	return idle
}

// len reports queued envelopes (for tests and introspection).
func (m *mailbox[E]) len() (user, total, reserved int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.user, m.n, m.reserved
}

type waiter struct {
	p          Parker
	granted    bool
	prev, next *waiter
}

type waiterQueue struct{ head, tail *waiter }

func (q *waiterQueue) push(w *waiter) {
	w.prev = q.tail
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *waiterQueue) pop() *waiter {
	w := q.head
	q.remove(w)
	return w
}

func (q *waiterQueue) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else if q.head == w {
		q.head = w.next
	} else {
		return // not queued
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
}
