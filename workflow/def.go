package workflow

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
)

// UniversePrefix starts the universe of every run's world record: the runs
// of workflow "w" are the worlds of universe "sys.run/w".
const UniversePrefix = "sys.run/"

// Universe returns the universe of the runs of workflow name.
func Universe(name string) string { return UniversePrefix + name }

// Workflow is a registered workflow definition, whatever its input and
// output types: a *Def. Only this package implements it.
type Workflow interface {
	// Name is the plan id of its runs' events.
	Name() string
	// Version is the plan version of its runs' events. A run keeps the
	// version it was started with; a worker runs only the runs of the
	// versions it has.
	Version() uint64
	check() error
	encodeInput(in any) ([]byte, error)
	canonInput(raw []byte) ([]byte, error)
	invoke(c *Ctx, in []byte) ([]byte, error)
}

// Def is a workflow: a Go function whose steps are journaled, so that a run
// of it survives crashes. New makes one.
type Def[In, Out any] struct {
	name    string
	version uint64
	fn      func(ctx *Ctx, in In) (Out, error)
}

// New defines workflow name at version. fn is the workflow function: it is
// re-run from the start whenever a worker takes a run over, so everything
// it does outside its steps must be deterministic (the same input and
// step results give the same step calls in the same order), and every
// side effect belongs in a step. A definition that breaks the naming rules
// is reported by NewWorkflows and by every call that uses it, with
// ErrInvalid.
func New[In, Out any](name string, version uint64, fn func(ctx *Ctx, in In) (Out, error)) *Def[In, Out] {
	return &Def[In, Out]{name: name, version: version, fn: fn}
}

// Name implements Workflow.
func (d *Def[In, Out]) Name() string { return d.name }

// Version implements Workflow.
func (d *Def[In, Out]) Version() uint64 { return d.version }

func (d *Def[In, Out]) check() error {
	switch {
	case d == nil || d.fn == nil:
		return errorf("define", ErrInvalid, "", detail("a workflow needs a function"))
	case d.name == "" || strings.ContainsAny(d.name, "/\x00") || !utf8.ValidString(d.name):
		return errorf("define", ErrInvalid, "", detail(fmt.Sprintf("workflow name %q must be non-empty UTF-8 without '/' or NUL", d.name)))
	case d.version < 1 || d.version > maxInt:
		return errorf("define", ErrInvalid, "", detail(fmt.Sprintf("workflow %s: version %d must be between 1 and 2^63-1", d.name, d.version)))
	}
	return store.CheckID("define", "universe", Universe(d.name))
}

func (d *Def[In, Out]) encodeInput(in any) ([]byte, error) {
	v, ok := in.(In)
	if !ok {
		return nil, errorf("start", ErrInvalid, "", detail(fmt.Sprintf("workflow %s takes %T, not %T", d.name, *new(In), in)))
	}
	b, err := event.Marshal(v)
	if err != nil {
		return nil, errorf("start", ErrInvalid, "", err)
	}
	return b, nil
}

// canonInput decodes raw into In with the event package's strict decoder,
// refusing unknown fields too (a misspelt field would otherwise vanish
// silently), and encodes it again, so an input that arrived as generic CBOR
// is stored exactly as a typed Start would store it, and a repeated start
// compares equal. The decoder is built per call: starts are rare, and the
// package keeps no shared state.
func (d *Def[In, Out]) canonInput(raw []byte) ([]byte, error) {
	dec, err := event.NewDecoder(event.DecoderOptions{DisallowUnknownFields: true})
	if err != nil {
		return nil, errorf("start", ErrInvalid, "", err)
	}
	var in In
	if err := dec.Unmarshal(raw, &in); err != nil {
		return nil, errorf("start", ErrInvalid, "", fmt.Errorf("workflow %s: the input does not decode as its input type: %w", d.name, err))
	}
	return d.encodeInput(in)
}

// invoke decodes the input, runs the function and encodes its output. A
// panic in the function is its failure, not the worker's.
func (d *Def[In, Out]) invoke(c *Ctx, raw []byte) (out []byte, err error) {
	var in In
	if err := event.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("the run's input does not decode as %T: %w", in, err)
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("the workflow function panicked: %v", p)
		}
	}()
	v, err := d.fn(c, in)
	if err != nil {
		return nil, err
	}
	if out, err = event.Marshal(v); err != nil {
		return nil, fmt.Errorf("the workflow's output has no canonical encoding: %w", err)
	}
	return out, nil
}

const maxInt = 1<<63 - 1

// Workflows is the set of definitions a worker runs and a client starts:
// one or more versions per name. A binary carries every version that still
// has runs to finish (v1 for the runs started under it, v2 for the new
// ones): each run is pinned to the version that started it, and a worker
// runs the runs of every version it carries.
type Workflows struct {
	byName map[string][]Workflow // each name's versions, ascending
	names  []string              // sorted: scans visit workflows in a stable order
	queues []Queue               // declared queues, by name (AddQueues)
}

// NewWorkflows registers defs: ErrInvalid for an invalid definition or a
// name and version given twice. Several versions of one name may be
// registered; Lookup gives the newest.
func NewWorkflows(defs ...Workflow) (*Workflows, error) {
	w := &Workflows{byName: map[string][]Workflow{}}
	for _, d := range defs {
		if d == nil {
			return nil, errorf("register", ErrInvalid, "", detail("a nil workflow"))
		}
		if err := d.check(); err != nil {
			return nil, err
		}
		vs, known := w.byName[d.Name()]
		i, dup := slices.BinarySearchFunc(vs, d.Version(), func(x Workflow, v uint64) int { return cmp.Compare(x.Version(), v) })
		if dup {
			return nil, errorf("register", ErrInvalid, "", detail(fmt.Sprintf("workflow %s version %d registered twice", d.Name(), d.Version())))
		}
		w.byName[d.Name()] = slices.Insert(vs, i, d)
		if !known {
			w.names = append(w.names, d.Name())
		}
	}
	slices.Sort(w.names)
	return w, nil
}

