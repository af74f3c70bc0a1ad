package supervisor

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// unboundedStop is a supervisor's default stop budget. Stopping children
// serially can take the sum of their shutdown timeouts (or forever, with
// Infinity), so a supervisor bounds nothing itself: its own supervisor's
// ChildSpec.Shutdown (Infinity by default for Supervisor children, as in
// OTP) or an explicit actor.WithStopTimeout does.
const unboundedStop = time.Duration(1 << 62)

// op is an admin request. Every admin operation is a call to the supervisor
// process, so it is ordered with the Downs the supervisor handles.
type op uint8

const (
	opWhich op = iota + 1
	opCount
	opLog
	opStop
	opStartChild
	opTerminate
	opRestart
	opDelete
)

type request struct {
	op   op
	id   string
	pid  actor.PID
	spec ChildSpec
}

// staticRequest and dynamicRequest give the two kinds of supervisor distinct
// server types, so FromPID and DynamicFromPID can tell them apart.
type (
	staticRequest  request
	dynamicRequest request
)

type response struct {
	// running is what Stop reports: killed children still running.
	running  error
	pid      actor.PID
	children []ChildInfo
	counts   Counts
	log      []LogEntry
}

type noCast struct{}

// child is one child spec and its current instance, if any.
type child struct {
	spec      ChildSpec
	pid       actor.PID
	ref       actor.MonitorRef
	status    ChildStatus
	pending   *pendingRestart // the scheduled restart this child waits for
	removed   bool
	startedAt time.Time
	attempt   int // consecutive restarts, for the backoff
}

// pendingRestart is a group of children to start, in order, once a backoff
// has elapsed. A later decision may take a member over (its pending then
// points elsewhere) or drop it; the timer message finds what is left.
type pendingRestart struct {
	gen     uint64
	members []*child
	timer   actor.Timer
}

// restartDue is the timer message of a pendingRestart.
type restartDue struct{ gen uint64 }

// state is the supervisor's whole state. Only the supervisor's goroutine
// (and its Init, before that goroutine starts) touches it.
type state struct {
	cfg      config
	initial  []ChildSpec
	ex       actor.Executor
	sys      *actor.System // decisions also go to its trace (the lab's)
	scope    *actor.Scope
	children []*child // in start order
	byRef    map[uint64]*child
	restarts []time.Time // restart times within the window, oldest first
	pending  map[uint64]*pendingRestart
	gen      uint64
	log      []LogEntry
	seq      uint64
	exiting  bool
	panicked *EscalationError            // a Panicked escalation, reported by terminate
	stopped  []*actor.Deferred[response] // Stop calls, answered once children are stopped
}

func newState(cfg config, initial []ChildSpec) *state {
	return &state{
		cfg:     cfg,
		initial: initial,
		byRef:   make(map[uint64]*child),
		pending: make(map[uint64]*pendingRestart),
	}
}

// ---- life cycle ----

func (st *state) init(p *actor.Proc) error {
	st.sys = p.Scope().System()
	st.ex = p.Executor()
	scope, err := p.Children()
	if err != nil {
		return err
	}
	st.scope = scope
	initial := st.initial
	st.initial = nil
	for i := range initial {
		c := &child{spec: initial[i]}
		if err := st.start(p, c); err != nil {
			// OTP: a child that cannot start fails the supervisor's start,
			// after the children started so far are stopped, newest first.
			st.exiting = true
			st.stopSerial(p, context.WithoutCancel(p.Ctx()))
			if o := startOutcome(err); o.Severity == actor.Panicked {
				// Panics are never contained, not even at start.
				esc := &EscalationError{ChildID: c.spec.ID, PID: startPID(err), Outcome: o, Reason: ErrChildPanicked}
				p.Fail(panickedOutcome(esc))
				return esc
			}
			return &StartChildError{ID: c.spec.ID, Err: err}
		}
		st.children = append(st.children, c)
	}
	return nil
}

