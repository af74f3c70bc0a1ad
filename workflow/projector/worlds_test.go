package projector_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orrery-run/orrery/event"
	"github.com/orrery-run/orrery/store"
	"github.com/orrery-run/orrery/store/memstore"
	"github.com/orrery-run/orrery/vocab"
	"github.com/orrery-run/orrery/workflow/projector"
	"github.com/orrery-run/orrery/world"
)

type (
	tally   struct{ N int }
	add     struct{ N int }
	refuse  struct{}
	explode struct{}
	stray   struct{} // no handler
)

func tallyDef() *world.Def[tally] {
	d := world.New[tally]("tally", 1)
	world.On(d, func(_ *world.Ctx, s *tally, a add) error { s.N += a.N; return nil })
	world.On(d, func(*world.Ctx, *tally, refuse) error { return errors.New("refused") })
	world.On(d, func(*world.Ctx, *tally, explode) error { panic("boom") })
	return d
}

// stepWorld creates world id in universe, steps it through inputs with
// the kernel and journals each step record as the plane would (fenced by
// the world's lease), the store's clock moving a second per append. It
// returns the stored records.
func stepWorld(t *testing.T, st *memstore.Store, clock *memstore.ManualClock, universe, id string, inputs ...any) []store.Record {
	t.Helper()
	if _, err := st.CreateWorld(bg, universe, id, nil); err != nil {
		t.Fatal(err)
	}
	lease, err := st.Acquire(bg, id, "worker-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w, err := world.Load(tallyDef(), id, world.Snapshot{})
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		payload, err := world.EncodeEvent(in)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		res, err := w.Step(world.Input{Seq: uint64(i + 1), Kind: vocab.KindEvent, Payload: payload, EnqueuedAt: clock.Now()}, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(bg, id, []store.Record{res.Record}, store.AppendOptions{Fence: &store.Fence{World: id, Epoch: lease.Epoch}}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := st.Read(bg, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestWorldsListsHeadLastStepAndOutcomes: the worlds list, projected from
// real kernel step records of the worlds UniverseStreams lists, says each
// world's head, the persistedAt of its last step, and its steps by
// outcome; a world without steps is not listed.
func TestWorldsListsHeadLastStepAndOutcomes(t *testing.T) {
	clock := memstore.NewManualClock(t0)
	st := memstore.New(memstore.WithClock(clock.Now))
	b := stepWorld(t, st, clock, "tally", "b", add{1}, refuse{}, stray{}, add{2}, explode{})
	a := stepWorld(t, st, clock, "tally", "a", add{5})
	c := stepWorld(t, st, clock, "other", "c", stray{}, stray{})
	stepWorld(t, st, clock, "tally", "empty")
	appendFree(t, st, "run-1", spec{typ: event.RunStarted, attempt: 1}) // not a world: never listed

	worlds := projector.NewWorlds()
	r := newRunner(t, projector.RunnerConfig{Store: st, Streams: projector.UniverseStreams(st, "tally", "other", "tally"),
		Projectors: []projector.Projector{worlds}})
	catchUp(t, r)
	last := func(recs []store.Record) (uint64, time.Time) {
		l := recs[len(recs)-1]
		return l.RunSeq, l.PersistedAt
	}
	row := func(id string, recs []store.Record, o projector.Outcomes) projector.World {
		h, at := last(recs)
		return projector.World{ID: id, Head: h, LastStepAt: at, Steps: uint64(len(recs)), Outcomes: o}
	}
	want := []projector.World{
		row("a", a, projector.Outcomes{OK: 1}),
		row("b", b, projector.Outcomes{OK: 2, Error: 1, UnknownInput: 1, Panic: 1}),
		row("c", c, projector.Outcomes{UnknownInput: 2}),
	}
	if got := worlds.List(); !slices.Equal(got, want) {
		t.Fatalf("worlds:\n got %+v\nwant %+v", got, want)
	}
	if got, ok := worlds.Get("b"); !ok || got != want[1] {
		t.Fatalf("Get(b) = %+v, %v", got, ok)
	}
	if _, ok := worlds.Get("empty"); ok {
		t.Fatal("a world without steps is listed")
	}
}

// TestWorldsCountsUnreadableAndUnknownOutcomes: a WorldStepped record whose
// payload is not a step record, or whose outcome this version does not
// know, still counts as a step, and moves the head.
func TestWorldsCountsUnreadableAndUnknownOutcomes(t *testing.T) {
	w := projector.NewWorlds()
	future, err := event.Marshal(map[string]any{"v": 1, "outcome": "postponed"})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := event.Marshal(map[string]any{"v": 2, "outcome": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range [][]byte{{0xff}, future, v2, nil} {
		e := event.Envelope{StreamID: "w", RunSeq: uint64(i + 1), EventType: world.EventWorldStepped, StepID: "inbox/1",
			LogicalAttemptID: uint64(i + 1), PersistedAt: t0.Add(time.Duration(i) * time.Second), Payload: p}
		if err := w.Apply(bg, "w", e); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := w.Get("w")
	want := projector.World{ID: "w", Head: 4, LastStepAt: t0.Add(3 * time.Second), Steps: 4,
		Outcomes: projector.Outcomes{Unreadable: 3, Other: 1}}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestUniverseStreamsListsWorldsOfEveryStatus: the worlds of the named
// universes, archived and paused ones included, sorted, each once.
func TestUniverseStreamsListsWorldsOfEveryStatus(t *testing.T) {
	st := memstore.New()
	for _, w := range []struct{ u, id string }{{"sys.run/checkout", "r2"}, {"sys.run/refund", "r1"}, {"sys.run/checkout", "r3"}, {"bank", "acct"}} {
		if _, err := st.CreateWorld(bg, w.u, w.id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SetWorldStatus(bg, "r3", store.WorldArchived, "done"); err != nil {
		t.Fatal(err)
	}
	got, err := projector.UniverseStreams(st, "sys.run/refund", "sys.run/checkout", "sys.run/refund", "none")(bg)
	if err != nil || !slices.Equal(got, []string{"r1", "r2", "r3"}) {
		t.Fatalf("streams %v, %v", got, err)
	}
	if _, err := projector.UniverseStreams(st, "bank")(cancelled()); err == nil {
		t.Fatal("a cancelled listing succeeded")
	}
}
