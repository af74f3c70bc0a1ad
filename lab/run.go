package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/orrery-run/orrery/actor"
)

// Faults is the fault-injection option set of a run (BUGGIFY). Each field
// is a probability in [0, 1] drawn against the run's seeded fault stream.
type Faults struct {
	Crash        float64 // a handler panics before it runs
	MailboxFull  float64 // a TrySend/TryCast reports a full mailbox
	DelayWakeups float64 // a wake-up reaches its receiver 1–10 ms later
	Buggify      float64 // Executor.Buggify sites fire (store failures, crashes between store calls)
}

func (f Faults) String() string {
	return fmt.Sprintf("crash=%.3f mailbox-full=%.3f delay-wakeups=%.3f buggify=%.3f", f.Crash, f.MailboxFull, f.DelayWakeups, f.Buggify)
}

// IsZero reports whether no fault is enabled.
func (f Faults) IsZero() bool { return f == Faults{} }

// FaultsFromSeed draws a fault option set from seed: each kind is on or off,
// at one of a few probabilities. Explorers use it to vary faults by seed.
func FaultsFromSeed(seed uint64) Faults {
	r := splitmix{s: seed ^ 0x9e6c63d0676a9a99}
	pick := func() float64 {
		if r.next()%2 == 0 {
			return 0
		}
		return []float64{0.001, 0.01, 0.05}[r.intn(3)]
	}
	return Faults{Crash: pick(), MailboxFull: pick(), DelayWakeups: pick(), Buggify: pick()}
}

// Config describes one lab run.
type Config struct {
	Seed   uint64
	Faults Faults
	// MaxSteps bounds the turns of a run (default 1,000,000): a livelock
	// fails the run instead of hanging it.
	MaxSteps int
	// CloseTimeout bounds, in virtual time, the system close at the end of
	// the scenario (default 1 minute).
	CloseTimeout time.Duration
	// Name names the scenario in reports and crash packs.
	Name string
}

// Env is what a scenario gets: a System on the lab executor.
type Env struct {
	System *actor.System
	Lab    *Executor
	Root   *actor.Scope
	// Ctx is a background context for the scenario's calls.
	Ctx context.Context
}

// Executor returns the executor the scenario runs on: the lab's, or
// another one when a scenario written for the lab runs elsewhere (a test
// running it under the production executor too). Scenarios that go through
// it, rather than through Lab, run unchanged on both.
func (e *Env) Executor() actor.Executor { return e.System.Executor() }

// Event is one entry of a run's canonical trace. It holds no wall-clock
// value and no address: process ids are the actor layer's (assigned in
// spawn order), times are virtual.
type Event struct {
	At      time.Duration // virtual time since the run began
	Kind    string
	PID     uint64
	Peer    uint64
	Seq     uint64
	Outcome string
	Detail  string
}

// String is the event's canonical encoding: the fingerprint hashes these
// lines, so equal traces give equal fingerprints.
func (ev Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", ev.At.Nanoseconds(), ev.Kind)
	if ev.PID != 0 {
		fmt.Fprintf(&b, " pid=%d", ev.PID)
	}
	if ev.Peer != 0 {
		fmt.Fprintf(&b, " peer=%d", ev.Peer)
	}
	if ev.Seq != 0 {
		fmt.Fprintf(&b, " seq=%d", ev.Seq)
	}
	if ev.Outcome != "" {
		fmt.Fprintf(&b, " outcome=%s", ev.Outcome)
	}
	if ev.Detail != "" {
		fmt.Fprintf(&b, " %q", ev.Detail)
	}
	return b.String()
}