func (st *state) terminate(p *actor.Proc) {
	st.exiting = true
	st.cancelPending()
	if st.cfg.dynamic {
		st.stopParallel(p, p.Ctx())
	} else {
		st.stopSerial(p, p.Ctx())
	}
	// Every child is stopped by now, each within its Shutdown. Those killed
	// at their timeout may still run user code: like OTP, the supervisor
	// does not wait for them, and reports them to Stop instead.
	var running error
	if st.scope != nil {
		if _, err := st.scope.CloseKilled(p.Ctx()); err != nil {
			running = err
		}
	}
	for _, d := range st.stopped {
		_ = d.Reply(response{running: running})
	}
	st.stopped = nil
	if st.panicked != nil {
		// INV-6A: once a child panicked the supervisor completes Panicked,
		// carrying the escalation. Every child has been stopped by now, in
		// order.
		p.Fail(panickedOutcome(st.panicked))
	}
}

// stopping reports whether exits must no longer be acted upon: the
// supervisor decided to exit, or was asked to stop.
func (st *state) stopping(p *actor.Proc) bool { return st.exiting || shuttingDown(p) }

// shuttingDown reports whether the supervisor process has been asked to
// stop (or is draining): exits seen then are part of the shutdown.
func shuttingDown(p *actor.Proc) bool { return p.Stopping() }

// ---- messages ----

func (st *state) handleInfo(p *actor.Proc, info any) error {
	switch m := info.(type) {
	case actor.Down:
		st.onDown(p, m)
	case restartDue:
		st.onRestartDue(p, m)
	}
	return nil
}

func (st *state) onDown(p *actor.Proc, d actor.Down) {
	c, ok := st.byRef[d.Ref.ID()]
	if !ok {
		return // an instance we already stopped or forgot
	}
	delete(st.byRef, d.Ref.ID())
	o := d.Outcome
	if d.NoProc() {
		// It died between Start and Monitor: judge its real outcome.
		if real, dead := d.PID.Outcome(); dead {
			o = real
		}
	}
	c.pid, c.ref, c.status = actor.PID{}, actor.MonitorRef{}, StatusTerminated
	st.handleExit(p, c, d.PID, o, false)
}

func (st *state) onRestartDue(p *actor.Proc, m restartDue) {
	op, ok := st.pending[m.gen]
	if !ok {
		return
	}
	delete(st.pending, m.gen)
	if st.stopping(p) {
		return
	}
	var members []*child
	for _, c := range op.members {
		if c.pending == op && !c.removed && c.status == StatusRestarting {
			members = append(members, c)
		}
	}
	st.runRestart(p, members)
}

func (st *state) handleCall(p *actor.Proc, req request, from actor.ReplyTo[response]) (response, error) {
	switch req.op {
	case opWhich:
		return response{children: st.which()}, nil
	case opCount:
		return response{counts: st.count()}, nil
	case opLog:
		return response{log: slices.Clone(st.log)}, nil
	case opStop:
		st.exiting = true
		st.cancelPending()
		p.Exit(nil)
		// Answered by terminate, with what is still running.
		st.stopped = append(st.stopped, from.Defer())
		return response{}, nil
	case opStartChild:
		pid, err := st.startChild(p, req.spec)
		return response{pid: pid}, err
	case opTerminate:
		if st.cfg.dynamic {
			return response{}, st.terminateByPID(p, req.pid)
		}
		return response{}, st.terminateByID(p, req.id)
	case opRestart:
		pid, err := st.restartChild(p, req.id)
		return response{pid: pid}, err
	case opDelete:
		return response{}, st.deleteChild(req.id)
	}
	return response{}, errors.New("supervisor: unknown request")
}

// ---- decisions ----

// judge applies the monotone rules (INV-6, INV-6A) to an exit: whether the
// child restarts, and if not, why the supervisor must fail (nil when the
// stop is acceptable).
func judge(c *child, o actor.Outcome) (restart bool, fail error) {
	contained := c.spec.Containment == Contain
	switch o.Severity {
	case actor.Panicked:
		return false, ErrChildPanicked
	case actor.Cancelled:
		if contained {
			return false, nil
		}
		return false, ErrChildFailed
	}
	switch c.spec.Restart {
	case Permanent:
		return true, nil
	case Transient:
		if o.Severity == actor.Err {
			return true, nil
		}
	}
	if o.Severity == actor.Err && !contained {
		return false, ErrChildFailed
	}
	return false, nil
}

