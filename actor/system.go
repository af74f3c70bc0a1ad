package actor

import (
	"context"
	"time"
)

// System is the root capability of an actor tree: it owns the executor, the
// identifier source, the trace sink and the root scope. There is no global
// System; create one and pass it (or scopes derived from it) explicitly.
type System struct {
	ex     Executor
	ids    idSource
	tracer func(TraceEvent)
	root   *Scope
}

// SystemOption configures a System.
type SystemOption func(*System)

// WithExecutor sets the executor seam (default: NewExecutor(1)).
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
		s.ex = NewExecutor(1)
	}
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
	Detail  string
}

func (s *System) trace(ev TraceEvent) {
	if s.tracer == nil {
		return
	}
	ev.Time = s.ex.Now()
	s.tracer(ev)
}
