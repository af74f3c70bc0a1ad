package workflow

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
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

// Workflows is the set of definitions a worker runs and a client starts,
// one version per name.
type Workflows struct {
	byName map[string]Workflow
	names  []string // sorted: scans visit workflows in a stable order
	queues []Queue  // declared queues, by name (AddQueues)
}

// NewWorkflows registers defs: ErrInvalid for an invalid definition or a
// name given twice.
func NewWorkflows(defs ...Workflow) (*Workflows, error) {
	w := &Workflows{byName: map[string]Workflow{}}
	for _, d := range defs {
		if d == nil {
			return nil, errorf("register", ErrInvalid, "", detail("a nil workflow"))
		}
		if err := d.check(); err != nil {
			return nil, err
		}
		if _, dup := w.byName[d.Name()]; dup {
			return nil, errorf("register", ErrInvalid, "", detail("workflow "+d.Name()+" registered twice"))
		}
		w.byName[d.Name()] = d
		w.names = append(w.names, d.Name())
	}
	slices.Sort(w.names)
	return w, nil
}

// Lookup returns the definition registered under name.
func (w *Workflows) Lookup(name string) (Workflow, bool) {
	if w == nil {
		return nil, false
	}
	d, ok := w.byName[name]
	return d, ok
}

// Names returns the registered names, sorted.
func (w *Workflows) Names() []string {
	if w == nil {
		return nil
	}
	return slices.Clone(w.names)
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