// handleExit decides on an instance that ended on its own (or failed to
// start during a restart, fromStart).
func (st *state) handleExit(p *actor.Proc, c *child, old actor.PID, o actor.Outcome, fromStart bool) {
	entry := LogEntry{ChildID: c.spec.ID, PID: old, Outcome: o}
	if st.stopping(p) {
		entry.Decision = DecisionStop
		st.record(entry)
		st.settle(c)
		return
	}
	restart, fail := judge(c, o)
	if !restart {
		entry.Decision = DecisionStop
		st.record(entry)
		if fail != nil {
			st.escalate(p, c, old, o, fail)
			return
		}
		st.settle(c)
		return
	}
	now := st.ex.Now()
	if !st.budgetAllows(now) {
		entry.Decision = DecisionBudgetExhausted
		st.record(entry)
		switch st.cfg.policy {
		case PolicyEscalate:
			st.escalate(p, c, old, o, ErrBudgetExhausted)
			return
		case PolicyStop:
			entry.Decision = DecisionStop
			st.record(entry)
			st.settle(c)
			if o.Severity == actor.Err && c.spec.Containment != Contain {
				st.escalate(p, c, old, o, ErrBudgetExhausted)
			}
			return
		case PolicyResetCounter:
			st.restarts = st.restarts[:0]
			st.record(LogEntry{ChildID: c.spec.ID, PID: old, Decision: DecisionResetCounter})
		}
	}
	st.restarts = append(st.restarts, now)
	delay := st.backoff(c, now, fromStart)
	entry.Decision, entry.Delay = DecisionRestart, delay
	st.record(entry)
	st.restartGroup(p, c, delay, fromStart)
}

// budgetAllows slides the window to now and reports whether one more
// restart fits. Like OTP, a restart exactly Window old no longer counts.
func (st *state) budgetAllows(now time.Time) bool {
	keep := st.restarts[:0]
	for _, t := range st.restarts {
		if now.Sub(t) < st.cfg.window {
			keep = append(keep, t)
		}
	}
	st.restarts = keep
	return len(keep) < st.cfg.maxRestarts
}

func (st *state) backoff(c *child, now time.Time, fromStart bool) time.Duration {
	if !fromStart && now.Sub(c.startedAt) >= st.cfg.window {
		c.attempt = 0
	}
	d := st.cfg.backoff.delay(c.attempt, st.ex.Uint64)
	c.attempt++
	return d
}

// escalate gives up: it records why, and ends the supervisor with the
// outcome INV-6A assigns; terminate then stops every child, newest first.
func (st *state) escalate(p *actor.Proc, c *child, old actor.PID, o actor.Outcome, reason error) {
	err := &EscalationError{ChildID: c.spec.ID, PID: old, Outcome: o, Reason: reason}
	st.exiting = true
	st.cancelPending()
	st.record(LogEntry{ChildID: c.spec.ID, PID: old, Outcome: o, Decision: DecisionEscalate, Err: err})
	switch o.Severity {
	case actor.Cancelled:
		// A process becomes Cancelled only through cancellation, so the
		// supervisor cancels itself with the child's reason. Kill would skip
		// the ordered shutdown of the other children, so it is capped.
		kind := min(o.Cancel.Kind, actor.CancelShutdown)
		if kind == actor.CancelNone {
			kind = actor.CancelRequested
		}
		p.Self().Cancel(actor.CancelReason{Kind: kind, From: old, Cause: err})
	case actor.Panicked:
		st.panicked = err
		p.Exit(err)
	default:
		p.Exit(err)
	}
}

// panickedOutcome is the supervisor's own outcome after a child panicked:
// Panicked, carrying the escalation both as the panic value and as Err, so
// errors.Is(o.AsError(), ErrChildPanicked) holds like for every other
// escalation reason.
func panickedOutcome(esc *EscalationError) actor.Outcome {
	return actor.Outcome{Severity: actor.Panicked, Err: esc, Panic: &actor.PanicInfo{Value: esc}}
}

// settle records that a child stopped for good: a static supervisor keeps
// its spec (OTP), except for Temporary children; a dynamic one forgets it.
func (st *state) settle(c *child) {
	c.pid, c.status, c.pending = actor.PID{}, StatusTerminated, nil
	if st.cfg.dynamic || c.spec.Restart == Temporary {
		st.remove(c)
	}
}

