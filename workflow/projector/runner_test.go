package projector_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orrery-run/orrery/actor"
	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/workflow/projector"
)

// counter is a durable projector as a test sees one: its state (how many
// times each event was applied) outlives any runner, as a table would.
type counter struct {
	name string
	mu   sync.Mutex
	n    map[string]map[uint64]int // stream → runSeq → applies
	// fail, when set, is asked before each apply; its error fails it.
	fail func(stream string, e event.Envelope) error
}

func newCounter(name string) *counter { return &counter{name: name, n: map[string]map[uint64]int{}} }

func (c *counter) Name() string { return c.name }

func (c *counter) Apply(_ context.Context, stream string, e event.Envelope) error {
	if c.fail != nil {
		if err := c.fail(stream, e); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[stream] == nil {
		c.n[stream] = map[uint64]int{}
	}
	c.n[stream][e.RunSeq]++
	return nil
}

func (c *counter) count(stream string, seq uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[stream][seq]
}

// checkOnce fails unless every event of every stream (runSeq 1…head) was
// applied exactly once.
func (c *counter) checkOnce(t *testing.T, heads map[string]uint64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, head := range heads {
		for seq := uint64(1); seq <= head; seq++ {
			if n := c.n[s][seq]; n != 1 {
				t.Errorf("%s@%d applied %d times, want once", s, seq, n)
			}
		}
		if len(c.n[s]) != int(head) {
			t.Errorf("%s: %d distinct events applied, want %d", s, len(c.n[s]), head)
		}
	}
}

func newRunner(t *testing.T, cfg projector.RunnerConfig) *projector.Runner {
	t.Helper()
	if cfg.Executor == nil {
		cfg.Executor = actor.NewExecutor(1)
	}
	r, err := projector.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func catchUp(t *testing.T, r *projector.Runner) {
	t.Helper()
	if err := r.CatchUp(bg); err != nil {
		t.Fatalf("CatchUp: %v", err)
	}
}

func heads(t *testing.T, st store.Journal, streams ...string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, s := range streams {
		h, err := st.Head(bg, s)
		if err != nil {
			t.Fatal(err)
		}
		out[s] = h
	}
	return out
}

// restartScenario: a runner catches up a durable projector (watermarks in
// the store) and the in-memory runs list; a new runner on the same store,
// as after a restart, applies only what was appended since to the durable
// projector, and rebuilds its own runs list from the start.
func restartScenario(t *testing.T, st store.Store) {
	appendFree(t, st, "run-a", append([]spec{{typ: event.RunStarted, attempt: 1}}, steps(0, 2)...)...)
	appendFree(t, st, "run-b", spec{typ: event.RunQueued, attempt: 1})
	durable := newCounter("audit-count")
	streams := projector.Fixed("run-a", "run-b", "run-c")
	runs1 := projector.NewRuns()
	r1 := newRunner(t, projector.RunnerConfig{Store: st, Streams: streams, Projectors: []projector.Projector{durable, runs1}})
	catchUp(t, r1)
	durable.checkOnce(t, heads(t, st, "run-a", "run-b"))
	if got, _ := runs1.Get("run-a"); got.Status != projector.StatusRunning || got.Steps != 2 {
		t.Fatalf("run-a before the restart: %+v", got)
	}

	appendFree(t, st, "run-a", spec{typ: event.RunCompleted, attempt: 1})
	appendFree(t, st, "run-b", spec{typ: event.RunStarted, attempt: 1}, spec{typ: event.RunFailed, attempt: 1, err: "no stock"})
	appendFree(t, st, "run-c", spec{typ: event.RunStarted, attempt: 1})

	runs2 := projector.NewRuns()
	r2 := newRunner(t, projector.RunnerConfig{Store: st, Streams: streams, Projectors: []projector.Projector{durable, runs2}})
	catchUp(t, r2)
	catchUp(t, r2) // a second pass finds nothing new
	hs := heads(t, st, "run-a", "run-b", "run-c")
	durable.checkOnce(t, hs)
	for s, h := range hs {
		if w, err := st.GetWatermark(bg, "audit-count", s); err != nil || w != h {
			t.Fatalf("stored watermark of %s = %d, %v; want the head %d", s, w, err, h)
		}
		if w, err := st.GetWatermark(bg, "runs", s); err != nil || w != 0 {
			t.Fatalf("the in-memory runs list wrote a store watermark on %s: %d, %v", s, w, err)
		}
		if w, err := r2.Watermark(bg, "runs", s); err != nil || w != h {
			t.Fatalf("runner's in-memory watermark of runs on %s = %d, %v; want %d", s, w, err, h)
		}
	}
	got := runs2.List()
	want := []struct {
		id     string
		status projector.RunStatus
		steps  int
		err    string
	}{{"run-a", projector.StatusCompleted, 2, ""}, {"run-b", projector.StatusFailed, 0, "no stock"}, {"run-c", projector.StatusRunning, 0, ""}}
	if len(got) != len(want) {
		t.Fatalf("runs after the restart: %+v", got)
	}
	for i, w := range want {
		if g := got[i]; g.ID != w.id || g.Status != w.status || g.Steps != w.steps || g.LastError != w.err {
			t.Fatalf("run %d after the restart: %+v, want %+v", i, g, w)
		}
	}
}

// TestRestartAppliesNothingTwiceAndCatchesUp on memstore (SQLite and
// PostgreSQL in backends_test.go).
func TestRestartAppliesNothingTwiceAndCatchesUp(t *testing.T) {
	restartScenario(t, memstore.New())
}

// raceStore makes the first GetWatermark of each of two runners return
// only once both have read, so both start from the same watermark and race
// for its first event; it counts the CAS conflicts.
type raceStore struct {
	store.Store
	arrived   atomic.Int32
	both      chan struct{}
	conflicts atomic.Int32
}

func newRaceStore(st store.Store) *raceStore { return &raceStore{Store: st, both: make(chan struct{})} }

func (s *raceStore) GetWatermark(ctx context.Context, projector, stream string) (uint64, error) {
	w, err := s.Store.GetWatermark(ctx, projector, stream)
	if n := s.arrived.Add(1); n == 2 {
		close(s.both)
	} else if n == 1 {
		select {
		case <-s.both:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return w, err
}

func (s *raceStore) CASWatermark(ctx context.Context, projector, stream string, old, next uint64) error {
	err := s.Store.CASWatermark(ctx, projector, stream, old, next)
	if errors.Is(err, store.ErrWatermarkConflict) {
		s.conflicts.Add(1)
	}
	return err
}

// twoRunners runs two runners of one durable projector on one stream at
// once, both starting from the same watermark, each catching up until it
// sees the head, and returns the projector and the stream's head.
func twoRunners(t *testing.T, st store.Store, d projector.Delivery) (*counter, *raceStore, uint64) {
	var specs []spec
	specs = append(specs, spec{typ: event.RunStarted, attempt: 1})
	specs = append(specs, steps(0, 20)...)
	appendFree(t, st, "run-race", specs...)
	head := uint64(len(specs))
	rs := newRaceStore(st)
	c := newCounter("race-count")
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		r := newRunner(t, projector.RunnerConfig{Store: rs, Streams: projector.Fixed("run-race"),
			Projectors: []projector.Projector{c}, Delivery: d, Batch: 4})
		wg.Go(func() {
			for {
				if err := r.CatchUp(bg); err != nil {
					errs <- err
					return
				}
				if w, err := r.Watermark(bg, "race-count", "run-race"); err != nil || w == head {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c, rs, head
}

func twoRunnersScenario(t *testing.T, st store.Store) {
	c, rs, head := twoRunners(t, st, projector.ClaimFirst)
	if rs.conflicts.Load() == 0 {
		t.Fatal("the runners never raced for a watermark: the test proves nothing")
	}
	c.checkOnce(t, map[string]uint64{"run-race": head})
}

// TestTwoRunnersApplyEachEventOnce: two runners of one durable projector,
// started from the same watermark, race for every event; each event is
// applied once in total, the loser of each CAS learning it and moving on.
func TestTwoRunnersApplyEachEventOnce(t *testing.T) {
	twoRunnersScenario(t, memstore.New())
}

// TestApplyFirstRedeliversToRacingRunners is the same race under
// ApplyFirst: both runners apply the first event before one loses the
// CAS, so it is applied twice (the at-least-once the projector must
// absorb), and nothing is lost.
func TestApplyFirstRedeliversToRacingRunners(t *testing.T) {
	c, _, head := twoRunners(t, memstore.New(), projector.ApplyFirst)
	if n := c.count("run-race", 1); n != 2 {
		t.Fatalf("event 1 applied %d times under ApplyFirst, want 2 (both racers)", n)
	}
	for seq := uint64(1); seq <= head; seq++ {
		if c.count("run-race", seq) == 0 {
			t.Fatalf("event %d never applied", seq)
		}
	}
}

// failCAS is a memstore hook that fails the next CAS of a watermark, as
// a store that went away between the apply and the move would.
func failCAS(armed *atomic.Bool) func(op string) error {
	return func(op string) error {
		if op == "cas_watermark" && armed.CompareAndSwap(true, false) {
			return errors.New("store unreachable")
		}
		return nil
	}
}

// TestClaimFirstFailedClaimAppliesNothing: under ClaimFirst a failed CAS
// is a failed claim, so the event is not applied; the next pass applies
// it, once.
func TestClaimFirstFailedClaimAppliesNothing(t *testing.T) {
	var armed atomic.Bool
	st := memstore.New(memstore.WithHook(failCAS(&armed)))
	appendFree(t, st, "run-1", append([]spec{{typ: event.RunStarted, attempt: 1}}, steps(0, 1)...)...)
	c := newCounter("c")
	r := newRunner(t, projector.RunnerConfig{Store: st, Streams: projector.Fixed("run-1"), Projectors: []projector.Projector{c}})
	armed.Store(true)
	if err := r.CatchUp(bg); err == nil {
		t.Fatal("CatchUp hid the failed CAS")
	}
	if n := c.count("run-1", 1); n != 0 {
		t.Fatalf("event 1 applied %d times without its claim", n)
	}
	catchUp(t, r)
	c.checkOnce(t, heads(t, st, "run-1"))
}

// TestApplyFirstFailedMoveRedelivers: under ApplyFirst a CAS that fails
// after the apply leaves the watermark where it was, so the next pass
// applies the event again (and nothing is lost).
func TestApplyFirstFailedMoveRedelivers(t *testing.T) {
	var armed atomic.Bool
	st := memstore.New(memstore.WithHook(failCAS(&armed)))
	appendFree(t, st, "run-1", append([]spec{{typ: event.RunStarted, attempt: 1}}, steps(0, 1)...)...)
	c := newCounter("c")
	r := newRunner(t, projector.RunnerConfig{Store: st, Streams: projector.Fixed("run-1"),
		Projectors: []projector.Projector{c}, Delivery: projector.ApplyFirst})
	armed.Store(true)
	if err := r.CatchUp(bg); err == nil {
		t.Fatal("CatchUp hid the failed CAS")
	}
	catchUp(t, r)
	if n := c.count("run-1", 1); n != 2 {
		t.Fatalf("event 1 applied %d times, want 2 (once before the failed move, once after)", n)
	}
	for seq := uint64(2); seq <= 3; seq++ {
		if n := c.count("run-1", seq); n != 1 {
			t.Fatalf("event %d applied %d times, want once", seq, n)
		}
	}
}

// TestClaimFirstApplyErrorGivesTheClaimBack: an apply that fails (or
// panics) under ClaimFirst gives its claim back, so the event is applied
// at the next pass, once, and the error says which event and that it is
// not lost.
func TestClaimFirstApplyErrorGivesTheClaimBack(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panic=%v", panics), func(t *testing.T) {
			st := memstore.New()
			appendFree(t, st, "run-1", append([]spec{{typ: event.RunStarted, attempt: 1}}, steps(0, 2)...)...)
			c := newCounter("c")
			var failed atomic.Bool
			c.fail = func(_ string, e event.Envelope) error {
				if e.RunSeq == 3 && failed.CompareAndSwap(false, true) {
					if panics {
						panic("projector bug")
					}
					return errors.New("projection database down")
				}
				return nil
			}
			r := newRunner(t, projector.RunnerConfig{Store: st, Streams: projector.Fixed("run-1"), Projectors: []projector.Projector{c}})
			err := r.CatchUp(bg)
			var ae *projector.ApplyError
			if !errors.As(err, &ae) || !errors.Is(err, projector.ErrApply) || errors.Is(err, projector.ErrEventLost) ||
				ae.RunSeq != 3 || ae.Stream != "run-1" || ae.Projector != "c" || ae.Panicked != panics || ae.Lost {
				t.Fatalf("CatchUp: %v (%+v)", err, ae)
			}
			if w, _ := st.GetWatermark(bg, "c", "run-1"); w != 2 {
				t.Fatalf("watermark after the failed apply = %d, want 2 (the claim given back)", w)
			}
			catchUp(t, r)
			c.checkOnce(t, heads(t, st, "run-1"))
		})
	}
}

// TestClaimFirstApplyErrorAfterAnotherRunnerMovedIsLost: when the claim
// cannot be given back because another runner already moved past it, the
// event is lost for the projector, and the error says so.
func TestClaimFirstApplyErrorAfterAnotherRunnerMovedIsLost(t *testing.T) {
	st := memstore.New()
	appendFree(t, st, "run-1", append([]spec{{typ: event.RunStarted, attempt: 1}}, steps(0, 2)...)...)
	c := newCounter("c")
	c.fail = func(stream string, e event.Envelope) error {
		if e.RunSeq == 2 {
			// Another runner reads watermark 2 and moves on meanwhile.
			if err := st.CASWatermark(bg, "c", stream, 2, 3); err != nil {
				t.Errorf("the other runner's CAS: %v", err)
			}
			return errors.New("projection database down")
		}
		return nil
	}
	r := newRunner(t, projector.RunnerConfig{Store: st, Streams: projector.Fixed("run-1"), Projectors: []projector.Projector{c}})
	err := r.CatchUp(bg)
	var ae *projector.ApplyError
	if !errors.Is(err, projector.ErrEventLost) || !errors.As(err, &ae) || !ae.Lost || ae.RunSeq != 2 {
		t.Fatalf("CatchUp: %v, want ErrEventLost for event 2", err)
	}
	c.fail = nil
	catchUp(t, r)
	if c.count("run-1", 2) != 0 || c.count("run-1", 4) != 1 || c.count("run-1", 5) != 1 {
		t.Fatalf("after the loss: %v", c.n)
	}
}

// TestUnknownTypesAdvanceTheWatermark: events of types the contract does
// not define are delivered (a user projector may know them), skipped by
// the built-in projections, and move every watermark past them.
func TestUnknownTypesAdvanceTheWatermark(t *testing.T) {
	st := memstore.New()
	appendFree(t, st, "run-1", spec{typ: "RunAnnotated", attempt: 1}, spec{typ: "StepHeartbeat", step: "s", attempt: 1})
	appendFree(t, st, "run-2", spec{typ: event.RunStarted, attempt: 1}, spec{typ: "RunAnnotated", attempt: 1})
	c, runs, tl := newCounter("c"), projector.NewRuns(), projector.NewTimeline()
	r := newRunner(t, projector.RunnerConfig{Store: st, Streams: projector.Fixed("run-1", "run-2"),
		Projectors: []projector.Projector{c, runs, tl}})
	catchUp(t, r)
	hs := heads(t, st, "run-1", "run-2")
	c.checkOnce(t, hs)
	for _, name := range []string{"c", "runs", "timeline"} {
		for s, h := range hs {
			if w, err := r.Watermark(bg, name, s); err != nil || w != h {
				t.Fatalf("%s on %s: watermark %d, %v; want %d", name, s, w, err, h)
			}
		}
	}
	if got := runs.List(); len(got) != 1 || got[0].ID != "run-2" || got[0].Status != projector.StatusRunning {
		t.Fatalf("runs: %+v, want only run-2, running", got)
	}
	if got := tl.Runs(); !slices.Equal(got, []string{"run-2"}) {
		t.Fatalf("timelines: %v", got)
	}
}

// TestEveryProjectorGetsItsOwnPayload: a projector that scribbles on the
// payload it was handed does not change what the next one reads.
func TestEveryProjectorGetsItsOwnPayload(t *testing.T) {
	st := memstore.New()
	appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1}, spec{typ: event.RunFailed, attempt: 1, err: "boom"})
	vandal := projectorFunc{name: "vandal", apply: func(_ context.Context, _ string, e event.Envelope) error {
		clear(e.Payload)
		return nil
	}}
	runs := projector.NewRuns()
	r := newRunner(t, projector.RunnerConfig{Store: st, Streams: projector.Fixed("run-1"),
		Projectors: []projector.Projector{vandal, runs}})
	catchUp(t, r)
	if got, _ := runs.Get("run-1"); got.LastError != "boom" {
		t.Fatalf("runs read %q after another projector cleared its payload", got.LastError)
	}
}

type projectorFunc struct {
	name  string
	apply func(context.Context, string, event.Envelope) error
}

func (p projectorFunc) Name() string { return p.name }

func (p projectorFunc) Apply(ctx context.Context, s string, e event.Envelope) error {
	return p.apply(ctx, s, e)
}

// brokenStream fails every read of one stream.
type brokenStream struct {
	store.Store
	broken string
}

var errBroken = errors.New("stream unreadable")

func (s brokenStream) Read(ctx context.Context, stream string, after uint64, limit int) ([]store.Record, error) {
	if stream == s.broken {
		return nil, errBroken
	}
	return s.Store.Read(ctx, stream, after, limit)
}

// TestStreamErrorsDoNotStopOtherStreams: a stream the store cannot read
// fails its part of the pass only; the streams after it are projected.
func TestStreamErrorsDoNotStopOtherStreams(t *testing.T) {
	st := memstore.New()
	appendFree(t, st, "run-0", spec{typ: event.RunStarted, attempt: 1})
	appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1})
	runs := projector.NewRuns()
	r := newRunner(t, projector.RunnerConfig{Store: brokenStream{st, "run-0"}, Streams: projector.Fixed("run-1", "run-0"),
		Projectors: []projector.Projector{runs}})
	if err := r.CatchUp(bg); !errors.Is(err, errBroken) {
		t.Fatalf("CatchUp: %v, want the broken stream's error", err)
	}
	if got := runs.List(); len(got) != 1 || got[0].ID != "run-1" {
		t.Fatalf("runs: %+v, want run-1 only", got)
	}
}

func TestNewRunnerRejectsBadConfig(t *testing.T) {
	st := memstore.New()
	ok := projector.RunnerConfig{Store: st, Executor: actor.NewExecutor(1), Streams: projector.Fixed(), Projectors: []projector.Projector{projector.NewRuns()}}
	for name, mut := range map[string]func(*projector.RunnerConfig){
		"no store":         func(c *projector.RunnerConfig) { c.Store = nil },
		"no executor":      func(c *projector.RunnerConfig) { c.Executor = nil },
		"no streams":       func(c *projector.RunnerConfig) { c.Streams = nil },
		"no projectors":    func(c *projector.RunnerConfig) { c.Projectors = nil },
		"nil projector":    func(c *projector.RunnerConfig) { c.Projectors = []projector.Projector{nil} },
		"empty name":       func(c *projector.RunnerConfig) { c.Projectors = []projector.Projector{newCounter("")} },
		"duplicate names":  func(c *projector.RunnerConfig) { c.Projectors = append(c.Projectors, projector.NewRuns()) },
		"unknown delivery": func(c *projector.RunnerConfig) { c.Delivery = 7 },
		"batch too large":  func(c *projector.RunnerConfig) { c.Batch = store.MaxBatch + 1 },
		"negative batch":   func(c *projector.RunnerConfig) { c.Batch = -1 },
		"negative poll":    func(c *projector.RunnerConfig) { c.MinPoll = -1 },
		"max below min":    func(c *projector.RunnerConfig) { c.MinPoll, c.MaxPoll = 2e9, 1e9 },
		"name with NUL":    func(c *projector.RunnerConfig) { c.Projectors = []projector.Projector{newCounter("a\x00")} },
		"name of 257 bytes": func(c *projector.RunnerConfig) {
			c.Projectors = []projector.Projector{newCounter(string(make([]byte, 257)))}
		},
	} {
		cfg := ok
		mut(&cfg)
		if _, err := projector.NewRunner(cfg); !errors.Is(err, projector.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if _, err := projector.NewRunner(ok); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	r := newRunner(t, ok)
	if _, err := r.Watermark(bg, "nope", "run-1"); !errors.Is(err, projector.ErrUnknownProjector) {
		t.Fatalf("Watermark of an unknown projector: %v", err)
	}
}

// TestMemWatermarksKeepTheStoreContract: a watermark never set is 0, a
// CAS from a stale value is store.ErrWatermarkConflict and changes
// nothing, and pairs are independent; the zero value is ready.
func TestMemWatermarksKeepTheStoreContract(t *testing.T) {
	var w projector.MemWatermarks
	if v, err := w.GetWatermark(bg, "p", "s"); v != 0 || err != nil {
		t.Fatalf("unset watermark %d, %v", v, err)
	}
	if err := w.CASWatermark(bg, "p", "s", 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := w.CASWatermark(bg, "p", "s", 0, 7); !errors.Is(err, store.ErrWatermarkConflict) {
		t.Fatalf("stale CAS: %v", err)
	}
	if v, _ := w.GetWatermark(bg, "p", "s"); v != 5 {
		t.Fatalf("after a conflict: %d, want 5", v)
	}
	if v, _ := w.GetWatermark(bg, "p", "other"); v != 0 {
		t.Fatalf("another stream: %d", v)
	}
	if v, _ := w.GetWatermark(bg, "q", "s"); v != 0 {
		t.Fatalf("another projector: %d", v)
	}
	if _, err := w.GetWatermark(cancelled(), "p", "s"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Get: %v", err)
	}
	if err := w.CASWatermark(cancelled(), "p", "s", 5, 6); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled CAS: %v", err)
	}
}
