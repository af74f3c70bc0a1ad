package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/supervisor"
)

// ---- seeds ----

// otpDefaultSeeds is how many seeds each OTP semantics test runs in CI.
const otpDefaultSeeds = 50

// otpSeedList returns the seeds to run: 1..n by default, only ORRERY_SEED if
// it is set (to replay one failure), or 1..ORRERY_SEEDS if that is set (to
// explore further).
func otpSeedList(t *testing.T, n int) []uint64 {
	t.Helper()
	if s := os.Getenv("ORRERY_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ORRERY_SEED=%q: %v", s, err)
		}
		return []uint64{seed}
	}
	if s := os.Getenv("ORRERY_SEEDS"); s != "" {
		c, err := strconv.Atoi(s)
		if err != nil || c <= 0 {
			t.Fatalf("ORRERY_SEEDS=%q: want a positive count", s)
		}
		n = c
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// otpReplaying reports whether the seeds were narrowed to one by ORRERY_SEED
// (cross-seed assertions do not apply then).
func otpReplaying() bool { return os.Getenv("ORRERY_SEED") != "" }

// otpSeeds runs f once per seed (see otpSeedList), each seed as a subtest
// named seed=N, stopping after a few failing seeds so that one bug does not
// print fifty times.
func otpSeeds(t *testing.T, n int, f func(t *testing.T, seed uint64)) {
	t.Helper()
	failed := 0
	for _, seed := range otpSeedList(t, n) {
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { f(t, seed) }) {
			failed++
		}
		if failed >= 3 {
			t.Errorf("stopping after %d failing seeds", failed)
			return
		}
	}
}

// otpTestName is the top-level test's name (the -run pattern of a replay).
func otpTestName(t *testing.T) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return name
}

// otpRun runs sc under seed and fails t, with the replay hint, if the run
// failed (the scenario's own assertions, an oracle, a deadlock...).
func otpRun(t *testing.T, seed uint64, sc Scenario) *Result {
	t.Helper()
	res := Run(Config{Seed: seed, Name: otpTestName(t)}, sc)
	if res.Failure != nil {
		t.Errorf("seed %d: %v\n\treplay: ORRERY_SEED=%d go test ./lab -run '^%s$'", seed, res.Failure, seed, otpTestName(t))
	}
	return res
}

// otpDeterministic runs sc twice under seed and fails t unless both runs
// leave the same trace fingerprint. It returns the second run.
func otpDeterministic(t *testing.T, seed uint64, sc Scenario) *Result {
	t.Helper()
	a := otpRun(t, seed, sc)
	b := Run(Config{Seed: seed, Name: otpTestName(t)}, sc)
	if a.Fingerprint != b.Fingerprint {
		t.Errorf("seed %d: same seed, different fingerprints %s and %s (%d vs %d events)\n\treplay: ORRERY_SEED=%d go test ./lab -run '^%s$'",
			seed, a.Fingerprint[:12], b.Fingerprint[:12], len(a.Events), len(b.Events), seed, otpTestName(t))
		for i := range min(len(a.Events), len(b.Events)) {
			if a.Events[i] != b.Events[i] {
				t.Errorf("seed %d: the traces diverge at event %d: %v | %v", seed, i, a.Events[i], b.Events[i])
				break
			}
		}
	}
	return b
}

// otpBoth runs one scenario under both executors (issue 8 item 15: one
// table of scenarios instead of an actor test and its lab restatement):
// under the lab over the default seeds, with its oracles and a replay check
// (otpCheck), and once under the production executor in a testing/synctest
// bubble, with the race detector watching when it is on. A scenario run
// this way blocks only through the seam (env.Executor(), calls, Wait) and
// locks what its processes share.
func otpBoth(t *testing.T, sc Scenario) {
	t.Helper()
	t.Run("lab", func(t *testing.T) {
		t.Helper()
		otpCheck(t, sc)
	})
	t.Run("production", func(t *testing.T) {
		t.Helper()
		otpProduction(t, sc)
	})
}

// otpBothWith is otpBoth with a check of each lab run's result (its trace,
// or what the scenario left in variables of the test), as otpCheckWith.
func otpBothWith(t *testing.T, sc Scenario, after func(t *testing.T, seed uint64, res *Result)) {
	t.Helper()
	t.Run("lab", func(t *testing.T) {
		t.Helper()
		otpCheckWith(t, sc, after)
	})
	t.Run("production", func(t *testing.T) {
		t.Helper()
		otpProduction(t, sc)
	})
}