func (st *state) remove(c *child) {
	if i := slices.Index(st.children, c); i >= 0 {
		st.children = slices.Delete(st.children, i, i+1)
	}
	c.removed, c.pending = true, nil
}

// group is the failed child and the siblings its restart takes along, in
// start order. Children stopped for good stay stopped: only running or
// restarting siblings belong to a group.
func (st *state) group(failed *child) []*child {
	if st.cfg.dynamic || st.cfg.strategy == OneForOne {
		return []*child{failed}
	}
	var g []*child
	after := false
	for _, c := range st.children {
		switch {
		case c == failed:
			after = true
			g = append(g, c)
		case (st.cfg.strategy == OneForAll || after) && (c.status == StatusRunning || c.status == StatusRestarting):
			g = append(g, c)
		}
	}
	return g
}

// restartGroup stops the failed child's group newest first, then restarts
// it in start order, now or after delay. viaMailbox defers even a zero
// delay to a message, so that a child that can never start does not keep
// the supervisor in a loop that admin calls cannot interrupt.
func (st *state) restartGroup(p *actor.Proc, failed *child, delay time.Duration, viaMailbox bool) {
	group := st.group(failed)
	keep := make([]bool, len(group))
	ctx := context.WithoutCancel(p.Ctx())
	for i := len(group) - 1; i >= 0; i-- {
		c := group[i]
		switch {
		case c == failed || c.status == StatusRestarting:
			keep[i] = true
		case c.status == StatusRunning:
			old, o, self := st.shutdown(p, ctx, c, 0)
			if self {
				// It ended on its own before we stopped it: its exit is
				// judged like any other, except that the group's restart
				// takes it along without spending more budget.
				restart, fail := judge(c, o)
				entry := LogEntry{ChildID: c.spec.ID, PID: old, Outcome: o, Decision: DecisionStop}
				if restart && c.spec.Restart != Temporary {
					entry.Decision, entry.Delay = DecisionRestart, delay
				}
				st.record(entry)
				if fail != nil {
					st.escalate(p, c, old, o, fail)
					return
				}
				if !restart {
					st.settle(c)
					continue
				}
			}
			if o.Severity == actor.Panicked {
				st.escalate(p, c, old, o, ErrChildPanicked)
				return
			}
			if c.spec.Restart == Temporary {
				// OTP: group restarts stop temporary children for good.
				st.remove(c)
				continue
			}
			keep[i] = true
		}
	}
	members := make([]*child, 0, len(group))
	for i, c := range group {
		if keep[i] {
			c.status, c.pending = StatusRestarting, nil
			members = append(members, c)
		}
	}
	if delay > 0 || viaMailbox {
		st.schedule(p, members, delay)
		return
	}
	st.runRestart(p, members)
}

func (st *state) schedule(p *actor.Proc, members []*child, delay time.Duration) {
	st.gen++
	op := &pendingRestart{gen: st.gen, members: members}
	for _, c := range members {
		c.status, c.pending = StatusRestarting, op
	}
	op.timer = p.SendAfter(delay, restartDue{gen: st.gen})
	st.pending[st.gen] = op
}

func (st *state) cancelPending() {
	// Stopping timers has no observable order, so map order is harmless.
	for gen, op := range st.pending {
		op.timer.Stop()
		delete(st.pending, gen)
	}
}

// runRestart starts members in order. A member that fails to start is
// judged like an exit; if that schedules another restart, the new pending
// restart takes over the members not started yet (OTP's try_again).
func (st *state) runRestart(p *actor.Proc, members []*child) {
	for _, c := range members {
		c.status, c.pending = StatusRestarting, nil
	}
	for _, c := range members {
		if st.stopping(p) {
			return // terminate deals with the members left restarting
		}
		if c.removed || c.status != StatusRestarting || c.pending != nil {
			continue
		}
		if err := st.start(p, c); err != nil {
			st.handleExit(p, c, startPID(err), startOutcome(err), true)
		}
	}
}

