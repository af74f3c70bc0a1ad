package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// CallErrorKind classifies why a call produced no reply.
type CallErrorKind uint8

const (
	// CallCancelled: the caller's context was cancelled.
	CallCancelled CallErrorKind = iota + 1
	// CallTimeout: the caller's context deadline passed.
	CallTimeout
	// CallServerStopped: the server stopped (or crashed) before replying.
	CallServerStopped
	// CallNoProc: the target is dead, unknown, or a name is unbound.
	CallNoProc
	// CallCallingSelf: a process called itself (it would deadlock).
	CallCallingSelf
	// CallNoReply: the reply obligation was dropped without a reply. This is
	// a protocol violation of Panicked severity and is traced.
	CallNoReply
)

func (k CallErrorKind) String() string {
	switch k {
	case CallCancelled:
		return "cancelled"
	case CallTimeout:
		return "timeout"
	case CallServerStopped:
		return "server stopped"
	case CallNoProc:
		return "noproc"
	case CallCallingSelf:
		return "calling self"
	case CallNoReply:
		return "no reply"
	}
	return fmt.Sprintf("call-error(%d)", uint8(k))
}

// CallError is the typed failure of Call. Match kinds with errors.Is against
// the sentinels ErrCallTimeout, ErrServerStopped, and so on.
type CallError struct {
	Kind   CallErrorKind
	Target PID
	// Server is the server's outcome when known (ServerStopped after a
	// crash carries the crash).
	Server Outcome
	// Cause is the context error for Cancelled and Timeout.
	Cause error
}

func (e *CallError) Error() string {
	msg := "actor: call " + e.Kind.String()
	if !e.Target.IsZero() {
		msg += " (" + e.Target.String() + ")"
	}
	if e.Kind == CallServerStopped && !e.Server.IsOk() {
		msg += ": " + e.Server.String()
	}
	return msg
}

// Is matches the sentinel of the same kind (ErrCallTimeout, ...), and a
// *CallError of the same kind that names no target.
func (e *CallError) Is(target error) bool {
	switch t := target.(type) {
	case callSentinel:
		return CallErrorKind(t) == e.Kind
	case *CallError:
		return t.Kind == e.Kind && t.Target.IsZero()
	}
	return false
}

func (e *CallError) Unwrap() error { return e.Cause }

// Outcome maps the error onto the lattice (the OTP contract INV-6A).
func (e *CallError) Outcome() Outcome {
	switch e.Kind {
	case CallCancelled:
		return CancelledOutcome(CancelReason{Kind: CancelRequested})
	case CallTimeout:
		return CancelledOutcome(CancelReason{Kind: CancelTimeout})
	case CallNoReply:
		return violationOutcome(e)
	}
	return ErrOutcome(e)
}

// Sentinels for errors.Is, one per kind. They are constants: nothing can
// reassign or mutate them.
const (
	ErrCallCancelled = callSentinel(CallCancelled)
	ErrCallTimeout   = callSentinel(CallTimeout)
	ErrServerStopped = callSentinel(CallServerStopped)
	ErrCallNoProc    = callSentinel(CallNoProc)
	ErrCallingSelf   = callSentinel(CallCallingSelf)
	ErrNoReply       = callSentinel(CallNoReply)
)

// callSentinel is the sentinel of one CallErrorKind.
type callSentinel CallErrorKind

func (k callSentinel) Error() string { return "actor: call " + CallErrorKind(k).String() }

// CastErrorKind classifies a failed cast.
type CastErrorKind uint8

const (
	// CastFull: TryCast found the mailbox full. Nothing was dropped.
	CastFull CastErrorKind = iota + 1
	// CastServerStopped: the server is stopped or draining.
	CastServerStopped
	// CastCancelled: the sender's context ended while waiting for room.
	CastCancelled
	// CastNoProc: a name reference is unbound.
	CastNoProc
)

func (k CastErrorKind) String() string {
	switch k {
	case CastFull:
		return "full"
	case CastServerStopped:
		return "server stopped"
	case CastCancelled:
		return "cancelled"
	case CastNoProc:
		return "noproc"
	}
	return fmt.Sprintf("cast-error(%d)", uint8(k))
}

// CastError is the typed failure of Cast and TryCast.
type CastError struct {
	Kind   CastErrorKind
	Target PID
	Cause  error
}

func (e *CastError) Error() string { return "actor: cast " + e.Kind.String() }

// Is matches the sentinel of the same kind (ErrCastFull, ...), and a
// *CastError of the same kind that names no target.
func (e *CastError) Is(target error) bool {
	switch t := target.(type) {
	case castSentinel:
		return CastErrorKind(t) == e.Kind
	case *CastError:
		return t.Kind == e.Kind && t.Target.IsZero()
	}
	return false
}

func (e *CastError) Unwrap() error { return e.Cause }

// Outcome maps the error onto the lattice (the OTP contract INV-6A).
func (e *CastError) Outcome() Outcome {
	if e.Kind == CastCancelled {
		return CancelledOutcome(CancelReason{Kind: CancelRequested})
	}
	return ErrOutcome(e)
}

// Sentinels for errors.Is, one per kind; constants, like the call ones.
const (
	ErrCastFull          = castSentinel(CastFull)
	ErrCastServerStopped = castSentinel(CastServerStopped)
	ErrCastCancelled     = castSentinel(CastCancelled)
	ErrCastNoProc        = castSentinel(CastNoProc)
)