// otpBothReplaying is otpBoth with the lab's replay check on the first
// replays seeds instead of only the first one.
func otpBothReplaying(t *testing.T, sc Scenario, replays int) {
	t.Helper()
	t.Run("lab", func(t *testing.T) {
		t.Helper()
		otpCheckReplaying(t, sc, nil, replays)
	})
	t.Run("production", func(t *testing.T) {
		t.Helper()
		otpProduction(t, sc)
	})
}

// otpBothTraced is otpBoth with a check of each run's trace, under both
// executors: after every lab run (its canonical trace), and after the
// production run, whose events a tracer records as they are emitted (the
// production executor gives them no canonical order across processes).
func otpBothTraced(t *testing.T, sc Scenario, after func(t *testing.T, events []Event)) {
	t.Helper()
	t.Run("lab", func(t *testing.T) {
		t.Helper()
		otpCheckWith(t, sc, func(t *testing.T, _ uint64, res *Result) { after(t, res.Events) })
	})
	t.Run("production", func(t *testing.T) {
		t.Helper()
		otpProductionTraced(t, sc, after)
	})
}

// otpCount counts the events of kind k about pid (any pid if it is 0).
func otpCount(events []Event, k actor.TraceKind, pid actor.PID) int {
	n := 0
	for _, ev := range events {
		if ev.Kind == k.String() && (pid.IsZero() || ev.PID == pid.ID()) {
			n++
		}
	}
	return n
}

// otpProduction runs sc once on the production executor, in virtual time,
// and closes its system as the lab does, failing t on a scenario error, a
// panic, or a close that is not quiescent.
func otpProduction(t *testing.T, sc Scenario) {
	t.Helper()
	otpProductionTraced(t, sc, nil)
}

// otpProductionTraced is otpProduction with, if after is not nil, a tracer
// whose events after checks once the system is closed.
func otpProductionTraced(t *testing.T, sc Scenario, after func(t *testing.T, events []Event)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		opts := []actor.SystemOption{actor.WithExecutor(actor.NewExecutor(1))}
		var mu sync.Mutex
		var events []Event
		if after != nil {
			opts = append(opts, actor.WithTracer(func(te actor.TraceEvent) {
				mu.Lock()
				events = append(events, fromActor(te))
				mu.Unlock()
			}))
		}
		sys := actor.NewSystem(opts...)
		env := &Env{System: sys, Root: sys.Root(), Ctx: context.Background()}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("scenario panicked: %v", r)
				}
			}()
			if err := sc(env); err != nil {
				t.Errorf("production executor: %v", err)
			}
		}()
		ctx, cancel := actor.WithTimeout(context.Background(), sys.Executor(), time.Minute)
		defer cancel()
		if _, err := sys.Close(ctx); err != nil {
			t.Errorf("production executor: system close: %v", err)
		}
		if after != nil && !t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			after(t, events)
		}
	})
}

// otpCheck runs sc over the default seeds, and checks on the first one that
// the same seed replays to the same fingerprint.
func otpCheck(t *testing.T, sc Scenario) {
	t.Helper()
	otpCheckWith(t, sc, nil)
}

// otpCheckWith is otpCheck with a check of each run's result (its trace, or
// what the scenario left in variables of the test), run right after it.
func otpCheckWith(t *testing.T, sc Scenario, after func(t *testing.T, seed uint64, res *Result)) {
	t.Helper()
	otpCheckReplaying(t, sc, after, 1)
}

// otpCheckReplaying is otpCheckWith with the replay check on the first
// replays seeds instead of only the first one.
func otpCheckReplaying(t *testing.T, sc Scenario, after func(t *testing.T, seed uint64, res *Result), replays int) {
	t.Helper()
	n := 0
	otpSeeds(t, otpDefaultSeeds, func(t *testing.T, seed uint64) {
		t.Helper()
		var res *Result
		if n < replays {
			res = otpDeterministic(t, seed, sc)
		} else {
			res = otpRun(t, seed, sc)
		}
		n++
		if after != nil && !t.Failed() {
			after(t, seed, res)
		}
	})
}

// ---- assertions inside a scenario ----