// start starts one instance of c and monitors it.
func (st *state) start(p *actor.Proc, c *child) error {
	pid, err := c.spec.Start(p.Ctx(), st.scope)
	c.pending = nil
	entry := LogEntry{ChildID: c.spec.ID}
	switch {
	case err != nil:
		c.pid, c.status = actor.PID{}, StatusTerminated
		entry.Decision, entry.PID, entry.Outcome, entry.Err = DecisionStartFailed, startPID(err), startOutcome(err), err
		st.record(entry)
		return err
	case pid.IsZero():
		c.pid, c.status = actor.PID{}, StatusTerminated
		entry.Decision = DecisionIgnore
		st.record(entry)
		return nil
	}
	c.pid, c.status, c.startedAt = pid, StatusRunning, st.ex.Now()
	c.ref = p.Monitor(pid)
	st.byRef[c.ref.ID()] = c
	entry.Decision, entry.PID = DecisionStart, pid
	st.record(entry)
	return nil
}

// startOutcome maps a start error onto the lattice: the instance's own
// outcome when the actor layer reports one, Err otherwise.
func startOutcome(err error) actor.Outcome {
	if se, ok := errors.AsType[*actor.StartError](err); ok {
		return se.Outcome
	}
	return actor.ErrOutcome(err)
}

func startPID(err error) actor.PID {
	if se, ok := errors.AsType[*actor.StartError](err); ok {
		return se.PID
	}
	return actor.PID{}
}

func (st *state) record(e LogEntry) {
	st.seq++
	e.Seq = st.seq
	e.Time = st.ex.Now()
	if len(st.log) >= st.cfg.logLimit {
		st.log = slices.Delete(st.log, 0, len(st.log)-st.cfg.logLimit+1)
	}
	st.log = append(st.log, e)
	if st.sys != nil && st.sys.Tracing() {
		st.sys.Emit(actor.TraceEvent{Kind: actor.TraceSupervision, PID: e.PID, Outcome: e.Outcome,
			Detail: e.Decision.String() + " " + e.ChildID})
	}
	if st.cfg.onLog != nil {
		st.cfg.onLog(e)
	}
}

// ---- stopping children ----

// shutdown stops a running child on purpose. The monitor is removed first,
// with flush, so the child's Down is never mistaken for a failure. self
// reports that the instance had already ended on its own; that exit is
// recorded as a Stop unless the caller says how it will decide (stopDecision
// zero), since it may restart the child after all.
func (st *state) shutdown(p *actor.Proc, ctx context.Context, c *child, stopDecision Decision) (old actor.PID, o actor.Outcome, self bool) {
	pid := st.detach(p, c)
	entry := LogEntry{ChildID: c.spec.ID, PID: pid}
	if o, dead := pid.Outcome(); dead {
		if stopDecision != 0 {
			entry.Decision, entry.Outcome = stopDecision, o
			st.record(entry)
		}
		return pid, o, true
	}
	killed := st.stopInstance(ctx, pid, c.spec.shutdown(), p.Self())
	o, _ = pid.Outcome()
	entry.Decision, entry.Outcome = DecisionShutdown, o
	if killed {
		entry.Decision = DecisionKill
	}
	st.record(entry)
	return pid, o, false
}

// detach forgets c's instance (demonitoring it with flush) and returns it.
func (st *state) detach(p *actor.Proc, c *child) actor.PID {
	pid := c.pid
	p.Demonitor(c.ref, true)
	delete(st.byRef, c.ref.ID())
	c.pid, c.ref, c.status = actor.PID{}, actor.MonitorRef{}, StatusTerminated
	return pid
}

// stopInstance asks pid to shut down and waits as its Shutdown allows,
// killing it when that runs out. It reports whether it killed.
func (st *state) stopInstance(ctx context.Context, pid actor.PID, sd Shutdown, from actor.PID) bool {
	if sd == BrutalKill {
		pid.Abort()
		return true
	}
	pid.Cancel(actor.CancelReason{Kind: actor.CancelShutdown, From: from})
	wctx := ctx
	if sd != Infinity {
		var cancel context.CancelFunc
		wctx, cancel = actor.WithTimeout(ctx, st.ex, time.Duration(sd))
		defer cancel()
	}
	if _, err := pid.Wait(wctx); err != nil {
		pid.Abort()
		return true
	}
	return false
}

