package supervisor

import (
	"context"
	"errors"
	"slices"

	"github.com/orrery-run/orrery/actor"
)

// Ref is the handle of a static supervisor. Every method but PID is a call
// to the supervisor process, so it is ordered with the exits the supervisor
// handles, and fails with an *actor.CallError once the supervisor is gone.
type Ref struct {
	srv *actor.ServerRef[staticRequest, response, noCast]
}

// Start validates spec (a *SpecError if it is wrong), starts the supervisor
// process in scope and its children in order, and returns once all have
// started. If a child cannot start, the ones already started are stopped,
// newest first, and Start fails with an *actor.StartError whose outcome
// carries a *StartChildError. opts configure the supervisor process
// (actor.WithName, ...); its stop budget is unbounded unless
// actor.WithStopTimeout says otherwise.
func Start(ctx context.Context, scope *actor.Scope, spec Spec, opts ...actor.Option) (*Ref, error) {
	cfg, children, err := spec.compile()
	if err != nil {
		return nil, err
	}
	srv, err := actor.StartServer[staticRequest, response, noCast](ctx, scope, staticServer{newState(cfg, children)}, processOptions(opts)...)
	if err != nil {
		return nil, err
	}
	return &Ref{srv: srv}, nil
}

func processOptions(opts []actor.Option) []actor.Option {
	return append([]actor.Option{actor.WithStopTimeout(unboundedStop)}, opts...)
}

// FromPID returns the handle of the static supervisor pid names, for
// instance a Supervisor child listed by WhichChildren.
func FromPID(pid actor.PID) (*Ref, bool) {
	srv, ok := pid.Handle().(*actor.ServerRef[staticRequest, response, noCast])
	if !ok {
		return nil, false
	}
	return &Ref{srv: srv}, true
}

// ChildSpecFor makes a supervisor a child of another: a Permanent child of
// Type Supervisor with Infinity shutdown (OTP's defaults for supervisors),
// named id. Change the returned spec's fields to taste.
// The spec is copied now: every restart starts the same tree, whatever the
// caller does with its slices afterwards.
func ChildSpecFor(id string, spec Spec, opts ...actor.Option) ChildSpec {
	spec.Children = slices.Clone(spec.Children)
	opts = append([]actor.Option{actor.WithName(id)}, opts...)
	return supervisorChild(id, func(ctx context.Context, scope *actor.Scope) (actor.PID, error) {
		r, err := Start(ctx, scope, spec, opts...)
		if err != nil {
			return actor.PID{}, err
		}
		return r.PID(), nil
	})
}

// supervisorChild is the OTP default spec of a supervisor child: permanent,
// and given all the time it needs to shut its own tree down.
func supervisorChild(id string, start func(ctx context.Context, scope *actor.Scope) (actor.PID, error)) ChildSpec {
	return ChildSpec{ID: id, Type: Supervisor, Restart: Permanent, Shutdown: Infinity, Start: start}
}

// PID returns the supervisor's PID.
func (r *Ref) PID() actor.PID { return r.srv.PID() }

func (r *Ref) call(ctx context.Context, req request) (response, error) {
	return r.srv.Call(ctx, staticRequest(req))
}

// WhichChildren lists the children in start order.
func (r *Ref) WhichChildren(ctx context.Context) ([]ChildInfo, error) {
	resp, err := r.call(ctx, request{op: opWhich})
	return resp.children, err
}

// CountChildren counts the children.
func (r *Ref) CountChildren(ctx context.Context) (Counts, error) {
	resp, err := r.call(ctx, request{op: opCount})
	return resp.counts, err
}

// StartChild adds a child after the existing ones and starts it. A spec with
// an ID already in use is refused with ErrAlreadyStarted (running) or
// ErrAlreadyPresent (terminated; use RestartChild or DeleteChild).
func (r *Ref) StartChild(ctx context.Context, spec ChildSpec) (actor.PID, error) {
	resp, err := r.call(ctx, request{op: opStartChild, spec: spec})
	return resp.pid, err
}

// TerminateChild stops the child (per its Shutdown) and keeps its spec, so
// RestartChild can start it again; a Temporary child's spec is dropped. A
// child waiting out a backoff stays terminated. ErrNotFound if no child has
// that ID.
func (r *Ref) TerminateChild(ctx context.Context, id string) error {
	_, err := r.call(ctx, request{op: opTerminate, id: id})
	return err
}

// RestartChild starts a terminated child again (this does not count against
// the restart budget). ErrRunning, ErrRestarting or ErrNotFound otherwise.
func (r *Ref) RestartChild(ctx context.Context, id string) (actor.PID, error) {
	resp, err := r.call(ctx, request{op: opRestart, id: id})
	return resp.pid, err
}

// DeleteChild removes a terminated child's spec. ErrRunning, ErrRestarting
// or ErrNotFound otherwise.
func (r *Ref) DeleteChild(ctx context.Context, id string) error {
	_, err := r.call(ctx, request{op: opDelete, id: id})
	return err
}

// Log returns the supervision log, oldest entry first. Entries recorded
// while the supervisor stops are seen only through Spec.OnLog.
func (r *Ref) Log(ctx context.Context) ([]LogEntry, error) {
	resp, err := r.call(ctx, request{op: opLog})
	return resp.log, err
}

// Stop stops the supervisor: its children stop, newest first, each per its
// Shutdown, and Stop returns the supervisor's outcome (Ok unless something
// failed). Stopping a supervisor that is already stopping just waits.
//
// Stop is bounded by the children's shutdown timeouts, as in OTP: a child
// that ignores its shutdown is killed at its timeout and not waited for.
// If such a child's goroutine is still running user code when the
// supervisor completes, Stop returns the outcome together with a
// *actor.NotQuiescentError whose Running lists those processes (see
// actor.Scope.CloseKilled for what they may still do).
func (r *Ref) Stop(ctx context.Context) (actor.Outcome, error) {
	resp, err := r.call(ctx, request{op: opStop})
	return waitStopped(ctx, r.PID(), resp, err)
}

func waitStopped(ctx context.Context, pid actor.PID, resp response, callErr error) (actor.Outcome, error) {
	if callErr != nil && !errors.Is(callErr, actor.ErrServerStopped) && !errors.Is(callErr, actor.ErrCallNoProc) {
		return actor.Outcome{}, callErr
	}
	o, err := pid.Wait(ctx)
	if err == nil && resp.running != nil {
		err = resp.running
	}
	return o, err
}