// Fingerprint is the SHA-256 of the canonical encoding of events.
func Fingerprint(events []Event) string {
	h := sha256.New()
	for _, ev := range events {
		h.Write([]byte(ev.String()))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Failure says why a run failed: which oracle (or "scenario" for the
// scenario's own error or panic, "deadlock", "step-budget"), and where.
type Failure struct {
	Oracle  string
	Message string
	// Event is the index in the trace at which the failure was detected, or
	// -1 when it was detected at the end of the run.
	Event int
	// Stack is the goroutine stack of a scenario panic. It is kept out of
	// Message because it names goroutines, which differ from run to run.
	Stack string
}

func (f *Failure) Error() string {
	if f.Event >= 0 {
		return fmt.Sprintf("%s: %s (at event %d)", f.Oracle, f.Message, f.Event)
	}
	return fmt.Sprintf("%s: %s", f.Oracle, f.Message)
}

// Result is what a run produced.
type Result struct {
	Config      Config
	Events      []Event
	Fingerprint string
	Steps       int
	VirtualTime time.Duration
	// Outcome is the aggregate outcome of the system's close.
	Outcome actor.Outcome
	// Failure is nil when the run passed.
	Failure *Failure
}

// SupervisionLog returns the supervision decisions of the run, in order.
func (r *Result) SupervisionLog() []Event {
	var out []Event
	for _, ev := range r.Events {
		if ev.Kind == actor.TraceSupervision.String() {
			out = append(out, ev)
		}
	}
	return out
}

// Scenario is the code a lab run executes, as the run's first process.
type Scenario func(env *Env) error

// Run executes scenario deterministically under cfg.Seed: the scenario runs
// as the first lab thread, then the system is closed inside the lab, then
// the oracles check the trace. The same seed gives the same trace, byte for
// byte.
func Run(cfg Config, scenario Scenario) *Result {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 1_000_000
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = time.Minute
	}
	res := &Result{Config: cfg}
	var ex *Executor
	record := func(ev Event) { res.Events = append(res.Events, ev) }
	ex = newExecutor(cfg.Seed, cfg.Faults, record)
	tracer := func(te actor.TraceEvent) {
		// The actor layer calls this synchronously from the running thread
		// (or a timer callback on the scheduler), so events arrive in the
		// order things happen.
		ev := fromActor(te)
		ev.At = ex.Elapsed()
		res.Events = append(res.Events, ev)
	}
	sys := actor.NewSystem(actor.WithExecutor(ex), actor.WithTracer(tracer))
	env := &Env{System: sys, Lab: ex, Root: sys.Root(), Ctx: context.Background()}

	var (
		scenErr   error
		scenStack string
		closeErr  error
		finished  bool
	)
	ex.Go(func() {
		func() {
			defer func() {
				if r := recover(); r != nil {
					scenErr = fmt.Errorf("scenario panicked: %v", r)
					scenStack = string(debug.Stack())
				}
			}()
			scenErr = scenario(env)
		}()
		// The system closes inside the lab, so shutdown is scheduled (and
		// checked) like everything else.
		ctx, cancel := actor.WithTimeout(context.Background(), ex, cfg.CloseTimeout)
		res.Outcome, closeErr = sys.Close(ctx)
		cancel()
		finished = true
	})
	completed := ex.run(cfg.MaxSteps)
	res.Steps = ex.Steps()
	res.VirtualTime = ex.Elapsed()

	switch {
	case !completed:
		res.Failure = &Failure{Oracle: "step-budget", Message: fmt.Sprintf("the run did not settle within %d turns (livelock?)", cfg.MaxSteps), Event: len(res.Events) - 1}
	case !finished:
		res.Failure = &Failure{Oracle: "deadlock", Message: fmt.Sprintf("every process is blocked and no timer is pending, but the scenario has not finished (parked threads with contexts: %v)", ex.parked()), Event: len(res.Events) - 1}
	case scenErr != nil:
		res.Failure = &Failure{Oracle: "scenario", Message: scenErr.Error(), Event: len(res.Events) - 1, Stack: scenStack}
	case closeErr != nil:
		var nq *actor.NotQuiescentError
		if errors.As(closeErr, &nq) {
			res.Failure = &Failure{Oracle: "quiescence", Message: closeErr.Error(), Event: len(res.Events) - 1}
		} else {
			res.Failure = &Failure{Oracle: "scenario", Message: "system close: " + closeErr.Error(), Event: len(res.Events) - 1}
		}
	}
	if res.Failure == nil {
		res.Failure = CheckOracles(res.Events)
	}
	res.Fingerprint = Fingerprint(res.Events)
	return res
}

// fromActor converts an actor trace event to its canonical form.
func fromActor(te actor.TraceEvent) Event {
	return Event{
		Kind:    te.Kind.String(),
		PID:     te.PID.ID(),
		Peer:    te.Peer.ID(),
		Seq:     te.Seq,
		Outcome: canonicalOutcome(te.Outcome),
		Detail:  te.Detail,
	}
}

// canonicalOutcome renders an outcome without addresses or stacks.
func canonicalOutcome(o actor.Outcome) string {
	switch o.Severity {
	case actor.Ok:
		return ""
	case actor.Err:
		return "err(" + errString(o.Err) + ")"
	case actor.Cancelled:
		if o.Cancel.From.IsZero() {
			return "cancelled(" + o.Cancel.Kind.String() + ")"
		}
		return fmt.Sprintf("cancelled(%s from %d)", o.Cancel.Kind, o.Cancel.From.ID())
	default:
		if o.Panic != nil {
			return fmt.Sprintf("panicked(%v)", o.Panic.Value)
		}
		return "panicked(" + errString(o.Err) + ")"
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
