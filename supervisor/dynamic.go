package supervisor

import (
	"context"

	"github.com/orrery-run/orrery/actor"
)

// DynamicRef is the handle of a dynamic supervisor (OTP's
// DynamicSupervisor): it starts with no children, children are added with
// StartChild and identified by PID, each restarts on its own (one for one)
// under the shared budget, and a child that stops for good is forgotten. At
// shutdown every child is asked to stop at once and each gets its own
// Shutdown timeout, since dynamic children do not depend on each other.
type DynamicRef struct {
	srv *actor.ServerRef[dynamicRequest, response, noCast]
}

// StartDynamic validates spec and starts a dynamic supervisor in scope.
func StartDynamic(ctx context.Context, scope *actor.Scope, spec DynamicSpec, opts ...actor.Option) (*DynamicRef, error) {
	cfg, err := spec.compile()
	if err != nil {
		return nil, err
	}
	srv, err := actor.StartServer[dynamicRequest, response, noCast](ctx, scope, dynamicServer{newState(cfg, nil)}, processOptions(opts)...)
	if err != nil {
		return nil, err
	}
	return &DynamicRef{srv: srv}, nil
}

// DynamicFromPID returns the handle of the dynamic supervisor pid names.
func DynamicFromPID(pid actor.PID) (*DynamicRef, bool) {
	srv, ok := pid.Handle().(*actor.ServerRef[dynamicRequest, response, noCast])
	if !ok {
		return nil, false
	}
	return &DynamicRef{srv: srv}, true
}

// DynamicChildSpecFor makes a dynamic supervisor a child of another
// supervisor, like ChildSpecFor.
func DynamicChildSpecFor(id string, spec DynamicSpec, opts ...actor.Option) ChildSpec {
	opts = append([]actor.Option{actor.WithName(id)}, opts...)
	return supervisorChild(id, func(ctx context.Context, scope *actor.Scope) (actor.PID, error) {
		r, err := StartDynamic(ctx, scope, spec, opts...)
		if err != nil {
			return actor.PID{}, err
		}
		return r.PID(), nil
	})
}

// PID returns the supervisor's PID.
func (d *DynamicRef) PID() actor.PID { return d.srv.PID() }

func (d *DynamicRef) call(ctx context.Context, req request) (response, error) {
	return d.srv.Call(ctx, dynamicRequest(req))
}

// StartChild starts a child from spec and returns its PID (zero if Start
// ignored it). spec.ID is only a label here. ErrMaxChildren at the limit.
func (d *DynamicRef) StartChild(ctx context.Context, spec ChildSpec) (actor.PID, error) {
	resp, err := d.call(ctx, request{op: opStartChild, spec: spec})
	return resp.pid, err
}

// TerminateChild stops the running child pid (per its Shutdown) and forgets
// it. ErrNotFound if pid is not a running child.
func (d *DynamicRef) TerminateChild(ctx context.Context, pid actor.PID) error {
	_, err := d.call(ctx, request{op: opTerminate, pid: pid})
	return err
}

// WhichChildren lists the children in start order.
func (d *DynamicRef) WhichChildren(ctx context.Context) ([]ChildInfo, error) {
	resp, err := d.call(ctx, request{op: opWhich})
	return resp.children, err
}

// CountChildren counts the children.
func (d *DynamicRef) CountChildren(ctx context.Context) (Counts, error) {
	resp, err := d.call(ctx, request{op: opCount})
	return resp.counts, err
}

// Log returns the supervision log, oldest entry first.
func (d *DynamicRef) Log(ctx context.Context) ([]LogEntry, error) {
	resp, err := d.call(ctx, request{op: opLog})
	return resp.log, err
}

// Stop stops the supervisor, its children in parallel, and returns its
// outcome. Like Ref.Stop it is bounded by the children's shutdown timeouts
// and reports killed children still running in a *actor.NotQuiescentError.
func (d *DynamicRef) Stop(ctx context.Context) (actor.Outcome, error) {
	resp, err := d.call(ctx, request{op: opStop})
	return waitStopped(ctx, d.PID(), resp, err)
}
