package supervisor

import (
	"context"

	"github.com/orrery-run/orrery/actor"
)

// ServerChild is the child spec of a GenServer in one call: a Permanent
// Worker named id whose every instance is a fresh server from newServer,
// started with actor.StartServer and opts (the debugging name defaults to
// id). A failed start reaches the supervisor as the *actor.StartError it
// is, so the supervisor judges the instance's real outcome. Change the
// returned spec's fields (Restart, Shutdown, Containment) to taste.
func ServerChild[Q, R, C any](id string, newServer func() actor.Server[Q, R, C], opts ...actor.Option) ChildSpec {
	opts = append([]actor.Option{actor.WithName(id)}, opts...)
	return ChildSpec{ID: id, Start: func(ctx context.Context, scope *actor.Scope) (actor.PID, error) {
		ref, err := actor.StartServer(ctx, scope, newServer(), opts...)
		if err != nil {
			return actor.PID{}, err
		}
		return ref.PID(), nil
	}}
}

// ActorChild is ServerChild for a plain actor.
func ActorChild[M any](id string, newActor func() actor.Actor[M], opts ...actor.Option) ChildSpec {
	opts = append([]actor.Option{actor.WithName(id)}, opts...)
	return ChildSpec{ID: id, Start: func(ctx context.Context, scope *actor.Scope) (actor.PID, error) {
		ref, err := actor.Spawn(ctx, scope, newActor(), opts...)
		if err != nil {
			return actor.PID{}, err
		}
		return ref.PID(), nil
	}}
}

// TypedChild is a child as WhichChildren reports it, with the typed handle
// of its running instance.
type TypedChild[H any] struct {
	ChildInfo
	// Ref is the running instance's handle: a *actor.ServerRef[Q, R, C], an
	// *actor.Ref[M], a *Ref or a *DynamicRef. OK is false, and Ref the zero
	// value, when the child is not running or its handle is not an H.
	Ref H
	OK  bool
}

// Lister is what ChildrenOf lists: a *Ref or a *DynamicRef.
type Lister interface {
	WhichChildren(ctx context.Context) ([]ChildInfo, error)
}

// ChildrenOf is WhichChildren with typed handles: for each child, in start
// order, the handle of its running instance as an H, with no type assertion
// on the caller's side. For example:
//
//	kids, err := supervisor.ChildrenOf[*actor.ServerRef[Req, Resp, Msg]](ctx, sup)
func ChildrenOf[H any](ctx context.Context, sup Lister) ([]TypedChild[H], error) {
	infos, err := sup.WhichChildren(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TypedChild[H], len(infos))
	for i, info := range infos {
		out[i].ChildInfo = info
		out[i].Ref, out[i].OK = handleAs[H](info.PID)
	}
	return out, nil
}

// ChildOf returns the typed handle of the running child id of a static
// supervisor. It fails with a *ChildError naming the child (errors.Is
// ErrNotFound) if there is no such child or it is terminated, with one that
// matches ErrRestarting while it waits out a restart backoff, and with a
// *WrongTypeError if its handle is not an H.
func ChildOf[H any](ctx context.Context, sup *Ref, id string) (H, error) {
	var zero H
	infos, err := sup.WhichChildren(ctx)
	if err != nil {
		return zero, err
	}
	for _, info := range infos {
		if info.ID != id {
			continue
		}
		switch info.Status {
		case StatusRestarting:
			return zero, &ChildError{Kind: Restarting, ID: id}
		case StatusTerminated:
			return zero, &ChildError{Kind: NotFound, ID: id}
		}
		h, ok := handleAs[H](info.PID)
		if !ok {
			return zero, &WrongTypeError{ID: id, PID: info.PID}
		}
		return h, nil
	}
	return zero, &ChildError{Kind: NotFound, ID: id}
}

// WrongTypeError is ChildOf finding a child whose handle is of another type.
type WrongTypeError struct {
	ID  string
	PID actor.PID
}

func (e *WrongTypeError) Error() string {
	return "supervisor: child " + e.ID + " (" + e.PID.String() + ") is not of the requested type"
}

// handleAs converts the handle of pid to H. Supervisors' own handles are
// internal server references, so *Ref and *DynamicRef are built from them.
func handleAs[H any](pid actor.PID) (H, bool) {
	var zero H
	if pid.IsZero() {
		return zero, false
	}
	if h, ok := pid.Handle().(H); ok {
		return h, true
	}
	if r, ok := FromPID(pid); ok {
		h, ok := any(r).(H)
		return h, ok
	}
	if r, ok := DynamicFromPID(pid); ok {
		h, ok := any(r).(H)
		return h, ok
	}
	return zero, false
}
