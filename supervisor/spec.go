package supervisor

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// Strategy says which children restart when one of them fails.
type Strategy uint8

const (
	// OneForOne restarts only the child that failed.
	OneForOne Strategy = iota
	// OneForAll stops every other child (newest first) and restarts them
	// all in start order: for children that share state.
	OneForAll
	// RestForOne stops the children started after the failed one (newest
	// first) and restarts the failed child and those after it, in start
	// order: for children that depend on the ones started before them.
	RestForOne
)

func (s Strategy) String() string {
	switch s {
	case OneForOne:
		return "one-for-one"
	case OneForAll:
		return "one-for-all"
	case RestForOne:
		return "rest-for-one"
	}
	return fmt.Sprintf("strategy(%d)", uint8(s))
}

// RestartType says which exits of a child are restarted (subject to the
// budget). Cancelled and Panicked exits are never restarted, whatever the type.
type RestartType uint8

const (
	// Permanent children are restarted after Ok and Err exits.
	Permanent RestartType = iota
	// Transient children are restarted after Err exits only.
	Transient
	// Temporary children are never restarted. Their spec is forgotten once
	// they stop, and group restarts stop them without starting them again.
	Temporary
)

func (r RestartType) String() string {
	switch r {
	case Permanent:
		return "permanent"
	case Transient:
		return "transient"
	case Temporary:
		return "temporary"
	}
	return fmt.Sprintf("restart(%d)", uint8(r))
}

// Shutdown is how a child is stopped on purpose: a positive duration is the
// time it gets to stop after the shutdown request before it is killed;
// BrutalKill kills it at once; Infinity waits as long as it takes. The zero
// value means the default: 5s for a Worker, Infinity for a Supervisor (whose
// own children need the time), as in OTP.
type Shutdown time.Duration

const (
	// BrutalKill kills the child without asking it to stop.
	BrutalKill Shutdown = -1
	// Infinity waits for the child however long its shutdown takes.
	Infinity Shutdown = math.MaxInt64
	// DefaultWorkerShutdown is the shutdown timeout of a Worker whose spec
	// leaves Shutdown zero.
	DefaultWorkerShutdown Shutdown = Shutdown(5 * time.Second)
)

func (s Shutdown) String() string {
	switch {
	case s == BrutalKill:
		return "brutal-kill"
	case s == Infinity:
		return "infinity"
	case s == 0:
		return "default"
	}
	return time.Duration(s).String()
}

// ChildType tells workers from supervisors; it sets the default Shutdown and
// is reported by WhichChildren and CountChildren.
type ChildType uint8

const (
	Worker ChildType = iota
	Supervisor
)