// otpErrs collects violations found by any process of a run; the scenario
// returns them at its end. It is locked because the scenarios that run
// under both executors (otpBoth) run their processes in parallel under the
// production one.
type otpErrs struct {
	mu   sync.Mutex
	list []error
}

func (e *otpErrs) add(format string, args ...any) {
	e.mu.Lock()
	e.list = append(e.list, fmt.Errorf(format, args...))
	e.mu.Unlock()
}

func (e *otpErrs) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.list...)
}

// otpWait waits for pid's outcome.
func otpWait(env *Env, pid actor.PID) (actor.Outcome, error) {
	return pid.Wait(env.Ctx)
}

// otpSleep sleeps d of virtual time.
func otpSleep(env *Env, d time.Duration) error {
	return actor.Sleep(env.Ctx, env.Executor(), d)
}

// otpPick draws a number in [0, n) from the run's seeded user stream.
func otpPick(env *Env, n int) int { return int(env.Executor().Uint64() % uint64(n)) }

// ---- a GenServer whose requests are closures ----

// otpCall is a call request: it runs on the server and returns the reply.
type otpCall = func(p *actor.Proc, from actor.ReplyTo[int]) (int, error)

// otpCast is a cast message: it runs on the server.
type otpCast = func(p *actor.Proc) error

type otpRef = actor.ServerRef[otpCall, int, otpCast]

// otpServer runs its requests; its hooks are optional closures.
type otpServer struct {
	init func(p *actor.Proc) error
	info func(p *actor.Proc, info any) error
	term func(p *actor.Proc, o actor.Outcome)
}

func (s *otpServer) Init(p *actor.Proc) error {
	if s.init != nil {
		return s.init(p)
	}
	return nil
}

func (s *otpServer) HandleCall(p *actor.Proc, q otpCall, from actor.ReplyTo[int]) (int, error) {
	return q(p, from)
}

func (s *otpServer) HandleCast(p *actor.Proc, c otpCast) error { return c(p) }

func (s *otpServer) HandleInfo(p *actor.Proc, info any) error {
	if s.info != nil {
		return s.info(p, info)
	}
	return nil
}

func (s *otpServer) Terminate(p *actor.Proc, o actor.Outcome) {
	if s.term != nil {
		s.term(p, o)
	}
}

func otpStart(ctx context.Context, scope *actor.Scope, s *otpServer, opts ...actor.Option) (*otpRef, error) {
	return actor.StartServer[otpCall, int, otpCast](ctx, scope, s, opts...)
}

// otpRefOf returns the server handle of pid (a child a supervisor started).
func otpRefOf(pid actor.PID) *otpRef {
	r, _ := pid.Handle().(*otpRef)
	return r
}

// otpReply is a request answered by return.
func otpReply(v int) otpCall {
	return func(*actor.Proc, actor.ReplyTo[int]) (int, error) { return v, nil }
}

// otpFail is a cast that ends the server with Err(err).
func otpFail(err error) otpCast { return func(*actor.Proc) error { return err } }

// otpPanic is a cast that panics.
func otpPanic(v any) otpCast { return func(*actor.Proc) error { panic(v) } }

// otpExitOk is a cast that ends the server normally (Ok).
func otpExitOk(p *actor.Proc) error { p.Exit(nil); return nil }

// otpSleepCast is a cast that keeps the server busy for d of virtual time,
// deaf to cancellation (it sleeps on a context nobody cancels).
func otpSleepCast(d time.Duration) otpCast {
	return func(p *actor.Proc) error {
		return actor.Sleep(context.Background(), p.Executor(), d)
	}
}

// otpIs reports whether the outcome is cancelled with kind k.
func otpIsCancelled(o actor.Outcome, k actor.CancelKind) bool {
	return o.Severity == actor.Cancelled && o.Cancel.Kind == k
}

// otpJoin renders a list of strings for error messages.
func otpJoin(s []string) string { return "[" + strings.Join(s, " ") + "]" }

var (
	errOTPBoom  = errors.New("boom")
	errOTPStart = errors.New("cannot start")
	errOTPApp   = errors.New("application error")
)

// ---- supervised children ----

