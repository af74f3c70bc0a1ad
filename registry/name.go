package registry

import (
	"context"
	"fmt"

	"github.com/orrery-run/orrery/actor"
)

// ServerName is a reference to a GenServer by name. It resolves the name at
// every use, so it reaches whichever process holds the name at that moment
// (a restarted server that registered again included) and never a stale one.
// It implements actor.Target, so actor.Call and actor.Cast accept it.
type ServerName[Q, R, C any] struct {
	reg  *Registry
	name string
}

// Server returns a reference to the GenServer registered as name in reg.
func Server[Q, R, C any](reg *Registry, name string) *ServerName[Q, R, C] {
	return &ServerName[Q, R, C]{reg: reg, name: name}
}

// Name returns the referenced name.
func (n *ServerName[Q, R, C]) Name() string { return n.name }

// Resolve returns the server currently bound to the name. An unbound name is
// an *UnboundError wrapping a *actor.CallError of kind CallNoProc; a name
// bound to another type of process is a *WrongTypeError.
func (n *ServerName[Q, R, C]) Resolve() (*actor.ServerRef[Q, R, C], error) {
	return resolve[*actor.ServerRef[Q, R, C]](n.reg, n.name, func() error {
		return &actor.CallError{Kind: actor.CallNoProc}
	})
}

// Call resolves the name and calls the server (see actor.ServerRef.Call).
func (n *ServerName[Q, R, C]) Call(ctx context.Context, req Q) (R, error) {
	return actor.Call[Q, R, C](ctx, n, req)
}

// Cast resolves the name and casts to the server (see actor.ServerRef.Cast).
// An unbound name is an *UnboundError wrapping a *actor.CastError of kind
// CastNoProc.
func (n *ServerName[Q, R, C]) Cast(ctx context.Context, msg C) error {
	ref, err := n.resolveCast()
	if err != nil {
		return err
	}
	return ref.Cast(ctx, msg)
}

// TryCast resolves the name and casts if the mailbox has room (see
// actor.ServerRef.TryCast).
func (n *ServerName[Q, R, C]) TryCast(msg C) error {
	ref, err := n.resolveCast()
	if err != nil {
		return err
	}
	return ref.TryCast(msg)
}

func (n *ServerName[Q, R, C]) resolveCast() (*actor.ServerRef[Q, R, C], error) {
	return resolve[*actor.ServerRef[Q, R, C]](n.reg, n.name, func() error {
		return &actor.CastError{Kind: actor.CastNoProc}
	})
}

// ActorName is a reference to a plain actor by name, resolved at every use
// like ServerName.
type ActorName[M any] struct {
	reg  *Registry
	name string
}

// Actor returns a reference to the plain actor registered as name in reg.
func Actor[M any](reg *Registry, name string) *ActorName[M] {
	return &ActorName[M]{reg: reg, name: name}
}

// Name returns the referenced name.
func (n *ActorName[M]) Name() string { return n.name }

// Resolve returns the actor currently bound to the name. An unbound name is
// an *UnboundError (errors.Is actor.ErrNoProc); a name bound to another type
// of process is a *WrongTypeError.
func (n *ActorName[M]) Resolve() (*actor.Ref[M], error) {
	return resolve[*actor.Ref[M]](n.reg, n.name, func() error { return actor.ErrNoProc })
}

// Send resolves the name and sends msg (see actor.Ref.Send).
func (n *ActorName[M]) Send(ctx context.Context, msg M) error {
	ref, err := n.Resolve()
	if err != nil {
		return err
	}
	return ref.Send(ctx, msg)
}

// TrySend resolves the name and sends msg if the mailbox has room (see
// actor.Ref.TrySend).
func (n *ActorName[M]) TrySend(msg M) error {
	ref, err := n.Resolve()
	if err != nil {
		return err
	}
	return ref.TrySend(msg)
}

// resolve looks name up and type-asserts the holder's handle to H.
func resolve[H any](reg *Registry, name string, noProc func() error) (H, error) {
	var zero H
	var pid actor.PID
	ok := false
	if reg != nil {
		pid, ok = reg.Whereis(name)
	}
	if !ok {
		return zero, &UnboundError{Name: name, Err: noProc()}
	}
	h, ok := pid.Handle().(H)
	if !ok {
		return zero, &WrongTypeError{Name: name, Holder: pid, Want: fmt.Sprintf("%T", zero), Got: fmt.Sprintf("%T", pid.Handle())}
	}
	return h, nil
}

// WithName is an actor.Option that starts a process under name in reg:
// the name is registered once the process exists and before its init runs
// (as OTP's start with {local, Name}), so a taken name fails the start
// without running init, with a *actor.StartError that errors.Is
// ErrNameTaken. Because a name lives as long as its holder, a start that
// fails later (init error, panic, init budget) leaves the name unbound by
// the time Start returns: the name is bound after a successful start and
// never after a failed one. It applies to anything started with
// actor.Options: servers, actors and supervisors. opts are the lease's
// options (WithTTL); Registry.Lease(name) returns the lease, to renew or
// release it. The name is also the process's debugging name unless
// actor.WithName sets another.
func WithName(reg *Registry, name string, opts ...Option) actor.Option {
	return actor.WithBinding(name, func(pid actor.PID) error {
		if reg == nil {
			return ErrClosed // a nil registry takes no names
		}
		_, err := reg.Register(name, pid, opts...)
		return err
	})
}