func (t ChildType) String() string {
	switch t {
	case Worker:
		return "worker"
	case Supervisor:
		return "supervisor"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Containment says what happens to the supervisor when this child stops for
// good without being restarted (INV-6A, "Supervision Decision -> Supervisor
// Outcome"): an Err exit that is not restarted, a Cancelled exit, or an
// exhausted budget under PolicyStop. Ok exits never fail the supervisor, and
// a Panicked child always does: panics are never contained.
type Containment uint8

const (
	// Propagate (the zero value) fails the supervisor: it stops its other
	// children and exits Err (for an Err exit) or Cancelled (for a Cancelled
	// one). A child is required unless its spec says otherwise.
	Propagate Containment = iota
	// Contain keeps the supervisor running (Ok) when the child stops.
	Contain
)

func (c Containment) String() string {
	switch c {
	case Propagate:
		return "propagate"
	case Contain:
		return "contain"
	}
	return fmt.Sprintf("containment(%d)", uint8(c))
}

// ChildSpec describes one child.
type ChildSpec struct {
	// ID names the child within a (static) supervisor; it must be unique
	// there. A dynamic supervisor identifies children by PID and uses ID
	// only in its log, so there it may repeat or be empty.
	ID string
	// Start starts one instance of the child in scope, which is the
	// supervisor's own children scope, and returns its PID. It runs on the
	// supervisor's goroutine, so it must return once the child is started.
	// ctx ends if the supervisor is asked to stop. A zero PID with a nil
	// error means "ignore": the spec is kept but nothing runs (OTP's ignore).
	Start func(ctx context.Context, scope *actor.Scope) (actor.PID, error)
	// Restart says which exits are restarted.
	Restart RestartType
	// Shutdown says how the child is stopped on purpose.
	Shutdown Shutdown
	// Type is Worker or Supervisor.
	Type ChildType
	// Containment says whether the child stopping for good fails the
	// supervisor (Propagate) or not (Contain).
	Containment Containment
}

// shutdown resolves the zero Shutdown to the type's default.
func (c *ChildSpec) shutdown() Shutdown {
	if c.Shutdown != 0 {
		return c.Shutdown
	}
	if c.Type == Supervisor {
		return Infinity
	}
	return DefaultWorkerShutdown
}

// EscalationPolicy says what a supervisor does when a child should restart
// but the restart budget is exhausted.
type EscalationPolicy uint8

const (
	// PolicyEscalate (the default) stops every child, newest first, and
	// exits Err, so that the failure reaches the supervisor's own
	// supervisor: OTP's behaviour at maximum restart intensity.
	PolicyEscalate EscalationPolicy = iota
	// PolicyStop stops the failed child for good. The supervisor goes on if
	// the child is contained, or exited Ok; otherwise it fails with Err.
	PolicyStop
	// PolicyResetCounter clears the restart window and restarts anyway:
	// retry forever, usually together with a backoff.
	PolicyResetCounter
)

func (p EscalationPolicy) String() string {
	switch p {
	case PolicyEscalate:
		return "escalate"
	case PolicyStop:
		return "stop"
	case PolicyResetCounter:
		return "reset-counter"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

const (
	// DefaultMaxRestarts and DefaultWindow are the budget of a Spec that
	// leaves MaxRestarts and Window zero: three restarts in five seconds.
	DefaultMaxRestarts = 3
	DefaultWindow      = 5 * time.Second
	// NoRestarts as MaxRestarts allows no restart at all: the first exit
	// that wants a restart exhausts the budget.
	NoRestarts = -1
	// DefaultLogLimit is how many log entries a supervisor keeps unless
	// LogLimit says otherwise; older ones are dropped (Seq shows the gap).
	DefaultLogLimit = 1024
)

// budget is the restart budget and what happens when it runs out; static
// and dynamic supervisors share it.
type budget struct {
	maxRestarts int
	window      time.Duration
	escalation  EscalationPolicy
	backoff     Backoff
}

// Spec describes a static supervisor: its strategy, budget and children,
// which start in order.
type Spec struct {
	Strategy Strategy
	// MaxRestarts restarts are allowed within any Window (sliding, on the
	// executor's clock). Zero means DefaultMaxRestarts; NoRestarts means
	// none.
	MaxRestarts int
	// Window is the length of the sliding window. Zero means DefaultWindow.
	Window time.Duration
	// Escalation applies when a restart would exceed the budget.
	Escalation EscalationPolicy
	// Backoff delays each restart. The zero value restarts at once.
	Backoff  Backoff
	Children []ChildSpec
	// OnLog, if set, receives every log entry as it is recorded, on the
	// supervisor's goroutine. It must not block. It is how entries recorded
	// while the supervisor stops (and after Log can no longer be called)
	// are observed.
	OnLog func(LogEntry)
	// LogLimit bounds the entries Log returns. Zero means DefaultLogLimit.
	LogLimit int
}

// DynamicSpec describes a dynamic supervisor: children are added at run time
// with StartChild and restarted one for one.
type DynamicSpec struct {
	// MaxRestarts, Window, Escalation and Backoff are as in Spec.
	MaxRestarts int
	Window      time.Duration
	Escalation  EscalationPolicy
	Backoff     Backoff
	// MaxChildren bounds the children (running or restarting); zero means
	// no bound.
	MaxChildren int
	// OnLog and LogLimit are as in Spec.
	OnLog    func(LogEntry)
	LogLimit int
}

// ErrInvalidSpec matches every *SpecError.
const ErrInvalidSpec sentinel = "supervisor: invalid spec"

// Reasons a spec is invalid, matched with errors.Is through *SpecError.
const (
	ErrDuplicateID  = sentinel("duplicate child id")
	ErrMissingID    = sentinel("missing child id")
	ErrMissingStart = sentinel("missing start function")
	ErrBadValue     = sentinel("value out of range")
	ErrBadBackoff   = sentinel("invalid backoff")
	ErrBadShutdown  = sentinel("invalid shutdown")
	ErrBadBudget    = sentinel("invalid restart budget")
)

// SpecError says what is wrong with a Spec, DynamicSpec or ChildSpec.
type SpecError struct {
	// Child is set when a child spec is at fault; ChildID and Index (its
	// position in Spec.Children, or -1 for StartChild) name it.
	Child   bool
	ChildID string
	Index   int
	// Field is the field at fault and Err the reason (ErrDuplicateID, ...).
	Field string
	Err   error
}

func (e *SpecError) Error() string {
	switch {
	case !e.Child:
		return fmt.Sprintf("supervisor: invalid spec: %s: %v", e.Field, e.Err)
	case e.Index < 0:
		return fmt.Sprintf("supervisor: invalid child spec %q: %s: %v", e.ChildID, e.Field, e.Err)
	}
	return fmt.Sprintf("supervisor: invalid child spec %d (%q): %s: %v", e.Index, e.ChildID, e.Field, e.Err)
}

// Unwrap makes a SpecError match both ErrInvalidSpec and its reason.
func (e *SpecError) Unwrap() []error { return []error{ErrInvalidSpec, e.Err} }

func specErr(field string, err error) *SpecError {
	return &SpecError{Index: -1, Field: field, Err: err}
}

// validateChild checks one child spec; requireID is false for dynamic
// children, which are known by PID.
func validateChild(i int, c *ChildSpec, requireID bool) error {
	bad := func(field string, err error) error {
		return &SpecError{Child: true, ChildID: c.ID, Index: i, Field: field, Err: err}
	}
	switch {
	case requireID && c.ID == "":
		return bad("ID", ErrMissingID)
	case c.Start == nil:
		return bad("Start", ErrMissingStart)
	case c.Restart > Temporary:
		return bad("Restart", ErrBadValue)
	case c.Type > Supervisor:
		return bad("Type", ErrBadValue)
	case c.Containment > Contain:
		return bad("Containment", ErrBadValue)
	case c.Shutdown < 0 && c.Shutdown != BrutalKill:
		return bad("Shutdown", ErrBadShutdown)
	}
	return nil
}

// config is a validated spec with defaults resolved.
type config struct {
	dynamic     bool
	strategy    Strategy
	maxRestarts int
	window      time.Duration
	policy      EscalationPolicy
	backoff     Backoff
	maxChildren int
	logLimit    int
	onLog       func(LogEntry)
}

func compileBudget(b budget, logLimit int, onLog func(LogEntry)) (config, error) {
	cfg := config{
		maxRestarts: b.maxRestarts,
		window:      b.window,
		policy:      b.escalation,
		backoff:     b.backoff,
		logLimit:    logLimit,
		onLog:       onLog,
	}
	switch {
	case b.maxRestarts < NoRestarts:
		return cfg, specErr("MaxRestarts", ErrBadBudget)
	case b.window < 0:
		return cfg, specErr("Window", ErrBadBudget)
	case b.escalation > PolicyResetCounter:
		return cfg, specErr("Escalation", ErrBadValue)
	case logLimit < 0:
		return cfg, specErr("LogLimit", ErrBadValue)
	}
	if err := b.backoff.validate(); err != nil {
		return cfg, specErr("Backoff", err)
	}
	switch cfg.maxRestarts {
	case 0:
		cfg.maxRestarts = DefaultMaxRestarts
	case NoRestarts:
		cfg.maxRestarts = 0
	}
	if cfg.window == 0 {
		cfg.window = DefaultWindow
	}
	if cfg.logLimit == 0 {
		cfg.logLimit = DefaultLogLimit
	}
	return cfg, nil
}

// compile validates s and returns its config and a private copy of its
// children, so the caller may reuse or change s afterwards.
func (s *Spec) compile() (config, []ChildSpec, error) {
	cfg, err := compileBudget(budget{s.MaxRestarts, s.Window, s.Escalation, s.Backoff}, s.LogLimit, s.OnLog)
	if err != nil {
		return cfg, nil, err
	}
	if s.Strategy > RestForOne {
		return cfg, nil, specErr("Strategy", ErrBadValue)
	}
	cfg.strategy = s.Strategy
	children := make([]ChildSpec, len(s.Children))
	copy(children, s.Children)
	seen := make(map[string]struct{}, len(children))
	for i := range children {
		if err := validateChild(i, &children[i], true); err != nil {
			return cfg, nil, err
		}
		if _, dup := seen[children[i].ID]; dup {
			return cfg, nil, &SpecError{Child: true, ChildID: children[i].ID, Index: i, Field: "ID", Err: ErrDuplicateID}
		}
		seen[children[i].ID] = struct{}{}
	}
	return cfg, children, nil
}

func (s *DynamicSpec) compile() (config, error) {
	cfg, err := compileBudget(budget{s.MaxRestarts, s.Window, s.Escalation, s.Backoff}, s.LogLimit, s.OnLog)
	if err != nil {
		return cfg, err
	}
	if s.MaxChildren < 0 {
		return cfg, specErr("MaxChildren", ErrBadValue)
	}
	cfg.dynamic = true
	cfg.maxChildren = s.MaxChildren
	return cfg, nil
}
