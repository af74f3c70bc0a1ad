package actor

import (
	"context"
	"time"
)

// System is the root capability of an actor tree: it owns the executor, the
// identifier source, the trace sink and the root scope. There is no global
// System; create one and pass it (or scopes derived from it) explicitly.
type System struct {
	ex            Executor
	ids           idSource
	tracer        func(TraceEvent)
	root          *Scope
	faults        FaultInjector // nil unless the executor injects faults
	deterministic bool
}

// SystemOption configures a System.
type SystemOption func(*System)

// WithExecutor sets the executor seam (default: NewEntropyExecutor()).
func WithExecutor(ex Executor) SystemOption { return func(s *System) { s.ex = ex } }

// WithTracer receives every trace event, synchronously, from the goroutine
// that caused it. It must not block.
func WithTracer(f func(TraceEvent)) SystemOption { return func(s *System) { s.tracer = f } }

// NewSystem creates an actor system with a root scope.
func NewSystem(opts ...SystemOption) *System {
	s := &System{}
	for _, o := range opts {
		o(s)
	}
	if s.ex == nil {
		s.ex = NewEntropyExecutor()
	}
	s.faults, _ = s.ex.(FaultInjector)
	s.deterministic = isDeterministic(s.ex)
	s.root = newScope(s, nil, "root")
	return s
}

// Root returns the root scope.
func (s *System) Root() *Scope { return s.root }

// Executor returns the system's executor seam.
func (s *System) Executor() Executor { return s.ex }

// Close closes the root scope: see Scope.Close.
func (s *System) Close(ctx context.Context) (Outcome, error) { return s.root.Close(ctx) }

// TraceKind names a trace event.
type TraceKind uint8

const (
	TraceSpawn TraceKind = iota + 1
	TraceInitFailed
	TraceCancelRequested
	TraceExit
	TraceLinkExit
	TraceDown
	// TraceObligationLeak is a protocol violation at Panicked severity: a
	// reply obligation or send permit dropped without being resolved.
	TraceObligationLeak
	TraceCallAborted
	TraceMessageDropped
	// The kinds below are emitted only while a tracer is installed (the lab
	// installs one); they cost one branch otherwise.

	// TraceSend: a message was committed to PID's mailbox by Peer (zero for
	// a plain goroutine); Seq is its position in PID's mailbox.
	TraceSend
	// TraceHandle and TraceHandled bracket one handler run of message Seq.
	TraceHandle
	TraceHandled
	// TracePermit: a send permit changed state (Detail: reserve, commit,
	// abort).
	TracePermit
	// TraceObligation: a deferred reply obligation changed state (Detail:
	// defer, reply, abort-on-stop).
	TraceObligation
	// TraceScopeClosed: a scope's Close returned; Seq is the number of
	// process goroutines still running (non-zero violates quiescence).
	TraceScopeClosed
	// TraceFault: a fault was injected (Detail names it).
	TraceFault
	// TraceSupervision and TraceRegistry are emitted by the supervisor and
	// registry packages through System.Emit.
	TraceSupervision
	TraceRegistry
	// TraceLink, TraceUnlink, TraceMonitor and TraceDemonitor record link and
	// monitor set-up (Seq is the monitor ref).
	TraceLink
	TraceUnlink
	TraceMonitor
	TraceDemonitor
)

func (k TraceKind) String() string {
	switch k {
	case TraceSpawn:
		return "spawn"
	case TraceInitFailed:
		return "init-failed"
	case TraceCancelRequested:
		return "cancel-requested"
	case TraceExit:
		return "exit"
	case TraceLinkExit:
		return "link-exit"
	case TraceDown:
		return "down"
	case TraceObligationLeak:
		return "obligation-leak"
	case TraceCallAborted:
		return "call-aborted"
	case TraceMessageDropped:
		return "message-dropped"
	case TraceSend:
		return "send"
	case TraceHandle:
		return "handle"
	case TraceHandled:
		return "handled"
	case TracePermit:
		return "permit"
	case TraceObligation:
		return "obligation"
	case TraceScopeClosed:
		return "scope-closed"
	case TraceFault:
		return "fault"
	case TraceSupervision:
		return "supervision"
	case TraceRegistry:
		return "registry"
	case TraceLink:
		return "link"
	case TraceUnlink:
		return "unlink"
	case TraceMonitor:
		return "monitor"
	case TraceDemonitor:
		return "demonitor"
	}
	return "unknown"
}

// TraceEvent is one observable fact of the actor layer.
type TraceEvent struct {
	Time    time.Time
	Kind    TraceKind
	PID     PID
	Peer    PID // the other process of a link exit or Down
	Outcome Outcome
	Seq     uint64
	Detail  string
}

// Tracing reports whether a tracer is installed.
func (s *System) Tracing() bool { return s.tracer != nil }

// Emit records a trace event from a package layered on the actor runtime
// (supervision decisions, registry leases). The time is set here.
func (s *System) Emit(ev TraceEvent) { s.trace(ev) }

// fault asks the executor whether to inject a fault, and traces it.
func (s *System) fault(point FaultPoint, pid PID) bool {
	if s.faults == nil || !s.faults.Fault(point, pid.ID()) {
		return false
	}
	s.trace(TraceEvent{Kind: TraceFault, PID: pid, Detail: point.String()})
	return true
}

func (s *System) trace(ev TraceEvent) {
	if s.tracer == nil {
		return
	}
	ev.Time = s.ex.Now()
	s.tracer(ev)
}