// castSentinel is the sentinel of one CastErrorKind.
type castSentinel CastErrorKind

func (k castSentinel) Error() string { return "actor: cast " + CastErrorKind(k).String() }

// ErrAlreadyReplied is returned when a deferred reply is used a second time
// (or after the obligation was aborted).
const ErrAlreadyReplied sentinel = "actor: reply obligation already resolved"

func ctxCallError(ctx context.Context, target PID) *CallError {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return &CallError{Kind: CallTimeout, Target: target, Cause: err}
	}
	return &CallError{Kind: CallCancelled, Target: target, Cause: err}
}

// Slot states. A slot's state word is gen<<2 | st, so a resolver holding an
// older generation can never touch a later call that reuses the slot.
const (
	slotPending   = 0
	slotResolving = 1
	slotDone      = 2
	slotAbandoned = 3
)

// callSlot is the one-shot reply channel of a call. Slots are pooled per
// server, so a call allocates nothing in steady state.
type callSlot[R any] struct {
	state atomic.Uint64
	p     Parker
	val   R
	err   error
	timer *slotTimer // reusable timeout timer of CallTimeout
}

// slotTimer is a call timeout that is re-armed call after call instead of
// being allocated per call. Its generation cell belongs to the timer, so a
// timer that fired late can only ever abandon the call it was armed for.
type slotTimer struct {
	t   Timer
	gen atomic.Uint64
}

// arm starts the timeout of generation gen.
func (s *callSlot[R]) arm(ex Executor, gen uint64, d time.Duration) {
	if s.timer == nil {
		st := &slotTimer{}
		st.gen.Store(gen)
		st.t = ex.AfterFunc(d, func() {
			if s.abandon(st.gen.Load()) {
				s.p.Unpark()
			}
		})
		s.timer = st
		return
	}
	s.timer.gen.Store(gen)
	s.timer.t.Reset(d)
}

// disarm stops the timeout; a timer that already fired is not reused.
func (s *callSlot[R]) disarm() {
	if s.timer != nil && !s.timer.t.Stop() {
		s.timer = nil
	}
}

// timedOut reports whether generation gen was abandoned by its timer.
func (s *callSlot[R]) timedOut(gen uint64) bool { return s.state.Load() == gen<<2|slotAbandoned }

// begin starts a new generation and returns it.
func (s *callSlot[R]) begin() uint64 {
	gen := (s.state.Load() >> 2) + 1
	s.state.Store(gen << 2)
	return gen
}

// resolve delivers the reply of generation gen. Exactly one resolution of a
// generation succeeds; the loser (a late or duplicate reply, or an abort
// after a reply) gets false and touches nothing.
func (s *callSlot[R]) resolve(gen uint64, v R, err error) bool {
	if !s.state.CompareAndSwap(gen<<2|slotPending, gen<<2|slotResolving) {
		return false
	}
	s.val, s.err = v, err
	s.state.Store(gen<<2 | slotDone)
	s.p.Unpark()
	return true
}

// pending reports whether generation gen still awaits its reply.
func (s *callSlot[R]) pending(gen uint64) bool { return s.state.Load() == gen<<2|slotPending }

// abandon is the caller giving up (timeout or cancellation). It fails if a
// resolution has already begun, in which case the reply must be collected.
func (s *callSlot[R]) abandon(gen uint64) bool {
	return s.state.CompareAndSwap(gen<<2|slotPending, gen<<2|slotAbandoned)
}

// ReplyTo is the reply obligation of one call, handed to HandleCall. By
// default HandleCall's return value is the reply. A handler that needs to
// reply later calls Defer and must then resolve the Deferred exactly once.
type ReplyTo[R any] struct {
	srv  deferrer[R]
	slot *callSlot[R]
	gen  uint64
}

type deferrer[R any] interface {
	deferCall(slot *callSlot[R], gen uint64) *Deferred[R]
}

// Defer takes the obligation out of the handler: HandleCall's return value is
// ignored and the caller waits until the Deferred is resolved (or the server
// stops, which fails the caller with ServerStopped). A Deferred that becomes
// unreachable unresolved fails the caller with NoReply and is traced as an
// obligation leak.
func (r ReplyTo[R]) Defer() *Deferred[R] { return r.srv.deferCall(r.slot, r.gen) }

// Deferred is a reply obligation taken out of its handler.
type Deferred[R any] struct {
	slot *callSlot[R]
	gen  uint64
	// Set only while tracing.
	sys *System
	pid PID
	id  uint64
}

func (d *Deferred[R]) traceResolved() {
	if d.sys != nil {
		d.sys.trace(TraceEvent{Kind: TraceObligation, PID: d.pid, Seq: d.id, Detail: "reply"})
	}
}

// Reply commits the obligation with a reply.
func (d *Deferred[R]) Reply(v R) error {
	ok := d.slot.resolve(d.gen, v, nil)
	runtime.KeepAlive(d)
	if !ok {
		return ErrAlreadyReplied
	}
	d.traceResolved()
	return nil
}

// Fail commits the obligation with an application error.
func (d *Deferred[R]) Fail(err error) error {
	var zero R
	ok := d.slot.resolve(d.gen, zero, err)
	runtime.KeepAlive(d)
	if !ok {
		return ErrAlreadyReplied
	}
	d.traceResolved()
	return nil
}

// Pending reports whether the obligation is still unresolved (the caller may
// have given up, which also resolves it).
func (d *Deferred[R]) Pending() bool { return d.slot.pending(d.gen) }