// Lookup returns the newest version registered under name: what a start
// by name runs unless it asks for a version (WithVersion).
func (w *Workflows) Lookup(name string) (Workflow, bool) {
	if w == nil {
		return nil, false
	}
	vs := w.byName[name]
	if len(vs) == 0 {
		return nil, false
	}
	return vs[len(vs)-1], true
}

// LookupVersion returns version version of workflow name, if registered.
func (w *Workflows) LookupVersion(name string, version uint64) (Workflow, bool) {
	if w == nil {
		return nil, false
	}
	vs := w.byName[name]
	i, ok := slices.BinarySearchFunc(vs, version, func(x Workflow, v uint64) int { return cmp.Compare(x.Version(), v) })
	if !ok {
		return nil, false
	}
	return vs[i], true
}

// Versions returns the versions registered under name, ascending.
func (w *Workflows) Versions(name string) []uint64 {
	if w == nil {
		return nil
	}
	vs := w.byName[name]
	out := make([]uint64, len(vs))
	for i, d := range vs {
		out[i] = d.Version()
	}
	return out
}

// Names returns the registered names, sorted.
func (w *Workflows) Names() []string {
	if w == nil {
		return nil
	}
	return slices.Clone(w.names)
}

// Capability is the capability string a worker carrying version version
// of workflow name advertises ("workflow:<name>@<version>"): starts judge
// from the live workers' advertised capabilities whether some node can run
// a run of that version (ErrVersionNotCarried).
func Capability(name string, version uint64) string {
	return "workflow:" + name + "@" + strconv.FormatUint(version, 10)
}

// RunsCapability is the role capability of a worker that runs workflow
// runs (the plane's host role, "role:host"). A worker that advertises roles
// without it (an API-only process) carries no version for a start's
// judgement, whatever workflows its binary registers; one that advertises
// no role at all is judged by its workflow capabilities alone.
const RunsCapability = "role:host"

// rolePrefix starts every role capability.
const rolePrefix = "role:"

// runsVersion reports whether the worker info describes runs the runs of
// the workflow version whose capability is capability.
func runsVersion(info store.WorkerInfo, capability string) bool {
	if !store.HasCapability(info, capability) {
		return false
	}
	hasRoles := slices.ContainsFunc(info.Capabilities, func(c string) bool { return strings.HasPrefix(c, rolePrefix) })
	return !hasRoles || store.HasCapability(info, RunsCapability)
}

// Capabilities returns the capability of every registered version,
// sorted.
func (w *Workflows) Capabilities() []string {
	var out []string
	for _, name := range w.Names() {
		for _, v := range w.Versions(name) {
			out = append(out, Capability(name, v))
		}
	}
	slices.Sort(out)
	return out
}

// ---- step options ----

// RetryPolicy says how often a failing step is run again and how long the
// run waits in between. The delay after the n-th failure is
// min(Max, Base·2^(n-1)), shortened by up to Jitter of itself by a fraction
// drawn from a hash of the run id, the step id and n: the same run retries
// at the same offsets on every worker, and runs started together do not
// retry in step. The wait is journaled (StepFailed records when the next
// attempt is due), so a run taken over during it keeps its schedule.
type RetryPolicy struct {
	// MaxAttempts is how many attempts may fail before the step fails for
	// good (default 1: no retry). An attempt cut short by a crash of its
	// worker is not a failure: it is simply run again.
	MaxAttempts int
	Base        time.Duration // default 1s
	Max         time.Duration // default 1m
	Jitter      float64       // 0 … 1
}

func (p RetryPolicy) norm() RetryPolicy {
	if p.MaxAttempts < 1 {
		p.MaxAttempts = 1
	}
	if p.Base <= 0 {
		p.Base = time.Second
	}
	if p.Max <= 0 {
		p.Max = time.Minute
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	p.Jitter = min(max(p.Jitter, 0), 1)
	return p
}

// Delay returns the wait after the failures-th failure of step stepID of
// run runID under p (see RetryPolicy).
func (p RetryPolicy) Delay(runID, stepID string, failures uint64) time.Duration {
	p = p.norm()
	d := p.Max
	if failures >= 1 && failures <= 62 {
		if b := p.Base << (failures - 1); b > 0 && b>>(failures-1) == p.Base && b < p.Max {
			d = b
		}
	}
	if p.Jitter > 0 {
		h := sha256.New()
		_, _ = h.Write([]byte("orrery.workflow.jitter\x00" + runID + "\x00" + stepID + "\x00"))
		_ = binary.Write(h, binary.BigEndian, failures)
		sum := h.Sum(nil)
		u := float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53) // [0, 1)
		d -= time.Duration(float64(d) * p.Jitter * u)
	}
	return d
}

// StepOption qualifies one step.
type StepOption func(*stepOptions)

type stepOptions struct {
	retry   RetryPolicy
	timeout time.Duration
}

// WithRetry gives the step a retry policy.
func WithRetry(p RetryPolicy) StepOption { return func(o *stepOptions) { o.retry = p } }

// WithTimeout bounds each attempt of the step on the executor's clock: the
// function's context ends after d, and an attempt that has not succeeded
// by then fails with Timeout set (and is retried by the policy). For an
// effect it bounds the wait for the receipt, from a deadline journaled with
// the attempt. d <= 0 means no bound.
func WithTimeout(d time.Duration) StepOption { return func(o *stepOptions) { o.timeout = d } }

func applyOptions(opts []StepOption) stepOptions {
	var o stepOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	o.retry = o.retry.norm()
	return o
}