// otpKids builds supervisor children (otpServer instances) and records their
// life: "start id" when an instance's Init runs, "stop id" when its
// Terminate does, in the order things happen in the run.
type otpKids struct {
	env *Env
	// mu guards events, starts and refs: under the production executor
	// the supervisor, its children and the scenario touch them in
	// parallel. Scenarios read them through ref, started and take.
	mu     sync.Mutex
	events []string
	starts map[string]int
	refs   map[string]*otpRef
	// stopJitter, if positive, makes each Terminate take a random time up to
	// it (drawn from the run's seed), to vary the schedule.
	stopJitter time.Duration
}

func newOTPKids(env *Env) *otpKids {
	return &otpKids{env: env, starts: map[string]int{}, refs: map[string]*otpRef{}}
}

// spec is a worker child id with restart type r; init, if given, runs in
// each instance's Init after the start is recorded.
func (k *otpKids) spec(id string, r supervisor.RestartType, init ...func(p *actor.Proc) error) supervisor.ChildSpec {
	return supervisor.ChildSpec{ID: id, Restart: r, Start: func(ctx context.Context, scope *actor.Scope) (actor.PID, error) {
		k.mu.Lock()
		k.starts[id]++
		k.mu.Unlock()
		ref, err := otpStart(ctx, scope, &otpServer{
			init: func(p *actor.Proc) error {
				k.record("start " + id)
				for _, f := range init {
					if err := f(p); err != nil {
						return err
					}
				}
				return nil
			},
			term: func(p *actor.Proc, _ actor.Outcome) {
				if k.stopJitter > 0 {
					d := time.Duration(k.env.Executor().Uint64() % uint64(k.stopJitter))
					_ = actor.Sleep(p.Ctx(), p.Executor(), d)
				}
				k.record("stop " + id)
			},
		}, actor.WithName(id))
		if err != nil {
			return actor.PID{}, err
		}
		k.mu.Lock()
		k.refs[id] = ref
		k.mu.Unlock()
		return ref.PID(), nil
	}}
}

func (k *otpKids) record(ev string) {
	k.mu.Lock()
	k.events = append(k.events, ev)
	k.mu.Unlock()
}

// take returns the events recorded so far and forgets them.
func (k *otpKids) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ev := k.events
	k.events = nil
	return ev
}

// ref returns the latest instance of child id (nil if it never started).
func (k *otpKids) ref(id string) *otpRef {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refs[id]
}

// started returns how many times child id's Start ran.
func (k *otpKids) started(id string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts[id]
}

// end makes the current instance of id run c (a failure, an exit...) and
// waits for that instance to complete; it returns the instance's outcome.
func (k *otpKids) end(id string, c otpCast) (actor.PID, actor.Outcome, error) {
	ref := k.ref(id)
	if ref == nil {
		return actor.PID{}, actor.Outcome{}, fmt.Errorf("child %s never started", id)
	}
	if err := ref.Cast(k.env.Ctx, c); err != nil {
		return ref.PID(), actor.Outcome{}, fmt.Errorf("cast to %s: %w", id, err)
	}
	o, err := ref.PID().Wait(k.env.Ctx)
	return ref.PID(), o, err
}

// otpStatuses renders WhichChildren as "id:status ...".
func otpStatuses(children []supervisor.ChildInfo) string {
	var s []string
	for _, c := range children {
		s = append(s, c.ID+":"+c.Status.String())
	}
	return strings.Join(s, " ")
}

// otpLog records a supervisor's log entries (its OnLog); it is locked
// because the supervisor writes it while the scenario reads it.
type otpLog struct {
	mu      sync.Mutex
	entries []supervisor.LogEntry
}

func (l *otpLog) add(e supervisor.LogEntry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// take returns the entries logged so far and forgets them.
func (l *otpLog) take() []supervisor.LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries
	l.entries = nil
	return e
}

// otpDecisions renders log entries as "decision:child ...".
func otpDecisions(entries []supervisor.LogEntry) string {
	var s []string
	for _, e := range entries {
		s = append(s, e.Decision.String()+":"+e.ChildID)
	}
	return strings.Join(s, " ")
}

// otpFind returns the first entry with decision d about child id.
func otpFind(entries []supervisor.LogEntry, d supervisor.Decision, id string) (supervisor.LogEntry, bool) {
	for _, e := range entries {
		if e.Decision == d && e.ChildID == id {
			return e, true
		}
	}
	return supervisor.LogEntry{}, false
}