// stopSerial stops every child, newest first, each within its Shutdown:
// a child may depend on those started before it (OTP's static supervisor).
func (st *state) stopSerial(p *actor.Proc, ctx context.Context) {
	for i := len(st.children) - 1; i >= 0; i-- {
		c := st.children[i]
		switch c.status {
		case StatusRunning:
			st.shutdown(p, ctx, c, DecisionStop)
		case StatusRestarting:
			c.status, c.pending = StatusTerminated, nil
		}
	}
}

// stopParallel stops every child at once: dynamic children are independent
// of each other. All are asked first (newest first), then each is waited for
// until its own deadline, counted from the request, and killed past it.
func (st *state) stopParallel(p *actor.Proc, ctx context.Context) {
	type stopping struct {
		c        *child
		pid      actor.PID
		deadline time.Time
		bounded  bool
		killed   bool
		self     bool
	}
	var all []stopping
	now := st.ex.Now()
	for i := len(st.children) - 1; i >= 0; i-- {
		c := st.children[i]
		if c.status == StatusRestarting {
			c.status, c.pending = StatusTerminated, nil
		}
		if c.status != StatusRunning {
			continue
		}
		s := stopping{c: c, pid: st.detach(p, c)}
		sd := c.spec.shutdown()
		switch _, dead := s.pid.Outcome(); {
		case dead:
			s.self = true
		case sd == BrutalKill:
			s.pid.Abort()
			s.killed = true
		default:
			s.pid.Cancel(actor.CancelReason{Kind: actor.CancelShutdown, From: p.Self()})
			if sd != Infinity {
				s.bounded, s.deadline = true, now.Add(time.Duration(sd))
			}
		}
		all = append(all, s)
	}
	for i := range all {
		s := &all[i]
		if !s.self && !s.killed {
			wctx, cancel := ctx, context.CancelFunc(func() {})
			if s.bounded {
				wctx, cancel = actor.WithTimeout(ctx, st.ex, s.deadline.Sub(st.ex.Now()))
			}
			if _, err := s.pid.Wait(wctx); err != nil {
				s.pid.Abort()
				s.killed = true
			}
			cancel()
		}
		o, _ := s.pid.Outcome()
		entry := LogEntry{ChildID: s.c.spec.ID, PID: s.pid, Outcome: o, Decision: DecisionShutdown}
		switch {
		case s.self:
			entry.Decision = DecisionStop
		case s.killed:
			entry.Decision = DecisionKill
		}
		st.record(entry)
	}
}

// ---- admin ----

func (st *state) find(id string) *child {
	for _, c := range st.children {
		if c.spec.ID == id {
			return c
		}
	}
	return nil
}

func (st *state) which() []ChildInfo {
	out := make([]ChildInfo, 0, len(st.children))
	for _, c := range st.children {
		out = append(out, ChildInfo{ID: c.spec.ID, PID: c.pid, Type: c.spec.Type, Restart: c.spec.Restart, Status: c.status})
	}
	return out
}

func (st *state) count() Counts {
	var n Counts
	for _, c := range st.children {
		n.Specs++
		if c.status == StatusRunning {
			n.Active++
		}
		if c.spec.Type == Supervisor {
			n.Supervisors++
		} else {
			n.Workers++
		}
	}
	return n
}

func (st *state) startChild(p *actor.Proc, spec ChildSpec) (actor.PID, error) {
	if err := validateChild(-1, &spec, !st.cfg.dynamic); err != nil {
		return actor.PID{}, err
	}
	if st.cfg.dynamic {
		if st.cfg.maxChildren > 0 && len(st.children) >= st.cfg.maxChildren {
			return actor.PID{}, &ChildError{Kind: MaxChildren, ID: spec.ID}
		}
	} else if c := st.find(spec.ID); c != nil {
		if c.status == StatusRunning {
			return actor.PID{}, &ChildError{Kind: AlreadyStarted, ID: spec.ID, PID: c.pid}
		}
		return actor.PID{}, &ChildError{Kind: AlreadyPresent, ID: spec.ID}
	}
	c := &child{spec: spec}
	if err := st.start(p, c); err != nil {
		st.escalateStartPanic(p, c, err)
		return actor.PID{}, &StartChildError{ID: spec.ID, Err: err}
	}
	if c.status != StatusRunning && st.cfg.dynamic {
		return actor.PID{}, nil // ignored: a dynamic supervisor keeps no idle specs
	}
	st.children = append(st.children, c)
	return c.pid, nil
}

// escalateStartPanic fails the supervisor when an admin start panicked: the
// caller gets the error, but a panic is never contained (INV-6).
func (st *state) escalateStartPanic(p *actor.Proc, c *child, err error) {
	if o := startOutcome(err); o.Severity == actor.Panicked {
		st.escalate(p, c, startPID(err), o, ErrChildPanicked)
	}
}

func (st *state) terminateByID(p *actor.Proc, id string) error {
	c := st.find(id)
	if c == nil {
		return &ChildError{Kind: NotFound, ID: id}
	}
	switch c.status {
	case StatusRunning:
		old, o, _ := st.shutdown(p, context.WithoutCancel(p.Ctx()), c, DecisionStop)
		if o.Severity == actor.Panicked {
			st.escalate(p, c, old, o, ErrChildPanicked)
		}
	case StatusRestarting:
		c.status, c.pending = StatusTerminated, nil
		st.record(LogEntry{ChildID: c.spec.ID, Decision: DecisionStop})
	}
	if c.spec.Restart == Temporary {
		st.remove(c)
	}
	return nil
}

func (st *state) terminateByPID(p *actor.Proc, pid actor.PID) error {
	for _, c := range st.children {
		if c.status == StatusRunning && c.pid == pid {
			old, o, _ := st.shutdown(p, context.WithoutCancel(p.Ctx()), c, DecisionStop)
			st.remove(c)
			if o.Severity == actor.Panicked {
				st.escalate(p, c, old, o, ErrChildPanicked)
			}
			return nil
		}
	}
	return &ChildError{Kind: NotFound, PID: pid}
}

// refuseBusy is the admin error for a child that is not terminated.
func refuseBusy(c *child) error {
	switch c.status {
	case StatusRunning:
		return &ChildError{Kind: Running, ID: c.spec.ID, PID: c.pid}
	case StatusRestarting:
		return &ChildError{Kind: Restarting, ID: c.spec.ID}
	}
	return nil
}

func (st *state) restartChild(p *actor.Proc, id string) (actor.PID, error) {
	c := st.find(id)
	if c == nil {
		return actor.PID{}, &ChildError{Kind: NotFound, ID: id}
	}
	if err := refuseBusy(c); err != nil {
		return actor.PID{}, err
	}
	if err := st.start(p, c); err != nil {
		st.escalateStartPanic(p, c, err)
		return actor.PID{}, &StartChildError{ID: id, Err: err}
	}
	return c.pid, nil
}

func (st *state) deleteChild(id string) error {
	c := st.find(id)
	if c == nil {
		return &ChildError{Kind: NotFound, ID: id}
	}
	if err := refuseBusy(c); err != nil {
		return err
	}
	st.remove(c)
	st.record(LogEntry{ChildID: id, Decision: DecisionDelete})
	return nil
}

// ---- the actor.Server behaviours ----

type staticServer struct{ st *state }

func (s staticServer) Init(p *actor.Proc) error { return s.st.init(p) }
func (s staticServer) HandleCall(p *actor.Proc, req staticRequest, from actor.ReplyTo[response]) (response, error) {
	return s.st.handleCall(p, request(req), from)
}
func (s staticServer) HandleCast(*actor.Proc, noCast) error      { return nil }
func (s staticServer) HandleInfo(p *actor.Proc, info any) error  { return s.st.handleInfo(p, info) }
func (s staticServer) Terminate(p *actor.Proc, _ actor.Outcome)  { s.st.terminate(p) }
func (s dynamicServer) Init(p *actor.Proc) error                 { return s.st.init(p) }
func (s dynamicServer) HandleCast(*actor.Proc, noCast) error     { return nil }
func (s dynamicServer) HandleInfo(p *actor.Proc, info any) error { return s.st.handleInfo(p, info) }
func (s dynamicServer) Terminate(p *actor.Proc, _ actor.Outcome) { s.st.terminate(p) }
func (s dynamicServer) HandleCall(p *actor.Proc, req dynamicRequest, from actor.ReplyTo[response]) (response, error) {
	return s.st.handleCall(p, request(req), from)
}

type dynamicServer struct{ st *state }
